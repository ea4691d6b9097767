"""``leaderboard RUN --by task`` (win rates per task, small groups flagged) and ``--by metrics=DIR`` (the judge's
win rates beside the community metrics), on a judge run against a scripted loopback judge."""

from __future__ import annotations

import json
import re

import pytest
from click.testing import CliRunner
from PIL import Image

from echo_builder.cli import cli
from echo_builder.judge.by_task import (
    LABELLING_FAILED,
    joined_table,
    leaderboard_by_task,
    parse_by,
    read_task_labels,
)
from tests.helpers.benchmark import make_benchmark, make_outputs
from tests.test_judge import BLUE, GREEN, RED, _dominant, _images

RECEIPTS = [f"a receipt from diner {i} with a total of ${i}.50" for i in range(12)]
POSTERS = [f"a poster of planet {i} that reads VISIT" for i in range(3)]


def _cli(*args):
    return CliRunner().invoke(cli, [str(a) for a in args], catch_exceptions=False)


def judge_reply(body):
    """Prefers green on receipts and red on posters: each model wins exactly one task."""
    text = "".join(
        p.get("text", "")
        for m in body["messages"]
        if isinstance(m["content"], list)
        for p in m["content"]
        if p["type"] == "text"
    )
    likes = "green" if "receipt" in text else "red"
    return f"[[{8 if _dominant(_images(body)[-1]) == likes else 3}]]"


def _receipts_and_posters(tmp_path):
    """The test benchmark: receipt and poster prompts with ids s00, s01, ... (the ids and the folder)."""
    prompts = RECEIPTS + POSTERS
    ids = [f"s{i:02d}" for i in range(len(prompts))]
    bench = make_benchmark(
        tmp_path / "bench",
        "text_to_image",
        [{"id": s, "prompt": p} for s, p in zip(ids, prompts, strict=True)],
    )
    return ids, bench


@pytest.fixture
def run(tmp_path, openai_server):
    ids, bench = _receipts_and_posters(tmp_path)
    outputs = make_outputs(
        tmp_path / "outputs",
        {
            "green": {s: Image.new("RGB", (32, 32), GREEN) for s in ids},
            "red": {s: Image.new("RGB", (32, 32), RED) for s in ids},
        },
    )
    openai_server.reply = judge_reply
    out = tmp_path / "run"
    result = _cli(
        "judge",
        "--benchmark",
        bench,
        "--config",
        "text_to_image",
        "--outputs",
        outputs,
        "--judge",
        "openai:j",
        "--base-url",
        openai_server.base_url,
        "--out",
        out,
    )
    assert result.exit_code == 0, result.output
    return out, bench


def test_win_rates_by_task_with_intervals_and_small_groups_flagged(run):
    out, _ = run
    table = leaderboard_by_task(out, None, min_prompts=10, n_boot=200)  # rules labels of the run's benchmark
    rows = {(r.task, r.model): r for r in table.itertuples()}
    assert (
        rows[("document_generation", "green")].win_rate == 1.0
        and rows[("document_generation", "red")].win_rate == 0.0
    )
    assert (
        rows[("text_rendering", "red")].win_rate == 1.0 and rows[("text_rendering", "green")].win_rate == 0.0
    )
    assert (
        rows[("document_generation", "green")].n_prompts == 12
        and not rows[("document_generation", "green")].small
    )
    assert rows[("text_rendering", "red")].n_prompts == 3 and rows[("text_rendering", "red")].small
    for r in table.itertuples():
        assert r.ci_low <= r.win_rate <= r.ci_high
    assert list(table["task"].unique()) == ["document_generation", "text_rendering"]  # larger task first


def test_by_task_from_an_analysis_folder_and_the_cli(run, tmp_path):
    out, bench = run
    analysis = tmp_path / "analysis"
    assert _cli("analyze", bench, "--out", analysis, "--n-boot", "20").exit_code == 0
    labels = read_task_labels(analysis)
    assert sum(1 for t in labels.values() if t == "document_generation") == 12
    result = _cli("leaderboard", out, "--by", f"task={analysis}", "--format", "json", "--n-boot", "100")
    assert result.exit_code == 0, result.output
    rows = json.loads(result.stdout)["task"]
    green = next(r for r in rows if r["task"] == "document_generation" and r["model"] == "green")
    assert green["win_rate"] == 1.0 and green["small"] is False and green["n_prompts"] == 12
    table = _cli("leaderboard", out, "--by", "task", "--n-boot", "100")
    assert table.exit_code == 0 and "text_rendering" in table.stdout and " *" in table.stdout


def _score(prompt: str, colour: str) -> int:
    """A scripted judge's rating with ties and no model winning everything: a function of the prompt's number."""
    i = int(re.search(r"(?:diner|planet) (\d+)", prompt)[1])
    return {"green": (i * 7) % 4 + 3, "red": (i * 5) % 4 + 3, "blue": 4}[colour]


def test_by_task_equals_an_independent_count_with_ties_and_three_models(tmp_path, openai_server):
    ids, bench = _receipts_and_posters(tmp_path)
    colours = {"green": GREEN, "red": RED, "blue": BLUE}
    outputs = make_outputs(
        tmp_path / "outputs", {m: {s: Image.new("RGB", (32, 32), c) for s in ids} for m, c in colours.items()}
    )

    def reply(body):
        text = "".join(
            p.get("text", "")
            for m in body["messages"]
            if isinstance(m["content"], list)
            for p in m["content"]
            if p["type"] == "text"
        )
        return f"[[{_score(text, _dominant(_images(body)[-1]))}]]"

    openai_server.reply = reply
    run_dir = tmp_path / "run"
    judged = _cli(
        "judge", "--benchmark", bench, "--config", "text_to_image", "--outputs", outputs,
        "--judge", "openai:j", "--base-url", openai_server.base_url, "--out", run_dir,
    )  # fmt: skip
    assert judged.exit_code == 0, judged.output
    result = _cli("leaderboard", run_dir, "--by", "task", "--format", "json", "--n-boot", "300")
    assert result.exit_code == 0, result.output
    rows = json.loads(result.stdout)["task"]
    # independent: every pair of models on every prompt of the task, ties half
    groups = {"document_generation": RECEIPTS, "text_rendering": POSTERS}
    expected = {}
    for task, group in groups.items():
        for model in colours:
            points = comparisons = 0
            for prompt in group:
                for other in colours:
                    if other != model:
                        mine, theirs = _score(prompt, model), _score(prompt, other)
                        points += 1.0 if mine > theirs else 0.5 if mine == theirs else 0.0
                        comparisons += 1
            expected[(task, model)] = (points / comparisons, comparisons, len(group))
    got = {(r["task"], r["model"]): (r["win_rate"], r["n_comparisons"], r["n_prompts"]) for r in rows}
    assert got.keys() == expected.keys()
    for key, (rate, comparisons, n_prompts) in expected.items():
        assert got[key][0] == pytest.approx(rate) and got[key][1:] == (comparisons, n_prompts), key
    assert 0.0 < min(r for r, _, _ in expected.values()) < max(r for r, _, _ in expected.values()) < 1.0
    for r in rows:
        assert r["ci_low"] <= r["win_rate"] <= r["ci_high"] and r["ci_low"] < r["ci_high"]
        assert r["small"] is (r["n_prompts"] < 10)


def test_min_prompts_sets_the_small_group_threshold(run):
    out, _ = run

    def small(*args):
        result = _cli("leaderboard", out, "--by", "task", "--format", "json", "--n-boot", "50", *args)
        assert result.exit_code == 0, result.output
        return {r["task"]: (r["n_prompts"], r["small"]) for r in json.loads(result.stdout)["task"]}

    # receipts: 12 prompts, posters: 3
    assert small() == {"document_generation": (12, False), "text_rendering": (3, True)}
    assert small("--min-prompts", "13") == {"document_generation": (12, True), "text_rendering": (3, True)}
    assert small("--min-prompts", "3") == {"document_generation": (12, False), "text_rendering": (3, False)}
    text = _cli("leaderboard", out, "--by", "task", "--n-boot", "50", "--min-prompts", "13")
    assert "fewer than 13 prompts" in text.stdout and text.stdout.count(" *\n") == 4


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["--min-prompts", "5"], "--min-prompts applies to --by task only"),
        (["--by", "metrics=m", "--min-prompts", "5"], "--min-prompts applies to --by task only"),
        (["--by", "task", "--min-prompts", "0"], "--min-prompts"),
        (["--by", "task", "--ci", "normal"], "--ci normal and --bootstrap-judges apply to the plain"),
        (["--by", "task", "--bootstrap-judges"], "--ci normal and --bootstrap-judges apply to the plain"),
    ],
)
def test_by_options_that_would_be_ignored_are_refused(run, args, fragment):
    out, _ = run
    result = CliRunner().invoke(cli, ["leaderboard", str(out), *args])
    assert result.exit_code != 0 and fragment in result.output, result.output


def test_joined_table_puts_metrics_beside_win_rates(run, tmp_path):
    out, _ = run
    metrics = tmp_path / "metrics"
    metrics.mkdir()
    summary = [
        {
            "model": "green",
            "metric": "color_shift",
            "mean": 3.5,
            "n": 12,
            "n_nan": 3,
            "higher_is_better": False,
        },
        {
            "model": "red",
            "metric": "color_shift",
            "mean": 40.25,
            "n": 11,
            "n_nan": 4,
            "higher_is_better": False,
        },
        {
            "model": "red",
            "metric": "text_rendering",
            "mean": None,
            "n": 0,
            "n_nan": 15,
            "higher_is_better": True,
        },
    ]
    (metrics / "summary.json").write_text(json.dumps({"summary": summary}))
    table = joined_table(out, metrics, n_boot=100)
    rows = {r["model"]: r for r in table.to_dict("records")}
    assert rows["green"]["win_rate"] == pytest.approx(12 / 15) and rows["green"]["color_shift"] == 3.5
    assert rows["green"]["color_shift_n"] == 12 and rows["red"]["color_shift_n"] == 11
    assert rows["red"]["text_rendering_n"] == 0
    for r in rows.values():
        assert r["ci_low"] <= r["win_rate"] <= r["ci_high"]
    printed = _cli("leaderboard", out, "--by", f"metrics={metrics}", "--n-boot", "100")
    assert printed.exit_code == 0 and "3.500 (n=12)" in printed.stdout
    assert "(color_shift: lower is better; text_rendering: higher is better)" in printed.stdout
    markdown = _cli(
        "leaderboard", out, "--by", f"metrics={metrics}", "--format", "markdown", "--n-boot", "100"
    )
    assert markdown.exit_code == 0, markdown.output
    lines = markdown.stdout.splitlines()
    header = next(line for line in lines if line.startswith("| model"))
    cells = [c.strip().replace("\\_", "_") for c in header.strip("|").split("|")]  # markdown escapes _
    red = next(line for line in lines if line.startswith("| red"))
    red_cells = dict(zip(cells, (c.strip() for c in red.strip("|").split("|")), strict=True))
    assert red_cells["color_shift"] == "40.250" and red_cells["text_rendering"] == "n/a"
    assert red_cells["text_rendering_n"] == "0"


def test_by_cannot_be_pushed(run):
    out, _ = run
    result = CliRunner().invoke(cli, ["leaderboard", str(out), "--by", "task", "--push-to-hub", "me/board"])
    assert result.exit_code != 0 and "--by prints a breakdown only" in result.output


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["--by", "complaint"], "use task, task=ANALYSIS_DIR or metrics=METRICS_DIR"),
        (["--by", "metrics"], "--by metrics needs the folder"),
        (["--by", "task=/nonexistent"], "no labels.jsonl there"),
    ],
)
def test_bad_by_values_are_one_error_line(run, args, fragment):
    out, _ = run
    result = CliRunner().invoke(cli, ["leaderboard", str(out), *args])
    assert result.exit_code == 1 and result.output.startswith("error: ") and fragment in result.output
    assert result.output.count("\n") == 1


def test_parse_by():
    assert parse_by(["task", "metrics=m"]) == {"task": None, "metrics": "m"}
    with pytest.raises(Exception, match="twice"):
        parse_by(["task", "task=x"])


def test_labels_of_another_benchmark_are_refused_not_grouped_as_no_task(run, tmp_path):
    out, _ = run
    other = make_benchmark(tmp_path / "other", "text_to_image", [{"id": "x1", "prompt": "a receipt for $3"}])
    analysis = tmp_path / "analysis"
    assert _cli("analyze", other, "--out", analysis, "--n-boot", "10").exit_code == 0
    result = CliRunner().invoke(cli, ["leaderboard", str(out), "--by", f"task={analysis}"])
    assert result.exit_code == 1 and result.output.startswith("error: --by task: the labels name none")
    assert "15 prompts" in result.output and "1 other samples" in result.output
    # labels of some of the run's prompts: the others are the group (no task)
    table = leaderboard_by_task(out, {"s00": "document_generation"}, n_boot=20)
    assert set(table["task"]) == {"document_generation", "(no task)"}
    assert table.loc[table["task"] == "(no task)", "n_prompts"].iloc[0] == 14


def test_a_run_whose_benchmark_moved_is_one_error_line(run, tmp_path):
    out, _ = run
    meta = json.loads((out / "run.json").read_text())
    meta["benchmark"] = str(tmp_path / "moved-away")
    (out / "run.json").write_text(json.dumps(meta))
    result = CliRunner().invoke(cli, ["leaderboard", str(out), "--by", "task"])
    assert result.exit_code == 1 and result.output.startswith("error: "), result.output
    assert result.output.count("\n") == 1 and "moved-away" in result.output
    assert "--by task=ANALYSIS_DIR" in result.output


def test_prompts_whose_labelling_failed_are_their_own_group(run, tmp_path):
    """A refused or unreadable task label is not "no task": the two groups are kept apart."""
    out, _ = run

    def record(sample: str, status: str, task: str | None) -> str:
        labels = [{"category": task, "in_taxonomy": True, "raw": task, "evidence": "x"}] if task else []
        return json.dumps(
            {"sample_id": sample, "labeller": "task", "status": status, "labels": labels, "item_id": sample}
        )

    lines = [record("s00", "ok", "document_generation"), record("s01", "parse_failure", None)]
    lines += [record("s02", "ok", None)]
    (tmp_path / "labels.jsonl").write_text("\n".join(lines) + "\n")
    labels = read_task_labels(tmp_path)
    assert labels == {"s00": "document_generation", "s01": LABELLING_FAILED, "s02": None}
    table = leaderboard_by_task(out, labels, n_boot=20)
    sizes = table.groupby("task")["n_prompts"].first().to_dict()
    assert sizes == {"document_generation": 1, LABELLING_FAILED: 1, "(no task)": 13}
