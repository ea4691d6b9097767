"""Flows of the hostile collection corpus (``tests/data/hostile/cases.d/collection.yaml``): ``echo-bench collect``
and ``build --expand`` against :class:`tests.helpers.hostile_platform.HostileServer`, a loopback server speaking
each platform's recorded wire format and misbehaving, under a socket guard (:class:`ConnectLog`) that records and
refuses every connection other than to that server.

Facts every flow measures: ``searches`` (search or lookup requests the server got), ``decoy_hits`` (requests that
reached the redirect decoy), ``refused_connects`` (connections the code under test tried to open anywhere but the
server: the guard refused them; 0 means the network policy stopped them first), ``secret_in_output`` and
``secret_in_files`` (the platform credential anywhere in the command's output or under ``--out``), ``posts``.
X's collect prints the posts it may read and their price before it starts (``note: x: ...``); that line is checked
(``cost_note``) and left out of the output the manifest judges, which must otherwise be one ``error:`` line.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

from tests.helpers.hostile_platform import SECRET, TOKENS, ConnectLog, Decoy, HostileServer, Recorded
from tests.reliability.hostile_workspace import Observed, Workspace, _cli, _read_record


def _recordings() -> Path:
    import pytest

    from tests.conftest import SHARED_DATA

    if not (SHARED_DATA / "api_recordings").is_dir():
        pytest.skip(f"no API recordings under {SHARED_DATA}")
    return SHARED_DATA / "api_recordings"


class _Env:
    """The platform's credentials in the environment for one run, restored after."""

    def __init__(self, platform: str) -> None:
        self.values = TOKENS[platform]

    def __enter__(self) -> None:
        self.saved = {k: os.environ.get(k) for k in self.values}
        os.environ.update(self.values)

    def __exit__(self, *exc: object) -> None:
        for key, value in self.saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def _leak_facts(platform: str, output: str, out: Path) -> dict[str, Any]:
    secret = SECRET[platform].encode()
    in_files = any(secret in p.read_bytes() for p in out.rglob("*") if p.is_file()) if out.exists() else False
    return {"secret_in_output": SECRET[platform] in output, "secret_in_files": in_files}


class _PrawcoreRetryTime:
    """prawcore's view of the time module while a case runs: its own retry sleeps (2-4 s after a 5xx or a dropped
    connection) are skipped; the clock is real. Every other sleep, ours included, is untouched."""

    monotonic = staticmethod(time.monotonic)
    monotonic_ns = staticmethod(time.monotonic_ns)
    time = staticmethod(time.time)

    @staticmethod
    def sleep(seconds: float) -> None:
        pass


def _run_guarded(
    ws: Workspace, platform: str, behaviour: str, args_for: Any, spec: dict[str, Any]
) -> Observed:
    import prawcore.sessions

    recordings = _recordings()
    decoy = Decoy()
    session_pds = spec.get("session_pds")
    try:
        with HostileServer(
            platform, behaviour, recordings, decoy_url=decoy.url, session_pds=session_pds
        ) as server:
            port = int(server.url.rsplit(":", 1)[1])
            ws.begin()
            saved = prawcore.sessions.time
            prawcore.sessions.time = _PrawcoreRetryTime  # type: ignore[assignment]
            try:
                with _Env(platform), ConnectLog({("127.0.0.1", port)}) as log:
                    result = _cli(*args_for(server))
            finally:
                prawcore.sessions.time = saved
    finally:
        decoy.close()
    lines = result.output.splitlines(keepends=True)
    cost_note = bool(lines) and lines[0].startswith(f"note: {platform}: ")
    if platform == "x" and cost_note:
        lines = lines[1:]
    output = "".join(lines)
    facts: dict[str, Any] = {
        "searches": server.searches,
        "decoy_hits": decoy.hits,
        "refused_connects": len(log.refused),
        **_leak_facts(platform, result.output, ws.out),
    }
    if platform == "x" and args_for.__name__ == "collect_args":
        facts["cost_note"] = cost_note
    return Observed(result.exit_code, output, result.exception, facts, _read_record(ws))


def flow_collect(case: dict[str, Any], ws: Workspace) -> Observed:
    """``echo-bench collect PLATFORM`` of one keyword against the hostile server (``input.behaviour``), with
    ``--max-wait 0 --max-attempts 2`` (no real rate-limit sleeping; ``input.args`` may give another
    ``--max-attempts``) and ``input.args``."""
    spec = case["input"]
    platform = spec["platform"]
    keywords = ws.inputs / "keywords.txt"
    keywords.write_text("gpt-4o\n", encoding="utf-8")

    attempts = [] if "--max-attempts" in spec.get("args", []) else ["--max-attempts", "2"]

    def collect_args(server: HostileServer) -> list[Any]:
        return [
            "collect", platform, "--query-file", keywords, "--out", ws.out, "--base-url", server.url,
            "--no-progress", "--max-wait", "0", *attempts, *spec.get("args", []),
        ]  # fmt: skip

    observed = _run_guarded(ws, platform, spec["behaviour"], collect_args, spec)
    summary = ws.out / "collect.json"
    if summary.is_file():
        data = json.loads(summary.read_text(encoding="utf-8"))
        observed.facts["posts"] = data["posts"]
        observed.facts["query_status"] = data["queries"][0]["status"] if data["queries"] else None
    state = ws.out / ".collect" / "state.json"
    observed.facts["state_under_64kb"] = not state.exists() or state.stat().st_size < 65536
    return observed


def _seed_export(platform: str, recorded: Recorded, path: Path) -> None:
    """One post of the recordings whose conversation the expansion would fetch, mentioning the keyword."""
    if platform == "x":
        body = recorded.load("x_api_v2/academictwitteR/extracted/03_tweets_search_all")
        seed = next(t for t in body["data"] if t.get("referenced_tweets"))
        seed = {**seed, "text": "gpt-4o " + seed["text"]}
        users = [u for u in body["includes"]["users"] if u["id"] == seed["author_id"]]
        page: Any = {"data": [seed], "includes": {"users": users}}
    elif platform == "bluesky":
        body = recorded.load("bluesky/recorded/06_searchPosts")
        post = dict(body["posts"][0])
        post["record"] = {**post["record"], "text": "gpt-4o " + post["record"]["text"]}
        post["replyCount"] = 5
        page = {"posts": [post]}
    else:
        body = recorded.load("reddit/extracted/02_search")
        child = body["data"]["children"][0]
        child["data"]["title"] = "gpt-4o " + child["data"]["title"]
        page = {"kind": "Listing", "data": {"children": [child], "after": None}}
    path.write_text(json.dumps(page) + "\n", encoding="utf-8")


def flow_expand(case: dict[str, Any], ws: Workspace) -> Observed:
    """``echo-bench build EXPORT --expand PLATFORM --expand-base-url SERVER`` of one recorded post: the build goes
    on with what it has (exit 0) and says why the expansion stopped."""
    spec = case["input"]
    platform = spec["platform"]
    export = ws.inputs / "export.jsonl"
    _seed_export(platform, Recorded(_recordings()), export)
    keywords = ws.inputs / "keywords.txt"
    keywords.write_text("gpt-4o\n", encoding="utf-8")

    def expand_args(server: HostileServer) -> list[Any]:
        return [
            "build", export, "--out", ws.out, "--keywords", keywords, "--threshold", "1", "--offline",
            "--expand", platform, "--expand-base-url", server.url, *spec.get("args", []),
        ]  # fmt: skip

    observed = _run_guarded(ws, platform, spec["behaviour"], expand_args, spec)
    report = ws.out / "report.json"
    if report.is_file():
        expansion = json.loads(report.read_text(encoding="utf-8")).get("expansion") or {}
        observed.facts["expansion_errors"] = len(expansion.get("errors") or [])
        observed.facts["expansion_requests"] = expansion.get("requests")
        observed.facts["posts_added"] = expansion.get("posts_added")
    return observed
