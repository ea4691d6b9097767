"""The call cache: key sensitivity, atomic writes, counters, statistics, and resume after SIGKILL."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import time

import pytest
from PIL import Image

from echo_builder.backends import GenerationParams, Reply, Usage, image_part, user_message
from echo_builder.backends.caller import CallRequest
from echo_builder.cache import CallCache, call_key
from echo_builder.errors import ConfigError
from tests.conftest import REPO_ROOT
from tests.helpers.call_worker import requests as worker_requests


def _key(**changes):
    base = {
        "stage": "relevance",
        "prompt_version": "1",
        "backend_id": "openai:gpt-4o",
        "params": GenerationParams().model_dump(mode="json"),
        "messages": [user_message("is this about image generation?", Image.new("RGB", (4, 4), (1, 2, 3)))],
    }
    base.update(changes)
    return call_key(**base)


def test_key_depends_on_everything_that_determines_the_answer():
    reference = _key()
    assert reference == _key()  # deterministic
    assert len(reference) == 64
    variants = {
        "stage": _key(stage="extract"),
        "prompt_version": _key(prompt_version="2"),
        "backend": _key(backend_id="openai:gpt-4o-mini"),
        "params": _key(params=GenerationParams(temperature=0.5).model_dump(mode="json")),
        "text": _key(
            messages=[user_message("is this about image editing?", Image.new("RGB", (4, 4), (1, 2, 3)))]
        ),
        "image": _key(
            messages=[user_message("is this about image generation?", Image.new("RGB", (4, 4), (1, 2, 4)))]
        ),
        "kind": _key(kind="candidates"),
        "extra": _key(extra={"candidates": ["Good", "Bad"]}),
    }
    assert len(set(variants.values()) | {reference}) == len(variants) + 1


def test_image_contributes_its_hash_not_its_bytes():
    img = Image.new("RGB", (4, 4), (9, 9, 9))
    part = image_part(img)
    assert _key(messages=[user_message("x", img)]) == _key(messages=[user_message("x", part)])


def _reply(text: str) -> Reply:
    return Reply(
        text=text, backend_id="openai:m", usage=Usage(input_tokens=10, output_tokens=3), latency_s=0.5
    )


def test_put_get_counters_and_stats(tmp_path):
    with CallCache(tmp_path) as cache:
        assert cache.get("a" * 64, backend="openai:m") is None
        cache.put(
            "a" * 64,
            _reply("hi").model_dump(mode="json"),
            backend="openai:m",
            stage="judge",
            input_tokens=10,
            output_tokens=3,
            latency_s=0.5,
        )
        assert Reply.model_validate(cache.get("a" * 64, backend="openai:m")) == _reply("hi")
        assert cache.get("a" * 64, backend="openai:m") is not None
        assert len(cache) == 1 and "a" * 64 in cache
        stats = cache.stats()
    assert stats.entries == 1 and stats.size_bytes > 0
    backend = stats.backends["openai:m"]
    assert (backend.entries, backend.hits, backend.misses) == (1, 2, 1)
    assert (backend.input_tokens, backend.output_tokens, backend.wall_time_s) == (10, 3, 0.5)
    assert stats.stages == {"judge": 1}
    with CallCache(tmp_path, read_only=True) as again:  # counters persist across opens
        assert again.stats().backends["openai:m"].hits == 2
        with pytest.raises(ConfigError, match="read-only"):
            again.put("b" * 64, {}, backend="x")


def test_not_a_cache_is_a_clear_error(tmp_path):
    (tmp_path / "calls.sqlite").write_bytes(b"this is not sqlite" * 100)
    with pytest.raises(ConfigError, match="not a readable echo-bench cache"):
        CallCache(tmp_path)
    with pytest.raises(ConfigError, match="no cache"):
        CallCache(tmp_path / "missing", read_only=True)


@pytest.mark.slow
def test_sigkill_halfway_then_resume_repeats_no_completed_call(openai_server, tmp_path):
    openai_server.latency_s = 0.02
    cache_dir = tmp_path / "cache"
    cmd = [
        sys.executable,
        "-m",
        "tests.helpers.call_worker",
        openai_server.base_url,
        str(cache_dir),
        "200",
        "4",
    ]
    env = dict(os.environ, PYTHONPATH=str(REPO_ROOT))
    proc = subprocess.Popen(cmd, cwd=REPO_ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 60
    while openai_server.calls < 100 and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.005)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert proc.returncode == -signal.SIGKILL, proc.stderr.read().decode()
    first_calls = openai_server.calls
    assert 100 <= first_calls < 200

    # the database opens cleanly and holds only whole entries
    conn = sqlite3.connect(cache_dir / "calls.sqlite")
    assert conn.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    conn.close()
    cache = CallCache(cache_dir)
    completed = set(cache.keys())
    cache.close()
    assert len(completed) >= first_calls - 4  # at most the 4 calls in flight were lost

    openai_server.reset_log()
    done = subprocess.run(cmd, cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"ok=200 cached={len(completed)}"
    assert openai_server.calls == 200 - len(completed)
    backend_id = "openai:judge-model"
    resent = {
        CallRequest(
            (user_message(m["messages"][0]["content"]),), GenerationParams(max_tokens=16), stage="kill"
        ).key(backend_id)
        for m in openai_server.log.bodies
    }
    assert not resent & completed  # no completed call was repeated
    all_keys = {r.key(backend_id) for r in worker_requests(200)}
    assert resent | completed == all_keys

    openai_server.reset_log()
    third = subprocess.run(cmd, cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert third.stdout.strip() == "ok=200 cached=200" and openai_server.calls == 0


def test_two_processes_share_one_cache_directory_without_errors_or_torn_entries(tmp_path):
    """Two real processes open the same new cache directory at the same moment, round after round, and store and
    read each other's entries (tens of kB each) while both write: no error, and every entry read is whole.

    Before the fix about one opening in ten failed with "database is locked": SQLite refuses a journal-mode change
    at once, without its busy timeout, while another connection holds the lock it needs."""
    import json

    env = dict(os.environ, PYTHONPATH=str(REPO_ROOT))
    workers = [
        subprocess.Popen(
            [sys.executable, "-m", "tests.helpers.cache_worker", name, other, "6"],
            cwd=REPO_ROOT,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        for name, other in (("a", "b"), ("b", "a"))
    ]
    try:
        for worker in workers:
            assert worker.stdout.readline().strip() == "ready"  # both imported: the rounds start together
        results = []
        for round_ in range(40):
            directory = tmp_path / f"cache-{round_}"
            for worker in workers:
                worker.stdin.write(f"{directory}\n")
                worker.stdin.flush()
            results += [json.loads(worker.stdout.readline()) for worker in workers]
    finally:
        for worker in workers:
            worker.stdin.close()
            worker.wait(timeout=60)
            worker.stdout.close()
    assert [r for r in results if "error" in r] == []
    assert sum(r["torn"] for r in results) == 0
    assert sum(r["read"] for r in results) > 0  # the processes did read entries the other one was writing
    cache = CallCache(tmp_path / "cache-0")
    assert len(cache) == 12 and cache.get("a-5", backend="b")["body"].startswith("a-5-")
    cache.close()


def test_enabling_wal_waits_for_a_process_holding_the_lock():
    from echo_builder.cache import _enable_wal

    class Busy:
        """A connection that is refused twice with "database is locked", as SQLite answers at once."""

        def __init__(self) -> None:
            self.calls = 0

        def execute(self, sql: str) -> Busy:
            self.calls += 1
            if self.calls <= 2:
                raise sqlite3.OperationalError("database is locked")
            return self

        def fetchone(self) -> tuple[str]:
            return ("wal",)

    busy = Busy()
    _enable_wal(busy)  # type: ignore[arg-type]
    assert busy.calls == 3
    with pytest.raises(sqlite3.OperationalError, match="locked"):
        _enable_wal(Busy(), timeout_s=0)  # type: ignore[arg-type]
    broken = Busy()
    broken.execute = lambda sql: (_ for _ in ()).throw(sqlite3.OperationalError("disk I/O error"))  # type: ignore[method-assign]
    with pytest.raises(sqlite3.OperationalError, match="disk I/O"):
        _enable_wal(broken)  # type: ignore[arg-type]
