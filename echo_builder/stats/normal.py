"""Win rates with a normal-approximation interval over comparisons: the interval of ECHO's released code.

echo-bench's default interval is the bootstrap over prompts (:func:`echo_builder.stats.bootstrap_win_rates`):
comparisons that share a prompt are not independent, and a normal approximation that treats them as independent
is too narrow. This module exists so that a run can be put beside the paper's numbers computed the authors' way
(``echo-bench leaderboard --ci normal``; ``docs/reproducing-echo.md``).
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from echo_builder.errors import RecordError
from echo_builder.stats.win_rates import model_points, win_rates

__all__ = ["NORMAL_Z", "normal_win_rates"]

#: two-sided 95% quantile of the standard normal, as written in the authors' aggregation
NORMAL_Z = 1.96


def normal_win_rates(comparisons: pd.DataFrame, *, z: float = NORMAL_Z) -> pd.DataFrame:
    """Win rates with ``mean +- z * sd / sqrt(n)`` over each model's per-comparison outcomes.

    For a model with outcomes ``x_1..x_n`` (1 win, 0.5 tie, 0 loss; one per comparison it took part in, from its
    side), ``win_rate = mean(x)``, ``sd`` is the sample standard deviation (``ddof=1``) and the interval is
    ``win_rate -+ z * sd / sqrt(n)``, not clipped to [0, 1] (as the normal approximation gives it). With one
    comparison the interval is NaN (no spread to estimate).

    Args:
        comparisons: a Comparisons table (``sample_id``, ``judge``, ``model_a``, ``model_b``, ``outcome``), any
            orientation; every row counts once (pass the majority-voted table for an ensemble).
        z: the normal quantile (1.96 for 95%).

    Returns:
        DataFrame in :func:`~echo_builder.stats.win_rates` order with ``model``, ``win_rate`` (in [0, 1]),
        ``ci_low``, ``ci_high``, ``wins``, ``ties``, ``losses``, ``n_comparisons``, ``sd`` (of the outcomes).

    Raises:
        RecordError: as :func:`~echo_builder.stats.win_rates`; also when the table is empty.
    """
    if not math.isfinite(z) or z <= 0:
        raise RecordError(f"z must be a positive number, got {z}")
    points = model_points(comparisons)
    if points.empty:
        raise RecordError("comparisons table is empty: no win rate to estimate")
    table = win_rates(comparisons)
    grouped = points.groupby("model")["points"]
    sd = grouped.std(ddof=1)
    n = grouped.size().astype(float)
    half = z * sd / np.sqrt(n)
    mean = grouped.mean()
    bounds = pd.DataFrame(
        {"model": sd.index, "ci_low": (mean - half).to_numpy(), "ci_high": (mean + half).to_numpy()}
    )
    bounds["sd"] = sd.to_numpy()
    out = table.merge(bounds, on="model", how="left")
    return out[["model", "win_rate", "ci_low", "ci_high", "wins", "ties", "losses", "n_comparisons", "sd"]]
