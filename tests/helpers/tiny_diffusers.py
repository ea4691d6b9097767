"""Build a tiny, random-weight Stable Diffusion pipeline folder on disk for tests (no Hub download).

The folder is what ``DiffusionPipeline.save_pretrained`` writes for ``StableDiffusionPipeline``: a tiny
``UNet2DConditionModel`` (latents 4 x 16 x 16), a tiny ``AutoencoderKL`` (scale factor 2, so images are 32 x 32),
a tiny ``CLIPTextModel`` (hidden size 32) and a ``CLIPTokenizer`` whose ``vocab.json`` / ``merges.txt`` are written
here: the 256 byte-level symbols, each also as a word end (``</w>``), plus a few merges and CLIP's two special
tokens. Generated images are noise-like, but every class, file and call is the one users run. The folder is well
under 1 MB; a 2-step 32 x 32 generation takes a few milliseconds on CPU.

With ``nsfw_checker=True`` the folder also holds a tiny ``StableDiffusionSafetyChecker`` (and its
``CLIPImageProcessor``) whose concept thresholds are set to -1, so every image is flagged: the pipeline then
returns ``nsfw_content_detected=[True, ...]`` and black images, exactly as a real checker does on a hit.

torch / transformers / diffusers are imported inside the function so that the caller (e.g. a conftest) can set
``HF_HUB_OFFLINE`` / ``HF_HOME`` before they are imported.
"""

from __future__ import annotations

import json
from pathlib import Path

__all__ = ["IMAGE_SIZE", "build_tiny_sd_pipeline", "write_clip_tokenizer_files"]

#: Width and height in pixels of the images the tiny pipeline makes by default.
IMAGE_SIZE = 32

_MERGES = ("a t", "t h", "th e</w>", "e n", "o n</w>", "i n", "a n", "e r</w>")


def _byte_symbols() -> list[str]:
    """GPT-2/CLIP byte-level alphabet: the 256 bytes mapped to printable unicode characters, in byte order."""
    printable = (
        list(range(ord("!"), ord("~") + 1))
        + list(range(ord("\xa1"), ord("\xac") + 1))
        + list(range(ord("\xae"), ord("\xff") + 1))
    )
    codes, extra = [], 0
    for b in range(256):
        if b in printable:
            codes.append(b)
        else:
            codes.append(256 + extra)
            extra += 1
    return [chr(c) for c in codes]


def write_clip_tokenizer_files(folder: Path) -> int:
    """Write ``vocab.json`` and ``merges.txt`` of a tiny byte-level CLIP BPE into ``folder``; return the vocab
    size."""
    folder.mkdir(parents=True, exist_ok=True)
    symbols = _byte_symbols()
    tokens = [*symbols, *(s + "</w>" for s in symbols)]
    for merge in _MERGES:
        tokens.append(merge.replace(" ", ""))
    tokens += ["<|startoftext|>", "<|endoftext|>"]
    vocab = {tok: i for i, tok in enumerate(dict.fromkeys(tokens))}
    (folder / "vocab.json").write_text(json.dumps(vocab, ensure_ascii=False), encoding="utf-8")
    (folder / "merges.txt").write_text("#version: 0.2\n" + "\n".join(_MERGES) + "\n", encoding="utf-8")
    return len(vocab)


def build_tiny_sd_pipeline(folder: Path, *, seed: int = 0, nsfw_checker: bool = False) -> Path:
    """Save a tiny random ``StableDiffusionPipeline`` to ``folder`` and return ``folder``.

    Args:
        folder: where to save (created).
        seed: torch seed for the random weights (same seed, same weights).
        nsfw_checker: include a safety checker that flags every image (see the module docstring).
    """
    import torch
    from diffusers import AutoencoderKL, DDIMScheduler, StableDiffusionPipeline, UNet2DConditionModel
    from transformers import CLIPTextConfig, CLIPTextModel, CLIPTokenizer

    folder = Path(folder)
    tok_dir = folder / "_tokenizer_src"
    vocab_size = write_clip_tokenizer_files(tok_dir)
    tokenizer = CLIPTokenizer.from_pretrained(tok_dir, model_max_length=16)
    torch.manual_seed(seed)
    unet = UNet2DConditionModel(
        block_out_channels=(8, 16),
        layers_per_block=1,
        sample_size=IMAGE_SIZE // 2,
        in_channels=4,
        out_channels=4,
        down_block_types=("DownBlock2D", "CrossAttnDownBlock2D"),
        up_block_types=("CrossAttnUpBlock2D", "UpBlock2D"),
        cross_attention_dim=16,
        attention_head_dim=4,
        norm_num_groups=4,
    )
    vae = AutoencoderKL(
        block_out_channels=(8, 16),
        in_channels=3,
        out_channels=3,
        down_block_types=("DownEncoderBlock2D", "DownEncoderBlock2D"),
        up_block_types=("UpDecoderBlock2D", "UpDecoderBlock2D"),
        latent_channels=4,
        norm_num_groups=4,
        sample_size=IMAGE_SIZE,
    )
    text_encoder = CLIPTextModel(
        CLIPTextConfig(
            bos_token_id=tokenizer.bos_token_id,
            eos_token_id=tokenizer.eos_token_id,
            pad_token_id=tokenizer.pad_token_id,
            hidden_size=16,
            intermediate_size=32,
            num_attention_heads=2,
            num_hidden_layers=2,
            max_position_embeddings=16,
            vocab_size=vocab_size,
        )
    )
    scheduler = DDIMScheduler(
        beta_start=0.00085,
        beta_end=0.012,
        beta_schedule="scaled_linear",
        clip_sample=False,
        set_alpha_to_one=False,
        steps_offset=1,
    )
    safety_checker, feature_extractor = None, None
    if nsfw_checker:
        safety_checker, feature_extractor = _always_flagging_checker()
    pipe = StableDiffusionPipeline(
        vae=vae,
        text_encoder=text_encoder,
        tokenizer=tokenizer,
        unet=unet,
        scheduler=scheduler,
        safety_checker=safety_checker,
        feature_extractor=feature_extractor,
        requires_safety_checker=nsfw_checker,
    )
    pipe.save_pretrained(folder)
    for f in tok_dir.iterdir():
        f.unlink()
    tok_dir.rmdir()
    return folder


def _always_flagging_checker() -> tuple[object, object]:
    """A tiny ``StableDiffusionSafetyChecker`` whose thresholds flag every image, and its image processor."""
    import torch
    from diffusers.pipelines.stable_diffusion.safety_checker import StableDiffusionSafetyChecker
    from transformers import CLIPConfig, CLIPImageProcessor

    config = CLIPConfig(
        text_config={
            "hidden_size": 16,
            "intermediate_size": 32,
            "num_attention_heads": 2,
            "num_hidden_layers": 1,
            "vocab_size": 100,
            "bos_token_id": 0,
            "eos_token_id": 1,
            "pad_token_id": 1,
        },
        vision_config={
            "hidden_size": 16,
            "intermediate_size": 32,
            "num_attention_heads": 2,
            "num_hidden_layers": 1,
            "image_size": 32,
            "patch_size": 8,
        },
        projection_dim=8,
    )
    checker = StableDiffusionSafetyChecker(config)
    with torch.no_grad():
        # score = cosine(image, concept) - threshold; cosine >= -1, so a threshold of -1.5 makes every score > 0
        checker.concept_embeds_weights.fill_(-1.5)
        checker.special_care_embeds_weights.fill_(-1.5)
    processor = CLIPImageProcessor(
        size={"shortest_edge": 32}, crop_size={"height": 32, "width": 32}, do_center_crop=True
    )
    return checker, processor
