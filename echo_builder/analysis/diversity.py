"""Prompt diversity: unique first bigrams, distinct-n and length, with intervals (ECHO Fig. 3).

Words are the maximal runs of letters and digits (``\\w+`` without ``_``, Unicode-aware), lowercased; a prompt's
first bigram is its first two words (a one-word prompt has none).

- **unique first bigrams**: how many different first bigrams the prompts start with. ECHO reports 2.3x more for
  its editing prompts than prior editing benchmarks: templated benchmarks start most prompts the same way
  ("Change the ...", "A photo of ...").
- **distinct-n** (Li et al., 2016, "A Diversity-Promoting Objective Function for Neural Conversation Models"):
  different n-grams divided by all n-grams over the whole set, for n = 1 and 2, in [0, 1].
- **length**: mean words per prompt.

Counts of distinct things grow with the number of prompts, so sets of unequal size are compared at one common
size ``m`` (the smallest set, or ``sample_size``): each statistic is averaged over ``n_boot`` random subsets of
``m`` prompts drawn without replacement (seeded), and its interval is the central ``ci`` range over those subsets
(how much the value depends on which prompts were drawn), widened to contain the mean where the subset values are
so lumpy that it falls outside (:func:`interval`). The full-set values are reported too; the mean length's
interval is a percentile bootstrap over prompts (:func:`echo_builder.stats.bootstrap.bootstrap_counts`).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

import numpy as np

from echo_builder.errors import ConfigError
from echo_builder.stats.bootstrap import bootstrap_counts, check_bootstrap_args

__all__ = [
    "bootstrap_means",
    "distinct_n",
    "diversity",
    "first_bigram",
    "interval",
    "unique_first_bigrams",
    "words",
]

_WORD = re.compile(r"[^\W_]+")


def words(prompt: str) -> list[str]:
    """The lowercased words of ``prompt`` (maximal runs of Unicode letters and digits)."""
    return [w.lower() for w in _WORD.findall(prompt)]


def first_bigram(prompt: str) -> tuple[str, str] | None:
    """The first two words of ``prompt``, or ``None`` when it has fewer than two."""
    w = words(prompt)
    return (w[0], w[1]) if len(w) >= 2 else None


def unique_first_bigrams(prompts: Sequence[str]) -> int:
    """How many different first bigrams ``prompts`` start with (prompts of under two words are not counted)."""
    return len({b for b in map(first_bigram, prompts) if b is not None})


def distinct_n(prompts: Sequence[str], n: int) -> float | None:
    """Different n-grams / all n-grams over ``prompts`` (n-grams do not cross prompts), in [0, 1]; ``None``
    when there is no n-gram."""
    grams: list[tuple[str, ...]] = []
    for prompt in prompts:
        w = words(prompt)
        grams.extend(tuple(w[i : i + n]) for i in range(len(w) - n + 1))
    return len(set(grams)) / len(grams) if grams else None


def bootstrap_means(values: np.ndarray, n_boot: int, rng: np.random.Generator, chunk: int = 64) -> np.ndarray:
    """Means of ``n_boot`` with-replacement resamples of ``values`` (float64, shape ``(n_boot,)``), drawn
    ``chunk`` replicates at a time so memory stays ``chunk x len(values)`` for large sets."""
    n = len(values)
    out = np.empty(n_boot)
    for start in range(0, n_boot, chunk):
        size = min(chunk, n_boot - start)
        out[start : start + size] = (bootstrap_counts(rng, n, size).astype(float) @ values) / n
    return out


class _Encoded:
    """A prompt set tokenised once: each prompt's first-bigram id (-1: none) and its 1- and 2-gram ids."""

    def __init__(self, prompts: Sequence[str]) -> None:
        vocab: dict[tuple[str, ...], int] = {}
        self.first = np.full(len(prompts), -1, dtype=np.int64)
        self.grams: dict[int, list[np.ndarray]] = {1: [], 2: []}
        for i, prompt in enumerate(prompts):
            w = words(prompt)
            if len(w) >= 2:
                self.first[i] = vocab.setdefault(("^", w[0], w[1]), len(vocab))
            for n in (1, 2):
                ids = [vocab.setdefault(tuple(w[j : j + n]), len(vocab)) for j in range(len(w) - n + 1)]
                self.grams[n].append(np.array(ids, dtype=np.int64))

    def stats(self, subset: np.ndarray) -> dict[str, float | None]:
        first = self.first[subset]
        out: dict[str, float | None] = {"unique_first_bigrams": float(np.unique(first[first >= 0]).size)}
        for n in (1, 2):
            parts = [self.grams[n][i] for i in subset]
            grams = np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)
            out[f"distinct_{n}"] = float(np.unique(grams).size / grams.size) if grams.size else None
        return out


def interval(values: np.ndarray, ci: float, point: float) -> list[float]:
    """The central ``ci`` range of ``values`` (percentiles), widened where needed to contain ``point``.

    Replicate values of a count or of a mean over few prompts are lumpy: when more than ``ci`` of them share one
    value, the percentiles can both equal it while ``point`` (their mean, or the full-set estimate) lies beside
    it, e.g. 1.017 outside [1.0, 1.0]. The reported interval always contains the number it belongs to.
    """
    alpha = (1.0 - ci) / 2.0
    low, high = np.quantile(values, [alpha, 1.0 - alpha])
    return [float(min(low, point)), float(max(high, point))]


def diversity(
    prompts: Sequence[str],
    *,
    sample_size: int | None = None,
    n_boot: int = 200,
    seed: int = 0,
    ci: float = 0.95,
) -> dict[str, Any]:
    """Diversity statistics of one prompt set.

    Args:
        prompts: the prompts (duplicates count: a set that repeats a prompt is less diverse).
        sample_size: the common size ``m`` for the subset statistics (default: all prompts); must not exceed
            ``len(prompts)``.
        n_boot: subsets drawn (and bootstrap replicates of the mean length), >= 1.
        seed: seed of ``numpy.random.default_rng``.
        ci: central coverage of the intervals, in (0, 1).

    Returns:
        ``{"n_prompts", "unique_first_bigrams", "distinct_1", "distinct_2", "mean_words", "mean_words_ci",
        "sample_size", "at_sample_size": {stat: {"mean", "ci"}}}``; full-set values first (counts as ints,
        fractions as floats), then the means and intervals over subsets of ``sample_size`` prompts.

    Raises:
        ConfigError: no prompts, ``sample_size`` out of [1, len(prompts)], bad ``n_boot`` or ``ci``.
    """
    check_bootstrap_args(n_boot, ci)
    n = len(prompts)
    if n == 0:
        raise ConfigError("no prompts to measure")
    m = n if sample_size is None else int(sample_size)
    if not 1 <= m <= n:
        raise ConfigError(f"sample size must be in [1, {n}] (the number of prompts), got {sample_size!r}")
    rng = np.random.default_rng(seed)
    lengths = np.array([len(words(p)) for p in prompts], dtype=float)
    boot_means = bootstrap_means(lengths, n_boot, rng)
    encoded = _Encoded(prompts)
    full = encoded.stats(np.arange(n))
    out: dict[str, Any] = {
        "n_prompts": n,
        "unique_first_bigrams": int(full["unique_first_bigrams"] or 0),
        "distinct_1": full["distinct_1"],
        "distinct_2": full["distinct_2"],
        "mean_words": float(lengths.mean()),
        "mean_words_ci": interval(boot_means, ci, float(lengths.mean())),
        "sample_size": m,
    }
    subsets = [np.arange(n)] if m == n else [rng.choice(n, size=m, replace=False) for _ in range(n_boot)]
    per_stat: dict[str, list[float]] = {"unique_first_bigrams": [], "distinct_1": [], "distinct_2": []}
    for subset in subsets:
        for name, value in encoded.stats(subset).items():
            if value is not None:
                per_stat[name].append(float(value))
    out["at_sample_size"] = {
        name: (
            {"mean": float(np.mean(values)), "ci": interval(np.array(values), ci, float(np.mean(values)))}
            if values
            else {"mean": None, "ci": [None, None]}
        )
        for name, values in per_stat.items()
    }
    return out
