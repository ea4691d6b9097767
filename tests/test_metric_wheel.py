"""The evaluate modules ship in the wheel and load from any folder after a non-editable install."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile

import pytest

from tests.conftest import REPO_ROOT

MODULES = ("color_shift", "structure_distance", "face_identity", "text_rendering", "echo_judge", "win_rate")
SOURCES = ("pyproject.toml", "README.md", "echo_builder", "echo_dataset")


@pytest.mark.slow
def test_the_wheel_ships_the_modules_and_evaluate_loads_them_from_root(tmp_path):
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

    target = tmp_path / "site"
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "--no-deps", "-q", "--target", str(target), str(wheel)],
        check=True,
        env=env,
        capture_output=True,
        timeout=300,
    )
    code = (
        "import evaluate, echo_builder.metrics as m\n"
        f"assert m.__file__.startswith({str(target)!r}), m.__file__\n"
        "grey = [[[100, 100, 100]] * 4] * 4\n"
        "warm = [[[103, 100, 96]] * 4] * 4\n"
        "import numpy as np\n"
        "out = evaluate.load(m.path('color_shift')).compute("
        "predictions=[np.array(warm, np.uint8)], references=[[np.array(grey, np.uint8)]])\n"
        "print(out['color_shift'], out['deltas'])\n"
    )
    run_env = {k: v for k, v in env.items() if k != "PYTHONPATH"}
    run_env["PYTHONPATH"] = str(target)
    done = subprocess.run(
        [sys.executable, "-c", code], cwd="/", env=run_env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip().splitlines()[-1] == "5.0 [[3.0, 0.0, -4.0]]"
