"""``transformers serve`` (transformers' own OpenAI-compatible FastAPI server) on a loopback port, for tests.

The server runs in a child process pinned to one local model folder, fully offline (``HF_HUB_OFFLINE=1``, a
temporary ``HF_HOME``), on a free port of 127.0.0.1. :func:`transformers_serve` waits for ``GET /health`` up to a
deadline, yields the ``/v1`` base URL, and terminates the process (then kills it) on exit. Its log is kept in a
file and shown when it fails to start.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

__all__ = ["ServeUnavailable", "free_loopback_port", "transformers_serve"]

#: seconds ``transformers serve`` gets to load the tiny model and answer ``/health`` (about 15 s on a busy CPU)
STARTUP_DEADLINE_S = 120.0


class ServeUnavailable(RuntimeError):
    """``transformers serve`` could not start (missing ``transformers[serving]`` extra, or it exited)."""


def free_loopback_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as response:  # loopback only
            return response.status == 200
    except OSError:
        return False


@contextlib.contextmanager
def transformers_serve(model_dir: str | Path, *, deadline_s: float = STARTUP_DEADLINE_S) -> Iterator[str]:
    """Run ``transformers serve MODEL_DIR`` on a free loopback port; yields ``http://127.0.0.1:PORT/v1``.

    Raises :class:`ServeUnavailable` when the serving extra is missing, the process exits early or ``/health``
    does not answer within ``deadline_s`` seconds.
    """
    from transformers.utils.import_utils import is_serve_available

    if not is_serve_available():
        raise ServeUnavailable(
            'transformers serve needs the serving extra: pip install "transformers[serving]"'
        )
    with tempfile.TemporaryDirectory(prefix="echo-serve-") as tmp:
        env = dict(
            os.environ,
            HF_HUB_OFFLINE="1",
            TRANSFORMERS_OFFLINE="1",
            HF_HUB_DISABLE_TELEMETRY="1",
            HF_HOME=str(Path(tmp) / "hf_home"),
            CUDA_VISIBLE_DEVICES="",
            TOKENIZERS_PARALLELISM="false",
        )
        log_path = Path(tmp) / "serve.log"
        for attempt in range(3):  # the free port may be taken while the model loads: try another one
            port = free_loopback_port()
            process = _start(model_dir, port, env, log_path)
            try:
                deadline = time.monotonic() + deadline_s
                while not (process.poll() is None and _serves(port, str(model_dir))):
                    if process.poll() is not None or time.monotonic() > deadline:
                        tail = log_path.read_text(errors="replace")[-3000:]
                        if process.poll() is not None and "address already in use" in tail and attempt < 2:
                            break
                        why = (
                            "exited"
                            if process.poll() is not None
                            else f"did not serve within {deadline_s:g} s"
                        )
                        raise ServeUnavailable(f"transformers serve {why}:\n{tail}")
                    time.sleep(0.25)
                else:
                    yield f"http://127.0.0.1:{port}/v1"
                    return
            finally:
                _stop(process)


def _start(model_dir: str | Path, port: int, env: dict[str, str], log_path: Path) -> subprocess.Popen:
    command = [
        sys.executable,
        "-c",
        "import sys; from transformers.cli.transformers import main; sys.exit(main())",
        "serve",
        str(model_dir),
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--device",
        "cpu",
        "--dtype",
        "float32",
    ]
    with open(log_path, "wb") as log:
        return subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT)


def _serves(port: int, model: str) -> bool:
    """``/health`` answers and ``/v1/models`` lists ``model``: it is our server, not another on a reused port."""
    if not _healthy(f"http://127.0.0.1:{port}/health"):
        return False
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/models", timeout=5) as response:
            return any(m.get("id") == model for m in json.loads(response.read()).get("data", []))
    except (OSError, ValueError):
        return False


def _stop(process: subprocess.Popen) -> None:
    if process.poll() is not None:
        return
    process.terminate()
    try:
        process.wait(timeout=15)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(timeout=15)
