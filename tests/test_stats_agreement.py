"""Agreement: Kendall tau-b, pair agreement with and without ties, Kendall's W, model- and sample-level helpers."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from echo_builder.errors import RecordError
from echo_builder.stats import (
    kendall_tau_b,
    kendalls_w,
    model_rank_agreement,
    pair_agreement,
    sample_rank_agreement,
)


def test_tau_b_hand_computed_without_and_with_ties():
    # 5 concordant pairs, 1 discordant, none tied: (5 - 1) / 6.
    res = kendall_tau_b([1, 2, 3, 4], [1, 3, 2, 4])
    assert res.tau == pytest.approx(4 / 6) and res.reason is None and 0 < res.p_value < 1
    # One tie in each: 4 concordant, 0 discordant; tau-b = 4 / sqrt((6 - 1)(6 - 1)).
    assert kendall_tau_b([1, 1, 2, 3], [1, 2, 2, 3]).tau == pytest.approx(0.8)
    assert kendall_tau_b([3, 2, 1], [1, 2, 3]).tau == pytest.approx(-1.0)


@pytest.mark.parametrize(
    ("x", "y", "reason"),
    [
        ([1, 1, 1], [1, 2, 3], "x is constant"),
        ([1, 2, 3], [5, 5, 5], "y is constant"),
        ([1], [2], "at least 2"),
    ],
)
def test_tau_b_undefined_is_nan_with_reason(x, y, reason):
    res = kendall_tau_b(x, y)
    assert math.isnan(res.tau) and math.isnan(res.p_value) and reason in res.reason


def test_tau_b_bad_input():
    with pytest.raises(RecordError, match="same length"):
        kendall_tau_b([1, 2], [1, 2, 3])
    with pytest.raises(RecordError, match="NaN"):
        kendall_tau_b([1, np.nan, 3], [1, 2, 3])


def test_pair_agreement_hand_computed_sequences():
    judge = [1.0, 0.0, 0.5, 1.0, 0.5]
    human = [1.0, 1.0, 0.5, 1.0, 0.0]
    assert pair_agreement(judge, human) == (pytest.approx(3 / 5), 5, None)
    assert pair_agreement(judge, human, with_ties=False) == (pytest.approx(2 / 3), 3, None)
    none = pair_agreement([0.5], [1.0], with_ties=False)
    assert math.isnan(none.agreement) and none.n_pairs == 0 and "without ties" in none.reason


def test_pair_agreement_tables_match_on_canonical_keys():
    cols = ["sample_id", "judge", "model_a", "model_b", "outcome"]
    judge = pd.DataFrame(
        [
            ("1", "gpt", "A", "B", 1.0),
            ("2", "gpt", "B", "A", 1.0),
            ("3", "gpt", "A", "C", 0.5),
            ("9", "gpt", "A", "B", 0.0),
        ],
        columns=cols,
    )
    human = pd.DataFrame(
        [("1", "human", "B", "A", 0.0), ("2", "human", "A", "B", 0.0), ("3", "human", "A", "C", 1.0)],
        columns=cols,
    )
    # sample 1: both say A; sample 2: both say B (written from opposite sides); sample 3: tie vs A. Sample 9 unmatched.
    assert pair_agreement(judge, human) == (pytest.approx(2 / 3), 3, None)
    assert pair_agreement(judge, human, with_ties=False) == (1.0, 2, None)
    with pytest.raises(RecordError, match="more than one outcome"):
        pair_agreement(pd.concat([judge, judge.assign(judge="gemini")]), human)


def test_kendalls_w_hand_computed():
    ranks = [[1, 2, 3, 4], [2, 1, 3, 4], [1, 3, 2, 4]]
    # Rank sums 4, 6, 8, 12 around 7.5: S = 35; W = 12 * 35 / (3^2 (4^3 - 4)) = 7 / 9; chi2 = 3 * 3 * W = 7.
    res = kendalls_w(ranks)
    assert res.w == pytest.approx(7 / 9) and res.chi2 == pytest.approx(7.0)
    assert res.p_value == pytest.approx(stats.chi2.sf(7.0, 3))
    assert kendalls_w([[10, 20, 30], [1, 2, 3], [0.1, 0.5, 0.9]]).w == pytest.approx(
        1.0
    )  # scores, same order


def test_kendalls_w_with_ties_matches_friedman():
    scores = np.array([[1, 1, 2, 3, 5], [2, 1, 3, 3, 4], [1, 2, 2, 2, 5], [3, 1, 2, 4, 4]], dtype=float)
    res = kendalls_w(scores)
    m, n = scores.shape
    friedman = stats.friedmanchisquare(*scores.T)  # tie-corrected chi-square; W = chi2 / (m (n - 1))
    assert res.w == pytest.approx(friedman.statistic / (m * (n - 1)))
    assert res.chi2 == pytest.approx(friedman.statistic) and res.p_value == pytest.approx(friedman.pvalue)


def test_kendalls_w_undefined():
    assert "2 raters" in kendalls_w([[1, 2, 3]]).reason
    res = kendalls_w([[1, 1, 1], [2, 2, 2]])
    assert math.isnan(res.w) and "same value" in res.reason
    with pytest.raises(RecordError, match="2-D"):
        kendalls_w([1, 2, 3])


def test_model_rank_agreement_aligns_by_name():
    ours = {"A": 0.7, "B": 0.5, "C": 0.2, "D": 0.1}
    board = pd.Series({"C": 900.0, "A": 1200.0, "B": 1100.0, "E": 800.0})
    res = model_rank_agreement(ours, board)
    assert res.tau == pytest.approx(1.0, abs=1e-9) and res.n == 3
    assert res.only_a == ("D",) and res.only_b == ("E",)
    swapped = model_rank_agreement(ours, {"A": 1.0, "B": 3.0, "C": 2.0})
    assert swapped.tau == pytest.approx(-1 / 3)  # (A,B) and (A,C) discordant, (B,C) concordant


def test_sample_rank_agreement_pools_items_and_skips_failures():
    judge = pd.DataFrame(
        {"sample_id": ["1", "1", "2", "2"], "model": ["A", "B", "A", "B"], "rating": [8.0, 3.0, np.nan, 6.0]}
    )
    human = pd.DataFrame(
        {
            "sample_id": [1, 1, 2, 2, 3],
            "model": ["A", "B", "A", "B", "A"],
            "rating": [5.0, 2.0, 4.0, 4.0, 1.0],
        }
    )
    res = sample_rank_agreement(judge, human)
    # Items (1,A), (1,B), (2,B): judge 8, 3, 6 vs human 5, 2, 4 -> same order, tau-b 1.
    assert res.n == 3 and res.tau == pytest.approx(1.0)
    assert res.only_a == () and res.only_b == (("2", "A"), ("3", "A"))
    with pytest.raises(RecordError, match="more than one row"):
        sample_rank_agreement(pd.concat([judge, judge]), human)


def test_bootstrap_pair_agreement_resamples_prompts():
    from echo_builder.stats import bootstrap_pair_agreement

    def table(outcomes, judge):
        return pd.DataFrame(
            {
                "sample_id": [f"p{i // 2}" for i in range(len(outcomes))],  # two comparisons per prompt
                "judge": judge,
                "model_a": ["a", "a"] * (len(outcomes) // 2),
                "model_b": ["b", "c"] * (len(outcomes) // 2),
                "outcome": outcomes,
            }
        )

    human = table([1.0, 1.0, 0.0, 0.0, 1.0, 0.5, 1.0, 1.0], "human")
    judge = table([1.0, 1.0, 0.0, 0.0, 1.0, 1.0, 0.0, 0.0], "j")  # agrees on p0, p1; half of p2; not p3
    assert pair_agreement(judge, human).agreement == pytest.approx(5 / 8)
    low, high = bootstrap_pair_agreement(judge, human, n_boot=2000, seed=1)
    # a replicate's agreement is (sum of drawn prompts' agreeing comparisons) / (2 x 4): from 0 (p3 x 4) to 1
    assert 0.0 <= low < 5 / 8 < high <= 1.0 and (low * 8) % 1 == 0 and (high * 8) % 1 == 0
    assert bootstrap_pair_agreement(judge, human, n_boot=2000, seed=1) == (low, high)  # seeded
    assert bootstrap_pair_agreement(judge, judge, n_boot=50) == (1.0, 1.0)
    # without ties p2's tie is dropped; no shared comparison at all gives NaN
    assert bootstrap_pair_agreement(judge, human, with_ties=False, n_boot=200)[1] == 1.0
    other = table([1.0, 1.0], "h").assign(sample_id="elsewhere")
    assert all(math.isnan(v) for v in bootstrap_pair_agreement(judge, other, n_boot=20))


def test_bootstrap_rank_agreement_resamples_prompts():
    from echo_builder.stats import bootstrap_rank_agreement

    def ranked(order, judge, prompts=6):
        """Every prompt compares each pair of models; the earlier model in ``order`` wins."""
        rows = [
            {"sample_id": f"p{i}", "judge": judge, "model_a": x, "model_b": y, "outcome": 1.0}
            for i in range(prompts)
            for k, x in enumerate(order)
            for y in order[k + 1 :]
        ]
        return pd.DataFrame(rows)

    human = ranked(["a", "b", "c"], "human")
    same = bootstrap_rank_agreement(ranked(["a", "b", "c"], "j"), human, n_boot=100)
    assert same == pytest.approx((1.0, 1.0))
    assert bootstrap_rank_agreement(ranked(["c", "b", "a"], "j"), human, n_boot=100) == pytest.approx(
        (-1.0, -1.0)
    )
    # a judge that agrees on half the prompts and reverses the rest: replicates spread over both signs
    mixed = pd.concat([ranked(["a", "b", "c"], "j", 3), ranked(["c", "b", "a"], "j", 6).iloc[9:]])
    low, high = bootstrap_rank_agreement(mixed, human, n_boot=400, seed=3)
    assert -1.0 <= low < 0.0 < high <= 1.0
    # one model in common: tau-b is undefined in every replicate
    other = ranked(["a", "x"], "j")
    assert all(math.isnan(v) for v in bootstrap_rank_agreement(other, human, n_boot=20))
