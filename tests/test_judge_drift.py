"""Judge drift: anchors re-scored by a later run, the drift check, and ``leaderboard RUN1 RUN2`` merging."""

from __future__ import annotations

import json
import random
import re

import pytest
from click.testing import CliRunner
from PIL import Image

from echo_builder.cli import cli
from echo_builder.commands import leaderboard as leaderboard_command
from echo_builder.errors import ConfigError
from echo_builder.judge import drift
from echo_builder.judge.drift import DriftError, leaderboard_from_runs, merge_runs, run_id, select_anchors
from echo_builder.judge.validity import validity_markdown, validity_report
from echo_builder.judge.verdicts_file import read_verdicts
from tests.helpers.benchmark import make_benchmark, make_outputs
from tests.test_judge import BLUE, GREEN, RED, _dominant, _images

SAMPLES = [f"s{i}" for i in range(6)]
OLD_SNAPSHOT = "fake-vlm-2026-01-01"
NEW_SNAPSHOT = "fake-vlm-2026-06-01"


def _invoke(*args: str):
    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


def _run(*args: str) -> str:
    result = _invoke(*args)
    assert result.exit_code == 0, result.output
    return result.stdout


def _index(body) -> int:
    text = "".join(
        p.get("text", "") for m in body["messages"] if isinstance(m["content"], list) for p in m["content"]
    )
    return int(re.search(r"prompt s(\d+)", text).group(1))


def old_judge(body):
    """Likes green: green 7-8, blue 5-6, red 2-3 (+1 on odd samples)."""
    base = {"green": 7, "blue": 5, "red": 2}[_dominant(_images(body)[-1])]
    return f"Judging. [[{base + _index(body) % 2}]]"


def new_judge(body):
    """The updated snapshot likes red and is more lenient: red 9, blue 6, green 4 (+1 on odd samples, max 10)."""
    base = {"green": 4, "blue": 6, "red": 9}[_dominant(_images(body)[-1])]
    return f"Judging. [[{base + _index(body) % 2}]]"


@pytest.fixture
def bench(tmp_path):
    """Six samples; outputs1: green and red (run 1), outputs2: blue (run 2), all: the three in one folder."""
    folder = make_benchmark(
        tmp_path / "bench", "text_to_image", [{"id": s, "prompt": f"prompt {s}"} for s in SAMPLES]
    )
    images = {
        "green": {s: Image.new("RGB", (32, 32), GREEN) for s in SAMPLES},
        "red": {s: Image.new("RGB", (32, 32), RED) for s in SAMPLES},
        "blue": {s: Image.new("RGB", (32, 32), BLUE) for s in SAMPLES[1:]},  # blue misses s0
    }
    one = make_outputs(tmp_path / "outputs1", {m: images[m] for m in ("green", "red")})
    two = make_outputs(tmp_path / "outputs2", {"blue": images["blue"]})
    both = make_outputs(tmp_path / "all", images)
    return folder, one, two, both


def _judge(bench, server, outputs, out, *extra: str, judges=("judge",)) -> str:
    args = ["judge", "--benchmark", str(bench[0]), "--config", "text_to_image", "--outputs", str(outputs)]
    args += ["--out", str(out), "--base-url", server.base_url, "--concurrency", "2", *extra]
    for j in judges:
        args += ["--judge", f"openai:{j}"]
    return _run(*args)


@pytest.fixture
def run1(bench, openai_server, tmp_path):
    openai_server.reply = old_judge
    openai_server.model_snapshot = OLD_SNAPSHOT
    _judge(bench, openai_server, bench[1], tmp_path / "run1", "--cache", str(tmp_path / "shared-cache"))
    return tmp_path / "run1"


def test_anchors_are_chosen_by_the_earlier_run_id_and_really_asked_again(
    bench, openai_server, run1, tmp_path
):
    calls = openai_server.calls
    assert calls == 12  # 6 samples x green, red
    text = _judge(
        bench,
        openai_server,
        bench[2],
        tmp_path / "run2",
        "--cache",
        str(tmp_path / "shared-cache"),  # run 1's cache: the anchors must not be served from it
        "--anchors",
        "3",
        "--anchor-from",
        str(run1),
    )
    # run 2: blue on 5 samples (s0 missing: no call); anchors: 3 samples x green, red, all asked again
    assert openai_server.calls == calls + 5 + 6
    assert f"anchors: 3 samples x 2 models of {run1} re-scored: 6 verdicts" in text
    assert f"merge: echo-bench leaderboard {run1} {tmp_path / 'run2'}" in text
    record = json.loads((tmp_path / "run2" / "anchors" / "anchors.json").read_text())
    run2_meta = json.loads((tmp_path / "run2" / "run.json").read_text())
    assert run2_meta["judges"][0]["anchor_calls"] == 6 and run2_meta["anchors"]["n_verdicts"] == 6
    rid = run_id(run1)
    assert record["from_run_id"] == rid and len(rid) == 16
    assert record["samples"] == sorted(random.Random(int(rid, 16)).sample(SAMPLES, 3))
    assert record["models"] == ["green", "red"]
    anchors = read_verdicts(tmp_path / "run2" / "anchors")
    assert {(v.sample_id, v.model) for v in anchors} == {
        (s, m) for s in record["samples"] for m in ("green", "red")
    }
    # the anchors are not part of run 2's own verdicts
    assert {v.model for v in read_verdicts(tmp_path / "run2")} == {"blue"}
    assert select_anchors(read_verdicts(run1), 3, rid) == (record["samples"], ["green", "red"])
    assert select_anchors(read_verdicts(run1), 50, rid)[0] == SAMPLES  # more than there are: all


def test_unchanged_judge_merges_and_equals_one_run_over_all_verdicts(bench, openai_server, run1, tmp_path):
    _judge(bench, openai_server, bench[2], tmp_path / "run2", "--anchors", "4", "--anchor-from", str(run1))
    merged = json.loads(
        _run("leaderboard", str(run1), str(tmp_path / "run2"), "--format", "json", "--n-boot", "200")
    )
    _judge(bench, openai_server, bench[3], tmp_path / "single")
    single = json.loads(_run("leaderboard", str(tmp_path / "single"), "--format", "json", "--n-boot", "200"))
    assert [r.pop("drift_flagged") for r in merged] == [False] * 3
    assert merged == single
    assert [r["model"] for r in merged] == ["green", "blue", "red"]
    # the merged card: anchor agreement of the unchanged judge is perfect, no shift
    card = json.loads((tmp_path / "run2" / "merged" / "validity.json").read_text())
    section = card["anchor_drift"]
    assert section["available"] and section["flagged"] is False and section["problems"] == []
    row = section["links"][0]["judges"]["openai:judge"]
    assert row["changed"] is False and row["snapshots"]["later"] == [row["snapshots"]["earlier"][0]]
    assert row["n_items"] == 8 and row["n_pairs"] == 4
    assert row["pearson"] == pytest.approx(1.0) and row["kendall_tau_b"] == pytest.approx(1.0)
    assert row["pair_agreement"] == 1.0 and row["pair_agreement_ci"] == [1.0, 1.0]
    assert row["mean_shift"] == 0.0 and row["mean_shift_ci"] == [0.0, 0.0]
    md = (tmp_path / "run2" / "merged" / "validity.md").read_text()
    assert "## Anchor drift" in md and "| no |" in md and "Not measured: anchor drift" not in md
    assert (tmp_path / "run2" / "merged" / "plots" / "win_rates.png").is_file()
    assert not (run1 / "validity.json").exists()  # nothing written into the earlier run
    # a rerun of the anchored run (merged/ now inside it) asks nothing again: anchors come from their own cache
    calls = openai_server.calls
    text = _judge(
        bench, openai_server, bench[2], tmp_path / "run2", "--anchors", "4", "--anchor-from", str(run1)
    )
    assert openai_server.calls == calls and "4 samples x 2 models" in text


def test_changed_snapshot_is_refused_naming_the_judge_and_agreement(bench, openai_server, run1, tmp_path):
    openai_server.reply = new_judge
    openai_server.model_snapshot = NEW_SNAPSHOT
    run2 = tmp_path / "run2"
    _judge(bench, openai_server, bench[2], run2, "--anchors", "6", "--anchor-from", str(run1))
    result = _invoke("leaderboard", str(run1), str(run2), "--n-boot", "100")
    assert result.exit_code != 0
    message = " ".join(result.output.split())
    assert "refusing to merge" in message and "judge openai:judge changed" in message
    assert OLD_SNAPSHOT in message and NEW_SNAPSHOT in message
    # all 6 anchor samples x green, red: every green-red outcome flipped
    assert "pair agreement 0.000 [0.000, 0.000] over 6 pairs is below --drift-threshold 0.8" in message
    # within a colour both scorings add 1 on odd samples: those pairs stay concordant
    assert "Pearson r -0.923" in message and "Kendall tau-b -0.333" in message
    # green 7/8 -> 4/5 (-3), red 2/3 -> 9/10 (+7): mean +2 over 12 items
    assert "mean shift 2.000 on 12 anchor items" in message and "--allow-drift" in message
    assert not (run2 / "merged").exists()  # refused before anything was written
    with pytest.raises(DriftError, match="openai:judge"):
        merge_runs([run1, run2], n_boot=50)
    # --allow-drift merges and flags every output
    table = _run("leaderboard", str(run1), str(run2), "--n-boot", "100", "--allow-drift")
    assert "warning: DRIFT: merged with --allow-drift despite: judge openai:judge changed" in table
    records = json.loads(
        _run("leaderboard", str(run1), str(run2), "--n-boot", "100", "--allow-drift", "--format", "json")
    )
    assert [r["drift_flagged"] for r in records] == [True] * 3
    md = _run("leaderboard", str(run1), str(run2), "--n-boot", "100", "--allow-drift", "--format", "markdown")
    assert "Warning: DRIFT: merged with --allow-drift" in md
    card = json.loads((run2 / "merged" / "validity.json").read_text())
    assert card["anchor_drift"]["flagged"] is True
    row = card["anchor_drift"]["links"][0]["judges"]["openai:judge"]
    assert row["drift"] is True and row["snapshots"]["later"][0].startswith(NEW_SNAPSHOT)
    assert row["mean_shift"] == pytest.approx(2.0) and row["mean_shift_ci"][0] == pytest.approx(2.0)
    assert "**DRIFT: merged with --allow-drift" in (run2 / "merged" / "validity.md").read_text()
    # the later run's own card (one RUN: blue alone cannot be ranked, so the card is built directly) shows the same
    # anchor numbers, without a merge
    with pytest.warns(UserWarning, match="DRIFT"):
        board = leaderboard_from_runs([run1, run2], n_boot=50, allow_drift=True)
    own = validity_report(read_verdicts(run2), board, run_dir=run2, n_boot=50)["anchor_drift"]
    assert (
        own["source"] == "run anchors" and own["links"][0]["judges"]["openai:judge"]["pair_agreement"] == 0.0
    )
    assert own["links"][0]["judges"]["openai:judge"]["changed"] is True
    assert "| yes |" in validity_markdown({**card, "anchor_drift": own})
    # a lower threshold does not rescue a judge whose every outcome flipped; threshold 0 does
    assert (
        leaderboard_from_runs([run1, run2], n_boot=50, drift_threshold=0.0).meta["drift"]["flagged"] is False
    )


def test_changed_snapshot_that_still_agrees_merges(bench, openai_server, run1, tmp_path):
    openai_server.model_snapshot = NEW_SNAPSHOT  # same behaviour, new name
    _judge(bench, openai_server, bench[2], tmp_path / "run2", "--anchors", "3", "--anchor-from", str(run1))
    board = leaderboard_from_runs([run1, tmp_path / "run2"], n_boot=50)
    row = board.meta["drift"]["links"][0]["judges"]["openai:judge"]
    assert row["changed"] is True and row["drift"] is False and row["pair_agreement"] == 1.0
    assert not board.table["drift_flagged"].any()


def test_merge_refusals_and_guards(bench, openai_server, run1, tmp_path):
    _judge(bench, openai_server, bench[2], tmp_path / "plain")  # no anchors
    with pytest.raises(DriftError, match=r"plain has no anchors \(judge it with --anchors N"):
        merge_runs([run1, tmp_path / "plain"], n_boot=20)
    flagged = merge_runs([run1, tmp_path / "plain"], n_boot=20, allow_drift=True)
    assert flagged.drift["flagged"] and len(flagged.verdicts) == 12 + 6
    with pytest.raises(ConfigError, match="model 'green' is in"):
        _judge(bench, openai_server, bench[1], tmp_path / "again")
        merge_runs([run1, tmp_path / "again"], n_boot=20)
    # an anchored run of the same models is not offered a merge that leaderboard would refuse
    text = _judge(
        bench, openai_server, bench[1], tmp_path / "same", "--anchors", "2", "--anchor-from", str(run1)
    )
    assert f"no merge with {run1}: both runs judged green, red" in text
    assert "merge: echo-bench leaderboard" not in text
    _judge(bench, openai_server, bench[2], tmp_path / "other", judges=("judge", "judge2"))
    with pytest.raises(ConfigError, match="different judges"):
        merge_runs([run1, tmp_path / "other"], n_boot=20)
    with pytest.raises(ConfigError, match="listed twice"):
        merge_runs([run1, run1])
    with pytest.raises(ConfigError, match=r"in \[0, 1\]"):
        merge_runs([run1, tmp_path / "plain"], threshold=1.5)
    result = _invoke("leaderboard", str(run1), "--allow-drift")
    assert result.exit_code == 2 and "several RUNs" in result.output
    result = _invoke("leaderboard", str(run1), str(tmp_path / "plain"), "--by", "task")
    assert result.exit_code == 2 and "take one RUN" in result.output
    # bad anchor requests fail before any call or file
    calls = openai_server.calls
    for extra, message in [
        (["--anchors", "2"], "go together"),
        (["--anchors", "2", "--anchor-from", str(run1), "--mode", "pairwise"], "single or probability"),
    ]:
        result = _invoke(
            "judge", "--benchmark", str(bench[0]), "--config", "text_to_image", "--outputs", str(bench[2]),
            "--out", str(tmp_path / "bad"), "--base-url", openai_server.base_url, "--judge", "openai:judge",
            *extra,
        )  # fmt: skip
        assert result.exit_code != 0 and message in " ".join(result.output.split())
    assert openai_server.calls == calls and not (tmp_path / "bad").exists()


def test_cli_default_threshold_matches_the_library():
    assert leaderboard_command.DEFAULT_DRIFT_THRESHOLD == drift.DEFAULT_DRIFT_THRESHOLD


def test_anchor_agreement_values_by_hand():
    from echo_builder.records import Verdict

    def v(sample, model, rating, judge="j"):
        return Verdict(sample_id=sample, judge=judge, model=model, rating=rating, prompt_version="p")

    earlier = [
        v("a", "m1", 8),
        v("a", "m2", 3),
        v("b", "m1", 6),
        v("b", "m2", 6),
        v("c", "m1", 2),
        v("c", "m2", 9),
    ]
    later = [
        v("a", "m1", 9),
        v("a", "m2", 3),
        v("b", "m1", 7),
        v("b", "m2", 5),
        v("c", "m1", 2),
        v("c", "m2", 9),
    ]
    row = drift.anchor_agreement(earlier, later, n_boot=200)["j"]
    assert row["n_items"] == 6 and row["n_samples"] == 3 and row["n_pairs"] == 3
    # b: tie before, m1 wins after -> 2 of 3 outcomes agree
    assert row["pair_agreement"] == pytest.approx(2 / 3)
    assert row["mean_shift"] == pytest.approx((1 + 0 + 1 - 1 + 0 + 0) / 6)
    import numpy as np
    from scipy import stats

    x, y = [8, 3, 6, 6, 2, 9], [9, 3, 7, 5, 2, 9]
    assert row["pearson"] == pytest.approx(np.corrcoef(x, y)[0, 1])
    assert row["kendall_tau_b"] == pytest.approx(stats.kendalltau(x, y).statistic)
    low, high = row["pearson_ci"]
    assert low <= row["pearson"] <= high <= 1.0
    assert row["pair_agreement_ci"][0] <= 2 / 3 <= row["pair_agreement_ci"][1]


def test_probability_runs_anchor_and_merge(bench, openai_server, run1, tmp_path):
    from tests.helpers.openai_server import Scripted

    def digits(body):
        """Expected digit rating: green 7.4, blue 5.4, red 3.4 (next-token probabilities 0.6 and 0.4)."""
        top = {"green": 7, "blue": 5, "red": 3}[_dominant(_images(body)[-1])]
        return Scripted(str(top), next_token_probs={str(top): 0.6, str(top + 1): 0.4})

    openai_server.reply = digits
    args = ("--mode", "probability")
    _judge(bench, openai_server, bench[1], tmp_path / "p1", *args)
    # an earlier run of another mode cannot anchor this one
    with pytest.raises(AssertionError, match="is a single run; this run is probability: use one mode"):
        _judge(
            bench,
            openai_server,
            bench[2],
            tmp_path / "p2",
            *args,
            "--anchors",
            "2",
            "--anchor-from",
            str(run1),
        )
    assert not (tmp_path / "p2").exists()  # refused before the run folder was made
    _judge(
        bench,
        openai_server,
        bench[2],
        tmp_path / "p2",
        *args,
        "--anchors",
        "2",
        "--anchor-from",
        str(tmp_path / "p1"),
    )
    board = leaderboard_from_runs([tmp_path / "p1", tmp_path / "p2"], n_boot=50)
    assert list(board.table["model"]) == ["green", "blue", "red"]
    row = board.meta["drift"]["links"][0]["judges"]["openai:judge"]
    assert row["n_items"] == 4 and row["pair_agreement"] == 1.0 and row["mean_shift"] == 0.0
    assert read_verdicts(tmp_path / "p2" / "anchors")[0].rating == pytest.approx(7.4)
    with pytest.raises(ConfigError, match="differ in mode"):
        merge_runs([run1, tmp_path / "p2"], n_boot=20)


def test_anchor_from_a_run_whose_outputs_are_gone_fails_with_the_reason(bench, openai_server, run1, tmp_path):
    bench[1].rename(tmp_path / "moved")
    with pytest.raises(
        AssertionError, match=r"--anchor-from .*run1: its outputs folder \(run.json 'outputs'"
    ):
        _judge(bench, openai_server, bench[2], tmp_path / "r", "--anchors", "2", "--anchor-from", str(run1))
    assert not (tmp_path / "r").exists()
