"""Bradley-Terry (Elo scale) and online Elo: closed forms, an independent scipy.optimize fit, properties."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pandas as pd
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from scipy.optimize import minimize

from echo_builder.errors import ConfigError, RecordError
from echo_builder.stats import bootstrap_bradley_terry, bradley_terry, elo_ratings, win_rates
from tests.helpers.properties import examples


def comps(rows):
    return pd.DataFrame(rows, columns=["sample_id", "judge", "model_a", "model_b", "outcome"])


def series(table: pd.DataFrame, col: str = "rating") -> dict[str, float]:
    return table.set_index("model")[col].to_dict()


def test_two_models_closed_form():
    # A beats B 3 times out of 4: p_A / p_B = 3, so the Elo gap is 400 log10 3, split around the mean 1000.
    table = bradley_terry(comps([(str(i), "h", "A", "B", o) for i, o in enumerate([1.0, 1.0, 1.0, 0.0])]))
    gap = 400 * math.log10(3)
    assert series(table) == pytest.approx({"A": 1000 + gap / 2, "B": 1000 - gap / 2}, abs=1e-6)
    assert table["n_comparisons"].tolist() == [4, 4]


def test_ties_count_half_a_win_each_way():
    # 2 wins, 1 tie, 1 loss: 2.5 "wins" to 1.5, odds 5:3.
    table = bradley_terry(comps([(str(i), "h", "A", "B", o) for i, o in enumerate([1.0, 1.0, 0.5, 0.0])]))
    r = series(table)
    assert r["A"] - r["B"] == pytest.approx(400 * math.log10(5 / 3), abs=1e-6)
    even = series(
        bradley_terry(
            comps([("1", "h", "A", "B", 1.0), ("2", "h", "A", "B", 0.5), ("3", "h", "B", "A", 1.0)])
        )
    )
    assert even == pytest.approx({"A": 1000.0, "B": 1000.0}, abs=1e-6)


def _reference_bt(table: pd.DataFrame, prior: float = 0.0) -> dict[str, float]:
    """Independent fit: maximise the log-likelihood with L-BFGS on all strengths, then centre at 1000.

    ``prior`` adds prior/2 wins and prior/2 losses of every model against a fixed opponent of strength 1.
    """
    models = sorted(set(table["model_a"]) | set(table["model_b"]))
    ix = {m: i for i, m in enumerate(models)}
    n = len(models)
    w = np.zeros((n, n))
    for row in table.itertuples(index=False):
        w[ix[row.model_a], ix[row.model_b]] += row.outcome
        w[ix[row.model_b], ix[row.model_a]] += 1 - row.outcome

    def nll(theta):
        d = theta[:, None] - theta[None, :]
        p = 1 / (1 + np.exp(-d))
        grad = (w * (1 - p)).sum(1) - (w * (1 - p)).sum(0)
        pin = 0.5 * theta.sum() ** 2 if prior == 0 else 0.0  # only differences are identified without a prior
        pin_grad = theta.sum() if prior == 0 else 0.0
        virtual = 0.5 * prior * (np.logaddexp(0, -theta) + np.logaddexp(0, theta)).sum()
        virtual_grad = prior * (0.5 - 1 / (1 + np.exp(-theta)))
        return (w * np.logaddexp(0, -d)).sum() + pin + virtual, -grad - virtual_grad + pin_grad

    res = minimize(nll, np.zeros(n), jac=True, method="L-BFGS-B", options={"gtol": 1e-12, "ftol": 1e-15})
    elo = 400 * res.x / np.log(10)
    return dict(zip(models, elo - elo.mean() + 1000, strict=True))


def test_matches_independent_optimiser_on_random_data():
    rng = np.random.default_rng(0)
    strength = {"A": 1.0, "B": 0.3, "C": -0.2, "D": -1.0, "E": 0.6}
    rows, names = [], sorted(strength)
    for i in range(600):
        a, b = rng.choice(names, 2, replace=False)
        p = 1 / (1 + math.exp(strength[b] - strength[a]))
        u = rng.random()
        rows.append((str(i), "h", a, b, 0.5 if abs(u - p) < 0.05 else float(u < p)))
    table = comps(rows)
    assert series(bradley_terry(table)) == pytest.approx(_reference_bt(table), abs=1e-3)


def test_lopsided_data_with_a_small_prior_converges_to_the_reference():
    """Defect found while benchmarking: a fixed-point (MM) fit took ~50 s here; Newton takes a few steps."""
    rng = np.random.default_rng(0)
    strength = {"A": 6.0, "B": 2.0, "C": 1.0, "D": -5.0, "E": 0.0, "F": 0.5, "G": -1.0, "H": 3.0}
    rows, names = [], sorted(strength)
    for i in range(400):
        a, b = rng.choice(names, 2, replace=False)
        rows.append((str(i), "h", a, b, float(rng.random() < 1 / (1 + math.exp(strength[b] - strength[a])))))
    table = comps(rows)
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)  # "did not converge" would fail the test
        fit = series(bradley_terry(table, prior=0.1))
        boot = bootstrap_bradley_terry(table, n_boot=200, seed=0, prior=0.1)
    assert fit == pytest.approx(_reference_bt(table, prior=0.1), abs=1e-3)
    assert fit["D"] < fit["G"] < fit["E"] and fit["A"] == max(fit.values())
    assert ((boot["ci_low"] <= boot["rating"]) & (boot["rating"] <= boot["ci_high"])).all()


def test_anchor_and_scale():
    table = comps([(str(i), "h", "A", "B", o) for i, o in enumerate([1.0, 1.0, 1.0, 0.0])])
    r = series(bradley_terry(table, anchor=("B", 1200.0)))
    assert r["B"] == 1200.0 and r["A"] == pytest.approx(1200 + 400 * math.log10(3))
    r = series(bradley_terry(table, scale=100.0, base=0.0))
    assert r["A"] == pytest.approx(50 * math.log10(3))
    with pytest.raises(ConfigError, match="anchor model"):
        bradley_terry(table, anchor=("Z", 1000.0))
    with pytest.raises(ConfigError, match="scale"):
        bradley_terry(table, scale=0.0)


def test_mle_does_not_exist_when_a_model_loses_everything():
    rows = [
        ("1", "h", "A", "B", 1.0),
        ("2", "h", "B", "A", 1.0),
        ("3", "h", "A", "C", 1.0),
        ("4", "h", "B", "C", 1.0),
    ]
    with pytest.raises(RecordError, match=r"\[\['A', 'B'\], \['C'\]\].*prior > 0"):
        bradley_terry(comps(rows))
    r = series(bradley_terry(comps(rows), prior=1.0))
    assert all(np.isfinite(v) for v in r.values())
    assert r["C"] < r["A"] == pytest.approx(r["B"])


def test_prior_shrinks_towards_the_mean():
    table = comps([(str(i), "h", "A", "B", o) for i, o in enumerate([1.0, 1.0, 1.0, 0.0])])
    gap = np.diff(sorted(series(bradley_terry(table)).values()))[0]
    shrunk = np.diff(sorted(series(bradley_terry(table, prior=2.0)).values()))[0]
    assert 0 < shrunk < gap


def test_votes_and_comparisons_agree():
    votes = pd.DataFrame(
        {
            "model_a": ["A", "B", "A", "C", "B"],
            "model_b": ["B", "A", "C", "A", "C"],
            "winner": ["model_a", "tie", "model_b", "tie (bothbad)", "model_a"],
        }
    )
    as_comps = comps(
        [
            ("0", "h", "A", "B", 1.0),
            ("1", "h", "B", "A", 0.5),
            ("2", "h", "A", "C", 0.0),
            ("3", "h", "C", "A", 0.5),
            ("4", "h", "B", "C", 1.0),
        ]
    )
    pd.testing.assert_frame_equal(bradley_terry(votes), bradley_terry(as_comps))


@settings(max_examples=examples(60), deadline=None)
@given(st.integers(3, 5), st.integers(1, 4), st.data())
def test_balanced_round_robin_orders_like_win_rates(n_models, games, data):
    models = [f"m{i}" for i in range(n_models)]
    rows = []
    for i, a in enumerate(models):
        for b in models[i + 1 :]:
            for g in range(games):
                rows.append((f"{a}-{b}-{g}", "h", a, b, data.draw(st.sampled_from([0.0, 0.5, 1.0]))))
    table = comps(rows)
    try:
        bt = series(bradley_terry(table))
    except RecordError:
        assume(False)  # no finite MLE for this draw
    wr = series(win_rates(table), "win_rate")
    for a in models:
        for b in models:
            if abs(wr[a] - wr[b]) < 1e-12:
                assert bt[a] == pytest.approx(bt[b], abs=1e-6)
            else:
                assert (bt[a] > bt[b]) == (wr[a] > wr[b])


def test_bootstrap_contains_point_and_is_seeded():
    rng = np.random.default_rng(5)
    rows = [(str(i), "h", "A", "B", float(rng.random() < 0.7)) for i in range(300)]
    rows += [(str(300 + i), "h", "B", "C", float(rng.random() < 0.6)) for i in range(300)]
    rows += [(str(600 + i), "h", "A", "C", float(rng.random() < 0.8)) for i in range(300)]
    table = comps(rows)
    boot = bootstrap_bradley_terry(table, n_boot=300, seed=1)
    assert (boot["ci_low"] < boot["rating"]).all() and (boot["rating"] < boot["ci_high"]).all()
    pd.testing.assert_frame_equal(boot[["model", "rating", "n_comparisons"]], bradley_terry(table))
    pd.testing.assert_frame_equal(bootstrap_bradley_terry(table.iloc[::-1], n_boot=300, seed=1), boot)
    anchored = bootstrap_bradley_terry(table, n_boot=100, seed=1, anchor=("C", 900.0)).set_index("model")
    assert anchored.loc["C", "ci_low"] == anchored.loc["C", "ci_high"] == 900.0


def test_bootstrap_replicate_without_mle_is_reported():
    rows = [
        ("1", "h", "A", "B", 1.0),
        ("2", "h", "A", "B", 0.0),
    ]  # a replicate drawing one prompt twice fails
    with pytest.raises(RecordError, match="bootstrap replicate"):
        bootstrap_bradley_terry(comps(rows), n_boot=50, seed=0)
    assert len(bootstrap_bradley_terry(comps(rows), n_boot=50, seed=0, prior=1.0)) == 2


def _elo_by_hand(sequence, k=4.0):
    r = {}
    for a, b, s in sequence:
        ra, rb = r.get(a, 1000.0), r.get(b, 1000.0)
        ea = 1 / (1 + 10 ** ((rb - ra) / 400))
        r[a], r[b] = ra + k * (s - ea), rb + k * ((1 - s) - (1 - ea))
    return r


def test_online_elo_hand_computed_in_timestamp_order():
    votes = pd.DataFrame(
        {
            "model_a": ["B", "A", "A"],
            "model_b": ["A", "B", "C"],
            "winner": ["tie", "model_a", "model_b"],
            "tstamp": [20.0, 10.0, 30.0],
        }
    )
    # In time order: A beats B (1002 / 998), then B-A tie, then C beats A.
    first = 1 / (1 + 10 ** ((1002 - 998) / 400))  # B's expectation against A
    b2 = 998 + 4 * (0.5 - first)
    a2 = 1002 + 4 * (0.5 - (1 - first))
    ea = 1 / (1 + 10 ** ((1000 - a2) / 400))
    expected = {"A": a2 + 4 * (0 - ea), "B": b2, "C": 1000 + 4 * (1 - (1 - ea))}
    got = series(elo_ratings(votes))
    assert got == pytest.approx(expected, abs=1e-9)
    assert got == pytest.approx(_elo_by_hand([("A", "B", 1.0), ("B", "A", 0.5), ("A", "C", 0.0)]), abs=1e-9)
    assert elo_ratings(votes)["n_votes"].sum() == 6


def test_online_elo_row_order_without_timestamps_and_k_zero():
    votes = pd.DataFrame({"model_a": ["A", "A"], "model_b": ["B", "B"], "winner": ["model_a", "model_b"]})
    got = series(elo_ratings(votes, k=32))
    assert got == pytest.approx(_elo_by_hand([("A", "B", 1.0), ("A", "B", 0.0)], k=32), abs=1e-9)
    assert got["A"] < 1000  # the later loss costs more than the early win earned
    assert set(series(elo_ratings(votes, k=0)).values()) == {1000.0}
    with pytest.raises(ConfigError):
        elo_ratings(votes, scale=-1)
