"""Majority vote of judges: hand cases, the reference code's first-judge-only defect, order invariance."""

from __future__ import annotations

from itertools import permutations

import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from echo_builder.errors import RecordError
from echo_builder.stats import majority_vote, pseudo_pairwise, win_rates
from tests.helpers.properties import examples


def comps(rows):
    return pd.DataFrame(rows, columns=["sample_id", "judge", "model_a", "model_b", "outcome"])


def test_ensemble_is_not_the_first_judge_alone_regression():
    """Defect: the reference vote compared side labels with model names, so the ensemble was judge 1 alone.

    Three scripted judges: judge 1 prefers A, judges 2 and 3 prefer B, so B must win, whatever the judge order.
    """
    votes = [
        ("s1", "judge1", "A", "B", 1.0),
        ("s1", "judge2", "A", "B", 0.0),
        ("s1", "judge3", "A", "B", 0.0),
    ]
    tables = []
    for order in permutations(votes):
        result = majority_vote(comps(list(order)))
        assert result["outcome"].tolist() == [0.0]
        tables.append(result)
    for table in tables[1:]:
        pd.testing.assert_frame_equal(table, tables[0])
    # Through the whole pipeline, with judges given in every order of their rows.
    ratings = pd.DataFrame(
        [
            ("s1", "A", "judge1", 9.0, "ok"),
            ("s1", "B", "judge1", 2.0, "ok"),
            ("s1", "A", "judge2", 3.0, "ok"),
            ("s1", "B", "judge2", 8.0, "ok"),
            ("s1", "A", "judge3", 4.0, "ok"),
            ("s1", "B", "judge3", 6.0, "ok"),
        ],
        columns=["sample_id", "model", "judge", "rating", "status"],
    )
    for order in permutations(range(3)):
        rows = pd.concat([ratings.iloc[2 * i : 2 * i + 2] for i in order], ignore_index=True)
        wr = win_rates(majority_vote(pseudo_pairwise(rows))).set_index("model")["win_rate"]
        assert wr.to_dict() == {"B": 1.0, "A": 0.0}


def test_no_strict_majority_is_a_tie_and_abstainers_do_not_count():
    rows = [
        # one each way plus a tie: no outcome has > 1.5 of 3 votes -> tie
        ("s1", "j1", "A", "B", 1.0),
        ("s1", "j2", "A", "B", 0.0),
        ("s1", "j3", "A", "B", 0.5),
        # two judges voted (j3 abstained), both for A -> A
        ("s2", "j1", "A", "B", 1.0),
        ("s2", "j2", "A", "B", 1.0),
        # two voted, split -> tie
        ("s3", "j1", "A", "B", 1.0),
        ("s3", "j3", "A", "B", 0.0),
        # given from B's side: B over A by 2 of 3 -> model_b wins in canonical form
        ("s4", "j1", "B", "A", 1.0),
        ("s4", "j2", "B", "A", 1.0),
        ("s4", "j3", "B", "A", 0.0),
    ]
    result = majority_vote(comps(rows))
    assert result["outcome"].tolist() == [0.5, 1.0, 0.5, 0.0]
    assert result["n_judges"].tolist() == [3, 2, 2, 3]
    assert result[["votes_a", "votes_b", "votes_tie"]].values.tolist() == [
        [1, 1, 1],
        [2, 0, 0],
        [1, 1, 0],
        [1, 2, 0],
    ]
    assert set(result["judge"]) == {"majority"}


def test_judge_voting_twice_is_an_error():
    rows = [("s1", "j1", "A", "B", 1.0), ("s1", "j1", "B", "A", 1.0)]
    with pytest.raises(RecordError, match="voted twice"):
        majority_vote(comps(rows))


def test_bad_outcome_is_an_error():
    with pytest.raises(RecordError, match="outcome must be"):
        majority_vote(comps([("s1", "j1", "A", "B", 2.0)]))


@st.composite
def judged(draw):
    models = ["A", "B", "C"]
    rows = []
    for s in range(draw(st.integers(1, 4))):
        for i, a in enumerate(models):
            for b in models[i + 1 :]:
                for j in range(draw(st.integers(1, 4))):
                    rows.append((f"s{s}", f"j{j}", a, b, draw(st.sampled_from([0.0, 0.5, 1.0]))))
    return comps(rows)


@settings(max_examples=examples(80), deadline=None)
@given(judged(), st.randoms(use_true_random=False))
def test_judge_relabelling_and_row_order_change_nothing(table, rnd):
    base = majority_vote(table)
    judges = sorted(table["judge"].unique())
    perm = judges[:]
    rnd.shuffle(perm)
    relabelled = table.assign(judge=table["judge"].map(dict(zip(judges, perm, strict=True))))
    shuffled = relabelled.sample(frac=1.0, random_state=rnd.randint(0, 10**6))
    pd.testing.assert_frame_equal(majority_vote(shuffled), base)
    # Independent check of the rule on each comparison.
    for (s, a, b), group in table.groupby(["sample_id", "model_a", "model_b"]):
        n, votes = len(group), group["outcome"].tolist()
        expected = 1.0 if votes.count(1.0) > n / 2 else 0.0 if votes.count(0.0) > n / 2 else 0.5
        got = base[(base.sample_id == s) & (base.model_a == a) & (base.model_b == b)]["outcome"].item()
        assert got == expected
