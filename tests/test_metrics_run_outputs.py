"""`echo-bench metrics`: one pooled color shift everywhere, reasons beside conventional values, unmatched outputs,
and file names derived from model names (issue 14 items 2, 5, 6; issue 13 item 5)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from PIL import Image

from echo_builder import metrics as metric_modules
from echo_builder.cli import cli
from echo_builder.ids import NAME_MAX, safe_file_name
from echo_builder.scoring.color import pooled_color_shift
from tests.helpers.benchmark import make_benchmark, make_outputs, png_bytes

GREY = (100, 100, 100)
# per sample: (no_color_shift flag, output color); every input is flat GREY
SAMPLES = {"a": (True, (103, 100, 96)), "b": (False, (200, 100, 20)), "c": (None, (100, 104, 103))}


def _flagged_benchmark(folder: Path) -> Path:
    import pyarrow as pa
    import pyarrow.parquet as pq

    grey = png_bytes(Image.new("RGB", (16, 16), GREY))
    table = pa.table(
        {
            "id": list(SAMPLES),
            "prompt": ["p"] * len(SAMPLES),
            "input_images": [[{"bytes": grey, "path": None}]] * len(SAMPLES),
            "applicability": [{"no_color_shift": flag} for flag, _ in SAMPLES.values()],
        }
    )
    (folder / "image_to_image").mkdir(parents=True)
    pq.write_table(table, folder / "image_to_image" / "test-00000-of-00001.parquet")
    return folder


def _metrics(*args: str) -> object:
    return CliRunner().invoke(cli, ["metrics", *args], catch_exceptions=False)


def _color_shift_run(bench: Path, outputs: Path, out: Path, *extra: str) -> object:
    return _metrics(
        "--benchmark",
        str(bench),
        "--config",
        "image_to_image",
        "--outputs",
        str(outputs),
        "--metric",
        "color_shift",
        "--out",
        str(out),
        *extra,
    )


# ------------------------------------------------------------------------------------ 14.2: one pooled figure


def test_pooled_color_shift_is_one_figure_over_applicable_samples_everywhere(tmp_path):
    """Summary, printed table, swatch and evaluate module show the pooled shift of the applicable samples only
    (sample b asks for a color change: its flag is false); before, the swatch pooled b and the summary had none."""
    evaluate = pytest.importorskip("evaluate")
    bench = _flagged_benchmark(tmp_path / "bench")
    outputs = make_outputs(
        tmp_path / "outputs",
        {"m": {sid: Image.new("RGB", (16, 16), rgb) for sid, (_, rgb) in SAMPLES.items()}},
    )
    result = _color_shift_run(bench, outputs, tmp_path / "res")
    assert result.exit_code == 0, result.output

    # by hand: inputs all GREY; outputs a and c pooled (equal pixel counts) -> mean (101.5, 102, 99.5)
    expected = math.sqrt(1.5**2 + 2.0**2 + 0.5**2)  # 2.5495
    summary = json.loads((tmp_path / "res" / "summary.json").read_text())["summary"]
    (row,) = [r for r in summary if r["metric"] == "color_shift"]
    assert row["pooled"] == pytest.approx(expected, abs=1e-4)
    assert row["pooled_n"] == 2 and row["pooled_deltas"] == pytest.approx([1.5, 2.0, -0.5], abs=1e-4)
    assert row["nan_reasons"] == {"not applicable": 1}
    import pandas as pd

    (csv_row,) = pd.read_csv(tmp_path / "res" / "summary.csv").to_dict("records")
    assert (
        csv_row["pooled"] == pytest.approx(expected, abs=1e-4)
        and csv_row["nan_reasons"] == "not applicable x1"
    )

    # the printed table holds the same number
    pooled_line = next(
        line for line in result.stdout.splitlines() if line.startswith("m ") and " over " in line
    )
    assert float(pooled_line.split()[1]) == pytest.approx(expected, abs=1e-4)

    # the swatch shows the pooled output color of a and c, not the one with b in it
    swatch = np.asarray(Image.open(tmp_path / "res" / "color_swatches" / "m.png").convert("RGB")).reshape(
        -1, 3
    )
    colors = {tuple(int(v) for v in px) for px in np.unique(swatch, axis=0)}

    def shown(rgb: tuple[float, float, float]) -> bool:
        return any(all(abs(c - v) <= 1 for c, v in zip(color, rgb, strict=True)) for color in colors)

    assert shown((101.5, 102.0, 99.5)) and shown(GREY)
    with_b = pooled_color_shift(
        [[grey_img()]] * 3, [Image.new("RGB", (16, 16), rgb) for _, rgb in SAMPLES.values()]
    )
    assert with_b.magnitude > 40  # what the swatch showed before
    assert not shown(tuple(with_b.output_means))

    # the evaluate module gives the same pooled figure from the same flags
    module = evaluate.load(metric_modules.path("color_shift"))
    out = module.compute(
        predictions=[Image.new("RGB", (16, 16), rgb) for _, rgb in SAMPLES.values()],
        references=[[grey_img()]] * 3,
        pooled=True,
        applicable=[flag for flag, _ in SAMPLES.values()],
    )
    assert out["pooled_color_shift"] == pytest.approx(row["pooled"], abs=1e-4)
    assert out["pooled_n"] == 2
    assert math.isnan(out["scores"][1]) and out["nan_reasons"][1].startswith("not applicable")


def grey_img() -> Image.Image:
    return Image.new("RGB", (16, 16), GREY)


# ---------------------------------------------------------------------- 14.5: reasons beside conventional values


def test_no_face_in_output_keeps_its_reason_in_the_csv_summary_and_table(tmp_path, astronaut, coffee):
    """0.0 for "a face in the input, none in the output" is a convention: the CSV row, the summary and the
    printed table say so (before, the CSV had 0.0 with an empty reason)."""
    pytest.importorskip("dlib")
    import pandas as pd

    bench = make_benchmark(
        tmp_path / "bench",
        "image_to_image",
        [{"id": "face", "prompt": "p", "inputs": [Image.fromarray(astronaut)]}],
    )
    outputs = make_outputs(
        tmp_path / "outputs",
        {"lost": {"face": Image.fromarray(coffee)}, "kept": {"face": Image.fromarray(astronaut)}},
    )
    out = tmp_path / "res"
    result = _metrics(
        "--benchmark",
        str(bench),
        "--config",
        "image_to_image",
        "--outputs",
        str(outputs),
        "--metric",
        "face_identity",
        "--format",
        "csv",
        "--out",
        str(out),
    )
    assert result.exit_code == 0, result.output
    rows = pd.read_csv(out / "metrics.csv").set_index("model")
    assert rows.loc["lost", "value"] == 0.0
    assert rows.loc["lost", "note"].startswith("failure: no face detected in the output")
    assert rows.loc["kept", "value"] > 0.99 and pd.isna(rows.loc["kept", "note"])
    summary = {r["model"]: r for r in json.loads((out / "summary.json").read_text())["summary"]}
    assert summary["lost"]["notes"] == {
        "failure: no face detected in the output although the inputs show one": 1
    }
    assert summary["kept"]["notes"] == {}
    assert summary["kept"]["backend"] == (
        "dlib:dlib_face_recognition_resnet_model_v1+hog+5pt+upsample=auto+threshold=0+padding=0.25+jitters=0"
    )
    csv_summary = pd.read_csv(out / "summary.csv").set_index("model")
    assert csv_summary.loc["lost", "notes"] == (
        "failure: no face detected in the output although the inputs show one x1"
    )
    lost_line = next(line for line in result.stdout.splitlines() if line.startswith("lost "))
    assert "no face detected in the output" in lost_line


# ------------------------------------------------------------------------------------- 14.6: unmatched outputs


def _one_sample_bench(tmp_path: Path) -> Path:
    grey = Image.new("RGB", (16, 16), GREY)
    return make_benchmark(
        tmp_path / "bench", "image_to_image", [{"id": "s1", "prompt": "p", "inputs": [grey]}]
    )


def test_no_output_matching_any_sample_is_a_one_line_error(tmp_path):
    bench = _one_sample_bench(tmp_path)
    outputs = make_outputs(tmp_path / "outputs", {"m": {"wrong_name": grey_img()}})
    result = _color_shift_run(bench, outputs, tmp_path / "res")
    assert result.exit_code == 1
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: no output file in")
    assert "matches a sample id of config 'image_to_image'" in lines[0] and "<model>/s1.png" in lines[0]
    assert "Traceback" not in result.output
    assert not (tmp_path / "res").exists()  # nothing half made


def test_outputs_one_folder_too_deep_is_an_error_that_says_so(tmp_path):
    bench = _one_sample_bench(tmp_path)
    outputs = make_outputs(tmp_path / "outputs" / "run1", {"m": {"s1": grey_img()}})
    result = _color_shift_run(bench, tmp_path / "outputs", tmp_path / "res")
    assert result.exit_code == 1
    (line,) = result.output.strip().splitlines()
    assert line.startswith("error: ") and "one level too high" in line and "run1/m" in line
    assert outputs.is_dir()


def test_a_model_with_no_matching_output_is_warned_and_the_others_run(tmp_path, caplog):
    bench = _one_sample_bench(tmp_path)
    outputs = make_outputs(
        tmp_path / "outputs",
        {"good": {"s1": grey_img()}, "renamed": {"S1-final": grey_img(), "s2": grey_img()}},
    )
    with caplog.at_level("WARNING"):
        result = _color_shift_run(bench, outputs, tmp_path / "res")
    assert result.exit_code == 0, result.output
    warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert any("'renamed': none of its 2 output file(s) matches a sample id" in w for w in warnings)
    assert any("were ignored" in w and "'renamed': 2" in w for w in warnings)
    summary = json.loads((tmp_path / "res" / "summary.json").read_text())
    assert summary["unmatched_outputs"] == {"renamed": 2}
    good = next(r for r in summary["summary"] if r["model"] == "good")
    assert good["mean"] == 0.0 and good["n"] == 1


# ------------------------------------------------------------------------ 13.5: file names from model names


NAMES = [
    "m" * NAME_MAX,  # a 255-byte folder name: + ".png" is over the limit
    "m" * (NAME_MAX - 1) + "n",  # shares 254 bytes with the one above
    "\u00e9" * 127,  # 254 bytes of two-byte characters
    "\u00e9" * 126 + "e",
    "a b",
    "a_b",
    "CON",
    "nul.txt",
    "-rf",
    ".hidden",
    "..",
    "",
    "a/b",
    "x\x00y",
    "\ud83d",  # a lone surrogate
    "ok-model_1.0",
]


def test_safe_file_name_is_bounded_unique_and_creatable(tmp_path):
    names = [safe_file_name(n, ".png") for n in NAMES]
    assert len(set(names)) == len(NAMES)  # no two models share a file
    for original, name in zip(NAMES, names, strict=True):
        assert len(name.encode("utf-8")) <= NAME_MAX, original
        assert name.endswith(".png") and not name.startswith((".", "-"))
        assert "/" not in name and "\x00" not in name
        assert name.split(".")[0].upper() not in {"CON", "PRN", "AUX", "NUL"}
        (tmp_path / name).write_bytes(b"x")  # the file system accepts it
    assert safe_file_name("ok-model_1.0", ".png") == "ok-model_1.0.png"  # a safe name is kept as it is
    assert safe_file_name("m" * NAME_MAX, ".png") == names[0]  # deterministic
    assert len(list(tmp_path.iterdir())) == len(NAMES)


def test_metrics_with_255_byte_model_names_writes_one_swatch_each(tmp_path):
    """A 255-byte model folder name crashed `metrics` (the swatch file name); two that share a long prefix must
    not overwrite each other's swatch."""
    bench = _one_sample_bench(tmp_path)
    long_a, long_b = "m" * NAME_MAX, "m" * (NAME_MAX - 1) + "n"
    outputs = make_outputs(
        tmp_path / "outputs",
        {long_a: {"s1": Image.new("RGB", (16, 16), (110, 100, 90))}, long_b: {"s1": grey_img()}},
    )
    result = _color_shift_run(bench, outputs, tmp_path / "res")
    assert result.exit_code == 0, result.output
    swatches = sorted((tmp_path / "res" / "color_swatches").iterdir())
    assert len(swatches) == 2
    assert all(len(p.name.encode()) <= NAME_MAX for p in swatches)
    summary = {r["model"]: r for r in json.loads((tmp_path / "res" / "summary.json").read_text())["summary"]}
    assert summary[long_a]["pooled"] == pytest.approx(math.sqrt(10**2 + 10**2), abs=1e-4)
    assert summary[long_b]["pooled"] == 0.0


def test_structure_rows_name_every_setting_that_changes_the_value(tmp_path):
    """The backend id in a structure_distance row's detail names the weights, the resize and the reduction."""
    pytest.importorskip("timm")
    import pandas as pd

    bench = _one_sample_bench(tmp_path)
    outputs = make_outputs(tmp_path / "outputs", {"m": {"s1": grey_img()}})
    ids = []
    for reduction in ("max", "min"):
        out = tmp_path / reduction
        result = _metrics(
            "--benchmark",
            str(bench),
            "--config",
            "image_to_image",
            "--outputs",
            str(outputs),
            "--metric",
            "structure_distance",
            "--dino-weights",
            "random:0",
            "--structure-reduction",
            reduction,
            "--out",
            str(out),
        )
        assert result.exit_code == 0, result.output
        ids.append(json.loads(pd.read_parquet(out / "metrics.parquet")["detail"][0])["backend"])
    assert ids == [
        f"dino:vit_small_patch16_224.dino+weights=random:0+resize=bicubic224+reduction={r}"
        for r in ("max", "min")
    ]


def test_text_rendering_backend_id_names_judges_and_options_without_credentials():
    from echo_builder.scoring.text import _backend_id

    options = {"openai:a": {"base_url": "http://u:sk-1@h/v1", "api_key": "sk-2", "temperature": 0, "seed": 3}}
    ident = _backend_id(["openai:a", "transformers:b"], options)
    assert ident == "text_rendering:openai:a{seed=3,temperature=0},transformers:b+prompt=echo-text-v1"
    assert "sk-" not in ident
    warmer = _backend_id(["openai:a", "transformers:b"], {"openai:a": {"temperature": 1, "seed": 3}})
    assert warmer != ident
