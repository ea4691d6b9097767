"""Deadlines for plugin code: a plugin that never returns costs its own failure, never the whole command.

Third-party code (a plugin's import, a plugin metric's factory, a plugin source format's detection and reading, a
plugin curation stage) runs in a daemon worker thread; the caller waits for it at most the deadline. When the
deadline passes the call is abandoned: :class:`PluginTimeoutError` is raised in the caller, which records it like
any other failure of that plugin (a problem in ``echo-bench plugins``, an unavailable metric, a record problem of
the source, a :class:`~echo_builder.stages.registry.StageError` naming the stage), and the rest of the run goes
on. The abandoned thread is a daemon, so the process still exits; it keeps running until then and whatever it
returns is ignored. Python cannot stop a thread, so an abandoned call that still runs may hold a CPU or memory
until the command ends.

Deadlines (seconds; ``0`` or ``none``: no deadline, the call runs in the caller's thread as before):

- per call of plugin code: ``ECHO_PLUGIN_TIMEOUT_S`` (default :data:`DEFAULT_CALL_TIMEOUT_S`, 300 s), or
  ``echo-bench --plugin-timeout SECONDS COMMAND ...``; a metric's factory call, a source format's ``sniff``, each
  item its reading yields (a reader that yields steadily is never cut off), a stage's ``run``;
- per plugin import (each entry point loaded when a registry is first read, a metric's factory module):
  ``ECHO_PLUGIN_IMPORT_TIMEOUT_S`` (default :data:`DEFAULT_IMPORT_TIMEOUT_S`, 30 s), or
  ``echo-bench --plugin-import-timeout SECONDS``.

The command-line options win over the environment. Built-in metrics, sources and stages run without a deadline.
"""

from __future__ import annotations

import contextlib
import contextvars
import math
import os
import queue
import threading
from collections.abc import Callable, Iterable, Iterator
from typing import Any, TypeVar

from echo_builder.errors import ConfigError, EchoError

__all__ = [
    "CALL_TIMEOUT_ENV",
    "DEFAULT_CALL_TIMEOUT_S",
    "DEFAULT_IMPORT_TIMEOUT_S",
    "IMPORT_TIMEOUT_ENV",
    "PluginTimeoutError",
    "call_timeout",
    "call_with_deadline",
    "import_timeout",
    "in_plugin_import",
    "iterate_with_deadline",
    "parse_timeout",
    "reset_timeouts",
    "set_timeouts",
]

T = TypeVar("T")

CALL_TIMEOUT_ENV = "ECHO_PLUGIN_TIMEOUT_S"
IMPORT_TIMEOUT_ENV = "ECHO_PLUGIN_IMPORT_TIMEOUT_S"
DEFAULT_CALL_TIMEOUT_S = 300.0
DEFAULT_IMPORT_TIMEOUT_S = 30.0
#: the longest deadline accepted (a week): longer is "none"
MAX_TIMEOUT_S = 7 * 24 * 3600.0

_UNSET: Any = object()
_overrides: dict[str, float | None] = {}
#: threads importing a plugin right now: a plugin that reads a registry while it is imported gets what is declared
#: so far (as it did when the import ran in the caller's thread), instead of waiting for the loading it is part of
_importing: set[int] = set()
_importing_lock = threading.Lock()


class PluginTimeoutError(EchoError):
    """A call of plugin code did not return within its deadline and was abandoned.

    Attributes:
        what: the call (``"metric 'slow' (slowplug 0.1)"``); ``seconds``: the deadline; ``setting``: how to change it.
    """

    def __init__(self, what: str, seconds: float, setting: str) -> None:
        self.what = what
        self.seconds = seconds
        self.setting = setting
        super().__init__(f"{what} did not return within {seconds:g} s ({setting}); abandoned")


def parse_timeout(value: Any, what: str) -> float | None:
    """Seconds from an option or environment value: a positive finite number; ``0``, ``none`` or ``off`` (or
    anything over a week): no deadline (``None``).

    Raises:
        ConfigError: ``{what}: ...`` for anything else.
    """
    if value is None:
        return None
    text = str(value).strip().lower()
    if text in ("0", "none", "off", "inf", "infinity"):
        return None
    try:
        seconds = float(text)
    except ValueError:
        raise ConfigError(
            f"{what}: expected seconds (a number > 0, or 0 for no deadline), got {value!r}"
        ) from None
    if not math.isfinite(seconds) or seconds < 0:
        raise ConfigError(f"{what}: expected seconds (a number > 0, or 0 for no deadline), got {value!r}")
    return None if seconds == 0 or seconds > MAX_TIMEOUT_S else seconds


def set_timeouts(*, call: Any = _UNSET, imports: Any = _UNSET) -> None:
    """Set the deadlines for this process (the CLI's ``--plugin-timeout`` / ``--plugin-import-timeout``): seconds,
    ``None`` for no deadline; a value not given keeps the environment's (or the default)."""
    for key, value in (("call", call), ("imports", imports)):
        if value is not _UNSET:
            _overrides[key] = value


def reset_timeouts() -> None:
    """Forget the deadlines :func:`set_timeouts` set: the environment's (or the defaults) apply again."""
    _overrides.clear()


def _timeout(key: str, env: str, default: float) -> float | None:
    if key in _overrides:
        return _overrides[key]
    raw = os.environ.get(env)
    if raw is None or not raw.strip():
        return default
    return parse_timeout(raw, env)


def call_timeout() -> float | None:
    """The deadline of one call of plugin code, in seconds (``None``: none)."""
    return _timeout("call", CALL_TIMEOUT_ENV, DEFAULT_CALL_TIMEOUT_S)


def import_timeout() -> float | None:
    """The deadline of one plugin import, in seconds (``None``: none)."""
    return _timeout("imports", IMPORT_TIMEOUT_ENV, DEFAULT_IMPORT_TIMEOUT_S)


def _setting(imports: bool) -> str:
    return (
        f"the plugin import deadline: {IMPORT_TIMEOUT_ENV} or --plugin-import-timeout"
        if imports
        else f"the plugin call deadline: {CALL_TIMEOUT_ENV} or --plugin-timeout"
    )


def in_plugin_import() -> bool:
    """Whether the current thread is importing a plugin under a deadline."""
    return threading.get_ident() in _importing


class _Worker:
    """One daemon thread that runs the calls handed to it, one at a time, in the caller's context variables."""

    def __init__(self, name: str, imports: bool) -> None:
        self._requests: queue.SimpleQueue[Callable[[], Any] | None] = queue.SimpleQueue()
        self._replies: queue.SimpleQueue[tuple[bool, Any]] = queue.SimpleQueue()
        self._imports = imports
        self._ident: int | None = None
        self.abandoned = False
        context = contextvars.copy_context()
        self._thread = threading.Thread(target=context.run, args=(self._loop,), name=name[:80], daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        self._ident = threading.get_ident()
        if self._imports:
            with _importing_lock:
                _importing.add(self._ident)
        try:
            while True:
                function = self._requests.get()
                if function is None:
                    return
                try:
                    self._replies.put((True, function()))
                except BaseException as exc:  # SystemExit in a plugin's import too: the caller decides
                    self._replies.put((False, exc))
        finally:
            self._forget()

    def _forget(self) -> None:
        if self._ident is not None:
            with _importing_lock:
                _importing.discard(self._ident)

    def call(self, function: Callable[[], T], seconds: float, what: str) -> T:
        self._requests.put(function)
        try:
            ok, value = self._replies.get(timeout=seconds)
        except queue.Empty:
            self.abandoned = True
            self._forget()  # should it wake up, it reads the registries like any other thread
            raise PluginTimeoutError(what, seconds, _setting(self._imports)) from None
        if ok:
            return value  # type: ignore[no-any-return]
        raise value

    def close(self) -> None:
        if not self.abandoned:
            self._requests.put(None)


def call_with_deadline(
    function: Callable[..., T],
    *args: Any,
    what: str,
    imports: bool = False,
    seconds: Any = _UNSET,
    **kwargs: Any,
) -> T:
    """``function(*args, **kwargs)`` run in a daemon thread, waited for at most the plugin call deadline (the
    import deadline with ``imports``; ``seconds`` overrides both; ``None``: no deadline, run here). Its return
    value, or the exception it raised, comes back as if called here.

    Raises:
        PluginTimeoutError: it did not return in time (``what`` names it in the message); it was abandoned.
    """
    limit = (import_timeout() if imports else call_timeout()) if seconds is _UNSET else seconds
    if limit is None:
        return function(*args, **kwargs)
    worker = _Worker(f"plugin: {what}", imports)
    try:
        return worker.call(lambda: function(*args, **kwargs), limit, what)
    finally:
        worker.close()


_DONE = object()


def _step(iterator: Iterator[Any]) -> Any:
    return next(iterator, _DONE)


def iterate_with_deadline(
    make: Callable[[], Iterable[T]], *, what: str, seconds: Any = _UNSET
) -> Iterator[T]:
    """The items of ``make()`` (a plugin's generator or list), each waited for at most the plugin call deadline:
    ``make()`` and every step of its iteration run in one daemon thread, one at a time (the caller and the plugin
    never run together, so what they share needs no lock). A plugin that yields steadily is never cut off.

    Raises:
        PluginTimeoutError: ``make()`` or one step did not return in time; the iteration was abandoned.
    """
    limit = call_timeout() if seconds is _UNSET else seconds
    if limit is None:
        yield from make()
        return
    worker = _Worker(f"plugin: {what}", imports=False)
    iterator: Iterator[T] | None = None
    finished = False
    try:
        iterator = worker.call(lambda: iter(make()), limit, what)
        while True:
            item = worker.call(lambda: _step(iterator), limit, what)  # type: ignore[arg-type]
            if item is _DONE:
                finished = True
                return
            yield item
    finally:
        close = getattr(iterator, "close", None)
        if not finished and not worker.abandoned and close is not None:
            # the plugin's own clean-up (its finally blocks) runs where the plugin ran; a failing clean-up changes
            # nothing the caller can act on
            with contextlib.suppress(Exception):
                worker.call(close, limit, what)
        worker.close()
