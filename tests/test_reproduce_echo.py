"""Reproducing ECHO's aggregation (issue 16, item 3): a single judge, a user-written prompt file and
``leaderboard --ci normal`` give the authors' win rates and intervals on the same ratings.

The reference below is written independently of the package, from the aggregation as described in
``docs/reproducing-echo.md``: per question, every pair of models is compared by score (higher wins, equal ties),
a tie counts half, a model's win rate is the mean of its comparison outcomes, and its interval is
``mean -+ 1.96 * sd / sqrt(n)`` with the sample standard deviation of those outcomes. Ratings are exchanged in the
authors' CSV layout ``question_id,model,score``.
"""

from __future__ import annotations

import csv
import io
import itertools
import json
import math
import random
import statistics

import pandas as pd
import pytest
from click.testing import CliRunner
from PIL import Image

from echo_builder import metrics as metric_modules
from echo_builder.cli import cli
from echo_builder.stats import normal_win_rates
from tests.helpers.benchmark import make_benchmark, make_outputs
from tests.test_judge import GREEN, RED, _dominant, _images

QUESTIONS = [f"q{i:02d}" for i in range(12)]
COLORS = {"green-model": GREEN, "red-model": RED, "blue-model": (20, 20, 230)}
MODEL_OF_COLOR = {"green": "green-model", "red": "red-model", "blue": "blue-model"}


def _scores() -> dict[tuple[str, str], int]:
    rng = random.Random(16)
    bias = {"green-model": 3, "red-model": 1, "blue-model": 0}
    return {(q, m): min(10, rng.randint(1, 7) + bias[m]) for q in QUESTIONS for m in COLORS}


def reference_aggregation(rows: list[dict[str, str]]) -> dict[str, dict[str, float]]:
    """The authors' aggregation, written from its description: {model: {win_rate, ci_low, ci_high, n}}."""
    by_question: dict[str, dict[str, float]] = {}
    for row in rows:
        by_question.setdefault(row["question_id"], {})[row["model"]] = float(row["score"])
    outcomes: dict[str, list[float]] = {}
    for scores in by_question.values():
        for a, b in itertools.combinations(sorted(scores), 2):
            result = 1.0 if scores[a] > scores[b] else 0.0 if scores[a] < scores[b] else 0.5
            outcomes.setdefault(a, []).append(result)
            outcomes.setdefault(b, []).append(1.0 - result)
    out = {}
    for model, xs in outcomes.items():
        mean = sum(xs) / len(xs)
        half = 1.96 * statistics.stdev(xs) / math.sqrt(len(xs))
        out[model] = {"win_rate": mean, "ci_low": mean - half, "ci_high": mean + half, "n": len(xs)}
    return out


AUTHORS_LIKE_PROMPT = """\
# Written by the user in the layout of ECHO's released judge code: an instruction, the output image
# interleaved with its caption, and the FIRST [[N]] taken. The wording here is a placeholder.
format: echo-bench-judge-prompt/1
name: authors-layout
version: authors-layout-1
system: 'SYSTEM TEXT COPIED FROM THE AUTHORS'' REPOSITORY'
user: |-
  Rate how well the image follows the instruction (a user's own wording stands here).
  Prompt: {prompt}
  Generated image: {output_images}
  Give the rating as [[N]] with N from 1 to 10.
layout: interleaved
answer:
  kind: rating
  pick: first
temperature: 0.0
image:
  short_side: 512
  resample: bicubic
  jpeg_quality: 85
"""


@pytest.fixture
def scored_run(tmp_path, openai_server):
    """A judge run through a user prompt file whose scripted replies give _scores(), and the same scores as CSV."""
    scores = _scores()
    bench = make_benchmark(
        tmp_path / "bench", "text_to_image", [{"id": q, "prompt": f"prompt of {q}"} for q in QUESTIONS]
    )
    outputs = make_outputs(
        tmp_path / "outputs",
        {m: {q: Image.new("RGB", (64, 64), c) for q in QUESTIONS} for m, c in COLORS.items()},
    )

    def reply(body):
        text = "".join(p.get("text", "") for p in body["messages"][-1]["content"] if p["type"] == "text")
        question = text.split("Prompt: prompt of ", 1)[1][:3]
        model = MODEL_OF_COLOR[_dominant(_images(body)[-1])]
        # the first [[N]] is the verdict in the authors' code; a later one quotes the format
        return f"Verdict [[{scores[(question, model)]}]]. (Format reminder: [[10]].)"

    openai_server.reply = reply
    prompt = tmp_path / "authors-layout.yaml"
    prompt.write_text(AUTHORS_LIKE_PROMPT, encoding="utf-8")
    run = tmp_path / "run"
    args = ["judge", "--benchmark", str(bench), "--config", "text_to_image", "--outputs", str(outputs)]
    args += ["--judge", "openai:judge", "--base-url", openai_server.base_url, "--out", str(run)]
    result = CliRunner().invoke(cli, [*args, "--judge-prompt", str(prompt)])
    assert result.exit_code == 0, result.output
    ratings = tmp_path / "ratings.csv"
    with ratings.open("w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f)
        writer.writerow(["question_id", "model", "score"])
        for (q, m), s in sorted(scores.items()):
            writer.writerow([q, m, s])
    return run, ratings


def _board(*args):
    result = CliRunner().invoke(cli, ["leaderboard", *args, "--n-boot", "200", "--format", "json"])
    assert result.exit_code == 0, result.output
    return {r["model"]: r for r in json.loads(result.stdout)}


def test_single_judge_prompt_file_and_normal_ci_equal_the_authors_aggregation(scored_run):
    """Acceptance (issue 16): the run judged with a user prompt file, and the same ratings as a CSV, ranked with
    --ci normal, equal the independent reference: win rates exactly, interval ends to 1e-12."""
    run, ratings = scored_run
    with ratings.open(encoding="utf-8") as f:
        expected = reference_aggregation(list(csv.DictReader(f)))
    assert len({round(e["win_rate"], 6) for e in expected.values()}) == 3  # the models are told apart
    for board in (_board(str(run), "--ci", "normal"), _board("--ratings", str(ratings), "--ci", "normal")):
        assert set(board) == set(expected)
        for model, ref in expected.items():
            row = board[model]
            assert row["win_rate"] == ref["win_rate"]
            assert row["n_comparisons"] == ref["n"] == 2 * len(QUESTIONS)
            assert row["ci_low"] == pytest.approx(ref["ci_low"], abs=1e-12)
            assert row["ci_high"] == pytest.approx(ref["ci_high"], abs=1e-12)
            assert row["ci_method"] == "normal-comparisons"
            # the default bootstrap interval stays beside it, and differs from it
            assert row["bootstrap_ci_low"] is not None and row["bootstrap_ci_low"] != row["ci_low"]


def test_default_interval_stays_the_bootstrap_and_says_so(scored_run):
    run, _ = scored_run
    default = _board(str(run))
    assert {r["ci_method"] for r in default.values()} == {"bootstrap-prompts"}
    assert all("bootstrap_ci_low" not in r for r in default.values())
    normal = _board(str(run), "--ci", "normal")
    assert {m: r["win_rate"] for m, r in default.items()} == {m: r["win_rate"] for m, r in normal.items()}
    assert {m: (r["ci_low"], r["ci_high"]) for m, r in default.items()} == {
        m: (r["bootstrap_ci_low"], r["bootstrap_ci_high"]) for m, r in normal.items()
    }
    result = CliRunner().invoke(cli, ["leaderboard", str(run), "--ci", "normal", "--n-boot", "50"])
    assert result.exit_code == 0 and "normal approximation over comparisons" in result.output
    assert "bootstrap 95% CI" in result.output
    csv_out = CliRunner().invoke(cli, ["leaderboard", str(run), "--ci", "normal", "--format", "csv"]).stdout
    rows = list(csv.DictReader(io.StringIO(csv_out)))
    assert {r["ci_method"] for r in rows} == {"normal-comparisons"} and "bootstrap_ci_high" in rows[0]


def test_normal_win_rates_function_matches_the_formula():
    c = pd.DataFrame(
        {
            "sample_id": ["1", "2", "3", "4"],
            "judge": "j",
            "model_a": "A",
            "model_b": "B",
            "outcome": [1.0, 1.0, 0.5, 0.0],
        }
    )
    table = normal_win_rates(c).set_index("model")
    xs = [1.0, 1.0, 0.5, 0.0]
    half = 1.96 * statistics.stdev(xs) / 2.0
    assert table.loc["A", "win_rate"] == 0.625
    assert table.loc["A", "ci_low"] == pytest.approx(0.625 - half, abs=1e-15)
    assert table.loc["B", "ci_high"] == pytest.approx(0.375 + half, abs=1e-15)
    one = normal_win_rates(c.iloc[:1]).set_index("model")
    assert math.isnan(one.loc["A", "ci_low"])  # one comparison: no spread, no interval


# -- the ratings file ------------------------------------------------------------------------------------------------
def _ratings(tmp_path, text, name="r.csv"):
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def test_ratings_file_counts_failures_and_missing_rows_instead_of_dropping_them(tmp_path):
    """Defect class (the reference code's easier subset): an unusable score is a counted judge failure, a model
    without a row for a question is a counted missing output that loses; --missing skip drops it instead."""
    path = _ratings(
        tmp_path,
        "question_id,model,score\nq1,a,7\nq1,b,5\nq2,a,3\nq2,b,4\nq3,a,nan\nq3,b,6\nq4,b,6\n",
    )
    board = _board("--ratings", str(path))
    assert (board["a"]["n_failures"], board["a"]["n_missing"]) == (1, 1)
    assert (board["b"]["n_failures"], board["b"]["n_missing"]) == (0, 0)
    # q1: a wins; q2: b wins; q3: the judge failed on a, no comparison; q4: a has no output and loses
    assert board["a"]["win_rate"] == pytest.approx(1 / 3) and board["a"]["n_comparisons"] == 3
    skipped = _board("--ratings", str(path), "--missing", "skip")
    assert skipped["a"]["win_rate"] == 0.5 and skipped["a"]["n_comparisons"] == 2


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("question_id,model\nq1,a\n", "no 'score' or 'rating' column"),
        ("id,model,score\nq1,a,1\n", "no 'question_id' or 'sample_id' column"),
        ("question_id,model,score\nq1,a,1\nq1,a,2\n", "line 3: a second row for question 'q1', model 'a'"),
        ("question_id,model,score\nq1,,1\n", "line 2: empty model"),
        ("question_id,model,score\n", "no rows after the header"),
        ("", "the file is empty"),
        ('question_id,model,score\nq1,"' + "x" * 200_000 + '",7\n', "not readable as CSV"),
    ],
)
def test_bad_ratings_file_is_one_error_line(tmp_path, text, words):
    path = _ratings(tmp_path, text)
    result = CliRunner().invoke(cli, ["leaderboard", "--ratings", str(path)])
    assert result.exit_code == 1 and len(result.output.splitlines()) == 1
    assert result.output.startswith(f"error: ratings {path}") and words in result.output


def test_ratings_file_with_judge_column_is_combined_by_majority(tmp_path):
    rows = ["question_id,model,score,judge"]
    table = {
        ("q1", "j1"): (8, 3),
        ("q1", "j2"): (8, 3),
        ("q1", "j3"): (2, 9),
        ("q2", "j1"): (1, 5),
        ("q2", "j2"): (6, 5),
        ("q2", "j3"): (1, 5),
    }
    for (q, j), (a, b) in table.items():
        rows += [f"{q},a,{a},{j}", f"{q},b,{b},{j}"]
    path = _ratings(tmp_path, "\n".join(rows) + "\n")
    board = _board("--ratings", str(path))
    assert board["a"]["win_rate"] == 0.5 and board["a"]["n_comparisons"] == 2  # q1 a by 2-1, q2 b by 2-1


def test_win_rate_module_gives_the_authors_interval_on_request(tmp_path):
    """The evaluate module (and win_rate_report under it) takes ci="normal" too: same numbers as the CLI."""
    import evaluate

    scores = _scores()
    rows = [{"question_id": q, "model": m, "score": str(s)} for (q, m), s in sorted(scores.items())]
    expected = reference_aggregation(rows)
    module = evaluate.load(metric_modules.path("win_rate"))
    out = module.compute(
        model=[r["model"] for r in rows],
        sample_id=[r["question_id"] for r in rows],
        score=[float(r["score"]) for r in rows],
        ci="normal",
        n_boot=50,
    )
    assert out["ci_method"] == "normal-comparisons"
    for model, ref in expected.items():
        assert out["win_rate"][model] == ref["win_rate"]
        assert out["ci_low"][model] == pytest.approx(ref["ci_low"], abs=1e-12)
        assert out["ci_high"][model] == pytest.approx(ref["ci_high"], abs=1e-12)
