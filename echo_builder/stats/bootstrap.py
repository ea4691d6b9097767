"""Bootstrap confidence intervals for win rates, resampling prompts (ECHO Flow 2 "Uncertainty").

All comparisons on one prompt share that prompt's difficulty, so they are not independent; a normal
approximation over comparisons (p +- 1.96 sqrt(p(1-p)/n)) ignores that and is too narrow (a defect of the
reference code). Here whole prompts are resampled with replacement, optionally judges too, and the win rates
recomputed. Replicates are done at once with one (n_boot x n_prompts) count matrix and a matrix product, no
Python loop over replicates.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from echo_builder.errors import ConfigError, RecordError
from echo_builder.stats.schema import canonicalize_comparisons, encode_labels
from echo_builder.stats.win_rates import win_rates

__all__ = ["bootstrap_counts", "bootstrap_win_rates", "check_bootstrap_args"]


def check_bootstrap_args(n_boot: int, ci: float) -> None:
    """Raise :class:`ConfigError` unless ``n_boot`` is a positive int and ``0 < ci < 1``."""
    if isinstance(n_boot, bool) or not isinstance(n_boot, (int, np.integer)) or n_boot < 1:
        raise ConfigError(f"n_boot must be a positive integer, got {n_boot!r}")
    if not 0.0 < float(ci) < 1.0:
        raise ConfigError(f"ci must be strictly between 0 and 1 (e.g. 0.95), got {ci!r}")


def bootstrap_counts(rng: np.random.Generator, n_units: int, n_boot: int) -> np.ndarray:
    """How often each unit is drawn in each replicate of a with-replacement resample of ``n_units`` units.

    Args:
        rng: the random generator (seeded by the caller).
        n_units: number of units (prompts, judges, votes), >= 1.
        n_boot: number of replicates.

    Returns:
        int64 array of shape (n_boot, n_units); every row sums to ``n_units``.
    """
    draws = rng.integers(0, n_units, size=(n_boot, n_units))
    flat = (draws + (np.arange(n_boot) * n_units)[:, None]).ravel()
    return np.bincount(flat, minlength=n_boot * n_units).reshape(n_boot, n_units)


def bootstrap_win_rates(
    comparisons: pd.DataFrame,
    *,
    n_boot: int = 1000,
    seed: int = 0,
    ci: float = 0.95,
    over_judges: bool = False,
) -> pd.DataFrame:
    """Win rates with percentile bootstrap intervals from resampling prompts, optionally judges (ECHO Flow 2).

    Each replicate draws ``n_prompts`` sample_ids with replacement (a prompt drawn twice counts twice) and
    recomputes every model's win rate from the comparisons on those prompts. With ``over_judges=True`` the judges
    are resampled too, independently, and each comparison row is weighted by (times its prompt was drawn) x
    (times its judge was drawn); pass per-judge comparisons for that (a majority-voted table has one judge).
    Prompts and judges are indexed in sorted order, so the result does not depend on row order for a given seed.

    Args:
        comparisons: a Comparisons table (any orientation), e.g. :func:`majority_vote` output.
        n_boot: number of replicates (ECHO default 1,000).
        seed: seed of ``numpy.random.default_rng``; equal seeds give identical tables.
        ci: central coverage of the interval, e.g. 0.95 for the 2.5th and 97.5th percentiles.
        over_judges: also resample judges.

    Returns:
        DataFrame in :func:`win_rates` order with ``model``, ``win_rate`` (the point estimate on all data),
        ``ci_low``, ``ci_high`` (percentiles of the replicate win rates; a replicate in which a model has no
        comparison is left out for that model), ``wins``, ``ties``, ``losses``, ``n_comparisons``. Win rates are
        in [0, 1], higher is better.

    Raises:
        RecordError: as :func:`win_rates`; also when the table is empty.
        ConfigError: ``n_boot`` < 1 or ``ci`` outside (0, 1).
    """
    check_bootstrap_args(n_boot, ci)
    df = canonicalize_comparisons(comparisons)
    if df.empty:
        raise RecordError("comparisons table is empty: nothing to bootstrap")
    table = win_rates(df)
    prompts, (p_idx,) = encode_labels(df["sample_id"])
    judges, (j_idx,) = encode_labels(df["judge"])
    models, (a_idx, b_idx) = encode_labels(df["model_a"], df["model_b"])
    n_p, n_j, n_m = len(prompts), len(judges), len(models)
    outcome = df["outcome"].to_numpy()

    # Points and comparison counts per (prompt, judge, model), then any replicate is a weighted sum of them.
    cell = (p_idx * n_j + j_idx) * n_m
    size = n_p * n_j * n_m
    points = np.bincount(cell + a_idx, outcome, size) + np.bincount(cell + b_idx, 1.0 - outcome, size)
    counts = np.bincount(cell + a_idx, minlength=size) + np.bincount(cell + b_idx, minlength=size)
    points = points.reshape(n_p, n_j * n_m)
    counts = counts.reshape(n_p, n_j * n_m).astype(float)

    rng = np.random.default_rng(seed)
    k_prompts = bootstrap_counts(rng, n_p, n_boot).astype(float)
    if over_judges:
        k_judges = bootstrap_counts(rng, n_j, n_boot).astype(float)[:, :, None]
        boot_points = ((k_prompts @ points).reshape(n_boot, n_j, n_m) * k_judges).sum(axis=1)
        boot_counts = ((k_prompts @ counts).reshape(n_boot, n_j, n_m) * k_judges).sum(axis=1)
    else:
        boot_points = (k_prompts @ points).reshape(n_boot, n_j, n_m).sum(axis=1)
        boot_counts = (k_prompts @ counts).reshape(n_boot, n_j, n_m).sum(axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        boot = boot_points / boot_counts
    alpha = (1.0 - float(ci)) / 2.0
    low, high = np.nanquantile(boot, [alpha, 1.0 - alpha], axis=0)
    bounds = pd.DataFrame({"model": models.tolist(), "ci_low": low, "ci_high": high})
    out = table.merge(bounds, on="model", how="left")
    return out[["model", "win_rate", "ci_low", "ci_high", "wins", "ties", "losses", "n_comparisons"]]
