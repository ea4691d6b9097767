"""Pseudo-pairwise comparisons from ratings: hand-computed cases, missing outputs, judge abstention, invariance."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from echo_builder.errors import ConfigError, RecordError
from echo_builder.stats import failure_counts, pseudo_pairwise, win_rates
from tests.helpers.properties import examples

NAN = float("nan")


def ratings(rows):
    return pd.DataFrame(rows, columns=["sample_id", "model", "judge", "rating", "status"])


def as_tuples(comps: pd.DataFrame):
    return [
        tuple(r)
        for r in comps[["sample_id", "judge", "model_a", "model_b", "outcome"]].itertuples(index=False)
    ]


def test_higher_rating_wins_equal_ties_hand_computed():
    r = ratings(
        [
            ("s1", "C", "j", 5.0, "ok"),
            ("s1", "A", "j", 7.0, "ok"),
            ("s1", "B", "j", 7.0, "ok"),
            ("s2", "A", "j", 2.0, "ok"),
            ("s2", "B", "j", 9.0, "ok"),
            ("s2", "C", "j", 3.0, "ok"),
        ]
    )
    got = as_tuples(pseudo_pairwise(r))
    assert got == [
        ("s1", "j", "A", "B", 0.5),
        ("s1", "j", "A", "C", 1.0),
        ("s1", "j", "B", "C", 1.0),
        ("s2", "j", "A", "B", 0.0),
        ("s2", "j", "A", "C", 0.0),
        ("s2", "j", "B", "C", 1.0),
    ]
    # Hand count: A = (0.5 + 1 + 0 + 0) / 4, B = (0.5 + 1 + 1 + 1) / 4, C = (0 + 0 + 1 + 0) / 4.
    wr = win_rates(pseudo_pairwise(r)).set_index("model")["win_rate"]
    assert wr.to_dict() == {"B": 0.875, "A": 0.375, "C": 0.25}


def test_missing_output_loses_by_default_and_two_missing_tie():
    r = ratings(
        [
            ("s1", "A", "j", 3.0, "ok"),
            ("s1", "B", "j", NAN, "missing_output"),
            ("s1", "C", "j", NAN, "missing_output"),
        ]
    )
    assert as_tuples(pseudo_pairwise(r)) == [
        ("s1", "j", "A", "B", 1.0),
        ("s1", "j", "A", "C", 1.0),
        ("s1", "j", "B", "C", 0.5),
    ]
    skipped = pseudo_pairwise(r, missing="skip")
    assert skipped.empty and list(skipped.columns) == ["sample_id", "judge", "model_a", "model_b", "outcome"]


def test_judge_failure_abstains_and_is_counted_never_scored():
    # Judge j2 failed to parse its reply on B: j2 abstains on (A,B) and (B,C); j1 judges everything.
    r = ratings(
        [
            ("s1", "A", "j1", 8.0, "ok"),
            ("s1", "B", "j1", 6.0, "ok"),
            ("s1", "C", "j1", 4.0, "ok"),
            ("s1", "A", "j2", 5.0, "ok"),
            ("s1", "B", "j2", NAN, "parse_failure"),
            ("s1", "C", "j2", 9.0, "ok"),
        ]
    )
    comps = pseudo_pairwise(r)
    assert as_tuples(comps) == [
        ("s1", "j1", "A", "B", 1.0),
        ("s1", "j1", "A", "C", 1.0),
        ("s1", "j1", "B", "C", 1.0),
        ("s1", "j2", "A", "C", 0.0),
    ]
    assert comps.attrs["n_abstentions"] == 2
    counts = failure_counts(r).set_index(["model", "judge"])
    assert counts.loc[("B", "j2"), "parse_failure"] == 1
    assert counts.loc[("B", "j2"), "judge_failures"] == 1
    assert counts.loc[("B", "j2"), "abstained_comparisons"] == 2
    assert counts.loc[("A", "j2"), "abstained_comparisons"] == 1  # only its pair with B
    assert counts.loc[("A", "j1"), "abstained_comparisons"] == 0
    assert counts["n_samples"].eq(1).all()


def test_failure_next_to_missing_output_is_an_abstention_not_a_win():
    r = ratings([("s1", "A", "j", NAN, "refusal"), ("s1", "B", "j", NAN, "missing_output")])
    comps = pseudo_pairwise(r)
    assert comps.empty and comps.attrs["n_abstentions"] == 1


def test_failure_counts_columns_and_missing_outputs():
    r = ratings(
        [
            ("s1", "A", "j", 1.0, "ok"),
            ("s1", "B", "j", NAN, "missing_output"),
            ("s2", "A", "j", NAN, "error"),
            ("s2", "B", "j", NAN, "refusal"),
        ]
    )
    counts = failure_counts(r)
    assert list(counts.columns) == [
        "model",
        "judge",
        "n_samples",
        "ok",
        "missing_output",
        "error",
        "parse_failure",
        "refusal",
        "judge_failures",
        "abstained_comparisons",
    ]
    b = counts.set_index("model").loc["B"]
    assert (b["missing_output"], b["refusal"], b["judge_failures"], b["abstained_comparisons"]) == (
        1,
        1,
        1,
        1,
    )


@pytest.mark.parametrize(
    ("frame", "match"),
    [
        (
            pd.DataFrame({"sample_id": ["s"], "model": ["A"], "rating": [1.0], "status": ["ok"]}),
            r"\['judge'\]",
        ),
        (ratings([("s", "A", "j", 1.0, "great")]), "unknown status"),
        (ratings([("s", "A", "j", NAN, "ok")]), "no finite rating"),
        (ratings([("s", "A", "j", 4.0, "parse_failure")]), "carry rating NaN"),
        (ratings([("s", "A", "j", 1.0, "ok"), ("s", "A", "j", 2.0, "ok")]), "more than one row"),
        (ratings([("s1", "A", "j", 1.0, "ok"), ("s2", "B", "j", 2.0, "ok")]), "absent"),
    ],
)
def test_malformed_ratings_raise_clear_errors(frame, match):
    with pytest.raises(RecordError, match=match):
        pseudo_pairwise(frame)


def test_unknown_missing_option():
    with pytest.raises(ConfigError, match="missing must be"):
        pseudo_pairwise(ratings([("s", "A", "j", 1.0, "ok")]), missing="win")


@st.composite
def rating_tables(draw):
    n_models = draw(st.integers(2, 4))
    n_samples = draw(st.integers(1, 4))
    n_judges = draw(st.integers(1, 3))
    rows = []
    for s in range(n_samples):
        for m in range(n_models):
            for j in range(n_judges):
                status = draw(st.sampled_from(["ok", "ok", "ok", "missing_output", "error"]))
                rating = float(draw(st.integers(1, 4))) if status == "ok" else NAN
                rows.append((f"s{s}", f"m{m}", f"j{j}", rating, status))
    return ratings(rows)


@settings(max_examples=examples(60), deadline=None)
@given(rating_tables(), st.randoms(use_true_random=False))
def test_row_order_and_model_names_do_not_matter(table, rnd):
    base = pseudo_pairwise(table)
    shuffled = table.sample(frac=1.0, random_state=rnd.randint(0, 10**6)).reset_index(drop=True)
    pd.testing.assert_frame_equal(pseudo_pairwise(shuffled), base)
    # Renaming models by a bijection renames the comparisons and nothing else.
    names = sorted(table["model"].unique())
    perm = names[:]
    rnd.shuffle(perm)
    mapping = dict(zip(names, perm, strict=True))
    renamed = pseudo_pairwise(table.assign(model=table["model"].map(mapping)))
    back = {v: k for k, v in mapping.items()}
    restored = renamed.assign(model_a=renamed["model_a"].map(back), model_b=renamed["model_b"].map(back))
    swap = restored["model_a"] > restored["model_b"]
    fixed = restored.assign(
        model_a=np.where(swap, restored["model_b"], restored["model_a"]),
        model_b=np.where(swap, restored["model_a"], restored["model_b"]),
        outcome=np.where(swap, 1.0 - restored["outcome"], restored["outcome"]),
    )
    fixed = fixed.sort_values(["sample_id", "judge", "model_a", "model_b"]).reset_index(drop=True)
    assert as_tuples(fixed) == as_tuples(base)


@settings(max_examples=examples(60), deadline=None)
@given(rating_tables())
def test_every_non_failed_pair_appears_once(table):
    comps = pseudo_pairwise(table)
    assert not comps.duplicated(["sample_id", "judge", "model_a", "model_b"]).any()
    assert (comps["model_a"] < comps["model_b"]).all()
    # Independent count: pairs with no judge failure on either side.
    expected = 0
    for _, group in table.groupby(["sample_id", "judge"]):
        failed = group["status"].eq("error").sum()
        ok = len(group) - failed
        expected += ok * (ok - 1) // 2
    assert len(comps) == expected
    n_pairs = sum(len(g) * (len(g) - 1) // 2 for _, g in table.groupby(["sample_id", "judge"]))
    assert comps.attrs["n_abstentions"] == n_pairs - expected
