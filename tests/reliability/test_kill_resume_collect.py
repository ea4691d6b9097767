"""``echo-bench collect x`` killed with SIGKILL at seeded points and run again until it completes: the files are
byte-identical to an uninterrupted run's, and only a request in flight at a kill is ever asked twice.

The CLI runs as a subprocess against the loopback replay server (real X API v2 recordings, 4 pages over 2
queries), which answers after 0.3 s so a kill can land while a request is in flight, between pages, or while a
page is written.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from collections import Counter
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from tests.helpers.kill_resume import kill_at_requests
from tests.helpers.replay_server import ReplayServer
from tests.test_collect_x import Q1, Q2, Q2_TOKEN, RECENT, TOKEN, _files, _pages

pytestmark = pytest.mark.shared_data

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def rec(shared_data: Path) -> Path:
    path = shared_data / "api_recordings" / "x_api_v2"
    if not path.is_dir():
        pytest.skip("no X API recordings")
    return path


def _serve(server: ReplayServer, rec: Path) -> None:
    pages = _pages(rec)
    server.add("GET", RECENT, [pages["q1p1"]] * 4, query=Q1, next_token=None)
    server.add("GET", RECENT, [pages["q1p2"]] * 4, query=Q1, next_token="tok-q1-2")
    server.add("GET", RECENT, [pages["q2p1"]] * 4, query=Q2, next_token=None)
    server.add("GET", RECENT, [pages["q2p2"]] * 4, query=Q2, next_token=Q2_TOKEN)


def _command(keywords: Path, out: Path, url: str, launch: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "echo_builder.cli",
        "collect",
        "x",
        "--query-file",
        str(keywords),
        "--launch-date",
        launch,
        "--out",
        str(out),
        "--base-url",
        url,
        "--no-progress",
    ]


def _env() -> dict[str, str]:
    return {**os.environ, "X_BEARER_TOKEN": TOKEN, "PYTHONPATH": str(REPO)}


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_sigkill_at_seeded_points_resumes_byte_identical(rec, tmp_path, seed):
    keywords = tmp_path / "keywords.txt"
    keywords.write_text("gpt-4o|14\nopenai\n", encoding="utf-8")
    launch = (datetime.now(timezone.utc) - timedelta(days=3)).date().isoformat()
    straight = tmp_path / "straight"
    with ReplayServer() as server:
        _serve(server, rec)
        done = subprocess.run(
            _command(keywords, straight, server.url, launch), env=_env(), capture_output=True
        )
        assert done.returncode == 0, done.stderr

    rng = random.Random(seed)
    out = tmp_path / "killed"
    with ReplayServer(delay_s=0.3) as server:
        _serve(server, rec)
        kills = kill_at_requests(lambda run: _command(keywords, out, server.url, launch), _env(), server, rng)
        asked = Counter((r.params["query"], r.params.get("next_token")) for r in server.requests)
        assert server.misses == []
    killed, uninterrupted = _files(out), _files(straight)
    summaries = [json.loads(files.pop("collect.json")) for files in (killed, uninterrupted)]
    assert killed == uninterrupted  # the posts files, byte for byte
    for summary in summaries:  # the end of an open window is the time its query started: the one difference
        for query in summary["queries"]:
            query.pop("searched")
    assert summaries[0] == summaries[1]
    assert len(asked) == 4
    assert sum(asked.values()) <= 4 + kills  # only a request in flight at a kill is asked again
    assert kills >= 1
