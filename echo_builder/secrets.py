"""Keep API keys out of logs, cache entries and exception text.

Backends register every key they read with :func:`register_secret`; :func:`redact` replaces registered keys and
the values of environment variables that look like credentials (``*_API_KEY``, ``*_TOKEN``, ``*_SECRET``) with
``***``. A :class:`logging.Filter` applies it to every record of the ``echo_builder`` logger tree.
"""

from __future__ import annotations

import logging
import os
import re
import threading

__all__ = ["RedactingFilter", "get_logger", "redact", "register_secret"]

_SECRET_ENV = re.compile(r"(API_KEY|APIKEY|TOKEN|SECRET|PASSWORD)$", re.IGNORECASE)
_MIN_SECRET_LEN = 6  # shorter values ("EMPTY", "none") are placeholders, and replacing them would mangle text
_registered: set[str] = set()
_lock = threading.Lock()


def register_secret(value: str | None) -> None:
    """Remember ``value`` so :func:`redact` hides it from now on (no-op for ``None`` or short placeholders)."""
    if value and len(value) >= _MIN_SECRET_LEN:
        with _lock:
            _registered.add(value)


def _secrets() -> list[str]:
    found = {v for k, v in os.environ.items() if _SECRET_ENV.search(k) and v and len(v) >= _MIN_SECRET_LEN}
    with _lock:
        found |= _registered
    return sorted(found, key=len, reverse=True)  # longest first, so a key containing another is fully hidden


def redact(text: str) -> str:
    """Return ``text`` with every known secret replaced by ``***``."""
    for secret in _secrets():
        if secret in text:
            text = text.replace(secret, "***")
    return text


class RedactingFilter(logging.Filter):
    """Logging filter that redacts the formatted message and any exception text of a record."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        clean = redact(message)
        if clean != message:
            record.msg, record.args = clean, None
        if record.exc_info and record.exc_info[1] is not None:
            exc = record.exc_info[1]
            record.exc_text = redact(logging.Formatter().formatException(record.exc_info))
            if redact(str(exc)) != str(exc):
                record.exc_info = None  # the traceback text above is already redacted
        return True


_FILTER = RedactingFilter()


def get_logger(name: str) -> logging.Logger:
    """``logging.getLogger(name)`` with redaction attached (logger filters do not apply to child loggers)."""
    logger = logging.getLogger(name)
    if _FILTER not in logger.filters:
        logger.addFilter(_FILTER)
    return logger
