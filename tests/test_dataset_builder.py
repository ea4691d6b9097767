"""echo_dataset.builder.EchoBench reads a build folder and gives the same rows as the writer."""

from __future__ import annotations

from pathlib import Path

import datasets
import pytest

from echo_builder.dataset_rows import rows_by_config
from echo_dataset import CONFIG_NAMES
from echo_dataset.builder import EchoBench, latest_sample_stage
from echo_dataset.errors import InvalidHubFolderError
from echo_dataset.features import IMAGE_COLUMNS, features_for
from echo_dataset.loading import load_config
from echo_dataset.writer import write_hub_folder
from tests.test_dataset_writer import make_samples


def _raw(ds: datasets.Dataset) -> list[dict]:
    for column in IMAGE_COLUMNS:
        ds = ds.cast_column(column, datasets.List(datasets.Image(decode=False)))
    return ds.to_list()


@pytest.fixture
def build_dir(tmp_path: Path) -> Path:
    build = tmp_path / "build"
    samples = make_samples(build / "media")
    (build / "stages").mkdir(parents=True)
    (build / "stages" / "extract.jsonl").write_text(
        "".join(s.model_dump_json() + "\n" for s in samples), encoding="utf-8"
    )
    return build


@pytest.mark.parametrize("config", CONFIG_NAMES)
def test_builder_matches_writer(tmp_path: Path, build_dir: Path, config: str):
    grouped, _ = rows_by_config(make_samples(build_dir / "media"))
    hub = write_hub_folder(grouped, tmp_path / "hub", media_root=build_dir / "media", card_context={})
    written = load_config(hub, config)

    builder = EchoBench(config_name=config, data_dir=str(build_dir), cache_dir=str(tmp_path / "cache"))
    builder.download_and_prepare(output_dir=str(tmp_path / "prepared"))
    built = builder.as_dataset("test")

    assert built.features == features_for(config) == written.features
    assert built.num_rows == written.num_rows > 0
    assert _raw(built) == _raw(written)


def test_builder_prefers_the_latest_sample_stage(build_dir: Path):
    assert latest_sample_stage(build_dir).name == "extract.jsonl"
    (build_dir / "stages" / "tier.jsonl").write_text("", encoding="utf-8")
    assert latest_sample_stage(build_dir).name == "tier.jsonl"


def test_builder_without_stages_says_what_to_do(tmp_path: Path):
    with pytest.raises(InvalidHubFolderError, match="echo-bench build"):
        latest_sample_stage(tmp_path)
    builder = EchoBench(config_name="analysis", cache_dir=str(tmp_path / "cache"))
    with pytest.raises(InvalidHubFolderError, match="data_dir"):
        builder.download_and_prepare(output_dir=str(tmp_path / "prepared"))
