"""End to end on real images from ../shared/data: judge runs with the loopback server and the tiny local VLM."""

from __future__ import annotations

import json

import numpy as np
import pytest
from click.testing import CliRunner
from PIL import Image

from echo_builder.cli import cli
from echo_builder.judge.run import read_verdicts
from tests.helpers.benchmark import make_benchmark
from tests.test_judge import _images


def _run(*args: str) -> str:
    result = CliRunner().invoke(cli, list(args), catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result.stdout


@pytest.fixture
def real_run(shared_data, tmp_path):
    """image_to_image benchmark of three real edits; 'editor' returns the real edited images, 'copycat' returns
    the input unchanged (a classic failure the community complains about)."""
    pairs = shared_data / "image_pairs"
    cases = [
        (
            "strawberries",
            "Change the strawberries to oranges.",
            pairs / "genai_arena_edits" / "strawberries.jpg",
            pairs / "genai_arena_edits" / "oranges.jpg",
        ),
        (
            "duck",
            "Add a hat to the duck.",
            pairs / "genai_arena_edits" / "duck.jpg",
            pairs / "genai_arena_edits" / "duck_hat.jpg",
        ),
        (
            "tint",
            "Remove the yellow tint.",
            pairs / "yellow_tint" / "gpt4o_before.webp",
            pairs / "yellow_tint" / "gpt4o_after.webp",
        ),
    ]
    bench = make_benchmark(
        tmp_path / "bench",
        "image_to_image",
        [{"id": sid, "prompt": prompt, "inputs": [src.read_bytes()]} for sid, prompt, src, _ in cases],
    )
    outputs = tmp_path / "outputs"
    for model in ("editor", "copycat"):
        (outputs / model).mkdir(parents=True)
    for sid, _, src, edited in cases:
        (outputs / "editor" / f"{sid}{edited.suffix}").write_bytes(edited.read_bytes())
        (outputs / "copycat" / f"{sid}{src.suffix}").write_bytes(src.read_bytes())
    return bench, outputs


def change_judge(body):
    """Rates an edit by how much it changed the input: an unchanged copy gets [[2]], a real edit [[8]]."""
    source, output = (np.asarray(im.resize((64, 64)), dtype=float) for im in _images(body)[-2:])
    return (
        "An edit should change the image as asked. [[8]]" if np.abs(source - output).mean() > 3 else "[[2]]"
    )


def test_loopback_judge_on_real_edits(real_run, openai_server, tmp_path):
    bench, outputs = real_run
    openai_server.reply = change_judge
    out = tmp_path / "run"
    args = [
        "judge",
        "--benchmark",
        str(bench),
        "--config",
        "image_to_image",
        "--outputs",
        str(outputs),
        "--judge",
        "openai:judge",
        "--base-url",
        openai_server.base_url,
        "--out",
        str(out),
    ]
    _run(*args)
    verdicts = read_verdicts(out)
    assert {(v.model, v.sample_id): v.rating for v in verdicts} == {
        ("copycat", s): 2.0 for s in ("strawberries", "duck", "tint")
    } | {("editor", s): 8.0 for s in ("strawberries", "duck", "tint")}
    # the judge saw JPEGs with the shorter side at 512 px, input before output
    sizes = {min(im.size) for body in openai_server.log.bodies for im in _images(body)}
    assert sizes == {512}
    board = json.loads(_run("leaderboard", str(out), "--format", "json", "--n-boot", "200"))
    assert [(r["model"], r["win_rate"]) for r in board] == [("editor", 1.0), ("copycat", 0.0)]
    assert all(Image.open(out / "plots" / p).width > 100 for p in ("win_rates.png", "head_to_head.png"))
    calls = openai_server.calls
    _run(*args)
    assert openai_server.calls == calls  # the rerun is served entirely from the cache


@pytest.mark.slow
def test_tiny_local_vlm_judge_on_real_edits(real_run, tiny_vlm, tmp_path):
    bench, outputs = real_run
    out = tmp_path / "run"
    args = [
        "judge",
        "--benchmark",
        str(bench),
        "--config",
        "image_to_image",
        "--outputs",
        str(outputs),
        "--judge",
        f"transformers:{tiny_vlm}",
        "--mode",
        "probability",
        "-o",
        "dtype=float32",
        "--out",
        str(out),
    ]
    text = _run(*args)
    assert "6 verdicts" in text
    verdicts = read_verdicts(out)
    assert all(v.status == "ok" and 1.0 <= v.rating <= 9.0 and 0 < v.confidence <= 1 for v in verdicts)
    board = json.loads(_run("leaderboard", str(out), "--format", "json", "--n-boot", "100"))
    assert {r["model"] for r in board} == {"editor", "copycat"}
    assert all(r["ci_low"] <= r["win_rate"] <= r["ci_high"] for r in board)
    assert (out / "plots" / "bradley_terry.png").is_file()
    again = _run(*args)
    assert "0 calls, 6 cache hits" in again and read_verdicts(out) == verdicts


@pytest.mark.slow
def test_judge_cli_under_accelerate_launch_matches_a_single_process(tiny_vlm, tmp_path):
    import subprocess
    import sys

    from tests.helpers.benchmark import make_outputs
    from tests.helpers.launch import accelerate_launch, cpu_env

    samples = [{"id": f"s{i}", "prompt": f"draw shape {i}"} for i in range(5)]
    bench = make_benchmark(tmp_path / "bench", "text_to_image", samples)
    colors = {
        s["id"]: Image.new("RGB", (40 + 8 * i, 56), (40 * i, 90, 200 - 30 * i)) for i, s in enumerate(samples)
    }
    outputs = make_outputs(tmp_path / "outputs", {"m1": colors, "m2": dict(reversed(colors.items()))})
    judge_args = [
        "judge",
        "--benchmark",
        str(bench),
        "--config",
        "text_to_image",
        "--outputs",
        str(outputs),
        "--judge",
        f"transformers:{tiny_vlm}",
        "-o",
        "dtype=float32",
        "-o",
        "batch_size=3",
        "--concurrency",
        "4",
    ]
    single = subprocess.run(
        [sys.executable, "-m", "echo_builder.cli", *judge_args, "--out", str(tmp_path / "one")],
        env=cpu_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    # the tiny random model never writes a valid [[N]]: every judgment is a parse failure (exit code 1 says so),
    # and what matters here is that both runs record the same verdicts
    assert single.returncode == 1 and "every judgment failed" in single.stderr, single.stderr[-2000:]
    launched = accelerate_launch(["echo_builder.cli", *judge_args, "--out", str(tmp_path / "two")])
    assert launched.returncode == 1 and "every judgment failed" in launched.stderr, launched.stderr[-3000:]
    one, two = read_verdicts(tmp_path / "one"), read_verdicts(tmp_path / "two")
    assert len(one) == 10
    strip = lambda vs: [(v.sample_id, v.model, v.status, v.rating, v.raw_text) for v in vs]  # noqa: E731
    assert strip(two) == strip(one)
    assert {v.status for v in one} == {"parse_failure"}  # re-asked once, in one batch on every process
