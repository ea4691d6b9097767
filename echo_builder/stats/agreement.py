"""Agreement between judges and humans, and among raters (ECHO Flow 2 "Agreement with humans").

* Kendall's tau-b (scipy's variant "b", with its p-value), NaN with a reason when it is undefined;
* pair agreement with and without ties (OpenING, arXiv 2411.18499: IntJudge 82.42% vs GPT-4o 71.08%);
* Kendall's W among several raters with the tie correction (ECHO: W = 0.49 among 5 experts);
* model-level (e.g. win rates vs a published leaderboard) and sample-level rank agreement helpers;
* rank correlation of two per-sample scores (Kendall tau-b and Spearman rho) with percentile bootstrap intervals
  resampling samples (:func:`rank_correlation_bootstrap`), e.g. a VLM judge's text_rendering against the OCR's
  text_accuracy.
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
    "RankCorrelation",
    "TauResult",
    "bootstrap_pair_agreement",
    "bootstrap_rank_agreement",
    "kendall_tau_b",
    "kendalls_w",
    "model_rank_agreement",
    "pair_agreement",
    "rank_correlation_bootstrap",
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


class RankCorrelation(NamedTuple):
    """Rank correlations of paired scores with percentile bootstrap intervals (see
    :func:`rank_correlation_bootstrap`).

    Attributes:
        tau_b: Kendall's tau-b in [-1, 1] on all pairs (NaN when undefined); tau_p: its two-sided p-value.
        tau_low, tau_high: the interval's bounds (NaN when no replicate defines tau-b).
        rho: Spearman's rho in [-1, 1] on all pairs (NaN when undefined); rho_p: its two-sided p-value.
        rho_low, rho_high: its interval's bounds.
        n: number of pairs; n_groups: number of resampling units (samples).
        n_boot: replicates drawn; n_degenerate: replicates left out because a side was constant in them (tau-b and
            rho undefined there), counted in neither percentile.
        ci: central coverage of the intervals (0.95: 2.5th and 97.5th percentiles).
        reason: why the point estimates are NaN (fewer than 3 pairs, a constant side), else ``None``.
    """

    tau_b: float
    tau_p: float
    tau_low: float
    tau_high: float
    rho: float
    rho_p: float
    rho_low: float
    rho_high: float
    n: int
    n_groups: int
    n_boot: int
    n_degenerate: int
    ci: float
    reason: str | None


#: Up to this many pairs, bootstrap replicates are computed as weighted sums over all pairs of items at once (an
#: n x n comparison matrix); above it, replicate by replicate with scipy.
_MATRIX_LIMIT = 1200


def _replicate_correlations(
    a: np.ndarray, b: np.ndarray, counts: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Kendall tau-b and Spearman rho of each bootstrap replicate (NaN where a side is constant).

    ``counts`` (k, n): how often each pair is drawn in each replicate. A replicate is the multiset holding pair i
    ``counts[r, i]`` times; a pair drawn twice is tied with itself on both sides, as scipy treats repeated rows.
    """
    from scipy import stats

    k, n = counts.shape
    if n > _MATRIX_LIMIT:
        taus, rhos = np.full(k, np.nan), np.full(k, np.nan)
        for r in range(k):
            draw = np.repeat(np.arange(n), counts[r])
            xs, ys = a[draw], b[draw]
            if xs.min() != xs.max() and ys.min() != ys.max():
                taus[r] = stats.kendalltau(xs, ys, variant="b").statistic
                rhos[r] = stats.spearmanr(xs, ys).statistic
        return taus, rhos
    c = counts.astype(float)
    total = c.sum(axis=1)
    sx, sy = np.sign(a[:, None] - a[None, :]), np.sign(b[:, None] - b[None, :])

    def pairs(matrix: np.ndarray) -> np.ndarray:  # sum over ordered pairs of draws of matrix[i, j]
        return ((c @ matrix) * c).sum(axis=1)

    # tau-b = (P - Q) / sqrt((n0 - n1)(n0 - n2)) over unordered pairs of distinct draws (Kendall 1945)
    concordance = pairs(sx * sy) / 2.0  # P - Q (ties and a draw with itself add 0)
    n0 = total * (total - 1) / 2.0
    tied_x = (pairs((sx == 0).astype(float)) - total) / 2.0
    tied_y = (pairs((sy == 0).astype(float)) - total) / 2.0
    with np.errstate(invalid="ignore", divide="ignore"):
        taus = concordance / np.sqrt((n0 - tied_x) * (n0 - tied_y))

    # Spearman: Pearson of average ranks, rank_i = (draws below) + (draws equal + 1) / 2, weighted by the counts
    def ranks(sign: np.ndarray) -> np.ndarray:
        below = c @ (sign.T < 0).astype(float)  # [r, i] = draws j with value_j < value_i
        equal = c @ (sign.T == 0).astype(float)
        return below + (equal + 1.0) / 2.0

    rx, ry = ranks(sx), ranks(sy)
    mx = (c * rx).sum(axis=1, keepdims=True) / total[:, None]
    my = (c * ry).sum(axis=1, keepdims=True) / total[:, None]
    dx, dy = rx - mx, ry - my
    with np.errstate(invalid="ignore", divide="ignore"):
        rhos = (c * dx * dy).sum(axis=1) / np.sqrt((c * dx * dx).sum(axis=1) * (c * dy * dy).sum(axis=1))
    constant = (n0 - tied_x <= 0) | (n0 - tied_y <= 0)
    taus[constant] = np.nan
    rhos[constant] = np.nan
    return taus, rhos


def rank_correlation_bootstrap(
    x: Sequence[float] | np.ndarray,
    y: Sequence[float] | np.ndarray,
    *,
    groups: Sequence[object] | None = None,
    n_boot: int = 1000,
    seed: int = 0,
    ci: float = 0.95,
) -> RankCorrelation:
    """Kendall's tau-b and Spearman's rho between paired scores, each with a percentile bootstrap interval.

    The point estimates are ``scipy.stats.kendalltau(variant="b")`` and ``scipy.stats.spearmanr`` on all pairs.
    Each bootstrap replicate draws the resampling units with replacement (``groups``: all pairs of a drawn unit
    come along, e.g. every model's output on one prompt, as the win-rate intervals resample prompts; default:
    each pair is its own unit) and recomputes both statistics on the drawn pairs; the interval is the
    ``(1 - ci) / 2`` and ``1 - (1 - ci) / 2`` percentiles of the replicates (Efron and Tibshirani 1993, ch. 13).
    Replicates in which a side is constant define neither statistic; they are left out and counted in
    ``n_degenerate``. Equal seeds give equal intervals.

    Args:
        x, y: equal-length 1-D numeric sequences without NaN, ``x[i]`` and ``y[i]`` scoring the same item (drop
            NaN pairs first); both in the same direction for a positive value to mean agreement.
        groups: optional, one resampling-unit label per pair (any hashable; compared as given).
        n_boot: replicates (>= 1; 1,000 is usual); seed: seed of ``numpy.random.default_rng``.
        ci: central coverage, strictly between 0 and 1.

    Returns:
        :class:`RankCorrelation`; every correlation in [-1, 1] (1: same order), NaN with ``reason`` when fewer
        than 3 pairs or a side is constant.

    Raises:
        RecordError: lengths differ, an input is not 1-D or holds NaN, or ``groups`` has another length.
        ConfigError: ``n_boot`` < 1 or ``ci`` outside (0, 1).
    """
    from echo_builder.stats.bootstrap import bootstrap_counts, check_bootstrap_args

    check_bootstrap_args(n_boot, ci)
    a, b = _vector(x, "x"), _vector(y, "y")
    if len(a) != len(b):
        raise RecordError(f"x and y must have the same length, got {len(a)} and {len(b)}")
    if groups is None:
        unit = np.arange(len(a))
    else:
        labels = list(groups)
        if len(labels) != len(a):
            raise RecordError(f"groups needs one label per pair: got {len(labels)} for {len(a)} pairs")
        index: dict[object, int] = {}
        unit = np.array([index.setdefault(label, len(index)) for label in labels], dtype=np.int64)
    n_units = int(unit.max()) + 1 if len(unit) else 0
    nan = float("nan")
    reason = None
    if len(a) < 3:
        reason = f"need at least 3 paired values, got {len(a)}"
    else:
        for arr, name in ((a, "x"), (b, "y")):
            if np.all(arr == arr[0]):
                reason = f"{name} is constant (all {len(arr)} values equal {arr[0]:g})"
                break
    if reason is not None:
        return RankCorrelation(nan, nan, nan, nan, nan, nan, nan, nan, len(a), n_units, n_boot, 0, ci, reason)
    from scipy import stats

    tau = stats.kendalltau(a, b, variant="b")
    rho = stats.spearmanr(a, b)
    # counts[r, u]: how often unit u is drawn in replicate r; a pair is drawn as often as its unit
    counts = bootstrap_counts(np.random.default_rng(seed), n_units, n_boot)
    taus, rhos = _replicate_correlations(a, b, counts[:, unit])
    alpha = (1.0 - float(ci)) / 2.0
    defined = np.isfinite(taus)
    if defined.any():
        tau_low, tau_high = np.quantile(taus[defined], [alpha, 1.0 - alpha])
        rho_low, rho_high = np.quantile(rhos[defined], [alpha, 1.0 - alpha])
    else:
        tau_low = tau_high = rho_low = rho_high = nan
    return RankCorrelation(
        float(tau.statistic),
        float(tau.pvalue),
        float(tau_low),
        float(tau_high),
        float(rho.statistic),
        float(rho.pvalue),
        float(rho_low),
        float(rho_high),
        len(a),
        n_units,
        n_boot,
        int((~defined).sum()),
        float(ci),
        None,
    )
