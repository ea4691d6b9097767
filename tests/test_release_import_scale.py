"""``echo-bench import echo2025`` is linear in the number of image tokens of a row (issue 29).

A row with 100,000 image tokens did not finish in 240 s (5,000 took 201 s): two steps were quadratic. The local
copy of each token was looked up by a glob of the row's whole image folder (tokens x files), and the reason of
each missing image by a scan of the row's whole ``media_errors`` (missing images x errors); the embedded images of
the ``-mit`` variant also filtered the row's errors once per image. Each is now one pass per row.

What a row of 100,000 tokens gives (documented in RELIABILITY.md): every token is kept as one image reference; the
tokens with a local copy resolve, every other one is one ``media_errors`` entry of its row (the column's contract:
one entry per image that could not be found) and one count in ``import.json``, whose ``missing`` list names the
first 200.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner
from PIL import Image

from echo_builder.cli import cli
from echo_dataset.release import MEDIA_URL_TEMPLATE
from tests.helpers.release import make_release

BIG = "BigRowZZZZZZZZZZZZZZZZ"  # 22 characters, as the release's ids


def _big_release(tmp: Path, n_tokens: int, present: int) -> dict[str, Path]:
    """The fixture release, with a text_to_image row of ``n_tokens`` output tokens in the release's schema and
    local copies of its first ``present`` outputs in the download script's layout."""
    import datasets

    paths = make_release(tmp)
    strings = datasets.Sequence(datasets.Value("string"))
    features = datasets.Features(
        {
            "id": datasets.Value("string"),
            "prompt": datasets.Value("string"),
            "prompt_modified": datasets.Value("bool"),
            "prompt_fill_blank": datasets.Value("bool"),
            "input_images": strings,
            "output_images": strings,
            "community_feedback": datasets.Value("string"),
            "has_nsfw": datasets.Value("bool"),
        }
    )
    data = {
        "id": [BIG],
        "prompt": ["a poster wall"],
        "prompt_modified": [False],
        "prompt_fill_blank": [False],
        "input_images": [[]],
        "output_images": [[f"GnTok{k:07d}" for k in range(1, n_tokens + 1)]],
        "community_feedback": [""],
        "has_nsfw": [False],
    }
    target = paths["release"] / "text_to_image" / "test-00000-of-00001.parquet"
    datasets.Dataset.from_dict(data, features=features).to_parquet(str(target))
    folder = paths["images"] / "data" / "text_to_image" / BIG / "output_images"
    folder.mkdir(parents=True)
    for k in range(1, present + 1):
        Image.new("RGB", (8, 8), (10 * k, 20, 30)).save(folder / f"output_{k}.png")
    return paths


@pytest.mark.timeout(120)
def test_a_row_of_100000_image_tokens_imports_in_linear_work(tmp_path, monkeypatch):
    import echo_builder.release as release

    listed: list[str] = []
    scandir = os.scandir

    def counting_scandir(path):  # the image folders import lists: once per sample and kind, never per token
        listed.append(str(path))
        return scandir(path)

    monkeypatch.setattr(release.os, "scandir", counting_scandir)
    paths = _big_release(tmp_path, 100_000, present=3)
    out = tmp_path / "bench"
    args = ["import", "echo2025", str(paths["release"]), "--out", str(out), "--images", str(paths["images"])]
    result = CliRunner().invoke(cli, [*args, "--offline"])
    assert result.exit_code == 0, result.output
    assert listed.count(str(paths["images"] / "data" / "text_to_image" / BIG / "output_images")) == 1
    record = json.loads((out / "import.json").read_text())
    assert record["images"]["text_to_image"] == {"resolved": 3, "missing": 99_997}
    assert len(record["missing"]) == 200  # the list is capped; the count is whole
    (row,) = [r for r in pq.read_table(out / "text_to_image").to_pylist() if r["id"] == BIG]
    assert len(row["output_images"]) == 100_000
    assert [bool(image and image["bytes"]) for image in row["output_images"][:4]] == [True, True, True, False]
    # every unresolved token is named once, in token order, with the reason
    assert len(row["media_errors"]) == 99_997
    assert row["media_errors"][0] == (
        f"{MEDIA_URL_TEMPLATE.format(media_id='GnTok0000004')}: offline and not in the media store"
    )
    assert row["media_errors"][-1].startswith(MEDIA_URL_TEMPLATE.format(media_id="GnTok0100000"))
    assert f"text_to_image/{BIG}: {row['media_errors'][0]}" in record["missing"]


def test_the_local_copy_lookup_matches_the_download_scripts_names_exactly(tmp_path):
    """The one listing per folder finds what the old per-token glob ``<kind>_<k>.*`` found: the first name in
    order, plain decimal k (not ``01``), a link to a file, the first image folder that has the image."""
    from echo_builder.release import _local_images

    root = tmp_path / "data"
    first = root / "images_to_image" / BIG / "output_images"
    later = root / "text_to_image" / BIG / "output_images"
    for folder in (first, later):
        folder.mkdir(parents=True)
    for name in (
        "output_1.png",
        "output_1.jpg",
        "output_01.png",
        "output_2",
        "output_3.x.png",
        "output_.png",
    ):
        (first / name).write_bytes(b"x")
    (first / "output_6.png").symlink_to(first / "output_1.png")
    (first / "output_7.png").mkdir()
    (first / "output_8.png").symlink_to(first / "nowhere.png")
    (later / "output_1.gif").write_bytes(b"x")
    (later / "output_2.png").write_bytes(b"x")
    found = _local_images(root, BIG, "output")
    assert found == {
        1: f"images_to_image/{BIG}/output_images/output_1.jpg",
        2: f"text_to_image/{BIG}/output_images/output_2.png",
        3: f"images_to_image/{BIG}/output_images/output_3.x.png",
        6: f"images_to_image/{BIG}/output_images/output_6.png",
    }
    assert _local_images(root, "../escape", "output") == {} and _local_images(None, BIG, "output") == {}
