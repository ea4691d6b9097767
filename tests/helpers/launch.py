"""Running a module under ``accelerate launch`` with two CPU processes (a gloo group), for multi-process tests."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest

from tests.conftest import REPO_ROOT


def cpu_env() -> dict[str, str]:
    """Environment for subprocesses: the repository importable, no GPU, one thread per process."""
    return dict(os.environ, PYTHONPATH=str(REPO_ROOT), OMP_NUM_THREADS="1", CUDA_VISIBLE_DEVICES="")


def accelerate_launch(
    module_args: list[str], *, processes: int = 2, timeout: int = 300
) -> subprocess.CompletedProcess:
    """``accelerate launch --multi_gpu --num_processes N -m ...`` on CPU; skips the test when accelerate is absent."""
    accelerate = shutil.which("accelerate", path=os.path.dirname(sys.executable)) or shutil.which(
        "accelerate"
    )
    if accelerate is None:
        pytest.skip("accelerate CLI not found")
    command = [
        accelerate,
        "launch",
        "--multi_gpu",
        "--num_processes",
        str(processes),
        "--num_machines",
        "1",
        "--mixed_precision",
        "no",
        "--dynamo_backend",
        "no",
        "--main_process_port",
        "0",
        "-m",
        *module_args,
    ]
    return subprocess.run(
        command, cwd=REPO_ROOT, env=cpu_env(), capture_output=True, text=True, timeout=timeout
    )
