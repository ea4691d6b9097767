"""Pseudonymize social-media handles in dataset rows before they are published.

Replaced, each by the stable pseudonym ``user_<8 hex>`` (SHA-256 of the salt and the lower-cased handle):

- ``@name`` mentions in any text (``@alice``, Bluesky ``@alice.bsky.social``; e-mail addresses are left alone),
  and Reddit's ``u/name`` / ``/u/name`` in text;
- the handle inside profile and post URLs of ``x.com`` / ``twitter.com`` (``x.com/alice/status/1`` ->
  ``x.com/user_1a2b3c4d/status/1``; X still resolves the post by its id), ``bsky.app/profile/<handle or did>``
  and ``reddit.com/u/<name>`` / ``reddit.com/user/<name>``;
- the whole value of author fields (keys ``author``, ``author_id``, ``user``, ``username``, ``handle``,
  ``screen_name``).

The same handle gets the same pseudonym everywhere in a run for a given salt, so threads stay readable.
Pseudonyms are never replaced again (idempotent). With the public default salt a pseudonym of a *known* handle can
be recomputed; pass a secret ``salt`` (kept for later releases) when that matters. Bluesky post URLs no longer
resolve once pseudonymized (they need the real handle or DID).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Mapping
from typing import Any

__all__ = ["AUTHOR_KEYS", "DEFAULT_SALT", "pseudonym", "pseudonymize", "pseudonymize_text"]

DEFAULT_SALT = "echo-bench"
AUTHOR_KEYS = frozenset({"author", "author_id", "user", "username", "handle", "screen_name"})
_PSEUDONYM = re.compile(r"user_[0-9a-f]{8}\Z")
# X paths that are not handles
_X_RESERVED = frozenset(
    {"i", "home", "search", "hashtag", "intent", "share", "explore", "settings", "messages", "notifications",
     "compose", "login", "signup", "tos", "privacy", "about", "jobs"}
)  # fmt: skip

_HANDLE = r"[A-Za-z0-9_](?:[A-Za-z0-9_.-]*[A-Za-z0-9_])?"
_PATTERN = re.compile(
    # one pass over the text with alternatives, so that a replacement is never scanned again
    r"(?P<x>(?:https?://)?(?:www\.|mobile\.)?(?:x|twitter)\.com/)(?P<xh>[A-Za-z0-9_]{1,50})(?=[/?#]|\b|$)"
    r"|(?P<bsky>(?:https?://)?(?:www\.)?bsky\.app/profile/)(?P<bh>did:[a-z0-9]+:[A-Za-z0-9._:%-]+|"
    + _HANDLE
    + r")"
    r"|(?P<rd>(?:https?://)?(?:(?:www|old|new|np)\.)?reddit\.com/(?:u|user)/)(?P<rh>[A-Za-z0-9_-]{1,40})"
    r"|(?<![\w.@/])@(?P<mh>" + _HANDLE + r")"
    r"|(?<![\w/])(?P<ru>/?u/)(?P<uh>[A-Za-z0-9_-]{3,20})\b"
)


def pseudonym(handle: str, *, salt: str = DEFAULT_SALT) -> str:
    """The pseudonym of ``handle`` (case-insensitive, without a leading ``@``): ``user_<8 hex>``."""
    name = handle.strip().lstrip("@").lower()
    if _PSEUDONYM.match(name):
        return name
    return "user_" + hashlib.sha256(f"{salt}\0{name}".encode()).hexdigest()[:8]


def pseudonymize_text(text: str, *, salt: str = DEFAULT_SALT) -> str:
    """``text`` with every handle mention and handle-bearing URL pseudonymized (see the module docs)."""

    def replace(match: re.Match[str]) -> str:
        if match["x"] is not None:
            handle = match["xh"]
            if handle.lower() in _X_RESERVED:
                return match[0]
            return match["x"] + pseudonym(handle, salt=salt)
        if match["bsky"] is not None:
            return match["bsky"] + pseudonym(match["bh"], salt=salt)
        if match["rd"] is not None:
            return match["rd"] + pseudonym(match["rh"], salt=salt)
        if match["mh"] is not None:
            return "@" + pseudonym(match["mh"], salt=salt)
        return match["ru"] + pseudonym(match["uh"], salt=salt)

    return _PATTERN.sub(replace, text)


def _walk(value: Any, salt: str, key: str | None = None) -> Any:
    if isinstance(value, str):
        if key in AUTHOR_KEYS and value:
            return pseudonym(value, salt=salt)
        return pseudonymize_text(value, salt=salt)
    if isinstance(value, Mapping):
        if set(value) == {"bytes", "path"}:  # an encoded image: not text
            return value
        return {k: _walk(v, salt, k) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_walk(v, salt, key) for v in value]
    return value


def pseudonymize(rows: Iterable[Mapping[str, Any]], *, salt: str = DEFAULT_SALT) -> list[dict[str, Any]]:
    """New rows with every string value pseudonymized (nested lists and dicts included; ``id`` kept as is).

    Deterministic for a given ``salt``, idempotent, and the input rows are not modified.
    """
    out = []
    for row in rows:
        new = {k: (v if k == "id" else _walk(v, salt, k)) for k, v in row.items()}
        out.append(new)
    return out
