"""``leaderboard --format json|csv`` carry every fact the table shows (issue 14 item 10).

The facts: Bradley-Terry's fallback to virtual ties, models never compared with each other (groups), OpenING's
tie treatments, and online Elo beside Bradley-Terry. Each is checked against the statistics computed directly.
"""

from __future__ import annotations

import csv
import io
import json
import math

import pandas as pd
import pytest
from click.testing import CliRunner

from echo_builder.cli import cli
from echo_builder.stats import elo_ratings, win_rates_by_tie_treatment


def _votes(tmp_path, rows):
    path = tmp_path / "votes.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def _run(*args):
    result = CliRunner().invoke(cli, ["leaderboard", *args, "--n-boot", "50"])
    assert result.exit_code == 0, result.output
    return result


@pytest.fixture
def split_votes(tmp_path):
    """Two groups never compared ({a, b} and {c, d}); ``a`` never loses, so the plain MLE does not exist."""
    rows = []
    for i in range(12):
        rows.append({"model_a": "a", "model_b": "b", "winner": "model_a" if i % 3 else "tie"})
        rows.append({"model_a": "c", "model_b": "d", "winner": ["model_a", "model_b", "tie"][i % 3]})
    return _votes(tmp_path, rows)


def test_json_and_csv_carry_fallback_groups_ties_and_elo(split_votes):
    table = _run("--votes", str(split_votes)).stdout
    records = json.loads(_run("--votes", str(split_votes), "--format", "json").stdout)
    rows = list(csv.DictReader(io.StringIO(_run("--votes", str(split_votes), "--format", "csv").stdout)))
    by_model = {r["model"]: r for r in records}
    assert sorted(by_model) == ["a", "b", "c", "d"] and [r["model"] for r in rows] == [
        r["model"] for r in records
    ]

    # Bradley-Terry fell back to virtual ties: the table says so in words, json/csv in a column
    assert "virtual ties" in table
    assert {r["bt_virtual_ties"] for r in records} == {0.1}
    assert {float(r["bt_virtual_ties"]) for r in rows} == {0.1}

    # groups never compared: the warning in the table, the group index in json/csv
    assert "2 groups that were never compared" in table
    assert {m: r["comparison_group"] for m, r in by_model.items()} == {"a": 1, "b": 1, "c": 2, "d": 2}
    assert {r["model"]: int(r["comparison_group"]) for r in rows} == {"a": 1, "b": 1, "c": 2, "d": 2}

    # OpenING's tie treatments: equal to the statistics computed directly on the same votes
    votes = pd.read_json(split_votes, lines=True)
    from echo_builder.stats import votes_to_comparisons

    expected = win_rates_by_tie_treatment(votes_to_comparisons(votes)).set_index("model")
    for model, r in by_model.items():
        assert r["tie_half"] == pytest.approx(expected.loc[model, "tie_half"])
        assert r["tie_zero"] == pytest.approx(expected.loc[model, "tie_zero"])
        assert r["tie_dropped"] == pytest.approx(expected.loc[model, "no_ties"])
        assert r["tie_fdt"] is None  # human votes carry no lean
    assert by_model["a"]["tie_zero"] == pytest.approx(8 / 12) and by_model["a"]["tie_dropped"] == 1.0
    assert "OpenING's tie treatments" in table

    # online Elo beside Bradley-Terry
    elo = elo_ratings(votes).set_index("model")["rating"]
    assert {m: r["elo_rating"] for m, r in by_model.items()} == pytest.approx(elo.to_dict())
    assert all(math.isfinite(float(r["elo_rating"])) for r in rows)


def test_connected_votes_use_the_plain_mle(tmp_path):
    rows = [
        {"model_a": a, "model_b": b, "winner": w}
        for a, b in (("x", "y"), ("y", "z"), ("x", "z"))
        for w in ("model_a", "model_b", "model_a") * 20
    ]
    records = json.loads(_run("--votes", str(_votes(tmp_path, rows)), "--format", "json").stdout)
    assert {r["bt_virtual_ties"] for r in records} == {0.0}
    assert {r["comparison_group"] for r in records} == {1}
    assert all(r["ties"] == 0 for r in records)
