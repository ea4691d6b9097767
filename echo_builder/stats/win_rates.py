"""Win rates and the head-to-head matrix (ECHO Flow 2).

The win rate of a model is the mean over all its comparisons (every prompt x every opponent x every judge row
given) of win 1, tie 0.5, loss 0. Higher is better; range [0, 1]; 0.5 is the level of an average opponent.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from echo_builder.stats.schema import canonicalize_comparisons

__all__ = ["head_to_head", "model_points", "win_rates"]


def model_points(comparisons: pd.DataFrame) -> pd.DataFrame:
    """Both sides of every comparison as one row per (comparison, model): the model's points and its opponent.

    Args:
        comparisons: a Comparisons table (any orientation; canonicalised first).

    Returns:
        DataFrame with ``sample_id``, ``judge``, ``model``, ``opponent`` and ``points`` (float: 1 win, 0.5 tie,
        0 loss), twice as many rows as there are comparisons.

    Raises:
        RecordError: as :func:`echo_builder.stats.schema.canonicalize_comparisons`.
    """
    df = canonicalize_comparisons(comparisons)
    a = pd.DataFrame(
        {
            "sample_id": df["sample_id"],
            "judge": df["judge"],
            "model": df["model_a"],
            "opponent": df["model_b"],
            "points": df["outcome"],
        }
    )
    b = pd.DataFrame(
        {
            "sample_id": df["sample_id"],
            "judge": df["judge"],
            "model": df["model_b"],
            "opponent": df["model_a"],
            "points": 1.0 - df["outcome"],
        }
    )
    return pd.concat([a, b], ignore_index=True)


def win_rates(comparisons: pd.DataFrame) -> pd.DataFrame:
    """Per-model win rate over all of its comparisons, ties counting half (ECHO Flow 2).

    Args:
        comparisons: a Comparisons table (columns ``sample_id``, ``judge``, ``model_a``, ``model_b``,
            ``outcome`` in {1.0, 0.5, 0.0}); any orientation. Every row counts once, so pass the majority-voted
            table for an ensemble, or per-judge rows to pool judges.

    Returns:
        DataFrame with one row per model that appears: ``model`` (str), ``win_rate`` (float in [0, 1], higher is
        better) = (wins + 0.5 ties) / n_comparisons, ``wins``, ``ties``, ``losses``, ``n_comparisons`` (int),
        sorted by win rate (descending) then model name.

    Raises:
        RecordError: a required column is missing or an outcome is not 0, 0.5 or 1.

    Example:
        >>> import pandas as pd
        >>> c = pd.DataFrame({"sample_id": ["1", "2"], "judge": "h", "model_a": "A", "model_b": "B",
        ...                   "outcome": [1.0, 0.5]})
        >>> win_rates(c)[["model", "win_rate"]].values.tolist()
        [['A', 0.75], ['B', 0.25]]
    """
    pts = model_points(comparisons)
    p = pts["points"].to_numpy()
    counted = pts[["model"]].assign(
        wins=(p == 1.0).astype(np.int64), ties=(p == 0.5).astype(np.int64), losses=(p == 0.0).astype(np.int64)
    )
    out = counted.groupby("model", sort=True).sum().reset_index()
    out["n_comparisons"] = out["wins"] + out["ties"] + out["losses"]
    out["win_rate"] = (out["wins"] + 0.5 * out["ties"]) / out["n_comparisons"]
    out = out[["model", "win_rate", "wins", "ties", "losses", "n_comparisons"]]
    return out.sort_values(["win_rate", "model"], ascending=[False, True], kind="stable").reset_index(
        drop=True
    )


def head_to_head(comparisons: pd.DataFrame) -> pd.DataFrame:
    """Square matrix of the row model's win rate against the column model, ties 0.5 (ECHO Flow 2).

    Args:
        comparisons: a Comparisons table (any orientation).

    Returns:
        DataFrame indexed and columned by model, both in :func:`win_rates` order (best first). Cell (r, c) is the
        mean of r's points over all comparisons between r and c, so ``m.loc[r, c] + m.loc[c, r] == 1``. The
        diagonal and never-compared pairs are NaN.

    Raises:
        RecordError: as :func:`win_rates`.
    """
    order = win_rates(comparisons)["model"].tolist()
    pts = model_points(comparisons)
    mean = pts.groupby(["model", "opponent"], sort=True)["points"].mean()
    matrix = mean.unstack("opponent").reindex(index=order, columns=order)
    matrix.index.name, matrix.columns.name = "model", "opponent"
    return matrix.astype(float)
