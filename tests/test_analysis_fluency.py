"""Perplexity through the production path (``--lm`` -> AutoTokenizer + AutoModelForCausalLM) with tiny random
causal LMs saved locally, checked against exp(mean token NLL) computed here with the model's own loss."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from click.testing import CliRunner

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from echo_builder.analysis.fluency import CausalLM, parse_lm_spec  # noqa: E402
from echo_builder.cli import cli  # noqa: E402
from tests.helpers.analysis import assert_md_matches_json  # noqa: E402

WORDS = [
    "a",
    "red",
    "car",
    "on",
    "the",
    "street",
    "change",
    "the",
    "sky",
    "to",
    "sunset",
    "add",
    "hat",
    "to",
    "duck",
    "make",
    "it",
    "yellow",
    "poster",
    "of",
    "mars",
    "with",
    "big",
    "title",
    "remove",
    "green",
    "from",
    "photo",
    "my",
    "cat",
    "in",
    "style",
    "ghibli",
]
PROMPTS = [
    "a red car on the street",
    "change the sky to sunset",
    "add a hat to the duck",
    "poster of mars with a big title and a red rocket on the street",
    "remove the green car from my photo",
]


def _tokenizer(folder: Path):
    from tokenizers import Tokenizer, models, pre_tokenizers

    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2, "<pad>": 3}
    for word in WORDS:
        vocab.setdefault(word, len(vocab))
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    fast = transformers.PreTrainedTokenizerFast(
        tokenizer_object=tok, unk_token="<unk>", bos_token="<s>", eos_token="</s>", pad_token="<pad>"
    )
    fast.save_pretrained(folder)
    return fast


def _save(folder: Path, kind: str) -> Path:
    torch.manual_seed(0)
    tok = _tokenizer(folder)
    if kind == "gpt2":
        config = transformers.GPT2Config(
            vocab_size=len(tok),
            n_embd=32,
            n_layer=2,
            n_head=2,
            n_positions=64,
            bos_token_id=1,
            eos_token_id=2,
        )
        model = transformers.GPT2LMHeadModel(config)
    else:
        config = transformers.LlamaConfig(
            vocab_size=len(tok),
            hidden_size=32,
            intermediate_size=64,
            num_hidden_layers=2,
            num_attention_heads=2,
            num_key_value_heads=2,
            max_position_embeddings=64,
            bos_token_id=1,
            eos_token_id=2,
            pad_token_id=3,
        )
        model = transformers.LlamaForCausalLM(config)
    model.save_pretrained(folder)
    return folder


@pytest.fixture(scope="module", params=["gpt2", "llama"])
def tiny_lm(request, tmp_path_factory) -> Path:
    return _save(tmp_path_factory.mktemp(f"tiny-{request.param}"), request.param)


def _independent(folder: Path, prompts: list[str]) -> tuple[float, list[float]]:
    """(corpus perplexity, per-prompt perplexities) from the model's own mean cross-entropy loss."""
    tok = transformers.AutoTokenizer.from_pretrained(folder)
    model = transformers.AutoModelForCausalLM.from_pretrained(folder).eval()
    total, count, per_prompt = 0.0, 0, []
    for prompt in prompts:
        ids = torch.tensor([[tok.bos_token_id, *tok(prompt, add_special_tokens=False)["input_ids"]]])
        with torch.no_grad():
            loss = float(model(input_ids=ids, labels=ids).loss)  # mean NLL of tokens 2..T given their prefix
        n = ids.shape[1] - 1
        total += loss * n
        count += n
        per_prompt.append(math.exp(loss))
    return math.exp(total / count), per_prompt


def test_perplexity_equals_exp_mean_token_nll(tiny_lm):
    lm = CausalLM(str(tiny_lm), batch_size=2)  # batches mix lengths: padding must not change any number
    result = lm.perplexity(PROMPTS, n_boot=50)
    corpus, per_prompt = _independent(tiny_lm, PROMPTS)
    assert result["perplexity"] == pytest.approx(corpus, rel=1e-5)
    assert result["mean_prompt_perplexity"] == pytest.approx(sum(per_prompt) / len(per_prompt), rel=1e-5)
    assert result["tokens"] == sum(len(p.split()) for p in PROMPTS)  # one word-level token per word
    low, high = result["mean_prompt_perplexity_ci"]
    assert low <= result["mean_prompt_perplexity"] <= high
    # batch size does not change the numbers
    single = CausalLM(str(tiny_lm), batch_size=1).perplexity(PROMPTS, n_boot=50)
    assert single["perplexity"] == pytest.approx(result["perplexity"], rel=1e-6)


def test_long_prompts_are_cut_to_the_context_and_counted(tiny_lm):
    lm = CausalLM(str(tiny_lm), max_length=4)
    result = lm.perplexity(["a red car on the street", "a red"], n_boot=10)
    assert result["truncated"] == 1 and result["tokens"] == 3 + 2


def test_analyze_with_lm_writes_perplexity_for_each_set(tiny_lm, tmp_path):
    from tests.helpers.benchmark import make_benchmark

    bench = make_benchmark(
        tmp_path / "bench", "image_to_image", [{"id": f"s{i}", "prompt": p} for i, p in enumerate(PROMPTS)]
    )
    ref = tmp_path / "ref.txt"
    ref.write_text("change the sky to sunset\nadd hat to duck\nmake it yellow\n", encoding="utf-8")
    out = tmp_path / "analysis"
    result = CliRunner().invoke(
        cli,
        [
            "analyze",
            str(bench),
            "--out",
            str(out),
            "--lm",
            f"transformers:{tiny_lm}",
            "--compare",
            str(ref),
            "--n-boot",
            "30",
        ],
        catch_exceptions=False,
    )
    assert result.exit_code == 0, result.output
    doc = json.loads((out / "analysis.json").read_text())
    sets = {s["name"]: s for s in doc["fluency"]["sets"]}
    assert set(sets) == {"build:image_to_image", "ref"}
    assert sets["build:image_to_image"]["perplexity"] == pytest.approx(
        _independent(tiny_lm, PROMPTS)[0], abs=1e-4
    )
    refs = ["change the sky to sunset", "add hat to duck", "make it yellow"]
    assert sets["ref"]["perplexity"] == pytest.approx(_independent(tiny_lm, refs)[0], abs=1e-4)
    assert_md_matches_json(out, doc)


def test_lm_that_cannot_load_fails_before_anything_is_written(tmp_path):
    from tests.helpers.benchmark import make_benchmark

    bench = make_benchmark(tmp_path / "bench", "text_to_image", [{"id": "s0", "prompt": "a cat"}])
    out = tmp_path / "analysis"
    result = CliRunner().invoke(
        cli, ["analyze", str(bench), "--out", str(out), "--lm", str(tmp_path / "nothing")]
    )
    assert result.exit_code == 1
    assert result.output.startswith("error: --lm ") and "Traceback" not in result.output
    assert len(result.output.strip().splitlines()) == 1
    assert not out.exists()


def test_lm_spec():
    assert parse_lm_spec("transformers:EleutherAI/pythia-160m") == "EleutherAI/pythia-160m"
    assert parse_lm_spec("/models/x") == "/models/x"
    with pytest.raises(Exception, match="--lm"):
        parse_lm_spec("transformers:")


def test_the_report_says_how_many_prompts_were_cut_to_the_context(tiny_lm, tmp_path):
    from tests.helpers.analysis import md_row
    from tests.helpers.benchmark import make_benchmark

    prompts = [*PROMPTS, "a red"]  # five prompts longer than 4 tokens with the beginning token, one shorter
    bench = make_benchmark(
        tmp_path / "bench", "image_to_image", [{"id": f"s{i}", "prompt": p} for i, p in enumerate(prompts)]
    )
    out = tmp_path / "analysis"
    args = ["analyze", str(bench), "--out", str(out), "--lm", str(tiny_lm), "--lm-option", "max_length=4"]
    result = CliRunner().invoke(cli, [*args, "--n-boot", "20"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    doc = json.loads((out / "analysis.json").read_text())
    (row,) = doc["fluency"]["sets"]
    assert (row["truncated"], row["tokens"]) == (5, 5 * 3 + 2)
    cells = [
        r for r in (out / "analysis.md").read_text().splitlines() if r.startswith("| build:image_to_image")
    ]
    assert len(cells) == 2  # the diversity row and the perplexity row
    assert md_row("\n".join(cells[1:]), "build:image_to_image")[1:4] == ["6", "5", "17"]
    assert_md_matches_json(out, doc)
