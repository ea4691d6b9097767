"""``echo-bench build EXPORT --expand x`` killed with SIGKILL at seeded points and run again (``--resume``) until it
completes: the expansion's pages and every stage file are byte-identical to an uninterrupted build's, and only a
request in flight at a kill is ever asked twice.

The CLI runs as a subprocess against the loopback replay server (the real X API v2 recording of one conversation:
two search pages and the root's lookup), which answers after 0.3 s so a kill can land while a request is in
flight, between pages, or while a page is appended to ``OUT/expand/pages.jsonl``.
"""

from __future__ import annotations

import os
import random
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from tests.helpers.kill_resume import kill_at_requests
from tests.helpers.replay_server import ReplayServer
from tests.test_build_expand import X_TOKEN, _outputs, _x_export, _x_scenario

pytestmark = pytest.mark.shared_data

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def recordings(shared_data: Path) -> Path:
    path = shared_data / "api_recordings"
    if not (path / "x_api_v2").is_dir():
        pytest.skip("no X API recordings")
    return path


def _command(export: Path, keywords: Path, out: Path, url: str, *extra: str) -> list[str]:
    return [
        sys.executable, "-m", "echo_builder.cli", "build", str(export), "--out", str(out),
        "--keywords", str(keywords), "--threshold", "1", "--offline",
        "--expand", "x", "--expand-base-url", url, *extra,
    ]  # fmt: skip


def _serve(server: ReplayServer, recordings: Path) -> None:
    """The scenario with each answer available 4 times: a request in flight at a kill is asked again."""
    _x_scenario(server, recordings)
    for route in server.routes:
        route.replies = route.replies * 4


def _env() -> dict[str, str]:
    return {**os.environ, "X_BEARER_TOKEN": X_TOKEN, "PYTHONPATH": str(REPO)}


def _asked(server: ReplayServer) -> Counter:
    return Counter(
        (r.path, r.params.get("query"), r.params.get("ids"), r.params.get("next_token"))
        for r in server.requests
    )


@pytest.mark.parametrize("seed", [0])  # one trial of two kills (each ~10 s); collect's test runs three
def test_a_build_sigkilled_during_expansion_resumes_byte_identical(recordings, tmp_path, seed):
    export = tmp_path / "export.jsonl"
    _x_export(recordings, export)
    keywords = tmp_path / "keywords.txt"
    keywords.write_text("gpt-4o\n", encoding="utf-8")
    straight = tmp_path / "straight"
    with ReplayServer() as server:
        _x_scenario(server, recordings)
        done = subprocess.run(
            _command(export, keywords, straight, server.url), env=_env(), capture_output=True
        )
        assert done.returncode == 0, done.stderr
        pages = len(server.requests)
    assert pages == 3

    rng = random.Random(seed)
    out = tmp_path / "killed"
    with ReplayServer(delay_s=0.3) as server:
        _serve(server, recordings)
        kills = kill_at_requests(
            lambda run: _command(export, keywords, out, server.url, *(("--resume",) if out.exists() else ())),
            _env(),
            server,
            rng,
            runs=8,
        )
        asked = _asked(server)
        assert server.misses == []
    got, expected = _outputs(out), _outputs(straight)
    assert got.keys() == expected.keys()
    for name in expected:
        if name != "build.json":  # build.json records the folder and the run's times
            assert got[name] == expected[name], name
    assert kills >= 1
    assert len(asked) == pages
    assert sum(asked.values()) <= pages + kills  # only a request in flight at a kill is asked again
