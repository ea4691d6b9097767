"""Real GenAI-Arena votes (../shared/data): win rates, Bradley-Terry and intervals against the published boards.

Skipped when the shared data folder is absent (see the ``shared_data`` fixture in conftest.py).
"""

from __future__ import annotations

import json
import warnings

import pandas as pd
import pytest

from echo_builder.stats import (
    bootstrap_bradley_terry,
    bootstrap_win_rates,
    bradley_terry,
    elo_ratings,
    head_to_head,
    load_votes,
    model_rank_agreement,
    votes_to_comparisons,
    win_rates,
)

pytestmark = pytest.mark.shared_data


def arena(shared_data):
    return shared_data / "human_votes" / "genai_arena"


def board(shared_data, name: str) -> pd.DataFrame:
    return pd.read_csv(arena(shared_data) / name).set_index("key")


def restricted_votes(shared_data, suffix: str, keys) -> pd.DataFrame:
    """Votes among the board's models, names shortened to the board's keys (imagenhub_<key>_<suffix>)."""
    votes = load_votes(arena(shared_data) / "clean_battle_20240220.json")
    full = {f"imagenhub_{k}_{suffix}": k for k in keys}
    keep = votes["model_a"].isin(full) & votes["model_b"].isin(full)
    out = votes[keep].reset_index(drop=True)
    return out.assign(model_a=out["model_a"].map(full), model_b=out["model_b"].map(full))


@pytest.fixture
def t2i(shared_data):
    lb = board(shared_data, "t2i_generation_leaderboard.csv")
    votes = restricted_votes(shared_data, "generation", lb.index)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # the file holds one SDXLTurbo-vs-itself vote
        comps = votes_to_comparisons(votes)
    return lb, votes, comps


def test_six_models_and_vote_counts(t2i):
    lb, votes, comps = t2i
    assert len(lb) == 6 and len(votes) == 1978
    assert len(comps) == 1977  # one self-battle dropped
    assert set(comps["model_a"]) | set(comps["model_b"]) == set(lb.index)


def test_win_rates_equal_a_hand_count(shared_data, t2i):
    lb, _, comps = t2i
    raw = json.loads((arena(shared_data) / "clean_battle_20240220.json").read_text())
    points: dict[str, list[float]] = {}
    for vote in raw:
        a = vote["model_a"].removeprefix("imagenhub_").removesuffix("_generation")
        b = vote["model_b"].removeprefix("imagenhub_").removesuffix("_generation")
        if a not in lb.index or b not in lb.index or a == b or not vote["model_a"].endswith("_generation"):
            continue
        s = {"model_a": 1.0, "model_b": 0.0, "tie": 0.5, "tie (bothbad)": 0.5}[vote["winner"]]
        points.setdefault(a, []).append(s)
        points.setdefault(b, []).append(1.0 - s)
    hand = {m: sum(p) / len(p) for m, p in points.items()}
    table = win_rates(comps).set_index("model")
    assert table["win_rate"].to_dict() == pytest.approx(hand, abs=1e-12)
    assert table["n_comparisons"].to_dict() == {m: len(p) for m, p in points.items()}


def test_win_rate_orders_models_exactly_as_the_published_elo_board(t2i):
    lb, _, comps = t2i
    table = win_rates(comps)
    assert (
        table["model"].tolist() == lb.sort_values("Arena Elo rating (anony)", ascending=False).index.tolist()
    )
    for column in ("Arena Elo rating (anony)", "Arena Elo rating (full)"):
        agreement = model_rank_agreement(table.set_index("model")["win_rate"], lb[column])
        assert agreement.tau == pytest.approx(1.0, abs=1e-9) and agreement.n == 6
    rates = table.set_index("model")["win_rate"]
    assert rates["PlayGroundV2"] == pytest.approx(0.73, abs=0.01) and rates.idxmax() == "PlayGroundV2"
    assert rates["LCM"] == pytest.approx(0.30, abs=0.01) and rates.idxmin() == "LCM"
    h2h = head_to_head(comps)
    assert h2h.loc["PlayGroundV2", "LCM"] == pytest.approx(1 - h2h.loc["LCM", "PlayGroundV2"])


def test_bradley_terry_reproduces_the_published_board(t2i):
    """GenAI-Arena published MLE Elo (mean 1000, scale 400); ours matches it to a fraction of a point."""
    lb, votes, comps = t2i
    full = bradley_terry(comps).set_index("model")["rating"]
    assert full.to_dict() == pytest.approx(lb["Arena Elo rating (full)"].to_dict(), abs=0.5)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        anony = bradley_terry(votes[votes["anony"]]).set_index("model")["rating"]
    assert anony.to_dict() == pytest.approx(lb["Arena Elo rating (anony)"].to_dict(), abs=0.5)
    assert model_rank_agreement(full, win_rates(comps).set_index("model")["win_rate"]).tau == pytest.approx(
        1.0
    )


def test_bootstrap_intervals_contain_the_point_estimates(t2i):
    _, _, comps = t2i
    wr = bootstrap_win_rates(comps, n_boot=1000, seed=0)
    assert ((wr["ci_low"] <= wr["win_rate"]) & (wr["win_rate"] <= wr["ci_high"])).all()
    assert ((wr["ci_high"] - wr["ci_low"]) < 0.1).all()  # about 640 votes per model
    bt = bootstrap_bradley_terry(comps, n_boot=1000, seed=0)
    assert ((bt["ci_low"] <= bt["rating"]) & (bt["rating"] <= bt["ci_high"])).all()
    ordered = bt.set_index("model")
    assert ordered.loc["PlayGroundV2", "ci_low"] > ordered.loc["PixArtAlpha", "ci_high"]  # a clear leader


def test_online_elo_in_time_order_keeps_the_board_order(t2i):
    lb, votes, _ = t2i
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        elo = elo_ratings(votes).set_index("model")["rating"]
    assert model_rank_agreement(elo, lb["Arena Elo rating (full)"]).tau == pytest.approx(1.0, abs=1e-9)


def test_editing_votes_order_like_their_board(shared_data):
    lb = board(shared_data, "image_editing_leaderboard.csv")
    votes = restricted_votes(shared_data, "edition", lb.index)
    assert len(votes) == 83
    comps = votes_to_comparisons(votes)
    for scores in (
        win_rates(comps).set_index("model")["win_rate"],
        bradley_terry(comps).set_index("model")["rating"],
    ):
        agreement = model_rank_agreement(scores, lb["Arena Elo rating (anony)"])
        assert agreement.tau == pytest.approx(1.0, abs=1e-9) and agreement.n == 7
