"""The Space's data layer without a server: the Hub-dataset paths (the Hub mocked at its boundary, served from
the demo folder), and clear errors for sources that are not what they claim to be."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest
from PIL import Image

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

HUB_ID = "echo-org/echo-demo"


@pytest.fixture
def hub(monkeypatch, demo_dir, echo_space):
    """``datasets`` and ``huggingface_hub`` answer for :data:`HUB_ID` from the demo's hub-shaped folder."""
    import datasets
    import huggingface_hub

    folder = demo_dir / "benchmark"
    real_load = datasets.load_dataset

    def load_dataset(path, name=None, **kwargs):
        if path != HUB_ID:
            return real_load(path, name, **kwargs)
        files = sorted(str(f) for f in (folder / name).glob("test-*.parquet"))
        return real_load("parquet", data_files={"test": files}, **kwargs)

    def config_names(path, **kwargs):
        assert path == HUB_ID
        return sorted(p.parent.name for p in folder.glob("*/test-*.parquet"))

    def hf_hub_download(repo_id, filename, **kwargs):
        assert (repo_id, filename, kwargs.get("repo_type")) == (HUB_ID, "README.md", "dataset")
        return str(folder / filename)

    monkeypatch.setattr(datasets, "load_dataset", load_dataset)
    monkeypatch.setattr(datasets, "get_dataset_config_names", config_names)
    monkeypatch.setattr(huggingface_hub, "hf_hub_download", hf_hub_download)
    return folder


def test_a_hub_dataset_shows_the_same_samples_as_its_folder(hub):
    from echo_space.benchmark import Benchmark, listing

    remote, local = Benchmark(HUB_ID), Benchmark(hub)
    assert not remote.is_local and local.is_local
    assert remote.configs() == local.configs() == ["image_to_image", "text_to_image", "analysis"]
    for config in remote.configs():
        pd.testing.assert_frame_equal(listing(remote.samples(config)), listing(local.samples(config)))
    sample_id = local.samples("image_to_image")["id"].iloc[1]
    a, b = remote.view("image_to_image", sample_id), local.view("image_to_image", sample_id)
    assert (a.prompt, a.details, a.links) == (b.prompt, b.details, b.links)
    pd.testing.assert_frame_equal(a.feedback, b.feedback)
    pd.testing.assert_frame_equal(a.flags, b.flags)
    for x, y in zip(a.input_images + a.output_images, b.input_images + b.output_images, strict=True):
        assert x[1] == y[1] and np.array_equal(np.asarray(x[0]), np.asarray(y[0]))
    assert remote.card() == (hub / "README.md").read_text(encoding="utf-8")


def test_benchmark_errors_name_what_is_wrong(tmp_path, echo_space):
    from echo_space.benchmark import Benchmark, filter_samples

    from echo_dataset.loading import BenchmarkNotFoundError

    with pytest.raises(BenchmarkNotFoundError, match="does not exist"):
        Benchmark(tmp_path / "absent")
    (tmp_path / "empty").mkdir()
    with pytest.raises(BenchmarkNotFoundError, match="no config in"):
        Benchmark(tmp_path / "empty")
    with pytest.raises(ValueError, match="unknown applicability flag"):
        filter_samples(pd.DataFrame({"id": [], "prompt": []}), "", ["faces"])


def test_large_images_are_downscaled_for_display(tmp_path, echo_space):
    from echo_space.benchmark import MAX_DISPLAY_SIDE, Benchmark

    from tests.helpers.benchmark import make_benchmark

    big = Image.new("RGB", (3000, 1500), (10, 200, 30))
    make_benchmark(tmp_path, "image_to_image", [{"id": "s1", "prompt": "p", "inputs": [big]}])
    view = Benchmark(tmp_path).view("image_to_image", "s1")
    (image, caption), *_ = view.input_images
    assert image.size == (MAX_DISPLAY_SIDE, MAX_DISPLAY_SIDE // 2) and caption == "input 1"
    assert image.getpixel((5, 5)) == (10, 200, 30)
    # a minimal folder (no URL twins, no flags): unknown flags, no links, nothing invented
    assert list(view.flags["applies"]) == ["unknown"] * 4 and "(none recorded)" in view.links


def test_run_sources_that_are_not_runs(tmp_path, echo_space):
    from echo_space.leaderboard import RunSource

    from echo_builder.errors import ConfigError

    with pytest.raises(ConfigError, match="could not be loaded as a dataset of verdicts"):
        RunSource(tmp_path / "nothing-here", work_dir=tmp_path / "w").run_dir()
    pd.DataFrame({"a": [1]}).to_parquet(tmp_path / "other.parquet")
    with pytest.raises(ConfigError, match=r"columns \['sample_id', 'judge'\] are missing"):
        RunSource(tmp_path / "other.parquet", work_dir=tmp_path / "w").run_dir()
    with pytest.raises(ConfigError, match="missing must be"):
        RunSource(tmp_path, work_dir=tmp_path / "w").view("drop")  # type: ignore[arg-type]


def test_the_card_is_shown_without_front_matter_or_its_own_citation(echo_space):
    from echo_space.about import about_markdown, card_body

    card = "---\nlicense: x\nconfigs: []\n---\n# Title\n\ntext\n\n## Citation\n\n```bibtex\n@a{b}\n```\n\n## After\nmore\n"
    assert card_body(card).startswith("# Title") and card_body(None) == "" and card_body("plain") == "plain"
    intro, details = about_markdown(card, "org/x")
    assert "### Title" in details and "@a{b}" not in details and "#### After\nmore" in details
    assert "@inproceedings{echo2026" in details and intro.startswith("## What ECHO is")
    _, missing = about_markdown(None, "org/x")
    assert "`org/x` has no dataset card" in missing


@pytest.mark.slow
def test_playground_structure_distance_with_weights(demo_dir, tmp_path, echo_space):
    """With DINO weights (seeded random ones here: the real checkpoint cannot be downloaded in tests) the
    playground reports the package's structure distance for the pair, in [0, 4], lower is better."""
    pytest.importorskip("timm")
    from echo_space.playground import score_pair

    from echo_builder.scoring.structure import structure_distance

    source = demo_dir / "outputs" / "nova-edit"
    inputs = sorted(source.glob("*.png"))
    a, b = inputs[0], demo_dir / "outputs" / "lumen-2" / inputs[0].name
    result = score_pair(a, b, dino_weights="random:0", face_backend=None)
    row = result.table.set_index("metric").loc["structure_distance"]
    expected = structure_distance([[a]], [b], weights="random:0").values[0]
    assert row["value"] == pytest.approx(expected, abs=1e-6) and 0 < expected <= 4
    assert row["better"] == "lower" and row["range"] == "[0, 4]" and row["note"] == ""
    same = score_pair(a, a, dino_weights="random:0", face_backend=None).table.set_index("metric")
    assert same.loc["structure_distance", "value"] == pytest.approx(0.0, abs=1e-9)
    assert same.loc["color_shift", "value"] == 0.0


def test_long_configs_are_listed_up_to_a_limit(demo_dir, echo_space):
    """The table lists at most ``max_listed`` rows (ECHO's analysis config has ~29k); the count tells the rest."""
    rows = pq.read_table(
        demo_dir / "benchmark" / "image_to_image" / "test-00000-of-00001.parquet"
    ).to_pylist()
    space = echo_space.EchoSpace(echo_space.SpaceSettings(str(demo_dir / "benchmark")), max_listed=2)
    count, table, dropdown = space.filter_samples("image_to_image")
    assert list(table["id"]) == [r["id"] for r in rows[:2]]
    assert [value for _, value in dropdown.choices] == list(table["id"])
    assert (
        count
        == f"**{len(rows)}** of {len(rows)} samples in `image_to_image`; the first 2 are listed (search to narrow)"
    )
