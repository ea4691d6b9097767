"""``echo-bench demo``: the bundled example posts become a benchmark, outputs and metrics, offline.

Expected values come from the bundled threads (what each one should become, see
``echo_builder/examples/demo/README.md``) and from an independent numpy computation of the color shift on the
bundled images. The demo runs once per module through the CLI (about 4 s).
"""

from __future__ import annotations

import base64
import io
import json
import math
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner
from PIL import Image

from echo_builder.cli import cli
from echo_builder.demo import DEMO_MEDIA_BASE_URL, DemoSummary, demo_data_dir, format_summary

DATA = demo_data_dir()
# root post id -> (config, bundled input photo, color shift applies) for the threads that become benchmark samples
THREADS = {
    "1932000000000000101": ("text_to_image", None, None),
    "1932000000000000201": ("text_to_image", None, None),
    "1932000000000000301": ("image_to_image", "park_photo.jpg", True),
    "1932000000000000401": ("image_to_image", "street_photo.jpg", True),
    "1932000000000000501": ("image_to_image", "living_room.jpg", False),  # "a warm sunset glow": asked for
}
ANALYSIS_ROOT, OFF_TOPIC_ROOT = "1932000000000000601", "1932000000000000701"
MODELS = ["lumen-2", "nova-edit", "pixelforge-1"]


def _cli(*args: str) -> object:
    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


@pytest.fixture(scope="module")
def demo(tmp_path_factory) -> tuple[Path, dict, str]:
    """(demo folder, summary.json, printed text) of one ``echo-bench demo`` run."""
    out = tmp_path_factory.mktemp("demo") / "demo"
    result = _cli("demo", "--out", str(out), "--no-progress")
    assert result.exit_code == 0, result.output
    return out, json.loads((out / "summary.json").read_text()), result.stdout


def _by_root(summary: dict) -> dict[str, dict]:
    return {s["source_post_id"].removeprefix("x:"): s for s in summary["samples"]}


def _mean_rgb(path: Path) -> np.ndarray:
    """Mean of each channel over the levels 5..250 (near-black and near-white dropped), plain numpy."""
    pixels = np.asarray(Image.open(path).convert("RGB"), dtype=np.float64).reshape(-1, 3)
    return np.array([pixels[(pixels[:, c] >= 5) & (pixels[:, c] <= 250), c].mean() for c in range(3)])


def test_every_thread_lands_where_it_should(demo):
    out, summary, _ = demo
    assert summary["configs"] == {"text_to_image": 2, "image_to_image": 3, "analysis": 1}
    by_root = _by_root(summary)
    assert set(by_root) == {*THREADS, ANALYSIS_ROOT}  # the off-topic pricing post is gone
    for root, (config, _, _) in THREADS.items():
        assert by_root[root]["config"] == config
    assert by_root[ANALYSIS_ROOT]["config"] == "analysis"
    stages = {s["name"]: s for s in summary["stages"]}
    # 7 root posts + 9 replies; 7 mention Lumen-2; the pricing post scores 2 < 4; one tree per kept root
    assert (stages["collect"]["out"], stages["query"]["out"], stages["relevance"]["out"]) == (16, 7, 6)
    assert stages["threads"]["out"] == stages["extract"]["out"] == 6
    assert all(s["failures"] == 0 for s in summary["stages"])
    relevance = {
        json.loads(line)["post_id"]: json.loads(line)["score"]
        for line in (out / "benchmark" / "stages" / "relevance.jsonl").read_text().splitlines()
    }
    assert relevance[f"x:{OFF_TOPIC_ROOT}"] == 2
    # prompts come out verbatim, the "prompt in the replies" one from the author's reply
    assert by_root["1932000000000000201"]["prompt"].startswith("a retro travel poster for Mars")
    assert by_root["1932000000000000401"]["prompt"] == "remove the green car from this photo of my street"
    assert any("changed her face" in f for f in by_root["1932000000000000301"]["feedback"])
    assert any("yellow" in f for f in by_root["1932000000000000301"]["feedback"])


def test_benchmark_folder_is_a_loadable_dataset(demo):
    out, summary, _ = demo
    import datasets

    bench = out / "benchmark"
    assert (bench / "README.md").is_file() and (bench / "report.json").is_file()
    by_root = _by_root(summary)
    for config, count in summary["configs"].items():
        assert (bench / config / "test-00000-of-00001.parquet").is_file()
        rows = datasets.load_dataset(str(bench), config)["test"]
        assert len(rows) == count
    i2i = datasets.load_dataset(str(bench), "image_to_image")["test"]
    for row in i2i:
        root = next(r for r, s in by_root.items() if s["id"] == row["id"])
        photo = DATA / "media" / THREADS[root][1]
        # the input is the user's photo (first image of the post), the output the posted edit
        assert len(row["input_images"]) == 1 and len(row["output_images"]) == 1
        assert np.array_equal(
            np.asarray(row["input_images"][0].convert("RGB")), np.asarray(Image.open(photo))
        )


def test_outputs_are_named_by_sample_id(demo):
    out, summary, _ = demo
    ids = {s["id"] for s in summary["samples"] if s["config"] != "analysis"}
    assert summary["models"] == MODELS
    for model in MODELS:
        assert {p.stem for p in (out / "outputs" / model).glob("*.png")} == ids
    for root, sample in _by_root(summary).items():
        if root in THREADS:
            bundled = DATA / "outputs" / "nova-edit" / f"{root}.png"
            assert (
                out / "outputs" / "nova-edit" / f"{sample['id']}.png"
            ).read_bytes() == bundled.read_bytes()


def test_color_shift_matches_an_independent_computation(demo):
    """Per sample: the distance between the numpy mean colors of input and output; the yellow-cast model is far
    above the faithful one; the sunset edit (a color change was asked for) is not scored."""
    out, summary, _ = demo
    rows = pd.read_parquet(out / "metrics" / "image_to_image" / "metrics.parquet")
    rows = rows[rows.metric == "color_shift"].set_index(["model", "sample_id"])
    by_root = _by_root(summary)
    expected: dict[str, list[float]] = {m: [] for m in MODELS}
    for root, (config, photo, applies) in THREADS.items():
        if config != "image_to_image":
            continue
        sid = by_root[root]["id"]
        for model in MODELS:
            row = rows.loc[(model, sid)]
            if not applies:
                assert math.isnan(row.value) and row.nan_reason.startswith("not applicable")
                continue
            value = float(
                np.linalg.norm(
                    _mean_rgb(DATA / "outputs" / model / f"{root}.png") - _mean_rgb(DATA / "media" / photo)
                )
            )
            assert row.value == pytest.approx(value, abs=1e-6)
            expected[model].append(value)
    means = {m: float(np.mean(v)) for m, v in expected.items()}
    assert means["lumen-2"] > means["nova-edit"] + 30  # 45.4 vs 7.9 levels
    table = summary["metrics"]["image_to_image"]
    for model in MODELS:
        cell = table[model]["color_shift"]
        assert cell["mean"] == pytest.approx(means[model], abs=1e-3)
        assert (cell["n"], cell["n_nan"], cell["higher_is_better"]) == (2, 1, False)
    # text_to_image has no input images: nothing offline applies
    t2i = summary["metrics"]["text_to_image"]
    assert all(cell["n"] == 0 and cell["mean"] is None for per in t2i.values() for cell in per.values())


def test_face_identity_when_dlib_is_installed(demo):
    _, summary, _ = demo
    table = summary["metrics"]["image_to_image"]
    if "face_identity" in summary["skipped_metrics"]:
        assert "echo-bench[faces]" in summary["skipped_metrics"]["face_identity"]
        assert all("face_identity" not in per for per in table.values())
        return
    # only the portrait asks to keep a person; nova-edit keeps her face, lumen-2 changed it ("it changed her face")
    cells = {m: table[m]["face_identity"] for m in MODELS}
    assert all(c["n"] == 1 and c["higher_is_better"] for c in cells.values())
    assert cells["nova-edit"]["mean"] > cells["lumen-2"]["mean"]
    assert -1.0 <= min(c["mean"] for c in cells.values()) <= max(c["mean"] for c in cells.values()) <= 1.0


def test_summary_and_printed_text(demo):
    out, summary, text = demo
    assert summary["benchmark_dir"] == str(out / "benchmark") and summary["target_model"] == "Lumen-2"
    assert (
        "structure_distance" in summary["skipped_metrics"]
        and "--dino-weights" in summary["skipped_metrics"]["structure_distance"]
    )
    assert "--judge" in summary["skipped_metrics"]["text_rendering"]
    assert set(summary["judge_commands"]) == {"openai", "transformers"}
    for commands in summary["judge_commands"].values():
        assert all(command in text for command in commands)
    assert "Samples per config: text_to_image 2, image_to_image 3, analysis 1" in text
    lumen = next(line for line in text.splitlines() if line.strip().startswith("lumen-2"))
    assert f"{summary['metrics']['image_to_image']['lumen-2']['color_shift']['mean']:.2f} (n=2)" in lumen
    # the stage table: title on its own line, then a header whose columns end where the numbers do
    lines = text.splitlines()
    title = lines.index("Curation (rules backend, offline):")
    header, collect = lines[title + 1], lines[title + 2]
    assert header.split() == ["stage", "in", "out", "failures"] and collect.split() == [
        "collect",
        "1",
        "16",
        "0",
    ]
    assert [header.index(c) + len(c) for c in ("in", "out", "failures")] == [
        collect.index(" 1 ") + 2,
        collect.index(" 16 ") + 3,
        len(collect),
    ]


def test_summary_text_with_nothing_scored_offline():
    def cell() -> dict:
        return {"mean": None, "n": 0, "n_nan": 2, "higher_is_better": False}

    def summary(metrics: list[str]) -> DemoSummary:
        return DemoSummary(
            out_dir="d", benchmark_dir="d/benchmark", outputs_dir="d/outputs", metrics_dir="d/metrics",
            target_model="Lumen-2", stages=[], configs={"text_to_image": 2}, samples=[], models=["m"],
            metrics={"text_to_image": {"m": {name: cell() for name in metrics}}}, skipped_metrics={},
            judge_commands={},
        )  # fmt: skip

    assert "(color_shift compares an output with its input images;" in format_summary(
        summary(["color_shift"])
    )
    assert "(color_shift, face_identity compare an output" in format_summary(
        summary(["face_identity", "color_shift"])
    )


def test_help_lists_every_entry_the_demo_writes(demo):
    out = demo[0]
    help_text = " ".join(_cli("demo", "--help").output.split())
    for entry in sorted(p.name for p in out.iterdir()):
        assert (entry + ("/" if (out / entry).is_dir() else "")) in help_text


def _image_means(body: dict) -> list[np.ndarray]:
    means = []
    for part in body["messages"][-1]["content"]:
        if part.get("type") == "image_url":
            data = base64.b64decode(part["image_url"]["url"].split(",", 1)[1])
            means.append(
                np.asarray(Image.open(io.BytesIO(data)).convert("RGB"), dtype=float).mean(axis=(0, 1))
            )
    return means


def test_printed_judge_commands_run(demo, openai_server, monkeypatch):
    """The openai commands run as printed against a loopback server (base URL from the environment); a judge that
    marks down color drift puts the yellow-cast model last. The local-judge commands parse against the CLI."""
    _, summary, _ = demo

    def color_judge(body):  # input first, output last; unchanged colors rate 8, a cast rates 3
        images = _image_means(body)
        return "[[3]]" if np.linalg.norm(images[-1] - images[0]) > 25 else "[[8]]"

    openai_server.reply = color_judge
    monkeypatch.setenv("ECHO_OPENAI_BASE_URL", openai_server.base_url)
    commands = summary["judge_commands"]["openai"]
    judge_i2i = next(c for c in commands if "judge" in c.split()[1] and "image_to_image" in c)
    args = shlex.split(judge_i2i)
    assert args[0] == "echo-bench"
    result = _cli(*args[1:])
    assert result.exit_code == 0, result.output
    run = Path(args[args.index("--out") + 1])
    info = json.loads((run / "run.json").read_text())
    assert (info["n_verdicts"], info["ok_verdicts"]) == (9, 9)  # 3 samples x 3 models
    board_cmd = shlex.split(next(c for c in commands if c.startswith(f"echo-bench leaderboard {run}")))
    board = _cli(*board_cmd[1:], "--format", "json", "--n-boot", "100")
    assert board.exit_code == 0, board.output
    ranking = json.loads(board.stdout)
    assert ranking[-1]["model"] == "lumen-2" and ranking[-1]["win_rate"] < ranking[0]["win_rate"]
    local = summary["judge_commands"]["transformers"]
    assert [shlex.split(c)[1] for c in local] == ["judge", "leaderboard", "judge", "leaderboard", "metrics"]
    for command in local:
        name, *rest = shlex.split(command)[1:]
        if name != "leaderboard":  # its RUN folder exists only after the judge run
            cli.commands[name].make_context(
                name, rest
            )  # raises on an unknown option or a missing required one


def test_refuses_a_non_empty_out_and_overwrites_only_its_own_entries(tmp_path):
    missing = _cli("demo", "--out", str(tmp_path / "d"), "--dino-weights", str(tmp_path / "no.safetensors"))
    assert missing.exit_code == 1 and "no such file" in missing.stderr
    assert not (tmp_path / "d").exists()  # a bad option fails before anything is written
    out = tmp_path / "demo"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    refused = _cli("demo", "--out", str(out), "--no-progress")
    assert refused.exit_code == 1 and "--overwrite" in refused.stderr
    assert sorted(p.name for p in out.iterdir()) == ["notes.txt"]
    # --overwrite never deletes in a folder that is not a demo's, even one holding names a demo writes
    (out / "summary.json").write_text("{}")
    (out / "metrics").mkdir()
    (out / "metrics" / "stale.csv").write_text("x")
    foreign = _cli("demo", "--out", str(out), "--overwrite", "--no-progress")
    assert foreign.exit_code == 1 and "is not an earlier demo folder" in foreign.stderr, foreign.output
    assert (out / "metrics" / "stale.csv").read_text() == "x" and (out / "summary.json").read_text() == "{}"
    # in a demo's folder, only the demo's own entries are replaced
    shutil.rmtree(out / "metrics")
    (out / "summary.json").unlink()
    (out / "notes.txt").unlink()
    assert _cli("demo", "--out", str(out), "--no-progress").exit_code == 0
    (out / "notes.txt").write_text("mine")
    (out / "metrics" / "stale.csv").write_text("x")
    # a judge run made by the commands the demo prints: the user's (paid calls), never the demo's to delete
    (out / "runs" / "image_to_image").mkdir(parents=True)
    (out / "runs" / "image_to_image" / "run.json").write_text("{}")
    done = _cli("demo", "--out", str(out), "--overwrite", "--no-progress")
    assert done.exit_code == 0, done.output
    assert (out / "notes.txt").read_text() == "mine" and not (out / "metrics" / "stale.csv").exists()
    assert (out / "runs" / "image_to_image" / "run.json").read_text() == "{}"
    assert json.loads((out / "summary.json").read_text())["configs"]["image_to_image"] == 3


def test_core_path_imports_no_torch(tmp_path):
    """The demo is the core install's main job: it must not import torch (or transformers)."""
    code = (
        "import sys; from echo_builder.demo import run_demo; "
        f"s = run_demo({str(tmp_path / 'd')!r}, progress=False); "
        "print(s.configs['image_to_image'], 'torch' in sys.modules, 'transformers' in sys.modules)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["3", "False", "False"]


def test_bundled_data_is_consistent_and_shipped():
    """Every image URL of the export is bundled; every bundled file is covered by the package-data globs."""
    exports = [json.loads(p.read_text()) for p in sorted((DATA / "exports").glob("*.json"))]
    urls = {m["url"] for page in exports for m in page.get("includes", {}).get("media", [])}
    assert urls == {DEMO_MEDIA_BASE_URL + p.name for p in (DATA / "media").iterdir()}
    tomllib = pytest.importorskip("tomllib")
    pyproject = Path(__file__).resolve().parents[1] / "pyproject.toml"
    globs = tomllib.loads(pyproject.read_text())["tool"]["setuptools"]["package-data"][
        "echo_builder.examples.demo"
    ]
    shipped = {p for pattern in globs for p in DATA.glob(pattern)}
    data_files = {
        p for p in DATA.rglob("*") if p.is_file() and p.suffix != ".py" and "__pycache__" not in p.parts
    }
    assert data_files == shipped
    assert sum(p.stat().st_size for p in data_files) < 300_000


def test_committed_images_are_what_make_images_draws():
    """PNGs without text are pixel-identical to a fresh drawing; with text they may differ only at glyph edges
    (FreeType builds antialias differently; a one-letter typo already moves the mean by 0.3 levels); JPEGs match
    the fresh drawing encoded the same way up to the JPEG library's version."""
    import io

    from echo_builder.examples.demo import make_images

    text = {
        "bookshop.png",
        "mars_poster.png",
        "comparison_chart.png",
        f"{make_images.BOOKSHOP}.png",
        f"{make_images.POSTER}.png",
    }
    drawn = [(DATA / "media" / name, image) for name, image in make_images.media_images().items()]
    drawn += [
        (DATA / "outputs" / model / f"{root}.png", image)
        for model, images in make_images.model_outputs().items()
        for root, image in images.items()
    ]
    for path, image in drawn:
        committed = np.asarray(Image.open(path).convert("RGB"), dtype=float)
        fresh = np.asarray(
            Image.open(io.BytesIO(make_images.encode(image, path.suffix))).convert("RGB"), dtype=float
        )
        difference = np.abs(committed - fresh).mean()
        if path.suffix == ".jpg":
            assert difference < 0.5, path
        elif path.name in text:
            assert difference < 0.1, path
        else:
            assert difference == 0.0, path


@pytest.mark.parametrize(
    ("prompt", "needs_input"),
    [
        ("remove the green car from this photo of my street", True),
        ("change the lighting in my living room photo to a warm sunset glow", True),
        ("turn the attached image into a watercolor", True),
        ("a photo of a cat wearing a tiny hat, studio light", False),
        ("a selfie of an astronaut on the moon, film grain", False),
    ],
)
def test_rules_extract_marks_edits_of_the_users_own_image(prompt, needs_input):
    """The rules baseline reads "my photo" / "this picture" as an edit of the user's image (so roles finds the
    input); a text-to-image prompt that merely mentions a photo is not one."""
    from datetime import datetime, timezone

    from echo_builder.records import MediaRef, Post, Tree
    from echo_builder.stages.extract import rules_extract

    root = Post(
        id="x:1",
        platform="x",
        url="https://x.com/a/status/1",
        author_id="1",
        author="a",
        created_at=datetime(2025, 6, 11, tzinfo=timezone.utc),
        text=f"Lumen-2 test. Prompt: {prompt}",
        media=(
            MediaRef(url="https://e.example/1.png", type="photo"),
            MediaRef(url="https://e.example/2.png", type="photo"),
        ),
    )
    [sample] = rules_extract(Tree(root_id=root.id, posts=(root,), children={}), "Lumen-2")
    assert sample.prompt == prompt and sample.quality == "Benchmark"
    assert sample.needs_input_images is needs_input
