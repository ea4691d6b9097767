"""Results that travel (issue 15 item 4): ``leaderboard --format markdown`` and ``leaderboard --push-to-hub``.

The Markdown table carries the text table's columns with the JSON records' values; the Hub dataset (results and
details configs, run.json, a card naming the judge snapshots and prompt versions) is staged in a folder that
``datasets.load_dataset`` reads back, and uploaded through an injectable ``HfApi`` as ``echo-bench publish`` is.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from echo_builder.cli import cli
from echo_builder.judge.leaderboard import leaderboard_from_run
from echo_builder.judge.results import (
    markdown_cell,
    push_results,
    read_run_meta,
    write_results_folder,
)
from echo_builder.judge.verdicts_file import read_verdicts, write_verdicts
from echo_builder.records import Verdict
from echo_dataset.errors import InvalidHubFolderError

ODD = "odd|name\nwith <b>html</b>"
RATINGS = {  # model -> ratings per sample s0..s5 (two judges rate alike)
    "alpha": [9, 8, 9, 7, 8, 9],
    "beta": [5, 6, 4, 6, 5, 5],
    ODD: [3, 2, 3, 4, 2, 3],
}


def _run(tmp_path: Path) -> Path:
    run = tmp_path / "run"
    run.mkdir()
    verdicts = []
    for judge, snapshot in (
        ("openai:judge-a", "judge-a-2026-01-01"),
        ("openai:judge-b", "judge-b-2026-02-02"),
    ):
        for model, ratings in RATINGS.items():
            for i, rating in enumerate(ratings):
                fields = {"status": "ok", "rating": float(rating)}
                if model == "beta" and i == 0 and judge.endswith("b"):
                    fields = {"status": "parse_failure", "raw_text": "no number", "error": "no rating"}
                verdicts.append(
                    Verdict(
                        sample_id=f"s{i}",
                        judge=judge,
                        judge_snapshot=snapshot,
                        model=model,
                        prompt_version="single-v3",
                        **fields,
                    )
                )
    write_verdicts(verdicts, run / "verdicts.parquet")
    meta = {
        "benchmark": "bench",
        "config": "image_to_image",
        "mode": "single",
        "prompt_version": "single-v3",
        "judge_prompt": {"name": "single", "version": "single-v3", "sha256": "ab" * 32},
        "echo_bench_version": "0.1.0",
        "judges": [{"spec": "openai:judge-a", "snapshots": ["judge-a-2026-01-01"]}],
    }
    (run / "run.json").write_text(json.dumps(meta), encoding="utf-8")
    return run


class FakeApi:
    """Records the calls; keeps a copy of what ``upload_folder`` would send (the CLI's staging folder is temporary)."""

    def __init__(self, keep: Path) -> None:
        self.calls: list[tuple[str, tuple, dict]] = []
        self.keep = keep

    def create_repo(self, *args, **kwargs):
        self.calls.append(("create_repo", args, kwargs))

    def upload_folder(self, **kwargs):
        from huggingface_hub.utils import filter_repo_objects

        self.calls.append(("upload_folder", (), kwargs))
        root = Path(kwargs["folder_path"])
        local = sorted(p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file())
        self.uploaded = sorted(filter_repo_objects(local, allow_patterns=kwargs["allow_patterns"]))
        for name in self.uploaded:
            (self.keep / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(root / name, self.keep / name)
        return "commit-1"


def _cli(*args: str, env: dict | None = None):
    return CliRunner().invoke(cli, ["leaderboard", *args, "--n-boot", "50"], env=env)


def _table_rows(markdown: str) -> list[list[str]]:
    """The first Markdown table's body rows, cells split on unescaped ``|``."""
    import re

    lines = markdown.split("\n")
    body = []
    for line in lines[2:]:
        if not line.startswith("|"):
            break
        cells = re.split(r"(?<!\\)\|", line.strip()[1:-1])
        body.append([c.strip() for c in cells])
    return body


def test_markdown_has_the_table_columns_and_the_json_values(tmp_path: Path) -> None:
    run = _run(tmp_path)
    result = _cli(str(run), "--format", "markdown")
    assert result.exit_code == 0, result.output
    text = result.stdout
    header = text.split("\n")[0]
    assert header == (
        "| # | model | win rate | 95% CI | Bradley-Terry | Elo | comparisons | failures | missing |"
    )
    assert text.split("\n")[1] == "|---:|:---|---:|:---|---:|---:|---:|---:|---:|"
    records = json.loads(_cli(str(run), "--format", "json").stdout)
    rows = _table_rows(text)
    assert len(rows) == len(records) == 3
    for rank, (row, record) in enumerate(zip(rows, records, strict=True), 1):
        assert row[0] == str(rank)
        assert row[2] == f"{record['win_rate']:.3f}"
        assert row[3] == f"[{record['ci_low']:.3f}, {record['ci_high']:.3f}]"
        assert row[4] == f"{record['bt_rating']:.0f}"
        assert row[6:] == [str(record["n_comparisons"]), str(record["n_failures"]), str(record["n_missing"])]
    assert [r[1] for r in rows] == ["alpha", "beta", markdown_cell(ODD)]
    # the odd name stays in its cell and row: '|' and '<' escaped, the line break shown as text
    assert markdown_cell(ODD) == "odd\\|name\\\\nwith \\<b\\>html\\</b\\>"
    assert records[1]["n_failures"] == 1 and "Judge failures and missing outputs" in text
    assert "plots:" not in text


def test_markdown_keeps_the_notes_and_undefined_numbers(tmp_path: Path) -> None:
    votes = tmp_path / "votes.jsonl"
    rows = [{"model_a": "a", "model_b": "b", "winner": "model_a"}] * 8  # b never wins: virtual ties
    votes.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    result = _cli("--votes", str(votes), "--format", "markdown", "--ci", "normal")
    assert result.exit_code == 0, result.output
    assert result.stdout.split("\n")[0].endswith("| missing | bootstrap 95% CI |")
    assert "virtual ties per model" in result.stdout and "normal approximation" in result.stdout


def test_results_folder_loads_back_with_datasets(tmp_path: Path) -> None:
    import datasets

    run = _run(tmp_path)
    board = leaderboard_from_run(run, n_boot=50)
    verdicts = read_verdicts(run)
    folder = write_results_folder(
        board, verdicts, tmp_path / "staged", run_meta=read_run_meta(run), repo_id="me/r"
    )
    results = datasets.load_dataset(str(folder), "results", cache_dir=str(tmp_path / "hf-cache"))["latest"]
    details = datasets.load_dataset(str(folder), "details", cache_dir=str(tmp_path / "hf-cache"))["latest"]
    assert results.num_rows == 3 and details.num_rows == len(verdicts) == 36
    assert results["model"] == list(board.table["model"]) and results["rank"] == [1, 2, 3]
    assert results["win_rate"] == pytest.approx(list(board.table["win_rate"]))
    assert results["ci_low"] == pytest.approx(list(board.table["ci_low"]))
    assert results["bt_rating"] == pytest.approx(list(board.table["bt_rating"]))
    assert results["n_failures"] == [0, 1, 0]
    assert results["judges"][0] == ["openai:judge-a", "openai:judge-b"]
    assert results["judge_snapshots"][0] == [
        "openai:judge-a=judge-a-2026-01-01",
        "openai:judge-b=judge-b-2026-02-02",
    ]
    assert results["prompt_versions"][0] == ["single-v3"] and results["config"][0] == "image_to_image"
    assert details.column_names == list(Verdict.model_fields)
    assert sorted(details["status"]).count("parse_failure") == 1
    assert [Verdict.model_validate(row) for row in details] == verdicts
    card = (folder / "README.md").read_text(encoding="utf-8")
    meta = yaml.safe_load(card.split("---\n")[1])
    assert [c["config_name"] for c in meta["configs"]] == ["results", "details"]
    for text in ("judge-a-2026-01-01", "judge-b-2026-02-02", "`single-v3`", "ab" * 32, "load_dataset('me/r'"):
        assert text in card
    assert json.loads((folder / "run.json").read_text())["config"] == "image_to_image"
    with pytest.raises(Exception, match="new or empty folder"):
        write_results_folder(board, verdicts, folder)


def test_push_results_through_an_injected_api(tmp_path: Path) -> None:
    run = _run(tmp_path)
    board = leaderboard_from_run(run, n_boot=50)
    folder = write_results_folder(board, read_verdicts(run), tmp_path / "staged", run_meta=read_run_meta(run))
    api = FakeApi(tmp_path / "hub")
    assert push_results(folder, "me/results", api=api, private=True) == "commit-1"
    assert api.calls[0] == (
        "create_repo",
        ("me/results",),
        {"repo_type": "dataset", "exist_ok": True, "private": True},
    )
    upload = api.calls[1][2]
    assert upload["repo_id"] == "me/results" and upload["repo_type"] == "dataset"
    assert upload["delete_patterns"] == ["results/*.parquet", "details/*.parquet"]
    assert api.uploaded == [
        "README.md",
        "details/latest-00000-of-00001.parquet",
        "results/latest-00000-of-00001.parquet",
        "run.json",
    ]
    for bad in ("results", "me/results/x", "me/../x", "me/na me", "-me/x"):
        with pytest.raises(InvalidHubFolderError, match="owner/name"):
            push_results(folder, bad, api=api)
    assert len(api.calls) == 2


def test_cli_push_to_hub(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import datasets
    import huggingface_hub

    run = _run(tmp_path)
    api = FakeApi(tmp_path / "hub")
    made: list[dict] = []
    monkeypatch.setattr(huggingface_hub, "HfApi", lambda **kw: made.append(kw) or api)
    result = _cli(
        str(run), "--push-to-hub", "me/results", "--token-env", "MY_TOKEN", env={"MY_TOKEN": "hf_x"}
    )
    assert result.exit_code == 0, result.output
    assert made == [{"token": "hf_x"}]
    assert (
        "pushed the results" in result.output
        and "https://huggingface.co/datasets/me/results" in result.output
    )
    loaded = datasets.load_dataset(str(tmp_path / "hub"), "results", cache_dir=str(tmp_path / "hf-cache"))[
        "latest"
    ]
    assert loaded["model"][0] == "alpha" and loaded.num_rows == 3
    # the validity card travels with the results: judge-b could not be parsed on beta's s0 (1 of 6)
    assert {"validity.json", "validity.md"} <= set(api.uploaded)
    card = json.loads((tmp_path / "hub" / "validity.json").read_text())
    rows = {(r["model"], r["judge"]): r for r in card["failures"]}
    assert rows[("beta", "openai:judge-b")]["failure_rate"] == pytest.approx(1 / 6)
    assert rows[("beta", "openai:judge-a")]["failure_rate"] == 0.0
    assert [j["snapshots"] for j in card["judges"]] == [["judge-a-2026-01-01"], ["judge-b-2026-02-02"]]
    assert (run / "validity.json").is_file()  # and the run folder keeps its own copy
    assert (
        "`validity.md` (and `validity.json`) is the validity card"
        in (tmp_path / "hub" / "README.md").read_text()
    )
    # json stays parseable: the note goes to stderr
    again = _cli(str(run), "--format", "json", "--push-to-hub", "me/results", env={"HF_TOKEN": "hf_y"})
    assert again.exit_code == 0 and len(json.loads(again.stdout)) == 3
    assert made[-1] == {"token": "hf_y"}
    # ratings files have verdicts too
    ratings = tmp_path / "ratings.csv"
    ratings.write_text("question_id,model,score\nq1,a,3\nq1,b,5\nq2,a,4\nq2,b,2\n", encoding="utf-8")
    third = _cli("--ratings", str(ratings), "--push-to-hub", "me/r2", env={"HF_TOKEN": "hf_y"})
    assert third.exit_code == 0, third.output


@pytest.mark.parametrize(
    ("args", "env", "message"),
    [
        (["--push-to-hub", "not-a-repo"], {"HF_TOKEN": "t"}, "owner/name"),
        (["--push-to-hub", "me/x", "--token-env", "NOPE"], {}, "NOPE is not set"),
        (["--push-to-hub", "me/x"], {}, "needs a Hugging Face token"),
        (["--private"], {}, "apply to --push-to-hub only"),
    ],
)
def test_cli_push_errors_before_any_work(tmp_path: Path, monkeypatch, args, env, message) -> None:
    import huggingface_hub

    monkeypatch.setattr(huggingface_hub, "HfApi", lambda **kw: pytest.fail("no Hub client may be made"))
    monkeypatch.setattr(huggingface_hub, "get_token", lambda: None)
    result = _cli(str(_run(tmp_path)), *args, env={"NOPE": "", **env})
    assert result.exit_code != 0
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and message in lines[0], result.output
    assert "Traceback" not in result.output


def test_cli_push_needs_verdicts(tmp_path: Path) -> None:
    result = _cli("--example", "--push-to-hub", "me/x", env={"HF_TOKEN": "t"})
    assert result.exit_code != 0 and "give a judge RUN or --ratings" in result.output


def test_published_metadata_names_no_local_user(tmp_path: Path) -> None:
    """Absolute local paths in run.json become their last component; the home folder in a verdict's error is ``~``."""
    import datasets

    run = _run(tmp_path)
    meta = read_run_meta(run)
    meta["benchmark"] = "/home/alice/builds/lumen"
    meta["judge_prompt"]["source"] = "/home/alice/prompts/mine.yaml"
    meta["base_url"] = "http://127.0.0.1:8000/v1"
    verdicts = read_verdicts(run)
    home = str(Path.home())
    verdicts[0] = verdicts[0].model_copy(
        update={"status": "error", "rating": None, "error": f"cannot read {home}/outputs/alpha/s0.png"}
    )
    board = leaderboard_from_run(run, n_boot=20)
    folder = write_results_folder(board, verdicts, tmp_path / "staged", run_meta=meta)
    published = json.loads((folder / "run.json").read_text())
    assert published["benchmark"] == "lumen" and published["judge_prompt"]["source"] == "mine.yaml"
    assert published["base_url"] == "http://127.0.0.1:8000/v1" and published["config"] == "image_to_image"
    assert (
        datasets.load_dataset(str(folder), "results", cache_dir=str(tmp_path / "hf-cache"))["latest"][
            "benchmark"
        ]
        == ["lumen"] * 3
    )
    errors = [
        e
        for e in datasets.load_dataset(str(folder), "details", cache_dir=str(tmp_path / "hf-cache"))[
            "latest"
        ]["error"]
        if e
    ]
    assert errors[0] == "cannot read ~/outputs/alpha/s0.png"
    card = (folder / "README.md").read_text(encoding="utf-8")
    assert "/home/alice" not in card and home not in card


def test_cli_push_network_failure_is_one_error_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import huggingface_hub

    class Down(FakeApi):
        def upload_folder(self, **kwargs):
            raise ConnectionError("Connection refused")

    api = Down(tmp_path / "hub")
    monkeypatch.setattr(huggingface_hub, "HfApi", lambda **kw: api)
    result = _cli(str(_run(tmp_path)), "--push-to-hub", "me/x", env={"HF_TOKEN": "hf_secret_value"})
    lines = result.output.strip().splitlines()
    assert result.exit_code == 1 and lines[-1].startswith(
        "error: the Hugging Face Hub at huggingface.co failed"
    )
    assert "uploading the results to me/x" in lines[-1] and "nothing was published" in lines[-1]
    assert "Traceback" not in result.output and "hf_secret_value" not in result.output
