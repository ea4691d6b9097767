"""rank_correlation_bootstrap: the point estimates against scipy, each bootstrap replicate against scipy on the
expanded draw, the percentile interval (contains the estimate, deterministic per seed, resamples groups), the
undefined cases; and ``echo-bench agreement --metrics DIR --between A B`` end to end on small metrics folders."""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner
from scipy import stats

import echo_builder.stats.agreement as agreement_module
from echo_builder.cli import cli
from echo_builder.errors import ConfigError, RecordError
from echo_builder.stats import rank_correlation_bootstrap
from echo_builder.stats.bootstrap import bootstrap_counts

# a judge's 1-10 ratings (many ties) and an OCR score in [0, 1] of the same 12 outputs
JUDGE = np.array([10, 9, 9, 7, 8, 3, 2, 6, 10, 5, 1, 7], dtype=float)
OCR = np.array([1.0, 0.92, 1.0, 0.75, 0.83, 0.4, 0.1, 0.75, 0.92, 0.5, 0.0, 0.6])


def test_point_estimates_equal_scipy_on_known_data():
    result = rank_correlation_bootstrap(JUDGE, OCR, n_boot=200, seed=3)
    tau = stats.kendalltau(JUDGE, OCR, variant="b")
    rho = stats.spearmanr(JUDGE, OCR)
    assert result.tau_b == pytest.approx(tau.statistic) and result.tau_p == pytest.approx(tau.pvalue)
    assert result.rho == pytest.approx(rho.statistic) and result.rho_p == pytest.approx(rho.pvalue)
    # hand check on a tiny case: 5 concordant and 1 discordant of 6 pairs, no ties: (5 - 1) / 6
    small = rank_correlation_bootstrap([1, 2, 3, 4], [1, 3, 2, 4], n_boot=50)
    assert small.tau_b == pytest.approx(4 / 6) and small.rho == pytest.approx(0.8)
    assert (result.n, result.n_groups, result.n_boot, result.reason) == (12, 12, 200, None)


@pytest.mark.parametrize(
    "matrix_limit", [10_000, 0]
)  # the vectorised path and the replicate-by-replicate one
def test_every_replicate_equals_scipy_on_the_expanded_draw(monkeypatch, matrix_limit):
    """The weighted formulas (a pair drawn k times is k tied copies) give scipy's tau-b and rho of the draw."""
    monkeypatch.setattr(agreement_module, "_MATRIX_LIMIT", matrix_limit)
    counts = bootstrap_counts(np.random.default_rng(7), len(JUDGE), 25)
    taus, rhos = agreement_module._replicate_correlations(JUDGE, OCR, counts)
    for r in range(25):
        draw = np.repeat(np.arange(len(JUDGE)), counts[r])
        assert taus[r] == pytest.approx(stats.kendalltau(JUDGE[draw], OCR[draw], variant="b").statistic)
        assert rhos[r] == pytest.approx(stats.spearmanr(JUDGE[draw], OCR[draw]).statistic)


def test_interval_contains_the_estimate_and_is_deterministic_for_a_seed():
    rng = np.random.default_rng(0)
    x = rng.normal(size=60)
    y = x + rng.normal(size=60)
    first = rank_correlation_bootstrap(x, y, n_boot=500, seed=11)
    assert first.tau_low < first.tau_b < first.tau_high and first.rho_low < first.rho < first.rho_high
    assert first.tau_high - first.tau_low < 0.5 and first.tau_low > 0  # clearly positive, not the whole range
    assert rank_correlation_bootstrap(x, y, n_boot=500, seed=11) == first
    other = rank_correlation_bootstrap(x, y, n_boot=500, seed=12)
    assert (other.tau_low, other.tau_high) != (first.tau_low, first.tau_high)
    assert (other.tau_b, other.rho) == (first.tau_b, first.rho)  # the estimates do not depend on the seed
    # a wider coverage gives a wider interval from the same replicates
    wide = rank_correlation_bootstrap(x, y, n_boot=500, seed=11, ci=0.99)
    assert wide.tau_low <= first.tau_low and wide.tau_high >= first.tau_high


def test_groups_are_resampled_whole():
    """With groups, a replicate draws whole groups: 4 groups of 3 pairs give replicates of 12 pairs made of
    complete groups, and the count of units is the number of groups."""
    groups = np.repeat(["a", "b", "c", "d"], 3)
    result = rank_correlation_bootstrap(JUDGE, OCR, groups=groups, n_boot=300, seed=1)
    assert result.n_groups == 4 and result.n == 12
    assert result.tau_b == pytest.approx(stats.kendalltau(JUDGE, OCR, variant="b").statistic)
    # the same data resampled by pair differs (another resampling scheme)
    assert rank_correlation_bootstrap(JUDGE, OCR, n_boot=300, seed=1).tau_low != result.tau_low


def test_undefined_and_bad_input():
    constant = rank_correlation_bootstrap([1, 2, 3, 4], [5, 5, 5, 5], n_boot=50)
    assert math.isnan(constant.tau_b) and math.isnan(constant.tau_low) and "y is constant" in constant.reason
    short = rank_correlation_bootstrap([1, 2], [2, 1], n_boot=50)
    assert math.isnan(short.rho) and short.reason == "need at least 3 paired values, got 2"
    # few distinct values: some replicates are constant on a side; they are counted and left out
    few = rank_correlation_bootstrap([0, 0, 0, 1], [0, 0, 1, 1], n_boot=400, seed=0)
    assert 0 < few.n_degenerate < 400 and not math.isnan(few.tau_low)
    with pytest.raises(RecordError, match="same length"):
        rank_correlation_bootstrap([1, 2, 3], [1, 2])
    with pytest.raises(RecordError, match="NaN at position 1"):
        rank_correlation_bootstrap([1, float("nan"), 3], [1, 2, 3])
    with pytest.raises(RecordError, match="one label per pair"):
        rank_correlation_bootstrap([1, 2, 3], [1, 2, 3], groups=["a"])
    with pytest.raises(ConfigError, match="n_boot"):
        rank_correlation_bootstrap([1, 2, 3], [1, 2, 3], n_boot=0)


# ----------------------------------------------------------------------- echo-bench agreement --metrics
def _metrics_folder(folder, rows, fmt="parquet"):
    folder.mkdir(parents=True)
    frame = pd.DataFrame(rows, columns=["model", "sample_id", "metric", "value", "nan_reason"])
    frame = frame.assign(note=None, detail=None)
    if fmt == "csv":
        frame.to_csv(folder / "metrics.csv", index=False)
    else:
        frame.to_parquet(folder / "metrics.parquet", index=False)
    return folder


def _two_folders(tmp_path):
    """text_accuracy (OCR, offline) in one folder and text_rendering (judge) in another, two models, 6 samples,
    with NaNs of several reasons and an output only one metric has."""
    judge_rows, ocr_rows = [], []
    for m, model in enumerate(("lumen", "nova")):
        for i in range(6):
            sample = f"s{i}"
            k = m * 6 + i
            judge_rows.append((model, sample, "text_rendering", (JUDGE[k] - 1) / 9, None))
            ocr_rows.append((model, sample, "text_accuracy", OCR[k], None))
    # NaNs: the prompt asks for no text (OCR), a judge refusal, a missing output on both
    ocr_rows[0] = (
        "lumen",
        "s0",
        "text_accuracy",
        math.nan,
        "not applicable: the prompt asks for no verbatim text",
    )
    judge_rows[7] = ("nova", "s1", "text_rendering", math.nan, "openai:j: refusal: declined")
    judge_rows[8] = ("nova", "s2", "text_rendering", math.nan, "missing output: the model produced no image")
    ocr_rows[8] = ("nova", "s2", "text_accuracy", math.nan, "missing output: the model produced no image")
    ocr_rows.append(("nova", "s9", "text_accuracy", 0.5, None))  # no judge row for this output
    judge = _metrics_folder(tmp_path / "judged", [*judge_rows, ("lumen", "s0", "color_shift", 3.0, None)])
    ocr = _metrics_folder(tmp_path / "ocr", ocr_rows, fmt="csv")
    return judge, ocr


def test_agreement_cli_between_two_metrics(tmp_path):
    judge, ocr = _two_folders(tmp_path)
    args = [
        "agreement",
        "--metrics",
        str(judge),
        "--metrics",
        str(ocr),
        "--between",
        "text_rendering",
        "text_accuracy",
    ]
    result = CliRunner().invoke(cli, [*args, "--format", "json", "--n-boot", "200", "--seed", "5"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.output)
    kept = [k for k in range(12) if k not in (0, 7, 8)]  # the 9 outputs with both values
    pooled = report["pooled"]
    assert pooled["n"] == 9 and pooled["n_groups"] == 6
    assert pooled["tau_b"] == pytest.approx(stats.kendalltau(JUDGE[kept], OCR[kept], variant="b").statistic)
    assert pooled["rho"] == pytest.approx(stats.spearmanr(JUDGE[kept], OCR[kept]).statistic)
    assert pooled["tau_low"] <= pooled["tau_b"] <= pooled["tau_high"]
    assert report["n_outputs"] == 13 and report["n_dropped"] == 4
    assert report["dropped"] == {
        "text_accuracy NaN: not applicable": 1,
        "text_rendering NaN: missing output + text_accuracy NaN: missing output": 1,
        "text_rendering NaN: openai:j: refusal": 1,
        "no text_rendering row": 1,
    }
    per_model = {r["model"]: r for r in report["per_model"]}
    assert per_model["lumen"]["n"] == 5 and per_model["nova"]["n"] == 4
    nova = [6, 9, 10, 11]
    assert per_model["nova"]["tau_b"] == pytest.approx(
        stats.kendalltau(JUDGE[nova], OCR[nova], variant="b").statistic
    )
    assert report["higher_is_better"] == {"text_rendering": True, "text_accuracy": True}
    again = CliRunner().invoke(cli, [*args, "--format", "json", "--n-boot", "200", "--seed", "5"])
    assert json.loads(again.output) == report  # seeded: the same intervals
    table = CliRunner().invoke(cli, [*args, "--n-boot", "200"])
    assert table.exit_code == 0, table.output
    assert (
        "text_rendering vs text_accuracy" in table.output
        and "dropped x1: no text_rendering row" in table.output
    )
    assert f"all (pooled)                     9       6 {pooled['tau_b']:6.3f}" in table.output


def test_agreement_cli_errors(tmp_path):
    judge, _ = _two_folders(tmp_path)
    run = CliRunner().invoke
    missing = run(cli, ["agreement", "--metrics", str(judge), "--between", "text_rendering", "text_accuracy"])
    assert missing.exit_code == 1
    assert "--between text_accuracy: no text_accuracy rows" in missing.output
    assert "metrics found: color_shift, text_rendering" in missing.output
    twice = run(cli, ["agreement", "--metrics", str(judge), "--metrics", str(judge), "--between", "a", "b"])
    assert twice.exit_code == 1 and "appears more than once" in twice.output
    empty = tmp_path / "empty"
    empty.mkdir()
    none = run(cli, ["agreement", "--metrics", str(empty), "--between", "a", "b"])
    assert none.exit_code == 1 and "no metrics.parquet or metrics.csv" in none.output
    alone = run(cli, ["agreement", "--metrics", str(judge)])
    assert alone.exit_code == 2 and "--metrics DIR and --between METRIC METRIC go together" in alone.output
    bare = run(cli, ["agreement"])
    assert bare.exit_code == 2 and "give RUN --human FILE" in bare.output
