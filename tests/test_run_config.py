"""``--run-config FILE`` on build, judge, metrics and generate (issue 15 item 4): the long option names as keys,
values as on the command line, the command line wins, and every problem is one ``error:`` line naming the file and
the key. (``--config`` stays the benchmark config of judge, metrics and generate.)"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from echo_builder.cli import cli
from echo_builder.judge.verdicts_file import read_verdicts
from tests.test_judge_runs import _judge_args, bench, scripted_judges  # noqa: F401 - bench is a fixture

COMMANDS = ("build", "judge", "metrics", "generate")


def _context(command: str, args: list[str]):
    """The command's parsed parameters (click's own parsing, nothing is run)."""
    return cli.commands[command].make_context(command, args)


def _write(tmp_path: Path, text: str | bytes, name: str = "run.yaml") -> Path:
    path = tmp_path / name
    path.write_bytes(text if isinstance(text, bytes) else text.encode("utf-8"))
    return path


def test_every_command_has_run_config_and_keeps_config() -> None:
    for command in COMMANDS:
        opts = {o for p in cli.commands[command].params for o in p.opts}
        assert "--run-config" in opts, command
    for command in ("judge", "metrics", "generate"):
        config = next(p for p in cli.commands[command].params if "--config" in p.opts)
        assert config.name == "config_name"  # the benchmark config, as before


def test_values_reach_build(tmp_path: Path) -> None:
    (tmp_path / "posts").mkdir()
    path = _write(
        tmp_path,
        f"""
sources: [{tmp_path / "posts"}]
out: {tmp_path / "out"}
backend: openai:gpt-4o
option: {{temperature: 0, base_url: "http://127.0.0.1:9/v1"}}
target-model: Lumen-2
launch_date: 2025-06-10        # YAML reads a date; the option gets the text
threshold: 3
timeout: 30.5
max-attempts: 2
offline: true
no-pseudonymize: true
media-allow: 127.0.0.1:8000
""",
    )
    params = _context("build", ["--run-config", str(path)]).params
    assert params["sources"] == (str(tmp_path / "posts"),) and params["out_dir"] == str(tmp_path / "out")
    assert params["options"] == ("temperature=0", "base_url=http://127.0.0.1:9/v1")
    assert params["launch_date"] == "2025-06-10" and params["target_model"] == "Lumen-2"
    assert (params["threshold"], params["timeout_s"], params["max_attempts"]) == (3, 30.5, 2)
    assert params["offline"] is True and params["pseudonymize"] is False
    assert params["media_allow"] == ("127.0.0.1:8000",) and params["backend"] == "openai:gpt-4o"
    assert params["concurrency"] == 8  # not in the file: the option's default


def test_values_reach_judge_metrics_and_generate(tmp_path: Path) -> None:
    judge = _write(
        tmp_path,
        "benchmark: b\nconfig: image_to_image\noutputs: o\njudge: [openai:a, openai:b]\nmode: pairwise\nout: r\n"
        "concurrency: 4\nlimit: 10\n",
    )
    params = _context("judge", ["--run-config", str(judge)]).params
    assert params["judges"] == ("openai:a", "openai:b") and params["config_name"] == "image_to_image"
    assert (params["mode"], params["out_dir"], params["concurrency"], params["limit"]) == (
        "pairwise",
        "r",
        4,
        10,
    )
    metrics = _write(
        tmp_path,
        "benchmark: b\nconfig: image_to_image\noutputs: o\nmetric: color_shift\nout: m\nformat: csv\n",
        "m.yaml",
    )
    params = _context("metrics", ["--run-config", str(metrics)]).params
    assert params["metric_names"] == ("color_shift",) and params["table_format"] == "csv"
    generate = _write(
        tmp_path,
        '{"benchmark": "b", "config": "text_to_image", "model": "diffusers:x", "name": "x", "out": "g", '
        '"seed": 7, "option": ["steps=4", "dtype=float16"], "retry-refused": true}',  # JSON is YAML too
        "g.json",
    )
    params = _context("generate", ["--run-config", str(generate)]).params
    assert params["options"] == ("steps=4", "dtype=float16") and params["seed"] == 7
    assert params["retry_refused"] is True and params["model_spec"] == "diffusers:x"


def test_the_command_line_wins(tmp_path: Path) -> None:
    path = _write(
        tmp_path, "benchmark: b\nconfig: c\noutputs: o\njudge: [openai:a]\nout: r\nconcurrency: 4\n"
    )
    params = _context(
        "judge", ["--out", "cli-run", "--run-config", str(path), "--judge", "openai:z", "--concurrency", "2"]
    ).params
    assert params["out_dir"] == "cli-run" and params["judges"] == ("openai:z",) and params["concurrency"] == 2
    assert params["benchmark"] == "b"


NUMBER = {"build": "concurrency", "judge": "concurrency", "generate": "limit", "metrics": None}
FLAG = {"build": "offline", "generate": "retry-refused", "judge": None, "metrics": None}
TWO_SPELLINGS = {
    "build": "max-attempts",
    "judge": "max-attempts",
    "metrics": "judge-prompt",
    "generate": "base-url",
}


def _bad(command: str, case: str) -> tuple[str | bytes, str] | None:
    """(file content, expected words) of each kind of bad run config for ``command``; None: it has no such option."""
    number, flag, two = NUMBER[command], FLAG[command], TWO_SPELLINGS[command]
    cases: dict[str, tuple[str | bytes, str] | None] = {
        "unknown key": ("out: a\nconfg: x\n", "unknown key 'confg'"),
        "list for one value": ("out: [a, b]\n", "key 'out': expected one value"),
        "mapping for one value": ("out: {a: 1}\n", "key 'out': expected one value"),
        "text for a number": (f"{number}: many\n", f"key '{number}': --{number}: 'many' is not accepted")
        if number
        else None,
        "out of range": (f"{number}: 0\n", f"key '{number}': --{number}: '0' is not accepted")
        if number
        else None,
        "nan": (f"{number}: .nan\n", f"key '{number}': expected a finite number") if number else None,
        "not a choice": ("format: xlsx\n", "key 'format': ") if command in ("build", "metrics") else None,
        "flag as text": (f"{flag}: yes please\n", f"key '{flag}': expected true or false") if flag else None,
        "true for text": ("out: true\n", "key 'out': expected a string or a number"),
        "same option twice": (f"out: a\n{two}: 2\n{two.replace('-', '_')}: 3\n", "set the same option"),
        "duplicate key": ("out: a\nout: b\n", "key 'out' is given twice"),
        "not a mapping": ("- out\n", "expected a mapping"),
        "not YAML": ("out: [a\n", "not valid YAML at line 2"),
        "not UTF-8": (b"out: caf\xe9\n", "not UTF-8"),
        "key not a name": ("1: a\n", "key 1 is not an option name"),
    }
    return cases[case]


CASES = (
    "unknown key",
    "list for one value",
    "mapping for one value",
    "text for a number",
    "out of range",
    "nan",
    "not a choice",
    "flag as text",
    "true for text",
    "same option twice",
    "duplicate key",
    "not a mapping",
    "not YAML",
    "not UTF-8",
    "key not a name",
)


@pytest.mark.parametrize("command", COMMANDS)
@pytest.mark.parametrize("case", CASES)
def test_a_bad_file_is_one_error_line(tmp_path: Path, command: str, case: str) -> None:
    bad = _bad(command, case)
    if bad is None:
        pytest.skip(f"{command} has no option of this kind")
    text, message = bad
    path = _write(tmp_path, text)
    result = CliRunner().invoke(cli, [command, "--run-config", str(path)])
    lines = result.output.strip().splitlines()
    assert result.exit_code == 1 and len(lines) == 1, result.output
    assert lines[0].startswith(f"error: --run-config {path}: ") and message in lines[0], lines[0]
    assert "Traceback" not in result.output


@pytest.mark.parametrize("command", COMMANDS)
def test_an_unreadable_file_is_one_error_line(tmp_path: Path, command: str) -> None:
    big = _write(tmp_path, "# " + "x" * (1 << 20) + "\n", "big.yaml")
    for path, message in (
        (big, "larger than"),
        (tmp_path / "absent.yaml", "cannot read the file"),
        (tmp_path, "is a folder"),
    ):
        result = CliRunner().invoke(cli, [command, "--run-config", str(path)])
        assert result.exit_code == 1 and result.output.count("\n") == 1, result.output
        assert result.output.startswith(f"error: --run-config {path}: ") and message in result.output


def test_judge_records_the_run_config(bench, openai_server, tmp_path: Path) -> None:  # noqa: F811
    openai_server.reply = scripted_judges
    folder, outputs = bench
    path = _write(
        tmp_path,
        f"benchmark: {folder}\nconfig: text_to_image\noutputs: {outputs}\njudge: [openai:judge2]\n"
        f"base-url: {openai_server.base_url}\nout: {tmp_path / 'from-file'}\nconcurrency: 2\n",
    )
    result = CliRunner().invoke(cli, ["judge", "--run-config", str(path), "--out", str(tmp_path / "run")])
    assert result.exit_code == 0, result.output
    assert not (tmp_path / "from-file").exists()
    run = json.loads((tmp_path / "run" / "run.json").read_text())
    record = run["run_config"]
    assert record["file"] == str(path) and len(record["sha256"]) == 64
    assert record["values"]["judge"] == ["openai:judge2"] and record["values"]["concurrency"] == 2
    assert record["overridden"] == ["out"]
    # the same run from the command line alone writes the same verdicts and no run_config
    again = CliRunner().invoke(cli, _judge_args(bench, openai_server, tmp_path / "plain", ["judge2"]))
    assert again.exit_code == 0, again.output
    assert "run_config" not in json.loads((tmp_path / "plain" / "run.json").read_text())
    plain, configured = read_verdicts(tmp_path / "plain"), read_verdicts(tmp_path / "run")
    assert [v.model_dump(exclude={"latency_s"}) for v in plain] == [
        v.model_dump(exclude={"latency_s"}) for v in configured
    ]


def test_the_docs_examples_use_only_known_keys() -> None:
    """Each command's example in docs/run-config.md is a mapping of known keys with command-line-shaped values."""
    import re

    import yaml

    from echo_builder.commands.options import _run_config_keys, _run_config_value
    from tests.conftest import REPO_ROOT

    text = (REPO_ROOT / "docs" / "run-config.md").read_text(encoding="utf-8")
    for command in COMMANDS:
        block = re.search(rf"## {command}\n\n```yaml\n(.*?)```", text, re.S)
        assert block, command
        data = yaml.safe_load(block.group(1))
        keys = _run_config_keys(cli.commands[command])
        assert set(data) <= set(keys), (command, set(data) - set(keys))
        for key, value in data.items():
            param, inverted = keys[key]
            _run_config_value("docs", key, param, inverted, value)


def test_build_records_the_run_config_and_leaves_other_reports_alone(tmp_path: Path) -> None:
    """A rules build from a run config: report.json gains ``run_config``; the same build from the command line
    writes a report without it (builds without a run config are unchanged)."""
    from echo_builder.examples import demo

    exports = Path(demo.__file__).parent / "exports"
    path = _write(
        tmp_path,
        f"sources: [{exports}]\nout: {tmp_path / 'b1'}\ntarget-model: Lumen-2\nlaunch_date: 2025-06-10\n"
        "offline: true\n",
    )
    result = CliRunner().invoke(cli, ["build", "--run-config", str(path)])
    assert result.exit_code == 0, result.output
    report = json.loads((tmp_path / "b1" / "report.json").read_text(encoding="utf-8"))
    assert report["run_config"]["values"] == {
        "sources": [str(exports)],
        "out": str(tmp_path / "b1"),
        "target-model": "Lumen-2",
        "launch-date": "2025-06-10",
        "offline": True,
    }
    assert report["run_config"]["overridden"] == []
    plain = CliRunner().invoke(
        cli,
        ["build", str(exports), "--out", str(tmp_path / "b2"), "--target-model", "Lumen-2", "--launch-date",
         "2025-06-10", "--offline"],
    )  # fmt: skip
    assert plain.exit_code == 0, plain.output
    report2 = json.loads((tmp_path / "b2" / "report.json").read_text(encoding="utf-8"))
    assert "run_config" not in report2

    # the same build either way (the pseudonym salt is random per build, so the counts are compared)
    def counts(r: dict) -> list:
        return [(e["name"], e["in"], e["out"], e["failures"]) for e in r["stages"]]

    assert counts(report) == counts(report2) and counts(report)[-1][2] == 6
