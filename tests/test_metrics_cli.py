"""`echo-bench metrics` on real image pairs: rows, summary, applicability, swatches."""

from __future__ import annotations

import json
import logging
import math

import pandas as pd
import pytest
from click.testing import CliRunner
from PIL import Image

from echo_builder.cli import cli
from tests.helpers.benchmark import make_benchmark


@pytest.fixture
def i2i_run(shared_data, tmp_path):
    pairs = shared_data / "image_pairs"
    tint_after = (pairs / "yellow_tint" / "gpt4o_after.webp").read_bytes()
    tint_before = (pairs / "yellow_tint" / "gpt4o_before.webp").read_bytes()
    duck = (pairs / "genai_arena_edits" / "duck.jpg").read_bytes()
    bench = make_benchmark(
        tmp_path / "bench",
        "image_to_image",
        [
            {"id": "tint", "prompt": "keep the colors", "inputs": [tint_after]},
            {"id": "duck", "prompt": "add a hat", "inputs": [duck]},
            {"id": "t2i", "prompt": "a red square"},
        ],
    )
    outputs = tmp_path / "outputs"
    (outputs / "yellowing").mkdir(parents=True)
    (outputs / "faithful").mkdir(parents=True)
    (outputs / "yellowing" / "tint.webp").write_bytes(tint_before)
    (outputs / "faithful" / "tint.webp").write_bytes(tint_after)
    (outputs / "faithful" / "duck.jpg").write_bytes(duck)
    Image.new("RGB", (32, 32), (200, 0, 0)).save(outputs / "faithful" / "t2i.png")
    return bench, outputs


def test_metrics_command_on_real_pairs(i2i_run, tmp_path):
    bench, outputs = i2i_run
    out = tmp_path / "metrics"
    result = CliRunner().invoke(
        cli,
        [
            "metrics",
            "--benchmark",
            str(bench),
            "--config",
            "image_to_image",
            "--outputs",
            str(outputs),
            "--metric",
            "color_shift",
            "--metric",
            "structure_distance",
            "--dino-weights",
            "random:0",
            "--out",
            str(out),
        ],
        catch_exceptions=False,
    )
    assert result.exit_code == 0, result.output
    rows = pd.read_parquet(out / "metrics.parquet")
    assert len(rows) == 2 * 3 * 2  # models x samples x metrics: every combination has a row
    value = rows.set_index(["model", "sample_id", "metric"])
    assert value.loc[("faithful", "tint", "color_shift"), "value"] == 0.0
    assert value.loc[("faithful", "tint", "structure_distance"), "value"] == pytest.approx(0.0, abs=1e-7)
    shifted = value.loc[("yellowing", "tint", "color_shift")]
    assert shifted["value"] > 20 and json.loads(shifted["detail"])["delta_rgb"][2] < -20  # the blue drop
    assert value.loc[("yellowing", "duck", "color_shift"), "nan_reason"].startswith("missing output")
    assert value.loc[("faithful", "t2i", "color_shift"), "nan_reason"].startswith("not applicable")
    summary = {
        (r["model"], r["metric"]): r for r in json.loads((out / "summary.json").read_text())["summary"]
    }
    assert (
        summary[("faithful", "color_shift")]["n"] == 2 and summary[("faithful", "color_shift")]["n_nan"] == 1
    )
    assert summary[("yellowing", "color_shift")]["nan_reasons"] == {"missing output": 1, "not applicable": 1}
    assert summary[("yellowing", "color_shift")]["higher_is_better"] is False
    assert Image.open(out / "color_swatches" / "yellowing.png").width > 100
    lines = result.stdout.splitlines()
    assert lines[0].split() == ["model", "metric", "better", "mean", "n", "NaN", "NaN", "reasons"]
    yellowing = next(
        line.split(maxsplit=6) for line in lines if line.startswith("yellowing ") and "color" in line
    )
    assert yellowing[:3] == ["yellowing", "color_shift", "lower"]
    assert yellowing[4:] == [
        "1",
        "2",
        "missing output x1, not applicable x1",
    ]  # no direction among the reasons
    faithful = next(line.split() for line in lines if line.startswith("faithful ") and "structure" in line)
    assert faithful[:3] == ["faithful", "structure_distance", "lower"]


def test_unavailable_metric_is_reported_once(i2i_run, tmp_path, monkeypatch, caplog):
    import echo_builder.scoring.run as run_module
    from echo_builder.errors import MissingDependencyError

    real = run_module._metric_function

    def without_dino_and_faces(name, options):
        if name == "color_shift":
            return real(name, options)

        def missing(inputs, outputs, prompts):
            raise MissingDependencyError("timm", "dino", name)

        return missing

    monkeypatch.setattr(run_module, "_metric_function", without_dino_and_faces)
    bench, outputs = i2i_run
    base = ["metrics", "--benchmark", str(bench), "--config", "image_to_image", "--outputs", str(outputs)]
    result = CliRunner().invoke(cli, [*base, "--out", str(tmp_path / "m")], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    assert result.stderr.splitlines() == [
        f"not computed: {name}: {name} needs the optional package 'timm', which is not installed. Install it "
        "with: pip install 'echo-bench[dino]'"
        for name in ("structure_distance", "face_identity", "text_accuracy")
    ]
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]
    table = result.stdout.split("\n\n")[0].splitlines()[1:]  # the pooled color shift follows a blank line
    assert {line.split()[1] for line in table} == {"color_shift"}


def test_requested_metric_that_cannot_run_is_a_clear_error(i2i_run, tmp_path):
    bench, outputs = i2i_run
    result = CliRunner().invoke(
        cli,
        [
            "metrics",
            "--benchmark",
            str(bench),
            "--config",
            "image_to_image",
            "--outputs",
            str(outputs),
            "--metric",
            "text_rendering",
            "--out",
            str(tmp_path / "m"),
        ],
    )
    assert result.exit_code == 1 and "text_rendering needs a judge" in result.output


def test_an_option_of_a_metric_the_run_does_not_compute_is_refused(i2i_run, tmp_path):
    bench, outputs = i2i_run
    common = ["metrics", "--benchmark", str(bench), "--config", "image_to_image", "--outputs", str(outputs)]
    result = CliRunner().invoke(
        cli,
        [*common, "--metric", "color_shift", "--structure-decode", "pillow", "--out", str(tmp_path / "m")],
    )
    assert result.exit_code == 2
    assert (
        "--structure-decode is an option of structure_distance, which this run does not compute"
        in result.output
    )
    assert not (tmp_path / "m").exists()
    # the same run without the foreign option goes ahead
    ran = CliRunner().invoke(cli, [*common, "--metric", "color_shift", "--out", str(tmp_path / "ok")])
    assert ran.exit_code == 0, ran.output


def test_applicability_flags_are_honoured(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    from echo_builder.scoring.run import run_metrics
    from tests.helpers.benchmark import png_bytes

    img = png_bytes(Image.new("RGB", (16, 16), (100, 120, 140)))
    table = pa.table(
        {
            "id": ["a", "b", "c"],
            "prompt": ["p", "p", "p"],
            "input_images": [[{"bytes": img, "path": None}]] * 3,
            "applicability": [{"no_color_shift": True}, {"no_color_shift": False}, {"no_color_shift": None}],
        }
    )
    (tmp_path / "bench" / "image_to_image").mkdir(parents=True)
    pq.write_table(table, tmp_path / "bench" / "image_to_image" / "test-00000-of-00001.parquet")
    (tmp_path / "out" / "m").mkdir(parents=True)
    for sid in "abc":
        (tmp_path / "out" / "m" / f"{sid}.png").write_bytes(img)
    result = run_metrics(
        tmp_path / "bench", "image_to_image", tmp_path / "out", tmp_path / "res", metrics=["color_shift"]
    )
    by_id = {r["sample_id"]: r for r in result.rows}
    assert by_id["a"]["value"] == 0.0 and by_id["c"]["value"] == 0.0  # unknown flag: computed
    assert math.isnan(by_id["b"]["value"]) and "no_color_shift flag is false" in by_id["b"]["nan_reason"]


def test_judge_without_api_key_fails_before_making_the_cache(tmp_path):
    bench = make_benchmark(
        tmp_path / "bench", "text_to_image", [{"id": "a", "prompt": 'a sign saying "OPEN"'}]
    )
    (tmp_path / "outputs" / "m").mkdir(parents=True)
    Image.new("RGB", (16, 16), (255, 255, 255)).save(tmp_path / "outputs" / "m" / "a.png")
    out = tmp_path / "metrics"
    args = ["--benchmark", str(bench), "--config", "text_to_image", "--outputs", str(tmp_path / "outputs")]
    result = CliRunner().invoke(
        cli, ["metrics", *args, "--metric", "text_rendering", "--judge", "openai:gpt-4o", "--out", str(out)]
    )
    assert result.exit_code == 1
    assert (
        result.output.startswith("error: openai:gpt-4o: no API key.") and len(result.output.splitlines()) == 1
    )
    assert not (out / "cache").exists()
