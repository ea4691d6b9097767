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

Batch API routes (:class:`BatchAPI`, at :attr:`FakeOpenAIServer.batch_api`): ``POST /v1/files`` (multipart upload,
purpose ``batch``), ``GET /v1/files/{id}`` and ``GET /v1/files/{id}/content``, ``POST /v1/batches``,
``GET /v1/batches`` (list), ``GET /v1/batches/{id}`` and ``POST /v1/batches/{id}/cancel``. A batch answers each
line with :meth:`FakeOpenAIServer.completion` (the same scripted replies as the online route) once it has been
retrieved :attr:`BatchAPI.polls_until_done` times; :attr:`BatchAPI.line_error` scripts per-line failures and
:attr:`BatchAPI.final_status` an ``expired`` or ``cancelled`` ending.
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


def _upload_fields(content_type: str, raw: bytes) -> dict[str, Any]:
    """Fields of a multipart file upload: ``file`` -> (filename, bytes), other fields as text."""
    from email import policy
    from email.parser import BytesParser

    message = BytesParser(policy=policy.HTTP).parsebytes(
        f"Content-Type: {content_type}\r\n\r\n".encode() + raw
    )
    fields: dict[str, Any] = {}
    for part in message.iter_parts():
        name = part.get_param("name", header="content-disposition")
        payload = part.get_payload(decode=True) or b""
        if part.get_filename() is not None:
            fields[str(name)] = (part.get_filename(), payload)
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


@dataclass
class BatchAPI:
    """State and script of the fake Batch API (files and batches).

    Attributes:
        polls_until_done: retrievals of a batch answered ``in_progress`` before it ends.
        retrieve_errors: the next this many retrievals of a batch are answered HTTP 500 (and not counted).
        final_status: how a batch ends: ``completed``, ``expired`` (lines for which :attr:`expire_line` is true
            land in the error file as ``batch_expired``; the others are answered) or ``cancelled`` (no line is
            answered: each is a ``batch_cancelled`` error line).
        line_error: maps a request line (``custom_id``, ``method``, ``url``, ``body``) to an HTTP status for an
            error line (e.g. ``500``, ``429``, ``400``), or ``None`` to answer it.
        expire_line: which lines an ``expired`` batch leaves unanswered (default: every second line).
        files: file id -> bytes; uploads: file id -> (filename, purpose); batches: batch id -> batch object.
        creates: bodies of ``POST /v1/batches``, in order; retrievals: batch ids of each ``GET``; lines: every
            request line processed by a batch, in order.
    """

    polls_until_done: int = 0
    retrieve_errors: int = 0
    final_status: str = "completed"
    line_error: Callable[[dict[str, Any]], int | None] | None = None
    expire_line: Callable[[int, dict[str, Any]], bool] = field(default=lambda i, line: i % 2 == 1)
    files: dict[str, bytes] = field(default_factory=dict)
    uploads: dict[str, tuple[str, str]] = field(default_factory=dict)
    batches: dict[str, dict[str, Any]] = field(default_factory=dict)
    creates: list[dict[str, Any]] = field(default_factory=list)
    retrievals: list[str] = field(default_factory=list)
    lines: list[dict[str, Any]] = field(default_factory=list)
    _polls: dict[str, int] = field(default_factory=dict)

    def new_id(self, prefix: str) -> str:
        return f"{prefix}-{len(self.files) + len(self.batches) + 1:04d}"


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
        #: the Batch API's script and state (files, batches, every create and retrieval)
        self.batch_api = BatchAPI()
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

    # -- Batch API ---------------------------------------------------------------------------------------------------
    def upload(self, filename: str, purpose: str, data: bytes) -> dict[str, Any]:
        api = self.batch_api
        with self._lock:
            file_id = api.new_id("file")
            api.files[file_id] = data
            api.uploads[file_id] = (filename, purpose)
        return _file_object(file_id, filename, purpose, len(data))

    def create_batch(self, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        api = self.batch_api
        with self._lock:
            api.creates.append(body)
            if body.get("input_file_id") not in api.files:
                return 404, {
                    "error": {"message": f"no file {body.get('input_file_id')!r}", "type": "invalid_request"}
                }
            if body.get("completion_window") != "24h" or body.get("endpoint") != "/v1/chat/completions":
                return 400, {
                    "error": {"message": "unsupported endpoint or window", "type": "invalid_request"}
                }
            batch_id = api.new_id("batch")
            batch = {
                "id": batch_id,
                "object": "batch",
                "endpoint": body["endpoint"],
                "completion_window": "24h",
                "input_file_id": body["input_file_id"],
                "status": "validating",
                "created_at": 1767225600,
                "expires_at": 1767225600 + 86400,
                "metadata": body.get("metadata"),
                "output_file_id": None,
                "error_file_id": None,
                "errors": None,
                "request_counts": {"total": 0, "completed": 0, "failed": 0},
            }
            api.batches[batch_id] = batch
            api._polls[batch_id] = 0
        return 200, batch

    def retrieve_batch(self, batch_id: str) -> dict[str, Any] | None:
        api = self.batch_api
        with self._lock:
            batch = api.batches.get(batch_id)
            if batch is None:
                return None
            api.retrievals.append(batch_id)
            if batch["status"] in ("validating", "in_progress"):
                if api._polls[batch_id] < api.polls_until_done:
                    api._polls[batch_id] += 1
                    batch["status"] = "in_progress"
                else:
                    self._finish_batch(batch)
            return dict(batch)

    def cancel_batch(self, batch_id: str) -> dict[str, Any] | None:
        with self._lock:
            batch = self.batch_api.batches.get(batch_id)
            if batch is None:
                return None
            if batch["status"] in ("validating", "in_progress"):
                batch["status"] = "cancelled"
            return dict(batch)

    def _finish_batch(self, batch: dict[str, Any]) -> None:
        """Answer the batch's lines (caller holds the lock): output and error files, counts, final status."""
        api = self.batch_api
        raw = api.files[batch["input_file_id"]].decode("utf-8")
        try:
            lines = [json.loads(line) for line in raw.splitlines() if line.strip()]
            bad = [
                i
                for i, line in enumerate(lines)
                if set(line) != {"custom_id", "method", "url", "body"}
                or line["method"] != "POST"
                or line["url"] != batch["endpoint"]
                or not isinstance(line["body"], dict)
                or "model" not in line["body"]
            ]
        except ValueError:
            lines, bad = [], [0]
        if bad or not lines:
            batch["status"] = "failed"
            batch["errors"] = {
                "object": "list",
                "data": [
                    {"code": "invalid_request", "line": (bad or [0])[0] + 1, "message": "malformed line"}
                ],
            }
            return
        out, err = [], []
        for i, line in enumerate(lines):
            api.lines.append(line)
            answer_id = f"batch_req_{i:05d}"
            unanswered = api.final_status == "cancelled" or (
                api.final_status == "expired" and api.expire_line(i, line)
            )
            if unanswered:
                code = "batch_expired" if api.final_status == "expired" else "batch_cancelled"
                err.append(
                    {
                        "id": answer_id,
                        "custom_id": line["custom_id"],
                        "response": None,
                        "error": {"code": code, "message": f"this request was not run: {code}"},
                    }
                )
                continue
            status = api.line_error(line) if api.line_error is not None else None
            if status is not None:
                body = {"error": {"message": f"scripted failure {status}", "type": "server_error"}}
                err.append(
                    {
                        "id": answer_id,
                        "custom_id": line["custom_id"],
                        "response": {"status_code": status, "request_id": f"req_{i}", "body": body},
                        "error": None,
                    }
                )
                continue
            out.append(
                {
                    "id": answer_id,
                    "custom_id": line["custom_id"],
                    "response": {
                        "status_code": 200,
                        "request_id": f"req_{i}",
                        "body": self.completion(line["body"]),
                    },
                    "error": None,
                }
            )
        for name, rows in (("output_file_id", out), ("error_file_id", err)):
            if rows:
                file_id = api.new_id("file")
                api.files[file_id] = "".join(json.dumps(r) + "\n" for r in rows).encode()
                api.uploads[file_id] = (f"{batch['id']}_{name}.jsonl", "batch_output")
                batch[name] = file_id
        batch["status"] = api.final_status
        batch["request_counts"] = {"total": len(lines), "completed": len(out), "failed": len(err)}


def _file_object(file_id: str, filename: str, purpose: str, size: int) -> dict[str, Any]:
    return {
        "id": file_id,
        "object": "file",
        "bytes": size,
        "created_at": 1767225600,
        "filename": filename,
        "purpose": purpose,
        "status": "processed",
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
        elif "/files/" in self.path or "/batches" in self.path:
            self._batch_get(self.path.rstrip("/"))
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
        if self.path.rstrip("/").endswith("/files") or "/batches" in self.path:
            self._batch_post(self.path.rstrip("/"), raw)
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

    def _not_found(self, what: str) -> None:
        self._send(
            404, json.dumps({"error": {"message": f"no such {what}", "type": "invalid_request"}}).encode()
        )

    def _batch_get(self, path: str) -> None:
        """``GET /v1/files/{id}[/content]``, ``GET /v1/batches[/{id}]``."""
        owner, api = self.owner, self.owner.batch_api
        parts = path.split("/")
        if parts[-1] == "content" and parts[-3] == "files":
            data = api.files.get(parts[-2])
            if data is None:
                self._not_found("file")
                return
            self._leave()
            self.send_response(200)
            self.send_header("Content-Type", "application/octet-stream")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
        elif parts[-2] == "files":
            if parts[-1] not in api.files:
                self._not_found("file")
                return
            filename, purpose = api.uploads[parts[-1]]
            self._send(
                200,
                json.dumps(_file_object(parts[-1], filename, purpose, len(api.files[parts[-1]]))).encode(),
            )
        elif parts[-1] == "batches":
            with owner._lock:
                data = [dict(b) for b in reversed(api.batches.values())]
            page = {
                "object": "list",
                "data": data,
                "has_more": False,
                "first_id": data[0]["id"] if data else None,
                "last_id": data[-1]["id"] if data else None,
            }
            self._send(200, json.dumps(page).encode())
        elif parts[-2] == "batches" and api.retrieve_errors > 0:
            with owner._lock:
                api.retrieve_errors -= 1
            self._send(500, b'{"error": {"message": "internal error", "type": "server_error"}}')
        elif parts[-2] == "batches":
            batch = owner.retrieve_batch(parts[-1])
            if batch is None:
                self._not_found("batch")
            else:
                self._send(200, json.dumps(batch).encode())
        else:
            self._not_found("route")

    def _batch_post(self, path: str, raw: bytes) -> None:
        """``POST /v1/files`` (multipart), ``POST /v1/batches``, ``POST /v1/batches/{id}/cancel``."""
        owner = self.owner
        if path.endswith("/files"):
            fields = _upload_fields(self.headers.get("Content-Type", ""), raw)
            if "file" not in fields:
                self._send(400, b'{"error": {"message": "no file part", "type": "invalid_request"}}')
                return
            filename, data = fields["file"]
            self._send(200, json.dumps(owner.upload(filename, fields.get("purpose", ""), data)).encode())
        elif path.endswith("/batches"):
            status, reply = owner.create_batch(json.loads(raw))
            self._send(status, json.dumps(reply).encode())
        elif path.endswith("/cancel"):
            batch = owner.cancel_batch(path.split("/")[-2])
            if batch is None:
                self._not_found("batch")
            else:
                self._send(200, json.dumps(batch).encode())
        else:
            self._not_found("route")

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
