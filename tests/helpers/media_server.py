"""A scripted HTTP server on 127.0.0.1 for media-download tests.

``server.route(path, *responses)`` scripts the replies of ``GET path`` in order (the last one repeats); each
response is a :class:`Reply`. ``server.hits[path]`` counts requests. Unknown paths answer 404.
"""

from __future__ import annotations

import contextlib
import sys
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


@dataclass
class Reply:
    """One scripted response; ``content_length=False`` omits the header (the body ends when the socket closes)."""

    status: int = 200
    body: bytes = b""
    content_type: str | None = "image/png"
    headers: dict[str, str] = field(default_factory=dict)
    content_length: bool = True
    delay_s: float = 0.0


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    # listen() backlog; the default 5 drops bursts of parallel downloads for a second
    request_queue_size = 512

    def handle_error(self, request: object, client_address: object) -> None:
        if isinstance(sys.exc_info()[1], ConnectionError):  # the client died mid-request (a killed process)
            return
        super().handle_error(request, client_address)  # type: ignore[arg-type]


class MediaServer:
    """Start with ``with MediaServer() as server:``; ``server.url(path)`` is the full URL of ``path``."""

    def __init__(self) -> None:
        self.routes: dict[str, list[Reply]] = {}
        self.hits: Counter[str] = Counter()
        self._lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.0"  # the connection closes after each reply

            def do_GET(self) -> None:
                with server._lock:
                    server.hits[self.path] += 1
                    script = server.routes.get(self.path)
                    reply = (
                        (script.pop(0) if len(script) > 1 else script[0]) if script else Reply(404, b"nope")
                    )
                if reply.delay_s:
                    time.sleep(reply.delay_s)
                self.send_response(reply.status)
                if reply.content_type:
                    self.send_header("Content-Type", reply.content_type)
                if reply.content_length:
                    self.send_header("Content-Length", str(len(reply.body)))
                for name, value in reply.headers.items():
                    self.send_header(name, value)
                self.end_headers()
                with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                    self.wfile.write(reply.body)

            def log_message(self, format: str, *args: object) -> None:
                pass

        self._httpd = _Server(("127.0.0.1", 0), Handler)
        self.port = self._httpd.server_address[1]
        self._thread = threading.Thread(target=self._httpd.serve_forever, args=(0.05,), daemon=True)

    def route(self, path: str, *replies: Reply) -> str:
        """Script ``GET path`` and return its URL."""
        self.routes[path] = list(replies)
        return self.url(path)

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    @property
    def total_hits(self) -> int:
        return sum(self.hits.values())

    def __enter__(self) -> MediaServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
