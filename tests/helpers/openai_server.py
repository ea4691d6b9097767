"""A loopback OpenAI-compatible HTTP server with scripted replies and injectable faults.

Tests talk to it over real HTTP through the production ``openai:`` backend, so the client, retries and parsing
are exercised exactly as against OpenAI or vLLM. Faults are chosen deterministically from a hash of the request
body and its attempt number, so a test run is reproducible:

- ``429``: rate limited, with ``retry-after-ms`` (and ``Retry-After`` in whole seconds when asked);
- ``500``: server error;
- ``drop``: the connection is closed without a response;
- ``slow``: the reply comes after ``slow_s`` seconds (past the client's timeout);
- ``garbage``: HTTP 200 with a body that is not JSON;
- ``truncated``: HTTP 200 with the JSON cut in half;
- ``wrong_fields``: HTTP 200 with valid JSON lacking ``choices``.

The server records every request body and the peak number of requests in flight.
"""

from __future__ import annotations

import hashlib
import json
import math
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

FAULT_KINDS = ("429", "500", "drop", "slow", "garbage", "truncated", "wrong_fields")


@dataclass
class Scripted:
    """A scripted reply: text, optional next-token distribution (token -> probability), finish reason."""

    content: str | None
    next_token_probs: dict[str, float] | None = None
    finish_reason: str = "stop"


def default_reply(body: dict[str, Any]) -> Scripted:
    """Deterministic reply: ``echo: <text of the last user message>`` (images counted, not echoed)."""
    last = body["messages"][-1]["content"]
    if isinstance(last, str):
        text, images = last, 0
    else:
        text = "".join(p.get("text", "") for p in last if p.get("type") == "text")
        images = sum(1 for p in last if p.get("type") == "image_url")
    suffix = f" [{images} image(s)]" if images else ""
    return Scripted(f"echo: {text}{suffix}")


@dataclass
class FaultPlan:
    """Which faults to inject and how often.

    Attributes:
        rate: probability in [0, 1] that an attempt gets a fault (decided by hashing body and attempt number).
        kinds: fault kinds to draw from (see :data:`FAULT_KINDS`).
        always: predicate on the request body; matching requests fail with ``always_kind`` every time.
        retry_after_ms: value of ``retry-after-ms`` sent with 429s; ``retry_after_s`` sends ``Retry-After`` too.
        slow_s: delay of a ``slow`` fault in seconds.
    """

    rate: float = 0.0
    kinds: Sequence[str] = FAULT_KINDS
    seed: int = 0
    always: Callable[[dict[str, Any]], bool] | None = None
    always_kind: str = "500"
    retry_after_ms: float | None = 10.0
    retry_after_s: int | None = None
    slow_s: float = 2.0


@dataclass
class ServerLog:
    bodies: list[dict[str, Any]] = field(default_factory=list)
    headers: list[dict[str, str]] = field(default_factory=list)
    faults: list[str] = field(default_factory=list)
    times: list[float] = field(default_factory=list)
    in_flight: int = 0
    max_in_flight: int = 0


class FakeOpenAIServer:
    """Threaded loopback server speaking ``POST /v1/chat/completions`` and ``GET /v1/models``.

    Args:
        reply: maps a request body to a :class:`Scripted` reply (or a plain string).
        latency_s: delay added to every request, in seconds.
        faults: the :class:`FaultPlan`.
        logprobs_supported: when ``False`` the server ignores ``logprobs`` like some servers do.
        model_snapshot: the ``model`` field of replies.
    """

    def __init__(
        self,
        reply: Callable[[dict[str, Any]], Scripted | str] = default_reply,
        *,
        latency_s: float = 0.0,
        faults: FaultPlan | None = None,
        logprobs_supported: bool = True,
        model_snapshot: str = "fake-vlm-2026-01-01",
        api_key: str | None = None,
    ) -> None:
        self.reply = reply
        self.latency_s = latency_s
        self.faults = faults or FaultPlan()
        self.logprobs_supported = logprobs_supported
        self.model_snapshot = model_snapshot
        self.api_key = api_key
        self.log = ServerLog()
        self._attempts: dict[str, int] = {}
        self._lock = threading.Lock()
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # -- lifecycle ------------------------------------------------------------------------------------------------------
    def start(self) -> FakeOpenAIServer:
        server = self

        class Handler(_Handler):
            owner = server

        httpd = _Server(("127.0.0.1", 0), Handler)
        self._httpd = httpd
        self._thread = threading.Thread(
            target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._httpd = None

    def __enter__(self) -> FakeOpenAIServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def base_url(self) -> str:
        assert self._httpd is not None, "server not started"
        return f"http://127.0.0.1:{self._httpd.server_address[1]}/v1"

    @property
    def calls(self) -> int:
        return len(self.log.bodies)

    def reset_log(self) -> None:
        with self._lock:
            self.log = ServerLog()
            self._attempts.clear()

    # -- decisions ------------------------------------------------------------------------------------------------------
    def _choose_fault(self, body: dict[str, Any], raw: bytes) -> str | None:
        plan = self.faults
        if plan.always is not None and plan.always(body):
            return plan.always_kind
        if plan.rate <= 0:
            return None
        digest = hashlib.sha256(raw).hexdigest()
        with self._lock:
            attempt = self._attempts.get(digest, 0)
            self._attempts[digest] = attempt + 1
        draw = hashlib.sha256(f"{plan.seed}:{digest}:{attempt}".encode()).digest()
        if int.from_bytes(draw[:8], "big") / 2**64 >= plan.rate:
            return None
        return plan.kinds[draw[8] % len(plan.kinds)]

    def completion(self, body: dict[str, Any]) -> dict[str, Any]:
        scripted = self.reply(body)
        if isinstance(scripted, str):
            scripted = Scripted(scripted)
        choice: dict[str, Any] = {
            "index": 0,
            "message": {"role": "assistant", "content": scripted.content},
            "finish_reason": scripted.finish_reason,
            "logprobs": None,
        }
        if body.get("logprobs") and self.logprobs_supported:
            choice["logprobs"] = {"content": _logprobs(scripted, int(body.get("top_logprobs") or 0))}
        prompt_tokens = len(json.dumps(body["messages"])) // 4
        completion_tokens = len((scripted.content or "").split())
        return {
            "id": "chatcmpl-test",
            "object": "chat.completion",
            "created": 1767225600,
            "model": self.model_snapshot,
            "system_fingerprint": "fp_test",
            "choices": [choice],
            "usage": {
                "prompt_tokens": prompt_tokens,
                "completion_tokens": completion_tokens,
                "total_tokens": prompt_tokens + completion_tokens,
            },
        }


def _logprobs(scripted: Scripted, top_k: int) -> list[dict[str, Any]]:
    tokens = (scripted.content or "").split(" ") or [""]
    entries = []
    for i, token in enumerate(tokens):
        tok = token if i == 0 else " " + token
        alternatives: list[tuple[str, float]] = []
        if i == 0 and scripted.next_token_probs:
            alternatives = sorted(scripted.next_token_probs.items(), key=lambda kv: -kv[1])
        lp = math.log(dict(alternatives).get(tok, 0.5)) if alternatives else math.log(0.9)
        entries.append(
            {
                "token": tok,
                "logprob": lp,
                "bytes": None,
                "top_logprobs": [
                    {"token": t, "logprob": math.log(p), "bytes": None}
                    for t, p in alternatives[: max(top_k, 0)]
                ],
            }
        )
    return entries


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 512  # listen() backlog; the default 5 drops bursts of connections for a second


class _Handler(BaseHTTPRequestHandler):
    owner: FakeOpenAIServer
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = (
        True  # headers and body go out in two writes; Nagle + delayed ACK would add 40 ms
    )

    def log_message(self, format: str, *args: Any) -> None:  # keep test output quiet
        pass

    def _send(self, status: int, payload: bytes, headers: dict[str, str] | None = None) -> None:
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        try:
            self.wfile.write(payload)
        except (BrokenPipeError, ConnectionResetError):  # the client gave up (timeout): nothing to tell it
            self.close_connection = True

    def do_GET(self) -> None:
        if self.path.rstrip("/").endswith("/models"):
            body = {"object": "list", "data": [{"id": self.owner.model_snapshot, "object": "model"}]}
            self._send(200, json.dumps(body).encode())
        else:
            self._send(404, b'{"error": {"message": "not found"}}')

    def do_POST(self) -> None:
        owner = self.owner
        raw = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        if not self.path.rstrip("/").endswith("/chat/completions"):
            self._send(404, b'{"error": {"message": "not found"}}')
            return
        body = json.loads(raw)
        with owner._lock:
            owner.log.bodies.append(body)
            owner.log.headers.append({k.lower(): v for k, v in self.headers.items()})
            owner.log.times.append(time.monotonic())
            owner.log.in_flight += 1
            owner.log.max_in_flight = max(owner.log.max_in_flight, owner.log.in_flight)
        try:
            if owner.api_key is not None:
                given = self.headers.get("Authorization", "").removeprefix("Bearer ")
                if given != owner.api_key:
                    # Like OpenAI, the error echoes (part of) the key: the client must never repeat it.
                    msg = {
                        "error": {
                            "message": f"Incorrect API key provided: {given}",
                            "type": "invalid_request_error",
                        }
                    }
                    self._send(401, json.dumps(msg).encode())
                    return
            fault = owner._choose_fault(body, raw)
            with owner._lock:
                owner.log.faults.append(fault or "")
            if owner.latency_s:
                time.sleep(owner.latency_s)
            if fault is None:
                self._send(200, json.dumps(owner.completion(body)).encode())
            else:
                self._fault(fault)
        finally:
            with owner._lock:
                owner.log.in_flight -= 1

    def _fault(self, kind: str) -> None:
        plan = self.owner.faults
        if kind == "429":
            headers = {}
            if plan.retry_after_ms is not None:
                headers["retry-after-ms"] = str(plan.retry_after_ms)
            if plan.retry_after_s is not None:
                headers["Retry-After"] = str(plan.retry_after_s)
            self._send(429, b'{"error": {"message": "Rate limit reached", "type": "rate_limit"}}', headers)
        elif kind == "500":
            self._send(500, b'{"error": {"message": "internal error", "type": "server_error"}}')
        elif kind == "400":
            self._send(
                400, b'{"error": {"message": "bad request: invalid image", "type": "invalid_request_error"}}'
            )
        elif kind == "drop":
            self.close_connection = True
            self.connection.close()
        elif kind == "slow":
            time.sleep(plan.slow_s)
            self._send(200, b'{"choices": []}')
        elif kind == "garbage":
            self._send(200, b"<html>502 Bad Gateway</html> not json")
        elif kind == "truncated":
            self._send(200, b'{"id": "chatcmpl-x", "choices": [{"index": 0, "message": {"role": "assis')
        elif kind == "wrong_fields":
            self._send(200, b'{"id": "chatcmpl-x", "object": "chat.completion", "result": "ok"}')
        else:
            raise ValueError(f"unknown fault {kind!r}")
