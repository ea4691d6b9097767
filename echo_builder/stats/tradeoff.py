"""Dimension trade-off maps after TRIG-Bench (arXiv 2507.22100, "Trade-offs in Image Generation").

TRIG-Bench scores every output on several dimensions (realism, aesthetics, content alignment, ...), computes per
model the Spearman correlation for every dimension pair, and names each pair's relation: synergy (both high),
bottleneck (both low), tilt (one high, one low) or dispersion (no relation), drawn as a heat map (their
"Dimension Trade-off Map").

Source note: the paper's exact thresholds were not available to us. TRIG's released ``relationator.py`` only
splits pairs by the sign of the correlation ("dominating" vs "contradicting"), and its stored relation-code
tables give a code per pair next to both dimensions' mean scores, without the rule. The rule below is therefore
**our definition**, built from the four names and the two quantities TRIG records (correlation, mean scores):

1. fewer than ``min_samples`` paired scores, or a constant dimension: ``undetermined`` (reason given);
2. ``|rho| < min_abs_rho`` (default 0.3): ``dispersion``, the scores do not move together;
3. ``rho <= -min_abs_rho``: ``tilt``, sample by sample one dimension is high where the other is low;
4. ``rho >= min_abs_rho``: by the two means against ``threshold`` (default 0.5, the middle of TRIGScore's
   [0, 1] range): both >= threshold ``synergy``, both below ``bottleneck``, otherwise ``tilt``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from itertools import combinations

import numpy as np
import pandas as pd

from echo_builder.errors import ConfigError
from echo_builder.stats.schema import require_columns

__all__ = ["RELATIONS", "tradeoff_map", "tradeoff_matrix"]

RELATIONS = ("synergy", "bottleneck", "tilt", "dispersion", "undetermined")


def _classify(
    rho: float, mean_x: float, mean_y: float, thr_x: float, thr_y: float, min_abs_rho: float
) -> str:
    if abs(rho) < min_abs_rho:
        return "dispersion"
    if rho < 0:
        return "tilt"
    high_x, high_y = mean_x >= thr_x, mean_y >= thr_y
    if high_x and high_y:
        return "synergy"
    if not high_x and not high_y:
        return "bottleneck"
    return "tilt"


def tradeoff_map(
    scores: pd.DataFrame,
    dimensions: Sequence[str],
    *,
    threshold: float | Mapping[str, float] = 0.5,
    min_abs_rho: float = 0.3,
    min_samples: int = 3,
) -> pd.DataFrame:
    """Per model and dimension pair: Spearman correlation over samples, mean scores and the TRIG relation.

    Args:
        scores: per-sample scores, columns ``model``, ``sample_id`` and one numeric column per dimension
            (higher = better; NaN = not scored, used pairwise: a pair uses the samples scored on both).
        dimensions: the dimension columns, in the order pairs are listed (pair (i, j) with i before j).
        threshold: the score separating "high" from "low", one number or one per dimension (default 0.5 for
            scores in [0, 1]; use e.g. 5.5 for 1-10 ratings).
        min_abs_rho: smallest |Spearman rho| that counts as a relation.
        min_samples: fewest paired samples to classify a pair.

    Returns:
        Long DataFrame, one row per model and pair: ``model``, ``dim_x``, ``dim_y``, ``rho`` (Spearman, in
        [-1, 1]), ``p_value``, ``n`` (paired samples), ``mean_x``, ``mean_y``, ``relation`` (one of
        :data:`RELATIONS`; see the module docstring for the rule) and ``reason`` (why ``undetermined``, else "").
        Sorted by model, then pair order.

    Raises:
        RecordError: a required column is missing.
        ConfigError: fewer than 2 dimensions, a repeated dimension, a threshold missing for a dimension, or
            ``min_abs_rho`` outside [0, 1].
    """
    dims = list(dimensions)
    if len(dims) < 2 or len(set(dims)) != len(dims):
        raise ConfigError(f"need at least 2 distinct dimensions, got {dims}")
    if not 0.0 <= min_abs_rho <= 1.0:
        raise ConfigError(f"min_abs_rho must be in [0, 1], got {min_abs_rho!r}")
    require_columns(scores, ["model", "sample_id", *dims], "scores")
    if isinstance(threshold, Mapping):
        missing = [d for d in dims if d not in threshold]
        if missing:
            raise ConfigError(f"threshold has no value for dimension(s) {missing}")
        thr = {d: float(threshold[d]) for d in dims}
    else:
        thr = dict.fromkeys(dims, float(threshold))
    from scipy import stats  # scipy.stats costs ~0.7 s to import; only pay it when used

    values = scores[dims].apply(pd.to_numeric, errors="coerce").astype(float)
    models = scores["model"].astype(str)
    rows = []
    for model in sorted(models.unique()):
        block = values[models.to_numpy() == model]
        for x, y in combinations(dims, 2):
            pair = block[[x, y]].dropna()
            n = len(pair)
            mean_x, mean_y = (float(pair[x].mean()), float(pair[y].mean())) if n else (np.nan, np.nan)
            rho = p = np.nan
            reason = ""
            if n < min_samples:
                reason = f"only {n} sample(s) scored on both (need {min_samples})"
            elif pair[x].nunique() == 1 or pair[y].nunique() == 1:
                reason = f"{x if pair[x].nunique() == 1 else y} is constant, so rank correlation is undefined"
            else:
                res = stats.spearmanr(pair[x].to_numpy(), pair[y].to_numpy())
                rho, p = float(res.statistic), float(res.pvalue)
            relation = (
                "undetermined" if reason else _classify(rho, mean_x, mean_y, thr[x], thr[y], min_abs_rho)
            )
            rows.append((model, x, y, rho, p, n, mean_x, mean_y, relation, reason))
    cols = ["model", "dim_x", "dim_y", "rho", "p_value", "n", "mean_x", "mean_y", "relation", "reason"]
    return pd.DataFrame(rows, columns=cols)


def tradeoff_matrix(tmap: pd.DataFrame, model: str, value: str = "rho") -> pd.DataFrame:
    """One model's square, symmetric dimension x dimension matrix of ``value`` from :func:`tradeoff_map`.

    Args:
        tmap: the output of :func:`tradeoff_map`.
        model: which model.
        value: a column of ``tmap`` (``rho``, ``relation``, ``p_value``, ``n``, ...).

    Returns:
        DataFrame indexed and columned by dimension in first-seen order; the diagonal is 1.0 for ``rho``, else
        NaN (or None for text columns).

    Raises:
        ConfigError: ``model`` is not in ``tmap`` or ``value`` is not a column.
    """
    if value not in tmap.columns:
        raise ConfigError(f"value must be one of {list(tmap.columns)}, got {value!r}")
    part = tmap[tmap["model"] == model]
    if part.empty:
        raise ConfigError(
            f"model {model!r} is not in the trade-off map; models: {sorted(tmap['model'].unique())}"
        )
    dims = list(dict.fromkeys([*part["dim_x"], *part["dim_y"]]))
    matrix = pd.DataFrame(index=dims, columns=dims, dtype=object)
    for x, y, v in zip(part["dim_x"], part["dim_y"], part[value], strict=True):
        matrix.loc[x, y] = matrix.loc[y, x] = v
    if value == "rho":
        arr = matrix.to_numpy(dtype=float, copy=True)
        np.fill_diagonal(arr, 1.0)
        matrix = pd.DataFrame(arr, index=dims, columns=dims)
    return matrix
