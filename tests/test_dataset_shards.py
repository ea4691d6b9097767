"""Big configs: Parquet shards of bounded size per config, read in order and without holding the config in memory."""

from __future__ import annotations

import tracemalloc
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
import yaml
from click.testing import CliRunner
from PIL import Image

from echo_builder.cli import cli
from echo_builder.dataset_rows import rows_by_config
from echo_builder.records import MediaRef, Sample
from echo_dataset import CONFIG_NAMES
from echo_dataset.loading import iter_config, load_config, read_config
from echo_dataset.writer import DEFAULT_MAX_SHARD_BYTES, SHARD_NAME, shard_name, shard_rows, write_hub_folder

CONTEXT = {"target_model": "Model X"}


def _noise_jpeg(path: Path, seed: int, side: int = 64) -> MediaRef:
    """A JPEG of random pixels (incompressible, so its size is what the shard estimate sees)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    pixels = np.random.default_rng(seed).integers(0, 256, (side, side, 3), dtype=np.uint8)
    Image.fromarray(pixels).save(path, format="JPEG", quality=95)
    return MediaRef(
        url=f"https://pbs.twimg.com/media/{path.stem}.jpg", path=str(path.relative_to(path.parents[1]))
    )


def _samples(media: Path, n: int, side: int = 64) -> list[Sample]:
    when = datetime(2025, 3, 27, tzinfo=timezone.utc)
    return [
        Sample(
            id=f"i2i-{k:04d}",
            prompt=f"make picture {k} brighter",
            quality="Benchmark",
            tier="Benchmark",
            input_images=(_noise_jpeg(media / "in" / f"in{k}.jpg", 2 * k, side),),
            output_images=(_noise_jpeg(media / "out" / f"out{k}.jpg", 2 * k + 1, side),),
            platform="x",
            created_at=when,
        )
        for k in range(n)
    ]


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict, int]:
    """40 image-to-image rows of two ~9 KB noise JPEGs each; returns (media root, rows by config, bytes per row)."""
    media = tmp_path_factory.mktemp("media")
    grouped, _ = rows_by_config(_samples(media, 40), media_root=media)
    per_row = sum(
        (media / p).stat().st_size
        for row in grouped["image_to_image"]
        for p in row["input_images"] + row["output_images"]
    ) // len(grouped["image_to_image"])
    return media, grouped, per_row


def _write(folder: Path, built: tuple[Path, dict, int], max_bytes: int) -> Path:
    media, grouped, _ = built
    return write_hub_folder(
        grouped, folder, media_root=media, card_context=CONTEXT, max_shard_bytes=max_bytes
    )


def _shards(folder: Path, config: str = "image_to_image") -> list[str]:
    return sorted(p.name for p in (folder / config).glob("test-*.parquet"))


def test_shard_names_follow_the_hubs_convention():
    assert shard_name(0, 1) == SHARD_NAME == "test-00000-of-00001.parquet"
    assert shard_name(2, 5) == "test-00002-of-00005.parquet"
    assert DEFAULT_MAX_SHARD_BYTES == 500_000_000


def test_shard_rows_cuts_contiguously_within_the_limit():
    rows = [{"id": f"r{k}", "prompt": "x" * size} for k, size in enumerate([40, 40, 40, 150, 10, 10, 10])]
    shards = shard_rows(rows, 100)
    # ids in order, every row once; cuts where the next row would pass 100 bytes (id + prompt text)
    assert [[r["id"] for r in s] for s in shards] == [["r0", "r1"], ["r2"], ["r3"], ["r4", "r5", "r6"]]
    assert shard_rows(rows, 10**9) == [rows]
    assert shard_rows([], 100) == [[]]  # an empty config still has its one file
    for bad in (0, -1, 1.5, True, "100"):
        with pytest.raises(ValueError, match="max_shard_bytes"):
            shard_rows(rows, bad)  # type: ignore[arg-type]


def test_a_big_config_is_written_as_bounded_shards_and_reads_back_in_order(tmp_path: Path, built):
    _, grouped, per_row = built
    single = _write(tmp_path / "single", built, DEFAULT_MAX_SHARD_BYTES)
    assert _shards(single) == [SHARD_NAME]
    limit = 6 * per_row  # about six rows per shard
    sharded = _write(tmp_path / "sharded", built, limit)
    names = _shards(sharded)
    count = len(names)
    assert 6 <= count <= 9
    assert names == [shard_name(i, count) for i in range(count)]
    sizes = [(sharded / "image_to_image" / n).stat().st_size for n in names]
    assert max(sizes) < 1.5 * limit  # the estimate (image bytes + text) bounds the real file
    # every row once, in id order, equal to the single-file write
    ids = sorted(r["id"] for r in grouped["image_to_image"])
    one = read_config(single, "image_to_image")
    many = read_config(sharded, "image_to_image")
    assert [r["id"] for r in many] == ids
    assert many == one
    assert [r["id"] for r in iter_config(sharded, "image_to_image", columns=("id", "prompt"))] == ids
    assert set(next(iter_config(sharded, "image_to_image", columns=("id", "nope")))) == {"id"}
    # the card declares the config by glob and its size as the sum of the shards
    meta = yaml.safe_load((sharded / "README.md").read_text().split("---")[1])
    info = {i["config_name"]: i for i in meta["dataset_info"]}["image_to_image"]
    assert info["splits"][0]["num_examples"] == len(ids)
    assert info["dataset_size"] == sum(sizes)
    # datasets reads the shards through the card's glob, offline, with images intact
    import datasets

    ds = datasets.load_dataset(str(sharded), "image_to_image", split="test", cache_dir=str(tmp_path / "hf"))
    assert ds["id"] == ids
    assert ds[7]["output_images"][0].size == (64, 64)
    assert load_config(sharded, "image_to_image", cache_dir=str(tmp_path / "hf2"))["id"] == ids


def test_rewriting_with_fewer_shards_removes_the_stale_ones(tmp_path: Path, built):
    _, _, per_row = built
    folder = _write(tmp_path / "out", built, 6 * per_row)
    assert len(_shards(folder)) > 1
    _write(folder, built, DEFAULT_MAX_SHARD_BYTES)
    assert _shards(folder) == [SHARD_NAME]
    assert len(read_config(folder, "image_to_image")) == 40


def test_iter_config_holds_one_batch_not_the_config(tmp_path: Path):
    media = tmp_path / "media"
    grouped, _ = rows_by_config(_samples(media, 60, side=160), media_root=media)
    folder = write_hub_folder(grouped, tmp_path / "out", media_root=media, card_context=CONTEXT)
    total = pq.ParquetFile(folder / "image_to_image" / SHARD_NAME).metadata.serialized_size + sum(
        f.stat().st_size for f in media.rglob("*.jpg")
    )

    def peak(read) -> int:
        tracemalloc.start()
        try:
            read()
            return tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()

    whole = peak(lambda: read_config(folder, "image_to_image"))
    streamed = peak(lambda: [r["id"] for r in iter_config(folder, "image_to_image", batch_size=4)])
    assert whole > 0.8 * total  # read_config holds every image's bytes at once
    assert streamed < 0.2 * total  # iter_config holds a batch of four rows


def test_build_max_shard_size_option(tmp_path: Path):
    runner = CliRunner()
    bad = runner.invoke(
        cli, ["build", str(tmp_path), "--out", str(tmp_path / "o"), "--max-shard-size", "lots"]
    )
    assert bad.exit_code != 0
    assert "--max-shard-size: 'lots' is not accepted" in bad.output
    assert not (tmp_path / "o").exists()
    # the demo's exports (rules backend, offline): the same rows whether one file or shards of about 1 KB
    exports = str(Path(__file__).parents[1] / "echo_builder" / "examples" / "demo" / "exports")
    outs = {}
    for name, size in (("one", "500MB"), ("many", "1KB")):
        out = tmp_path / name
        result = runner.invoke(
            cli, ["build", exports, "--out", str(out), "--offline", "--max-shard-size", size]
        )
        assert result.exit_code == 0, result.output
        outs[name] = out
    assert _shards(outs["one"], "analysis") == [SHARD_NAME]
    assert len(_shards(outs["many"], "analysis")) > 1
    counts = {}
    for config in CONFIG_NAMES:
        one = [r["id"] for r in iter_config(outs["one"], config, columns=("id",))]
        assert one == [r["id"] for r in iter_config(outs["many"], config, columns=("id",))]
        counts[config] = len(one)
    assert counts["analysis"] > 1  # offline: no media, so the demo's samples are analysis rows
