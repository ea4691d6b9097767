"""The optional ``safety`` build stage (``build --nsfw-check``): NudeNet's real shipped weights on the demo images
and the shared image pairs give ``has_nsfw = false`` with every raw detection recorded; an injected scripted
checker's detection over the threshold sets it true; a bad image is confined to its row; the card and report
record the detector and threshold; without the option nothing changes."""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from echo_builder.cli import cli
from echo_builder.demo import DEMO_LAUNCH_DATE, DEMO_TARGET_MODEL, _seed_media_store, demo_data_dir
from echo_builder.errors import ConfigError, ImageError
from echo_builder.pipeline import BuildConfig, build
from echo_builder.records import MediaRef, Sample
from echo_builder.safety import DEFAULT_THRESHOLD, NUDENET_CLASSES, SafetyResult, create_checker
from echo_builder.stages.registry import StageContext
from echo_builder.stages.safety import row_verdict, run_safety_stage

SHARED_PAIRS = ("image_pairs/yellow_tint", "image_pairs/genai_arena_edits")
# the demo's poster: NudeNet sees BUTTOCKS_EXPOSED at 0.455 (under the 0.6 threshold), recorded, not flagged
POSTER_SHA = "e5908ac449e3a9e3bdd0b2eaa59a954d63a6dc280b8b5051c052d7de89dabc81"


def _jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def _rows(out: Path) -> dict[str, dict[str, Any]]:
    rows = {}
    for file in sorted(out.glob("*/test-*.parquet")):
        for row in pq.read_table(file, columns=["id", "has_nsfw"]).to_pylist():
            rows[row["id"]] = row
    return rows


def _demo_config(out: Path, **fields: Any) -> BuildConfig:
    data = demo_data_dir()
    _seed_media_store(out / "media", data / "media")
    return BuildConfig(
        sources=[data / "exports"],
        out_dir=out,
        target_model=DEMO_TARGET_MODEL,
        launch_date=DEMO_LAUNCH_DATE,
        offline=True,
        progress=False,
        **fields,
    )


class Scripted:
    """A checker whose answers are scripted per image SHA-256: a detection score, or an exception to raise."""

    threshold = 0.6
    detector_id = "scripted-v1"

    def __init__(self, scores: dict[str, float | Exception]) -> None:
        self.scores = scores
        self.seen: list[str] = []

    def check(self, image: Any, *, name: str | None = None) -> SafetyResult:
        digest = hashlib.sha256(Path(image).read_bytes()).hexdigest()
        self.seen.append(digest)
        score = self.scores.get(digest, 0.0)
        if isinstance(score, Exception):
            raise score
        detections = (
            [{"class": "FEMALE_BREAST_EXPOSED", "score": score, "box": [1, 2, 3, 4]}] if score else []
        )
        return SafetyResult(score >= self.threshold, detections, self.detector_id, self.threshold)


# ------------------------------------------------------------------------------------------ real NudeNet weights


@pytest.fixture(scope="module")
def nudenet_build(tmp_path_factory):
    pytest.importorskip("nudenet", reason="the nsfw extra is not installed")
    out = tmp_path_factory.mktemp("nsfw") / "build"
    data = demo_data_dir()
    _seed_media_store(out / "media", data / "media")
    result = CliRunner().invoke(
        cli,
        [
            "build",
            str(data / "exports"),
            "--out",
            str(out),
            "--target-model",
            DEMO_TARGET_MODEL,
            "--launch-date",
            DEMO_LAUNCH_DATE,
            "--offline",
            "--nsfw-check",
            "nudenet",
        ],
    )
    assert result.exit_code == 0, result.output
    return out, result.output


@pytest.mark.slow
def test_demo_build_screened_with_nudenet_is_all_safe(nudenet_build):
    out, printed = nudenet_build
    assert "safety" in printed  # the stage's progress line
    report = json.loads((out / "report.json").read_text())
    entry = report["stages"][-1]
    assert entry["name"] == "safety"
    assert entry["detector"].startswith("nudenet-3.") and ":320n@" in entry["detector"]
    assert entry["threshold"] == DEFAULT_THRESHOLD == 0.6
    # the six dataset rows of the demo all have images (9 distinct ones); none is flagged, none failed
    assert (entry["in"], entry["out"], entry["failures"], entry["flagged"]) == (6, 6, 0, 0)
    assert (entry["images"], entry["image_errors"]) == (9, 0)
    rows = _rows(out)
    assert len(rows) == 6 and all(row["has_nsfw"] is False for row in rows.values())
    samples = _jsonl(out / "stages" / "samples.jsonl")
    assert {s["id"]: s["has_nsfw"] for s in samples if s["id"] in rows} == dict.fromkeys(rows, False)

    images = _jsonl(out / "stages" / "safety.jsonl")
    assert len(images) == 9 and {i["sample_id"] for i in images} == set(rows)
    for image in images:
        assert image["flagged"] is False and image["error"] is None
        assert (out / "media" / image["path"]).is_file() and image["role"] in ("input", "output")
        for d in image["detections"]:  # the raw detections, whatever their class
            assert d["class"] in NUDENET_CLASSES and 0.2 <= d["score"] <= 1.0 and len(d["box"]) == 4
    poster = next(i for i in images if i["sha256"] == POSTER_SHA)
    assert [(d["class"], round(d["score"], 3)) for d in poster["detections"]] == [("BUTTOCKS_EXPOSED", 0.455)]

    card = (out / "README.md").read_text()
    assert (
        f"- NSFW screening: `{entry['detector']}`, threshold 0.6; rows flagged (`has_nsfw` true): 0" in card
    )
    assert "| safety | 6 | 6 | 0 |" in card
    settings = json.loads((out / "build.json").read_text())
    assert settings["nsfw_check"] == {"checker": "nudenet", "threshold": None}
    assert "stages" not in settings  # the built-ins this config enables ran, nothing else


@pytest.mark.slow
@pytest.mark.shared_data
def test_stage_on_the_shared_image_pairs_gives_false_with_detections(shared_data, tmp_path):
    pytest.importorskip("nudenet", reason="the nsfw extra is not installed")
    store = tmp_path / "media"
    samples = []
    for folder in SHARED_PAIRS:
        refs = []
        for path in sorted((shared_data / folder).iterdir()):
            if path.suffix.lower() not in (".jpg", ".webp", ".png"):
                continue
            data = path.read_bytes()
            digest = hashlib.sha256(data).hexdigest()
            (store / digest[:2]).mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path, store / digest[:2] / f"{digest}{path.suffix}")
            refs.append(MediaRef(path=f"{digest[:2]}/{digest}{path.suffix}", sha256=digest))
        samples.append(
            Sample(
                id=f"echo-{folder.rsplit('/', 1)[1]}",
                prompt="edit",
                quality="Benchmark",
                tier="Benchmark",
                input_images=tuple(refs[:1]),
                output_images=tuple(refs[1:]),
            )
        )
    config = BuildConfig(sources=[], out_dir=tmp_path, nsfw_check="nudenet", progress=False)
    context = StageContext(config, tmp_path, store_root=store, prepared={"safety": create_checker("nudenet")})
    context.samples = samples
    output = run_safety_stage(context)
    assert [s.has_nsfw for s in context.samples] == [False, False]
    assert (output.report["in"], output.report["images"], output.report["flagged"]) == (2, 6, 0)
    images = output.files["safety.jsonl"]
    assert len(images) == 6 and all(i["flagged"] is False and i["error"] is None for i in images)
    # the yellow-tint pair is a woman's portrait: her face is detected and recorded, and does not flag
    tint = [d["class"] for i in images if i["sample_id"] == "echo-yellow_tint" for d in i["detections"]]
    assert "FACE_FEMALE" in tint
    assert context.failures == []


# ------------------------------------------------------------------------------------------ scripted checkers


def test_scripted_detection_over_threshold_sets_has_nsfw_true(tmp_path):
    checker = Scripted({POSTER_SHA: 0.91})
    result = build(_demo_config(tmp_path / "b", nsfw_check=checker))
    assert len(checker.seen) == 9 == len(set(checker.seen))  # each distinct image screened once
    flagged = [s.id for s in result.samples if s.has_nsfw]
    assert len(flagged) == 1
    rows = _rows(tmp_path / "b")
    assert rows[flagged[0]]["has_nsfw"] is True
    assert all(r["has_nsfw"] is False for i, r in rows.items() if i != flagged[0])
    entry = result.report["stages"][-1]
    assert (entry["detector"], entry["threshold"], entry["flagged"]) == ("scripted-v1", 0.6, 1)
    images = _jsonl(tmp_path / "b" / "stages" / "safety.jsonl")
    hit = [i for i in images if i["flagged"]]
    assert hit == [
        {
            "sample_id": flagged[0],
            "role": "output",
            "index": 0,
            "path": hit[0]["path"],
            "sha256": POSTER_SHA,
            "flagged": True,
            "detections": [{"class": "FEMALE_BREAST_EXPOSED", "score": 0.91, "box": [1, 2, 3, 4]}],
            "error": None,
        }
    ]
    card = (tmp_path / "b" / "README.md").read_text()
    assert "- NSFW screening: `scripted-v1`, threshold 0.6; rows flagged (`has_nsfw` true): 1" in card


def test_a_bad_image_leaves_its_row_null_and_the_stage_goes_on(tmp_path):
    checker = Scripted({POSTER_SHA: ImageError("truncated file")})
    result = build(_demo_config(tmp_path / "b", nsfw_check=checker))
    entry = result.report["stages"][-1]
    assert (entry["in"], entry["out"], entry["failures"], entry["image_errors"]) == (6, 5, 1, 1)
    verdicts = {s.id: s.has_nsfw for s in result.samples if s.id in _rows(tmp_path / "b")}
    assert sorted(verdicts.values(), key=str) == [False] * 5 + [None]
    bad = next(i for i, v in verdicts.items() if v is None)
    assert _rows(tmp_path / "b")[bad]["has_nsfw"] is None
    failures = [f for f in _jsonl(tmp_path / "b" / "stages" / "failures.jsonl") if f["stage"] == "safety"]
    assert (
        len(failures) == 1 and failures[0]["record_id"] == bad and "truncated file" in failures[0]["reason"]
    )
    image = next(i for i in _jsonl(tmp_path / "b" / "stages" / "safety.jsonl") if i["sha256"] == POSTER_SHA)
    assert image["flagged"] is None and image["detections"] == [] and "truncated file" in image["error"]


def test_without_nsfw_check_the_stage_does_not_run(tmp_path):
    result = build(_demo_config(tmp_path / "b"))
    assert "safety" not in [s["name"] for s in result.report["stages"]]
    assert not (tmp_path / "b" / "stages" / "safety.jsonl").exists()
    assert all(s.has_nsfw is None for s in result.samples)
    assert "NSFW screening" not in (tmp_path / "b" / "README.md").read_text()
    assert "nsfw_check" not in json.loads((tmp_path / "b" / "build.json").read_text())


def test_resuming_with_another_checker_is_refused(tmp_path):
    build(_demo_config(tmp_path / "b", nsfw_check=Scripted({})))
    with pytest.raises(ConfigError, match="nsfw_check"):
        build(_demo_config(tmp_path / "b", resume=True))


@pytest.mark.parametrize(
    ("flags", "verdict"),
    [([False, False], False), ([False, True], True), ([None, True], True), ([None, False], None), ([], None)],
)
def test_row_verdict(flags, verdict):
    assert row_verdict(flags) is verdict


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--nsfw-threshold", "0.5"], "--nsfw-threshold and --nsfw-option need --nsfw-check"),
        (["--nsfw-check", "rules"], "the rules backend sees no image"),
        (["--nsfw-check", "nudenet", "--nsfw-threshold", "1.5"], "--nsfw-threshold"),
        (["--nsfw-check", "nudenet", "--nsfw-option", "iou=0.3"], "unknown nudenet option(s) ['iou']"),
        (["--nsfw-check", "nudenet", "--nsfw-option", "classes=FACE_CAT"], "unknown NudeNet class(es)"),
        (["--nsfw-check", "gpt-4o"], "gpt-4o"),
        (["--nsfw-check", "foo"], "--nsfw-check 'foo' is neither 'nudenet' nor a VLM backend spec"),
    ],
)
def test_bad_screening_options_fail_before_anything_is_written(tmp_path, args, message):
    out = tmp_path / "out"
    result = CliRunner().invoke(cli, ["build", str(demo_data_dir() / "exports"), "--out", str(out), *args])
    assert result.exit_code != 0
    assert message in result.output, result.output
    assert not out.exists()


# ------------------------------------------------------------------------------------------ generate --nsfw-check

COPY_PROGRAM = """
import json, shutil, sys
request = json.load(sys.stdin)
shutil.copyfile(sys.argv[1] + "/" + request["prompt"], request["output_path"])
"""
GENERATED = ("mars_poster.png", "living_room_sunset.png", "bookshop.png")


def _pixels(image: Any) -> str:
    from echo_builder.imaging import load_rgb

    return hashlib.sha256(load_rgb(image).tobytes()).hexdigest()


class ScriptedPixels(Scripted):
    """:class:`Scripted`, keyed by the SHA-256 of the decoded pixels (``generate`` screens re-encoded PNGs)."""

    def check(self, image: Any, *, name: str | None = None) -> SafetyResult:
        digest = _pixels(image)
        self.seen.append(digest)
        score = self.scores.get(digest, 0.0)
        if isinstance(score, Exception):
            raise score
        detections = [{"class": "BUTTOCKS_EXPOSED", "score": score, "box": [5, 6, 7, 8]}] if score else []
        return SafetyResult(score >= self.threshold, detections, self.detector_id, self.threshold)


@pytest.fixture
def copy_model(tmp_path):
    from tests.helpers.benchmark import make_benchmark

    program = tmp_path / "copy_model.py"
    program.write_text(COPY_PROGRAM)
    bench = make_benchmark(
        tmp_path / "bench", "text_to_image", [{"id": f"s{i}", "prompt": n} for i, n in enumerate(GENERATED)]
    )
    media = demo_data_dir() / "media"
    return bench, f"command:{sys.executable} {program} {media}"


@pytest.mark.slow
def test_generate_screens_outputs_with_nudenet(copy_model, tmp_path):
    from echo_builder.generate.manifest import read_manifest

    pytest.importorskip("nudenet", reason="the nsfw extra is not installed")
    bench, spec = copy_model
    out = tmp_path / "outputs"
    args = ["generate", "--benchmark", str(bench), "--config", "text_to_image", "--model", spec]
    result = CliRunner().invoke(cli, [*args, "--name", "copy", "--out", str(out), "--nsfw-check", "nudenet"])
    assert result.exit_code == 0, result.output
    manifest = read_manifest(out / "copy")
    assert manifest["nsfw_screening"]["detector"].startswith("nudenet-3.")
    assert manifest["nsfw_screening"]["threshold"] == 0.6
    records = manifest["samples"]
    assert {r["status"] for r in records.values()} == {"ok"}
    assert all((out / "copy" / f"s{i}.png").is_file() for i in range(3))
    for record in records.values():
        screening = record["screening"]
        assert (
            screening["flagged"] is False and screening["detector"] == manifest["nsfw_screening"]["detector"]
        )
    poster = records["s0"]["screening"]["detections"]
    assert [(d["class"], round(d["score"], 3)) for d in poster] == [("BUTTOCKS_EXPOSED", 0.455)]


def test_generate_withholds_a_flagged_output_and_records_why(copy_model, tmp_path):
    from echo_builder.generate.manifest import generation_failures, read_records
    from echo_builder.generate.run import run_generation

    bench, spec = copy_model
    out = tmp_path / "outputs"
    poster = _pixels(demo_data_dir() / "media" / "mars_poster.png")
    bookshop = _pixels(demo_data_dir() / "media" / "bookshop.png")
    checker = ScriptedPixels({poster: 0.91, bookshop: ImageError("cannot screen")})
    result = run_generation(bench, "text_to_image", spec, "copy", out, nsfw_check=checker, progress=False)
    assert result.summary["statuses"] == {"nsfw": 1, "ok": 1, "error": 1}
    records = read_records(out / "copy")
    flagged = records["s0"]
    assert flagged["status"] == "nsfw" and flagged["file"] is None
    assert flagged["message"] == (
        "withheld by NSFW screening (scripted-v1, threshold 0.6): BUTTOCKS_EXPOSED 0.91"
    )
    assert flagged["screening"] == {
        "detector": "scripted-v1",
        "threshold": 0.6,
        "flagged": True,
        "detections": [{"class": "BUTTOCKS_EXPOSED", "score": 0.91, "box": [5, 6, 7, 8]}],
    }
    assert records["s2"]["status"] == "error" and "cannot screen" in records["s2"]["message"]
    assert records["s1"]["status"] == "ok" and records["s1"]["screening"]["flagged"] is False
    # withheld, never written: judge and metrics see a missing output with the reason
    assert sorted(p.name for p in (out / "copy").glob("*.png")) == ["s1.png"]
    assert generation_failures(out / "copy")["s0"].startswith("generation nsfw: withheld by NSFW screening")
    # a rerun retries the error (now screened safe) and keeps the nsfw record unless --retry-refused
    again = run_generation(
        bench, "text_to_image", spec, "copy", out, nsfw_check=ScriptedPixels({poster: 0.91}), progress=False
    )
    assert again.summary["attempted"] == 1 and again.summary["statuses"] == {"ok": 1}
    assert read_records(out / "copy")["s0"]["status"] == "nsfw"


def test_generate_without_nsfw_check_records_no_screening(copy_model, tmp_path):
    from echo_builder.generate.manifest import read_manifest
    from echo_builder.generate.run import run_generation

    bench, spec = copy_model
    run_generation(bench, "text_to_image", spec, "copy", tmp_path / "o", progress=False)
    manifest = read_manifest(tmp_path / "o" / "copy")
    assert "nsfw_screening" not in manifest
    assert all("screening" not in r and r["status"] == "ok" for r in manifest["samples"].values())
    with pytest.raises(ConfigError, match="need nsfw_check"):
        run_generation(bench, "text_to_image", spec, "copy", tmp_path / "p", nsfw_threshold=0.3)


# ------------------------------------------------------------------------------------------ VLM screening


def _sent_image_pixels(body: dict) -> str:
    """SHA-256 of the decoded pixels of the image in a chat request."""
    import base64

    url = next(
        part["image_url"]["url"]
        for message in body["messages"]
        if isinstance(message["content"], list)
        for part in message["content"]
        if part.get("type") == "image_url"
    )
    return _pixels(base64.b64decode(url.split(",", 1)[1]))


def _vlm_reply(flag: str, *, garbage: str | None = None):
    def reply(body: dict) -> str:
        digest = _sent_image_pixels(body)
        if digest == garbage:
            return "I cannot help with that."
        if digest == flag:
            return '```json\n{"nsfw": true, "confidence": 0.85, "categories": ["buttocks_or_anus", "x"]}\n```'
        return '{"nsfw": false, "confidence": 0.97, "categories": []}'

    return reply


def test_vlm_checker_sends_the_versioned_prompt_and_reads_the_answer(openai_server):
    from echo_builder.safety import VlmNsfwChecker, load_nsfw_prompt

    poster = demo_data_dir() / "media" / "mars_poster.png"
    openai_server.reply = _vlm_reply(_pixels(poster))
    checker = VlmNsfwChecker("openai:screen-vlm", options={"base_url": openai_server.base_url})
    prompt = load_nsfw_prompt()
    assert (
        checker.detector_id == f"vlm:openai:screen-vlm+{prompt.version}"
        and prompt.version == "nsfw-screen-v1"
    )
    result = checker.check(poster)
    assert result.flagged is True and result.threshold == 0.5
    assert result.detections == [
        {
            "class": "NSFW",
            "score": 0.85,
            "box": None,
            "categories": ["buttocks_or_anus"],
        }  # unknown ones dropped
    ]
    body = openai_server.log.bodies[-1]
    assert body["messages"][0] == {"role": "system", "content": prompt.system}
    user = body["messages"][1]["content"]
    text = next(part["text"] for part in user if part["type"] == "text")
    assert "genitals, female_breast, buttocks_or_anus, sexual_activity, minor_sexualized" in text
    assert "{categories}" not in text and body["temperature"] == 0.0
    safe = checker.check(demo_data_dir() / "media" / "bookshop.png")
    assert safe.flagged is False and safe.detections[0]["class"] == "SAFE"
    strict = VlmNsfwChecker("openai:screen-vlm", threshold=0.9, options={"base_url": openai_server.base_url})
    assert strict.check(poster).flagged is False  # "nsfw" at 0.85 < 0.9


def test_build_screened_by_a_vlm_flags_caches_and_confines_a_bad_answer(openai_server, tmp_path):
    poster = _pixels(demo_data_dir() / "media" / "mars_poster.png")
    bookshop = _pixels(demo_data_dir() / "media" / "bookshop.png")
    openai_server.reply = _vlm_reply(poster, garbage=bookshop)
    options = {"base_url": openai_server.base_url}
    config = _demo_config(
        tmp_path / "b", nsfw_check="openai:screen-vlm", nsfw_options=options, max_attempts=1
    )
    result = build(config)
    entry = result.report["stages"][-1]
    assert entry["detector"] == "vlm:openai:screen-vlm+nsfw-screen-v1" and entry["threshold"] == 0.5
    assert (entry["in"], entry["out"], entry["failures"], entry["flagged"], entry["images"]) == (
        6,
        5,
        1,
        1,
        9,
    )
    verdicts = sorted((s.has_nsfw for s in result.samples if s.id in _rows(tmp_path / "b")), key=str)
    assert verdicts == [False, False, False, False, None, True]
    bad = next(i for i in _jsonl(tmp_path / "b" / "stages" / "safety.jsonl") if i["error"])
    assert "contains no JSON" in bad["error"] and "reply was: 'I cannot help with that.'" in bad["error"]
    calls = openai_server.calls
    assert calls == 9
    # resumed: every call, the unparsable answer included, comes from the build's call cache
    again = build(
        _demo_config(tmp_path / "b", nsfw_check="openai:screen-vlm", nsfw_options=options, resume=True)
    )
    assert openai_server.calls == calls == 9
    assert [s.has_nsfw for s in again.samples] == [s.has_nsfw for s in result.samples]


def test_importing_the_stage_pulls_no_model_package():
    code = (
        "import sys\n"
        "from echo_builder.stages.registry import stage_order\n"
        "import echo_builder.stages.safety, echo_builder.safety\n"
        "assert 'safety' in [d.name for d in stage_order(optional=True)]\n"
        "heavy = ('nudenet', 'cv2', 'onnxruntime', 'openai', 'torch')\n"
        "print(','.join(m for m in heavy if m in sys.modules))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
    )
    assert done.stdout.strip() == ""


def test_a_vlm_build_screens_with_the_same_server_and_shares_its_call_cache(openai_server, tmp_path):
    from PIL import Image

    from tests.helpers.media_server import MediaServer
    from tests.test_build_vlm import _command, _setup, scripted

    crop = _pixels(Image.new("RGB", (140, 280), (200, 0, 0)))  # the screenshot's crop: the one image flagged

    def reply(body: dict) -> str:
        if "You screen images" in body["messages"][0]["content"]:
            red = _sent_image_pixels(body) == crop
            return json.dumps({"nsfw": red, "confidence": 0.9, "categories": ["genitals"] if red else []})
        return scripted(body)

    openai_server.reply = reply
    extra = ("--nsfw-check", "openai:vlm", "--nsfw-option", f"base_url={openai_server.base_url}")
    with MediaServer() as media:
        posts = _setup(tmp_path, media)
        out = tmp_path / "out"
        result = CliRunner().invoke(cli, _command(posts, out, openai_server, *extra), catch_exceptions=False)
        assert result.exit_code == 0, result.output
        calls = openai_server.calls
        again = CliRunner().invoke(cli, _command(posts, out, openai_server, *extra, "--resume"))
        assert again.exit_code == 0, again.output
    assert openai_server.calls == calls  # the screening calls too came from the build's cache
    screens = [b for b in openai_server.log.bodies if "You screen images" in b["messages"][0]["content"]]
    assert len(screens) == 4  # edit input, edit output, the yellow square, the screenshot's crop
    entry = json.loads((out / "report.json").read_text())["stages"][-1]
    assert (entry["name"], entry["detector"], entry["flagged"], entry["images"]) == (
        "safety",
        "vlm:openai:vlm+nsfw-screen-v1",
        1,
        4,
    )
    rows = {}
    for file in sorted(out.glob("*/test-*.parquet")):
        rows.update(
            {
                r["prompt"]: r["has_nsfw"]
                for r in pq.read_table(file, columns=["prompt", "has_nsfw"]).to_pylist()
            }
        )
    assert rows == {
        "put my photo in a green field": False,
        "a yellow square": False,
        "make the square red": True,
    }


def test_skipping_the_safety_stage_says_what_to_do_instead(tmp_path):
    from echo_builder.stages.registry import active_stages

    with pytest.raises(ConfigError, match="the optional stage 'safety' does not run in this build"):
        active_stages(["safety"])
    with pytest.raises(ConfigError, match="the stage 'safety' cannot be skipped"):
        active_stages(["safety"], _demo_config(tmp_path / "b", nsfw_check=Scripted({})))
    assert [d.name for d in active_stages((), _demo_config(tmp_path / "c", nsfw_check="nudenet"))][
        -1
    ] == "safety"


def test_a_prompt_file_of_ones_own_is_sent_and_a_bad_one_is_named(openai_server, tmp_path):
    import yaml

    from echo_builder.safety import NSFW_PROMPT_FILE

    data = yaml.safe_load(NSFW_PROMPT_FILE.read_text(encoding="utf-8"))
    mine = tmp_path / "strict.yaml"
    mine.write_text(yaml.safe_dump({**data, "version": "strict-v2", "system": "Screen strictly."}))
    openai_server.reply = lambda body: '{"nsfw": false, "confidence": 0.6}'
    options = {"base_url": openai_server.base_url, "prompt_file": str(mine)}
    checker = create_checker("openai:screen-vlm", options=options)
    assert checker.detector_id == "vlm:openai:screen-vlm+strict-v2"
    assert checker.check(demo_data_dir() / "media" / "bookshop.png").flagged is False
    assert openai_server.log.bodies[-1]["messages"][0]["content"] == "Screen strictly."

    broken = tmp_path / "broken.yaml"
    broken.write_text(yaml.safe_dump({**data, "version": "", "categories": "genitals"}))
    with pytest.raises(ConfigError, match=r"broken.yaml'?: missing or invalid version, categories"):
        create_checker("openai:screen-vlm", options={**options, "prompt_file": str(broken)})
    (tmp_path / "other.yaml").write_text("format: echo-bench-judge-prompt/1\n")
    with pytest.raises(ConfigError, match="is not of format 'echo-bench-nsfw-prompt/1'"):
        create_checker("openai:screen-vlm", options={**options, "prompt_file": str(tmp_path / "other.yaml")})
