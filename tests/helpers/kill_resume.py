"""Kill-and-resume trials: run an ``echo-bench`` command as a subprocess, SIGKILL it at chosen points, rerun it
to completion, and check with the call cache, the media store and the loopback servers' logs that nothing
completed before a kill was requested again. Shared by ``tests/reliability/test_kill_resume_*.py`` and
``bench/reliability.py``; the scenarios are :mod:`tests.helpers.reliability`'s.
"""

from __future__ import annotations

import base64
import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.helpers.media_server import MediaServer
from tests.helpers.reliability import JUDGE
from tests.helpers.scenarios import CurationScenario, JudgeScenario

__all__ = [
    "JUDGE_RUN_DEPENDENT",
    "RUN_DEPENDENT",
    "KillTrial",
    "build_command",
    "cache_keys",
    "comparable_judge_run",
    "draw_kills",
    "judge_command",
    "kill_and_resume",
    "request_key",
    "resent_per_kill",
]


def request_key(body: dict[str, Any]) -> str:
    """The call-cache key (:func:`echo_builder.cache.call_key`) of a request the ``openai:`` backend sent.

    Rebuilt from the body alone (stage and prompt version from the system prompt), so a server log can be checked
    against a cache: after a run, the keys of all bodies sent must be exactly the cache's keys.
    """
    from echo_builder.backends.base import GenerationParams, ImagePart, Message, TextPart
    from echo_builder.cache import call_key

    messages = []
    for m in body["messages"]:
        content = m["content"]
        parts: list[TextPart | ImagePart] = []
        for p in [{"type": "text", "text": content}] if isinstance(content, str) else content:
            if p["type"] == "text":
                parts.append(TextPart(p["text"]))
            else:
                header, data = p["image_url"]["url"].split(",", 1)
                raw = base64.b64decode(data)
                mime = header.removeprefix("data:").removesuffix(";base64")
                parts.append(ImagePart(raw, mime, hashlib.sha256(raw).hexdigest()))
        messages.append(Message(m["role"], tuple(parts)))
    fields = ("temperature", "max_tokens", "top_p", "seed", "stop", "logprobs", "top_logprobs")
    params = GenerationParams(**{k: body[k] for k in fields if k in body})
    stage, version = _stage_version(
        body["messages"][0]["content"], json.dumps(body["messages"][-1]["content"])
    )
    return call_key(
        stage=stage,
        prompt_version=version,
        backend_id=f"openai:{body['model']}",
        params=params.model_dump(mode="json"),
        messages=messages,
    )


def _stage_version(system: str, user: str = "") -> tuple[str, str]:
    from echo_builder.judge.prompts import PAIRWISE, PAIRWISE_LEAN, SINGLE
    from echo_builder.stages.extract import EXTRACT_PROMPT
    from echo_builder.stages.relevance import RELEVANCE_PROMPT
    from echo_builder.stages.roles import ROLES_VERSION
    from echo_builder.stages.templates_screenshots import SCREENSHOTS_VERSION, TEMPLATES_VERSION
    from echo_builder.stages.tier import APPLICABILITY_VERSION, TIER_VERSION

    if system == SINGLE.system:
        return f"judge-{SINGLE.name}", SINGLE.version
    if (
        system == PAIRWISE.system
    ):  # the two pairwise prompts share the system text; the lean is asked in the user's
        lean = "[[C:A]]" in user
        return "judge-pairwise", (PAIRWISE_LEAN if lean else PAIRWISE).version
    stage = CurationScenario.stage({"messages": [{"content": system}]})
    versions = {
        "relevance": RELEVANCE_PROMPT.version,
        "extract": EXTRACT_PROMPT.version,
        "roles": ROLES_VERSION,
        "templates": TEMPLATES_VERSION,
        "screenshots": SCREENSHOTS_VERSION,
        "tier": TIER_VERSION,
        "applicability": APPLICABILITY_VERSION,
    }
    return stage, versions[stage]


def cache_keys(cache_dir: Path) -> set[str]:
    """Keys stored in a call cache (read-only; SQLite replays the write-ahead log of a killed writer)."""
    import sqlite3

    db = cache_dir / "calls.sqlite"
    if not db.exists():
        return set()
    conn = sqlite3.connect(db, timeout=30)
    try:
        return {row[0] for row in conn.execute("SELECT key FROM calls")}
    finally:
        conn.close()


@dataclass
class KillTrial:
    """What one trial of kill-and-resume observed.

    Attributes:
        kills: SIGKILLs delivered (a run that finished before its kill moment is not killed).
        runs: processes started, the last one ran to completion.
        repeated_calls: model calls stored in the cache at a kill and sent again later (must be 0).
        in_flight_resent: per kill, calls the killed process had sent whose replies were not in the cache after
            the kill, and that a later run sent again (:func:`resent_per_kill`; at most the concurrency).
        repeated_downloads / downloads_in_flight_resent: the same for image downloads and the media store.
        kill_at_s: the moment of each kill, seconds after the process started.
        wall_s: the whole trial, all runs.
    """

    kills: int = 0
    runs: int = 0
    repeated_calls: int = 0
    in_flight_resent: list[int] = field(default_factory=list)
    repeated_downloads: int = 0
    downloads_in_flight_resent: list[int] = field(default_factory=list)
    kill_at_s: list[float] = field(default_factory=list)
    wall_s: float = 0.0
    first_call_at_s: float | None = None  # of the first run: when the server saw its first request
    last_call_at_s: float | None = None  # of the first run: when the server saw its last request
    calls: list[int] = field(default_factory=list)  # model calls of each run


def _run_until(
    argv: Sequence[str],
    env: dict[str, str],
    point: tuple[int, float] | None,
    llm: Any,
    position: int,
    timeout_s: float,
) -> tuple[bool, int, str]:
    """Run ``argv``; SIGKILL it ``point[1]`` s after the server logged its ``point[0]``-th request of this run.
    Returns (killed, exit code, stderr)."""
    import subprocess
    import tempfile
    import time

    with tempfile.TemporaryFile(mode="w+") as log:  # a file, not a pipe: a chatty child never blocks on it
        proc = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=log, text=True)
        killed = False
        try:
            if point is not None:
                calls, extra_s = point
                while proc.poll() is None and len(llm.log.bodies) - position < calls:
                    time.sleep(0.002)
                try:
                    proc.wait(timeout=extra_s)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    killed = True
            proc.wait(timeout=timeout_s)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        log.seek(0)
        return killed, proc.returncode, log.read()


def _settle(server: Any, quiet_s: float) -> None:
    """Wait until the fake server has answered everything the dead process had sent."""
    import time

    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        time.sleep(quiet_s)
        if server.log.in_flight == 0:
            return


def kill_and_resume(
    command: Sequence[str],
    *,
    resume: Sequence[str],
    cache_dir: Path,
    llm: Any,
    kills: Sequence[tuple[int, float]],
    env: dict[str, str],
    media: MediaServer | None = None,
    media_root: Path | None = None,
    timeout_s: float = 300,
) -> KillTrial:
    """Run ``command`` and SIGKILL it at the first kill point, rerun it with ``resume`` appended and kill it at
    the next, and so on; then rerun it once more to completion, checking after every kill what was repeated.

    A kill point ``(n, extra_s)`` fires ``extra_s`` seconds after the run's ``n``-th model call reached the
    server (``n = 0``: after the process started); a run that exits before its kill point is not killed.

    The call cache (``cache_dir``) and the media store (``media_root``) are read right after each kill: a call
    whose key is stored, or an image whose URL is stored, must never be requested again; calls and downloads sent
    before the kill but not stored (in flight when the process died) may be repeated once, and are counted.
    """
    import time

    from echo_builder.stages.media import MediaStore

    trial = KillTrial()
    llm.reset_log()
    calls_of_run: list[set[str]] = []  # the model calls each run sent
    urls_of_run: list[set[str]] = []  # the images each run downloaded
    stored_calls_at_kill: list[set[str]] = []  # the cache's keys right after each kill
    stored_urls_at_kill: list[set[str]] = []  # the URLs in the media store right after each kill
    position = 0
    hits_before = dict(media.hits) if media is not None else {}
    started_trial = time.monotonic()
    for index, point in enumerate([*kills, None]):
        argv = [*command, *(resume if index else ())]
        started = time.monotonic()
        killed, returncode, stderr = _run_until(argv, env, point, llm, position, timeout_s)
        trial.runs += 1
        if killed:
            trial.kills += 1
            trial.kill_at_s.append(round(time.monotonic() - started, 3))
        elif returncode != 0:
            raise AssertionError(f"run {index} failed with exit code {returncode}:\n{stderr[-3000:]}")
        _settle(llm, 0.2)
        if index == 0 and len(llm.log.times) > position:
            trial.first_call_at_s = round(llm.log.times[position] - started, 3)
            trial.last_call_at_s = round(llm.log.times[-1] - started, 3)
        bodies = llm.log.bodies[position:]
        position += len(bodies)
        keys = [request_key(b) for b in bodies]
        assert len(keys) == len(set(keys)), "a call was sent twice within one run"
        trial.calls.append(len(keys))
        hits = dict(media.hits) if media is not None else {}
        urls = (
            {media.url(p) for p, n in hits.items() if n > hits_before.get(p, 0)}
            if media is not None
            else set()
        )
        if media is not None:
            repeats = {p: n - hits_before.get(p, 0) for p, n in hits.items() if n > hits_before.get(p, 0)}
            assert all(n == 1 for n in repeats.values()), (
                f"an image was downloaded twice in one run: {repeats}"
            )
        hits_before = hits
        if stored_calls_at_kill:  # what the previous kill left behind (stores only grow)
            trial.repeated_calls += sum(1 for k in keys if k in stored_calls_at_kill[-1])
            trial.repeated_downloads += sum(1 for u in urls if u in stored_urls_at_kill[-1])
        calls_of_run.append(set(keys))
        urls_of_run.append(urls)
        if not killed:
            break
        stored_calls_at_kill.append(cache_keys(cache_dir))
        if media_root is not None and media_root.exists():
            store = MediaStore(media_root)
            stored_urls_at_kill.append({u for u in set().union(*urls_of_run) if store.lookup(u) is not None})
        else:
            stored_urls_at_kill.append(set())
    trial.in_flight_resent = resent_per_kill(calls_of_run, stored_calls_at_kill)
    trial.downloads_in_flight_resent = resent_per_kill(urls_of_run, stored_urls_at_kill)
    trial.wall_s = round(time.monotonic() - started_trial, 3)
    # the mapping from request to key is checked too: every call sent is in the cache, and nothing else is
    assert cache_keys(cache_dir) == set().union(*calls_of_run)
    return trial


def resent_per_kill(sent_per_run: Sequence[set[str]], stored_after_kill: Sequence[set[str]]) -> list[int]:
    """Per kill, how many of the killed process's requests were lost by the kill and sent again later.

    Args:
        sent_per_run: the requests (call keys or image URLs) each run sent, in run order; every run but the last
            was killed.
        stored_after_kill: what the store (call cache, media store) held right after each kill.

    Returns:
        For kill ``r``: the requests run ``r`` sent, absent from the store after kill ``r``, and sent by a run
        after it. Only the killed process is charged: a request lost at an earlier kill that run ``r`` did not
        reach before it died was already counted at the kill that lost it. Each number is bounded by how many
        requests the process had sent but not yet stored, which a run that stores each reply before freeing its
        slot keeps at its concurrency; counting every request ever sent and not yet stored would instead add up
        the losses of successive kills (up to kills x concurrency) whenever a resumed run sends the unanswered
        requests in another order than the run before it.
    """
    if len(stored_after_kill) != len(sent_per_run) - 1:
        raise ValueError(
            f"sent_per_run lists {len(sent_per_run)} runs, of which all but the last were killed, so "
            f"stored_after_kill needs {len(sent_per_run) - 1} entries; got {len(stored_after_kill)}"
        )
    counts = []
    for r, stored in enumerate(stored_after_kill):
        later = set().union(*sent_per_run[r + 1 :])
        counts.append(len((sent_per_run[r] - stored) & later))
    return counts


def draw_kills(
    rng: Any,
    calls: int,
    tail_s: float,
    *,
    kills: int = 1,
    first: str | None = None,
    media_after: int | None = None,
    media_s: float = 0.2,
) -> list[tuple[int, float]]:
    """Kill points for :func:`kill_and_resume`, for a command whose uninterrupted run makes ``calls`` model calls
    and then works ``tail_s`` seconds more (last stages, dataset writing, exit).

    The first kill is of kind ``first`` (drawn when ``None``: ``call`` with probability 0.6, else ``media`` when
    ``media_after`` is given, else ``tail``): ``call`` lands right after a random model call (plus up to 50 ms);
    ``media`` within ``media_s`` seconds after call number ``media_after`` (the last call before the image
    downloads); ``tail`` at a random moment after the last call. Later kills are ``call`` kills, counted from the
    start of the resumed run, which makes only the calls still missing.
    """
    if first is None:
        r = rng.random()
        first = "call" if r < 0.6 else ("media" if media_after is not None and r < 0.8 else "tail")
    points: list[tuple[int, float]] = []
    remaining = calls
    for k in range(kills):
        if k == 0 and first == "tail":
            points.append((calls, rng.uniform(0.0, 0.8 * tail_s)))
            remaining = 1
        elif k == 0 and first == "media":
            assert media_after is not None
            points.append((media_after, rng.uniform(0.0, media_s)))
            remaining = max(1, calls - media_after)
        else:
            n = rng.randint(1, max(1, remaining))
            points.append((n, rng.uniform(0.0, 0.05)))
            remaining = max(1, remaining - n)
    return points


def build_command(posts: Path, out: Path, server: Any, concurrency: int = 4) -> list[str]:
    """The ``echo-bench build`` command line of the kill-and-resume trials (one pseudonym salt file beside the
    posts, shared by every build of them, so that separate builds give byte-identical datasets)."""
    import sys

    return [
        sys.executable, "-m", "echo_builder.cli", "build", str(posts), "--out", str(out),
        "--backend", "openai:vlm", "--base-url", server.base_url, "--target-model", "GPT-4o",
        "--media-allow", "127.0.0.1", "--concurrency", str(concurrency), "--salt-file", str(shared_salt_file(posts)),
    ]  # fmt: skip


def shared_salt_file(posts: Path) -> Path:
    """A fixed pseudonym salt file beside ``posts`` (written once), for builds that must compare byte for byte."""
    salt = Path(posts).parent / "test-salt.txt"
    if not salt.is_file():
        salt.write_text("test-salt-shared-by-builds-0123456789\n", encoding="utf-8")
    return salt


def judge_command(sc: JudgeScenario, out: Path, server: Any, concurrency: int = 4) -> list[str]:
    """The ``echo-bench judge`` command line of the kill-and-resume trials."""
    import sys

    return [
        sys.executable, "-m", "echo_builder.cli", "judge", "--benchmark", str(sc.benchmark),
        "--config", "image_to_image", "--outputs", str(sc.outputs), "--judge", JUDGE,
        "--base-url", server.base_url, "--out", str(out), "--concurrency", str(concurrency),
    ]  # fmt: skip


#: ``run.json`` fields that describe the process rather than the judgments: the wall time, and per judge the
#: calls it made, the cache hits it found and the tokens it paid for (a rerun after a kill pays only for the rest)
RUN_DEPENDENT = ("wall_time_s", "cost_usd")  # cost_usd: what this process spent
JUDGE_RUN_DEPENDENT = (
    "calls",
    "cache_hits",
    "input_tokens",
    "output_tokens",
    "cost",
)  # cost: this run's calls


def comparable_judge_run(run: Path) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """A judge run folder's verdicts without their measured latency, and ``run.json`` without what depends on
    the process (:data:`RUN_DEPENDENT`, :data:`JUDGE_RUN_DEPENDENT`)."""
    from echo_builder.judge.run import read_verdicts

    verdicts = [v.model_dump(exclude={"latency_s"}) for v in read_verdicts(run)]
    summary = json.loads((run / "run.json").read_text(encoding="utf-8"))
    for key in RUN_DEPENDENT:
        summary.pop(key)
    for judge in summary["judges"]:
        for key in JUDGE_RUN_DEPENDENT:
            judge.pop(key)
    return verdicts, summary


def kill_at_requests(
    command: Any, env: dict[str, str], server: Any, rng: Any, *, kills: int = 2, runs: int = 10
) -> int:
    """Run ``command(run_number)`` (a CLI subprocess talking to ``server``, whose ``requests`` it appends to)
    until it exits 0, SIGKILLing each of the first ``kills`` runs at a seeded moment: after 1-2 more requests
    reached the server, then 0-0.45 s later (a request in flight, a page being written, or between pages).
    Returns the kills made; fails the test when a run exits otherwise or no run completes in ``runs``."""
    import signal
    import subprocess
    import time

    import pytest

    made = 0
    for run in range(runs):
        process = subprocess.Popen(command(run), env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        if made < kills:
            target = len(server.requests) + rng.randint(1, 2)
            deadline = time.monotonic() + 60
            while len(server.requests) < target and process.poll() is None and time.monotonic() < deadline:
                time.sleep(0.01)
            time.sleep(rng.uniform(0.0, 0.45))
            if process.poll() is None:
                process.send_signal(signal.SIGKILL)
                made += 1
        _, stderr = process.communicate(timeout=120)
        if process.returncode == 0:
            return made
        assert process.returncode == -signal.SIGKILL, stderr.decode()  # only the kills stop a run
    pytest.fail(f"the command did not complete in {runs} runs")
