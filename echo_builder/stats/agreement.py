"""Agreement between judges and humans, and among raters (ECHO Flow 2 "Agreement with humans").

* Kendall's tau-b (scipy's variant "b", with its p-value), NaN with a reason when it is undefined;
* pair agreement with and without ties (OpenING, arXiv 2411.18499: IntJudge 82.42% vs GPT-4o 71.08%);
* Kendall's W among several raters with the tie correction (ECHO: W = 0.49 among 5 experts);
* model-level (e.g. win rates vs a published leaderboard) and sample-level rank agreement helpers.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import NamedTuple

import numpy as np
import pandas as pd

from echo_builder.errors import RecordError
from echo_builder.stats.schema import canonicalize_comparisons

__all__ = [
    "KendallW",
    "PairAgreement",
    "RankAgreement",
    "TauResult",
    "bootstrap_pair_agreement",
    "bootstrap_rank_agreement",
    "kendall_tau_b",
    "kendalls_w",
    "model_rank_agreement",
    "pair_agreement",
    "sample_rank_agreement",
]


class TauResult(NamedTuple):
    """Kendall's tau-b in [-1, 1] (1 = same order), its two-sided p-value, and why it is NaN (else None)."""

    tau: float
    p_value: float
    reason: str | None


class PairAgreement(NamedTuple):
    """Share of comparisons (in [0, 1]) on which two raters gave the same outcome, over ``n_pairs``."""

    agreement: float
    n_pairs: int
    reason: str | None


class KendallW(NamedTuple):
    """Kendall's W in [0, 1] (1 = all raters rank alike), Friedman chi-square, its p-value, and a reason if NaN."""

    w: float
    chi2: float
    p_value: float
    reason: str | None


class RankAgreement(NamedTuple):
    """Tau-b over the items both sides rated, how many there were, and the items only one side had."""

    tau: float
    p_value: float
    reason: str | None
    n: int
    only_a: tuple
    only_b: tuple


def _vector(values, name: str) -> np.ndarray:
    arr = np.asarray(values, dtype=float)
    if arr.ndim != 1:
        raise RecordError(f"{name} must be one-dimensional, got shape {arr.shape}")
    if np.isnan(arr).any():
        raise RecordError(
            f"{name} contains NaN at position {int(np.flatnonzero(np.isnan(arr))[0])}; drop it first"
        )
    return arr


def kendall_tau_b(x: Sequence[float] | np.ndarray, y: Sequence[float] | np.ndarray) -> TauResult:
    """Kendall's tau-b between paired values (``scipy.stats.kendalltau(variant="b")``; ECHO Flow 2 reports it
    against experts, e.g. 0.117 for GPT-4o).

    Args:
        x, y: equal-length 1-D numeric sequences (paired: ``x[i]`` and ``y[i]`` describe the same item); any
            direction as long as both agree (higher = better in both, or lower = better in both).

    Returns:
        :class:`TauResult` ``(tau, p_value, reason)``. ``tau`` in [-1, 1]; a perfect match may read
        0.9999999999999999, so compare with a tolerance. Undefined cases give ``(nan, nan, reason)``: fewer than
        2 pairs, or a constant input (tau-b divides by the number of untied pairs).

    Raises:
        RecordError: lengths differ, an input is not 1-D, or contains NaN.
    """
    a, b = _vector(x, "x"), _vector(y, "y")
    if len(a) != len(b):
        raise RecordError(f"x and y must have the same length, got {len(a)} and {len(b)}")
    if len(a) < 2:
        return TauResult(np.nan, np.nan, f"need at least 2 paired values, got {len(a)}")
    for arr, name in ((a, "x"), (b, "y")):
        if np.all(arr == arr[0]):
            return TauResult(np.nan, np.nan, f"{name} is constant (all {len(arr)} values equal {arr[0]:g})")
    from scipy import stats  # scipy.stats costs ~0.7 s to import; only pay it when used

    res = stats.kendalltau(a, b, variant="b")
    return TauResult(float(res.statistic), float(res.pvalue), None)


def _outcomes_by_key(table: pd.DataFrame, name: str) -> pd.Series:
    df = canonicalize_comparisons(table)
    key = ["sample_id", "model_a", "model_b"]
    if df.duplicated(key).any():
        first = df.loc[df.duplicated(key), key].iloc[0].tolist()
        raise RecordError(
            f"{name}: more than one outcome for (sample_id, model_a, model_b) = {first}; pass one judge's rows "
            "or a majority_vote table"
        )
    return df.set_index(key)["outcome"]


def pair_agreement(judge_outcomes, human_outcomes, *, with_ties: bool = True) -> PairAgreement:
    """Share of comparisons where the judge and the human gave the same outcome (OpenING's agreement).

    Args:
        judge_outcomes, human_outcomes: either two Comparisons tables (matched on sample_id, model_a, model_b
            after canonicalisation; comparisons only one side has are ignored; one row per comparison each) or
            two equal-length sequences of outcomes in {1.0, 0.5, 0.0} from the same side.
        with_ties: True: a tie is a third label that must match. False: comparisons where either side called a
            tie are left out (OpenING's "w/o Tie").

    Returns:
        :class:`PairAgreement` ``(agreement, n_pairs, reason)``; agreement in [0, 1], higher is better; NaN with
        a reason when no comparison is left.

    Raises:
        RecordError: malformed tables, duplicated comparisons, unequal lengths or outcomes outside {0, 0.5, 1}.
    """
    if isinstance(judge_outcomes, pd.DataFrame) or isinstance(human_outcomes, pd.DataFrame):
        j = _outcomes_by_key(judge_outcomes, "judge_outcomes")
        h = _outcomes_by_key(human_outcomes, "human_outcomes")
        joined = pd.concat([j.rename("j"), h.rename("h")], axis=1, join="inner")
        jv, hv = joined["j"].to_numpy(), joined["h"].to_numpy()
    else:
        jv, hv = _vector(judge_outcomes, "judge_outcomes"), _vector(human_outcomes, "human_outcomes")
        if len(jv) != len(hv):
            raise RecordError(f"outcome sequences differ in length: {len(jv)} and {len(hv)}")
        if not (np.isin(jv, (0.0, 0.5, 1.0)).all() and np.isin(hv, (0.0, 0.5, 1.0)).all()):
            raise RecordError("outcomes must be 1.0, 0.5 or 0.0")
    if not with_ties:
        keep = (jv != 0.5) & (hv != 0.5)
        jv, hv = jv[keep], hv[keep]
    if len(jv) == 0:
        return PairAgreement(np.nan, 0, "no comparisons in common" + ("" if with_ties else " without ties"))
    return PairAgreement(float(np.mean(jv == hv)), len(jv), None)


def bootstrap_pair_agreement(
    judge_outcomes: pd.DataFrame,
    human_outcomes: pd.DataFrame,
    *,
    with_ties: bool = True,
    n_boot: int = 1000,
    seed: int = 0,
    ci: float = 0.95,
) -> tuple[float, float]:
    """Percentile bootstrap interval of :func:`pair_agreement`, resampling prompts (``sample_id``).

    Comparisons on one prompt share it, so whole prompts are drawn with replacement (as
    :func:`echo_builder.stats.bootstrap_win_rates` does) and the agreement recomputed over the comparisons both
    sides rated on the drawn prompts.

    Args:
        judge_outcomes, human_outcomes: Comparisons tables as for :func:`pair_agreement` (one row per comparison).
        with_ties: as :func:`pair_agreement` (False: comparisons where either side called a tie are left out).
        n_boot: replicates (>= 1); seed: ``numpy.random.default_rng`` seed; ci: central coverage in (0, 1).

    Returns:
        ``(low, high)`` in [0, 1]; ``(nan, nan)`` when no comparison is shared (a replicate that draws none of the
        shared prompts' comparisons is left out).

    Raises:
        RecordError: as :func:`pair_agreement`. ConfigError: ``n_boot`` < 1 or ``ci`` outside (0, 1).
    """
    from echo_builder.stats.bootstrap import bootstrap_counts, check_bootstrap_args

    check_bootstrap_args(n_boot, ci)
    j = _outcomes_by_key(judge_outcomes, "judge_outcomes")
    h = _outcomes_by_key(human_outcomes, "human_outcomes")
    joined = pd.concat([j.rename("j"), h.rename("h")], axis=1, join="inner").reset_index()
    if not with_ties:
        joined = joined[(joined["j"] != 0.5) & (joined["h"] != 0.5)]
    if joined.empty:
        return (np.nan, np.nan)
    per_prompt = (
        joined.assign(agree=(joined["j"] == joined["h"]).astype(float))
        .groupby("sample_id", sort=True)["agree"]
        .agg(["sum", "size"])
    )
    counts = bootstrap_counts(np.random.default_rng(seed), len(per_prompt), n_boot).astype(float)
    with np.errstate(invalid="ignore", divide="ignore"):
        boot = (counts @ per_prompt["sum"].to_numpy()) / (counts @ per_prompt["size"].to_numpy(dtype=float))
    alpha = (1.0 - float(ci)) / 2.0
    low, high = np.nanquantile(boot, [alpha, 1.0 - alpha])
    return (float(low), float(high))


def bootstrap_rank_agreement(
    judge_outcomes: pd.DataFrame,
    human_outcomes: pd.DataFrame,
    *,
    n_boot: int = 1000,
    seed: int = 0,
    ci: float = 0.95,
) -> tuple[float, float]:
    """Percentile bootstrap interval of Kendall tau-b between the judge's and the humans' model win rates
    (:func:`model_rank_agreement` of :func:`echo_builder.stats.win_rates`), resampling prompts.

    Each replicate draws the prompts (``sample_id`` of either table) with replacement, recomputes every model's win
    rate from each side's comparisons on the drawn prompts (ties count half), and computes tau-b over the models
    both sides rated in that replicate. Replicates where tau-b is undefined (fewer than 2 models, or constant win
    rates) are left out.

    Args:
        judge_outcomes, human_outcomes: Comparisons tables (any orientation).
        n_boot: replicates (>= 1); seed: ``numpy.random.default_rng`` seed; ci: central coverage in (0, 1).

    Returns:
        ``(low, high)`` in [-1, 1]; ``(nan, nan)`` when no replicate defines tau-b.

    Raises:
        RecordError: malformed tables. ConfigError: ``n_boot`` < 1 or ``ci`` outside (0, 1).
    """
    from echo_builder.stats.bootstrap import bootstrap_counts, check_bootstrap_args
    from echo_builder.stats.schema import encode_labels

    check_bootstrap_args(n_boot, ci)
    j, h = canonicalize_comparisons(judge_outcomes), canonicalize_comparisons(human_outcomes)
    prompts, (pj, ph) = encode_labels(j["sample_id"], h["sample_id"])
    models, (ja, jb, ha, hb) = encode_labels(j["model_a"], j["model_b"], h["model_a"], h["model_b"])
    n_p, n_m = len(prompts), len(models)

    def per_prompt(p_idx, a_idx, b_idx, outcome):  # points and comparisons per (prompt, model)
        cells = p_idx * n_m
        size = n_p * n_m
        points = np.bincount(cells + a_idx, outcome, size) + np.bincount(cells + b_idx, 1.0 - outcome, size)
        counts = np.bincount(cells + a_idx, minlength=size) + np.bincount(cells + b_idx, minlength=size)
        return points.reshape(n_p, n_m), counts.reshape(n_p, n_m).astype(float)

    j_points, j_counts = per_prompt(pj, ja, jb, j["outcome"].to_numpy(dtype=float))
    h_points, h_counts = per_prompt(ph, ha, hb, h["outcome"].to_numpy(dtype=float))
    draws = bootstrap_counts(np.random.default_rng(seed), n_p, n_boot).astype(float)
    with np.errstate(invalid="ignore", divide="ignore"):
        j_rates = (draws @ j_points) / (draws @ j_counts)
        h_rates = (draws @ h_points) / (draws @ h_counts)
    taus = []
    for jr, hr in zip(j_rates, h_rates, strict=True):
        both = np.isfinite(jr) & np.isfinite(hr)
        if both.sum() >= 2:
            taus.append(kendall_tau_b(jr[both], hr[both]).tau)
    taus_arr = np.asarray(taus, dtype=float)
    if not np.isfinite(taus_arr).any():
        return (np.nan, np.nan)
    alpha = (1.0 - float(ci)) / 2.0
    low, high = np.nanquantile(taus_arr, [alpha, 1.0 - alpha])
    return (float(low), float(high))


def kendalls_w(rank_matrix) -> KendallW:
    """Kendall's coefficient of concordance W among raters, with the correction for tied ranks (Kendall and
    Babington Smith, 1939; ECHO reports W = 0.49 among its 5 experts).

    Args:
        rank_matrix: 2-D array-like, raters x items (m x n), of ranks or scores; each rater's row is re-ranked
            (ties get average ranks), so only the order within a row matters, in the same direction for all.

    Returns:
        :class:`KendallW` ``(w, chi2, p_value, reason)``: W = 12 S / (m^2 (n^3 - n) - m sum T), with S the sum of
        squared deviations of the items' rank sums and T = sum (t^3 - t) over each rater's tie groups; chi2 =
        m (n - 1) W on n - 1 degrees of freedom (Friedman's test). NaN with a reason for fewer than 2 raters or
        items, or when every rater tied all items.

    Raises:
        RecordError: not 2-D, or contains NaN.
    """
    x = np.asarray(rank_matrix, dtype=float)
    if x.ndim != 2:
        raise RecordError(f"rank_matrix must be 2-D (raters x items), got shape {x.shape}")
    if np.isnan(x).any():
        raise RecordError("rank_matrix contains NaN; drop the rater or item first")
    m, n = x.shape
    if m < 2 or n < 2:
        return KendallW(np.nan, np.nan, np.nan, f"need at least 2 raters and 2 items, got {m} x {n}")
    from scipy import stats

    ranks = stats.rankdata(x, axis=1)
    ties = 0.0
    for row in x:
        _, t = np.unique(row, return_counts=True)
        ties += float((t**3 - t).sum())
    denom = m**2 * (n**3 - n) - m * ties
    if denom <= 0:
        return KendallW(np.nan, np.nan, np.nan, "every rater gave all items the same value")
    s = float(((ranks.sum(axis=0) - m * (n + 1) / 2.0) ** 2).sum())
    w = 12.0 * s / denom
    chi2 = m * (n - 1) * w
    return KendallW(w, chi2, float(stats.chi2.sf(chi2, n - 1)), None)


def _as_series(scores, name: str) -> pd.Series:
    if isinstance(scores, pd.Series):
        s = scores
    elif isinstance(scores, Mapping):
        s = pd.Series(dict(scores))
    else:
        raise RecordError(f"{name} must be a pandas Series or a mapping of name -> score")
    s = pd.to_numeric(s, errors="coerce").astype(float)
    s.index = s.index.map(str)
    if s.index.duplicated().any():
        raise RecordError(f"{name} repeats {s.index[s.index.duplicated()][0]!r}")
    return s.dropna()


def model_rank_agreement(scores_a, scores_b) -> RankAgreement:
    """Kendall's tau-b between two model-level scorings, e.g. win rates vs a published leaderboard's Elo.

    Args:
        scores_a, scores_b: ``pandas.Series`` or mappings model name -> score (higher = better in both, or lower
            = better in both). Models with a NaN score count as absent.

    Returns:
        :class:`RankAgreement` over the models both sides scored (matched by name), with the models only one
        side has in ``only_a`` / ``only_b`` (sorted).

    Raises:
        RecordError: not a Series/mapping, or a model repeats.
    """
    a, b = _as_series(scores_a, "scores_a"), _as_series(scores_b, "scores_b")
    common = sorted(set(a.index) & set(b.index))
    tau = kendall_tau_b(a.loc[common].to_numpy(), b.loc[common].to_numpy())
    only_a = tuple(sorted(set(a.index) - set(common)))
    only_b = tuple(sorted(set(b.index) - set(common)))
    return RankAgreement(tau.tau, tau.p_value, tau.reason, len(common), only_a, only_b)


def sample_rank_agreement(
    judge_scores: pd.DataFrame,
    human_scores: pd.DataFrame,
    *,
    on: Sequence[str] = ("sample_id", "model"),
    value: str = "rating",
) -> RankAgreement:
    """Kendall's tau-b at sample level: each (sample, model) output is one item rated by the judge and a human.

    Args:
        judge_scores, human_scores: long tables with the ``on`` columns and a numeric ``value`` column (e.g.
            Ratings tables of one judge and of one expert, or the experts' mean). Rows with a NaN value (judge
            failures) count as absent; each key may occur once per table.
        on: key columns that identify an item.
        value: the score column (higher = better in both).

    Returns:
        :class:`RankAgreement` pooled over all matched items; ``only_a`` / ``only_b`` hold the keys (tuples)
        only the judge / only the human rated.

    Raises:
        RecordError: a column is missing or a key repeats.
    """
    keys = list(on)

    def _indexed(df: pd.DataFrame, name: str) -> pd.Series:
        missing = [c for c in (*keys, value) if c not in df.columns]
        if missing:
            raise RecordError(f"{name} lacks column(s) {missing}")
        s = df.assign(**{k: df[k].astype(str) for k in keys}).set_index(keys)[value]
        if s.index.duplicated().any():
            raise RecordError(f"{name} has more than one row for {s.index[s.index.duplicated()][0]}")
        return pd.to_numeric(s, errors="coerce").astype(float).dropna()

    j, h = _indexed(judge_scores, "judge_scores"), _indexed(human_scores, "human_scores")
    common = j.index.intersection(h.index).sort_values()
    tau = kendall_tau_b(j.loc[common].to_numpy(), h.loc[common].to_numpy())
    only_a = tuple(sorted(j.index.difference(common)))
    only_b = tuple(sorted(h.index.difference(common)))
    return RankAgreement(tau.tau, tau.p_value, tau.reason, len(common), only_a, only_b)
