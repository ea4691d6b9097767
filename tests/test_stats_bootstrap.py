"""Bootstrap win-rate intervals over prompts: coverage, the shared-prompt defect, determinism, a loop reference."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from echo_builder.errors import ConfigError, RecordError
from echo_builder.stats import bootstrap_win_rates, pseudo_pairwise, win_rates
from echo_builder.stats.bootstrap import bootstrap_counts


def ratings_frame(rows):
    return pd.DataFrame(rows, columns=["sample_id", "model", "judge", "rating", "status"])


def shared_prompt_ratings(n_prompts: int = 200, seed: int = 1) -> pd.DataFrame:
    """Model A is either best or worst on each prompt, the same for all 3 judges and all 4 opponents."""
    rng = np.random.default_rng(seed)
    a_wins = rng.random(n_prompts) < 0.5
    rows = []
    for p in range(n_prompts):
        for j in ("j1", "j2", "j3"):
            rows.append((f"p{p:03d}", "A", j, 10.0 if a_wins[p] else 1.0, "ok"))
            for k, m in enumerate("BCDE"):
                rows.append((f"p{p:03d}", m, j, 4.0 + k, "ok"))
    return ratings_frame(rows)


def test_intervals_account_for_shared_prompts_regression():
    """Defect: intervals from a normal approximation over comparisons ignore that comparisons share prompts."""
    comps = pseudo_pairwise(shared_prompt_ratings())
    table = bootstrap_win_rates(comps, n_boot=2000, seed=0).set_index("model")
    a = table.loc["A"]
    p, n = a["win_rate"], a["n_comparisons"]
    assert n == 200 * 4 * 3
    naive_width = 2 * 1.96 * np.sqrt(p * (1 - p) / n)
    boot_width = a["ci_high"] - a["ci_low"]
    assert boot_width > 2.5 * naive_width  # clustered: about sqrt(12) = 3.5 times wider
    # A's per-prompt win rate is 0 or 1, so the prompt-level standard error is sd(prompt rates) / sqrt(200).
    per_prompt = comps.assign(a=np.where(comps["model_a"] == "A", comps["outcome"], np.nan)).groupby(
        "sample_id"
    )["a"]
    rates = per_prompt.mean().to_numpy()
    cluster_width = 2 * 1.96 * rates.std(ddof=1) / np.sqrt(len(rates))
    assert boot_width == pytest.approx(cluster_width, rel=0.15)


def test_intervals_contain_point_estimates_and_are_ordered():
    rng = np.random.default_rng(3)
    rows = [
        (f"p{p}", f"m{m}", f"j{j}", float(np.clip(round(5 + m * 0.4 + rng.normal(0, 2)), 1, 10)), "ok")
        for p in range(150)
        for m in range(5)
        for j in range(3)
    ]
    comps = pseudo_pairwise(ratings_frame(rows))
    table = bootstrap_win_rates(comps, n_boot=500, seed=7)
    assert (table["ci_low"] <= table["win_rate"]).all() and (table["win_rate"] <= table["ci_high"]).all()
    assert (table["ci_low"] < table["ci_high"]).all()
    pd.testing.assert_frame_equal(
        table[["model", "win_rate", "wins", "ties", "losses", "n_comparisons"]],
        win_rates(comps)[["model", "win_rate", "wins", "ties", "losses", "n_comparisons"]],
    )


def test_seeded_and_independent_of_row_order():
    comps = pseudo_pairwise(shared_prompt_ratings(60))
    first = bootstrap_win_rates(comps, n_boot=300, seed=11)
    shuffled = comps.sample(frac=1.0, random_state=5)
    pd.testing.assert_frame_equal(bootstrap_win_rates(shuffled, n_boot=300, seed=11), first)
    other = bootstrap_win_rates(comps, n_boot=300, seed=12)
    assert not np.allclose(other["ci_low"], first["ci_low"])


def test_matches_a_plain_loop_over_replicates():
    comps = pseudo_pairwise(shared_prompt_ratings(40, seed=4))
    n_boot, seed = 50, 9
    table = bootstrap_win_rates(comps, n_boot=n_boot, seed=seed).set_index("model")
    prompts = sorted(comps["sample_id"].unique())
    counts = bootstrap_counts(np.random.default_rng(seed), len(prompts), n_boot)
    by_prompt = {p: g for p, g in comps.groupby("sample_id")}
    replicate_rates = []
    for b in range(n_boot):
        parts = [by_prompt[p] for p, k in zip(prompts, counts[b], strict=True) for _ in range(k)]
        replicate_rates.append(win_rates(pd.concat(parts)).set_index("model")["win_rate"])
    boot = pd.DataFrame(replicate_rates)
    for model in table.index:
        lo, hi = np.quantile(boot[model].to_numpy(), [0.025, 0.975])
        assert table.loc[model, "ci_low"] == pytest.approx(lo, abs=1e-12)
        assert table.loc[model, "ci_high"] == pytest.approx(hi, abs=1e-12)


def test_bootstrap_counts_rows_sum_to_units():
    counts = bootstrap_counts(np.random.default_rng(0), 7, 100)
    assert counts.shape == (100, 7) and (counts.sum(axis=1) == 7).all()
    assert 0.8 < counts.mean() / 1.0 < 1.2


def test_over_judges_shows_judge_disagreement():
    # Judge j1 always prefers A, j2 always prefers B: pooled win rate is 0.5 on every prompt.
    rows = []
    for p in range(50):
        rows += [(f"p{p}", "j1", "A", "B", 1.0), (f"p{p}", "j2", "A", "B", 0.0)]
    comps = pd.DataFrame(rows, columns=["sample_id", "judge", "model_a", "model_b", "outcome"])
    prompts_only = bootstrap_win_rates(comps, n_boot=400, seed=0).set_index("model")
    both = bootstrap_win_rates(comps, n_boot=400, seed=0, over_judges=True).set_index("model")
    assert prompts_only.loc["A", "ci_low"] == prompts_only.loc["A", "ci_high"] == 0.5
    # Resampling 2 judges gives {j1, j1} (A = 1), {j2, j2} (A = 0) or one of each (0.5), each pure case 1/4.
    assert both.loc["A", "ci_low"] == 0.0 and both.loc["A", "ci_high"] == 1.0


@pytest.mark.parametrize(("kwargs", "match"), [({"n_boot": 0}, "n_boot"), ({"ci": 1.5}, "ci must be")])
def test_bad_arguments(kwargs, match):
    comps = pd.DataFrame(
        [("1", "h", "A", "B", 1.0)], columns=["sample_id", "judge", "model_a", "model_b", "outcome"]
    )
    with pytest.raises(ConfigError, match=match):
        bootstrap_win_rates(comps, **kwargs)


def test_empty_table():
    empty = pd.DataFrame(columns=["sample_id", "judge", "model_a", "model_b", "outcome"])
    with pytest.raises(RecordError, match="empty"):
        bootstrap_win_rates(empty)
