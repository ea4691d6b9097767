"""Agreement between a judge run and human pairwise votes (ECHO Flow 2, "Agreement with humans"), and between two
per-sample metrics of ``echo-bench metrics`` runs.

For each judge and for the judges' majority vote: pair agreement with humans on the comparisons both rated
(with ties as a third label, and without ties as in OpenING's "w/o Tie"), and Kendall tau-b between the judge's
and the humans' model win rates. Kendall's W measures how alike the judges rank the models among themselves.

:func:`metric_agreement` pairs two metrics per output (same model and sample id), e.g. the VLM judge's
``text_rendering`` with the OCR-based ``text_accuracy``, and reports Kendall tau-b and Spearman rho with
percentile bootstrap intervals over samples (:func:`echo_builder.stats.rank_correlation_bootstrap`), pooled over
the models and per model, with every pair left out counted by reason.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from echo_builder.errors import ConfigError

__all__ = ["judge_human_agreement", "metric_agreement", "read_metric_rows"]


def _per_judge_comparisons(run_dir: str | Path) -> pd.DataFrame:
    from echo_builder.judge.leaderboard import pairwise_comparisons, verdict_ratings
    from echo_builder.judge.verdicts_file import read_verdicts
    from echo_builder.stats import pseudo_pairwise

    verdicts = read_verdicts(run_dir)
    pairwise = [v for v in verdicts if v.mode == "pairwise"]
    if pairwise:
        return pairwise_comparisons(pairwise)[0]
    return pseudo_pairwise(verdict_ratings(verdicts))


def judge_human_agreement(
    run_dir: str | Path, human_votes: str | Path, *, n_boot: int = 1000, seed: int = 0
) -> dict[str, Any]:
    """Agreement report of every judge (and their majority) in ``run_dir`` with the votes in ``human_votes``.

    The votes need a ``sample_id`` column naming the benchmark sample each vote is about. Returns a dict with
    ``judges`` (one row per judge: ``n_pairs``, ``pair_agreement``, ``pair_agreement_no_ties`` in [0, 1], each with
    a 95% percentile bootstrap interval over prompts (``pair_agreement_ci_low``/``_ci_high``,
    ``pair_agreement_no_ties_ci_low``/``_ci_high``; ``n_boot`` replicates, seeded with ``seed``; NaN when no
    comparison is shared), ``tau_b`` in [-1, 1] with ``tau_p``, ``tau_reason`` and a 95% bootstrap interval over
    prompts (``tau_ci_low``/``tau_ci_high``, :func:`echo_builder.stats.bootstrap_rank_agreement`; NaN when no
    replicate defines tau-b)), ``n_boot`` and ``seed`` as given (equal seeds give equal intervals) and
    ``kendalls_w`` among the judges.
    Raises :class:`ConfigError` when the votes have no ``sample_id`` column or share no comparison with the run.
    """
    from echo_builder.stats import (
        bootstrap_pair_agreement,
        bootstrap_rank_agreement,
        kendalls_w,
        load_votes,
        majority_vote,
        model_rank_agreement,
        pair_agreement,
        votes_to_comparisons,
        win_rates,
    )

    votes = load_votes(human_votes)
    if "sample_id" not in votes.columns:
        raise ConfigError(f"{human_votes}: votes need a sample_id column to be matched with judge verdicts")
    human = votes_to_comparisons(votes.astype({"sample_id": str}), id_column="sample_id")
    # several humans may vote on one comparison: their majority is the human verdict
    human = majority_vote(human.assign(judge=[f"human-{i}" for i in range(len(human))]), judge_name="human")
    per_judge = _per_judge_comparisons(run_dir)
    judges = sorted(per_judge["judge"].unique())
    tables = {j: per_judge[per_judge["judge"] == j] for j in judges}
    if len(judges) > 1:
        tables["majority"] = majority_vote(per_judge)
    human_rates = win_rates(human).set_index("model")["win_rate"]
    rows = []
    for name, table in tables.items():
        with_ties = pair_agreement(table, human, with_ties=True)
        without = pair_agreement(table, human, with_ties=False)
        tau = model_rank_agreement(win_rates(table).set_index("model")["win_rate"], human_rates)
        low, high = bootstrap_pair_agreement(table, human, with_ties=True, n_boot=n_boot, seed=seed)
        low_nt, high_nt = bootstrap_pair_agreement(table, human, with_ties=False, n_boot=n_boot, seed=seed)
        tau_low, tau_high = bootstrap_rank_agreement(table, human, n_boot=n_boot, seed=seed)
        rows.append(
            {
                "judge": name,
                "n_pairs": with_ties.n_pairs,
                "pair_agreement": with_ties.agreement,
                "pair_agreement_ci_low": low,
                "pair_agreement_ci_high": high,
                "pair_agreement_no_ties": without.agreement,
                "pair_agreement_no_ties_ci_low": low_nt,
                "pair_agreement_no_ties_ci_high": high_nt,
                "tau_b": tau.tau,
                "tau_ci_low": tau_low,
                "tau_ci_high": tau_high,
                "tau_p": tau.p_value,
                "tau_reason": tau.reason,
                "n_models": tau.n,
            }
        )
    if all(r["n_pairs"] == 0 for r in rows):
        raise ConfigError(
            f"the votes in {human_votes} share no (sample_id, model pair) with the run {run_dir}"
        )
    rates = pd.DataFrame({j: win_rates(tables[j]).set_index("model")["win_rate"] for j in judges}).T.dropna(
        axis=1
    )
    w = kendalls_w(rates.to_numpy()) if len(judges) > 1 and rates.shape[1] > 1 else None
    return {
        "judges": rows,
        "n_boot": n_boot,
        "seed": seed,
        "kendalls_w": (
            w._asdict()
            if w is not None
            else {
                "w": float("nan"),
                "chi2": float("nan"),
                "p_value": float("nan"),
                "reason": "needs at least two judges and two models",
            }
        ),
    }


def read_metric_rows(metrics_dirs: Sequence[str | Path]) -> pd.DataFrame:
    """The per-sample rows (``model, sample_id, metric, value, nan_reason``) of one or more metrics folders.

    Each folder is the ``--out`` of ``echo-bench metrics`` (``metrics.parquet`` or ``metrics.csv``); two folders
    may hold different metrics of the same outputs (e.g. ``text_accuracy`` offline, ``text_rendering`` with a
    judge).

    Raises:
        ConfigError: a folder has no metrics table, a table lacks a column, or one (model, sample_id, metric) is
            in two rows.
    """
    frames = []
    for folder in metrics_dirs:
        path = Path(folder)
        table = next((path / n for n in ("metrics.parquet", "metrics.csv") if (path / n).is_file()), None)
        if table is None:
            raise ConfigError(
                f"--metrics {folder}: no metrics.parquet or metrics.csv (the --out folder of echo-bench metrics)"
            )
        try:
            frame = pd.read_parquet(table) if table.suffix == ".parquet" else pd.read_csv(table)
        except Exception as exc:  # a damaged table: one line naming it
            raise ConfigError(
                f"--metrics {folder}: cannot read {table.name}: {type(exc).__name__}: {exc}"
            ) from None
        missing = [
            c for c in ("model", "sample_id", "metric", "value", "nan_reason") if c not in frame.columns
        ]
        if missing:
            raise ConfigError(f"--metrics {folder}: {table.name} lacks the column(s) {', '.join(missing)}")
        frames.append(
            frame[["model", "sample_id", "metric", "value", "nan_reason"]].assign(source=str(folder))
        )
    rows = pd.concat(frames, ignore_index=True)
    rows = rows.astype({"model": str, "sample_id": str, "metric": str})
    rows["value"] = pd.to_numeric(rows["value"], errors="coerce").astype(float)
    repeated = rows.duplicated(["model", "sample_id", "metric"], keep=False)
    if repeated.any():
        first = rows[repeated].iloc[0]
        where = sorted(set(rows[repeated & (rows["metric"] == first["metric"])]["source"]))
        raise ConfigError(
            f"{first['metric']} of model {first['model']!r} on sample {first['sample_id']!r} appears more than once "
            f"(in {', '.join(where)}); give each metric of each output once"
        )
    return rows


def _reason_key(reason: Any) -> str:
    """A NaN reason without its detail: ``"missing output: refused"`` -> ``"missing output"``; a judge's
    ``"openai:gpt-4o: refusal: ..."`` -> ``"openai:gpt-4o: refusal"`` (the judge and its status)."""
    if not isinstance(reason, str) or not reason:
        return "NaN without a reason"
    parts = reason.split("; ", 1)[0].split(": ")
    if ":" in parts[0] and len(parts) > 1:  # "<judge spec>: <status>: <error>"
        return f"{parts[0]}: {parts[1]}"
    return reason.split(":", 1)[0]


def metric_agreement(
    metrics_dirs: Sequence[str | Path],
    between: tuple[str, str],
    *,
    n_boot: int = 1000,
    seed: int = 0,
    ci: float = 0.95,
) -> dict[str, Any]:
    """Rank agreement of two metrics over the same outputs, per sample (e.g. ``text_rendering`` vs
    ``text_accuracy``).

    Every output (model, sample_id) with a finite value of both metrics is one pair; the rest are dropped and
    counted by reason (``"<metric> NaN: <reason>"`` or ``"no <metric> row"``). Kendall tau-b and Spearman rho come
    with percentile bootstrap intervals that resample samples (all models' outputs on a drawn sample together,
    as the win-rate intervals resample prompts), pooled over the models and per model.

    Args:
        metrics_dirs: ``echo-bench metrics`` output folders (see :func:`read_metric_rows`).
        between: the two metric names.
        n_boot, seed, ci: the bootstrap's replicates, seed and coverage (equal seeds give equal intervals).

    Returns:
        ``{"between": [a, b], "higher_is_better": {metric: bool or None}, "pooled": {...}, "per_model": [{...,
        "model"}], "n_outputs", "n_dropped", "dropped": {reason: count}, "n_boot", "seed", "ci", "resampled"}``;
        each correlation dict holds the fields of :class:`~echo_builder.stats.RankCorrelation` (correlations in
        [-1, 1], positive: the metrics order the outputs alike when both are higher-is-better).

    Raises:
        ConfigError: a folder cannot be read (see :func:`read_metric_rows`), the two names are equal, or a metric
            has no row in any folder (the message lists the metrics found).
    """
    from echo_builder.stats import rank_correlation_bootstrap

    first, second = between
    if first == second:
        raise ConfigError(f"--between needs two different metrics, got {first!r} twice")
    rows = read_metric_rows(metrics_dirs)
    found = sorted(rows["metric"].unique())
    for name in between:
        if name not in found:
            folders = ", ".join(str(d) for d in metrics_dirs)
            raise ConfigError(
                f"--between {name}: no {name} rows in {folders}; metrics found: {', '.join(found)}"
            )
    key = ["model", "sample_id"]
    columns = [*key, "value", "nan_reason"]
    merged = pd.merge(
        rows.loc[rows["metric"] == first, columns],
        rows.loc[rows["metric"] == second, columns],
        on=key,
        how="outer",
        suffixes=("_a", "_b"),
        indicator="side",
    ).sort_values(key, kind="stable")
    dropped: Counter[str] = Counter()
    pairs = []
    for row in merged.itertuples(index=False):
        reasons = []
        for name, value, reason, present in (
            (first, row.value_a, row.nan_reason_a, row.side != "right_only"),
            (second, row.value_b, row.nan_reason_b, row.side != "left_only"),
        ):
            if not present:
                reasons.append(f"no {name} row")
            elif not np.isfinite(value):
                reasons.append(f"{name} NaN: {_reason_key(reason)}")
        if reasons:
            dropped[" + ".join(reasons)] += 1
        else:
            pairs.append((row.model, row.sample_id, float(row.value_a), float(row.value_b)))
    table = pd.DataFrame(pairs, columns=["model", "sample_id", first, second])

    def correlation(part: pd.DataFrame) -> dict[str, Any]:
        result = rank_correlation_bootstrap(
            part[first].to_numpy(), part[second].to_numpy(), groups=list(part["sample_id"]), n_boot=n_boot,
            seed=seed, ci=ci,
        )  # fmt: skip
        return result._asdict()

    from echo_builder.scoring.registry import METRICS

    return {
        "between": [first, second],
        "higher_is_better": {
            name: METRICS.get(name).spec.higher_is_better if name in METRICS else None for name in between
        },
        "pooled": correlation(table),
        "per_model": [{"model": m, **correlation(part)} for m, part in table.groupby("model", sort=True)],
        "n_outputs": len(merged),
        "n_dropped": sum(dropped.values()),
        "dropped": dict(sorted(dropped.items(), key=lambda kv: (-kv[1], kv[0]))),
        "n_boot": n_boot,
        "seed": seed,
        "ci": ci,
        "resampled": "samples (sample_id): every model's output on a drawn sample comes along",
    }
