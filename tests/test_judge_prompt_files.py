"""Judge prompts as files: built-in files reproduce the old requests byte for byte, user files are checked field by
field, interleaved layouts, first/last parse rules, image settings, and the prompt's identity in runs."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
from click.testing import CliRunner
from PIL import Image

from echo_builder.cli import cli
from echo_builder.errors import ConfigError
from echo_builder.judge.prompts import (
    PAIRWISE,
    PROBABILITY_DIGITS,
    PROBABILITY_TRIG,
    SINGLE,
    TEXT_RENDERING,
    builtin_prompt,
    load_judge_prompt,
    render_parts,
)
from echo_builder.judge.run import read_verdicts
from tests.golden.make_protocol_bodies import GOLDEN, capture
from tests.helpers.benchmark import make_benchmark, make_outputs
from tests.helpers.openai_server import Scripted
from tests.test_judge import _images

# SHA-256 of each built-in prompt's parsed content. Editing a built-in file changes its hash: bump its version in
# the file (so caches miss cleanly) and update the hash here.
BUILTIN_HASHES = {
    "single": ("echo-single-v1", "20e3ee245f9a01b9021ccb895cb41723c2d556f7ac3effc729250d261ac14141"),
    "pairwise": ("echo-pairwise-v1", "ea3e3f28011268b22a620a5adbee283be6ba6eaf7dd2636607f953daef0ac308"),
    "pairwise-lean": ("echo-pairwise-v2", "582b63a34a7de3677b144e1a0eeff5dde2db519a2b76930e33812f11ecba3e6d"),
    "criteria": ("echo-criteria-v1", "1319d6c90a80de10566fa67b062c6cf91725f3a3db56e6a45da3b9e3eabaa561"),
    "probability-digits": (
        "echo-prob-digits-v1",
        "86656e567c6b9e563b64db7b413d463366156d792bc589a5239ab637425bdf82",
    ),
    "probability-trig": (
        "echo-prob-trig-v1",
        "7991c81fda960bd336b94af5d3ee0fdb22fc1cf309c0c321061db84909a8e9b5",
    ),
    "text-rendering": ("echo-text-v1", "fbc4e2ad498a3752ea3bc6348e43d7bf6d4fd4dd0a0e2768554768f7a8e447a8"),
    "text-rendering-ocr": (
        "echo-text-ocr-v1",
        "d5370824f9cec66a239b96a6d4c35763448bd31085d2fdeb95a2fc8eb42e9b75",
    ),
}


def test_builtin_prompts_are_files_with_pinned_versions():
    """A built-in prompt is a shipped YAML file; its content hash is pinned to its version (edit -> bump)."""
    import echo_builder.judge

    folder = Path(echo_builder.judge.__file__).parent / "prompt_files"
    assert {p.stem for p in folder.glob("*.yaml")} == set(BUILTIN_HASHES)
    for name, (version, digest) in BUILTIN_HASHES.items():
        prompt = builtin_prompt(name)
        assert (prompt.version, prompt.sha256, prompt.source) == (version, digest, "built-in"), name
    assert (SINGLE.answer, PAIRWISE.answer, PROBABILITY_DIGITS.answer, PROBABILITY_TRIG.answer) == (
        "rating",
        "preference",
        "digits",
        "trig",
    )
    assert TEXT_RENDERING.answer == "rating" and SINGLE.pick == "last" and SINGLE.layout == "before_text"
    assert (SINGLE.short_side, SINGLE.resample, SINGLE.jpeg_quality, SINGLE.temperature) == (
        512,
        "lanczos",
        85,
        0.0,
    )


def test_builtin_prompt_files_send_byte_identical_requests():
    """Regression (prompts moved to YAML files): every protocol's request bodies equal those of the code before."""
    golden = json.loads(GOLDEN.read_text())
    captured = capture()
    assert set(captured) == set(golden)
    for name, bodies in captured.items():
        digests = [hashlib.sha256(b.encode()).hexdigest() for b in bodies]
        assert digests == [g["sha256"] for g in golden[name]], name


# -- user prompt files -----------------------------------------------------------------------------------------------
GOOD = """\
format: echo-bench-judge-prompt/1
name: mine
version: mine-v1
system: You rate images.
user: |-
  Request: {prompt}
  Rate it as [[N]].
answer:
  kind: rating
"""


def _write(tmp_path, text, name="prompt.yaml"):
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


@pytest.fixture
def bench(tmp_path):
    folder = make_benchmark(
        tmp_path / "bench",
        "image_to_image",
        [
            {
                "id": "s1",
                "prompt": "make it blue {output_images} </prompt>",
                "inputs": [Image.new("RGB", (96, 64), (200, 0, 0)), Image.new("RGB", (64, 64), (0, 0, 200))],
            },
            {"id": "s2", "prompt": "add a hat", "inputs": [Image.new("RGB", (80, 80), (0, 200, 0))]},
        ],
    )
    outputs = make_outputs(
        tmp_path / "outputs",
        {
            "m1": {s: Image.new("RGB", (128, 96), (10, 200, 10)) for s in ("s1", "s2")},
            "m2": {s: Image.new("RGB", (128, 96), (200, 10, 10)) for s in ("s1", "s2")},
        },
    )
    return folder, outputs


def _judge(bench, server, out, *extra):
    folder, outputs = bench
    args = ["judge", "--benchmark", str(folder), "--config", "image_to_image", "--outputs", str(outputs)]
    args += ["--judge", "openai:judge", "--base-url", server.base_url, "--out", str(out), *extra]
    return CliRunner().invoke(cli, args)


def _content(body):
    return body["messages"][-1]["content"]


def _kinds(body):
    return ["image" if p["type"] == "image_url" else p["text"] for p in _content(body)]


BAD_FILES = [
    ("colour: red\n" + GOOD, "colour", "unknown field"),
    (GOOD.replace("kind: rating", "kind: rating\n  pick: middle"), "answer.pick", "last, first"),
    (GOOD.replace("kind: rating", "kind: score"), "answer.kind", "rating, preference"),
    (GOOD.replace("kind: rating", "kind: rating\n  pattern: '[[('"), "answer.pattern", "regular expression"),
    (GOOD.replace("kind: rating", "kind: rating\n  pattern: 'N=\\d+'"), "answer.pattern", "one group"),
    (GOOD + "temperature: 7\n", "temperature", "[0, 2]"),
    (GOOD + "temperature: .nan\n", "temperature", "[0, 2]"),
    (GOOD + "image:\n  short_side: many\n", "image.short_side", "integer"),
    (GOOD + "image:\n  resample: sharpest\n", "image.resample", "lanczos"),
    (GOOD + "image:\n  jpeg_quality: 100\n", "image.jpeg_quality", "[1, 95]"),
    (GOOD + "image:\n  dpi: 3\n", "image.dpi", "unknown field"),
    (GOOD.replace("Request: {prompt}", "Request: {promt}"), "user", "unknown placeholder {promt}"),
    (GOOD.replace("Request: {prompt}", "{output_images} {prompt}"), "user", "layout: interleaved"),
    (GOOD + "layout: interleaved\n", "user", "{output_images}"),
    (GOOD.replace("user: |-\n  Request: {prompt}\n  Rate it as [[N]].\n", ""), "user", "missing"),
    (GOOD.replace("system: You rate images.", "system: [1, 2]"), "system", "expected text"),
    (
        GOOD + "fields:\n  note: {with_inputs: '{output_image_1}'}\n",
        "fields.note.with_inputs",
        "user template",
    ),
    (GOOD.replace("version: mine-v1", "version: ''"), "version", "empty"),
]


@pytest.mark.parametrize(
    ("text", "field", "words"), BAD_FILES, ids=[b[1] + "-" + b[2][:12] for b in BAD_FILES]
)
def test_bad_prompt_file_is_one_error_line_naming_file_and_field(
    bench, openai_server, tmp_path, text, field, words
):
    """Defect class: a prompt file with a bad field. judge and metrics stop with one line naming file and field,
    before any call or any file is written."""
    path = _write(tmp_path, text)
    with pytest.raises(ConfigError) as info:
        load_judge_prompt(path)
    assert str(path) in str(info.value) and f"field {field!r}" in str(info.value) and words in str(info.value)
    out = tmp_path / "run"
    result = _judge(bench, openai_server, out, "--judge-prompt", str(path))
    assert result.exit_code == 1 and result.output.startswith("error: judge prompt ")
    assert len(result.output.splitlines()) == 1 and f"field {field!r}" in result.output
    assert openai_server.calls == 0 and not out.exists()
    folder, outputs = bench
    metrics_out = tmp_path / "metrics"
    args = ["metrics", "--benchmark", str(folder), "--config", "image_to_image", "--outputs", str(outputs)]
    args += ["--metric", "text_rendering", "--judge", "openai:judge", "--base-url", openai_server.base_url]
    result = CliRunner().invoke(cli, [*args, "--judge-prompt", str(path), "--out", str(metrics_out)])
    assert (
        result.exit_code == 1 and len(result.output.splitlines()) == 1 and f"field {field!r}" in result.output
    )
    assert openai_server.calls == 0 and not metrics_out.exists()


@pytest.mark.parametrize(
    ("content", "words"),
    [
        (b"user: [unclosed\n", "not valid YAML at line"),
        (b"- just\n- a list\n", "expected a YAML mapping"),
        (b"\xff\xfe binary", "not UTF-8"),
        (None, "cannot read the file"),
        (b"user: " + b"[" * 50_000 + b"]" * 50_000, "nested too deeply"),
        ("folder", "is a folder"),
        ("fifo", "not a regular file"),
        (b"user: '" + b"x" * 1_000_001 + b"'", "larger than 1000000 bytes"),
    ],
)
def test_unreadable_prompt_file_is_one_error_line(bench, openai_server, tmp_path, content, words):
    """Defect class: a prompt path that is not a readable prompt file (bad bytes, folder, FIFO that would block,
    nesting that overflows the parser, too big) is one error line, never a traceback or a hang."""
    import os

    path = tmp_path / "p.yaml"
    if content == "folder":
        path.mkdir()
    elif content == "fifo":
        if not hasattr(os, "mkfifo"):
            pytest.skip("no FIFOs here")
        os.mkfifo(path)
    elif content is not None:
        path.write_bytes(content)
    result = _judge(bench, openai_server, tmp_path / "run", "--judge-prompt", str(path))
    assert result.exit_code == 1 and len(result.output.splitlines()) == 1
    assert result.output.startswith(f"error: judge prompt {path}") and words in result.output


def test_prompt_answer_kind_must_fit_the_mode(bench, openai_server, tmp_path):
    path = _write(tmp_path, GOOD)
    result = _judge(bench, openai_server, tmp_path / "run", "--mode", "pairwise", "--judge-prompt", str(path))
    assert result.exit_code == 1 and "field 'answer.kind' is 'rating'" in result.output
    assert "needs 'preference'" in result.output and openai_server.calls == 0


def test_interleaved_layout_places_images_at_placeholders_and_never_reads_the_prompt_as_one():
    """Images go where the template says (the authors' layout); a placeholder typed in a user prompt stays text."""
    prompt = builtin_prompt("single")
    assert render_parts(prompt, "x", ["IN1", "IN2"], ["OUT"])[:3] == ["IN1", "IN2", "OUT"]
    text = GOOD.replace(
        "user: |-\n  Request: {prompt}\n  Rate it as [[N]].\n",
        "user: |-\n  Input 1: {input_image_1}\n  Other inputs: {input_images}\n  Output: {output_images}\n"
        "  Request: {prompt} ({n_inputs} inputs, {{literal}})\n  {note}\n",
    )
    text += "layout: interleaved\nfields:\n  note:\n    with_inputs: Edit.\n    without_inputs: Generate.\n"
    mine = prompt_from_text(text)
    parts = render_parts(mine, "see {output_images} and {input_image_1}", ["IN1", "IN2", "IN3"], ["OUT"])
    assert parts == [
        "Input 1: ",
        "IN1",
        "\nOther inputs: ",
        "IN2",
        "IN3",
        "\nOutput: ",
        "OUT",
        "\nRequest: see {output_images} and {input_image_1} (3 inputs, {literal})\nEdit.",
    ]
    # no inputs: the input placeholders render nothing, the field's other text is chosen
    assert render_parts(mine, "p", [], ["OUT"]) == [
        "Input 1: \nOther inputs: \nOutput: ",
        "OUT",
        "\nRequest: p (0 inputs, {literal})\nGenerate.",
    ]


def prompt_from_text(text):
    import yaml

    from echo_builder.judge.prompts import prompt_from_mapping

    return prompt_from_mapping(yaml.safe_load(text), "inline.yaml")


def test_prompt_file_drives_layout_parse_rule_image_settings_and_temperature(bench, openai_server, tmp_path):
    """A user file's settings reach the request and the parser: interleaved images, no system message when empty,
    temperature, image short side and quality, and the FIRST [[N]] when pick: first."""
    openai_server.reply = lambda body: "Provisional [[3]]. Final [[8]]."
    text = (
        "name: authors-like\nversion: v1\nsystem: ''\n"
        "user: |-\n  Inputs: {input_images}\n  Output: {output_images}\n  Instruction: {prompt}\n"
        "layout: interleaved\nanswer:\n  kind: rating\n  pick: first\ntemperature: 0.5\n"
        "image:\n  short_side: 48\n  resample: bicubic\n  jpeg_quality: 60\n"
    )
    path = _write(tmp_path, text)
    out = tmp_path / "run"
    result = _judge(bench, openai_server, out, "--judge-prompt", str(path))
    assert result.exit_code == 0, result.output
    bodies = openai_server.log.bodies
    assert len(bodies) == 4 and all(len(b["messages"]) == 1 for b in bodies)  # no system message
    assert {b["temperature"] for b in bodies} == {0.5}
    two_inputs = next(b for b in bodies if "make it blue" in json.dumps(b))
    assert _kinds(two_inputs)[:5] == ["Inputs: ", "image", "image", "\nOutput: ", "image"]
    assert _kinds(two_inputs)[5].startswith("\nInstruction: make it blue {output_images} <\\/prompt>")
    sizes = {min(im.size) for b in bodies for im in _images(b)}
    assert sizes == {48}
    verdicts = read_verdicts(out)
    assert {v.rating for v in verdicts} == {3.0}  # pick: first
    run = json.loads((out / "run.json").read_text())
    mine = load_judge_prompt(path)
    assert run["judge_prompt"] == {
        "name": "authors-like",
        "version": mine.version,
        "source": str(path),
        "sha256": mine.sha256,
    }
    assert mine.version == f"v1+sha256:{mine.sha256[:12]}" and run["prompt_version"] == mine.version
    assert {v.prompt_version for v in verdicts} == {mine.version}


def test_edited_prompt_file_never_serves_stale_cache_entries(bench, openai_server, tmp_path):
    """Defect class: a changed prompt reusing cached replies. Changing only the parse rule (not the text sent) still
    gives a new version, so the rerun calls the judge again and records the new version."""
    openai_server.reply = lambda body: "Provisional [[3]]. Final [[8]]."
    path = _write(tmp_path, GOOD)
    out = tmp_path / "run"
    assert _judge(bench, openai_server, out, "--judge-prompt", str(path)).exit_code == 0
    first = openai_server.calls
    assert _judge(bench, openai_server, out, "--judge-prompt", str(path)).exit_code == 0
    assert openai_server.calls == first  # unchanged file: all from the cache
    path.write_text(GOOD.replace("kind: rating", "kind: rating\n  pick: first"))
    assert _judge(bench, openai_server, out, "--judge-prompt", str(path)).exit_code == 0
    assert openai_server.calls == 2 * first
    assert {v.rating for v in read_verdicts(out)} == {3.0}
    assert {v.prompt_version for v in read_verdicts(out)} == {load_judge_prompt(path).version}


def test_default_run_records_the_builtin_prompt(bench, openai_server, tmp_path):
    openai_server.reply = lambda body: "[[6]]"
    out = tmp_path / "run"
    assert _judge(bench, openai_server, out).exit_code == 0
    run = json.loads((out / "run.json").read_text())
    assert run["judge_prompt"] == {
        "name": "single",
        "version": "echo-single-v1",
        "source": "built-in",
        "sha256": BUILTIN_HASHES["single"][1],
    }


def test_metrics_text_rendering_uses_the_prompt_file(bench, openai_server, tmp_path):
    openai_server.reply = lambda body: "Text is fine. <score>7</score>"
    text = (
        "name: text-mine\nversion: t1\nsystem: Read the text.\nuser: 'Prompt: {prompt}'\n"
        "answer:\n  kind: rating\n  pattern: '<score>(\\d+)</score>'\n  low: 0\n  high: 10\n"
    )
    path = _write(tmp_path, text)
    folder, outputs = bench
    out = tmp_path / "metrics"
    args = ["metrics", "--benchmark", str(folder), "--config", "image_to_image", "--outputs", str(outputs)]
    args += ["--metric", "text_rendering", "--judge", "openai:judge", "--base-url", openai_server.base_url]
    result = CliRunner().invoke(
        cli, [*args, "--judge-prompt", str(path), "--out", str(out), "--format", "csv"]
    )
    assert result.exit_code == 0, result.output
    assert {b["messages"][0]["content"] for b in openai_server.log.bodies} == {"Read the text."}
    import pandas as pd

    rows = pd.read_csv(out / "metrics.csv")
    assert len(rows) == 4 and set(rows["value"].round(6)) == {0.7}  # (7 - 0) / (10 - 0), the file's range
    version = load_judge_prompt(path).version
    summary = json.loads((out / "summary.json").read_text())
    assert version in json.dumps(summary)  # the backend id names the prompt version


def test_judge_prompt_on_metrics_needs_text_rendering(bench, tmp_path):
    folder, outputs = bench
    path = _write(tmp_path, GOOD)
    args = ["metrics", "--benchmark", str(folder), "--config", "image_to_image", "--outputs", str(outputs)]
    result = CliRunner().invoke(
        cli, [*args, "--metric", "color_shift", "--judge-prompt", str(path), "--out", str(tmp_path / "m")]
    )
    assert result.exit_code == 1 and "--judge-prompt applies to --metric text_rendering only" in result.output


def test_docs_template_is_a_valid_interleaved_prompt_file(tmp_path):
    """The template of docs/reproducing-echo.md, once its placeholders are filled, loads, interleaves images and
    takes the first [[N]]; unfilled, it is refused (it must never reach a judge as is)."""
    import re

    from tests.conftest import REPO_ROOT

    source = REPO_ROOT / "docs" / "prompts" / "authors-layout.template.yaml"
    with pytest.raises(ConfigError, match="template placeholder"):
        load_judge_prompt(source)
    # a user pastes the authors' wording over each placeholder; here each becomes its own words in lower case
    filled = re.sub(
        r"\[([A-Z][A-Z0-9 ,.'/()-]{7,})(?=[\],:])", lambda m: "[" + m.group(1).lower(), source.read_text()
    )
    (tmp_path / "mine.yaml").write_text(filled)
    template = load_judge_prompt(tmp_path / "mine.yaml")
    assert (template.layout, template.pick, template.answer) == ("interleaved", "first", "rating")
    parts = render_parts(template, "make it blue", ["IN"], ["OUT"])
    assert parts[1] == "IN" and parts[3] == "OUT" and "make it blue" in parts[4]
    assert "for image editing" in parts[4]
    assert "for text-to-image" in render_parts(template, "a cat", [], ["OUT"])[-1]


def test_pairwise_and_probability_prompt_files(bench, openai_server, tmp_path):
    """The other answer kinds: a pairwise file places both outputs at their placeholders and takes the first
    verdict; a digits file replaces the probability prompt and its version is recorded."""
    openai_server.reply = lambda body: "First [[B]], on reflection [[A]]"
    pairwise = _write(
        tmp_path,
        "name: pw\nuser: |-\n  Left: {output_image_1}\n  Right: {output_image_2}\n  Task: {prompt}\n"
        "layout: interleaved\nanswer: {kind: preference, pick: first}\n",
        "pairwise.yaml",
    )
    out = tmp_path / "pw"
    result = _judge(bench, openai_server, out, "--mode", "pairwise", "--judge-prompt", str(pairwise))
    assert result.exit_code == 0, result.output
    body = openai_server.log.bodies[0]
    kinds = _kinds(body)
    # inputs no placeholder names go first, then the outputs where the template puts them
    assert kinds[kinds.index("\nRight: ") - 2 : kinds.index("\nRight: ") + 2] == [
        "Left: ",
        "image",
        "\nRight: ",
        "image",
    ]
    verdicts = read_verdicts(out)
    # [[B]] counts (first): in AB order model_b wins, in BA order it maps back to model_a
    assert {(v.order, v.winner) for v in verdicts} == {("AB", "B"), ("BA", "A")}
    assert {v.prompt_version for v in verdicts} == {load_judge_prompt(pairwise).version}

    openai_server.reset_log()
    openai_server.reply = lambda body: Scripted("7", {"7": 0.5, "8": 0.5})
    digits = _write(
        tmp_path, "name: dg\nuser: 'Rate {prompt} 1-9. Digit only:'\nanswer: {kind: digits}\n", "d.yaml"
    )
    out = tmp_path / "prob"
    result = _judge(bench, openai_server, out, "--mode", "probability", "--judge-prompt", str(digits))
    assert result.exit_code == 0, result.output
    assert all(_content(b)[-1]["text"].startswith("Rate ") for b in openai_server.log.bodies)
    assert {v.rating for v in read_verdicts(out)} == {7.5}
    result = _judge(
        bench, openai_server, tmp_path / "trig", "--mode", "probability", "--probability-scale", "trig",
        "--judge-prompt", str(digits),
    )  # fmt: skip
    assert result.exit_code == 1 and "needs 'trig'" in result.output


def test_votes_and_example_label_the_interval(tmp_path):
    result = CliRunner().invoke(cli, ["leaderboard", "--example", "--ci", "normal", "--format", "json"])
    assert result.exit_code == 0, result.output
    records = json.loads(result.stdout)
    assert {r["ci_method"] for r in records} == {"normal-comparisons"}
    for r in records:
        assert r["ci_low"] < r["win_rate"] < r["ci_high"] and r["bootstrap_ci_low"] is not None


def test_python_entry_points_take_a_prompt_file(openai_server, tmp_path):
    """grade_outputs (the echo_judge module's function) and text_rendering take the same files as the CLI."""
    from echo_builder.judge.api import grade_outputs
    from echo_builder.scoring.text import text_rendering

    openai_server.reply = lambda body: "[[2]] then [[9]]"
    path = _write(tmp_path, GOOD.replace("kind: rating", "kind: rating\n  pick: first"))
    options = {"openai:j": {"base_url": openai_server.base_url}}
    image = Image.new("RGB", (32, 32), (1, 2, 3))
    report = grade_outputs(["p"], [[]], [image], ["openai:j"], judge_options=options, judge_prompt=path)
    assert report["ratings"] == [2.0]
    assert openai_server.log.bodies[-1]["messages"][0]["content"] == "You rate images."
    with pytest.raises(ConfigError, match="mode probability needs 'digits'"):
        grade_outputs(
            ["p"], [[]], [image], ["openai:j"], judge_options=options, judge_prompt=path, mode="probability"
        )
    result = text_rendering(
        ["p"], [image], ["openai:j"], judge_options=options, template=load_judge_prompt(path)
    )
    assert result.values.tolist() == [pytest.approx(1 / 9)]
    assert result.extras["backend"].endswith(f"+prompt={load_judge_prompt(path).version}")
