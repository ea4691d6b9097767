"""A total deadline for one request, and a name lookup that obeys it.

:class:`Deadline` bounds everything done for one request (name lookup, connect, TLS, every redirect hop, headers,
body, and retry waits): when it passes, every socket opened under it is shut down, so a read blocked on a server that
drips one byte at a time ends at once instead of waiting for the next byte. A per-read timeout cannot do that: each
byte arriving resets it. :func:`resolve` is ``getaddrinfo`` with a deadline of its own (the system resolver's can be
far longer).
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from typing import Any

__all__ = ["Deadline", "DeadlineExceeded", "current_deadline", "resolve", "using_deadline"]


class DeadlineExceeded(Exception):
    """A request ran past its total deadline (``seconds``); its sockets were shut down."""

    def __init__(self, message: str, seconds: float) -> None:
        super().__init__(message)
        self.seconds = seconds


class Deadline:
    """The total time one request may take. Use as a context manager; ``seconds`` > 0.

    Sockets handed to :meth:`watch` are shut down (``SHUT_RDWR`` on a duplicate descriptor, so TLS wrapping does
    not matter) when the deadline passes, and closed when the context ends.
    """

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.end = time.monotonic() + seconds
        self.expired = False
        self._lock = threading.Lock()
        self._sockets: list[socket.socket] = []
        self._timer = threading.Timer(seconds, self._expire)
        self._timer.daemon = True

    def __enter__(self) -> Deadline:
        self._timer.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._timer.cancel()
        with self._lock:
            for sock in self._sockets:
                sock.close()
            self._sockets.clear()

    def remaining(self) -> float:
        """Seconds left (0.0 once passed)."""
        return max(0.0, self.end - time.monotonic())

    def error(self) -> Exception:
        """The exception a request that ran past the deadline raises (subclasses word it for their callers)."""
        return DeadlineExceeded(
            f"abandoned: over the {self.seconds:g} s total deadline per request (connect, redirects, headers and "
            "body)",
            self.seconds,
        )

    def check(self) -> float:
        """The seconds left; raises :meth:`error` when none are."""
        left = self.remaining()
        if self.expired or left <= 0:
            raise self.error()
        return left

    def watch(self, sock: socket.socket) -> None:
        """Shut ``sock`` down when the deadline passes (at once if it already has)."""
        dup = sock.dup()
        with self._lock:
            self._sockets.append(dup)
            expired = self.expired
        if expired:
            with contextlib.suppress(OSError):
                dup.shutdown(socket.SHUT_RDWR)

    def _expire(self) -> None:
        with self._lock:
            self.expired = True
            for sock in self._sockets:
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)


_current = threading.local()


def current_deadline() -> Deadline | None:
    """The deadline of the request this thread is making (set by :func:`using_deadline`), if any."""
    return getattr(_current, "deadline", None)


@contextlib.contextmanager
def using_deadline(seconds: float) -> Any:
    """Run one request under a new :class:`Deadline` of ``seconds``, made current for this thread; a nested use
    (a redirect hop of the same request) joins the outer deadline instead of starting a new one."""
    outer = current_deadline()
    if outer is not None:
        yield outer
        return
    with Deadline(seconds) as deadline:
        _current.deadline = deadline
        try:
            yield deadline
        finally:
            _current.deadline = None


def resolve(host: str, port: int, timeout_s: float) -> list[str]:
    """The addresses ``host`` resolves to, as text, in ``getaddrinfo`` order (duplicates dropped).

    Raises:
        TimeoutError: the lookup took over ``timeout_s`` seconds (the lookup thread is left to finish alone).
        OSError: the resolver's own error (``socket.gaierror``: unknown host, no network).
    """
    done: dict[str, Any] = {}

    def work() -> None:
        try:
            done["infos"] = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
        except Exception as exc:  # handed to the waiting thread
            done["error"] = exc

    worker = threading.Thread(target=work, name="echo-dns", daemon=True)
    worker.start()
    worker.join(timeout_s)
    if worker.is_alive():
        raise TimeoutError(f"looking up host {host!r} took over {timeout_s:g} s")
    if "error" in done:
        raise done["error"]
    return list(dict.fromkeys(str(info[4][0]) for info in done["infos"]))
