"""The evaluate modules ship in the wheel and load from any folder after a non-editable install (issue 15).

One wheel is built from a copy of the sources and installed with ``pip install --no-deps --target``; then, from
``/`` with only that folder on ``PYTHONPATH`` (the repository is not importable):

- every file of the packages that git tracks is in the wheel (a new prompt YAML, price table, template or demo
  file that ``package-data`` misses fails here, whatever its folder);
- every module folder of ``echo_builder/metrics/`` loads with ``evaluate.load(echo_builder.metrics.path(name))``
  and computes on real arguments: the offline metrics on synthetic images (their values checked), the two
  judge-backed ones through a loopback OpenAI-compatible server;
- ``echo-bench demo`` runs from the wheel alone (its example posts, images and model outputs are package data).
"""

from __future__ import annotations

import importlib.util
import json
import math
import os
import shutil
import subprocess
import sys
import zipfile

import pytest

from tests.conftest import REPO_ROOT

MODULES = (
    "color_shift",
    "structure_distance",
    "face_identity",
    "text_rendering",
    "text_accuracy",
    "echo_judge",
    "win_rate",
)
SOURCES = ("pyproject.toml", "README.md", "echo_builder", "echo_dataset")
PACKAGES = ("echo_builder/", "echo_dataset/")
#: The import each module's optional extra provides (the core runs the others).
EXTRAS = {"structure_distance": "timm", "face_identity": "dlib", "text_accuracy": "rapidocr_onnxruntime"}

#: Run from ``/`` with only the installed wheel importable: every module on real arguments, one line each.
EVERY_MODULE = """
import json, sys
import numpy as np
import evaluate, echo_builder.metrics as m
from PIL import Image, ImageDraw, ImageFont

assert m.__file__.startswith(sys.argv[1]), m.__file__
judge = {"judges": ["openai:fake"], "judge_options": {"openai:fake": {"base_url": sys.argv[2]}}, "cache_dir": sys.argv[3]}
grey, warm = np.full((32, 32, 3), 100, np.uint8), np.full((32, 32, 3), (103, 100, 96), np.uint8)
noise = np.random.default_rng(0).integers(0, 255, (64, 64, 3), dtype=np.uint8)
receipt = Image.new("RGB", (640, 160), "white")
ImageDraw.Draw(receipt).text((30, 40), "TOTAL $721.45", font=ImageFont.load_default(size=56), fill="black")
calls = {
    "color_shift": dict(predictions=[warm], references=[[grey]]),
    "structure_distance": dict(predictions=[noise], references=[noise], weights="random:0"),
    "face_identity": dict(predictions=[grey], references=[grey], backend="dlib"),
    "text_accuracy": dict(predictions=[receipt], prompts=['a receipt, "TOTAL $127.54"']),
    "text_rendering": dict(predictions=[grey], prompts=['a sign that says "OPEN"'], **judge),
    "echo_judge": dict(predictions=[warm], references=[[grey]], prompts=["make it warmer"], **judge),
    "win_rate": dict(model=["a", "b"], sample_id=["1", "1"], score=[7, 4]),
}
assert sorted(calls) == sorted(m.names()), m.names()
for name, kwargs in calls.items():
    if name in json.loads(sys.argv[4]):  # its optional extra is not installed here: loaded, not computed
        evaluate.load(m.path(name))
        continue
    result = evaluate.load(m.path(name)).compute(**kwargs)
    print(json.dumps({name: result[name]}))
"""


def _tracked_package_files() -> list[str] | None:
    """The files git tracks under the packages, or ``None`` outside a git checkout."""
    try:
        done = subprocess.run(
            ["git", "ls-files", "--", *PACKAGES], cwd=REPO_ROOT, capture_output=True, text=True, timeout=60
        )
    except (OSError, subprocess.SubprocessError):
        return None
    files = done.stdout.split()
    return files if done.returncode == 0 and files else None


@pytest.mark.slow
def test_the_wheel_ships_the_modules_and_evaluate_loads_them_from_root(tmp_path, openai_server):
    # build from a copy of the sources, so the build leaves no build/ or *.egg-info in the checkout
    src = tmp_path / "src"
    src.mkdir()
    for name in SOURCES:
        source = REPO_ROOT / name
        if source.is_dir():
            shutil.copytree(source, src / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        else:
            shutil.copy2(source, src / name)
    env = {
        **os.environ,
        "PIP_NO_INDEX": "1",
        "PIP_DISABLE_PIP_VERSION_CHECK": "1",
        "PIP_CACHE_DIR": str(tmp_path / "pip-cache"),
    }
    wheels = tmp_path / "wheels"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            str(src),
            "--no-deps",
            "--no-build-isolation",
            "-q",
            "-w",
            str(wheels),
        ],
        check=True,
        env=env,
        capture_output=True,
        timeout=300,
    )
    (wheel,) = wheels.glob("echo_bench-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
    for module in MODULES:
        for file in (f"{module}.py", "README.md", "app.py", "requirements.txt"):
            assert f"echo_builder/metrics/{module}/{file}" in names, f"{module}/{file} is not in the wheel"
    assert "echo_builder/metrics/__init__.py" in names and "echo_builder/metrics/publish.py" in names
    # the VLM NSFW screening prompt (echo_builder.safety.VlmNsfwChecker) is package data too
    assert "echo_builder/prompt_files/nsfw-screen.yaml" in names
    tracked = _tracked_package_files()
    if tracked is not None:  # every data file, not only the ones named here
        missing = [f for f in tracked if f not in names]
        assert not missing, f"tracked package files missing from the wheel (package-data?): {missing}"
    assert sorted(
        p.name for p in (REPO_ROOT / "echo_builder" / "metrics").iterdir() if (p / f"{p.name}.py").is_file()
    ) == sorted(MODULES)

    target = tmp_path / "site"
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "--no-deps", "-q", "--target", str(target), str(wheel)],
        check=True,
        env=env,
        capture_output=True,
        timeout=300,
    )
    run_env = {k: v for k, v in env.items() if k != "PYTHONPATH"}
    run_env.update(
        PYTHONPATH=str(target),
        HF_HOME=str(tmp_path / "hf"),
        HF_HUB_OFFLINE="1",
        HF_DATASETS_OFFLINE="1",
        OPENAI_API_KEY="test-key",
    )
    openai_server.reply = lambda body: "Looks right. [[8]]"
    # the modules whose extra is missing in this environment are only loaded (a core install runs the rest)
    lacking = {name for name, package in EXTRAS.items() if importlib.util.find_spec(package) is None}
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            EVERY_MODULE,
            str(target),
            openai_server.base_url,
            str(tmp_path / "cache"),
            json.dumps(sorted(lacking)),
        ],
        cwd="/",
        env=run_env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    values = {
        k: v for line in done.stdout.splitlines() if line.startswith("{") for k, v in json.loads(line).items()
    }
    expected = {
        "color_shift": 5.0,  # |(3, 0, -4)|
        "structure_distance": 0.0,  # an image against itself
        "face_identity": None,  # no face in the input: not applicable (NaN, written as null)
        "text_accuracy": 0.75,  # 3 edits in 12 characters
        "text_rendering": pytest.approx((8 - 1) / 9),  # the judge's [[8]], rescaled
        "echo_judge": 8.0,
        "win_rate": {"a": 1.0, "b": 0.0},
    }
    if values.get("face_identity") is not None and math.isnan(values["face_identity"]):
        values["face_identity"] = None
    assert values == {k: v for k, v in expected.items() if k not in lacking}

    demo = subprocess.run(
        [sys.executable, "-m", "echo_builder.cli", "demo", "--out", str(tmp_path / "demo")],
        cwd="/",
        env=run_env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert demo.returncode == 0, demo.stderr[-3000:]
    summary = json.loads((tmp_path / "demo" / "summary.json").read_text(encoding="utf-8"))
    assert summary["configs"] == {"text_to_image": 2, "image_to_image": 3, "analysis": 1}, summary["configs"]
