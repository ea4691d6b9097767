"""Checks every evaluating command makes before any work, and the CLI's one-line errors.

From a new user's trial: ``judge`` on an outputs folder one level too high made 12 ``missing_output`` verdicts and
exit 0, and the leaderboard then ranked the folder names ``benchmark``, ``metrics``, ``outputs``... at 0.5;
``judge`` and ``metrics`` on a config with no sample printed an empty table and exit 0; a mistyped option printed
click's three-line usage error; ``leaderboard | head -1`` ended in ``error: ... Broken pipe``.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner
from PIL import Image

from echo_builder.cli import cli
from tests.helpers.benchmark import make_benchmark, make_outputs


def _bench(tmp_path: Path, samples=None) -> Path:
    grey = Image.new("RGB", (16, 16), (128, 128, 128))
    rows = [{"id": "s1", "prompt": "p", "inputs": [grey]}] if samples is None else samples
    return make_benchmark(tmp_path / "bench", "image_to_image", rows)


def _judge(bench: Path, outputs: Path, out: Path):
    return CliRunner().invoke(
        cli,
        [
            *("judge", "--benchmark", str(bench), "--config", "image_to_image", "--outputs", str(outputs)),
            *("--judge", "openai:vlm", "--base-url", "http://127.0.0.1:9/v1", "--out", str(out)),
        ],
    )


def _metrics(bench: Path, outputs: Path, out: Path):
    return CliRunner().invoke(
        cli,
        [
            *("metrics", "--benchmark", str(bench), "--config", "image_to_image", "--outputs", str(outputs)),
            *("--metric", "color_shift", "--out", str(out)),
        ],
    )


@pytest.mark.parametrize("run", [_judge, _metrics], ids=["judge", "metrics"])
def test_outputs_one_level_too_high_is_one_error_line_before_any_call(tmp_path, run):
    bench = _bench(tmp_path)
    make_outputs(tmp_path / "outputs" / "run1", {"m": {"s1": Image.new("RGB", (16, 16), (1, 2, 3))}})
    result = run(bench, tmp_path / "outputs", tmp_path / "res")
    assert result.exit_code == 1, result.output
    (line,) = result.output.strip().splitlines()
    assert line.startswith("error: no output file in") and "one level too high" in line
    assert not (tmp_path / "res").exists()  # no call was made (the server address is closed), nothing written


@pytest.mark.parametrize("run", [_judge, _metrics], ids=["judge", "metrics"])
def test_a_config_with_no_sample_is_one_error_line(tmp_path, run):
    bench = _bench(tmp_path, samples=[])
    outputs = make_outputs(tmp_path / "outputs", {"m": {"s1": Image.new("RGB", (16, 16), (1, 2, 3))}})
    result = run(bench, outputs, tmp_path / "res")
    assert result.exit_code == 1, result.output
    (line,) = result.output.strip().splitlines()
    assert line.startswith("error: config 'image_to_image'") and "has no sample" in line


def test_misnamed_outputs_of_every_model_are_refused_by_judge(tmp_path):
    bench = _bench(tmp_path)
    outputs = make_outputs(tmp_path / "outputs", {"a": {"S1-final": Image.new("RGB", (8, 8))}, "b": {}})
    result = _judge(bench, outputs, tmp_path / "res")
    assert result.exit_code == 1 and "matches a sample id of config 'image_to_image'" in result.output


@pytest.mark.parametrize(
    "args, fragment",
    [
        (
            ["build", "x", "--target-modle", "a"],
            "No such option '--target-modle'. Did you mean '--target-model'?",
        ),
        (["biuld"], "No such command 'biuld'"),
        (["leaderboard", "--format", "xml"], "'xml' is not one of 'table', 'json', 'csv'"),
    ],
)
def test_usage_errors_are_one_line_naming_the_help(args, fragment):
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 2
    (line,) = result.output.strip().splitlines()
    assert line.startswith("error: ") and fragment in line and "--help')" in line


def test_a_closed_pipe_ends_quietly():
    """``echo-bench leaderboard --example | head -1``: the reader is gone. Its end of the pipe is closed before the
    command starts, so every write meets a broken pipe (deterministically)."""
    import os

    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        done = subprocess.run(
            [sys.executable, "-m", "echo_builder.cli", "leaderboard", "--example", "--n-boot", "50"],
            stdout=write_end,
            stderr=subprocess.PIPE,
            timeout=120,
        )
    finally:
        os.close(write_end)
    assert done.returncode == 0 and b"Broken pipe" not in done.stderr and b"Traceback" not in done.stderr, (
        done.stderr
    )
