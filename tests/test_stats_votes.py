"""Loading human votes from JSON / JSONL / CSV, errors that name file and row, conversion to comparisons."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from echo_builder.errors import ConfigError, RecordError
from echo_builder.stats import load_votes, votes_to_comparisons

VOTES = [
    {"model_a": "B", "model_b": "A", "winner": "model_a", "judge": "u1", "tstamp": 3.5},
    {"model_a": "A", "model_b": "C", "winner": "tie (bothbad)", "judge": "u2", "tstamp": 1.0},
    {"model_a": "C", "model_b": "B", "winner": "tie", "judge": "u3", "tstamp": 2.0},
    {"model_a": "A", "model_b": "B", "winner": "model_b", "judge": "u4", "tstamp": 4.0},
]


def write(tmp_path, name, text):
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


@pytest.mark.parametrize("kind", ["json", "jsonl", "csv"])
def test_three_formats_load_the_same_table(tmp_path, kind):
    if kind == "json":
        path = write(tmp_path, "v.json", json.dumps(VOTES, indent=2))
    elif kind == "jsonl":
        path = write(tmp_path, "v.jsonl", "\n".join(json.dumps(v) for v in VOTES) + "\n\n")
    else:
        path = tmp_path / "v.csv"
        pd.DataFrame(VOTES).to_csv(path, index=False)
    votes = load_votes(path)
    assert list(votes.columns) == ["model_a", "model_b", "winner", "tstamp", "judge"]
    assert votes["winner"].tolist() == [v["winner"] for v in VOTES]
    assert votes["tstamp"].tolist() == [3.5, 1.0, 2.0, 4.0] and votes["tstamp"].dtype == float


def test_votes_to_comparisons_maps_labels_and_sides():
    comps = votes_to_comparisons(pd.DataFrame(VOTES))
    # Canonical (model_a < model_b), sorted by sample_id = row index; both tie labels are 0.5.
    assert comps[["sample_id", "judge", "model_a", "model_b", "outcome"]].values.tolist() == [
        ["0", "human", "A", "B", 0.0],  # B beat A
        ["1", "human", "A", "C", 0.5],
        ["2", "human", "B", "C", 0.5],
        ["3", "human", "A", "B", 0.0],
    ]
    assert comps["tstamp"].tolist() == [3.5, 1.0, 2.0, 4.0]
    by_id = votes_to_comparisons(pd.DataFrame(VOTES), id_column="judge", judge="arena")
    assert by_id["sample_id"].tolist() == ["u1", "u2", "u3", "u4"] and set(by_id["judge"]) == {"arena"}


def test_self_battles_dropped_with_warning_or_rejected():
    votes = pd.DataFrame([*VOTES, {"model_a": "A", "model_b": "A", "winner": "tie"}])
    with pytest.warns(UserWarning, match="dropped 1 self-battle"):
        assert len(votes_to_comparisons(votes)) == 4
    with pytest.raises(RecordError, match="row 4 is a self-battle of 'A'"):
        votes_to_comparisons(votes, self_battles="error")
    with pytest.raises(ConfigError):
        votes_to_comparisons(votes, self_battles="keep")


def test_in_memory_votes_errors():
    with pytest.raises(RecordError, match=r"row 1 has unknown winner label 'B'"):
        votes_to_comparisons(pd.DataFrame([VOTES[0], {**VOTES[1], "winner": "B"}]))
    with pytest.raises(RecordError, match=r"\['winner'\]"):
        votes_to_comparisons(pd.DataFrame({"model_a": ["A"], "model_b": ["B"]}))
    with pytest.raises(RecordError, match="index repeats"):
        votes_to_comparisons(pd.DataFrame(VOTES, index=[0, 0, 1, 2]))


def test_missing_column_names_file_and_record(tmp_path):
    bad = [VOTES[0], {"model_a": "A", "winner": "tie"}]
    path = write(tmp_path, "votes.json", json.dumps(bad))
    with pytest.raises(RecordError, match=r"votes\.json: record 2 lacks field\(s\) \['model_b'\]"):
        load_votes(path)
    csv_path = write(tmp_path, "votes.csv", "model_a,winner\nA,tie\n")
    with pytest.raises(RecordError, match=r"votes\.csv: header \(line 1\) lacks column\(s\) \['model_b'\]"):
        load_votes(csv_path)


def test_unknown_winner_label_names_file_and_line(tmp_path):
    lines = [json.dumps(VOTES[0]), "", json.dumps({**VOTES[1], "winner": "A is better"})]
    path = write(tmp_path, "votes.jsonl", "\n".join(lines))
    with pytest.raises(RecordError, match=r"votes\.jsonl: line 3: unknown winner label 'A is better'"):
        load_votes(path)
    csv_path = write(tmp_path, "v.csv", "model_a,model_b,winner\nA,B,model_a\nA,B,draw\n")
    with pytest.raises(RecordError, match=r"v\.csv: line 3: unknown winner label 'draw'"):
        load_votes(csv_path)


@pytest.mark.parametrize(
    ("name", "text", "match"),
    [
        ("empty.json", "", "the file is empty"),
        ("blank.jsonl", "\n  \n", "the file is empty"),
        ("list.json", "[]", "no votes found"),
        ("header.csv", "model_a,model_b,winner\n", "no votes found"),
        ("broken.json", "[{", "not valid JSON"),
        ("object.json", '{"model_a": "A"}', "expected a JSON list"),
        ("scalars.json", "[1, 2]", "record 1 is a int"),
        (
            "name.json",
            json.dumps([{"model_a": "", "model_b": "B", "winner": "tie"}]),
            "model_a must be a non-empty",
        ),
        ("time.json", json.dumps([{**VOTES[0], "tstamp": "noon"}]), "record 1: tstamp must be a number"),
        ("line.jsonl", json.dumps(VOTES[0]) + "\n{oops\n", "line 2 is not valid JSON"),
    ],
)
def test_malformed_files(tmp_path, name, text, match):
    path = write(tmp_path, name, text)
    with pytest.raises(RecordError, match=match) as info:
        load_votes(path)
    assert name in str(info.value)


def test_unknown_extension_and_missing_file(tmp_path):
    with pytest.raises(ConfigError, match="unknown vote file type"):
        load_votes(write(tmp_path, "votes.xml", "<votes/>"))
    with pytest.raises(ConfigError, match=r"absent\.json: cannot read the file"):
        load_votes(tmp_path / "absent.json")
