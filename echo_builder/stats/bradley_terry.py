"""Bradley-Terry ratings on the Elo scale, with bootstrap intervals (ECHO Flow 2; Chatbot Arena's Elo/BT notebook).

Model: P(i beats j) = p_i / (p_i + p_j). A tie counts as half a win each way, which is what Chatbot Arena's
``compute_mle_elo`` does by duplicating the battles and labelling a tie once for each side. The maximum-likelihood
strengths are found by Newton-Raphson on the concave log-likelihood (with a halving line search), vectorised
over bootstrap replicates, and reported as Elo ratings ``base + scale * log10(p_i)``.

Anchoring: strengths are only defined up to a common factor, so ratings are shifted to have **mean ``base``**
over the rated models (Chatbot Arena's unpenalised fit lands there too: GenAI-Arena's published text-to-image
board averages 1000.0). ``anchor=(model, value)`` pins one model instead, as the Arena later pinned
``mixtral-8x7b-instruct-v0.1`` at 1114.

The MLE exists only when every split of the models into two groups has a win (or tie) each way across the split
(Ford, 1957). Otherwise, e.g. a model lost every comparison, :class:`~echo_builder.errors.RecordError` is raised
unless ``prior > 0``, which adds ``prior`` virtual ties between each model and a fixed reference of strength 1
(BayesElo's "virtual draws"); that keeps every rating finite and shrinks ratings towards the mean.
"""

from __future__ import annotations

import warnings

import numpy as np
import pandas as pd
from scipy import sparse
from scipy.sparse.csgraph import connected_components

from echo_builder.errors import ConfigError, RecordError
from echo_builder.stats.bootstrap import bootstrap_counts, check_bootstrap_args
from echo_builder.stats.schema import canonicalize_comparisons, encode_labels
from echo_builder.stats.votes import as_comparisons

__all__ = ["bootstrap_bradley_terry", "bradley_terry"]

_TOL = 1e-10  # largest change of a log-strength in the last Newton step at convergence
_MAX_ITER = 500


def _design(data: pd.DataFrame) -> tuple[np.ndarray, sparse.csr_matrix, np.ndarray]:
    """Models, the per-prompt points matrix Q (n_prompts x n_models^2, Q[p, i*n+j] = i's points vs j), counts."""
    df = canonicalize_comparisons(as_comparisons(data))
    if df.empty:
        raise RecordError("comparisons table is empty: nothing to rate")
    models, (ia, ib) = encode_labels(df["model_a"], df["model_b"])
    _, (p_idx,) = encode_labels(df["sample_id"])
    n = len(models)
    o = df["outcome"].to_numpy()
    q = sparse.csr_matrix(
        (
            np.concatenate([o, 1.0 - o]),
            (np.concatenate([p_idx, p_idx]), np.concatenate([ia * n + ib, ib * n + ia])),
        ),
        shape=(int(p_idx.max()) + 1, n * n),
    )
    n_comp = np.bincount(ia, minlength=n) + np.bincount(ib, minlength=n)
    return models, q, n_comp


def _check_mle_exists(w: np.ndarray, models: np.ndarray, prior: float, what: str) -> None:
    if prior > 0:
        return
    for r in range(w.shape[0]):
        n_comp, labels = connected_components(sparse.csr_matrix(w[r] > 0), directed=True, connection="strong")
        if n_comp > 1:
            groups = sorted(models[labels == c].tolist() for c in range(n_comp))
            raise RecordError(
                f"Bradley-Terry MLE does not exist{what}: the models split into groups {groups} with no win (or "
                "tie) in one direction between some of them (e.g. a model lost every comparison, or has none), "
                "so ratings would be infinite; pass prior > 0 (virtual ties) to regularise"
            )


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return 0.5 * (1.0 + np.tanh(0.5 * x))  # overflow-free logistic


def _log_likelihood(theta: np.ndarray, w: np.ndarray, prior: float) -> np.ndarray:
    diff = theta[:, :, None] - theta[:, None, :]
    ll = -(w * np.logaddexp(0.0, -diff)).sum(axis=(1, 2))
    if prior:  # prior/2 virtual wins and prior/2 virtual losses against a reference at theta = 0
        ll -= 0.5 * prior * (np.logaddexp(0.0, -theta) + np.logaddexp(0.0, theta)).sum(axis=1)
    return ll


def _fit(w: np.ndarray, prior: float) -> np.ndarray:
    """Newton-Raphson with backtracking for a batch of points matrices w (B, n, n); natural-log strengths (B, n).

    The log-likelihood is concave, so Newton steps with a halving line search converge from 0, quadratically
    near the optimum; a fixed-point (MM) iteration needed tens of thousands of steps on lopsided data.
    """
    n_rep, n, _ = w.shape
    games = w + w.transpose(0, 2, 1)
    wins = w.sum(axis=2)
    theta = np.zeros((n_rep, n))
    ll = _log_likelihood(theta, w, prior)
    diag = np.arange(n)
    # Without a prior only differences are identified: adding 1 1^T fixes the free direction (steps keep sum 0).
    pin = np.ones((n, n)) if prior == 0 else np.zeros((n, n))
    for _ in range(_MAX_ITER):
        p = _sigmoid(theta[:, :, None] - theta[:, None, :])
        grad = wins - (games * p).sum(axis=2)
        curv = games * p * (1.0 - p)
        info = -curv
        info[:, diag, diag] = curv.sum(axis=2)
        if prior:
            p0 = _sigmoid(theta)
            grad += prior * (0.5 - p0)
            info[:, diag, diag] += prior * p0 * (1.0 - p0)
        step = np.linalg.solve(info + pin, grad[:, :, None])[:, :, 0]
        slope = (grad * step).sum(axis=1)
        t = np.ones(n_rep)
        for _ in range(60):  # halve the step of each replicate until its likelihood does not drop
            cand = theta + t[:, None] * step
            new_ll = _log_likelihood(cand, w, prior)
            ok = new_ll >= ll + 1e-4 * t * slope - 1e-12 * np.abs(ll)
            if ok.all():
                break
            t = np.where(ok, t, 0.5 * t)
        theta, ll = cand, new_ll
        if np.abs(t[:, None] * step).max() < _TOL:
            break
    else:
        warnings.warn(
            f"Bradley-Terry Newton fit did not converge in {_MAX_ITER} iterations",
            RuntimeWarning,
            stacklevel=3,
        )
    return theta


def _to_elo(theta: np.ndarray, models: np.ndarray, scale: float, base: float, anchor) -> np.ndarray:
    elo = scale * theta / np.log(10.0)
    if anchor is None:
        return elo - elo.mean(axis=-1, keepdims=True) + base
    name, value = anchor
    hit = np.flatnonzero(models == str(name))
    if hit.size == 0:
        raise ConfigError(f"anchor model {name!r} is not among the rated models {models.tolist()}")
    return elo - elo[..., hit[0] : hit[0] + 1] + float(value)


def _check_args(scale: float, prior: float) -> None:
    if not scale > 0:
        raise ConfigError(f"scale must be > 0, got {scale!r}")
    if not prior >= 0:
        raise ConfigError(f"prior (virtual ties per model) must be >= 0, got {prior!r}")


def bradley_terry(
    data: pd.DataFrame,
    *,
    scale: float = 400.0,
    base: float = 1000.0,
    anchor: tuple[str, float] | None = None,
    prior: float = 0.0,
) -> pd.DataFrame:
    """Maximum-likelihood Bradley-Terry ratings on the Elo scale; ties count as half a win each way.

    Follows Chatbot Arena's ``compute_mle_elo`` (scale 400, base 10, initial rating 1000); on GenAI-Arena's
    text-to-image votes it reproduces the published board to within 0.2 Elo points.

    Args:
        data: a Comparisons table (``sample_id``, ``judge``, ``model_a``, ``model_b``, ``outcome``) or a Votes
            table (``model_a``, ``model_b``, ``winner``; converted with :func:`votes_to_comparisons`).
        scale: Elo points per factor of 10 in strength (Chatbot Arena: 400).
        base: mean rating of the rated models (Chatbot Arena's ``INIT_RATING``: 1000) when ``anchor`` is None.
        anchor: ``(model, rating)`` to pin one model's rating instead of the mean.
        prior: virtual ties per model against a fixed reference (0 = plain MLE, as Chatbot Arena).

    Returns:
        DataFrame with ``model``, ``rating`` (float, Elo scale: +``scale`` = 10x the odds of winning; higher is
        better) and ``n_comparisons`` (int), sorted by rating (descending) then model.

    Raises:
        RecordError: the table is malformed or empty, or the MLE does not exist and ``prior`` is 0.
        ConfigError: ``scale`` <= 0, ``prior`` < 0, or ``anchor`` names an unknown model.
    """
    _check_args(scale, prior)
    models, q, n_comp = _design(data)
    n = len(models)
    w = np.asarray(q.sum(axis=0)).reshape(1, n, n)
    _check_mle_exists(w, models, prior, "")
    elo = _to_elo(_fit(w, prior), models, scale, base, anchor)[0]
    out = pd.DataFrame({"model": models.tolist(), "rating": elo, "n_comparisons": n_comp})
    return out.sort_values(["rating", "model"], ascending=[False, True], kind="stable").reset_index(drop=True)


def bootstrap_bradley_terry(
    data: pd.DataFrame,
    *,
    n_boot: int = 1000,
    seed: int = 0,
    ci: float = 0.95,
    scale: float = 400.0,
    base: float = 1000.0,
    anchor: tuple[str, float] | None = None,
    prior: float = 0.0,
) -> pd.DataFrame:
    """Bradley-Terry ratings with percentile bootstrap intervals from resampling prompts (Chatbot Arena style).

    Each replicate draws the distinct ``sample_id`` values with replacement (for votes, each vote is its own
    sample, as in Chatbot Arena's bootstrap over battles), refits and re-anchors. All replicates are fitted
    together in one vectorised Newton loop.

    Args:
        data: Comparisons or Votes, as :func:`bradley_terry`.
        n_boot: number of replicates (default 1,000).
        seed: seed of ``numpy.random.default_rng``.
        ci: central coverage of the interval (0.95: 2.5th to 97.5th percentile).
        scale, base, anchor, prior: as :func:`bradley_terry`.

    Returns:
        DataFrame with ``model``, ``rating`` (the fit on all data), ``ci_low``, ``ci_high`` (Elo scale; an
        anchored model's interval is the single anchor value), ``n_comparisons``, in :func:`bradley_terry` order.

    Raises:
        RecordError: as :func:`bradley_terry`, also when a replicate has no MLE (pass ``prior`` > 0).
        ConfigError: bad ``n_boot``, ``ci``, ``scale``, ``prior`` or ``anchor``.
    """
    check_bootstrap_args(n_boot, ci)
    _check_args(scale, prior)
    data = as_comparisons(data)  # once, so a votes table warns about self-battles once
    point = bradley_terry(data, scale=scale, base=base, anchor=anchor, prior=prior)
    models, q, _ = _design(data)
    n = len(models)
    k = bootstrap_counts(np.random.default_rng(seed), q.shape[0], n_boot).astype(float)
    w = np.asarray((q.T @ k.T).T).reshape(n_boot, n, n)
    _check_mle_exists(w, models, prior, " in a bootstrap replicate")
    elo = _to_elo(_fit(w, prior), models, scale, base, anchor)
    alpha = (1.0 - float(ci)) / 2.0
    low, high = np.quantile(elo, [alpha, 1.0 - alpha], axis=0)
    bounds = pd.DataFrame({"model": models.tolist(), "ci_low": low, "ci_high": high})
    out = point.merge(bounds, on="model", how="left")
    return out[["model", "rating", "ci_low", "ci_high", "n_comparisons"]]
