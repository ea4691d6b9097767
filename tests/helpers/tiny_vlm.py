"""Build a tiny, random-weight Qwen2-VL checkpoint on disk for tests.

Why this exists
---------------
The code under test loads vision-language models with the same calls users run
(``AutoProcessor.from_pretrained`` / ``AutoModelForImageTextToText.from_pretrained``,
``apply_chat_template``, batched ``processor(text=..., images=...)``, ``generate``
and next-token logits).  Tests should exercise exactly that path, but they must
not touch the Hugging Face Hub (CI has no network) and must stay fast.

``build_tiny_qwen2_vl`` therefore writes a complete, self-contained Qwen2-VL
folder that is built entirely locally:

* a byte-level BPE tokenizer trained from scratch with the ``tokenizers``
  library on a handful of sentences, using the same normalizer/pre-tokenizer/
  decoder pipeline as the real Qwen2 tokenizer (``Qwen2Tokenizer`` rebuilds its
  pipeline from vocab + merges when loading, so the two must match), plus the
  Qwen2-VL special tokens;
* a Jinja chat template that understands ``{"type": "image"}`` / ``{"type": "text"}``
  content parts and ``add_generation_prompt``;
* ``Qwen2VLImageProcessor`` / ``Qwen2VLVideoProcessor`` with tiny pixel budgets,
  so an image becomes at most a few vision tokens;
* a ``Qwen2VLForConditionalGeneration`` with ~120k random (float32)
  parameters whose config carries the tokenizer's special-token ids.

The weights are random, so generated text is gibberish; the point is that every
shape, id and file format matches what production code sees.  The folder is
well under 1 MB and loads + generates in well under a second on CPU.

torch / tokenizers / transformers are imported inside the functions so that the
caller (e.g. a conftest) can set ``HF_HUB_OFFLINE`` / ``HF_HOME`` before
huggingface_hub reads them at import time.
"""

from __future__ import annotations

import json
import pathlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # heavy imports happen lazily, see ``_self_check``
    from transformers import Qwen2Tokenizer, Qwen2VLConfig

__all__ = [
    "ANSWER_WORDS",
    "CHAT_TEMPLATE",
    "SPECIAL_TOKENS",
    "build_tiny_qwen2_vl",
]

# Special tokens in the order real Qwen2-VL assigns them (after the regular vocab).
SPECIAL_TOKENS: tuple[str, ...] = (
    "<|endoftext|>",
    "<|im_start|>",
    "<|im_end|>",
    "<|object_ref_start|>",
    "<|object_ref_end|>",
    "<|box_start|>",
    "<|box_end|>",
    "<|quad_start|>",
    "<|quad_end|>",
    "<|vision_start|>",
    "<|vision_end|>",
    "<|vision_pad|>",
    "<|image_pad|>",
    "<|video_pad|>",
)

# Candidate answers that scoring code reads from next-token logits: each must be a
# single token, both at the start of the assistant turn and after a space.
ANSWER_WORDS: tuple[str, ...] = ("Good", "Medium", "Bad", "yes", "no", "Yes", "No")

# Same pre-tokenization regex as transformers' Qwen2Tokenizer (digits are split one by one).
_QWEN2_PRETOKENIZE_REGEX = (
    r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"""
    r"""| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"""
)

_CORPUS: tuple[str, ...] = (
    "You are a helpful assistant.",
    "Rate this image on a scale from 1 to 10.",
    "Rate the quality of the picture. Answer with a number between 0 and 9.",
    "Is the image Good, Medium or Bad? Answer with one word.",
    "Good\nMedium\nBad\nyes\nno\nYes\nNo",
    "Say Good or Medium or Bad, then yes or no, or Yes or No.",
    "Answer yes or no. Does the picture show a cat or a dog?",
    "Describe the photo in one short sentence.",
    "The image is sharp, bright and well composed.",
    "The image is blurry, dark and noisy.",
    "Score: 7 out of 10. Quality: Medium. Aesthetic: Good. Verdict: Bad.",
    "Hello world! What do you see here? I see a red square and a blue circle.",
    "0 1 2 3 4 5 6 7 8 9",
)

# Qwen2-VL style chat template.  Content may be a plain string or a list of parts;
# image/video parts become <|vision_start|><|image_pad|><|vision_end|>, which the
# processor later expands to one <|image_pad|> per merged vision patch.
CHAT_TEMPLATE = (
    "{%- for message in messages -%}"
    "{%- if loop.first and message['role'] != 'system' -%}"
    "{{- '<|im_start|>system\\nYou are a helpful assistant.<|im_end|>\\n' -}}"
    "{%- endif -%}"
    "{{- '<|im_start|>' + message['role'] + '\\n' -}}"
    "{%- if message['content'] is string -%}"
    "{{- message['content'] -}}"
    "{%- else -%}"
    "{%- for part in message['content'] -%}"
    "{%- if part['type'] == 'image' or 'image' in part or 'image_url' in part -%}"
    "{{- '<|vision_start|><|image_pad|><|vision_end|>' -}}"
    "{%- elif part['type'] == 'video' or 'video' in part -%}"
    "{{- '<|vision_start|><|video_pad|><|vision_end|>' -}}"
    "{%- elif part['type'] == 'text' -%}"
    "{{- part['text'] -}}"
    "{%- endif -%}"
    "{%- endfor -%}"
    "{%- endif -%}"
    "{{- '<|im_end|>\\n' -}}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}"
    "{{- '<|im_start|>assistant\\n' -}}"
    "{%- endif -%}"
)

# Vision geometry (real Qwen2-VL values): 14px patches, 2 frames per temporal
# patch, 2x2 patches merged into one LLM token -> one token per 28x28 pixels.
_PATCH_SIZE = 14
_TEMPORAL_PATCH_SIZE = 2
_MERGE_SIZE = 2
_PIXELS_PER_TOKEN = (_PATCH_SIZE * _MERGE_SIZE) ** 2
# Resize every image to between 1 and 4 vision tokens.
_MIN_PIXELS = 1 * _PIXELS_PER_TOKEN
_MAX_PIXELS = 4 * _PIXELS_PER_TOKEN


def _train_tokenizer() -> Qwen2Tokenizer:
    """Train a byte-level BPE on the tiny corpus and wrap it as a ``Qwen2Tokenizer``.

    The special tokens get the ids right after the learned vocabulary, in the order of
    ``SPECIAL_TOKENS``, mirroring the layout of the real Qwen2 vocabulary.
    """
    from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers
    from transformers import Qwen2Tokenizer

    backend = Tokenizer(models.BPE())
    backend.normalizer = normalizers.NFC()
    backend.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(_QWEN2_PRETOKENIZE_REGEX), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    backend.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=1000,  # an upper bound: the tiny corpus runs out of merges first
        min_frequency=1,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    backend.train_from_iterator(_CORPUS, trainer=trainer)

    model_state = json.loads(backend.to_str())["model"]
    vocab: dict[str, int] = dict(model_state["vocab"])
    # The Rust BPE model only accepts merges as (left, right) tuples.
    merges: list[tuple[str, str]] = [
        (pair[0], pair[1]) if isinstance(pair, list) else tuple(pair.split(" ", 1))
        for pair in model_state["merges"]
    ]
    first_special_id = len(vocab)
    for offset, token in enumerate(SPECIAL_TOKENS):
        vocab[token] = first_special_id + offset

    # ``Qwen2Tokenizer`` rebuilds the same normalizer / pre-tokenizer / decoder from
    # vocab + merges (exactly what happens when it loads a real checkpoint) and
    # registers the special tokens as non-splittable added tokens.
    return Qwen2Tokenizer(
        vocab=vocab,
        merges=merges,  # type: ignore[arg-type]  # annotated list[str], but tuples are required
        unk_token=None,  # type: ignore[arg-type]  # like the real Qwen2-VL tokenizer_config
        bos_token=None,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        extra_special_tokens=[t for t in SPECIAL_TOKENS if t not in ("<|endoftext|>", "<|im_end|>")],
        padding_side="left",
        model_max_length=32768,
        chat_template=CHAT_TEMPLATE,
    )


def _check_tokenizer(tokenizer: Qwen2Tokenizer) -> None:
    """Fail early if the vocabulary lacks what scoring code relies on."""
    for token in SPECIAL_TOKENS:
        ids = tokenizer.encode(token, add_special_tokens=False)
        if len(ids) != 1:
            raise AssertionError(f"special token {token!r} is not atomic: {ids}")
    # Like real Qwen2, digits are always split one by one (so " 7" is "Ġ" + "7").
    texts = [*ANSWER_WORDS, *(" " + word for word in ANSWER_WORDS), *"0123456789"]
    for text in texts:
        ids = tokenizer.encode(text, add_special_tokens=False)
        if len(ids) != 1:
            raise AssertionError(f"{text!r} is not a single token: {tokenizer.convert_ids_to_tokens(ids)}")


def _special_token_ids(tokenizer: Qwen2Tokenizer) -> dict[str, int]:
    ids: dict[str, int] = {}
    for token in SPECIAL_TOKENS:
        token_id = tokenizer.convert_tokens_to_ids(token)
        assert isinstance(token_id, int)
        ids[token] = token_id
    return ids


# Qwen2-VL-2B-Instruct's published dimensions (its config.json), for throughput measurements with random weights.
_SHAPE_2B_TEXT: dict[str, Any] = {
    "hidden_size": 1536,
    "intermediate_size": 8960,
    "num_hidden_layers": 28,
    "num_attention_heads": 12,
    "num_key_value_heads": 2,
    "max_position_embeddings": 32768,
    "rope_parameters": {"rope_type": "default", "rope_theta": 1000000.0, "mrope_section": [16, 24, 24]},
    "initializer_range": 0.02,
}
_SHAPE_2B_VISION: dict[str, Any] = {
    "depth": 32,
    "embed_dim": 1280,
    "num_heads": 16,
    "mlp_ratio": 4,
    "hidden_size": 1536,
    "initializer_range": 0.02,
}
# Real Qwen2-VL pixel budget for judging: 512 px short side images become a few hundred vision tokens.
_SHAPE_2B_PIXELS = {"shortest_edge": 56 * 56, "longest_edge": 1024 * 1024}


def _build_model_config(tokenizer: Qwen2Tokenizer, shape: str = "tiny") -> Qwen2VLConfig:
    from transformers import Qwen2VLConfig

    ids = _special_token_ids(tokenizer)
    hidden_size = 32
    text_config: dict[str, Any] = {
        "vocab_size": len(tokenizer),
        "hidden_size": hidden_size,
        "intermediate_size": 64,
        "num_hidden_layers": 2,
        "num_attention_heads": 2,
        "num_key_value_heads": 1,
        "max_position_embeddings": 4096,
        # head_dim 16 -> 8 rotary frequencies, split over (temporal, height, width).
        # The default mrope_section [16, 24, 24] only fits head_dim 128.
        "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0, "mrope_section": [2, 3, 3]},
        # Larger than the usual 0.02 so the random model's outputs actually depend on
        # the prompt and the image (near-uniform logits would hide padding/batching bugs).
        "initializer_range": 0.2,
        "bos_token_id": ids["<|endoftext|>"],
        "eos_token_id": ids["<|im_end|>"],
        "pad_token_id": ids["<|endoftext|>"],
    }
    vision_config: dict[str, Any] = {
        "depth": 1,
        "embed_dim": 32,  # 2 heads of 16: the axial vision rope needs head_dim % 4 == 0
        "num_heads": 2,
        "mlp_ratio": 2,
        "hidden_size": hidden_size,  # output of the patch merger == LLM hidden size
        "patch_size": _PATCH_SIZE,
        "temporal_patch_size": _TEMPORAL_PATCH_SIZE,
        "spatial_merge_size": _MERGE_SIZE,
        "initializer_range": 0.2,
    }
    if shape == "2b":
        text_config.update(_SHAPE_2B_TEXT)
        vision_config.update(_SHAPE_2B_VISION)
    elif shape != "tiny":
        raise ValueError(f"unknown shape {shape!r}: 'tiny' or '2b'")
    return Qwen2VLConfig(
        text_config=text_config,
        vision_config=vision_config,
        image_token_id=ids["<|image_pad|>"],
        video_token_id=ids["<|video_pad|>"],
        vision_start_token_id=ids["<|vision_start|>"],
        vision_end_token_id=ids["<|vision_end|>"],
        tie_word_embeddings=False,
    )


def build_tiny_qwen2_vl(
    folder: str | pathlib.Path, seed: int = 0, *, shape: str = "tiny", device: str = "cpu", dtype: Any = None
) -> pathlib.Path:
    """Write a tiny random-weight Qwen2-VL model + processor into ``folder``.

    ``shape="2b"`` instead gives Qwen2-VL-2B's dimensions (about 2.2B random parameters, built on ``device`` and
    saved in ``dtype``) with a realistic pixel budget: for GPU throughput benchmarks, not for tests.

    The result loads with ``AutoProcessor.from_pretrained(folder)`` and
    ``AutoModelForImageTextToText.from_pretrained(folder)`` without network access.
    The output is byte-for-byte deterministic for a given ``seed`` (the seed only
    affects the weights).  Returns ``folder`` as a ``Path``.
    """
    import torch
    from transformers import (
        GenerationConfig,
        Qwen2VLForConditionalGeneration,
        Qwen2VLImageProcessor,
        Qwen2VLProcessor,
        Qwen2VLVideoProcessor,
    )

    folder = pathlib.Path(folder)
    folder.mkdir(parents=True, exist_ok=True)

    tokenizer = _train_tokenizer()
    _check_tokenizer(tokenizer)

    # For Qwen2-VL, "shortest_edge"/"longest_edge" are the min/max *pixel counts*.
    pixel_budget = {"shortest_edge": _MIN_PIXELS, "longest_edge": _MAX_PIXELS}
    if shape == "2b":
        pixel_budget = dict(_SHAPE_2B_PIXELS)
    image_processor = Qwen2VLImageProcessor(
        size=pixel_budget,
        patch_size=_PATCH_SIZE,
        temporal_patch_size=_TEMPORAL_PATCH_SIZE,
        merge_size=_MERGE_SIZE,
    )
    video_processor = Qwen2VLVideoProcessor(
        size=pixel_budget,
        patch_size=_PATCH_SIZE,
        temporal_patch_size=_TEMPORAL_PATCH_SIZE,
        merge_size=_MERGE_SIZE,
        cap_pixels_per_frame=True,  # the qwen-vl-utils behaviour; also silences a v5 warning
    )
    processor = Qwen2VLProcessor(
        image_processor=image_processor,
        tokenizer=tokenizer,
        video_processor=video_processor,
        chat_template=CHAT_TEMPLATE,
    )

    config = _build_model_config(tokenizer, shape)
    ids = _special_token_ids(tokenizer)
    generator_state = torch.random.get_rng_state()
    try:
        torch.manual_seed(seed)
        with torch.device(device):
            model = Qwen2VLForConditionalGeneration(config).eval()
        if dtype is not None:
            model = model.to(dtype)
    finally:
        torch.random.set_rng_state(generator_state)  # don't leak the seed into the caller
    model.generation_config = GenerationConfig(
        bos_token_id=ids["<|endoftext|>"],
        eos_token_id=[ids["<|im_end|>"], ids["<|endoftext|>"]],
        pad_token_id=ids["<|endoftext|>"],
        do_sample=False,
    )

    model.save_pretrained(folder)
    processor.save_pretrained(folder)
    return folder


def _folder_size(folder: pathlib.Path) -> int:
    return sum(path.stat().st_size for path in folder.rglob("*") if path.is_file())


def _self_check(tmp: pathlib.Path) -> None:
    """Build into ``tmp`` and drive the result through the production loading/inference path."""
    import time

    import huggingface_hub
    import torch
    from PIL import Image
    from transformers import AutoModelForImageTextToText, AutoProcessor, AutoTokenizer
    from transformers.utils import logging as hf_logging

    assert huggingface_hub.constants.HF_HUB_OFFLINE, "run the self-check with HF_HUB_OFFLINE=1"
    hf_logging.disable_progress_bar()

    started = time.perf_counter()
    folder = build_tiny_qwen2_vl(tmp / "tiny-qwen2-vl")
    built = time.perf_counter()
    proc = AutoProcessor.from_pretrained(folder)
    model = AutoModelForImageTextToText.from_pretrained(folder).eval()
    loaded = time.perf_counter()

    tok = proc.tokenizer
    special_ids = {t: tok.convert_tokens_to_ids(t) for t in SPECIAL_TOKENS}
    print(f"processor={type(proc).__name__} tokenizer={type(tok).__name__} model={type(model).__name__}")
    print(f"vocab={len(tok)} padding_side={tok.padding_side} pad={tok.pad_token}({tok.pad_token_id})")
    print("special ids:", special_ids)
    assert tok.padding_side == "left"
    assert model.config.text_config.vocab_size == len(tok)
    assert model.config.image_token_id == special_ids["<|image_pad|>"] == proc.image_token_id
    assert model.config.vision_start_token_id == special_ids["<|vision_start|>"]
    assert model.config.vision_end_token_id == special_ids["<|vision_end|>"]

    # The reloaded tokenizer (Qwen2Tokenizer rebuilds its pipeline) tokenizes like the trained one.
    reference = _train_tokenizer()
    for sample in (*_CORPUS, "unseen wörds, émojis 🙂 and 12345!"):
        assert tok.encode(sample) == reference.encode(sample), sample
    assert AutoTokenizer.from_pretrained(folder).encode("Rate this image") == tok.encode("Rate this image")

    def chat(*parts: dict[str, str]) -> str:
        messages = [{"role": "user", "content": list(parts)}]
        return proc.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)

    def new_text(out: torch.Tensor, prompt_len: int) -> list[str]:
        return proc.batch_decode(out[:, prompt_len:], skip_special_tokens=True)

    # Batched, left-padded, images of different sizes (-> different numbers of image tokens).
    texts = [
        chat({"type": "image"}, {"type": "text", "text": "Rate this image"}),
        chat({"type": "text", "text": "Is this Good or Bad?"}, {"type": "image"}),
    ]
    print("prompt[0]:", repr(texts[0]))
    assert texts[0].endswith("<|im_start|>assistant\n")
    images = [[Image.new("RGB", (40, 56), "red")], [Image.new("RGB", (64, 64), "blue")]]
    inputs = proc(text=texts, images=images, padding=True, return_tensors="pt")
    print(
        "image_grid_thw:", inputs["image_grid_thw"].tolist(), "input_ids:", tuple(inputs["input_ids"].shape)
    )
    assert (inputs["attention_mask"][:, -1] == 1).all() and (inputs["attention_mask"][:, 0] == 0).any()
    with torch.no_grad():
        out = model.generate(**inputs, max_new_tokens=5, do_sample=False)
    batched = new_text(out, inputs["input_ids"].shape[1])
    print("image batch ->", batched)
    # Left padding must not change the answer: rerun the padded prompt on its own.
    single = proc(text=texts[:1], images=images[:1], return_tensors="pt")
    with torch.no_grad():
        out = model.generate(**single, max_new_tokens=5, do_sample=False)
    assert new_text(out, single["input_ids"].shape[1]) == batched[:1], "padding changed the output"

    # Text-only batch through the same processor.
    texts = [
        chat({"type": "text", "text": "Answer yes or no."}),
        chat({"type": "text", "text": "Hello world!"}),
    ]
    inputs = proc(text=texts, padding=True, return_tensors="pt")
    with torch.no_grad():
        out = model.generate(**inputs, max_new_tokens=5, do_sample=False)
    print("text batch  ->", new_text(out, inputs["input_ids"].shape[1]))

    # Next-token distribution over candidate answers (single-token ids).
    inputs = proc(
        text=[chat({"type": "image"}, {"type": "text", "text": "Rate this image from 1 to 10."})],
        images=[[Image.new("RGB", (50, 30), "green")]],
        return_tensors="pt",
    )
    with torch.no_grad():
        probs = model(**inputs).logits[0, -1].softmax(dim=-1)
    candidates = [str(d) for d in range(10)] + ["Good", "Medium", "Bad", "yes", "no"]
    cand_ids = [tok.encode(c, add_special_tokens=False) for c in candidates]
    assert all(len(ids) == 1 for ids in cand_ids)
    print(
        "P(candidates):",
        {c: round(float(probs[ids[0]]), 4) for c, ids in zip(candidates, cand_ids, strict=True)},
    )
    done = time.perf_counter()

    print(f"build {built - started:.2f}s, load {loaded - built:.2f}s, inference {done - loaded:.2f}s")
    print(f"folder: {_folder_size(folder) / 1024:.1f} KiB -> {sorted(p.name for p in folder.iterdir())}")


if __name__ == "__main__":
    import os
    import tempfile

    with tempfile.TemporaryDirectory() as tmp_dir:
        # Must be set before huggingface_hub / transformers are imported (read at import time).
        os.environ.update(
            HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", HF_HOME=os.path.join(tmp_dir, "hf_home")
        )
        _self_check(pathlib.Path(tmp_dir))
    print("self-check OK")
