"""The Space blurs the images of samples flagged NSFW (``has_nsfw`` true) by default: a demo build screened by a
scripted checker that flags the poster, shown through ``Benchmark.view`` and through the ``/show_sample`` API
(``gradio_client`` on 127.0.0.1), with and without "Show flagged images"."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow.parquet as pq
import pytest
from PIL import Image

from echo_builder.imaging import load_rgb
from echo_builder.pipeline import build
from tests.space.conftest import free_port
from tests.test_safety_stage import POSTER_SHA, Scripted, _demo_config

pytestmark = [
    pytest.mark.filterwarnings("ignore:'future.no_silent_downcasting' is deprecated"),
    pytest.mark.filterwarnings("ignore:The copy keyword is deprecated"),
]


@pytest.fixture(scope="module")
def flagged(tmp_path_factory) -> tuple[Path, str, str, str]:
    """(build folder, config, flagged sample id, a sample id not flagged) of the demo build whose poster a
    scripted checker flags; model outputs for both samples in ``<build>/outputs/m/``."""
    out = tmp_path_factory.mktemp("space-nsfw") / "build"
    result = build(_demo_config(out, nsfw_check=Scripted({POSTER_SHA: 0.95})))
    hit = next(s for s in result.samples if s.has_nsfw)
    config = next(
        c for c in ("text_to_image", "image_to_image") if (out / c).is_dir() and hit.id in _ids(out, c)
    )
    safe = next(i for i in _ids(out, config) if i != hit.id)
    models = out / "outputs" / "m"
    models.mkdir(parents=True)
    for sample_id, color in ((hit.id, (250, 120, 10)), (safe, (10, 120, 250))):
        image = Image.new("RGB", (64, 48), color)
        image.paste((0, 0, 0), (20, 10, 40, 30))  # an edge for the blur to soften
        image.save(models / f"{sample_id}.png")
    return out, config, hit.id, safe


def _ids(out: Path, config: str) -> list[str]:
    return [
        r["id"] for f in sorted((out / config).glob("test-*.parquet")) for r in pq.read_table(f).to_pylist()
    ]


def _row(out: Path, config: str, sample_id: str) -> dict[str, Any]:
    rows = [r for f in sorted((out / config).glob("test-*.parquet")) for r in pq.read_table(f).to_pylist()]
    return next(r for r in rows if r["id"] == sample_id)


def _pixels(image: Any) -> np.ndarray:
    return np.asarray(load_rgb(image))


def test_blur_is_strong_and_keeps_the_size(echo_space):
    from echo_space.benchmark import BLUR_FRACTION, blur_flagged

    image = Image.new("RGB", (200, 100), (255, 255, 255))
    image.paste((0, 0, 0), (0, 0, 100, 100))  # a hard black/white edge at x = 100
    blurred = blur_flagged(image)
    assert blurred.size == (200, 100) and blurred.mode == "RGB" and BLUR_FRACTION == 0.08
    row = np.asarray(blurred)[50, :, 0].astype(int)
    assert row[0] < 10 and row[-1] > 245  # far from the edge, the colors stay
    # the edge is spread over the 16 px radius: a gradient where the original jumps from 0 to 255
    assert 40 < row[95] < 128 < row[104] < 215


def test_a_flagged_sample_is_blurred_unless_asked(flagged, echo_space):
    from echo_space.benchmark import Benchmark, blur_flagged

    out, config, hit, safe = flagged
    bench = Benchmark(out, outputs=out / "outputs")
    row = _row(out, config, hit)
    assert row["has_nsfw"] is True and _row(out, config, safe)["has_nsfw"] is False
    stored = [e for e in row["output_images"] if e and e.get("bytes")]
    assert stored and hashlib.sha256(stored[0]["bytes"]).hexdigest() == POSTER_SHA

    view = bench.view(config, hit)
    assert view.flagged and view.blurred and "flagged NSFW" in view.details
    (image, caption), *_ = view.output_images
    assert caption == "community output 1 (flagged NSFW, blurred)"
    original = _pixels(stored[0]["bytes"])
    assert np.array_equal(np.asarray(image), np.asarray(blur_flagged(load_rgb(stored[0]["bytes"]))))
    assert not np.array_equal(np.asarray(image), original)
    (model_image, model_caption), *_ = view.model_outputs
    assert model_caption == "m (flagged NSFW, blurred)"
    assert np.array_equal(
        np.asarray(model_image), np.asarray(blur_flagged(load_rgb(out / "outputs" / "m" / f"{hit}.png")))
    )

    shown = bench.view(config, hit, show_flagged=True)
    assert shown.flagged and not shown.blurred and "flagged NSFW" in shown.details
    assert shown.output_images[0][1] == "community output 1"
    assert np.array_equal(np.asarray(shown.output_images[0][0]), original)
    assert shown.model_outputs == [(str(out / "outputs" / "m" / f"{hit}.png"), "m")]

    clean = bench.view(config, safe)  # has_nsfw false: shown as it is
    assert not clean.flagged and not clean.blurred and "flagged NSFW" not in clean.details
    assert all("blurred" not in caption for _, caption in [*clean.input_images, *clean.output_images])


@pytest.mark.slow
def test_show_sample_api_blurs_by_default(flagged, echo_space, tmp_path):
    from echo_space import SpaceSettings, build_demo, launch
    from echo_space.benchmark import blur_flagged
    from gradio_client import Client

    out, config, hit, _ = flagged
    stored = next(e for e in _row(out, config, hit)["output_images"] if e and e.get("bytes"))
    with pytest.MonkeyPatch.context() as env:
        env.setenv("GRADIO_TEMP_DIR", str(tmp_path / "gradio-cache"))
        demo = build_demo(SpaceSettings(benchmark=str(out), outputs=str(out / "outputs")))
        launch(demo, port=free_port(), block=False, quiet=True)
        try:
            client = Client(demo.local_url, verbose=False, download_files=str(tmp_path / "files"))
            # the third input is optional: callers that predate it get the blurred view
            _, details, _, community, models, *_ = client.predict(config, hit, api_name="/show_sample")
            assert "flagged NSFW" in details
            assert community[0]["caption"] == "community output 1 (flagged NSFW, blurred)"
            blurred = np.asarray(blur_flagged(load_rgb(stored["bytes"])))
            assert np.array_equal(_pixels(community[0]["image"]), blurred)
            assert models[0]["caption"] == "m (flagged NSFW, blurred)"

            _, _, _, community, models, *_ = client.predict(config, hit, True, api_name="/show_sample")
            assert community[0]["caption"] == "community output 1"
            assert np.array_equal(_pixels(community[0]["image"]), _pixels(stored["bytes"]))
            assert models[0]["caption"] == "m"
        finally:
            demo.close()
