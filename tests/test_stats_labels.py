"""Model, judge and sample labels pass through every statistic unchanged, whatever characters they hold.

numpy's fixed-width ``str`` dtype drops trailing NUL characters, so a model called ``"\\x00"`` used to come back
as ``""`` from ``bradley_terry`` (found by hypothesis on an audit run), merging two models into one row.
"""

from __future__ import annotations

import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from echo_builder import stats
from tests.helpers.properties import examples

_TRICKY = ["", "\x00", "a", "a\x00", "a\x00\x00", " a", "a ", "é", "\u200b"]

_FUNCTIONS = {
    "win_rates": lambda df: stats.win_rates(df),
    "bootstrap_win_rates": lambda df: stats.bootstrap_win_rates(df, n_boot=20),
    "bradley_terry": lambda df: stats.bradley_terry(df, prior=0.1),
    "bootstrap_bradley_terry": lambda df: stats.bootstrap_bradley_terry(df, n_boot=20, prior=0.1),
    "elo_ratings": lambda df: stats.elo_ratings(df),
    "win_rates_by_tie_treatment": lambda df: stats.win_rates_by_tie_treatment(df),
}


def _round_robin(models: list[str], samples: list[str]) -> pd.DataFrame:
    rows = []
    for s, sample in enumerate(samples):
        for i, a in enumerate(models):
            for j, b in enumerate(models[i + 1 :], start=i + 1):
                rows.append(
                    {
                        "sample_id": sample,
                        "judge": "j",
                        "model_a": a,
                        "model_b": b,
                        "outcome": (s + i + j) % 3 / 2,
                    }
                )
    return pd.DataFrame(rows)


@pytest.mark.parametrize("name", sorted(_FUNCTIONS))
def test_labels_that_differ_only_in_trailing_nul_stay_distinct(name):
    df = _round_robin(_TRICKY, ["p", "p\x00", "q"])
    out = _FUNCTIONS[name](df)
    assert sorted(out["model"].tolist()) == sorted(_TRICKY)
    assert len(out) == len(_TRICKY)
    # every model met every other once per sample: the counts prove no two rows were merged
    counts = out["n_votes" if name == "elo_ratings" else "n_comparisons"]
    assert (counts == 3 * (len(_TRICKY) - 1)).all()


def test_bradley_terry_ratings_do_not_depend_on_the_labels():
    """Renaming the models to NUL-laden strings changes no rating."""
    plain = ["m0", "m1", "m2", "m3"]
    tricky = ["\x00", "", "a\x00", "a"]
    a = stats.bradley_terry(_round_robin(plain, ["p", "q"]), prior=0.1).set_index("model")["rating"]
    b = stats.bradley_terry(_round_robin(tricky, ["p", "q"]), prior=0.1).set_index("model")["rating"]
    assert b.rename(dict(zip(tricky, plain, strict=True))).sort_index().tolist() == pytest.approx(
        a.sort_index().tolist(), abs=1e-9
    )


@settings(max_examples=examples(40), deadline=None)
@given(st.lists(st.text(max_size=4), min_size=2, max_size=5, unique=True))
def test_any_text_labels_round_trip(models):
    df = _round_robin(models, ["s1", "s2"])
    for name, fn in _FUNCTIONS.items():
        out = fn(df)
        assert sorted(out["model"].tolist()) == sorted(models), name
