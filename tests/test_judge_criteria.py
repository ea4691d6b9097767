"""Per-criterion judging (``judge --criteria``: one call, one rating per criterion) and the forced-tie (FDT) lean of
the pairwise prompt, end to end through scripted loopback OpenAI-compatible judges."""

from __future__ import annotations

import json
import math
import re

import pytest
from click.testing import CliRunner
from PIL import Image

from echo_builder.cli import cli
from echo_builder.errors import ConfigError
from echo_builder.judge.leaderboard import leaderboard_from_run, pairwise_comparisons
from echo_builder.judge.parsing import parse_criteria, parse_preference
from echo_builder.judge.prompts import CRITERIA, PAIRWISE_LEAN, prompt_from_mapping, render
from echo_builder.judge.run import read_verdicts
from echo_builder.records import Verdict
from tests.helpers.benchmark import make_benchmark, make_outputs
from tests.test_judge import GREEN, RED, _dominant, _images

SAMPLES = [f"s{k}" for k in range(6)]
ALL = ("prompt_following", "input_fidelity", "realism", "aesthetics", "text")


def _run(*args: str, code: int = 0):
    result = CliRunner().invoke(cli, list(args), catch_exceptions=False)
    assert result.exit_code == code, result.output
    return result.output


@pytest.fixture
def bench(tmp_path):
    """Six image-to-image samples (one input each); 'green' draws green outputs, 'red' red ones."""
    folder = make_benchmark(
        tmp_path / "bench",
        "image_to_image",
        [
            {"id": s, "prompt": f"edit number {k}", "inputs": [Image.new("RGB", (32, 32), (90, 90, 90))]}
            for k, s in enumerate(SAMPLES)
        ],
    )
    outputs = make_outputs(
        tmp_path / "outputs",
        {m: {s: Image.new("RGB", (64, 64), c) for s in SAMPLES} for m, c in (("green", GREEN), ("red", RED))},
    )
    return folder, outputs


def _args(bench, server, out, *extra):
    folder, outputs = bench
    return [
        "judge",
        "--benchmark",
        str(folder),
        "--config",
        "image_to_image",
        "--outputs",
        str(outputs),
        "--out",
        str(out),
        "--base-url",
        server.base_url,
        "--judge",
        "openai:critic",
        "--concurrency",
        "2",
        *extra,
    ]


def _user_text(body) -> str:
    parts = body["messages"][-1]["content"]
    return "".join(p["text"] for p in parts if p["type"] == "text") if isinstance(parts, list) else parts


def criteria_judge(body):
    """Sample k: green trades prompt following (3+k) for input fidelity (8-k), realism/aesthetics 2+k, text 5;
    red is flat (2, 9, 5, 5, 5). Only the criteria the prompt asks for are answered."""
    text = _user_text(body)
    k = int(re.search(r"edit number (\d)", text).group(1))
    asked = re.findall(r'"([a-z_]+)": N', text)
    if _dominant(_images(body)[-1]) == "green":
        scores = {"prompt_following": 3 + k, "input_fidelity": 8 - k, "realism": 2 + k, "aesthetics": 2 + k}
    else:
        scores = {"prompt_following": 2, "input_fidelity": 9, "realism": 5, "aesthetics": 5}
    scores["text"] = 5
    return "Errors: none worth noting.\n" + json.dumps({name: scores[name] for name in asked})


def test_criteria_run_gives_per_criterion_win_rates_and_a_criteria_tradeoff_map(
    bench, openai_server, tmp_path
):
    openai_server.reply = criteria_judge
    out = tmp_path / "run"
    shown = _run(*_args(bench, openai_server, out, "--criteria", ",".join(ALL)))
    assert f"criteria (one verdict each per output): {', '.join(ALL)}" in shown
    assert openai_server.calls == 12  # one call per output, every criterion in it
    verdicts = read_verdicts(out)
    assert len(verdicts) == 60 and {v.status for v in verdicts} == {"ok"}
    assert [v.criterion for v in verdicts[:5]] == list(ALL)
    assert {v.prompt_version for v in verdicts} == {"echo-criteria-v1"}
    # usage is counted once per call: on the first criterion of each output only
    assert sum(v.latency_s is not None for v in verdicts) == 12
    run = json.loads((out / "run.json").read_text())
    assert run["criteria"] == list(ALL) and run["judge_prompt"]["name"] == "criteria"

    board = leaderboard_from_run(out, n_boot=50)
    table = board.table.set_index("model")
    assert board.meta["criteria"] == list(ALL)
    # green: prompt following 3..8 > 2 always; input fidelity 8..3 < 9 always; realism 2..7 vs 5: 2 wins 1 tie
    assert table.loc["green", "win_rate_prompt_following"] == 1.0
    assert table.loc["red", "win_rate_prompt_following"] == 0.0
    assert table.loc["green", "win_rate_input_fidelity"] == 0.0
    assert table.loc["green", "win_rate_realism"] == pytest.approx(2.5 / 6)
    assert table.loc["green", "win_rate_text"] == 0.5
    # overall: mean of the five criteria, green (20 + 2k) / 5 = 4.0..6.0 vs red 5.2: 2 wins, 1 tie (k = 3)
    assert table.loc["green", "win_rate"] == pytest.approx(2.5 / 6)
    crit = board.criteria.set_index(["criterion", "model"])
    assert crit.loc[("input_fidelity", "red"), "win_rate"] == 1.0
    assert crit.loc[("realism", "green"), "n_comparisons"] == 6
    # the trade-off map is criteria x criteria per model
    tradeoff = board.tradeoff
    assert set(tradeoff["dim_x"]) | set(tradeoff["dim_y"]) == set(ALL)
    assert len(tradeoff) == 2 * 10  # two models x C(5, 2) pairs
    green = tradeoff.set_index(["model", "dim_x", "dim_y"]).loc["green"]
    assert green.loc[("prompt_following", "input_fidelity"), "rho"] == pytest.approx(-1.0)
    assert green.loc[("prompt_following", "realism"), "rho"] == pytest.approx(1.0)
    assert green.loc[("prompt_following", "text"), "relation"] == "undetermined"  # text is constant

    one = leaderboard_from_run(out, n_boot=50, criterion="input_fidelity")
    assert one.table.set_index("model").loc["red", "win_rate"] == 1.0 and one.criteria is None
    with pytest.raises(
        ConfigError, match="rated: prompt_following, input_fidelity, realism, aesthetics, text"
    ):
        leaderboard_from_run(out, n_boot=50, criterion="beauty")

    text = _run("leaderboard", str(out), "--n-boot", "50")
    assert "win rate per criterion" in text and "input_fidelity" in text
    assert (out / "plots" / "tradeoff.png").stat().st_size > 1000  # the criteria x criteria map
    markdown = _run("leaderboard", str(out), "--n-boot", "50", "--format", "markdown")
    assert "| green | 1.000 | 0.000 | 0.417 | 0.417 | 0.500 |" in markdown
    records = json.loads(_run("leaderboard", str(out), "--n-boot", "50", "--format", "json"))
    assert {r["model"]: r["win_rate_input_fidelity"] for r in records} == {"green": 0.0, "red": 1.0}


def test_criteria_subset_and_text_to_image_skip_input_fidelity(tmp_path, openai_server):
    folder = make_benchmark(
        tmp_path / "bench",
        "text_to_image",
        [{"id": s, "prompt": f"edit number {k}"} for k, s in enumerate(SAMPLES)],
    )
    outputs = make_outputs(
        tmp_path / "outputs",
        {m: {s: Image.new("RGB", (64, 64), c) for s in SAMPLES} for m, c in (("green", GREEN), ("red", RED))},
    )
    openai_server.reply = criteria_judge
    out = tmp_path / "run"
    args = _args((folder, outputs), openai_server, out, "--criteria", "input_fidelity,realism,text")
    args[args.index("image_to_image")] = "text_to_image"
    shown = _run(*args)
    assert "note: input_fidelity not asked: the prompt asks it only of samples with input images" in shown
    verdicts = read_verdicts(out)
    # input_fidelity needs an input image: not asked, not recorded, for text-to-image samples
    assert [v.criterion for v in verdicts[:2]] == ["realism", "text"] and len(verdicts) == 24
    assert '"realism": N, "text": N}' in _user_text(openai_server.log.bodies[0])


def test_unknown_criterion_and_criteria_outside_single_mode_are_refused(bench, openai_server, tmp_path):
    text = _run(*_args(bench, openai_server, tmp_path / "a", "--criteria", "realism,beauty"), code=1)
    assert "unknown criterion 'beauty'" in text
    assert "declared: prompt_following, input_fidelity, realism, aesthetics, text" in text
    text = _run(
        *_args(bench, openai_server, tmp_path / "b", "--criteria", "realism", "--mode", "pairwise"), code=1
    )
    assert "--criteria applies to --mode single" in text
    assert openai_server.calls == 0 and not (tmp_path / "a" / "verdicts.parquet").exists()


def test_criteria_prompt_file_fields_and_parsing():
    assert CRITERIA.criterion_names == ALL and CRITERIA.applicable_criteria(0) == tuple(
        c for c in ALL if c != "input_fidelity"
    )
    shown = render(CRITERIA.select_criteria(["text", "realism"]), "a cat", 1)
    assert "1. realism: " in shown and "2. text: " in shown and '{"realism": N, "text": N}' in shown
    assert "prompt_following" not in shown
    doc = {"user": "{prompt} {criteria} {criteria_json}", "answer": {"kind": "criteria"}}
    with pytest.raises(ConfigError, match=r"field 'criteria': answer\.kind criteria needs a mapping"):
        prompt_from_mapping(doc, "mine.yaml")
    with pytest.raises(ConfigError, match=r"criteria\.Bad"):
        prompt_from_mapping({**doc, "criteria": {"Bad": "x"}}, "mine.yaml")
    with pytest.raises(ConfigError, match=r"only a prompt with answer\.kind criteria"):
        prompt_from_mapping({"user": "{prompt}", "criteria": {"a": "x"}}, "mine.yaml")
    with pytest.raises(ConfigError, match="unknown placeholder"):
        prompt_from_mapping({"user": "{prompt} {criteria}"}, "mine.yaml")
    mine = prompt_from_mapping({**doc, "criteria": {"sharpness": "Is it sharp?"}}, "mine.yaml")
    assert mine.criterion_names == ("sharpness",) and mine.version.startswith("mine+sha256:")

    names = ("realism", "text")
    assert parse_criteria('{"realism": 7}\n{"realism": 8, "text": 10.0, "x": 0}', criteria=names).ratings == {
        "realism": 8,
        "text": 10,
    }
    assert parse_criteria('{"realism": 8}', criteria=names).reason == "criterion 'text': missing"
    assert parse_criteria('{"realism": 8, "text": 7.5}', criteria=names).status == "parse_failure"
    assert (
        parse_criteria('{"realism": 11, "text": 7}', criteria=names).reason
        == "criterion 'realism': 11 is outside 1-10"
    )
    assert parse_criteria('{"realism": true, "text": 7}', criteria=names).status == "parse_failure"
    assert parse_criteria("I cannot evaluate this.", criteria=names).status == "refusal"


def test_tie_leans_are_parsed():
    assert [
        (p.winner, p.lean) for p in map(parse_preference, ("[[C:A]]", "[[tie(b)]]", "[[C]]", "[[B]]"))
    ] == [
        ("tie", "A"),
        ("tie", "B"),
        ("tie", None),
        ("B", None),
    ]
    assert parse_preference("[[C:D]]").status == "parse_failure"
    assert "[[C:A]]" in PAIRWISE_LEAN.user and PAIRWISE_LEAN.version == "echo-pairwise-v2"


def leaning_judge(body):
    """Ties on s0-s3, leaning to the green image; green wins s4 and s5 outright."""
    green_first = _dominant(_images(body)[-2]) == "green"
    k = int(re.search(r"edit number (\d)", _user_text(body)).group(1))
    if k >= 4:
        return "Green is better. " + ("[[A]]" if green_first else "[[B]]")
    return "Equally good; if forced, green. " + ("[[C:A]]" if green_first else "[[C:B]]")


def test_pairwise_run_with_leaning_ties_computes_fdt(bench, openai_server, tmp_path):
    openai_server.reply = leaning_judge
    out = tmp_path / "run"
    _run(*_args(bench, openai_server, out, "--mode", "pairwise"))
    verdicts = read_verdicts(out)
    assert {v.prompt_version for v in verdicts} == {"echo-pairwise-v2"}
    ties = [v for v in verdicts if v.winner == "tie"]
    assert len(ties) == 8  # s0-s3, both orders; the lean is mapped back to models like the winner
    lean_to = {(v.model_a if v.tie_lean == "A" else v.model_b) for v in ties}
    assert lean_to == {"green"}
    board = leaderboard_from_run(out, n_boot=50)
    row = board.table.set_index("model").loc["green"]
    assert row["tie_fdt"] == 1.0  # every tie leans to green
    assert row["tie_half"] == pytest.approx(4 / 6) and row["tie_zero"] == pytest.approx(2 / 6)
    assert row["tie_dropped"] == 1.0
    assert board.table.set_index("model").loc["red", "tie_fdt"] == 0.0
    text = _run("leaderboard", str(out), "--n-boot", "50")
    assert re.search(r"green\s+1\.000\s+0\.667\s+0\.333\s+1\.000\s+4", text)
    markdown = _run("leaderboard", str(out), "--n-boot", "50", "--format", "markdown")
    assert "| green | 1.000 | 0.667 | 0.333 | 1.000 | 4 |" in markdown
    records = {
        r["model"]: r for r in json.loads(_run("leaderboard", str(out), "--n-boot", "50", "--format", "json"))
    }
    assert (records["red"]["tie_fdt"], records["red"]["tie_zero"], records["red"]["tie_dropped"]) == (
        0.0,
        0.0,
        0.0,
    )


def _pv(order, winner, lean=None, status="ok"):
    return Verdict(
        sample_id="s",
        judge="j",
        mode="pairwise",
        model_a="x",
        model_b="y",
        order=order,
        winner=winner if status == "ok" else None,
        tie_lean=lean,
        status=status,
    )


@pytest.mark.parametrize(
    ("ab", "ba", "outcome", "lean"),
    [
        (("tie", "A"), ("tie", "A"), 0.5, 1.0),  # both orders lean to x
        (("tie", "A"), ("tie", "B"), 0.5, None),  # leans disagree: no lean
        (("tie", "B"), ("tie", None), 0.5, 0.0),  # one bare tie: the other order's lean
        (("A", None), ("tie", "A"), 0.5, 1.0),  # win + tie leaning the same way: forced decisions agree
        (("A", None), ("B", None), 0.5, None),  # position bias: forced decisions disagree
        (("B", None), ("B", None), 0.0, None),  # decisive: a lean means nothing
    ],
)
def test_tie_lean_of_a_comparison_combines_both_orders(ab, ba, outcome, lean):
    verdicts = [_pv("AB", *ab), _pv("BA", *ba), _pv("AB", "tie", "A").model_copy(update={"sample_id": "t"})]
    comparisons, _ = pairwise_comparisons(verdicts)
    row = comparisons.set_index("sample_id").loc["s"]
    assert row["outcome"] == outcome
    assert math.isnan(row["tie_lean"]) if lean is None else row["tie_lean"] == lean


def test_runs_without_leans_have_no_fdt():
    comparisons, _ = pairwise_comparisons([_pv("AB", "tie"), _pv("BA", "tie")])
    assert "tie_lean" not in comparisons.columns
    with pytest.raises(ValueError, match="tie_lean belongs to a tie verdict only"):
        _pv("AB", "A", "A")


def test_criteria_run_in_batch_mode_equals_the_online_run(bench, openai_server, tmp_path):
    openai_server.reply = criteria_judge
    boards, ratings = {}, {}
    for how in ("online", "batch"):
        out = tmp_path / how
        extra = ["--batch", "--batch-poll", "1"] if how == "batch" else []
        _run(*_args(bench, openai_server, out, "--criteria", "prompt_following,realism", *extra))
        ratings[how] = [(v.sample_id, v.model, v.criterion, v.rating, v.status) for v in read_verdicts(out)]
        boards[how] = json.loads(_run("leaderboard", str(out), "--n-boot", "50", "--format", "json"))
    assert ratings["online"] == ratings["batch"] and len(ratings["batch"]) == 24
    assert boards["online"] == boards["batch"]
    assert {r["model"]: r["win_rate_prompt_following"] for r in boards["batch"]} == {"green": 1.0, "red": 0.0}
    assert len(openai_server.batch_api.lines) == 12  # the batch run's 12 calls went through the Batch API
