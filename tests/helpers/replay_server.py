"""A loopback HTTP server that replays recorded API exchanges (``../shared/data/api_recordings``) to the real
client libraries (tweepy, atproto, praw), with scripted faults on top.

A test lists :class:`Route` s: method, path, the query (or form) parameters that must match (``None``: must be
absent; parameters not named are ignored, so the client may send its own fields and expansions), and the replies
to give in order. A route whose replies are used up no longer matches; a request that no route matches gets a 404
and is recorded in :attr:`ReplayServer.misses`, so a test can assert that nothing unexpected was asked. Every
request is kept in :attr:`ReplayServer.requests` (method, path, parameters, headers).

Replies: :meth:`Reply.recorded` loads ``NN_name.response.json`` with its ``.response.headers.json`` (status and
headers as recorded; ``edit`` may change the decoded body, e.g. to drop or set a cursor), and the fault makers
:func:`rate_limited`, :func:`server_error`, :func:`html_page`, :func:`truncated`.
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlsplit

_DROPPED = {"connection", "content-length", "content-encoding", "transfer-encoding", "keep-alive"}


@dataclass
class Reply:
    status: int
    headers: dict[str, str]
    body: bytes

    @classmethod
    def recorded(cls, prefix: Path, edit: Callable[[Any], Any] | None = None) -> Reply:
        """The recorded reply ``<prefix>.response.json`` / ``<prefix>.response.headers.json``."""
        meta = json.loads(Path(f"{prefix}.response.headers.json").read_text(encoding="utf-8"))
        text = Path(f"{prefix}.response.json").read_text(encoding="utf-8")
        if edit is not None:
            text = json.dumps(edit(json.loads(text)))
        headers = {k: v for k, v in meta["headers"].items() if k.lower() not in _DROPPED}
        headers.setdefault("content-type", "application/json; charset=utf-8")
        return cls(int(meta["status"]), headers, text.encode("utf-8"))

    @classmethod
    def json(cls, body: Any, status: int = 200, headers: dict[str, str] | None = None) -> Reply:
        return cls(
            status,
            {"content-type": "application/json; charset=utf-8", **(headers or {})},
            json.dumps(body).encode(),
        )


def rate_limited(headers: dict[str, str], body: Any = None) -> Reply:
    """A 429 with the given rate-limit headers (e.g. ``x-rate-limit-remaining: 0``, ``x-rate-limit-reset``)."""
    return Reply.json(
        body if body is not None else {"title": "Too Many Requests", "status": 429}, 429, headers
    )


def server_error(status: int = 503) -> Reply:
    return Reply.json({"title": "Service Unavailable", "status": status}, status)


def html_page(status: int = 200, title: str = "Something went wrong") -> Reply:
    page = f"<!DOCTYPE html><html><head><title>{title}</title></head><body><h1>{title}</h1></body></html>"
    return Reply(status, {"content-type": "text/html; charset=utf-8"}, page.encode())


def truncated(reply: Reply, keep: float = 0.5) -> Reply:
    """``reply`` with its body cut after ``keep`` of its bytes (a dropped connection's JSON)."""
    return Reply(reply.status, dict(reply.headers), reply.body[: max(1, int(len(reply.body) * keep))])


@dataclass
class Route:
    method: str
    path: str
    match: dict[str, str | None]
    replies: list[Reply]
    served: int = 0

    def matches(self, method: str, path: str, params: dict[str, str]) -> bool:
        if self.served >= len(self.replies) or method != self.method or path != self.path:
            return False
        for key, value in self.match.items():
            if value is None:
                if key in params:
                    return False
            elif params.get(key) != value:
                return False
        return True


@dataclass
class Seen:
    method: str
    path: str
    params: dict[str, str]
    headers: dict[str, str]
    status: int = 0


@dataclass
class ReplayServer:
    routes: list[Route] = field(default_factory=list)
    requests: list[Seen] = field(default_factory=list)
    misses: list[Seen] = field(default_factory=list)
    #: Seconds each reply waits before it is sent (a slow API, so a test can kill a client mid-request).
    delay_s: float = 0.0

    def __post_init__(self) -> None:
        self._lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def _serve(self) -> None:
                parts = urlsplit(self.path)
                params = dict(parse_qsl(parts.query, keep_blank_values=True))
                length = int(self.headers.get("content-length") or 0)
                if length:
                    raw = self.rfile.read(length).decode("utf-8", "replace")
                    if "json" in (self.headers.get("content-type") or ""):
                        try:
                            body = json.loads(raw)
                            params.update(
                                {k: str(v) for k, v in body.items()} if isinstance(body, dict) else {}
                            )
                        except ValueError:
                            pass
                    else:
                        params.update(dict(parse_qsl(raw, keep_blank_values=True)))
                seen = Seen(self.command, parts.path, params, {k.lower(): v for k, v in self.headers.items()})
                with server._lock:
                    server.requests.append(seen)
                    route = next(
                        (r for r in server.routes if r.matches(self.command, parts.path, params)), None
                    )
                    if route is None:
                        server.misses.append(seen)
                        reply = Reply.json({"error": "no recorded reply", "path": parts.path}, 404)
                    else:
                        reply = route.replies[route.served]
                        route.served += 1
                seen.status = reply.status
                if server.delay_s:
                    time.sleep(server.delay_s)
                with contextlib.suppress(
                    BrokenPipeError, ConnectionResetError
                ):  # a client killed mid-request
                    self._reply(reply)

            def _reply(self, reply: Reply) -> None:
                self.send_response(reply.status)
                for key, value in reply.headers.items():
                    self.send_header(key, value)
                self.send_header("content-length", str(len(reply.body)))
                # one request per connection: a client reusing a kept-alive connection sometimes met it closed
                # ("Remote end closed connection without response"), which prawcore retries after a random
                # sleep, so retry counts varied from run to run
                self.send_header("connection", "close")
                self.end_headers()
                self.wfile.write(reply.body)

            do_GET = do_POST = _serve

            def log_message(self, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def add(self, method: str, path: str, replies: list[Reply], **match: str | None) -> Route:
        route = Route(method, path, dict(match), list(replies))
        self.routes.append(route)
        return route

    def __enter__(self) -> ReplayServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)

    def count(self, path: str) -> int:
        return sum(1 for r in self.requests if r.path == path)
