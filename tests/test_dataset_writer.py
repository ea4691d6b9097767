"""echo_dataset writer: routing, rows, the hub folder, offline load_dataset, determinism and the card."""

from __future__ import annotations

import io
from datetime import datetime, timezone
from pathlib import Path

import pytest
import yaml
from PIL import Image

from echo_builder.dataset_rows import route, rows_by_config, sample_to_row
from echo_builder.records import ApplicabilityFlags, BoundingBox, Feedback, MediaRef, Sample
from echo_dataset import CONFIG_NAMES
from echo_dataset.card import card_context_from_report
from echo_dataset.citation import ECHO_BIBTEX
from echo_dataset.errors import RowError
from echo_dataset.features import COLUMN_DOCS, COLUMNS, features_for
from echo_dataset.loading import load_config, read_config
from echo_dataset.pseudonym import pseudonym
from echo_dataset.writer import SHARD_NAME, write_hub_folder

REPORT = {
    "echo_bench_version": "0.1.0",
    "backend": "rules",
    "backend_snapshots": ["rules@0.1.0"],
    "target_model": "GPT Image 1",
    "versions": {"package": "0.1.0", "prompts": {"relevance": "relevance-v3", "extract": "extract-v7"}},
    "stages": [
        {"name": "collect", "in": 2, "out": 1234, "failures": 0},
        {"name": "extract", "in": 321, "out": 7, "failures": 1},
    ],
}


def _png(path: Path, color: tuple[int, int, int], size: tuple[int, int] = (8, 6)) -> MediaRef:
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.new("RGB", size, color).save(path, format="PNG")
    return MediaRef(
        url=f"https://pbs.twimg.com/media/{path.stem}.png", path=str(path.relative_to(path.parents[1]))
    )


def make_samples(media_root: Path) -> list[Sample]:
    """Seven samples covering every route; ``media_root`` gets their images (one output file is missing)."""
    red = _png(media_root / "ab" / "red.png", (255, 0, 0))
    blue = _png(media_root / "cd" / "blue.png", (0, 0, 255), (5, 9))
    green = _png(media_root / "ef" / "green.png", (0, 255, 0))
    gone = MediaRef(url="https://pbs.twimg.com/media/gone.png", path="zz/gone.png")  # file absent
    never = MediaRef(url="https://pbs.twimg.com/media/never.png")  # never downloaded
    when = datetime(2025, 3, 27, 12, 34, 56, tzinfo=timezone.utc)
    return [
        Sample(
            id="t2i-1",
            prompt="a red square, thanks @Alice",
            post_urls=("https://x.com/alice/status/1", "https://x.com/bob/status/2"),
            quality="Benchmark",
            tier="Benchmark",
            community_feedback=(
                Feedback(post_url="https://x.com/bob/status/2", feedback="@alice nailed it"),
            ),
            output_images=(red, gone, never),
            applicability=ApplicabilityFlags(text_rendering=True),
            platform="x",
            created_at=when,
        ),
        Sample(
            id="i2i-1",
            prompt="make it blue",
            quality="Benchmark",
            tier="Benchmark",
            input_images=(green,),
            output_images=(blue,),
            is_screenshot=True,
            input_bboxes=(BoundingBox(x1=1, y1=2, x2=3.5, y2=4),),
            applicability=ApplicabilityFlags(face_identity=False, structure=True, no_color_shift=None),
            platform="reddit",
            created_at=datetime(2025, 4, 1, tzinfo=timezone.utc),
            post_urls=("https://www.reddit.com/r/ChatGPT/comments/abc/x/",),
        ),
        Sample(id="an-1", prompt="what?", quality="Analysis", tier="Manual Review", review="prompt"),
        Sample(id="an-2", prompt="edit this photo", quality="Benchmark", needs_input_images=True),
        Sample(id="t2i-2", prompt="untiered benchmark", quality="Benchmark", output_images=(red,)),
        Sample(id="trash-1", prompt="spam", quality="Trash"),
        Sample(id="discard-1", prompt="x", quality="Benchmark", tier="Discard"),
    ]


@pytest.fixture
def media_root(tmp_path: Path) -> Path:
    return tmp_path / "media"


@pytest.fixture
def hub(tmp_path: Path, media_root: Path) -> Path:
    grouped, dropped = rows_by_config(make_samples(media_root), media_root=media_root)
    context = card_context_from_report(REPORT, dropped=dropped, license="cc-by-4.0")
    return write_hub_folder(grouped, tmp_path / "hub", media_root=media_root, card_context=context)


def test_columns_documented_and_shared():
    assert tuple(COLUMN_DOCS) == COLUMNS
    assert all(features_for(c) == features_for("analysis") for c in CONFIG_NAMES)
    with pytest.raises(RowError, match="unknown config"):
        features_for("train")


def test_route_follows_echo(media_root: Path):
    routes = {s.id: route(s) for s in make_samples(media_root)}
    assert routes == {
        "t2i-1": "text_to_image",
        "i2i-1": "image_to_image",
        "an-1": "analysis",
        "an-2": "analysis",
        "t2i-2": "text_to_image",
        "trash-1": None,
        "discard-1": None,
    }
    rows = {s.id: sample_to_row(s, media_root=media_root) for s in make_samples(media_root)}
    assert rows["an-2"]["review"] == "input image"
    assert rows["an-1"]["review"] == "prompt"
    assert rows["t2i-1"]["output_images"] == ["ab/red.png", "zz/gone.png", None]
    assert rows["t2i-1"]["output_image_urls"][2] == "https://pbs.twimg.com/media/never.png"
    assert rows["t2i-1"]["created_at"] == "2025-03-27T12:34:56Z"
    assert set(rows["i2i-1"]) == set(COLUMNS)


def test_load_dataset_offline_decodes_images_and_keeps_url_twins(hub: Path):
    t2i = load_config(hub, "text_to_image")
    assert t2i.features == features_for("text_to_image")
    assert t2i["id"] == ["t2i-1", "t2i-2"]
    row = t2i[0]
    red = row["output_images"][0]
    assert isinstance(red, Image.Image) and red.size == (8, 6) and red.getpixel((0, 0)) == (255, 0, 0)
    assert row["output_images"][1:] == [None, None]  # file gone, never downloaded
    assert row["output_image_urls"] == [
        "https://pbs.twimg.com/media/red.png",
        "https://pbs.twimg.com/media/gone.png",
        "https://pbs.twimg.com/media/never.png",
    ]
    assert row["media_errors"] == [
        "https://pbs.twimg.com/media/gone.png: not found under the media root (zz/gone.png)"
    ]
    assert row["text_rendering"] is True and row["face_identity"] is None and row["has_nsfw"] is None
    assert row["created_at"] == "2025-03-27T12:34:56Z"
    # pseudonymized by default, the same handle gets the same pseudonym everywhere
    alice = pseudonym("alice")
    assert row["prompt"] == f"a red square, thanks @{alice}"
    assert row["source_post_urls"][0] == f"https://x.com/{alice}/status/1"
    assert row["community_feedback"] == [
        {"post_url": f"https://x.com/{pseudonym('bob')}/status/2", "feedback": f"@{alice} nailed it"}
    ]

    i2i = load_config(hub, "image_to_image")[0]
    assert i2i["input_images"][0].getpixel((0, 0)) == (0, 255, 0)
    assert i2i["output_images"][0].size == (5, 9)
    assert i2i["input_bboxes"] == [{"x1": 1.0, "y1": 2.0, "x2": 3.5, "y2": 4.0, "role": "input"}]
    assert (i2i["face_identity"], i2i["structure"], i2i["no_color_shift"]) == (False, True, None)
    assert i2i["is_screenshot"] is True

    analysis = load_config(hub, "analysis")
    assert analysis["id"] == ["an-1", "an-2"] and analysis["review"] == ["prompt", "input image"]


def test_datasets_load_dataset_directly(hub: Path):
    import datasets

    ds = datasets.load_dataset(str(hub), "text_to_image")["test"]
    assert ds.num_rows == 2 and isinstance(ds[1]["output_images"][0], Image.Image)


def test_read_config_reads_the_writer_output(hub: Path):
    rows = read_config(hub, "image_to_image")
    assert [r["id"] for r in rows] == ["i2i-1"]
    image = rows[0]["input_images"][0]
    assert set(image) == {"bytes", "path"} and image["path"] == "green.png"
    assert Image.open(io.BytesIO(image["bytes"])).getpixel((0, 0)) == (0, 255, 0)


def test_rewrite_is_byte_identical(tmp_path: Path, media_root: Path, hub: Path):
    samples = make_samples(media_root)
    grouped, dropped = rows_by_config(reversed(samples), media_root=media_root)  # order does not matter
    context = card_context_from_report(REPORT, dropped=dropped, license="cc-by-4.0")
    again = write_hub_folder(grouped, tmp_path / "again", media_root=media_root, card_context=context)
    for name in [f"{c}/{SHARD_NAME}" for c in CONFIG_NAMES] + ["README.md"]:
        assert (hub / name).read_bytes() == (again / name).read_bytes(), name


def test_readme_front_matter_and_card_statistics(hub: Path):
    text = (hub / "README.md").read_text(encoding="utf-8")
    assert text.startswith("---\n")
    meta = yaml.safe_load(text.split("---\n")[1])
    assert meta["license"] == "cc-by-4.0"
    assert set(meta["task_categories"]) == {"text-to-image", "image-to-image"}
    assert meta["pretty_name"]
    assert meta["configs"] == [
        {"config_name": c, "data_files": [{"split": "test", "path": f"{c}/test-*.parquet"}]}
        for c in CONFIG_NAMES
    ]
    for expected in (
        "GPT Image 1",
        "| collect | 2 | 1234 | 0 |",
        "| extract | 321 | 7 | 1 |",
        "| text_to_image | 2 |",
        "| image_to_image | 1 |",
        "| analysis | 2 |",
        "| dropped (Trash / Discard) | 2 |",
        "2025-03-27T12:34:56Z to 2025-04-01T00:00:00Z",
        "`rules@0.1.0`",
        "extract `extract-v7`",
        "relevance `relevance-v3`",
        "echo-bench version: 0.1.0",
        "`rules` baseline",
        "`created_at`",
        "pseudonyms",
    ):
        assert expected in text, expected
    assert "$" not in text  # every placeholder was filled
    # the card cites the paper with the package's one BibTeX copy (the metric cards use the same)
    assert text.split("```bibtex\n")[1].split("```")[0] == ECHO_BIBTEX


def test_llm_backend_card_has_no_baseline_note(tmp_path: Path):
    context = card_context_from_report(
        {**REPORT, "backend": "openai:gpt-4o", "backend_snapshots": ["gpt-4o-2024"]}
    )
    folder = write_hub_folder({}, tmp_path / "hub", card_context=context)
    text = (folder / "README.md").read_text(encoding="utf-8")
    assert "baseline" not in text and "`openai:gpt-4o`" in text and "`gpt-4o-2024`" in text
    assert "| text_to_image | 0 |" in text
    assert load_config(folder, "analysis").num_rows == 0


def test_url_only_folder_without_media_root(tmp_path: Path, media_root: Path):
    grouped, _ = rows_by_config(make_samples(media_root))
    folder = write_hub_folder(grouped, tmp_path / "hub", card_context={}, pseudonymize=False)
    row = load_config(folder, "text_to_image")[0]
    assert row["output_images"] == [None, None, None] and len(row["output_image_urls"]) == 3
    assert row["media_errors"] == [] and "@Alice" in row["prompt"]


def test_bad_rows_are_refused(tmp_path: Path):
    row = {"id": "a", "prompt": "p"}
    with pytest.raises(RowError, match="unknown configs"):
        write_hub_folder({"train": [row]}, tmp_path / "x", card_context={})
    with pytest.raises(RowError, match="unknown columns"):
        write_hub_folder({"analysis": [{**row, "author": "me"}]}, tmp_path / "x", card_context={})
    with pytest.raises(RowError, match="duplicate ids"):
        write_hub_folder({"analysis": [row, row]}, tmp_path / "x", card_context={})
    with pytest.raises(RowError, match="position by position"):
        write_hub_folder(
            {"analysis": [{**row, "output_images": ["a.png"], "output_image_urls": []}]},
            tmp_path / "x",
            card_context={},
        )
    assert not (tmp_path / "x").exists()  # nothing written when a row is refused


def test_a_missing_benchmark_path_is_a_clear_error_without_the_hub(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    import time

    from click.testing import CliRunner

    from echo_builder.cli import cli
    from echo_dataset.loading import BenchmarkNotFoundError

    monkeypatch.chdir(tmp_path)
    (tmp_path / "builds" / "lumen").mkdir(parents=True)
    started = time.perf_counter()
    # a typo of a local folder: never tried as a Hub id
    with pytest.raises(
        BenchmarkNotFoundError, match=r"'builds/lumne' does not exist \(folder 'builds' has: lumen\)"
    ):
        read_config("builds/lumne", "image_to_image")
    # an owner/name id while Hugging Face is offline (the test session is): said at once
    with pytest.raises(BenchmarkNotFoundError, match="HF_HUB_OFFLINE"):
        read_config("someone/echo-bench-data", "image_to_image")
    result = CliRunner().invoke(
        cli,
        [
            "metrics",
            "--benchmark",
            "nosuch/bench",
            "--config",
            "image_to_image",
            "--outputs",
            ".",
            "--out",
            "m",
        ],
    )
    assert time.perf_counter() - started < 10  # no Hub client retries
    assert result.exit_code == 1 and result.output.count("\n") == 1, result.output
    assert result.output.startswith("error: benchmark 'nosuch/bench' is not a local folder")
