"""Judge runs end to end: the CLI, ensembles, pairwise position bias, leaderboards, agreement, real data."""

from __future__ import annotations

import itertools
import json
from collections import Counter

import pandas as pd
import pytest
from click.testing import CliRunner
from PIL import Image

from echo_builder.cli import cli
from echo_builder.errors import ConfigError
from echo_builder.judge.leaderboard import leaderboard_from_run
from echo_builder.judge.run import discover_outputs, read_verdicts
from tests.helpers.benchmark import make_benchmark, make_outputs
from tests.test_judge import GREEN, RED, _dominant, _images

SAMPLES = [f"s{i}" for i in range(6)]


def _run(*args: str):
    result = CliRunner().invoke(cli, list(args), catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result.stdout


def three_models(tmp_path):
    """Six text-to-image samples; model 'green' draws green images, 'red' red ones, 'lazy' (red) has no output
    for s0 and s1. Returns the benchmark folder and the outputs folder."""
    folder = make_benchmark(
        tmp_path / "bench", "text_to_image", [{"id": s, "prompt": f"prompt {s}"} for s in SAMPLES]
    )
    outputs = make_outputs(
        tmp_path / "outputs",
        {
            "green": {s: Image.new("RGB", (64, 64), GREEN) for s in SAMPLES},
            "red": {s: Image.new("RGB", (64, 64), RED) for s in SAMPLES},
            "lazy": {s: Image.new("RGB", (64, 64), RED) for s in SAMPLES[2:]},
        },
    )
    return folder, outputs


@pytest.fixture
def bench(tmp_path):
    return three_models(tmp_path)


def scripted_judges(body):
    """judge1 likes red (8 vs 3); judge2 and judge3 like green. Unknown colours get 5."""
    color = _dominant(_images(body)[-1])
    likes = "red" if body["model"] == "judge1" else "green"
    return f"Judging. [[{8 if color == likes else 3}]]"


def _judge_args(bench, server, out, judges):
    folder, outputs = bench
    args = [
        "judge",
        "--benchmark",
        str(folder),
        "--config",
        "text_to_image",
        "--outputs",
        str(outputs),
        "--out",
        str(out),
        "--base-url",
        server.base_url,
        "--concurrency",
        "4",
    ]
    for j in judges:
        args += ["--judge", f"openai:{j}"]
    return args


def test_outputs_are_matched_by_exact_stem(tmp_path):
    make_outputs(tmp_path, {"m": {"s1": Image.new("RGB", (4, 4)), "s10": Image.new("RGB", (4, 4))}})
    (tmp_path / "m" / "notes.txt").write_text("not an image")
    (tmp_path / ".hidden").mkdir()
    assert {m: sorted(f) for m, f in discover_outputs(tmp_path).items()} == {"m": ["s1", "s10"]}
    Image.new("RGB", (4, 4)).save(tmp_path / "m" / "s1.jpg")
    with pytest.raises(ConfigError, match="two outputs for sample 's1'"):
        discover_outputs(tmp_path)


def test_majority_of_three_judges_and_judge_order_does_not_matter(bench, openai_server, tmp_path):
    openai_server.reply = scripted_judges
    tables = []
    for i, order in enumerate(itertools.permutations(["judge1", "judge2", "judge3"])):
        out = tmp_path / f"run{i}"
        text = _run(*_judge_args(bench, openai_server, out, order), "--cache", str(tmp_path / "shared-cache"))
        assert "judged 6 samples x 3 models with 3 judge(s): 54 verdicts" in text
        board = json.loads(_run("leaderboard", str(out), "--format", "json", "--n-boot", "200"))
        tables.append(board)
    assert all(t == tables[0] for t in tables)  # the vote does not depend on which judge comes first
    by_model = {r["model"]: r for r in tables[0]}
    # judges 2 and 3 outvote judge 1: green beats red on every prompt; lazy (red, 2 missing) loses to green
    assert tables[0][0]["model"] == "green"
    assert by_model["green"]["win_rate"] == 1.0
    assert by_model["lazy"]["n_missing"] == 2 and by_model["green"]["n_missing"] == 0
    # red vs lazy: ties where both drew red, lazy loses its 2 missing samples -> red 8/12
    assert by_model["red"]["win_rate"] == pytest.approx((0 + 4 * 0.5 + 2) / 12)
    for r in tables[0]:
        assert r["ci_low"] <= r["win_rate"] <= r["ci_high"]
    # three judges are three score dimensions: the TRIG trade-off map is computed and drawn
    board = leaderboard_from_run(tmp_path / "run0", n_boot=50)
    tmap = board.tradeoff.set_index(["model", "dim_x", "dim_y"])
    # judge1 likes red, judge2 green: on green's and red's outputs the two never disagree within a model
    # (constant ratings), so the pair is undetermined; judge2 and judge3 agree exactly
    assert set(board.tradeoff["model"]) == {"green", "red", "lazy"}
    assert (tmp_path / "run0" / "plots" / "tradeoff.png").is_file()
    assert len(tmap) == 3 * 3
    assert set(board.tradeoff["relation"]) == {"undetermined"}
    # pooling the judges and resampling them too widens the intervals (judge 1 disagrees with the others)
    pooled = leaderboard_from_run(tmp_path / "run0", n_boot=300, bootstrap_judges=True).table.set_index(
        "model"
    )
    # green per judge: vs red 6 samples (judge 1 prefers red), vs lazy 4 judged + 2 missing -> (12 + 8 + 6) / 36
    assert pooled.loc["green", "win_rate"] == pytest.approx(26 / 36)
    assert pooled.loc["green", "ci_high"] - pooled.loc["green", "ci_low"] > 0.2
    assert board.tradeoff["reason"].str.contains("constant").all()
    # 3 judges x 12 distinct requests (lazy's red images equal red's: sent once); later permutations hit the cache
    assert openai_server.calls == 3 * 12


def test_rerun_is_served_from_the_cache_and_plots_are_written(bench, openai_server, tmp_path):
    openai_server.reply = scripted_judges
    out = tmp_path / "run"
    _run(*_judge_args(bench, openai_server, out, ["judge2"]))
    calls = openai_server.calls
    first = read_verdicts(out)
    text = _run(*_judge_args(bench, openai_server, out, ["judge2"]))
    assert openai_server.calls == calls and "0 calls, 16 cache hits" in text
    assert read_verdicts(out) == first
    table = _run("leaderboard", str(out), "--n-boot", "100")
    assert "green" in table.splitlines()[2] and "missing_output" in table
    for name in ("win_rates.png", "bradley_terry.png", "head_to_head.png"):
        assert Image.open(out / "plots" / name).size[0] > 100
    run = json.loads((out / "run.json").read_text())
    assert run["missing_outputs"] == {"green": 0, "lazy": 2, "red": 0}
    assert run["prompt_version"] == "echo-single-v1" and run["judges"][0]["snapshots"] == [
        "fake-vlm-2026-01-01@fp_test"
    ]


def test_judge_failures_are_counted_not_scored(bench, openai_server, tmp_path):
    def reply(body):
        if _dominant(_images(body)[-1]) == "red":
            return "I'm sorry, I can't judge this."
        return "fine [[7]]"

    openai_server.reply = reply
    out = tmp_path / "run"
    _run(*_judge_args(bench, openai_server, out, ["j"]))
    statuses = Counter((v.model, v.status) for v in read_verdicts(out))
    assert statuses == {
        ("green", "ok"): 6,
        ("red", "refusal"): 6,
        ("lazy", "refusal"): 4,
        ("lazy", "missing_output"): 2,
    }
    board = leaderboard_from_run(out, n_boot=50)
    table = board.table.set_index("model")
    assert table.loc["red", "n_failures"] == 6 and table.loc["lazy", "n_failures"] == 4
    # with the judge abstaining on red, the only comparisons left are those against missing outputs
    assert table.loc["green", "n_comparisons"] == 2 and table.loc["green", "win_rate"] == 1.0
    # red's every comparison abstained: it keeps its row with no win rate instead of vanishing
    assert table.loc["red", "n_comparisons"] == 0 and pd.isna(table.loc["red", "win_rate"])
    text = _run("leaderboard", str(out), "--n-boot", "50")
    assert "(no comparison)" in text and "refusal" in text


def test_position_biased_pairwise_judge_gives_only_ties(bench, openai_server, tmp_path):
    openai_server.reply = lambda body: "The first one is better. [[A]]"
    out = tmp_path / "run"
    _run(
        *_judge_args(bench, openai_server, out, ["biased"])[:-2],
        "--judge",
        "openai:biased",
        "--mode",
        "pairwise",
    )
    verdicts = read_verdicts(out)
    # 6 green-red pairs + 4 + 4 pairs with lazy present; s0, s1 x (green, red) vs lazy are missing; two orders each
    assert Counter(v.status for v in verdicts) == {"ok": 2 * (6 + 4 + 4), "missing_output": 2 * 4}
    board = leaderboard_from_run(out, n_boot=50)
    bias = board.position_bias.set_index("judge").loc["openai:biased"]
    assert bias["position_bias_rate"] == 1.0 and bias["pairs_both_orders"] == 14
    h2h = board.head_to_head
    assert h2h.loc["green", "red"] == 0.5  # every judged pair is a tie
    assert board.table.set_index("model").loc["lazy", "n_missing"] == 2


def test_agreement_with_humans(bench, openai_server, tmp_path):
    openai_server.reply = scripted_judges
    out = tmp_path / "run"
    _run(*_judge_args(bench, openai_server, out, ["judge1", "judge2", "judge3"]))
    votes = [{"sample_id": s, "model_a": "green", "model_b": "red", "winner": "model_a"} for s in SAMPLES]
    votes += [{"sample_id": s, "model_a": "red", "model_b": "lazy", "winner": "tie"} for s in SAMPLES[2:]]
    path = tmp_path / "votes.jsonl"
    path.write_text("\n".join(json.dumps(v) for v in votes))
    report = json.loads(_run("agreement", str(out), "--human", str(path), "--format", "json"))
    rows = {r["judge"]: r for r in report["judges"]}
    assert rows["openai:judge1"]["pair_agreement"] == pytest.approx(
        4 / 10
    )  # agrees on the red-lazy ties only
    assert rows["openai:judge2"]["pair_agreement"] == 1.0 and rows["majority"]["pair_agreement"] == 1.0
    assert rows["openai:judge2"]["pair_agreement_no_ties"] == 1.0 and rows["openai:judge2"]["n_pairs"] == 10
    assert rows["openai:judge1"]["pair_agreement_no_ties"] == 0.0
    assert 0 <= report["kendalls_w"]["w"] <= 1
    # judge2 agrees on all 10 pairs: every resample of prompts agrees too
    assert (
        rows["openai:judge2"]["pair_agreement_ci_low"],
        rows["openai:judge2"]["pair_agreement_ci_high"],
    ) == (
        1.0,
        1.0,
    )
    assert (
        rows["openai:judge1"]["pair_agreement_ci_low"] < 0.4 < rows["openai:judge1"]["pair_agreement_ci_high"]
    )
    text = _run("agreement", str(out), "--human", str(path))
    assert "majority" in text and "Kendall's W" in text and "[1.000, 1.000]" in text


def test_agreement_with_humans_follows_n_boot_and_seed(bench, openai_server, tmp_path):
    """``agreement RUN --human`` used to bootstrap with 1000 replicates and seed 0 whatever --n-boot and --seed said."""
    openai_server.reply = scripted_judges
    out = tmp_path / "run"
    _run(*_judge_args(bench, openai_server, out, ["judge1", "judge2"]))
    votes = [{"sample_id": s, "model_a": "green", "model_b": "red", "winner": "model_a"} for s in SAMPLES[:3]]
    votes += [
        {"sample_id": s, "model_a": "green", "model_b": "red", "winner": "model_b"} for s in SAMPLES[3:]
    ]
    votes += [{"sample_id": s, "model_a": "red", "model_b": "lazy", "winner": "tie"} for s in SAMPLES[2:]]
    path = tmp_path / "votes.jsonl"
    path.write_text("\n".join(json.dumps(v) for v in votes))

    def intervals(*options: str) -> tuple[dict, list[float]]:
        report = json.loads(_run("agreement", str(out), "--human", str(path), "--format", "json", *options))
        bounds = [
            row[f"{name}_ci_{end}"]
            for row in report["judges"]
            for name in ("pair_agreement", "pair_agreement_no_ties", "tau")
            for end in ("low", "high")
        ]
        return report, bounds

    seeded, bounds = intervals("--n-boot", "200", "--seed", "1")
    assert (seeded["n_boot"], seeded["seed"]) == (200, 1)
    assert intervals("--n-boot", "200", "--seed", "1")[1] == bounds  # equal seeds repeat the intervals
    assert intervals("--n-boot", "200", "--seed", "2")[1] != bounds  # another seed draws other resamples
    assert intervals("--n-boot", "20", "--seed", "1")[1] != bounds  # and so does another number of replicates
    rows = {r["judge"]: r for r in seeded["judges"]}
    # judge2 (likes green) agrees with the 3 green votes and the 4 ties: 7 of 10 pairs, inside its interval
    assert rows["openai:judge2"]["pair_agreement"] == pytest.approx(7 / 10)
    assert (
        rows["openai:judge2"]["pair_agreement_ci_low"] < 0.7 < rows["openai:judge2"]["pair_agreement_ci_high"]
    )
    text = _run("agreement", str(out), "--human", str(path), "--n-boot", "200", "--seed", "1")
    assert "95% bootstrap intervals over prompts (200 replicates, seed 1)" in text


def test_leaderboard_on_real_arena_votes(shared_data):
    votes = shared_data / "human_votes" / "genai_arena" / "clean_battle_20240220.json"
    board = json.loads(
        _run(
            "leaderboard",
            "--votes",
            str(votes),
            "--models",
            "*_generation",
            "--format",
            "json",
            "--n-boot",
            "300",
        )
    )
    raw = pd.DataFrame(json.loads(votes.read_text()))
    raw = raw[raw.model_a.str.endswith("_generation") & raw.model_b.str.endswith("_generation")]
    raw = raw[raw.model_a != raw.model_b]
    hand = {}
    for model in set(raw.model_a) | set(raw.model_b):
        points = []
        for a, b, w in zip(raw.model_a, raw.model_b, raw.winner, strict=True):
            if model in (a, b):
                side = "model_a" if model == a else "model_b"
                points.append(1.0 if w == side else 0.5 if w.startswith("tie") else 0.0)
        hand[model] = sum(points) / len(points)
    assert {r["model"]: r["win_rate"] for r in board} == pytest.approx(hand, abs=1e-12)
    published = pd.read_csv(shared_data / "human_votes" / "genai_arena" / "t2i_generation_leaderboard.csv")
    published_order = list(published.sort_values("Arena Elo rating (anony)", ascending=False)["key"])
    assert [
        r["model"].removeprefix("imagenhub_").removesuffix("_generation") for r in board
    ] == published_order
    bt = sorted(board, key=lambda r: -r["bt_rating"])
    assert [r["model"] for r in bt] == [r["model"] for r in board]
    assert board[0]["win_rate"] == pytest.approx(0.73, abs=0.01) and board[-1]["win_rate"] == pytest.approx(
        0.30, abs=0.01
    )
    for r in board:
        assert (
            r["ci_low"] <= r["win_rate"] <= r["ci_high"]
            and r["bt_ci_low"] <= r["bt_rating"] <= r["bt_ci_high"]
        )


def test_leaderboard_usage_errors(tmp_path):
    result = CliRunner().invoke(cli, ["leaderboard"])
    assert result.exit_code == 2 and "exactly one of RUN, --votes FILE or --example" in result.output
    bad = tmp_path / "votes.json"
    bad.write_text('[{"model_a": "x", "model_b": "y", "winner": "maybe"}]')
    result = CliRunner().invoke(cli, ["leaderboard", "--votes", str(bad)])
    assert result.exit_code == 1 and "votes.json" in result.output and "maybe" in result.output


def test_example_leaderboard_recovers_the_true_order():
    text = _run("leaderboard", "--example", "--n-boot", "200")
    order = [line.split()[1] for line in text.splitlines() if line[:2].strip().isdigit()]
    assert order == ["aurora-xl", "brushwork-2", "canvas-lite", "doodle-mini"]


def test_judge_cli_exit_codes_and_guards(bench, openai_server, tmp_path):
    from tests.helpers.openai_server import FaultPlan

    openai_server.faults = FaultPlan(always=lambda body: True, always_kind="400")
    out = tmp_path / "run"
    failed = CliRunner().invoke(cli, _judge_args(bench, openai_server, out, ["j"]))
    assert failed.exit_code == 1 and "every judgment failed" in failed.output
    assert (out / "verdicts.parquet").is_file()  # the failures are still recorded
    pairwise = CliRunner().invoke(cli, [*_judge_args(bench, openai_server, out, ["j"]), "--mode", "pairwise"])
    assert pairwise.exit_code == 1 and "holds a single run" in pairwise.output
    for option, value in (
        ("--limit", "0"),
        ("--concurrency", "0"),
        ("--timeout", "-1"),
        ("--max-attempts", "0"),
    ):
        args = _judge_args(bench, openai_server, tmp_path / "x", ["j"])
        if option in args:  # given once: a second --concurrency would be refused as a repeat
            del args[args.index(option) : args.index(option) + 2]
        bad = CliRunner().invoke(cli, [*args, option, value])
        # one "error:" line naming the option and the accepted range (tests/test_numeric_options.py has the rest)
        assert (
            bad.exit_code == 1
            and bad.output.startswith(f"error: {option}:")
            and "Traceback" not in bad.output
        )
    folder, outputs = bench
    missing = CliRunner().invoke(
        cli,
        [
            "judge",
            "--benchmark",
            str(tmp_path / "nope"),
            "--config",
            "text_to_image",
            "--outputs",
            str(outputs),
            "--judge",
            "openai:j",
            "--out",
            str(tmp_path / "y"),
        ],
    )
    assert missing.exit_code == 1 and missing.output.startswith("error: benchmark folder")
    wrong = CliRunner().invoke(
        cli,
        [
            "judge",
            "--benchmark",
            str(folder),
            "--config",
            "image_to_image",
            "--outputs",
            str(outputs),
            "--judge",
            "openai:j",
            "--out",
            str(tmp_path / "z"),
        ],
    )
    assert wrong.exit_code == 1 and "configs present: text_to_image" in wrong.output


def test_vote_groups_that_never_met_are_flagged(tmp_path):
    path = tmp_path / "votes.csv"
    path.write_text("\ufeffmodel_a,model_b,winner\na,b,model_a\nb,a,tie\nc,d,model_b\n", encoding="utf-8")
    result = CliRunner().invoke(cli, ["leaderboard", "--votes", str(path), "--n-boot", "20"])
    assert result.exit_code == 0, result.output  # the byte-order mark is not part of the first column's name
    assert "2 groups that were never compared" in result.output and "a, b; c, d" in result.output


def test_agreement_json_is_standard_json_when_a_statistic_is_undefined(bench, openai_server, tmp_path):
    # one judge: Kendall's W among judges is undefined (NaN), which must print as null, not NaN
    openai_server.reply = scripted_judges
    out = tmp_path / "run"
    _run(*_judge_args(bench, openai_server, out, ["judge2"]))
    votes = [{"sample_id": s, "model_a": "green", "model_b": "red", "winner": "model_a"} for s in SAMPLES]
    path = tmp_path / "votes.jsonl"
    path.write_text("\n".join(json.dumps(v) for v in votes))

    def reject(name: str) -> None:
        raise ValueError(f"non-standard JSON constant {name}")

    report = json.loads(
        _run("agreement", str(out), "--human", str(path), "--format", "json"), parse_constant=reject
    )
    assert report["kendalls_w"]["w"] is None
    assert {r["judge"]: r for r in report["judges"]}["openai:judge2"]["pair_agreement"] == 1.0


def test_only_outputs_in_no_config_are_warned_about(bench, openai_server, tmp_path, caplog):
    # one outputs folder serving two configs: the other config's outputs are expected, an unknown id is not
    folder, outputs = bench
    make_benchmark(
        folder, "image_to_image", [{"id": "e1", "prompt": "edit", "inputs": [Image.new("RGB", (8, 8))]}]
    )
    Image.new("RGB", (64, 64), GREEN).save(outputs / "green" / "e1.png")
    openai_server.reply = scripted_judges
    with caplog.at_level("WARNING", logger="echo_builder.judge.run"):
        _run(*_judge_args(bench, openai_server, tmp_path / "run1", ["judge2"]))
    assert not [r for r in caplog.records if "were ignored" in r.getMessage()]
    assert json.loads((tmp_path / "run1" / "run.json").read_text())["stray_outputs"] == {"green": 1}

    Image.new("RGB", (64, 64), GREEN).save(outputs / "red" / "renamed.png")
    caplog.clear()
    with caplog.at_level("WARNING", logger="echo_builder.judge.run"):
        _run(*_judge_args(bench, openai_server, tmp_path / "run2", ["judge2"]))
    warned = [r.getMessage() for r in caplog.records if "were ignored" in r.getMessage()]
    assert len(warned) == 1 and "{'red': 1}" in warned[0]
