"""The validity card: judge runs with scripted judges, ranked; the card's numbers checked by hand."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from echo_builder.cli import cli
from echo_builder.judge.leaderboard import leaderboard_from_run
from echo_builder.judge.results import read_run_meta
from echo_builder.judge.validity import validity_markdown, validity_report, write_validity
from echo_builder.judge.verdicts_file import read_verdicts, write_verdicts
from echo_builder.records import Verdict
from tests.test_judge import _dominant, _images
from tests.test_judge_runs import SAMPLES, _run, three_models


@pytest.fixture
def bench(tmp_path):
    """The judge-run tests' benchmark: six samples; 'green', 'red', and 'lazy' (red, no output for s0, s1)."""
    return three_models(tmp_path)


def judge_args(bench, server, out, judges, *extra):
    folder, outputs = bench
    args = ["judge", "--benchmark", str(folder), "--config", "text_to_image", "--outputs", str(outputs)]
    args += ["--out", str(out), "--base-url", server.base_url, "--concurrency", "2", *extra]
    for j in judges:
        args += ["--judge", f"openai:{j}"]
    return args


def single_judges(body):
    """'fair' rates green 8, red 3. 'shy' refuses every red image and cannot be parsed on green ones."""
    color = _dominant(_images(body)[-1])
    if body["model"] == "shy":
        return "I'm sorry, but I can't evaluate this image." if color == "red" else "no number here"
    return f"[[{8 if color == 'green' else 3}]]"


def pairwise_judges(body):
    """'fair' prefers the green image wherever it is shown; 'biased' always picks the first image."""
    if body["model"] == "biased":
        return "The first. [[A]]"
    first, second = (_dominant(img) for img in _images(body)[-2:])
    if first == second:
        return "[[C]]"
    return "[[A]]" if first == "green" else "[[B]]"


def test_single_run_card_counts_failures_refusals_and_says_what_is_not_measured(
    bench, openai_server, tmp_path
):
    openai_server.reply = single_judges
    out = tmp_path / "run"
    _run(*judge_args(bench, openai_server, out, ["fair", "shy"], "-o", "temperature=0.3"))
    run_meta = read_run_meta(out)
    assert run_meta["prompt_temperature"] == 0.0 and run_meta["outputs"] == str(bench[1])
    board = leaderboard_from_run(out, n_boot=50)
    report = validity_report(read_verdicts(out), board, run_meta=run_meta, run_dir=out)
    judges = {j["judge"]: j for j in report["judges"]}
    assert set(judges) == {"openai:fair", "openai:shy"}
    # -o temperature=0.3 wins over the prompt file's 0.0, and the card says where the number came from
    assert judges["openai:fair"]["temperature"] == {"value": 0.3, "source": "judge option (-o temperature=)"}
    assert judges["openai:fair"]["n_verdicts"] == 6 * 3
    assert report["prompt"]["versions"] == [run_meta["prompt_version"]]
    assert report["prompt"]["identity"]["sha256"] == run_meta["judge_prompt"]["sha256"]
    assert report["repetitions"]["per_judgment"] == 1 and report["repetitions"]["orders_per_pair"] is None
    rows = {(r["model"], r["judge"]): r for r in report["failures"]}
    fair_lazy = rows[("lazy", "openai:fair")]
    assert (fair_lazy["n"], fair_lazy["n_judged"], fair_lazy["missing_output"]) == (6, 4, 2)
    assert fair_lazy["failure_rate"] == 0.0 and fair_lazy["refusal_rate"] == 0.0
    # shy: refuses red and lazy (both red), unparsable on green
    assert rows[("red", "openai:shy")]["refusal_rate"] == 1.0 and rows[("red", "openai:shy")]["refusal"] == 6
    assert rows[("lazy", "openai:shy")]["refusal"] == 4 and rows[("lazy", "openai:shy")]["n_judged"] == 4
    green_shy = rows[("green", "openai:shy")]
    assert (
        green_shy["failure_rate"] == 1.0
        and green_shy["parse_failure"] == 6
        and green_shy["refusal_rate"] == 0.0
    )
    assert (
        report["position_bias"]["available"] is False and "single-answer" in report["position_bias"]["reason"]
    )
    for section in ("human_agreement", "community_agreement", "anchor_drift"):
        assert report[section]["available"] is False and report[section]["reason"]
    assert report["comparison_groups"] == {
        "n_groups": 1,
        "connected": True,
        "groups": [["green", "lazy", "red"]],
    }
    # green beats red on every prompt (fair alone decides: shy abstains): the MLE does not exist
    assert report["bradley_terry"]["regularised"] is True
    assert report["bradley_terry"]["virtual_ties_per_model"] == board.meta["bt_prior"] > 0
    text = validity_markdown(report)
    assert "## Agreement with the community" in text and "## Anchor drift" in text
    assert text.count("Not measured:") == 3  # humans, community, anchor drift
    assert "Not applicable: single-answer ratings" in text and "Not measured: not measured" not in text
    assert "| red | openai:shy | 6 | 6 | 0 | 0 | 0 | 6 | 0.000 | 1.000 |" in text


def test_pairwise_card_measures_position_bias(bench, openai_server, tmp_path):
    openai_server.reply = pairwise_judges
    out = tmp_path / "run"
    _run(*judge_args(bench, openai_server, out, ["fair", "biased"], "--mode", "pairwise"))
    report = validity_report(
        read_verdicts(out), leaderboard_from_run(out, n_boot=50), run_meta=read_run_meta(out)
    )
    bias = {r["judge"]: r for r in report["position_bias"]["judges"]}
    # pairs with both outputs present: green-red on 6 samples, green-lazy and red-lazy on 4 each
    assert bias["openai:biased"] == {
        "judge": "openai:biased",
        "pairs_both_orders": 14,
        "order_flips": 14,
        "order_flip_rate": 1.0,
        "position_consistent": 14,
        "position_bias_rate": 1.0,
        "n_decisive": 28,
        "first_position_rate": 1.0,
    }
    fair = bias["openai:fair"]
    # fair: green wins 10 pairs in both orders (green first in half of them); red-lazy (both red) are ties
    assert (fair["order_flip_rate"], fair["position_bias_rate"]) == (0.0, 0.0)
    assert fair["n_decisive"] == 20 and fair["first_position_rate"] == 0.5
    assert report["repetitions"]["orders_per_pair"] == 2 and report["repetitions"]["per_judgment"] == 1
    # a pairwise verdict whose opponent's output is missing is not this model's missing output
    rows = {(r["model"], r["judge"]): r for r in report["failures"]}
    assert rows[("green", "openai:fair")]["missing_output"] == 0
    assert rows[("lazy", "openai:fair")]["missing_output"] == 8  # s0, s1 x 2 opponents x 2 orders
    assert rows[("green", "openai:fair")]["n_judged"] == 20
    assert "| openai:biased | 14 | 1.000 | 1.000 | 28 | 1.000 |" in validity_markdown(report)


def test_agreement_with_human_votes_has_bootstrap_intervals(bench, openai_server, tmp_path):
    openai_server.reply = single_judges
    out = tmp_path / "run"
    _run(*judge_args(bench, openai_server, out, ["fair"]))
    # humans: green beats red on s0-s3, red beats green on s4 and s5 -> the judge agrees on 4 of 6
    votes = [
        {"sample_id": s, "model_a": "green", "model_b": "red", "winner": "model_a" if i < 4 else "model_b"}
        for i, s in enumerate(SAMPLES)
    ]
    path = tmp_path / "votes.jsonl"
    path.write_text("\n".join(json.dumps(v) for v in votes))
    board = leaderboard_from_run(out, n_boot=50)
    report = validity_report(
        read_verdicts(out), board, run_meta=read_run_meta(out), run_dir=out, human_votes=path, n_boot=400
    )
    human = report["human_agreement"]
    assert human["available"] is True and human["votes"] == "votes.jsonl" and human["n_boot"] == 400
    (row,) = human["judges"]
    assert row["judge"] == "openai:fair" and row["n_pairs"] == 6
    assert row["pair_agreement"] == pytest.approx(4 / 6)
    # resampling 6 prompts: the interval spans the plausible shares, here from at most 1/3 to 1
    assert row["pair_agreement_ci_low"] <= 1 / 3 and row["pair_agreement_ci_high"] == 1.0
    assert row["pair_agreement_ci_low"] <= row["pair_agreement"] <= row["pair_agreement_ci_high"]
    # tau-b over green and red: 1 on all the votes; resampled prompts sometimes let red lead the humans (-1)
    assert row["tau_b"] == pytest.approx(1.0) and (row["tau_ci_low"], row["tau_ci_high"]) == pytest.approx(
        (-1, 1)
    )
    text = validity_markdown(report)
    assert "| openai:fair | 6 | 0.667 | [" in text


def test_disconnected_groups_are_reported(tmp_path):
    verdicts = []
    for sample, (a, b) in (("s1", ("alpha", "beta")), ("s2", ("gamma", "delta"))):
        for order, winner in (("AB", "A"), ("BA", "A")):
            verdicts.append(
                Verdict(
                    sample_id=sample,
                    judge="j",
                    mode="pairwise",
                    model_a=a,
                    model_b=b,
                    order=order,
                    winner=winner,
                )
            )
    write_verdicts(verdicts, tmp_path / "verdicts.parquet")
    with pytest.warns(UserWarning, match="2 groups"):
        board = leaderboard_from_run(tmp_path, n_boot=20)
    report = validity_report(verdicts, board)
    assert report["comparison_groups"] == {
        "n_groups": 2,
        "connected": False,
        "groups": [["alpha", "beta"], ["delta", "gamma"]],
    }
    # no run.json: the judges' settings and temperature are said to be unrecorded, not invented
    assert report["judges"][0]["temperature"] == {"value": None, "source": "not recorded in run.json"}
    assert "1. alpha, beta" in validity_markdown(report) and "2. delta, gamma" in validity_markdown(report)
    # strict JSON: no NaN reaches the file
    json_path, md_path = write_validity(tmp_path / "card", report, root=tmp_path)
    assert json.loads(json_path.read_text())["comparison_groups"]["n_groups"] == 2
    assert "NaN" not in json_path.read_text() and md_path.read_text().startswith("# Validity card")


def test_leaderboard_command_writes_the_card_into_the_run(bench, openai_server, tmp_path):
    openai_server.reply = single_judges
    out = tmp_path / "run"
    _run(*judge_args(bench, openai_server, out, ["fair"]))
    votes = tmp_path / "votes.jsonl"
    votes.write_text(
        json.dumps({"sample_id": "s0", "model_a": "green", "model_b": "red", "winner": "model_a"})
    )
    text = _run("leaderboard", str(out), "--n-boot", "50", "--human", str(votes))
    assert f"validity card: {out / 'validity.json'}, {out / 'validity.md'}" in text
    card = json.loads((out / "validity.json").read_text())
    assert card["format"] == "echo-bench-validity/1" and card["run"]["config"] == "text_to_image"
    assert card["human_agreement"]["judges"][0]["pair_agreement"] == 1.0
    assert card["ranking"] == {
        "ci_method": "bootstrap-prompts",
        "n_boot": 50,
        "missing": "loss",
        "bootstrap_over_judges": False,
    }
    assert "## Agreement with humans" in (out / "validity.md").read_text()
    # --format json keeps stdout pure JSON and still writes the card
    (out / "validity.json").unlink()
    board = json.loads(_run("leaderboard", str(out), "--n-boot", "50", "--format", "json"))
    assert board[0]["model"] == "green" and (out / "validity.json").is_file()
    # votes sharing nothing with the run: one error line, and the card already there is left as it was
    before = (out / "validity.json").read_text()
    other = tmp_path / "other.jsonl"
    other.write_text(json.dumps({"sample_id": "zz", "model_a": "green", "model_b": "red", "winner": "tie"}))
    result = CliRunner().invoke(cli, ["leaderboard", str(out), "--n-boot", "50", "--human", str(other)])
    assert result.exit_code == 1 and "share no" in result.output and "Traceback" not in result.output
    assert (out / "validity.json").read_text() == before
    usage = CliRunner().invoke(cli, ["leaderboard", "--example", "--human", str(votes)])
    assert usage.exit_code == 2 and "--human applies to a judge RUN" in usage.output
