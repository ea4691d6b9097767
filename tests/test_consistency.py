"""Same metric, same number, everywhere (issue 14, Acceptance).

Every metric is computed on the same inputs through its four entry points, and the values and NaN reasons must
agree:

1. the scoring function (``echo_builder.scoring``) on the image files;
2. the ``evaluate`` module (``metrics/<name>``) on rows from ``datasets.load_dataset`` of a built benchmark folder
   (inputs decoded by ``datasets`` from JPEG and palette PNGs, outputs handed over as PIL images);
3. the ``echo-bench metrics`` CLI;
4. the Space's playground function (``spaces_app/echo_space/playground.py``).

The samples mix what used to break the agreement: JPEG inputs (re-encoded by a ``datasets.Image()`` feature), a
palette input with transparency, a 16-bit output, an RGBA output, a near-black output, a face that leaves the
picture. The entry points are compared with each other, never with hard-coded reason strings, so a change of
wording in the scoring functions keeps this test meaningful.
"""

from __future__ import annotations

import hashlib
import math
import re
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner
from PIL import Image

from echo_builder import metrics as metric_modules
from echo_builder.cli import cli
from tests.conftest import REPO_ROOT

evaluate = pytest.importorskip("evaluate")
datasets = pytest.importorskip("datasets")

CONFIG = "image_to_image"
MODEL = "m"
PROMPT = 'Keep the photo, add a poster that says "SALE"'


def _save(image: Image.Image, path: Path, **kwargs: Any) -> str:
    path.parent.mkdir(parents=True, exist_ok=True)
    image.save(path, **kwargs)
    return path.name


def _palette_with_transparency() -> Image.Image:
    """64 x 64 palette image: a transparent band over stripes of three greys and a brown."""
    img = Image.new("P", (64, 64), 1)
    img.putpalette([0, 0, 0, 90, 90, 90, 160, 160, 160, 120, 80, 40] + [0] * (256 * 3 - 12))
    for x in range(0, 64, 8):
        img.paste(1 + (x // 8) % 3, (x, 0, x + 8, 64))
    img.paste(0, (0, 0, 64, 16))
    img.info["transparency"] = 0
    return img


@pytest.fixture(scope="module")
def world(tmp_path_factory) -> dict[str, Any]:
    """A benchmark folder written by the dataset writer, model outputs on disk, and the samples' files."""
    from echo_dataset.writer import write_hub_folder

    skimage_data = pytest.importorskip("skimage.data")
    root = tmp_path_factory.mktemp("consistency")
    media, outputs = root / "media", root / "outputs" / MODEL
    astronaut = Image.fromarray(skimage_data.astronaut()).resize((256, 256), Image.Resampling.BILINEAR)
    coffee = Image.fromarray(skimage_data.coffee()).resize((300, 200), Image.Resampling.BILINEAR)
    yellow = Image.fromarray(
        np.clip(np.asarray(astronaut, np.float64) * (1.05, 1.0, 0.7) + (8, 4, 0), 0, 255).astype(np.uint8)
    )
    rgba = np.dstack([np.asarray(coffee), np.tile(np.linspace(0, 255, 300, dtype=np.uint8), (200, 1))])
    grey16 = np.tile(np.linspace(0, 65535, 64).astype(np.uint16), (64, 1))
    samples = {
        # JPEG input with a face, a yellowed output: every metric has a value
        "tint": (_save(astronaut, media / "astronaut.jpg", quality=85), yellow),
        # the face leaves the picture; the output has graded alpha
        "noface": (_save(astronaut, media / "astronaut2.jpg", quality=60), Image.fromarray(rgba, "RGBA")),
        # no face in the input (not applicable); a near-black output (color shift has no pixel in 5..250)
        "dark": (_save(coffee, media / "coffee.jpg", quality=90), Image.new("RGB", (80, 60), (3, 2, 4))),
        # a palette input with transparency, a 16-bit grey output
        "palette": (_save(_palette_with_transparency(), media / "palette.png"), Image.fromarray(grey16)),
    }
    rows = []
    for sample_id, (input_name, output) in samples.items():
        rows.append(
            {
                "id": sample_id,
                "prompt": PROMPT,
                "input_images": [input_name],
                "input_image_urls": [f"https://example.org/{input_name}"],
            }
        )
        _save(output, outputs / f"{sample_id}.png")
    bench = write_hub_folder(
        {CONFIG: rows}, root / "bench", media_root=media, card_context={}, pseudonymize=False
    )
    ids = list(samples)
    return {
        "bench": bench,
        "outputs": outputs.parent,
        "ids": ids,
        "input_files": {sid: media / samples[sid][0] for sid in ids},
        "output_files": {sid: outputs / f"{sid}.png" for sid in ids},
        "root": root,
    }


def _judge_reply(body: dict[str, Any]) -> str:
    """A rating that depends on the exact image bytes the judge is sent, so a different decode shows."""
    parts = [
        p["image_url"]["url"]
        for m in body["messages"]
        if isinstance(m["content"], list)
        for p in m["content"]
        if p.get("type") == "image_url"
    ]
    digest = hashlib.sha256("".join(parts).encode()).digest()
    return f"Text checked. [[{1 + digest[0] % 10}]]"


def _metrics() -> list[str]:
    names = ["color_shift", "text_rendering"]
    try:
        import timm  # noqa: F401
        import torch  # noqa: F401

        names.append("structure_distance")
    except ImportError:
        pass
    try:
        import dlib  # noqa: F401

        names.append("face_identity")
    except ImportError:
        pass
    return names


def _nan_reason(value: float, reason: Any) -> str | None:
    return (reason or "") if isinstance(value, float) and math.isnan(value) else None


Table = dict[str, dict[str, tuple[float, str | None]]]  # metric -> sample_id -> (value, NaN reason or None)


def _by_function(world: dict[str, Any], names: list[str], judge_options: dict[str, Any]) -> Table:
    from echo_builder.scoring.color import color_shift
    from echo_builder.scoring.text import text_rendering

    ids = world["ids"]
    inputs = [[world["input_files"][s]] for s in ids]
    outputs = [world["output_files"][s] for s in ids]
    results = {
        "color_shift": color_shift(inputs, outputs, on_image_error="nan"),
        "text_rendering": text_rendering(
            [PROMPT] * len(ids), outputs, ["openai:judge"], judge_options=judge_options
        ),
    }
    if "structure_distance" in names:
        from echo_builder.scoring.structure import structure_distance

        results["structure_distance"] = structure_distance(
            inputs, outputs, weights="random:0", on_image_error="nan"
        )
    if "face_identity" in names:
        from echo_builder.scoring.faces import face_identity

        results["face_identity"] = face_identity(inputs, outputs, backend="dlib", on_image_error="nan")
    return {
        name: {
            sid: (float(r.values[i]), _nan_reason(float(r.values[i]), r.nan_reasons[i]))
            for i, sid in enumerate(ids)
        }
        for name, r in results.items()
    }


def _by_module(world: dict[str, Any], names: list[str], judge_options: dict[str, Any]) -> Table:
    rows = {r["id"]: r for r in datasets.load_dataset(str(world["bench"]), CONFIG, split="test")}
    ids = world["ids"]
    assert rows["tint"]["input_images"][0].format == "JPEG"  # what datasets hands over: a decoded JPEG
    references = [rows[s]["input_images"] for s in ids]
    predictions = [Image.open(world["output_files"][s]) for s in ids]
    table: Table = {}
    for name in names:
        module = evaluate.load(metric_modules.path(name))
        kwargs: dict[str, Any] = {"predictions": predictions}
        if name == "text_rendering":
            kwargs.update(
                prompts=[rows[s]["prompt"] for s in ids], judges=["openai:judge"], judge_options=judge_options
            )
        else:
            kwargs["references"] = references
        if name == "structure_distance":
            kwargs["weights"] = "random:0"
        out = module.compute(**kwargs)
        table[name] = {
            sid: (float(out["scores"][i]), _nan_reason(float(out["scores"][i]), out["nan_reasons"][i]))
            for i, sid in enumerate(ids)
        }
    return table


def _by_cli(world: dict[str, Any], names: list[str], base_url: str) -> Table:
    out = world["root"] / "cli"
    args = ["metrics", "--benchmark", world["bench"], "--config", CONFIG, "--outputs", world["outputs"]]
    for name in names:
        args += ["--metric", name]
    args += ["--dino-weights", "random:0", "--face-backend", "dlib", "--judge", "openai:judge"]
    args += ["--base-url", base_url, "--out", out]
    result = CliRunner().invoke(cli, [str(a) for a in args])
    assert result.exit_code == 0, result.output
    frame = pd.read_parquet(out / "metrics.parquet")
    frame = frame[frame["model"] == MODEL]
    table: Table = {name: {} for name in names}
    for row in frame.itertuples():
        value = float("nan") if row.value is None else float(row.value)
        table[row.metric][row.sample_id] = (value, _nan_reason(value, row.nan_reason))
    return table


_BACKEND_SUFFIX = re.compile(r" \[backend [^\]]*\]$")


def _by_playground(world: dict[str, Any], names: list[str], judge_options: dict[str, Any]) -> Table:
    import sys

    sys.path.insert(0, str(REPO_ROOT / "spaces_app"))
    try:
        from echo_space.playground import score_pair
    finally:
        sys.path.remove(str(REPO_ROOT / "spaces_app"))
    rows = {r["id"]: r for r in datasets.load_dataset(str(world["bench"]), CONFIG, split="test")}
    table: Table = {name: {} for name in names}
    for sid in world["ids"]:
        result = score_pair(
            rows[sid]["input_images"][0],  # what the Space shows and scores: the benchmark's decoded image
            Image.open(world["output_files"][sid]),
            rows[sid]["prompt"],
            dino_weights="random:0" if "structure_distance" in names else None,
            face_backend="dlib" if "face_identity" in names else None,
            judges=["openai:judge"],
            judge_options=judge_options,
        )
        for row in result.table.itertuples():
            if row.metric in table:
                value = float("nan") if row.value is None else float(row.value)
                # the playground's note on a face value ends with the backend id; the reason is what comes first
                note = _BACKEND_SUFFIX.sub("", row.note or "")
                table[row.metric][sid] = (value, _nan_reason(value, note))
    return table


def _same_value(a: float, b: float, metric: str) -> bool:
    if math.isnan(a) or math.isnan(b):
        return math.isnan(a) and math.isnan(b)
    if metric == "structure_distance":  # a different batch composition may move the last float32 bits
        return abs(a - b) <= 1e-6
    # the playground's table rounds to 6 decimals
    return abs(a - b) <= 5e-7


def test_every_metric_agrees_across_function_module_cli_and_space(world, openai_server):
    openai_server.reply = _judge_reply
    names = _metrics()
    judge_options = {"openai:judge": {"base_url": openai_server.base_url}}
    tables = {
        "function": _by_function(world, names, judge_options),
        "module": _by_module(world, names, judge_options),
        "cli": _by_cli(world, names, openai_server.base_url),
        "space": _by_playground(world, names, judge_options),
    }
    reference = tables["function"]
    # the samples do what they are meant to: a value, a NaN with a reason, for the metrics that ran
    assert not math.isnan(reference["color_shift"]["tint"][0]) and reference["color_shift"]["tint"][0] > 10
    assert reference["color_shift"]["dark"][1]  # near-black output: NaN with a reason
    assert not math.isnan(reference["color_shift"]["palette"][0])
    if "face_identity" in names:
        assert reference["face_identity"]["tint"][0] > 0.5 and reference["face_identity"]["dark"][1]
    mismatches = []
    for entry, table in tables.items():
        for metric in names:
            for sid in world["ids"]:
                want, got = reference[metric][sid], table[metric].get(sid)
                if got is None or not _same_value(want[0], got[0], metric) or want[1] != got[1]:
                    mismatches.append(f"{metric}/{sid}: function {want} vs {entry} {got}")
    assert not mismatches, "\n".join(mismatches)


def test_the_module_scores_a_decoded_jpeg_exactly_as_the_cli(world):
    """Issue 14 item 1: no JPEG round trip inside the module (43.24 vs 43.06 before)."""
    rows = {r["id"]: r for r in datasets.load_dataset(str(world["bench"]), CONFIG, split="test")}
    module = evaluate.load(metric_modules.path("color_shift"))
    from echo_builder.scoring.color import color_shift

    decoded = rows["tint"]["input_images"][0]
    output = world["output_files"]["tint"]
    by_module = module.compute(predictions=[decoded], references=[output])["scores"][0]
    by_function = float(color_shift([[output]], [world["input_files"]["tint"]]).values[0])
    assert by_module == by_function
