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

import click
import pytest
from click.testing import CliRunner
from PIL import Image

from echo_builder.cli import cli
from echo_builder.commands.options import EchoCommand, EchoGroup, refuse_repeated_options
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


def _command_tree(group: click.Group = cli, path: tuple[str, ...] = ()):
    """``(path, command)`` of the CLI group itself and of every command and subgroup under it."""
    if not path:
        yield (), group
    ctx = click.Context(group)
    for name in group.list_commands(ctx):
        command = group.get_command(ctx, name)
        yield (*path, name), command
        if isinstance(command, click.Group):
            yield from _command_tree(command, (*path, name))


def _options(repeatable: bool):
    """``(path, option)`` of every option (but --help) of every command that may (``repeatable``) or may not be
    given twice."""
    found = []
    for path, command in _command_tree():
        ctx = click.Context(command)
        for param in command.get_params(ctx):
            if not isinstance(param, click.Option) or param is command.get_help_option(ctx):
                continue
            if bool(param.multiple or param.count) == repeatable:
                found.append(pytest.param(path, param, id=" ".join([*path, max(param.opts, key=len)])))
    return found


def _given_once(param: click.Option) -> list[str]:
    spelling = max(param.opts, key=len)
    return [spelling] if param.is_flag or param.count else [spelling, *(f"v{i}" for i in range(param.nargs))]


def test_every_command_and_group_refuses_a_repeated_single_value_option():
    kinds = {" ".join(path) or "echo-bench": type(command) for path, command in _command_tree()}
    assert len(kinds) > 20 and "metrics" in kinds and "collect x" in kinds
    assert {name for name, kind in kinds.items() if not issubclass(kind, (EchoCommand, EchoGroup))} == set()


@pytest.mark.parametrize("path, param", _options(repeatable=False))
def test_a_single_value_option_given_twice_is_one_usage_error_naming_it(path, param):
    """click keeps the last of two ``--base-url`` (or ``--out``, ``--seed``...) silently; every such option is
    refused while the command line is parsed, before a required option or argument is even looked at."""
    result = CliRunner().invoke(
        cli, [*path, *_given_once(param), *_given_once(param)], prog_name="echo-bench"
    )
    assert result.exit_code == 2, result.output
    (line,) = result.output.strip().splitlines()
    spelling = "/".join([*param.opts, *param.secondary_opts])
    assert line.startswith(f"error: option {spelling} is given 2 times, but ")
    assert line.endswith(f"give it once (see '{' '.join(['echo-bench', *path])} --help')")


@pytest.mark.parametrize("path, param", _options(repeatable=True))
def test_repeatable_options_may_repeat(path, param):
    command = cli
    for name in path:
        command = command.get_command(click.Context(command), name)
    ctx = click.Context(command)
    refuse_repeated_options(command, ctx, [*_given_once(param), *_given_once(param), *_given_once(param)])


@pytest.mark.parametrize(
    "args, spelling",
    [
        (["metrics", "--base-url", "http://a/v1", "--base-url=http://b/v1"], "--base-url"),
        (
            ["build", "posts", "--pseudonymize", "--out", "x", "--no-pseudonymize"],
            "--pseudonymize/--no-pseudonymize",
        ),
        (
            ["analyze", "x", "--base-url", "http://a/v1", "--base-url", "http://a/v1"],
            "--base-url",
        ),
        (["agreement", "run", "--seed", "1", "--seed", "2", "--seed", "3"], "--seed"),
        (["--version", "-V"], "--version/-V"),
    ],
)
def test_repeats_are_counted_in_every_spelling(args, spelling):
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 2
    (line,) = result.output.strip().splitlines()
    times = 3 if "--seed" in args else 2
    assert line.startswith(f"error: option {spelling} is given {times} times"), line


def test_judge_replicas_and_run_config_values_are_no_repeat(tmp_path):
    """judge's --base-url is repeatable (replicas); a --run-config key is a default the command line overrides."""
    judge = cli.get_command(click.Context(cli), "judge")
    refuse_repeated_options(
        judge, click.Context(judge), ["--base-url", "a", "--base-urls", "b", "--base-url=c"]
    )
    config = tmp_path / "run.yaml"
    config.write_text("base-url: http://127.0.0.1:9/v1\nout: elsewhere\n")
    result = CliRunner().invoke(
        cli,
        [
            *("metrics", "--run-config", str(config), "--base-url", "http://127.0.0.1:8/v1"),
            *(
                "--benchmark",
                str(tmp_path / "none"),
                "--config",
                "c",
                "--outputs",
                "o",
                "--out",
                str(tmp_path),
            ),
        ],
    )
    assert (
        "given 2 times" not in result.output and "none" in result.output
    )  # got past parsing, to the benchmark


def test_help_is_shown_even_with_a_repeated_option():
    result = CliRunner().invoke(cli, ["metrics", "--base-url", "a", "--base-url", "b", "--help"])
    assert result.exit_code == 0 and result.output.startswith("Usage: cli metrics")


@pytest.mark.parametrize("args", [["--bogus"], ["-V", "--version"]])
def test_usage_errors_of_the_group_itself_are_one_line(args):
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 2
    (line,) = result.output.strip().splitlines()
    assert line.startswith("error: ") and line.endswith("(see 'cli --help')")


@pytest.mark.parametrize(
    "args",
    [["build", "--help"], ["collect", "x", "--help"], ["estimate", "build", "--help"]],
    ids=["build", "collect", "estimate"],
)
def test_keywords_help_names_every_accepted_key(args):
    from echo_builder.stages.query import KEYWORD_KEYS

    result = CliRunner().invoke(cli, args)
    text = " ".join(result.output.split())
    assert result.exit_code == 0 and "before_days" in KEYWORD_KEYS
    assert [key for key in KEYWORD_KEYS if f" {key}" not in text] == []


@pytest.mark.parametrize(
    "path, option",
    [
        (("leaderboard",), "--votes"),
        (("leaderboard",), "--human"),
        (("agreement",), "--human"),
        (("export-pairs",), "--human"),
    ],
)
def test_every_votes_option_names_the_file_types_and_every_winner_label(path, option):
    from echo_builder.stats import WINNER_LABELS

    command = cli
    for name in path:
        command = command.get_command(click.Context(command), name)
    (param,) = [p for p in command.params if option in getattr(p, "opts", ())]
    assert "JSON list, JSON Lines or CSV" in param.help
    assert sorted(label for label in WINNER_LABELS if f"{label}" not in param.help) == []


def test_estimate_build_refuses_an_unknown_source_format_while_parsing(tmp_path):
    posts = tmp_path / "posts.jsonl"
    posts.write_text("{}\n")
    result = CliRunner().invoke(
        cli, ["estimate", "build", str(posts), "--backend", "openai:m", "--format", "xml"]
    )
    assert result.exit_code == 1
    (line,) = result.output.strip().splitlines()
    assert line.startswith(
        "error: --format: 'xml' is not a registered source format; choose from jsonl, x_api"
    )


@pytest.mark.parametrize(
    "spec, accepted",
    [
        ("command:echo", "timeout_s, concurrency, env"),
        ("openai-images:gpt-image-1", "base_url, api_key, size, quality"),
    ],
)
def test_an_unknown_generator_option_lists_the_accepted_ones(spec, accepted):
    from echo_builder.errors import ConfigError
    from echo_builder.generate import create_generator

    with pytest.raises(ConfigError) as caught:
        create_generator(spec, bogus=1)
    assert f"bogus: unknown option (accepted: {accepted}" in str(caught.value)


def test_an_unknown_backend_option_lists_the_options_taken_before_the_model_too():
    from echo_builder.backends import create_backend
    from echo_builder.backends.openai_backend import OpenAIConfig
    from echo_builder.errors import ConfigError

    with pytest.raises(ConfigError) as caught:
        create_backend("openai:m", temprature=0)
    listed = str(caught.value).split("(accepted: ", 1)[1].rstrip(")").split(", ")
    assert str(caught.value).startswith(
        "invalid options for openai:m: temprature: unknown option (accepted: "
    )
    assert set(listed) == {
        *OpenAIConfig.model_fields,
        "base_urls",
        "temperature",
        "top_p",
        "max_tokens",
        "seed",
        "box_format",
    }
