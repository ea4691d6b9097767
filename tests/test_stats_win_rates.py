"""Win rates, head-to-head matrix and OpenING's tie treatments: hand counts and properties."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from echo_builder.errors import RecordError
from echo_builder.stats import head_to_head, pseudo_pairwise, win_rates, win_rates_by_tie_treatment
from tests.helpers.properties import examples


def comps(rows, lean=None):
    df = pd.DataFrame(rows, columns=["sample_id", "judge", "model_a", "model_b", "outcome"])
    if lean is not None:
        df["tie_lean"] = lean
    return df


ROWS = [
    ("1", "h", "A", "B", 1.0),
    ("2", "h", "A", "B", 0.5),
    ("3", "h", "B", "A", 1.0),  # B beats A, written from B's side
    ("4", "h", "A", "C", 1.0),
    ("5", "h", "C", "B", 0.5),
    ("6", "h", "B", "C", 0.0),
]


def test_win_rates_hand_counted():
    # A: win, tie, loss, win -> 2.5 / 4; B: loss, tie, win, tie, loss -> 2 / 5; C: loss, tie, win -> 1.5 / 3
    table = win_rates(comps(ROWS))
    assert table["model"].tolist() == ["A", "C", "B"]
    assert table["win_rate"].tolist() == [0.625, 0.5, 0.4]
    assert table[["wins", "ties", "losses", "n_comparisons"]].values.tolist() == [
        [2, 1, 1, 4],
        [1, 1, 1, 3],
        [1, 2, 2, 5],
    ]


def test_head_to_head_hand_counted():
    m = head_to_head(comps(ROWS))
    assert list(m.index) == ["A", "C", "B"] and list(m.columns) == ["A", "C", "B"]
    assert m.loc["A", "B"] == pytest.approx(1.5 / 3)  # win, tie, loss
    assert m.loc["A", "C"] == 1.0 and m.loc["C", "A"] == 0.0
    assert m.loc["C", "B"] == pytest.approx(0.75)  # tie, win
    assert np.isnan(np.diag(m.to_numpy())).all()
    off = ~np.eye(3, dtype=bool)
    np.testing.assert_allclose((m.to_numpy() + m.to_numpy().T)[off], 1.0)


def test_head_to_head_never_compared_is_nan():
    m = head_to_head(comps([("1", "h", "A", "B", 1.0), ("2", "h", "C", "D", 0.0)]))
    assert np.isnan(m.loc["A", "C"]) and m.loc["A", "B"] == 1.0 and m.loc["D", "C"] == 1.0


def test_missing_columns_error():
    with pytest.raises(RecordError, match="outcome"):
        win_rates(pd.DataFrame({"sample_id": ["1"], "judge": ["h"], "model_a": ["A"], "model_b": ["B"]}))


def test_self_comparison_error():
    with pytest.raises(RecordError, match="with itself"):
        win_rates(comps([("1", "h", "A", "A", 1.0)]))


def test_tie_treatments_hand_counted():
    # Two decisive A wins, one decisive B win, a tie leaning to B, a tie leaning to A (given from B's side, so
    # its lean 0.0 = toward model_b of that row = A), and a tie with no lean.
    rows = [
        ("1", "h", "A", "B", 1.0),
        ("2", "h", "A", "B", 1.0),
        ("3", "h", "A", "B", 0.0),
        ("4", "h", "A", "B", 0.5),
        ("5", "h", "B", "A", 0.5),
        ("6", "h", "A", "B", 0.5),
    ]
    table = win_rates_by_tie_treatment(comps(rows, lean=[np.nan, np.nan, np.nan, 0.0, 0.0, np.nan]))
    a = table.set_index("model").loc["A"]
    assert a["fdt"] == pytest.approx(3 / 6)  # 2 wins + the tie leaning to A; the unleaned tie is 0 for both
    assert a["tie_half"] == pytest.approx(3.5 / 6)
    assert a["tie_zero"] == pytest.approx(2 / 6)
    assert a["no_ties"] == pytest.approx(2 / 3)
    assert (a["n_comparisons"], a["n_ties"], a["n_unleaned_ties"]) == (6, 3, 1)
    b = table.set_index("model").loc["B"]
    assert b["fdt"] == pytest.approx(2 / 6) and b["no_ties"] == pytest.approx(1 / 3)
    without = win_rates_by_tie_treatment(comps(rows))
    assert without["fdt"].isna().all()
    assert without.set_index("model").loc["A", "tie_half"] == pytest.approx(3.5 / 6)


def test_tie_treatment_all_ties_no_ties_is_nan():
    table = win_rates_by_tie_treatment(comps([("1", "h", "A", "B", 0.5)]))
    assert table["no_ties"].isna().all() and (table["tie_half"] == 0.5).all()


def _simple_win_rates(table: pd.DataFrame) -> dict[str, float]:
    points: dict[str, list[float]] = {}
    for row in table.itertuples(index=False):
        points.setdefault(row.model_a, []).append(row.outcome)
        points.setdefault(row.model_b, []).append(1.0 - row.outcome)
    return {m: sum(p) / len(p) for m, p in points.items()}


@st.composite
def comparison_tables(draw):
    models = draw(st.lists(st.sampled_from("ABCDE"), min_size=2, max_size=5, unique=True))
    rows = []
    for s in range(draw(st.integers(1, 6))):
        a, b = draw(st.lists(st.sampled_from(models), min_size=2, max_size=2, unique=True))
        rows.append((f"s{s}", "j", a, b, draw(st.sampled_from([0.0, 0.5, 1.0]))))
    return comps(rows)


@settings(max_examples=examples(100), deadline=None)
@given(comparison_tables(), st.randoms(use_true_random=False))
def test_matches_simple_count_and_ignores_sides_and_row_order(table, rnd):
    base = win_rates(table)
    expected = _simple_win_rates(table)
    assert base.set_index("model")["win_rate"].to_dict() == pytest.approx(expected)
    flip = np.array([rnd.random() < 0.5 for _ in range(len(table))])
    flipped = table.assign(
        model_a=np.where(flip, table["model_b"], table["model_a"]),
        model_b=np.where(flip, table["model_a"], table["model_b"]),
        outcome=np.where(flip, 1.0 - table["outcome"], table["outcome"]),
    ).sample(frac=1.0, random_state=rnd.randint(0, 10**6))
    pd.testing.assert_frame_equal(win_rates(flipped), base)
    pd.testing.assert_frame_equal(head_to_head(flipped), head_to_head(table))


@settings(max_examples=examples(60), deadline=None)
@given(
    st.integers(2, 5).flatmap(
        lambda n: st.lists(st.lists(st.integers(1, 10), min_size=n, max_size=n), min_size=1, max_size=5)
    )
)
def test_adding_a_model_that_loses_everything(grid):
    """Complete ratings (every model on every prompt): a new model rated below all gets 0 and reorders nothing."""
    rows = [
        (f"s{s}", f"m{m}", "j", float(v), "ok") for s, vals in enumerate(grid) for m, v in enumerate(vals)
    ]
    before = win_rates(
        pseudo_pairwise(pd.DataFrame(rows, columns=["sample_id", "model", "judge", "rating", "status"]))
    )
    rows += [(f"s{s}", "zz_loser", "j", 0.0, "ok") for s in range(len(grid))]
    after = win_rates(
        pseudo_pairwise(pd.DataFrame(rows, columns=["sample_id", "model", "judge", "rating", "status"]))
    )
    assert after.set_index("model").loc["zz_loser", "win_rate"] == 0.0
    others = after[after["model"] != "zz_loser"]
    assert others["model"].tolist() == before["model"].tolist()  # same order (ties broken by name both times)
    # and each old win rate maps monotonically: (w + P) / (n + P) with equal n for all models
    assert np.all(np.diff(others["win_rate"].to_numpy()) <= 1e-12)
