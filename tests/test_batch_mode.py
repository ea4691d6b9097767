"""Batch API mode (``--batch``): requests go to the loopback server's ``/v1/files`` and ``/v1/batches`` as JSONL, the
answers land in the call cache, and the run's files equal those of an online run with the same scripted replies."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from echo_builder.backends.base import GenerationParams, user_message
from echo_builder.backends.batch import BatchError, BatchSettings
from echo_builder.backends.caller import CallRequest, ModelCaller, RetryPolicy
from echo_builder.backends.openai_backend import OpenAIBackend
from echo_builder.cache import CallCache
from echo_builder.errors import ConfigError


async def _no_wait(seconds: float) -> None:
    return None


def _settings(tmp_path: Path, **kw) -> BatchSettings:
    return BatchSettings(state_dir=tmp_path / "batches", root=tmp_path, sleep=_no_wait, **kw)


def _requests(n: int = 4) -> list[CallRequest]:
    return [
        CallRequest((user_message(f"question {i}"),), GenerationParams(max_tokens=32), stage="test")
        for i in range(n)
    ]


def _caller(
    server, tmp_path: Path, *, batch: BatchSettings | None, cache: str = "cache", **kw
) -> ModelCaller:
    backend = OpenAIBackend("m", base_url=server.base_url)
    return ModelCaller(
        backend,
        cache=CallCache(tmp_path / cache),
        batch=batch,
        retry=RetryPolicy(max_attempts=2, initial_backoff_s=0.0, jitter=False),
        **kw,
    )


def test_batch_replies_equal_online_replies_and_the_jsonl_is_the_batch_api_format(openai_server, tmp_path):
    openai_server.batch_api.polls_until_done = 2
    batch = _caller(openai_server, tmp_path, batch=_settings(tmp_path), cache="cache-b")
    results = batch.call_many(_requests())
    assert openai_server.calls == 0  # nothing went online
    assert len(openai_server.batch_api.creates) == 1
    create = openai_server.batch_api.creates[0]
    assert create["endpoint"] == "/v1/chat/completions" and create["completion_window"] == "24h"
    upload = openai_server.batch_api.files[create["input_file_id"]].decode()
    lines = [json.loads(line) for line in upload.splitlines()]
    assert [sorted(line) for line in lines] == [["body", "custom_id", "method", "url"]] * 4
    assert {line["method"] for line in lines} == {"POST"}
    assert {line["url"] for line in lines} == {"/v1/chat/completions"}
    assert [line["custom_id"] for line in lines] == [r.key for r in results]
    assert lines[0]["body"] == {
        "model": "m",
        "messages": [{"role": "user", "content": "question 0"}],
        "temperature": 0.0,
        "max_tokens": 32,
    }
    assert openai_server.batch_api.uploads[create["input_file_id"]][1] == "batch"
    # 3 polls: two in progress, then completed
    batch_id = next(iter(openai_server.batch_api.batches))
    assert openai_server.batch_api.retrievals == [batch_id] * 3

    online = _caller(openai_server, tmp_path, batch=None, cache="cache-o")
    direct = online.call_many(_requests())
    assert openai_server.calls == 4
    assert [r.reply.model_dump(exclude={"latency_s"}) for r in results] == [
        r.reply.model_dump(exclude={"latency_s"}) for r in direct
    ]
    assert [r.reply.text for r in results] == [f"echo: question {i}" for i in range(4)]
    assert {r.reply.latency_s for r in results} == {0.0}  # a batch has no per-call wall time
    # every reply is in the cache: a second run sends nothing at all
    again = _caller(openai_server, tmp_path, batch=_settings(tmp_path), cache="cache-b").call_many(
        _requests()
    )
    assert all(r.cached for r in again) and len(openai_server.batch_api.creates) == 1
    checkpoint = json.loads(next((tmp_path / "batches").glob("*.json")).read_text())
    assert checkpoint["status"] == "done" and checkpoint["counts"] == {"answered": 4, "failed": 0}
    assert checkpoint["batch_id"] in openai_server.batch_api.batches


class _Killed(BaseException):
    """Stands for SIGKILL: nothing after it runs."""


def test_a_run_killed_while_polling_resumes_the_batch_in_flight_without_a_second_submission(
    openai_server, tmp_path
):
    openai_server.batch_api.polls_until_done = 3
    polls = []

    async def die_on_second_wait(seconds: float) -> None:
        polls.append(seconds)
        if len(polls) == 2:
            raise _Killed

    killed = _caller(
        openai_server,
        tmp_path,
        batch=BatchSettings(
            state_dir=tmp_path / "batches", root=tmp_path, sleep=die_on_second_wait, poll_initial_s=5.0
        ),
    )
    with pytest.raises(_Killed):
        killed.call_many(_requests())
    assert polls == [5.0, 10.0]  # backoff doubles
    assert len(openai_server.batch_api.creates) == 1
    checkpoint = json.loads(next((tmp_path / "batches").glob("*.json")).read_text())
    assert checkpoint["status"] == "submitted" and checkpoint["batch_id"]
    assert len(CallCache(tmp_path / "cache")) == 0  # nothing harvested yet

    resumed = _caller(openai_server, tmp_path, batch=_settings(tmp_path)).call_many(_requests())
    assert [r.reply.text for r in resumed] == [f"echo: question {i}" for i in range(4)]
    assert len(openai_server.batch_api.creates) == 1  # picked up, never submitted twice
    assert len(openai_server.batch_api.files) == 2  # one input file, one output file
    assert openai_server.calls == 0


def test_a_run_killed_between_creating_the_batch_and_checkpointing_it_finds_the_batch(
    openai_server, tmp_path
):
    from echo_builder.backends import batch as batch_module

    saved = batch_module.BatchRunner._save
    seen = []

    def save_then_die(self, checkpoint):
        if checkpoint.status == "submitted":
            raise _Killed  # the batch exists on the server; the checkpoint only knows its input file
        seen.append(checkpoint.status)
        saved(self, checkpoint)

    batch_module.BatchRunner._save = save_then_die
    try:
        with pytest.raises(_Killed):
            _caller(openai_server, tmp_path, batch=_settings(tmp_path)).call_many(_requests())
    finally:
        batch_module.BatchRunner._save = saved
    assert seen == ["uploading", "uploading"] and len(openai_server.batch_api.creates) == 1
    resumed = _caller(openai_server, tmp_path, batch=_settings(tmp_path)).call_many(_requests())
    assert all(r.ok for r in resumed)
    assert len(openai_server.batch_api.creates) == 1


def test_failed_lines_are_retried_online(openai_server, tmp_path):
    openai_server.batch_api.line_error = lambda line: {"question 1": 500, "question 2": 400}.get(
        line["body"]["messages"][0]["content"]
    )
    results = _caller(openai_server, tmp_path, batch=_settings(tmp_path, retry="online")).call_many(
        _requests()
    )
    assert [r.ok for r in results] == [True, True, False, True]
    assert results[1].reply.text == "echo: question 1" and results[1].attempts == 1
    assert openai_server.calls == 1  # only the 500 went online; the 400 is permanent
    assert [b["messages"][0]["content"] for b in openai_server.log.bodies] == ["question 1"]
    assert results[2].error_kind == "permanent" and "HTTP 400" in results[2].error
    assert len(openai_server.batch_api.creates) == 1


def test_failed_lines_go_into_a_follow_up_batch(openai_server, tmp_path):
    failed_once: set[str] = set()

    def flaky(line):
        text = line["body"]["messages"][0]["content"]
        if text in ("question 0", "question 3") and text not in failed_once:
            failed_once.add(text)
            return 429
        return None

    openai_server.batch_api.line_error = flaky
    caller = _caller(openai_server, tmp_path, batch=_settings(tmp_path, retry="batch"))
    results = caller.call_many(_requests())
    assert all(r.ok for r in results)
    assert openai_server.calls == 0
    creates = openai_server.batch_api.creates
    assert len(creates) == 2
    second = openai_server.batch_api.files[creates[1]["input_file_id"]].decode().splitlines()
    assert sorted(json.loads(line)["body"]["messages"][0]["content"] for line in second) == [
        "question 0",
        "question 3",
    ]
    assert caller.stats.failures == 0 and caller.stats.attempts == 6


def test_an_expired_batch_keeps_its_answers_and_retries_the_rest(openai_server, tmp_path, caplog):
    openai_server.batch_api.final_status = "expired"
    with caplog.at_level("WARNING", logger="echo_builder.backends.batch"):
        results = _caller(openai_server, tmp_path, batch=_settings(tmp_path, retry="none")).call_many(
            _requests()
        )
    assert "was expired (the 24 h completion window passed): 2 of 4 calls unanswered" in caplog.text
    assert [r.ok for r in results] == [True, False, True, False]
    assert "batch_expired" in results[1].error and results[1].error_kind == "retries_exhausted"
    assert openai_server.calls == 0
    # a rerun sends only the two unanswered calls (here online)
    openai_server.batch_api.final_status = "completed"
    again = _caller(openai_server, tmp_path, batch=_settings(tmp_path, retry="online")).call_many(_requests())
    assert all(r.ok for r in again) and [r.cached for r in again] == [True, False, True, False]
    assert len(openai_server.batch_api.creates) == 2
    assert openai_server.calls == 0


def test_a_cancelled_batch_is_retried_online(openai_server, tmp_path):
    openai_server.batch_api.final_status = "cancelled"
    results = _caller(openai_server, tmp_path, batch=_settings(tmp_path)).call_many(_requests(2))
    assert all(r.ok for r in results) and openai_server.calls == 2


def test_a_batch_still_running_at_the_deadline_stops_with_its_checkpoint_named(openai_server, tmp_path):
    openai_server.batch_api.polls_until_done = 10**6
    now = [1000.0]

    async def advance(seconds: float) -> None:
        now[0] += seconds

    settings = BatchSettings(
        state_dir=tmp_path / "batches", root=tmp_path, sleep=advance, clock=lambda: now[0], max_wait_s=100.0
    )
    with pytest.raises(
        BatchError, match=r"still in_progress 100 s after .*batches/.*\.json.*run the same command"
    ):
        _caller(openai_server, tmp_path, batch=settings).call_many(_requests(1))
    assert now[0] == 1100.0  # never waited past the deadline
    # a rerun waits for the same batch
    openai_server.batch_api.polls_until_done = 0
    assert _caller(openai_server, tmp_path, batch=_settings(tmp_path)).call_many(_requests(1))[0].ok
    assert len(openai_server.batch_api.creates) == 1


def test_a_batch_the_server_fails_stops_the_run_with_the_servers_reason(openai_server, tmp_path, monkeypatch):
    from echo_builder.backends import batch as batch_module

    monkeypatch.setattr(
        batch_module,
        "batch_line",
        lambda key, body: {"custom_id": key, "method": "GET", "url": "/x", "body": body},
    )
    with pytest.raises(
        BatchError, match=r"batch-\d+ failed validation on the server: line 1: malformed line"
    ):
        _caller(openai_server, tmp_path, batch=_settings(tmp_path)).call_many(_requests(2))
    [checkpoint] = [json.loads(p.read_text()) for p in (tmp_path / "batches").glob("*.json")]
    assert checkpoint["status"] == "failed" and checkpoint["batch_status"] == "failed"
    assert openai_server.calls == 0


def test_a_failed_status_check_is_retried_at_the_next_poll(openai_server, tmp_path):
    openai_server.batch_api.retrieve_errors = 2
    results = _caller(openai_server, tmp_path, batch=_settings(tmp_path)).call_many(_requests(2))
    assert all(r.ok for r in results) and openai_server.batch_api.retrieve_errors == 0
    assert len(openai_server.batch_api.retrievals) == 1 and len(openai_server.batch_api.creates) == 1


def test_an_output_file_over_the_cap_stops_the_run_and_a_rerun_harvests_it(openai_server, tmp_path):
    openai_server.reply = lambda body: "x" * 600  # two replies: an output file over 1 KiB
    small = _settings(tmp_path, max_output_bytes=1024)
    with pytest.raises(BatchError, match=r"could not download file file-\d+: reply too large"):
        _caller(openai_server, tmp_path, batch=small).call_many(_requests(2))
    [checkpoint] = [json.loads(p.read_text()) for p in (tmp_path / "batches").glob("*.json")]
    assert checkpoint["status"] == "submitted"  # kept: nothing was harvested
    results = _caller(openai_server, tmp_path, batch=_settings(tmp_path)).call_many(_requests(2))
    assert [r.reply.text for r in results] == ["x" * 600] * 2
    assert len(openai_server.batch_api.creates) == 1


def test_large_runs_are_split_into_several_batches(openai_server, tmp_path):
    results = _caller(openai_server, tmp_path, batch=_settings(tmp_path, max_requests=3)).call_many(
        _requests(7)
    )
    assert all(r.ok for r in results)
    assert len(openai_server.batch_api.creates) == 3


def test_batch_mode_needs_an_openai_backend(tmp_path):
    from echo_builder.backends.rules import RulesBackend

    with pytest.raises(ConfigError, match="--batch needs an openai: backend"):
        ModelCaller(RulesBackend(""), batch=_settings(tmp_path))
    with pytest.raises(ConfigError, match="retry must be online, batch or none"):
        _settings(tmp_path, retry="later")


# -- end to end: build and judge, batch against online ---------------------------------------------------------------
def _cli(*args: str, code: int = 0) -> str:
    from click.testing import CliRunner

    from echo_builder.cli import cli

    result = CliRunner().invoke(cli, list(args), catch_exceptions=False)
    assert result.exit_code == code, result.output
    return result.output


def _files(folder: Path, skip: tuple[str, ...]) -> dict[str, bytes]:
    return {
        str(p.relative_to(folder)): p.read_bytes()
        for p in sorted(folder.rglob("*"))
        if p.is_file() and p.relative_to(folder).parts[0] not in skip
    }


@pytest.fixture
def frozen_online_clock(monkeypatch):
    """The online path's latency clock stopped at 0, so online replies carry ``latency_s == 0.0`` like batch
    replies (the one field a batch cannot measure per call): the two runs' files can then match byte for byte."""
    import time
    import types

    from echo_builder.backends import openai_backend

    monkeypatch.setattr(
        openai_backend, "time", types.SimpleNamespace(perf_counter=lambda: 0.0, time=time.time)
    )


def test_batch_and_online_builds_write_byte_identical_files(openai_server, tmp_path, frozen_online_clock):
    from tests.helpers.media_server import MediaServer
    from tests.test_build_vlm import _command, _setup, scripted

    def with_one_reask(body):  # the first tier answer for the yellow square is not JSON: re-asked once
        system, user = body["messages"][0]["content"], json.dumps(body["messages"][1]["content"])
        if "last quality check" in system and len(body["messages"]) == 2 and "yellow square" in user:
            return "Benchmark, I think"
        if "You screen images" in system:  # the safety stage's VLM checker: flags the large output images
            big = len(user) > 3000
            return json.dumps({"nsfw": big, "confidence": 0.9, "categories": ["genitals"] if big else []})
        return scripted(body)

    openai_server.reply = with_one_reask
    with MediaServer() as media:
        posts = _setup(tmp_path, media)
        nsfw = ("--nsfw-check", "openai:vlm", "--nsfw-option", f"base_url={openai_server.base_url}")
        _cli(*_command(posts, tmp_path / "online", openai_server, *nsfw))
        online_calls = openai_server.calls
        openai_server.reset_log()
        _cli(*_command(posts, tmp_path / "batch", openai_server, *nsfw), "--batch", "--batch-poll", "1")
    assert openai_server.calls == 0  # nothing went online
    api = openai_server.batch_api
    assert len(api.lines) == online_calls  # every call once, in some batch
    screens = [line for line in api.lines if "You screen images" in line["body"]["messages"][0]["content"]]
    assert len(screens) == 4  # the safety stage's VLM calls were batched too
    reasks = [line for line in api.lines if len(line["body"]["messages"]) == 4]
    assert len(reasks) == 1 and reasks[0]["body"]["messages"][2]["content"] == "Benchmark, I think"
    assert len(api.creates) >= 7  # one batch per stage that calls the model, and one for the re-ask
    # not compared: the call cache, the batch checkpoints, the wall times, and the media store's index (appended
    # in the order concurrent downloads finish; the images themselves are compared)
    skip = ("cache", "batches", "run_stats.json")
    online, batch = _files(tmp_path / "online", skip), _files(tmp_path / "batch", skip)
    for files in (online, batch):
        files.pop("media/index.jsonl")
    assert "stages/safety.jsonl" in online and "stages/tier.jsonl" in online
    assert sorted(online) == sorted(batch)
    assert [name for name in online if online[name] != batch[name]] == []
    checkpoints = [json.loads(p.read_text()) for p in (tmp_path / "batch" / "batches").glob("*.json")]
    assert len(checkpoints) == len(api.creates) and {c["status"] for c in checkpoints} == {"done"}


def test_batch_and_online_judge_runs_give_byte_identical_verdicts_and_leaderboards(
    openai_server, tmp_path, frozen_online_clock
):
    from tests.helpers.scenarios import JudgeScenario

    sc = JudgeScenario(3, tmp_path)
    openai_server.reply = sc.reply
    boards = {}
    for mode in ("single", "pairwise"):
        for how in ("online", "batch"):
            run = tmp_path / f"{mode}-{how}"
            _cli(
                "judge", "--benchmark", str(sc.benchmark), "--config", "image_to_image", "--outputs",
                str(sc.outputs), "--judge", "openai:judge", "--base-url", openai_server.base_url, "--mode", mode,
                "--out", str(run), *(["--batch"] if how == "batch" else []),
            )  # fmt: skip
            boards[mode, how] = _cli("leaderboard", str(run), "--format", "json", "--n-boot", "100")
        online, batch = tmp_path / f"{mode}-online", tmp_path / f"{mode}-batch"
        assert (online / "verdicts.parquet").read_bytes() == (batch / "verdicts.parquet").read_bytes()
        assert boards[mode, "online"] == boards[mode, "batch"]
        assert json.loads(boards[mode, "batch"])  # a real leaderboard, not an empty one
    # single: 3 samples x 3 models, one output missing (no call); pairwise: both orders of each pair
    assert openai_server.calls == len(openai_server.batch_api.lines) == 8 + 2 * 9 - 4
    from echo_builder.judge.verdicts_file import read_verdicts

    verdicts = read_verdicts(tmp_path / "single-batch")
    assert sum(v.status == "ok" for v in verdicts) == 8 and {
        v.latency_s for v in verdicts if v.status == "ok"
    } == {0.0}


def _probability_reply(body):
    """A next-token distribution over the digits that depends on the output image shown."""
    from tests.helpers.openai_server import Scripted
    from tests.helpers.scenarios import JudgeScenario

    h = int(hashlib.sha256(JudgeScenario.images(body)[-1].encode()).hexdigest()[:4], 16)
    top, second = str(1 + h % 9), str(1 + (h + 4) % 9)
    return Scripted(top, next_token_probs={top: 0.6, second: 0.3, "x": 0.1})


@pytest.mark.parametrize("logprobs", [True, False])
def test_probability_mode_in_batch_equals_online(openai_server, tmp_path, logprobs):
    from tests.helpers.scenarios import JudgeScenario

    sc = JudgeScenario(3, tmp_path)
    openai_server.reply = _probability_reply
    openai_server.logprobs_supported = logprobs
    args = [
        "judge",
        "--benchmark",
        str(sc.benchmark),
        "--config",
        "image_to_image",
        "--outputs",
        str(sc.outputs),
    ]
    args += ["--judge", "openai:judge", "--base-url", openai_server.base_url, "--mode", "probability"]
    code = 0 if logprobs else 1  # every judgment failing is exit status 1
    _cli(*args, "--out", str(tmp_path / "online"), code=code)
    assert openai_server.calls == 8
    openai_server.reset_log()
    _cli(*args, "--out", str(tmp_path / "batch"), "--batch", code=code)
    assert openai_server.calls == 0  # no call went online, also when the server gave no log-probabilities
    lines = openai_server.batch_api.lines
    assert len(lines) == 8 and {(b["body"]["max_tokens"], b["body"]["top_logprobs"]) for b in lines} == {
        (1, 20)
    }
    online = (tmp_path / "online" / "verdicts.parquet").read_bytes()
    assert online == (tmp_path / "batch" / "verdicts.parquet").read_bytes()
    from echo_builder.judge.verdicts_file import read_verdicts

    verdicts = read_verdicts(tmp_path / "batch")
    if logprobs:
        assert sum(v.status == "ok" for v in verdicts) == 8 and all(
            1 <= v.rating <= 9 for v in verdicts if v.status == "ok"
        )
    else:
        assert sum(v.status == "error" for v in verdicts) == 8
        assert all("log-probabilities" in v.error for v in verdicts if v.status == "error")


def test_batch_is_refused_for_backends_without_a_batch_api(openai_server, tmp_path):
    from click.testing import CliRunner

    from echo_builder.cli import cli
    from tests.helpers.scenarios import JudgeScenario

    sc = JudgeScenario(2, tmp_path)
    base = [
        "judge",
        "--benchmark",
        str(sc.benchmark),
        "--config",
        "image_to_image",
        "--outputs",
        str(sc.outputs),
    ]
    result = CliRunner().invoke(cli, [*base, "--judge", "rules", "--out", str(tmp_path / "p"), "--batch"])
    assert result.exit_code != 0 and "--batch needs an openai: backend" in result.output
    assert not (tmp_path / "p").exists()  # refused before anything was written
    (tmp_path / "posts.jsonl").write_text("")
    result = CliRunner().invoke(
        cli, ["build", str(tmp_path / "posts.jsonl"), "--out", str(tmp_path / "b"), "--batch"]
    )
    assert result.exit_code != 0 and "rules backend calls no model" in result.output
    assert not (tmp_path / "b").exists()


def test_text_rendering_metric_in_batch_mode_equals_online(openai_server, tmp_path, frozen_online_clock):
    from PIL import Image

    from tests.helpers.benchmark import make_benchmark

    bench = make_benchmark(
        tmp_path / "bench",
        "text_to_image",
        [{"id": "a", "prompt": 'a sign saying "OPEN"'}, {"id": "b", "prompt": 'a mug saying "HI"'}],
    )
    for i, sid in enumerate("ab"):
        (tmp_path / "outputs" / "m").mkdir(parents=True, exist_ok=True)
        Image.new("RGB", (16, 16), (255, 40 * i, 0)).save(tmp_path / "outputs" / "m" / f"{sid}.png")
    openai_server.reply = lambda body: (
        f"The text reads well. Rating: [[{7 if 'OPEN' in json.dumps(body) else 4}]]"
    )
    args = [
        "metrics",
        "--benchmark",
        str(bench),
        "--config",
        "text_to_image",
        "--outputs",
        str(tmp_path / "outputs"),
    ]
    args += ["--metric", "text_rendering", "--judge", "openai:j", "--base-url", openai_server.base_url]
    shown = {
        how: _cli(*args, "--out", str(tmp_path / how), *(["--batch"] if how == "batch" else []))
        for how in ("online", "batch")
    }
    assert openai_server.calls == 2 and len(openai_server.batch_api.lines) == 2
    skip = ("cache", "batches")
    online, batch = _files(tmp_path / "online", skip), _files(tmp_path / "batch", skip)
    assert online and online == batch
    assert shown["online"].replace("online", "batch") == shown["batch"]
    assert "0.5000" in shown["batch"]  # mean of (7 - 1) / 9 and (4 - 1) / 9


def test_metrics_batch_refuses_a_judge_without_a_batch_api(tmp_path):
    from click.testing import CliRunner
    from PIL import Image

    from echo_builder.cli import cli
    from tests.helpers.benchmark import make_benchmark

    bench = make_benchmark(
        tmp_path / "bench", "text_to_image", [{"id": "a", "prompt": 'a sign saying "OPEN"'}]
    )
    (tmp_path / "outputs" / "m").mkdir(parents=True)
    Image.new("RGB", (16, 16), (255, 255, 255)).save(tmp_path / "outputs" / "m" / "a.png")
    out = tmp_path / "metrics"
    args = ["--benchmark", str(bench), "--config", "text_to_image", "--outputs", str(tmp_path / "outputs")]
    result = CliRunner().invoke(
        cli,
        ["metrics", *args, "--metric", "text_rendering", "--judge", "rules", "--out", str(out), "--batch"],
    )
    assert result.exit_code == 1 and "--batch needs an openai: backend" in result.output
    assert not (out / "cache").exists() and not (out / "batches").exists()
    out = tmp_path / "metrics-no-judge"
    result = CliRunner().invoke(
        cli, ["metrics", *args, "--metric", "color_shift", "--out", str(out), "--batch"]
    )
    assert result.exit_code == 1 and "give --judge openai:<model>" in result.output
    assert not out.exists()


def test_a_judge_run_sigkilled_while_polling_resumes_without_a_second_submission(openai_server, tmp_path):
    import os
    import signal
    import subprocess
    import sys
    import time

    from tests.conftest import REPO_ROOT
    from tests.helpers.scenarios import JudgeScenario

    sc = JudgeScenario(2, tmp_path)
    openai_server.reply = sc.reply
    api = openai_server.batch_api
    api.polls_until_done = 10**6  # the batch stays in progress until the kill
    run = tmp_path / "run"
    args = [
        "judge", "--benchmark", str(sc.benchmark), "--config", "image_to_image", "--outputs", str(sc.outputs),
        "--judge", "openai:judge", "--base-url", openai_server.base_url, "--out", str(run), "--batch",
        "--batch-poll", "1",
    ]  # fmt: skip
    env = dict(os.environ, PYTHONPATH=str(REPO_ROOT))
    proc = subprocess.Popen(
        [sys.executable, "-m", "echo_builder.cli", *args],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + 90
        while len(api.retrievals) < 2 and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.02)
        assert len(api.retrievals) >= 2, proc.stderr.read().decode() if proc.poll() is not None else "no poll"
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    assert len(api.creates) == 1 and not (run / "verdicts.parquet").exists()
    [checkpoint] = [json.loads(p.read_text()) for p in (run / "batches").glob("*.json")]
    assert checkpoint["status"] == "submitted" and checkpoint["batch_id"] == next(iter(api.batches))

    api.polls_until_done = 0
    _cli(*args)
    assert len(api.creates) == 1  # the batch in flight was picked up, not submitted again
    assert openai_server.calls == 0
    from echo_builder.judge.verdicts_file import read_verdicts

    assert sum(v.status == "ok" for v in read_verdicts(run)) == 5  # 2 samples x 3 models, one output missing
    straight = tmp_path / "straight"  # the same run, never killed: byte-identical verdicts
    _cli(*[str(straight) if a == str(run) else a for a in args])
    assert (run / "verdicts.parquet").read_bytes() == (straight / "verdicts.parquet").read_bytes()


def test_analyze_with_a_batched_llm_labeller_writes_the_online_report(openai_server, tmp_path):
    # a small build by a scripted curator (the demo's posts and images, offline)
    import shutil

    from echo_builder.demo import run_demo
    from tests.test_analysis_llm import curator, labeller

    run_demo(tmp_path / "demo", progress=False)
    build = tmp_path / "build"
    build.mkdir()
    shutil.copytree(tmp_path / "demo" / "benchmark" / "media", build / "media")
    openai_server.reply = curator
    _cli(
        "build", str(tmp_path / "demo" / "posts"), "--backend", "openai:curator", "--base-url",
        openai_server.base_url, "--target-model", "Lumen-2", "--launch-date", "2025-06-10", "--offline",
        "--out", str(build),
    )  # fmt: skip
    openai_server.reply = labeller
    openai_server.reset_log()
    args = ["analyze", str(build), "--backend", "openai:labeller", "--base-url", openai_server.base_url]
    args += ["--max-attempts", "1", "--n-boot", "40"]
    _cli(*args, "--out", str(tmp_path / "online"))
    online_calls = openai_server.calls
    assert online_calls > 0
    openai_server.reset_log()
    _cli(*args, "--out", str(tmp_path / "batch"), "--batch")
    assert openai_server.calls == 0 and len(openai_server.batch_api.lines) == online_calls
    for name in ("analysis.json", "labels.jsonl"):
        assert (tmp_path / "online" / name).read_bytes() == (tmp_path / "batch" / name).read_bytes(), name
    doc = json.loads((tmp_path / "batch" / "analysis.json").read_text())
    assert (
        doc["failures"]["summary"]["failures"] == 2
    )  # the refusal and the prose answer, re-asked in a batch
