"""Pseudo-pairwise comparisons from single-answer ratings (ECHO Flow 2, after MT-Bench's single-answer grading).

Per sample, judge and pair of models the higher rating wins and equal ratings tie. Two kinds of gap are kept
apart, because the reference code mixed them up and judged failing models on an easier subset:

* a **missing output** (status ``"missing_output"``: the model produced nothing) is the model's fault, so by
  default it loses against any model with a rating, and two missing outputs tie;
* a **judge failure** (``"parse_failure"``, ``"refusal"``, ``"error"``) is the judge's fault and never becomes a
  score: that judge *abstains* on every comparison involving that output (no row for that judge), and the
  abstentions are counted (:func:`failure_counts`, and ``attrs["n_abstentions"]`` on the result).
"""

from __future__ import annotations

from typing import Literal

import numpy as np
import pandas as pd

from echo_builder.errors import ConfigError, RecordError
from echo_builder.stats.schema import (
    COMPARISON_COLUMNS,
    JUDGE_FAILURE_STATUSES,
    RATING_COLUMNS,
    RATING_STATUSES,
    require_columns,
)

__all__ = ["failure_counts", "pseudo_pairwise"]

_OK, _MISSING, _FAILED = 0, 1, 2


def _validated(ratings: pd.DataFrame) -> pd.DataFrame:
    require_columns(ratings, RATING_COLUMNS, "ratings")
    df = ratings[list(RATING_COLUMNS)].copy()
    for col in ("sample_id", "model", "judge", "status"):
        df[col] = df[col].astype(str)
    df["rating"] = pd.to_numeric(df["rating"], errors="coerce").astype(float)
    unknown = sorted(set(df["status"]) - RATING_STATUSES)
    if unknown:
        raise RecordError(f"ratings: unknown status {unknown}; expected one of {sorted(RATING_STATUSES)}")
    ok = df["status"].eq("ok").to_numpy()
    finite = np.isfinite(df["rating"].to_numpy())
    if (ok & ~finite).any():
        row = int(np.flatnonzero(ok & ~finite)[0])
        raise RecordError(
            f"ratings: row {row} has status 'ok' but no finite rating ({df['rating'].iloc[row]})"
        )
    if (~ok & finite).any():  # a failure or missing output must never carry a score
        row = int(np.flatnonzero(~ok & finite)[0])
        raise RecordError(
            f"ratings: row {row} has status {df['status'].iloc[row]!r} but a rating "
            f"{df['rating'].iloc[row]}; failures and missing outputs carry rating NaN"
        )
    key = ["sample_id", "model", "judge"]
    dup = df.duplicated(key)
    if dup.any():
        first = df.loc[dup, key].iloc[0].tolist()
        raise RecordError(f"ratings: more than one row for (sample_id, model, judge) = {first}")
    n_cells = df["sample_id"].nunique() * df["model"].nunique() * df["judge"].nunique()
    if len(df) != n_cells:
        # An absent row would silently shrink a model's comparisons (the reference code's easier-subset bug).
        grid = pd.MultiIndex.from_product(
            [sorted(df["sample_id"].unique()), sorted(df["model"].unique()), sorted(df["judge"].unique())],
            names=key,
        )
        absent = grid.difference(pd.MultiIndex.from_frame(df[key]))
        raise RecordError(
            f"ratings: {len(absent)} (sample_id, model, judge) row(s) absent, e.g. {list(absent[0])}; every "
            "model needs a row per sample and judge: status 'missing_output' when the model produced nothing, "
            "'error' when the judge was not run or failed"
        )
    df["kind"] = np.select(
        [ok, df["status"].eq("missing_output").to_numpy()], [_OK, _MISSING], default=_FAILED
    ).astype(np.int8)
    return df


def pseudo_pairwise(ratings: pd.DataFrame, *, missing: Literal["loss", "skip"] = "loss") -> pd.DataFrame:
    """Turn single-answer ratings into pairwise comparisons: per sample and judge, the higher rating wins.

    Args:
        ratings: a Ratings table (columns ``sample_id``, ``model``, ``judge``, ``rating``, ``status``; see
            :mod:`echo_builder.stats.schema`), exactly one row per (sample_id, model, judge). Ratings are on any
            scale where higher is better (ECHO: integers 1-10); only their order matters.
        missing: what a missing output (status ``"missing_output"``) does. ``"loss"`` (default, ECHO Flow 2):
            it loses to every model with a rating from that judge, and two missing outputs tie. ``"skip"``:
            comparisons involving a missing output are dropped.

    Returns:
        A Comparisons table in canonical form (``model_a < model_b``; columns ``sample_id``, ``judge``,
        ``model_a``, ``model_b``, ``outcome`` with 1.0 = model_a wins, 0.0 = model_b wins, 0.5 = tie), sorted.
        A judge failure (status ``parse_failure``/``refusal``/``error``) makes that judge abstain on every pair
        involving that output: no row; ``attrs["n_abstentions"]`` holds how many pairs were abstained.

    Raises:
        RecordError: a required column is missing, a status is unknown, an ``ok`` row has no finite rating, a
            failure or missing output carries a rating, a (sample_id, model, judge) row is duplicated or absent.
        ConfigError: ``missing`` is not ``"loss"`` or ``"skip"``.

    Example:
        >>> import pandas as pd
        >>> r = pd.DataFrame({"sample_id": ["s1"] * 2, "model": ["A", "B"], "judge": ["gpt"] * 2,
        ...                   "rating": [7.0, 5.0], "status": ["ok", "ok"]})
        >>> pseudo_pairwise(r)["outcome"].tolist()
        [1.0]
    """
    if missing not in ("loss", "skip"):
        raise ConfigError(f"missing must be 'loss' or 'skip', got {missing!r}")
    df = _validated(ratings)
    side = df[["sample_id", "judge", "model", "rating", "kind"]]
    pairs = side.merge(side, on=["sample_id", "judge"], suffixes=("_a", "_b"))
    pairs = pairs[pairs["model_a"].to_numpy(dtype=object) < pairs["model_b"].to_numpy(dtype=object)]
    ka, kb = pairs["kind_a"].to_numpy(), pairs["kind_b"].to_numpy()
    ra, rb = pairs["rating_a"].to_numpy(), pairs["rating_b"].to_numpy()
    abstain = (ka == _FAILED) | (kb == _FAILED)
    outcome = np.select(
        [(ka == _OK) & (kb == _OK), (ka == _OK) & (kb == _MISSING), (ka == _MISSING) & (kb == _OK)],
        [np.where(ra > rb, 1.0, np.where(ra < rb, 0.0, 0.5)), 1.0, 0.0],
        default=0.5,  # both missing: neither produced anything, so neither is better
    )
    keep = ~abstain
    if missing == "skip":
        keep &= (ka == _OK) & (kb == _OK)
    out = pairs.loc[keep, ["sample_id", "judge", "model_a", "model_b"]].assign(outcome=outcome[keep])
    out = out.sort_values(list(COMPARISON_COLUMNS[:4]), kind="stable").reset_index(drop=True)
    out.attrs["n_abstentions"] = int(abstain.sum())
    return out


def failure_counts(ratings: pd.DataFrame) -> pd.DataFrame:
    """Per model and judge: how many outputs were rated, missing or failed, and how many comparisons abstained.

    These are the counts ECHO Flow 2 wants beside every win rate, so a model that fails often is visible.

    Args:
        ratings: a Ratings table (see :func:`pseudo_pairwise`; validated the same way).

    Returns:
        DataFrame with columns ``model``, ``judge``, ``n_samples``, ``ok``, ``missing_output``,
        ``parse_failure``, ``refusal``, ``error`` (row counts per status), ``judge_failures`` (the sum of the last
        three) and ``abstained_comparisons`` (pairs involving this model that this judge abstained on because
        either output's judging failed), sorted by model then judge.

    Raises:
        RecordError: as :func:`pseudo_pairwise`.
    """
    df = _validated(ratings)
    counts = pd.crosstab([df["model"], df["judge"]], df["status"])
    statuses = ["ok", "missing_output", *sorted(JUDGE_FAILURE_STATUSES)]
    counts = counts.reindex(columns=statuses, fill_value=0)
    counts.columns.name = None
    out = counts.reset_index()
    out.insert(2, "n_samples", counts.sum(axis=1).to_numpy())
    out["judge_failures"] = out[sorted(JUDGE_FAILURE_STATUSES)].sum(axis=1)
    # Pairs abstained for model m under judge j: for each (sample, judge), m's pairs with any failed output.
    own_failed = df["kind"].eq(_FAILED)
    groups = df.assign(failed=own_failed.astype(int)).groupby(["sample_id", "judge"])
    n_models = groups["model"].transform("size").to_numpy()
    n_failed = groups["failed"].transform("sum").to_numpy()
    abstained = np.where(own_failed, n_models - 1, n_failed)
    per = df.assign(abstained=abstained).groupby(["model", "judge"])["abstained"].sum()
    out["abstained_comparisons"] = per.reindex(pd.MultiIndex.from_frame(out[["model", "judge"]])).to_numpy()
    return out.sort_values(["model", "judge"]).reset_index(drop=True)
