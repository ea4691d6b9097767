"""Test-wide isolation: no network but loopback, Hugging Face offline with temp caches, no real API keys.

The environment is set at import time, before any test module can import ``huggingface_hub`` or
``transformers`` (they read these variables once, on import). Sockets other than loopback are blocked by
``pytest-socket`` (``--allow-hosts`` in ``pyproject.toml``).
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

from tests.helpers.properties import profile_name

_HF_TMP = tempfile.mkdtemp(prefix="echo-bench-tests-hf-")
os.environ.update(
    {
        "HF_HUB_OFFLINE": "1",
        "HF_DATASETS_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "HF_EVALUATE_OFFLINE": "1",
        "HF_HOME": _HF_TMP,
        "HF_HUB_CACHE": os.path.join(_HF_TMP, "hub"),
        "HF_DATASETS_CACHE": os.path.join(_HF_TMP, "datasets"),
        "HF_EVALUATE_CACHE": os.path.join(_HF_TMP, "evaluate"),
        "TORCH_HOME": os.path.join(_HF_TMP, "torch"),
        "XDG_CACHE_HOME": os.path.join(_HF_TMP, "xdg"),
        "HF_HUB_DISABLE_TELEMETRY": "1",
        "TOKENIZERS_PARALLELISM": "false",
    }
)
for _name in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "ECHO_OPENAI_API_KEY", "ECHO_OPENAI_BASE_URL", "HF_TOKEN"):
    os.environ.pop(_name, None)

# Property tests: derandomised in CI (the same examples on every run: a failure is a defect, never luck); the long
# profile (bench/properties.py) draws fresh examples with larger budgets (tests.helpers.properties.examples).
_PROFILE_DEFAULTS = dict(
    database=None, deadline=None, print_blob=True, suppress_health_check=[HealthCheck.too_slow]
)
settings.register_profile("ci", derandomize=True, **_PROFILE_DEFAULTS)
settings.register_profile("long", derandomize=False, **_PROFILE_DEFAULTS)
settings.load_profile(profile_name())

pytest_plugins = ["tests.helpers.face_fixtures"]

REPO_ROOT = Path(__file__).resolve().parents[1]
SHARED_DATA = Path(os.environ.get("ECHO_SHARED_DATA", REPO_ROOT.parent / "shared" / "data"))


_LOOPBACK_NAMES = {"localhost", "ip6-localhost"}


@pytest.fixture(autouse=True)
def _no_dns(monkeypatch):
    """Name lookups leave the machine too (pytest-socket blocks connections, not DNS): refuse all but loopback."""
    import socket

    real = socket.getaddrinfo

    def loopback_only(host, *args, **kwargs):
        import ipaddress

        name = host.decode() if isinstance(host, bytes) else str(host)
        try:
            ipaddress.ip_address(name.strip("[]"))  # a literal address needs no lookup
        except ValueError:
            if name not in _LOOPBACK_NAMES:
                raise socket.gaierror(
                    socket.EAI_NONAME, f"tests may not resolve {name!r} (no network in tests)"
                ) from None
        return real(host, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", loopback_only)


@pytest.fixture
def shared_data() -> Path:
    """``../shared/data`` (or ``$ECHO_SHARED_DATA``); the test is skipped when it is absent."""
    if not SHARED_DATA.is_dir():
        pytest.skip(f"shared data not found at {SHARED_DATA}")
    return SHARED_DATA


@pytest.fixture
def openai_server():
    """A started :class:`FakeOpenAIServer` with default replies and no faults (tests tweak its attributes)."""
    from tests.helpers.openai_server import FakeOpenAIServer

    with FakeOpenAIServer() as server:
        yield server


@pytest.fixture(scope="session")
def tiny_vlm(tmp_path_factory) -> Path:
    """Folder of a tiny random Qwen2-VL (model, tokenizer, image processor, chat template), built once."""
    pytest.importorskip("transformers")
    pytest.importorskip("torch")
    from tests.helpers.tiny_vlm import build_tiny_qwen2_vl

    return build_tiny_qwen2_vl(tmp_path_factory.mktemp("tiny-vlm"))
