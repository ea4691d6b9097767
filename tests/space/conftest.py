"""Fixtures of the Space tests: the demo data (``run_demo``), judge runs against the loopback fake OpenAI server,
and the Space launched once per session on 127.0.0.1 in a background thread.

``spaces_app/`` is not an installed package: its ``echo_space`` package is imported from there, as ``app.py`` does.
"""

from __future__ import annotations

import base64
import io
import re
import shutil
import socket
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO_ROOT

SPACE_DIR = REPO_ROOT / "spaces_app"
JUDGES = ("openai:judge-a", "openai:judge-b")
#: Bootstrap replicates of the test Space's leaderboards (the CLI's 1,000 cost seconds per board on a busy CI box;
#: the tests compare the Space with ``leaderboard_from_run`` at the same number and seed).
N_BOOT = 200


def _require_gradio() -> None:
    pytest.importorskip("gradio", reason="the Space needs gradio: pip install -e '.[space]'")
    if str(SPACE_DIR) not in sys.path:
        sys.path.insert(0, str(SPACE_DIR))


def _last_image(body: dict) -> tuple[float, float, float]:
    """Mean R, G, B of the last image in a chat request (the output being judged)."""
    from PIL import Image, ImageStat

    urls = [
        part["image_url"]["url"]
        for message in body["messages"]
        if isinstance(message["content"], list)
        for part in message["content"]
        if part.get("type") == "image_url"
    ]
    data = base64.b64decode(urls[-1].split(",", 1)[1])
    return tuple(ImageStat.Stat(Image.open(io.BytesIO(data)).convert("RGB")).mean)


def scripted_judge(body: dict) -> str:
    """A judge that dislikes yellow casts: rating 5 + (mean blue - mean red) / 20, rounded, clipped to 1..10.

    ``judge-b`` gives no rating at all (a parse failure) for an image whose red exceeds its blue by more than 115
    levels: in the demo only lumen-2's sunset edit (137; the next most yellow output is at 94), so failures show.
    """
    r, _, b = _last_image(body)
    if body["model"] == "judge-b" and r - b > 115:
        return "The image is very yellow; I will not rate it."
    return f"Assessment done. [[{int(min(10, max(1, round(5 + (b - r) / 20))))}]]"


@pytest.fixture(scope="session")
def echo_space():
    """The Space's ``echo_space`` package (skips without gradio)."""
    _require_gradio()
    import echo_space

    return echo_space


@pytest.fixture(scope="session")
def demo_dir(tmp_path_factory) -> Path:
    """``echo-bench demo`` output (benchmark, outputs, metrics) less one output of pixelforge-1, plus a judge run of
    the image-to-image config (``runs/image_to_image``) and its verdicts as a dataset folder."""
    from echo_builder.demo import run_demo
    from echo_builder.judge.run import run_judging
    from echo_dataset.loading import read_config
    from tests.helpers.openai_server import FakeOpenAIServer

    out = tmp_path_factory.mktemp("space-demo") / "demo"
    run_demo(out, progress=False)
    # one missing output, so that "a missing output loses" and "... is skipped" rank differently
    missing = next(
        r["id"] for r in read_config(out / "benchmark", "image_to_image") if "living room" in r["prompt"]
    )
    (out / "outputs" / "pixelforge-1" / f"{missing}.png").unlink()
    with FakeOpenAIServer(scripted_judge) as server:
        run_judging(
            out / "benchmark",
            "image_to_image",
            out / "outputs",
            JUDGES,
            out / "runs" / "image_to_image",
            judge_options={spec: {"base_url": server.base_url} for spec in JUDGES},
            progress=False,
            concurrency=4,
        )
    # the same verdicts as a dataset folder (the shape a Hub dataset of verdicts has): read through `datasets`
    hub = out / "runs" / "verdicts-dataset" / "data"
    hub.mkdir(parents=True)
    shutil.copy(out / "runs" / "image_to_image" / "verdicts.parquet", hub / "train-00000-of-00001.parquet")
    return out


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="session")
def space(demo_dir, tmp_path_factory):
    """The Space on the demo data, launched on 127.0.0.1 (free port) in a background thread; yields its URL."""
    _require_gradio()
    with pytest.MonkeyPatch.context() as env:  # gradio's file cache in a temp dir, for this session only
        env.setenv("GRADIO_TEMP_DIR", str(tmp_path_factory.mktemp("gradio-cache")))
        env.setenv("GRADIO_ANALYTICS_ENABLED", "False")
        from echo_space import SpaceSettings, build_demo, launch

        settings = SpaceSettings(
            benchmark=str(demo_dir / "benchmark"),
            runs=(str(demo_dir / "runs" / "image_to_image"), str(demo_dir / "runs" / "verdicts-dataset")),
            outputs=str(demo_dir / "outputs"),
            n_boot=N_BOOT,
        )
        demo = build_demo(settings)
        launch(demo, port=free_port(), block=False, quiet=True)
        try:
            yield demo
        finally:
            demo.close()


def sample_ids_in_prompt_or_feedback(rows: list[dict], word: str) -> list[str]:
    """Independent search: ids whose id, prompt or any feedback contains ``word`` (case-insensitive)."""
    pattern = re.compile(re.escape(word), re.IGNORECASE)
    return [
        r["id"]
        for r in rows
        if pattern.search(r["id"])
        or pattern.search(r["prompt"] or "")
        or any(pattern.search(f["feedback"] or "") for f in r["community_feedback"] or [])
    ]
