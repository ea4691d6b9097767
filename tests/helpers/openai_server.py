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
- ``wrong_fields``: HTTP 200 with valid JSON lacking ``choices``;
- ``drop_mid``: status line, headers and half the promised body, then the connection is closed;
- ``wrong_schema``: a well-formed chat completion whose message is valid JSON with the wrong fields for every
  stage and judge (``{"result": "ok", "items": []}``): it reaches the caller as a success, so the stage's schema
  check and its one re-ask must catch it;
- ``gzip_bomb``: status ``bomb_status`` (200) with ``Content-Encoding: gzip`` and a small body that inflates to
  ``bomb_bytes`` zero bytes (64 MiB by default; the compressed body is about 1/1000 of that);
- ``big_body``: HTTP 200 with ``big_body_bytes`` of JSON-ish text sent in 64 KiB chunks without a
  ``Content-Length`` (chunked transfer coding), so only reading can find its size. The server counts the bytes it
  managed to send in :attr:`ServerLog.body_bytes_sent` (the client stops reading, the rest never leaves).

:data:`FAULT_KINDS` (the default of :class:`FaultPlan`) keeps its original seven kinds so seeded tests keep their
draws; :data:`ALL_FAULT_KINDS` adds the two later ones. The server records every request body (or, with
``record_bodies=False``, only its SHA-256, for long benchmarks), the fault of each request, and the peak number
of requests in flight.

Image routes: ``POST /v1/images/generations`` (JSON) and ``POST /v1/images/edits`` (multipart, the input images
as files) answer with base64 PNGs from :attr:`FakeOpenAIServer.image_reply` (default :func:`default_image`), and
get the same faults. The parsed body (``model``, ``prompt``, ``images`` as bytes for edits, ``_route``) is logged
like a chat body; the fault draw hashes it in a canonical form (multipart boundaries change per attempt). The
``refuse`` fault kind (usable with ``FaultPlan.always``) answers 400 ``moderation_blocked``, as OpenAI does for a
content-policy refusal.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

FAULT_KINDS = ("429", "500", "drop", "slow", "garbage", "truncated", "wrong_fields")
ALL_FAULT_KINDS = (*FAULT_KINDS, "drop_mid", "wrong_schema")
WRONG_SCHEMA_CONTENT = '{"result": "ok", "items": []}'


@dataclass
class Scripted:
    """A scripted reply: text, optional next-token distribution (token -> probability), finish reason."""

    content: str | None
    next_token_probs: dict[str, float] | None = None
    finish_reason: str = "stop"


@dataclass
class ScriptedImage:
    """A scripted image reply: PNG bytes (``None``: :func:`default_image`), or a content-policy refusal."""

    png: bytes | None = None
    refuse: bool = False
    revised_prompt: str | None = None


def default_image(body: dict[str, Any]) -> ScriptedImage:
    """A 16 x 16 PNG of one colour: the first 3 bytes of SHA-256 over the model, prompt and input image bytes."""
    import io

    from PIL import Image

    digest = hashlib.sha256(f"{body.get('model')}\x00{body.get('prompt')}".encode())
    for image in body.get("images", ()):
        digest.update(image)
    buf = io.BytesIO()
    Image.new("RGB", (16, 16), tuple(digest.digest()[:3])).save(buf, format="PNG")
    return ScriptedImage(buf.getvalue())


def _multipart_fields(content_type: str, raw: bytes) -> dict[str, Any]:
    """Form fields of a multipart body; file fields named ``image``/``image[]`` go to ``images`` (bytes)."""
    from email import policy
    from email.parser import BytesParser

    message = BytesParser(policy=policy.HTTP).parsebytes(
        f"Content-Type: {content_type}\r\n\r\n".encode() + raw
    )
    fields: dict[str, Any] = {"images": []}
    for part in message.iter_parts():
        name = part.get_param("name", header="content-disposition")
        payload = part.get_payload(decode=True) or b""
        if part.get_filename() is not None and str(name).startswith("image"):
            fields["images"].append(payload)
        elif name is not None:
            fields[str(name)] = payload.decode("utf-8")
    return fields


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
    bomb_bytes: int = 64 * 2**20
    bomb_status: int = 200
    big_body_bytes: int = 64 * 2**20


@dataclass
class ServerLog:
    bodies: list[dict[str, Any]] = field(default_factory=list)
    digests: list[str] = field(default_factory=list)  # SHA-256 of each raw request body, in arrival order
    headers: list[dict[str, str]] = field(default_factory=list)
    faults: list[str] = field(default_factory=list)
    times: list[float] = field(default_factory=list)
    body_bytes_sent: int = 0  # bytes of ``big_body`` replies written before the client stopped reading
    in_flight: int = 0
    max_in_flight: int = 0


class FakeOpenAIServer:
    """Threaded loopback server speaking ``POST /v1/chat/completions`` and ``GET /v1/models`` (and the image
    routes: see the module docstring; set :attr:`image_reply` to script them).

    Args:
        reply: maps a request body to a :class:`Scripted` reply (or a plain string).
        latency_s: delay added to every request, in seconds.
        faults: the :class:`FaultPlan`.
        logprobs_supported: when ``False`` the server ignores ``logprobs`` like some servers do.
        model_snapshot: the ``model`` field of replies.
        record_bodies: keep every parsed request body in ``log.bodies`` and its headers in ``log.headers``;
            ``False`` keeps only ``log.digests`` (``log.bodies`` then holds the digests too, so ``calls`` still
            counts requests, and ``log.headers`` empty dicts), for long benchmarks.
    """

    #: Maps an image request body to a :class:`ScriptedImage` (or PNG bytes); tests replace it per server.
    image_reply: Callable[[dict[str, Any]], ScriptedImage | bytes] = staticmethod(default_image)

    def __init__(
        self,
        reply: Callable[[dict[str, Any]], Scripted | str] = default_reply,
        *,
        latency_s: float = 0.0,
        faults: FaultPlan | None = None,
        logprobs_supported: bool = True,
        model_snapshot: str = "fake-vlm-2026-01-01",
        api_key: str | None = None,
        record_bodies: bool = True,
    ) -> None:
        self.reply = reply
        self.record_bodies = record_bodies
        self.latency_s = latency_s
        self.faults = faults or FaultPlan()
        self.logprobs_supported = logprobs_supported
        self.model_snapshot = model_snapshot
        self.api_key = api_key
        self.log = ServerLog()
        #: When set, each chat request waits (30 s at most) until this many are in flight before answering, so a
        #: test sees the client's full concurrency however slowly a loaded machine opens the connections.
        self.hold_until_in_flight: int | None = None
        self._attempts: dict[str, int] = {}
        self._lock = threading.Lock()
        self._in_flight_changed = threading.Condition(self._lock)
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

    def completion(self, body: dict[str, Any], *, scripted: Scripted | str | None = None) -> dict[str, Any]:
        """The chat completion answering ``body``: ``scripted`` when given, else ``self.reply(body)``."""
        scripted = self.reply(body) if scripted is None else scripted
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


_GZIP_ZEROS: dict[int, bytes] = {}


def _gzip_zeros(n: int) -> bytes:
    """A gzip member inflating to ``n`` zero bytes (compressed in 1 MiB steps, cached per size)."""
    if n not in _GZIP_ZEROS:
        import zlib

        compressor = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
        block = bytes(2**20)
        parts = [compressor.compress(block[: min(len(block), n - done)]) for done in range(0, n, len(block))]
        _GZIP_ZEROS[n] = b"".join(parts) + compressor.flush()
    return _GZIP_ZEROS[n]


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 512  # listen() backlog; the default 5 drops bursts of connections for a second

    def handle_error(self, request: Any, client_address: Any) -> None:
        if isinstance(sys.exc_info()[1], ConnectionError):  # the client died mid-request (a killed process)
            return
        super().handle_error(request, client_address)


class _Handler(BaseHTTPRequestHandler):
    owner: FakeOpenAIServer
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = (
        True  # headers and body go out in two writes; Nagle + delayed ACK would add 40 ms
    )

    def log_message(self, format: str, *args: Any) -> None:  # keep test output quiet
        pass

    def _leave(self) -> None:
        """This request stops counting as in flight (once): before its reply is sent, so that a client which
        sends its next request the moment it has a reply is never seen one over its limit."""
        if getattr(self, "_counted_in_flight", False):
            self._counted_in_flight = False
            with self.owner._lock:
                self.owner.log.in_flight -= 1

    def _send(self, status: int, payload: bytes, headers: dict[str, str] | None = None) -> None:
        self._leave()
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
        self.path = self.path.split("?", 1)[0]  # a key in the query (?api-key=) does not change the route
        if self.path.rstrip("/").endswith("/models"):
            body = {"object": "list", "data": [{"id": self.owner.model_snapshot, "object": "model"}]}
            self._send(200, json.dumps(body).encode())
        else:
            self._send(404, b'{"error": {"message": "not found"}}')

    def do_POST(self) -> None:
        owner = self.owner
        self.path = self.path.split("?", 1)[0]  # a key in the query (?api-key=) does not change the route
        length = int(self.headers.get("Content-Length", 0))
        raw = self.rfile.read(length)
        if len(raw) < length:  # the client died while sending (a killed process): nothing to answer
            self.close_connection = True
            return
        if "/images/" in self.path:
            self._images_post(raw)
            return
        if not self.path.rstrip("/").endswith("/chat/completions"):
            self._send(404, b'{"error": {"message": "not found"}}')
            return
        body = json.loads(raw)
        digest = hashlib.sha256(raw).hexdigest()
        with owner._lock:
            log = owner.log  # this request's entries stay aligned: faults[i] is the fault of bodies[i]
            index = len(log.bodies)
            log.bodies.append(body if owner.record_bodies else digest)
            log.digests.append(digest)
            log.faults.append("")
            log.headers.append({k.lower(): v for k, v in self.headers.items()} if owner.record_bodies else {})
            log.times.append(time.monotonic())
            log.in_flight += 1
            self._counted_in_flight = True
            log.max_in_flight = max(log.max_in_flight, log.in_flight)
            owner._in_flight_changed.notify_all()
            hold = owner.hold_until_in_flight
            if hold:
                owner._in_flight_changed.wait_for(lambda: log.in_flight >= hold, timeout=30.0)
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
                log.faults[index] = fault or ""
            if owner.latency_s:
                time.sleep(owner.latency_s)
            if fault is None:
                self._send(200, json.dumps(owner.completion(body)).encode())
            elif fault == "wrong_schema":
                wrong = owner.completion(body, scripted=Scripted(WRONG_SCHEMA_CONTENT))
                self._send(200, json.dumps(wrong).encode())
            else:
                self._fault(fault)
        finally:
            self._leave()

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
        elif kind == "drop_mid":
            payload = (
                b'{"id": "chatcmpl-x", "object": "chat.completion", "choices": [{"index": 0, "message": '
            )
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(2 * len(payload)))
            self.end_headers()
            with contextlib.suppress(OSError):
                self.wfile.write(payload)
                self.wfile.flush()
            self.close_connection = True
            self.connection.close()
        elif kind == "wrong_fields":
            self._send(200, b'{"id": "chatcmpl-x", "object": "chat.completion", "result": "ok"}')
        elif kind == "gzip_bomb":
            payload = _gzip_zeros(plan.bomb_bytes)
            self._send(plan.bomb_status, payload, {"Content-Encoding": "gzip"})
        elif kind == "big_body":
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            chunk = b" " * 65536
            sent = 0
            try:
                while sent < plan.big_body_bytes:
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                    sent += len(chunk)
                    with self.owner._lock:
                        self.owner.log.body_bytes_sent += len(chunk)
                self.wfile.write(b"0\r\n\r\n")
            except OSError:  # the client stopped reading: what it refused was never sent
                pass
            self.close_connection = True
        elif kind == "refuse":
            error = {
                "message": "Your request was rejected as a result of our safety system.",
                "type": "image_generation_user_error",
                "code": "moderation_blocked",
            }
            self._send(400, json.dumps({"error": error}).encode())
        else:
            raise ValueError(f"unknown fault {kind!r}")

    def _images_post(self, raw: bytes) -> None:
        """``/v1/images/generations`` and ``/v1/images/edits``: a scripted image, or a fault."""
        import base64

        owner = self.owner
        route = self.path.rstrip("/").rsplit("/", 1)[-1]
        if route == "generations":
            body = json.loads(raw)
        elif route == "edits":
            body = _multipart_fields(self.headers.get("Content-Type", ""), raw)
        else:
            self._send(404, b'{"error": {"message": "not found"}}')
            return
        body["_route"] = route
        canonical = json.dumps(
            {k: [hashlib.sha256(i).hexdigest() for i in v] if k == "images" else v for k, v in body.items()},
            sort_keys=True,
        ).encode()
        with owner._lock:
            log = owner.log  # faults[i] stays the fault of bodies[i] when requests overlap
            index = len(log.bodies)
            log.bodies.append(body)
            log.digests.append(hashlib.sha256(canonical).hexdigest())
            log.faults.append("")
            log.headers.append({k.lower(): v for k, v in self.headers.items()})
            log.times.append(time.monotonic())
            log.in_flight += 1
            self._counted_in_flight = True
            log.max_in_flight = max(log.max_in_flight, log.in_flight)
        try:
            fault = owner._choose_fault(body, canonical)
            with owner._lock:
                log.faults[index] = fault or ""
            if owner.latency_s:
                time.sleep(owner.latency_s)
            scripted = owner.image_reply(body) if fault is None else None
            if isinstance(scripted, bytes):
                scripted = ScriptedImage(scripted)
            if scripted is None or scripted.refuse:
                self._fault(fault or "refuse")
                return
            png = scripted.png if scripted.png is not None else default_image(body).png
            item = {"b64_json": base64.b64encode(png or b"").decode("ascii")}
            if scripted.revised_prompt is not None:
                item["revised_prompt"] = scripted.revised_prompt
            reply = {
                "created": 1767225600,
                "data": [item],
                "usage": {"input_tokens": 10, "output_tokens": 100},
            }
            self._send(200, json.dumps(reply).encode())
        finally:
            self._leave()
