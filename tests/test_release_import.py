"""``echo-bench import echo2025``: the authors' release (string tokens, text cells) -> a benchmark every command reads.

Fixture: a small folder in the release's exact schema and layout (``tests/helpers/release.py``), with media-id and
URL tokens, JSON / Python-repr / prose / empty feedback, a screenshot with a box and a row whose image is missing.
Also: an un-imported release stops ``judge``, ``metrics`` and ``generate`` at once with one line, and the Space
shows its prose feedback.
"""

from __future__ import annotations

import io
import json
import shlex
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner
from PIL import Image

from echo_builder.cli import cli
from echo_dataset.release import (
    MEDIA_URL_TEMPLATE,
    boxes_per_image,
    feedback_items,
    parse_cell,
    token_url,
)
from tests.helpers.release import (
    A_ONE,
    BLUE_URL,
    GREEN,
    I_BLUE,
    I_MISSING,
    I_RED,
    I_SHOT,
    MEDIA_IDS,
    RED,
    T_MEDIA,
    T_URL,
    make_release,
)

I2I = (I_RED, I_BLUE, I_SHOT, I_MISSING)


def _cli(*args: str, code: int = 0):
    result = CliRunner().invoke(cli, list(args))
    assert result.exit_code == code, result.output
    return result


def _rows(folder: Path, config: str) -> dict[str, dict]:
    return {r["id"]: r for r in pq.read_table(folder / config).to_pylist()}


@pytest.fixture
def echo_space():
    """The Space's ``echo_space`` package (skips without gradio), as in ``tests/space``."""
    from tests.space.conftest import _require_gradio

    _require_gradio()
    import echo_space

    return echo_space


@pytest.fixture(scope="module")
def release(tmp_path_factory) -> dict[str, Path]:
    return make_release(tmp_path_factory.mktemp("echo2025"))


@pytest.fixture(scope="module")
def imported(release, tmp_path_factory) -> tuple[Path, str]:
    out = tmp_path_factory.mktemp("imported") / "bench"
    result = _cli(
        "import",
        "echo2025",
        str(release["release"]),
        "--out",
        str(out),
        "--images",
        str(release["images"]),
        "--assignments",
        str(release["assignments"]),
        "--offline",
    )
    return out, result.output


# ------------------------------------------------------------------------------------------- cell parsing
def test_cells_are_parsed_in_every_form_and_the_form_is_reported():
    assert parse_cell('[{"feedback": "a"}]') == ([{"feedback": "a"}], "json")
    assert parse_cell("[{'feedback': 'a'}]") == ([{"feedback": "a"}], "python")
    assert parse_cell("  it turned yellow ") == ("it turned yellow", "prose")
    assert parse_cell("__import__('os').system('x')") == (
        "__import__('os').system('x')",
        "prose",
    )  # never run
    for empty in (None, "", "  ", "None", "null", "nan"):
        assert parse_cell(empty) == (None, "empty")
    assert parse_cell(["already", "a list"]) == (["already", "a list"], "value")


def test_feedback_of_every_form_becomes_post_url_and_feedback_records():
    record = [{"post_url": "https://x.com/a/status/1", "feedback": "typo"}]
    assert feedback_items(json.dumps(record)) == record
    assert feedback_items(repr(record)) == record
    assert feedback_items("It changed her face") == [{"post_url": "", "feedback": "It changed her face"}]
    assert feedback_items("") == feedback_items(None) == []
    assert feedback_items(repr(["a", "b"])) == [
        {"post_url": "", "feedback": "a"},
        {"post_url": "", "feedback": "b"},
    ]
    assert feedback_items({"url": "https://x.com/b/status/2", "text": "yellow"}) == [
        {"post_url": "https://x.com/b/status/2", "feedback": "yellow"}
    ]
    # echo-bench's own records pass unchanged, an empty text included
    assert feedback_items([{"post_url": "u", "feedback": ""}]) == [{"post_url": "u", "feedback": ""}]


def test_box_cells_are_read_per_input_image():
    assert boxes_per_image([1, 2, 30, 40]) == {1: [(1.0, 2.0, 30.0, 40.0)]}
    assert boxes_per_image([[1, 2, 30, 40], [5, 6, 70, 80]]) == {
        1: [(1.0, 2.0, 30.0, 40.0), (5.0, 6.0, 70.0, 80.0)]
    }
    assert boxes_per_image([[[1, 2, 30, 40]], [[5, 6, 70, 80]]]) == {
        1: [(1.0, 2.0, 30.0, 40.0)],
        2: [(5.0, 6.0, 70.0, 80.0)],
    }
    assert boxes_per_image({"input_2": {"x1": 1, "y1": 2, "x2": 3, "y2": 4}}) == {2: [(1.0, 2.0, 3.0, 4.0)]}
    assert boxes_per_image(None) == {}
    assert boxes_per_image("a box around the cat") is None
    assert boxes_per_image([1, 2, "x", 4]) is None


def test_a_media_id_token_is_the_pbs_twimg_url_and_a_url_token_is_kept():
    assert token_url("GnXyz12AbC") == "https://pbs.twimg.com/media/GnXyz12AbC?format=jpg&name=orig"
    assert token_url("GnXyz12AbC.jpg") == "https://pbs.twimg.com/media/GnXyz12AbC?format=jpg&name=orig"
    assert token_url(BLUE_URL) == BLUE_URL
    for bad in ("", "../etc/passwd", "two words", None, "/abs/path.png"):
        assert token_url(bad) is None
    assert token_url("GnXyz12AbC", "http://m/{x}/{media_id}") == "http://m/{x}/GnXyz12AbC"


# ------------------------------------------------------------------------------------------------ import
def test_import_keeps_ids_resolves_local_copies_and_counts_what_is_missing(imported):
    out, output = imported
    i2i, t2i, analysis = (_rows(out, c) for c in ("image_to_image", "text_to_image", "analysis"))
    assert set(i2i) == set(I2I) and set(t2i) == {T_MEDIA, T_URL} and set(analysis) == {A_ONE}
    red = Image.open(io.BytesIO(i2i[I_RED]["input_images"][0]["bytes"]))
    assert red.size == (64, 48) and red.convert("RGB").getpixel((5, 5)) == RED
    assert i2i[I_RED]["input_image_urls"] == [MEDIA_URL_TEMPLATE.format(media_id=MEDIA_IDS[I_RED])]
    assert i2i[I_BLUE]["input_image_urls"] == [BLUE_URL]  # a URL token: the local copy came first
    assert i2i[I_BLUE]["input_images"][0]["bytes"]
    # the missing image: kept as a URL, counted, named in media_errors; its row is not dropped
    assert i2i[I_MISSING]["input_images"] == [None]
    assert i2i[I_MISSING]["media_errors"] == [
        f"{MEDIA_URL_TEMPLATE.format(media_id=MEDIA_IDS[I_MISSING])}: offline and not in the media store"
    ]
    record = json.loads((out / "import.json").read_text())
    assert record["images"]["image_to_image"] == {"resolved": 3, "missing": 1}
    assert record["images"]["text_to_image"] == {"missing": 2}  # outputs: no local copy, offline
    assert record["rows"] == {"image_to_image": 4, "text_to_image": 2, "analysis": 1}
    assert record["parse_problems"] == {"community_feedback": {"prose": 2, "python repr": 2}}
    assert "image_to_image        4       4         3        1" in output
    assert "parse problems by column: community_feedback: 2 prose, 2 python repr" in output
    card = (out / "README.md").read_text()
    assert "3 image(s) could not be resolved" in card and "import echo2025" in card


def test_feedback_of_each_form_is_kept_as_records(imported):
    out, _ = imported
    i2i = _rows(out, "image_to_image")
    assert i2i[I_RED]["community_feedback"] == [
        {"post_url": "https://x.com/b/status/2", "feedback": "it turned yellow"}
    ]
    assert i2i[I_BLUE]["community_feedback"] == [
        {"post_url": "https://x.com/c/status/3", "feedback": "colour drift"}
    ]
    assert i2i[I_SHOT]["community_feedback"] == []
    assert i2i[I_MISSING]["community_feedback"] == [{"post_url": "", "feedback": "It changed her face"}]
    assert _rows(out, "analysis")[A_ONE]["community_feedback"] == [
        {"post_url": "", "feedback": "the yellow tint again"}
    ]


def test_a_screenshot_is_cropped_from_its_box_shrunk_10_px(imported):
    out, _ = imported
    shot = _rows(out, "image_to_image")[I_SHOT]
    assert len(shot["input_images"]) == 1
    crop = Image.open(io.BytesIO(shot["input_images"][0]["bytes"])).convert("RGB")
    assert crop.size == (80, 60)  # box [20, 10, 120, 90] shrunk 10 px on each side
    assert {tuple(p) for p in np.asarray(crop).reshape(-1, 3)} == {GREEN}  # no grey frame left
    assert shot["input_bboxes"] == [{"x1": 20.0, "y1": 10.0, "x2": 120.0, "y2": 90.0, "role": "input"}]


def test_assignment_flags_become_applicability_columns_and_unassigned_ids_stay_unknown(imported):
    out, _ = imported
    i2i, t2i = _rows(out, "image_to_image"), _rows(out, "text_to_image")
    flags = ("no_color_shift", "structure", "face_identity", "text_rendering")
    assert [i2i[I_RED][f] for f in flags] == [True, True, False, False]
    assert [i2i[I_BLUE][f] for f in flags] == [False, True, False, False]
    assert [i2i[I_MISSING][f] for f in flags] == [True, False, True, False]
    assert [i2i[I_SHOT][f] for f in flags] == [None, None, None, None]  # no assignment: unknown, not false
    assert t2i[T_MEDIA]["text_rendering"] is True and t2i[T_URL]["text_rendering"] is None


def _outputs(folder: Path) -> Path:
    for model, colour in (("warm", (210, 120, 40)), ("cool", (40, 60, 200))):
        (folder / model).mkdir(parents=True, exist_ok=True)
        for sample_id in I2I:
            Image.new("RGB", (64, 48), colour).save(folder / model / f"{sample_id}.png")
    return folder


def test_metrics_on_the_import_are_gated_by_the_assignment_flags(imported, tmp_path):
    out, _ = imported
    outputs = _outputs(tmp_path / "outputs")
    args = ["--benchmark", str(out), "--config", "image_to_image", "--outputs", str(outputs)]
    _cli("metrics", *args, "--metric", "color_shift", "--out", str(tmp_path / "m"))
    table = pd.read_parquet(tmp_path / "m" / "metrics.parquet").set_index(["model", "sample_id"])
    for model in ("warm", "cool"):
        assert np.isfinite(table.loc[(model, I_RED), "value"])  # flag True
        assert np.isfinite(table.loc[(model, I_SHOT), "value"])  # flag unknown: scored, as the package does
        assert "flag is false" in table.loc[(model, I_BLUE), "nan_reason"]  # assignment says no
        assert np.isnan(table.loc[(model, I_MISSING), "value"])  # its input is missing: NaN with a reason
        assert table.loc[(model, I_MISSING), "nan_reason"]


def test_judge_on_the_import_rates_every_sample(imported, tmp_path, openai_server):
    out, _ = imported
    outputs = _outputs(tmp_path / "outputs")
    openai_server.reply = lambda body: "Fine. [[7]]"
    run = tmp_path / "run"
    _cli(
        "judge",
        "--benchmark",
        str(out),
        "--config",
        "image_to_image",
        "--outputs",
        str(outputs),
        "--judge",
        "openai:j",
        "--base-url",
        openai_server.base_url,
        "--out",
        str(run),
    )
    verdicts = pd.read_parquet(run / "verdicts.parquet")
    assert len(verdicts) == 8 and set(verdicts["status"]) == {"ok"}
    assert set(verdicts["sample_id"]) == set(I2I) and set(verdicts["rating"]) == {7.0}


def test_generate_with_a_command_on_the_import(imported, tmp_path):
    out, _ = imported
    script = tmp_path / "model.py"
    script.write_text(
        "import json, sys\nfrom PIL import Image\nreq = json.load(sys.stdin)\n"
        "src = Image.open(req['input_images'][0]) if req['input_images'] else Image.new('RGB', (8, 8))\n"
        "src.convert('RGB').save(req['output_path'])\n"
    )
    spec = f"command:{shlex.quote(sys.executable)} {shlex.quote(str(script))}"
    gen = tmp_path / "gen"
    args = ["--benchmark", str(out), "--config", "image_to_image", "--model", spec, "--name", "echo"]
    _cli("generate", *args, "--out", str(gen))
    made = {p.stem for p in (gen / "echo").glob("*.png")}
    assert made == {I_RED, I_BLUE, I_SHOT}  # the sample whose input is missing is recorded, not fatal
    assert Image.open(gen / "echo" / f"{I_SHOT}.png").size == (80, 60)  # the crop was the input
    manifest = json.loads((gen / "echo" / "manifest.json").read_text())
    assert I_MISSING in json.dumps(manifest)


def test_the_space_browses_the_import(imported, echo_space):
    from echo_space.benchmark import Benchmark, listing

    out, _ = imported
    bench = Benchmark(out)
    table = listing(bench.samples("image_to_image")).set_index("id")
    assert table.loc[I_RED, "inputs"] == 1 and table.loc[I_MISSING, "feedback"] == 1
    view = bench.view("image_to_image", I_MISSING)
    assert view.feedback.to_dict("records") == [{"post_url": "", "feedback": "It changed her face"}]
    assert view.input_images == [] and "(not downloaded)" in view.links
    assert len(bench.view("image_to_image", I_SHOT).input_images) == 1


# ------------------------------------------------------------------------------------ un-imported release
@pytest.mark.parametrize(
    "command",
    [
        ["metrics", "--metric", "color_shift", "--outputs", "{outputs}", "--out", "{tmp}/m"],
        [
            "judge",
            "--judge",
            "openai:j",
            "--base-url",
            "http://127.0.0.1:9",
            "--outputs",
            "{outputs}",
            "--out",
            "{tmp}/j",
        ],
        ["generate", "--model", "command:true", "--name", "x", "--out", "{tmp}/g"],
    ],
)
@pytest.mark.parametrize("config", ["image_to_image", "text_to_image"])
def test_an_unimported_release_stops_every_command_with_one_line(release, tmp_path, command, config):
    outputs = _outputs(tmp_path / "outputs")
    args = [a.format(outputs=outputs, tmp=tmp_path) for a in command]
    result = _cli(args[0], "--benchmark", str(release["release"]), "--config", config, *args[1:], code=1)
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and "Traceback" not in result.output
    assert f"echo-bench import echo2025 {release['release']}" in lines[0]
    assert not (tmp_path / "j" / "verdicts.parquet").exists() and not (tmp_path / "g").exists()


def test_the_space_shows_prose_feedback_of_an_unimported_release(release, echo_space):
    from echo_space.benchmark import Benchmark, filter_samples, listing

    bench = Benchmark(release["release"])
    table = bench.samples("image_to_image")
    shown = listing(table).set_index("id")
    assert shown.loc[I_MISSING, "feedback"] == 1 and shown.loc[I_RED, "inputs"] == 1
    assert list(filter_samples(table, "her face")["id"]) == [I_MISSING]
    view = bench.view("image_to_image", I_MISSING)
    assert view.feedback.to_dict("records") == [{"post_url": "", "feedback": "It changed her face"}]
    assert MEDIA_URL_TEMPLATE.format(media_id=MEDIA_IDS[I_MISSING]) in view.links
    assert bench.view("image_to_image", I_BLUE).feedback.to_dict("records") == [
        {"post_url": "https://x.com/c/status/3", "feedback": "colour drift"}
    ]
    assert bench.view("text_to_image", T_URL).feedback.to_dict("records") == [
        {"post_url": "", "feedback": "nice"}
    ]


# ------------------------------------------------------------------------------ downloads, safety, errors
def test_a_media_id_resolves_through_the_media_stage_and_a_rerun_downloads_nothing(release, tmp_path):
    from tests.helpers.benchmark import png_bytes
    from tests.helpers.media_server import MediaServer, Reply

    with MediaServer() as server:
        # the pbs.twimg.com form, served by the loopback server in its place (--media-url maps the prefix)
        for media_id in (*MEDIA_IDS.values(), "GnTextOut001"):
            server.route(
                f"/media/{media_id}?format=jpg&name=orig",
                Reply(body=png_bytes(Image.new("RGB", (8, 8), RED))),
            )
        template = server.url("/media/{media_id}?format=jpg&name=orig")
        args = ["import", "echo2025", str(release["release"]), "--out", str(tmp_path / "b")]
        args += ["--media-url", template, "--media-allow", "127.0.0.1"]
        _cli(*args)
        rows = _rows(tmp_path / "b", "image_to_image")
        assert rows[I_MISSING]["input_images"][0]["bytes"] and rows[I_MISSING]["media_errors"] == []
        assert rows[I_MISSING]["input_image_urls"] == [template.format(media_id=MEDIA_IDS[I_MISSING])]
        hits = sum(server.hits.values())
        assert server.hits[f"/media/{MEDIA_IDS[I_MISSING]}?format=jpg&name=orig"] == 1
        _cli(*args)  # resumable: the same folder again, every image from OUT/media
        assert sum(server.hits.values()) == hits


def test_a_hub_id_offline_is_one_error_line(tmp_path):
    result = _cli("import", "echo2025", "--out", str(tmp_path / "b"), code=1)
    assert result.output.count("\n") == 1 and result.output.startswith("error: ")
    assert "echo-bench/echo2025" in result.output and "offline" in result.output
    assert not (tmp_path / "b").exists()


def test_a_foreign_non_empty_out_is_refused_and_untouched(release, tmp_path):
    out = tmp_path / "mine"
    (out / "image_to_image").mkdir(parents=True)
    (out / "image_to_image" / "test-00000-of-00001.parquet").write_bytes(b"my data")
    result = _cli("import", "echo2025", str(release["release"]), "--out", str(out), "--offline", code=1)
    assert result.output.startswith("error: ") and "not empty" in result.output
    assert (out / "image_to_image" / "test-00000-of-00001.parquet").read_bytes() == b"my data"
    result = _cli("import", "echo2025", str(release["release"]), "--out", str(release["release"]), code=1)
    assert "is the release source" in result.output


def test_assignment_files_in_other_shapes(tmp_path):
    from echo_builder.release import read_assignments

    (tmp_path / "a.json").write_text(json.dumps({"id1": ["No Color Shift", "Text Rendering"], "id2": []}))
    (tmp_path / "b.json").write_text(json.dumps([{"id": "id3", "metrics": "face identity preservation"}]))
    (tmp_path / "c.json").write_text(
        json.dumps({"Spatial Position Preservation": {"id4": True, "id5": False}})
    )
    (tmp_path / "d.json").write_text(json.dumps({"id6": ["Sharpness"]}))
    applies, unknown = read_assignments(tmp_path)
    assert applies == {
        "id1": {"no_color_shift", "text_rendering"},
        "id2": set(),
        "id3": {"face_identity"},
        "id4": {"structure"},
        "id5": set(),
        "id6": set(),
    }
    assert unknown == ["Sharpness"]


@pytest.fixture
def hub_release(release, monkeypatch):
    """``datasets`` / ``huggingface_hub`` answer for ``echo-bench/echo2025`` from the local release folder (the Hub
    mocked at its boundary; nothing leaves the machine)."""
    import datasets
    import huggingface_hub

    for name in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE"):
        monkeypatch.delenv(name, raising=False)
    folder, real_load = release["release"], datasets.load_dataset

    def load_dataset(path, name=None, split=None, revision=None, cache_dir=None, **kwargs):
        assert path == "echo-bench/echo2025" and revision in (None, "main")
        files = sorted(str(f) for f in (folder / name).glob("test-*.parquet"))
        return real_load("parquet", data_files={"test": files}, split=split, cache_dir=cache_dir)

    class Info:
        sha = "0123456789abcdef0123456789abcdef01234567"

    monkeypatch.setattr(datasets, "load_dataset", load_dataset)
    monkeypatch.setattr(
        datasets, "get_dataset_config_names", lambda path, **kw: sorted(p.name for p in folder.iterdir())
    )
    monkeypatch.setattr(huggingface_hub.HfApi, "dataset_info", lambda self, repo_id, **kw: Info())
    return release


def test_a_hub_id_is_imported_with_its_revision_in_the_card(hub_release, tmp_path):
    out = tmp_path / "bench"
    images = (
        hub_release["images"] / "data"
    )  # the download script's data/ itself (the other tests give its parent)
    _cli("import", "echo2025", "--out", str(out), "--images", str(images), "--offline")
    assert set(_rows(out, "image_to_image")) == set(I2I)
    assert json.loads((out / "import.json").read_text())["images"]["image_to_image"] == {
        "resolved": 3,
        "missing": 1,
    }
    record = json.loads((out / "import.json").read_text())
    assert record["source"] == "echo-bench/echo2025"
    assert record["revision"] == "0123456789abcdef0123456789abcdef01234567"
    card = (out / "README.md").read_text()
    assert "`echo-bench/echo2025` at revision `0123456789abcdef0123456789abcdef01234567`" in card


def test_an_unimported_hub_release_is_refused_by_the_loader(hub_release):
    from echo_dataset.loading import UnimportedReleaseError, load_config, read_config

    for read in (read_config, load_config):
        with pytest.raises(UnimportedReleaseError, match="echo-bench import echo2025 echo-bench/echo2025"):
            read("echo-bench/echo2025", "image_to_image")


def test_assignment_files_of_unexpected_shapes_are_read_leniently(tmp_path):
    from echo_builder.errors import ConfigError
    from echo_builder.release import read_assignments

    (tmp_path / "a.json").write_text(
        json.dumps({"No Color Shift": 5, "id1": None, "id2": {"Text Rendering": "yes"}})
    )
    (tmp_path / "b.json").write_text(json.dumps([1, "x", {"id": "id3", "metrics": {"odd": 1}}]))
    applies, unknown = read_assignments(tmp_path)
    assert applies == {"5": {"no_color_shift"}, "id1": set(), "id2": {"text_rendering"}, "id3": set()}
    assert unknown == []
    (tmp_path / "c.json").write_text("{not json")
    with pytest.raises(ConfigError, match=r"c\.json"):
        read_assignments(tmp_path)


def test_the_mit_variant_with_embedded_images_is_imported_as_it_is(tmp_path):
    import datasets

    from tests.helpers.benchmark import png_bytes

    folder = tmp_path / "echo2025-mit" / "image_to_image"
    folder.mkdir(parents=True)
    features = datasets.Features(
        {
            "id": datasets.Value("string"),
            "prompt": datasets.Value("string"),
            "input_images": datasets.Sequence(datasets.Image()),
            "community_feedback": datasets.Value("string"),
        }
    )
    data = {
        "id": [I_RED, I_BLUE],
        "prompt": ["warmer", "a hat"],
        "input_images": [
            [{"bytes": png_bytes(Image.new("RGB", (20, 10), RED)), "path": None}],
            [{"bytes": b"not an image", "path": None}],
        ],
        "community_feedback": ["", "Hat is wrong"],
    }
    datasets.Dataset.from_dict(data, features=features).to_parquet(
        str(folder / "test-00000-of-00001.parquet")
    )
    out = tmp_path / "bench"
    _cli("import", "echo2025", str(folder.parent), "--out", str(out), "--offline")
    rows = _rows(out, "image_to_image")
    assert Image.open(io.BytesIO(rows[I_RED]["input_images"][0]["bytes"])).size == (20, 10)
    assert rows[I_RED]["media_errors"] == []
    assert rows[I_BLUE]["input_images"] == [None]  # a bad embedded image is that image's error only
    assert len(rows[I_BLUE]["media_errors"]) == 1 and "embedded" in rows[I_BLUE]["media_errors"][0]


def test_only_image_columns_of_text_mark_the_release_schema():
    import pyarrow as pa

    from echo_dataset.features import echo_features
    from echo_dataset.release import release_schema_reason

    assert release_schema_reason(echo_features().arrow_schema) is None
    text_feedback = pa.schema(
        [("id", pa.string()), ("community_feedback", pa.string()), ("input_bboxs", pa.string())]
    )
    assert release_schema_reason(text_feedback) is None  # judge and metrics read neither column
    for kind in (pa.list_(pa.string()), pa.large_list(pa.large_string()), pa.string()):
        reason = release_schema_reason(pa.schema([("id", pa.string()), ("output_images", kind)]))
        assert reason and "output_images" in reason


def test_the_writer_never_splits_a_text_cell_into_characters(tmp_path):
    from echo_dataset.errors import RowError
    from echo_dataset.writer import write_hub_folder

    Image.new("RGB", (8, 8), RED).save(tmp_path / "photo.png")
    row = {
        "id": "r1",
        "prompt": "p",
        "input_images": "photo.png",
        "community_feedback": "It changed her face",
    }
    write_hub_folder({"image_to_image": [row]}, tmp_path / "out", media_root=tmp_path, card_context={})
    written = _rows(tmp_path / "out", "image_to_image")["r1"]
    assert len(written["input_images"]) == 1 and written["input_images"][0]["bytes"]
    assert written["community_feedback"] == [{"post_url": "", "feedback": "It changed her face"}]
    with pytest.raises(RowError, match="input_bboxes is text"):
        write_hub_folder(
            {"image_to_image": [{**row, "input_bboxes": "[1, 2, 3, 4]"}]}, tmp_path / "o2", card_context={}
        )


def test_analyze_reads_the_import(imported, tmp_path):
    """``echo-bench analyze`` takes any benchmark folder, the official release's import included."""
    import json

    from tests.helpers.analysis import assert_md_matches_json

    folder, _ = imported
    out = tmp_path / "analysis"
    _cli("analyze", str(folder), "--out", str(out), "--n-boot", "20")
    doc = json.loads((out / "analysis.json").read_text())
    configs = doc["input"]["configs"]
    samples = {c: len(_rows(folder, c)) for c in ("text_to_image", "image_to_image", "analysis")}
    assert {c: v["samples"] for c, v in configs.items()} == samples
    cats = {r["category"]: r for r in doc["failures"]["categories"]}
    assert (cats["color_drift"]["metric"], cats["color_drift"]["items"]) == ("color_shift", 4)
    assert cats["identity_shift"]["metric"] == "face_identity"
    assert doc["activity"]["undated"] == {
        c: n for c, n in samples.items() if n
    }  # the release has no post times
    assert_md_matches_json(out, doc)
