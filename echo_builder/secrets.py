"""Keep API keys out of logs, cache entries, output files and exception text.

Backends register every key they read with :func:`register_secret`, and every base URL with
:func:`register_url_secrets` (the password and user name of ``https://user:KEY@host/v1`` and the values of
credential-like query parameters such as ``?api-key=KEY``). :func:`redact` replaces registered keys and the values
of environment variables that look like credentials (``*_API_KEY``, ``*_TOKEN`` such as ``HF_TOKEN``,
``*_SECRET``, ``*_PASSWORD``) with ``***``, also in their percent-encoded spelling.

Logs: :func:`get_logger` attaches :class:`RedactingFilter` to the package's loggers, and
:func:`protect_logging` attaches it to the loggers of the HTTP stack (``httpx``, ``httpcore``, ``openai``, ...)
and to every handler of the root logger, so records of third-party loggers are redacted too (a logger's filter does
not apply to records of its child loggers; a handler's filter applies to every record it emits).
"""

from __future__ import annotations

import logging
import os
import re
import threading
from collections.abc import Callable
from urllib.parse import parse_qsl, quote, unquote, urlsplit, urlunsplit

__all__ = [
    "RedactingFilter",
    "get_logger",
    "protect_logging",
    "redact",
    "redact_url",
    "redactor",
    "register_secret",
    "register_url_secrets",
]

_SECRET_ENV = re.compile(r"(API_KEY|APIKEY|TOKEN|SECRET|PASSWORD)$", re.IGNORECASE)
#: Query parameters whose values are credentials (``?api-key=``, ``?key=``, ``?access_token=``, ``?sig=``).
_SECRET_PARAM = re.compile(r"key|token|secret|password|passwd|pwd|sig|auth|credential", re.IGNORECASE)
_MIN_SECRET_LEN = 6  # shorter values ("EMPTY", "none") are placeholders, and replacing them would mangle text
#: Loggers of the HTTP and Hub clients the package uses; their records name URLs (with any userinfo or query key).
THIRD_PARTY_LOGGERS = (
    "httpx",
    "httpx2",
    "httpcore",
    "httpcore.connection",
    "httpcore.http11",
    "httpcore.http2",
    "httpcore.proxy",
    "httpcore2",
    "httpcore2.connection",
    "httpcore2.http11",
    "httpcore2.http2",
    "httpcore2.proxy",
    "openai",
    "openai._base_client",
    "openai._response",
    "openai._legacy_response",
    "urllib3",
    "urllib3.connectionpool",
    "huggingface_hub",
    "filelock",
)
_registered: set[str] = set()
_lock = threading.Lock()


def register_secret(value: str | None) -> None:
    """Remember ``value`` so :func:`redact` hides it from now on (no-op for ``None`` or short placeholders).

    Its percent-encoded and percent-decoded spellings are registered too (a key inside a URL is often encoded).
    """
    if not value:
        return
    with _lock:
        for form in {value, quote(value, safe=""), unquote(value)}:
            if len(form) >= _MIN_SECRET_LEN:
                _registered.add(form)


def _url_secrets(url: str) -> list[str]:
    try:
        parts = urlsplit(url)
        username, password = parts.username, parts.password
    except ValueError:  # an unparseable URL (bad port, unclosed IPv6 literal): fall back to the raw userinfo
        parts, username, password = None, None, None
        match = re.match(r"^[A-Za-z][A-Za-z0-9+.-]*://([^/?#@]*)@", url)
        if match:
            username, _, password = match.group(1).partition(":")
    found = [v for v in (username, password) if v]
    query = parts.query if parts is not None else url.partition("?")[2]
    for name, value in parse_qsl(query, keep_blank_values=False):
        if _SECRET_PARAM.search(name) and value:
            found.append(value)
    return found


def register_url_secrets(url: str | None) -> None:
    """Register the credentials a URL carries: user name and password of its userinfo
    (``https://user:KEY@host/v1``) and the values of credential-like query parameters (``?api-key=KEY``)."""
    if url:
        for value in _url_secrets(url):
            register_secret(value)


def redact_url(url: str) -> str:
    """``url`` with its userinfo and credential-like query values replaced by ``***`` (for messages and records)."""
    try:
        parts = urlsplit(url)
        netloc = parts.netloc
        if "@" in netloc:
            netloc = "***@" + netloc.rpartition("@")[2]
        query = "&".join(
            f"{k}=***" if _SECRET_PARAM.search(k) else f"{k}={v}"
            for k, v in parse_qsl(parts.query, keep_blank_values=True)
        )
        return redact(urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment)))
    except ValueError:
        return redact(re.sub(r"(://)[^/?#@]*@", r"\1***@", url))


def _secrets() -> list[str]:
    found = {v for k, v in os.environ.items() if _SECRET_ENV.search(k) and v and len(v) >= _MIN_SECRET_LEN}
    for value in list(found):
        encoded = quote(value, safe="")
        if encoded != value:
            found.add(encoded)
    with _lock:
        found |= _registered
    return sorted(found, key=len, reverse=True)  # longest first, so a key containing another is fully hidden


def redact(text: str) -> str:
    """Return ``text`` with every known secret replaced by ``***``."""
    for secret in _secrets():
        if secret in text:
            text = text.replace(secret, "***")
    return text


def redactor() -> Callable[[str], str]:
    """A :func:`redact` with the secrets known now looked up once (for writing many lines, e.g. a JSONL file)."""
    secrets = _secrets()

    def apply(text: str) -> str:
        for secret in secrets:
            if secret in text:
                text = text.replace(secret, "***")
        return text

    return apply


class RedactingFilter(logging.Filter):
    """Logging filter that redacts the formatted message and any exception text of a record."""

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except Exception:  # a malformed record (wrong args): leave it to the handler's own error path
            return True
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


def _attach(target: logging.Logger | logging.Handler) -> None:
    if _FILTER not in target.filters:
        target.addFilter(_FILTER)


def get_logger(name: str) -> logging.Logger:
    """``logging.getLogger(name)`` with redaction attached (logger filters do not apply to child loggers)."""
    logger = logging.getLogger(name)
    _attach(logger)
    return logger


def protect_logging() -> None:
    """Attach redaction to the HTTP stack's loggers (:data:`THIRD_PARTY_LOGGERS`) and to every handler of the
    root logger, so no log line shows a registered key, whichever logger wrote it. Safe to call repeatedly;
    call it again after adding root handlers."""
    prefixes = tuple({name.split(".")[0] for name in THIRD_PARTY_LOGGERS})
    existing = [n for n in list(logging.root.manager.loggerDict) if n.split(".")[0] in prefixes]
    for name in {*THIRD_PARTY_LOGGERS, *existing}:
        _attach(logging.getLogger(name))
    for handler in logging.getLogger().handlers:
        _attach(handler)
