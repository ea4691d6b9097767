"""The ``openai:`` backend and :class:`ModelCaller` against a real loopback HTTP server."""

from __future__ import annotations

import base64
import hashlib
import io
import math
import time

import pytest
from PIL import Image

from echo_builder.backends import GenerationParams, create_backend, user_message
from echo_builder.backends.caller import CallRequest, ModelCaller, RetryPolicy
from echo_builder.backends.openai_backend import parse_retry_after
from echo_builder.cache import CallCache
from echo_builder.errors import ConfigError, LogprobsUnavailableError
from tests.helpers.openai_server import FaultPlan, Scripted

FAST_RETRY = RetryPolicy(max_attempts=10, initial_backoff_s=0.005, max_backoff_s=0.05, jitter=True)


def _backend(server, **options):
    return create_backend(
        "openai:judge-model", base_url=server.base_url, timeout_s=options.pop("timeout_s", 5), **options
    )


def _requests(n: int, stage: str = "test") -> list[CallRequest]:
    return [
        CallRequest((user_message(f"question {i}"),), GenerationParams(max_tokens=16), stage=stage)
        for i in range(n)
    ]


def test_reply_text_usage_and_snapshot(openai_server):
    reply = _backend(openai_server).generate([user_message("hello there")])
    assert reply.text == "echo: hello there"
    assert reply.backend_id == "openai:judge-model"
    assert reply.model_snapshot == "fake-vlm-2026-01-01@fp_test"
    assert reply.finish_reason == "stop"
    assert reply.usage.output_tokens == 3
    assert reply.usage.input_tokens > 0
    assert reply.logprobs is None and reply.logprobs_status == "not_requested"


def test_images_are_sent_as_data_urls(openai_server):
    img = Image.new("RGB", (8, 6), (200, 10, 30))
    reply = _backend(openai_server).generate([user_message("describe", img)])
    assert reply.text == "echo: describe [1 image(s)]"
    part = openai_server.log.bodies[0]["messages"][0]["content"][1]
    url = part["image_url"]["url"]
    assert url.startswith("data:image/png;base64,")
    decoded = Image.open(io.BytesIO(base64.b64decode(url.split(",", 1)[1])))
    assert decoded.size == (8, 6) and decoded.convert("RGB").getpixel((3, 3)) == (200, 10, 30)


def test_generation_params_reach_the_server(openai_server):
    params = GenerationParams(temperature=0.7, max_tokens=33, top_p=0.9, seed=5, stop=("END",))
    _backend(openai_server).generate([user_message("x")], params)
    body = openai_server.log.bodies[0]
    assert (body["temperature"], body["max_tokens"], body["top_p"], body["seed"], body["stop"]) == (
        0.7,
        33,
        0.9,
        5,
        ["END"],
    )
    assert "logprobs" not in body


def test_unknown_backend_option_is_an_error(openai_server):
    with pytest.raises(ConfigError, match="temperatur"):
        create_backend("openai:m", base_url=openai_server.base_url, temperatur=0.2)
    with pytest.raises(ValueError, match="temprature"):
        GenerationParams.model_validate({"temprature": 0.1})


def test_missing_key_without_base_url_is_a_clear_error():
    with pytest.raises(ConfigError) as info:
        create_backend("openai:gpt-4o")
    assert str(info.value) == (
        "openai:gpt-4o: no API key. Set OPENAI_API_KEY (or ECHO_OPENAI_API_KEY), or point --base-url (option "
        "base_url) or ECHO_OPENAI_BASE_URL at a local OpenAI-compatible server."
    )


def test_logprobs_and_candidate_probabilities(openai_server):
    openai_server.reply = lambda body: Scripted(
        "Good", next_token_probs={"Good": 0.6, " Medium": 0.25, "Bad": 0.1, "ok": 0.05}
    )
    backend = _backend(openai_server)
    reply = backend.generate([user_message("rate")], GenerationParams(logprobs=True, top_logprobs=5))
    assert reply.logprobs_status == "ok"
    assert reply.logprobs[0].token == "Good"
    assert math.isclose(reply.logprobs[0].logprob, math.log(0.6))
    scores = backend.candidate_probabilities([user_message("rate")], ["Good", "Medium", "Bad"])
    assert math.isclose(sum(scores.probabilities.values()), 1.0)
    assert scores.probabilities["Good"] == pytest.approx(0.6 / 0.95)
    assert scores.probabilities["Medium"] == pytest.approx(0.25 / 0.95)  # " Medium" counts for "Medium"
    assert scores.coverage == pytest.approx(0.95)
    assert (
        openai_server.log.bodies[-1]["max_tokens"] == 1 and openai_server.log.bodies[-1]["top_logprobs"] == 20
    )


def test_missing_logprobs_are_reported(openai_server, caplog):
    openai_server.logprobs_supported = False
    backend = _backend(openai_server)
    reply = backend.generate([user_message("rate")], GenerationParams(logprobs=True))
    assert reply.logprobs is None and reply.logprobs_status == "unavailable"
    assert "logprobs were requested but the server returned none" in caplog.text
    with pytest.raises(LogprobsUnavailableError, match="no token log-probabilities"):
        backend.candidate_probabilities([user_message("rate")], ["Good", "Bad"])


@pytest.mark.slow
def test_200_requests_with_30_percent_faults_all_succeed(openai_server, tmp_path):
    openai_server.faults = FaultPlan(rate=0.3, seed=1, slow_s=3.0)
    backend = _backend(openai_server, timeout_s=1.5)
    caller = ModelCaller(backend, cache=CallCache(tmp_path), concurrency=16, timeout_s=1.5, retry=FAST_RETRY)
    requests = _requests(200)
    results = caller.call_many(requests)
    assert [r.reply.text for r in results] == [f"echo: question {i}" for i in range(200)]
    faults = [f for f in openai_server.log.faults if f]
    assert 0.2 < len(faults) / len(openai_server.log.faults) < 0.4
    assert set(faults) == {"429", "500", "drop", "slow", "garbage", "truncated", "wrong_fields"}
    # every request got a successful reply (on a loaded machine a reply can land after the client's timeout, so a
    # request may be answered twice: at least one success each, never fewer)
    assert len(openai_server.log.faults) - len(faults) >= 200
    assert (
        caller.stats.attempts == 200 + caller.stats.retries >= openai_server.calls
    )  # a drop may never arrive
    # a rerun answers everything from the cache without touching the server
    calls_before = openai_server.calls
    again = ModelCaller(backend, cache=caller.cache, concurrency=16, retry=FAST_RETRY).call_many(requests)
    assert openai_server.calls == calls_before
    assert all(r.cached for r in again) and [r.reply for r in again] == [r.reply for r in results]


def test_request_failing_forever_is_recorded_after_the_cap(openai_server):
    openai_server.faults = FaultPlan(always=lambda body: "doomed" in str(body["messages"]), always_kind="500")
    policy = RetryPolicy(max_attempts=4, initial_backoff_s=0.001, max_backoff_s=0.01)
    caller = ModelCaller(_backend(openai_server), concurrency=4, retry=policy)
    ok, doomed = caller.call_many(
        [CallRequest((user_message("fine"),)), CallRequest((user_message("doomed"),))]
    )
    assert ok.ok and ok.reply.text == "echo: fine"
    assert not doomed.ok and doomed.error_kind == "retries_exhausted" and doomed.attempts == 4
    assert "gave up after 4 attempt(s)" in doomed.error and "HTTP 500" in doomed.error
    assert sum("doomed" in str(b["messages"]) for b in openai_server.log.bodies) == 4


def test_permanent_errors_are_not_retried(openai_server):
    openai_server.faults = FaultPlan(always=lambda body: True, always_kind="400")
    caller = ModelCaller(_backend(openai_server), retry=FAST_RETRY)
    result = caller.call(CallRequest((user_message("x"),)))
    assert result.error_kind == "permanent" and result.attempts == 1 and "HTTP 400" in result.error
    assert openai_server.calls == 1


def test_retry_after_is_honoured(openai_server):
    first_only = lambda body: openai_server.calls == 1  # noqa: E731 (the body is logged before faults are chosen)
    openai_server.faults = FaultPlan(always=first_only, always_kind="429", retry_after_ms=300)
    caller = ModelCaller(_backend(openai_server), retry=RetryPolicy(initial_backoff_s=0.0, max_backoff_s=5))
    result = caller.call(CallRequest((user_message("x"),)))
    assert result.ok and result.attempts == 2
    assert openai_server.log.faults == ["429", ""]
    assert openai_server.log.times[1] - openai_server.log.times[0] >= 0.29


def test_retry_after_header_forms():
    assert parse_retry_after({"retry-after-ms": "1500"}) == 1.5
    assert parse_retry_after({"retry-after": "2"}) == 2.0
    assert parse_retry_after({"retry-after": "-3"}) == 0.0
    in_10s = time.strftime("%a, %d %b %Y %H:%M:%S GMT", time.gmtime(time.time() + 10))
    assert 8.0 < parse_retry_after({"retry-after": in_10s}) <= 10.0
    assert parse_retry_after({"retry-after": "soon"}) is None
    assert parse_retry_after({}) is None


def test_backoff_grows_exponentially_with_full_jitter():
    import random

    policy = RetryPolicy(initial_backoff_s=1.0, max_backoff_s=10.0, jitter=False)
    assert [policy.wait_s(n, None, random.Random(0)) for n in (1, 2, 3, 4, 5)] == [1.0, 2.0, 4.0, 8.0, 10.0]
    assert policy.wait_s(1, 7.0, random.Random(0)) == 7.0  # Retry-After wins when longer
    assert policy.wait_s(1, 70.0, random.Random(0)) == 10.0  # but never past the cap
    jittered = RetryPolicy(initial_backoff_s=1.0, max_backoff_s=10.0)
    waits = [jittered.wait_s(3, None, random.Random(s)) for s in range(200)]
    assert 0.0 <= min(waits) < 0.5 and 3.5 < max(waits) <= 4.0


def test_timeouts_are_retried(openai_server):
    # The slow reply would take 120 s: finishing at all well before it means the 0.3 s timeout cut the attempt
    # (the 60 s bound leaves a loaded machine 200 times the expected time).
    openai_server.faults = FaultPlan(
        always=lambda body: openai_server.calls == 1, always_kind="slow", slow_s=120.0
    )
    caller = ModelCaller(_backend(openai_server, timeout_s=200), timeout_s=0.3, retry=FAST_RETRY)
    start = time.perf_counter()
    result = caller.call(CallRequest((user_message("x"),)))
    assert result.ok and result.attempts == 2
    assert openai_server.log.faults[:2] == ["slow", ""]
    assert time.perf_counter() - start < 60.0


@pytest.mark.parametrize("concurrency", [1, 8, 32])
def test_in_flight_requests_equal_the_concurrency_limit(openai_server, concurrency):
    openai_server.hold_until_in_flight = concurrency  # each wave is answered once all its requests arrived
    caller = ModelCaller(_backend(openai_server), concurrency=concurrency, retry=FAST_RETRY)
    results = caller.call_many(_requests(2 * concurrency))
    assert all(r.ok for r in results)
    assert openai_server.log.max_in_flight == concurrency
    assert caller.stats.max_in_flight == concurrency


def test_structured_output_is_repaired_reasked_then_recorded(openai_server, tmp_path):
    from pydantic import BaseModel

    class Relevance(BaseModel):
        score: int
        note: str | None = None

    replies = {
        "fenced": 'Sure! ```json\n{"score": 4, "note": "uses the model",}\n```',
        "prose": 'I think {"score": 5} is right.',
        "bad-then-good": None,
        "hopeless": "I cannot rate this.",
    }

    def reply(body):
        text = body["messages"][0]["content"]
        if text == "bad-then-good":
            return '{"score": 3}' if len(body["messages"]) > 1 else "no idea"
        return replies[text]

    openai_server.reply = reply
    caller = ModelCaller(_backend(openai_server), cache=CallCache(tmp_path), retry=FAST_RETRY)
    out = caller.call_structured_many(
        [CallRequest((user_message(k),), stage="relevance") for k in replies], Relevance
    )
    assert [r.status for r in out] == ["ok", "ok", "ok", "parse_failure"]
    assert out[0].value == Relevance(score=4, note="uses the model")
    assert out[1].value.score == 5
    assert out[2].value.score == 3 and len(out[2].calls) == 2
    assert "Reply again with only one JSON object" in openai_server.log.bodies[-1]["messages"][-1]["content"]
    assert out[3].raw_text == "I cannot rate this." and out[3].value is None and "no JSON" in out[3].error
    n = openai_server.calls
    assert n == 6  # 4 first answers + 2 re-asks
    again = caller.call_structured_many(
        [CallRequest((user_message(k),), stage="relevance") for k in replies], Relevance
    )
    assert openai_server.calls == n and [r.status for r in again] == [r.status for r in out]


def test_api_key_never_leaks(tmp_path, monkeypatch, caplog):
    from tests.helpers.openai_server import FakeOpenAIServer

    secret = "sk-test-" + hashlib.sha256(b"not a real key").hexdigest()[:24]
    monkeypatch.setenv("OPENAI_API_KEY", secret)
    caplog.set_level("DEBUG")
    with FakeOpenAIServer(api_key="the-right-key") as server:
        backend = create_backend("openai:gpt-x", base_url=server.base_url)
        cache = CallCache(tmp_path / "cache")
        caller = ModelCaller(backend, cache=cache, retry=FAST_RETRY)
        failed = caller.call(CallRequest((user_message("x"),)))
        assert server.log.headers[0]["authorization"] == f"Bearer {secret}"  # the key really was sent
        with pytest.raises(Exception) as info:
            backend.generate([user_message("y")])
        server.api_key = None
        assert caller.call(CallRequest((user_message("z"),))).ok
        cache.close()
    assert not failed.ok and "Incorrect API key provided: ***" in failed.error
    texts = [failed.error, str(info.value), repr(info.value), caplog.text]
    texts += [p.read_bytes().decode("latin-1") for p in (tmp_path / "cache").iterdir()]
    assert all(secret not in t for t in texts)
