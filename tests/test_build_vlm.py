"""`echo-bench build` end to end with a scripted LLM/VLM on the loopback server and images served over HTTP."""

from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys
import time
from datetime import datetime, timedelta, timezone

import datasets
import pytest
from click.testing import CliRunner
from PIL import Image

from echo_builder.cli import cli
from echo_builder.records import MediaRef, Post
from tests.conftest import REPO_ROOT
from tests.helpers.kill_resume import shared_salt_file
from tests.helpers.media_server import MediaServer, Reply
from tests.helpers.openai_server import FaultPlan

T0 = datetime(2025, 3, 27, tzinfo=timezone.utc)


def _png(color, size=(64, 64)):
    buf = io.BytesIO()
    img = Image.new("RGB", size, (255, 255, 255))
    img.paste(color, (0, 0, size[0], size[1]) if size[1] < 400 else (20, 100, 180, 300))
    if size[1] >= 400:
        img.paste((200, 0, 0), (20, 400, 180, 700))
    img.save(buf, format="PNG")
    return buf.getvalue()


def _setup(tmp_path, server, delay_s=0.0):
    urls = {
        "edit_in": server.route("/edit_in.png", Reply(body=_png((0, 0, 200)), delay_s=delay_s)),
        "edit_out": server.route("/edit_out.png", Reply(body=_png((0, 200, 0)), delay_s=delay_s)),
        "t2i": server.route("/t2i.png", Reply(body=_png((200, 200, 0)), delay_s=delay_s)),
        "shot": server.route("/shot.png", Reply(body=_png((0, 200, 0), size=(200, 800)), delay_s=delay_s)),
    }
    posts = [
        Post(
            id="x:1",
            platform="x",
            url="https://x.com/a/status/1",
            author_id="a",
            created_at=T0,
            text="GPT-4o edit! prompt: put my photo in a green field",
            media=(MediaRef(url=urls["edit_in"]), MediaRef(url=urls["edit_out"])),
        ),
        Post(
            id="x:2",
            platform="x",
            url="https://x.com/b/status/2",
            author_id="b",
            created_at=T0 + timedelta(hours=1),
            text="GPT-4o made this. prompt: a yellow square",
            media=(MediaRef(url=urls["t2i"]),),
        ),
        Post(
            id="x:3",
            platform="x",
            url="https://x.com/c/status/3",
            author_id="c",
            created_at=T0 + timedelta(hours=2),
            text="my GPT-4o chat, prompt in the screenshot",
            media=(MediaRef(url=urls["shot"]),),
        ),
    ]
    path = tmp_path / "posts.jsonl"
    path.write_text("\n".join(p.model_dump_json() for p in posts) + "\n")
    return path


def scripted(body):
    system = body["messages"][0]["content"]
    user = body["messages"][1]["content"]
    text = user if isinstance(user, str) else user[-1]["text"]
    if "Rate the post" in text:
        return '{"score": 5}'
    if "benchmark samples" in system:  # extract
        url = text.split("[1] ", 1)[1].split(" ", 1)[0]
        prompt = {"1": "put my photo in a green field", "2": "a yellow square", "3": ""}[
            url.rsplit("/", 1)[-1]
        ]
        return json.dumps({"samples": [{"prompt": prompt, "post_urls": [url], "quality": "Benchmark"}]})
    if "sort the images" in system:  # roles
        if "green field" in text:
            return '{"inputs": [0], "outputs": [1]}'
        if "<prompt>\n\n</prompt>" in text:
            return '{"inputs": [], "outputs": [0], "conversation_screenshot": true}'
        return '{"inputs": [], "outputs": [0]}'
    if "screenshots precisely" in system:  # pixels of the image it was sent (the 200 x 800 shot, resized)
        from tests.test_judge import _images

        width, height = _images(body)[0].size
        box = [20 * width / 200, 400 * height / 800, 180 * width / 200, 700 * height / 800]
        return json.dumps({"prompt": "make the square red", "boxes": [{"role": "output", "bbox": box}]})
    if "last quality check" in system:
        return '{"tier": "Benchmark", "review": null}'
    if "which automatic metrics" in system:
        return '{"face_identity": false, "structure": true, "no_color_shift": false, "text_rendering": false}'
    raise AssertionError(f"unexpected call: {system[:60]}")


def _command(posts, out, server, *extra):
    return [
        "build",
        str(posts),
        "--out",
        str(out),
        "--backend",
        "openai:vlm",
        "--base-url",
        server.base_url,
        "--target-model",
        "GPT-4o",
        "--media-allow",
        "127.0.0.1",
        "--concurrency",
        "2",
        "--salt-file",  # one salt for every build of these posts: separate builds compare byte for byte
        str(shared_salt_file(posts)),
        *extra,
    ]


def test_build_follows_the_scripted_vlm(openai_server, tmp_path):
    openai_server.reply = scripted
    with MediaServer() as media:
        posts = _setup(tmp_path, media)
        out = tmp_path / "out"
        result = CliRunner().invoke(cli, _command(posts, out, openai_server), catch_exceptions=False)
        assert result.exit_code == 0, result.output
        assert media.total_hits == 4  # each image downloaded once
    i2i = datasets.load_dataset(str(out), "image_to_image")["test"]
    t2i = datasets.load_dataset(str(out), "text_to_image")["test"]
    assert [r["prompt"] for r in i2i] == ["put my photo in a green field"]
    row = i2i[0]
    assert row["input_images"][0].convert("RGB").getpixel((5, 5)) == (0, 0, 200)
    assert row["output_images"][0].convert("RGB").getpixel((5, 5)) == (0, 200, 0)
    assert (row["structure"], row["no_color_shift"], row["face_identity"]) == (True, False, False)
    assert row["input_image_urls"][0].endswith("/edit_in.png")
    by_prompt = {r["prompt"]: r for r in t2i}
    assert set(by_prompt) == {"a yellow square", "make the square red"}
    shot = by_prompt["make the square red"]  # read from the screenshot, with the crop as the output
    crop = shot["output_images"][0].convert("RGB")
    assert crop.size == (160 - 20, 300 - 20) and crop.getpixel((5, 5)) == (200, 0, 0)
    assert [(b["role"], b["x1"], b["y2"]) for b in shot["input_bboxes"]] == [("output", 20.0, 700.0)]
    report = json.loads((out / "report.json").read_text())
    stages = {s["name"]: s for s in report["stages"]}
    assert stages["applicability"]["configs"] == {"image_to_image": 1, "text_to_image": 2, "analysis": 0}
    assert stages["tier"]["Benchmark"] == 3 and report["versions"]["prompts"]["tier"] == "tier-v1"
    assert stages["screenshots"]["box_format"] == "pixels"  # how the boxes were read is part of the report


@pytest.mark.slow
def test_sigkill_during_media_then_resume(openai_server, tmp_path):
    openai_server.reply = scripted
    env = dict(os.environ, PYTHONPATH=str(REPO_ROOT))
    with MediaServer() as media:
        posts = _setup(tmp_path, media, delay_s=0.4)
        killed, clean = tmp_path / "killed", tmp_path / "clean"
        args = [sys.executable, "-m", "echo_builder.cli", *_command(posts, killed, openai_server)]
        proc = subprocess.Popen(args, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        deadline = time.monotonic() + 60
        while media.total_hits < 2 and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.01)
        time.sleep(0.5)  # let the first downloads land in the store
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        calls_before = openai_server.calls
        stored_before = sum(1 for p in (killed / "media").rglob("*.png"))
        hits_before = media.total_hits
        done = subprocess.run([*args, "--resume"], env=env, capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr
        assert media.total_hits - hits_before == 4 - stored_before  # stored images are not downloaded again
        resumed = openai_server.log.bodies[calls_before:]
        subprocess.run(
            [sys.executable, "-m", "echo_builder.cli", *_command(posts, clean, openai_server)],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
            check=True,
        )
    # relevance and extract had finished before the kill (media comes after them): the resumed run repeats none
    assert resumed and not any(
        "Rate the post" in json.dumps(b) or "benchmark samples" in json.dumps(b) for b in resumed
    )
    for config in ("image_to_image", "text_to_image", "analysis"):
        a = (killed / config / "test-00000-of-00001.parquet").read_bytes()
        b = (clean / config / "test-00000-of-00001.parquet").read_bytes()
        assert a == b, config
    assert (killed / "report.json").read_bytes() == (clean / "report.json").read_bytes()


def _is_relevance(body) -> bool:
    user = body["messages"][1]["content"]
    return "Rate the post" in (user if isinstance(user, str) else user[-1]["text"])


def test_max_attempts_bounds_the_retries_and_counts_the_failures(openai_server, tmp_path):
    # every relevance call fails with a 500: with --max-attempts 2 each of the 3 posts is tried exactly twice,
    # then counted as a relevance failure (nothing else is asked about a post that was never rated)
    openai_server.reply = scripted
    openai_server.faults = FaultPlan(always=_is_relevance, always_kind="500")
    with MediaServer() as media:
        posts = _setup(tmp_path, media)
        out = tmp_path / "out"
        command = _command(posts, out, openai_server, "--max-attempts", "2", "--timeout", "10")
        result = CliRunner().invoke(cli, command, catch_exceptions=False)
    # every call of a stage failed: the build says so and exits 1, keeping the report and failures
    assert result.exit_code == 1 and "every model call of relevance failed" in result.output, result.output
    relevance_requests = [b for b in openai_server.log.bodies if _is_relevance(b)]
    assert len(relevance_requests) == 3 * 2
    stages = {s["name"]: s for s in json.loads((out / "report.json").read_text())["stages"]}
    assert (stages["relevance"]["in"], stages["relevance"]["out"], stages["relevance"]["failures"]) == (
        3,
        0,
        3,
    )
