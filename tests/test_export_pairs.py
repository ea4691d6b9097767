"""export-pairs: preference pairs from a judged run (scripted judges) and human votes, in a loadable layout."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner
from PIL import Image

from echo_builder.cli import cli
from echo_builder.errors import ConfigError
from echo_builder.judge.pairs import export_pairs
from tests.helpers.benchmark import make_benchmark, make_outputs
from tests.test_judge import GREEN, RED, _dominant, _images

SAMPLES = ["s0", "s1", "s2"]
BLUE_INPUT = Image.new("RGB", (16, 16), (20, 20, 200))


def _run(*args: str):
    result = CliRunner().invoke(cli, list(args), catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result


def pairwise_judges(body):
    """'fair' and 'also' prefer the green image wherever it is shown; 'contrarian' prefers red."""
    first, second = (_dominant(img) for img in _images(body)[-2:])
    likes = "red" if body["model"] == "contrarian" else "green"
    if first == second:
        return "[[C]]"
    return "[[A]]" if first == likes else "[[B]]"


@pytest.fixture
def judged(tmp_path, openai_server):
    """An image-to-image benchmark (one blue input per sample), 'green' and 'red' outputs on s0-s2, 'late' (red) on
    s0 only; judged pairwise by three judges, two of which like green."""
    bench = make_benchmark(
        tmp_path / "bench",
        "image_to_image",
        [{"id": s, "prompt": f"make {s} green", "inputs": [BLUE_INPUT]} for s in SAMPLES],
    )
    outputs = make_outputs(
        tmp_path / "outputs",
        {
            "green": {s: Image.new("RGB", (16, 16), GREEN) for s in SAMPLES},
            "red": {s: Image.new("RGB", (16, 16), RED) for s in SAMPLES},
            "late": {"s0": Image.new("RGB", (16, 16), RED)},
        },
    )
    openai_server.reply = pairwise_judges
    run = tmp_path / "run"
    args = ["judge", "--benchmark", str(bench), "--config", "image_to_image", "--outputs", str(outputs)]
    args += ["--out", str(run), "--base-url", openai_server.base_url, "--mode", "pairwise"]
    for j in ("fair", "also", "contrarian"):
        args += ["--judge", f"openai:{j}"]
    _run(*args)
    return run, bench, outputs


def _read(folder: Path) -> list[dict]:
    return [json.loads(line) for line in (folder / "pairs.jsonl").read_text().splitlines()]


def test_judge_majority_and_human_pairs(judged, tmp_path):
    run, _, outputs = judged
    votes = tmp_path / "votes.jsonl"
    votes.write_text(
        "\n".join(
            json.dumps(v)
            for v in (
                {"sample_id": "s1", "model_a": "red", "model_b": "green", "winner": "model_a"},
                {"sample_id": "s1", "model_a": "green", "model_b": "red", "winner": "model_b"},
                {"sample_id": "s1", "model_a": "green", "model_b": "red", "winner": "model_a"},
                {"sample_id": "s2", "model_a": "green", "model_b": "red", "winner": "tie"},
            )
        )
    )
    out = tmp_path / "pairs"
    result = _run("export-pairs", str(run), "--out", str(out), "--human", str(votes))
    assert (
        "judge_majority 5, human 2" in result.stdout and "community votes: not a source yet" in result.stdout
    )
    pairs = _read(out)
    by_id = {p["id"]: p for p in pairs}
    # judge pairs: green-red on s0, s1, s2 and late against both on s0 (5); benchmark and outputs from run.json
    assert sorted(by_id) == [
        "human/s1/green/red",
        "human/s2/green/red",
        "judge_majority/s0/green/late",
        "judge_majority/s0/green/red",
        "judge_majority/s0/late/red",
        "judge_majority/s1/green/red",
        "judge_majority/s2/green/red",
    ]
    assert [p["id"] for p in pairs][:3] == [
        "judge_majority/s0/green/late",
        "judge_majority/s0/green/red",
        "judge_majority/s0/late/red",
    ]
    gr = by_id["judge_majority/s1/green/red"]
    assert (gr["preferred"], gr["votes_a"], gr["votes_b"], gr["votes_tie"], gr["n_votes"]) == (
        "a",
        2,
        1,
        0,
        3,
    )
    assert gr["chosen"] == gr["image_a"] == "images/outputs/green/s1.png" and gr["rejected"] == gr["image_b"]
    assert (gr["chosen_model"], gr["rejected_model"]) == ("green", "red")
    assert gr["judges"] == ["openai:also", "openai:contrarian", "openai:fair"] and gr["mode"] == "pairwise"
    assert gr["prompt"] == "make s1 green" and gr["input_images"] == ["images/inputs/s1/0.png"]
    # late and red are both red: every judge ties them
    lr = by_id["judge_majority/s0/late/red"]
    assert (lr["preferred"], lr["votes_tie"], lr["chosen"], lr["rejected"]) == ("tie", 3, None, None)
    assert by_id["judge_majority/s0/green/late"]["preferred"] == "a"
    # humans: two of three voters prefer red on s1 (orientation canonical: green is model_a)
    h1 = by_id["human/s1/green/red"]
    assert (h1["preferred"], h1["votes_a"], h1["votes_b"], h1["source"], h1["judges"]) == (
        "b",
        1,
        2,
        "human",
        [],
    )
    assert h1["chosen"] == "images/outputs/red/s1.png" and h1["mode"] == "human"
    assert by_id["human/s2/green/red"]["preferred"] == "tie"
    # the images are there once each, byte-identical to the outputs, and inside the export folder
    files = sorted(p.relative_to(out).as_posix() for p in (out / "images").rglob("*") if p.is_file())
    assert len(files) == 3 + 3 + 1 + 3  # inputs, green, red, late
    assert (out / "images/outputs/green/s1.png").read_bytes() == (outputs / "green" / "s1.png").read_bytes()
    with Image.open(out / "images/inputs/s0/0.png") as img:
        assert img.getpixel((0, 0)) == (20, 20, 200)
    assert (out / "skipped.jsonl").read_text() == ""
    assert 'datasets.load_dataset("json"' in (out / "README.md").read_text()


def test_layout_loads_with_datasets(judged, tmp_path):
    import datasets

    run, _, outputs = judged
    out = tmp_path / "pairs"
    export_pairs(run, out)
    pairs = datasets.load_dataset(
        "json", data_files=str(out / "pairs.jsonl"), split="train", cache_dir=str(tmp_path / "hf")
    )
    assert pairs.num_rows == 5 and set(pairs["preferred"]) == {"a", "tie"}
    decided = pairs.filter(lambda row: row["preferred"] != "tie")
    decided = decided.map(lambda row: {k: str(out / row[k]) for k in ("chosen", "rejected")})
    decided = decided.cast_column("chosen", datasets.Image()).cast_column("rejected", datasets.Image())
    first = decided[0]
    assert first["chosen"].getpixel((0, 0)) == GREEN and first["rejected"].getpixel((0, 0)) == RED
    # --link: the output images are hard links to the judged files (same inode), the inputs are written
    linked = tmp_path / "linked"
    export_pairs(run, linked, link=True)
    assert (linked / "images/outputs/red/s0.png").stat().st_ino == (outputs / "red" / "s0.png").stat().st_ino


def test_unsafe_names_become_hashed_components():
    from echo_builder.judge.pairs import _component

    assert _component("lumen-2.1_b") == "lumen-2.1_b"
    for name in ("../x", "a/b", ".hidden", "a..b", "", "x" * 101, "caf\u00e9"):
        safe = _component(name)
        assert safe.startswith("x-") and len(safe) == 22 and "/" not in safe
    assert _component("a/b") != _component("a\\b")


def test_missing_image_pair_is_reported_and_skipped(judged, tmp_path):
    run, bench, outputs = judged
    (outputs / "red" / "s2.png").unlink()  # an output deleted after judging
    (outputs / "late" / "s0.png").write_bytes(b"not an image")  # and one damaged
    # and the benchmark rewritten since: s1's input image is no longer an image
    make_benchmark(
        bench,
        "image_to_image",
        [
            {"id": s, "prompt": f"make {s} green", "inputs": [b"junk" if s == "s1" else BLUE_INPUT]}
            for s in SAMPLES
        ],
    )
    out = tmp_path / "pairs"
    result = CliRunner().invoke(cli, ["export-pairs", str(run), "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert "skipped 4 pair(s)" in result.stderr
    skipped = {
        s["id"]: s["reason"] for s in map(json.loads, (out / "skipped.jsonl").read_text().splitlines())
    }
    assert set(skipped) == {
        "judge_majority/s2/green/red",
        "judge_majority/s0/green/late",
        "judge_majority/s0/late/red",
        "judge_majority/s1/green/red",
    }
    assert "has no output file for sample 's2'" in skipped["judge_majority/s2/green/red"]
    assert "is not a readable image" in skipped["judge_majority/s0/late/red"]
    assert (
        skipped["judge_majority/s1/green/red"]
        == "input image 0 of sample 's1' is missing or not a readable image"
    )
    # the one pair with every image intact is written
    assert [p["id"] for p in _read(out)] == ["judge_majority/s0/green/red"]
    assert not (out / "images/outputs/late").exists() and not (out / "images/inputs/s1").exists()


def test_hostile_names_stay_inside_and_bad_arguments_fail_clearly(judged, tmp_path):
    run, _, outputs = judged
    votes = tmp_path / "votes.jsonl"
    votes.write_text(
        json.dumps({"sample_id": "s0", "model_a": "../../evil", "model_b": "green", "winner": "model_a"})
        + "\n"
        + json.dumps({"sample_id": "nope", "model_a": "red", "model_b": "green", "winner": "model_a"})
    )
    evil = tmp_path / "evil"
    evil.mkdir()
    out = tmp_path / "pairs"
    result = export_pairs(run, out, human_votes=votes)
    reasons = {s["id"]: s["reason"] for s in result.skipped}
    assert "no output file" in reasons["human/s0/../../evil/green"]
    assert "'nope' is not in config 'image_to_image'" in reasons["human/nope/green/red"]
    assert list(evil.iterdir()) == [] and result.n_pairs == {"judge_majority": 5, "human": 0}
    # an output folder of something else is refused; nothing is written into it
    other = tmp_path / "other"
    other.mkdir()
    (other / "notes.txt").write_text("mine")
    failed = CliRunner().invoke(cli, ["export-pairs", str(run), "--out", str(other)])
    assert (
        failed.exit_code == 1
        and failed.output.startswith("error:")
        and sorted(os_names(other)) == ["notes.txt"]
    )
    # votes without sample_id: one error line naming the file
    plain = tmp_path / "plain.jsonl"
    plain.write_text(json.dumps({"model_a": "red", "model_b": "green", "winner": "tie"}))
    with pytest.raises(ConfigError, match=r"plain\.jsonl: votes need a sample_id"):
        export_pairs(run, tmp_path / "p2", human_votes=plain)
    # a run.json that does not record the outputs folder (older runs): --outputs is asked for
    meta = json.loads((run / "run.json").read_text())
    del meta["outputs"]
    (run / "run.json").write_text(json.dumps(meta))
    with pytest.raises(ConfigError, match="give --outputs"):
        export_pairs(run, tmp_path / "p3")
    assert export_pairs(run, tmp_path / "p3", outputs=outputs).n_pairs == {"judge_majority": 5}
    # a rerun into the same export folder replaces its pairs
    assert export_pairs(run, out, outputs=outputs).n_pairs == {"judge_majority": 5} and len(_read(out)) == 5


def os_names(folder: Path) -> list[str]:
    return [p.name for p in folder.iterdir()]
