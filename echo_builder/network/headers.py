"""What every guarded client does to an answer before its library reads it: rate-limit headers made sane, and the
credentials a server issues (OAuth access tokens, session JWTs) registered for redaction.

Rate-limit headers are read by the client libraries themselves (prawcore paces every request from Reddit's
``x-ratelimit-*`` and parses them with ``int()``; a value such as ``1e18``, ``nan``, ``tomorrow`` or a missing
companion header raises inside it) and by the collector. :func:`sanitize_rate_limit_headers` keeps a header only
when it is a plain non-negative integer of at most 12 digits (``Retry-After`` may also be an HTTP date, Reddit's
``x-ratelimit-remaining`` a decimal), drops a family whose members are not all valid (prawcore then counts the
answer as one request), and caps Reddit's seconds-until-reset at :data:`MAX_RESET_S` (prawcore sleeps that long
when no request is left). The collector bounds its own waits again (:mod:`echo_builder.collect.core`).
"""

from __future__ import annotations

import email.utils
import json
import re
from collections.abc import MutableMapping
from typing import Any

from echo_builder.secrets import register_secret

__all__ = ["MAX_RESET_S", "register_issued_credentials", "sanitize_rate_limit_headers"]

#: The most seconds-until-reset passed on to a client library (Reddit's ``x-ratelimit-reset``; prawcore sleeps it).
MAX_RESET_S = 600
_INTEGER = re.compile(r"[0-9]{1,12}")
_DECIMAL = re.compile(r"[0-9]{1,12}(\.[0-9]{1,6})?")
#: Header families read together: every member present must be valid, else the family is dropped.
_FAMILIES = (
    ("x-ratelimit-remaining", "x-ratelimit-used", "x-ratelimit-reset"),  # Reddit (prawcore needs all three)
    ("x-rate-limit-limit", "x-rate-limit-remaining", "x-rate-limit-reset"),  # X API v2
    ("ratelimit-limit", "ratelimit-remaining", "ratelimit-reset"),  # Bluesky (IETF draft names)
)
#: JSON keys of a sign-in or token answer whose values are credentials.
_ISSUED_KEYS = ("access_token", "refresh_token", "accessJwt", "refreshJwt", "id_token")


def _valid(name: str, value: str) -> bool:
    text = value.strip()
    if name == "x-ratelimit-remaining":
        return bool(_DECIMAL.fullmatch(text))
    return bool(_INTEGER.fullmatch(text))


def sanitize_rate_limit_headers(headers: MutableMapping[str, str]) -> list[str]:
    """Make the rate-limit headers of one answer safe for any reader, in place; returns what was dropped or capped
    (``"name: why"``, for a debug log).

    Args:
        headers: a case-insensitive mapping (``requests``' ``CaseInsensitiveDict``, ``httpx.Headers``).
    """
    notes: list[str] = []
    for family in _FAMILIES:
        present = [name for name in family if name in headers]
        if not present:
            continue
        complete = family[0] != "x-ratelimit-remaining" or len(present) == len(family)
        if not complete or not all(_valid(name, str(headers[name])) for name in present):
            for name in present:
                notes.append(f"{name}: {str(headers[name])[:40]!r} dropped")
                del headers[name]
            continue
        if family[0] == "x-ratelimit-remaining" and int(headers["x-ratelimit-reset"]) > MAX_RESET_S:
            notes.append(f"x-ratelimit-reset: capped at {MAX_RESET_S} s")
            headers["x-ratelimit-reset"] = str(MAX_RESET_S)
    if "retry-after" in headers:
        value = str(headers["retry-after"]).strip()
        if not _INTEGER.fullmatch(value):
            try:
                ok = email.utils.parsedate_to_datetime(value) is not None
            except (TypeError, ValueError, IndexError, OverflowError):
                ok = False
            if not ok:
                notes.append(f"retry-after: {value[:40]!r} dropped")
                del headers["retry-after"]
    return notes


def register_issued_credentials(body: bytes | str) -> None:
    """Register, for redaction, the credentials a sign-in or token answer carries (``access_token``,
    ``refresh_token``, ``accessJwt``, ``refreshJwt``, ``id_token`` of a JSON object); anything else is ignored."""
    try:
        data: Any = json.loads(body)
    except (ValueError, RecursionError, TypeError):
        return
    if isinstance(data, dict):
        for key in _ISSUED_KEYS:
            value = data.get(key)
            if isinstance(value, str):
                register_secret(value)
