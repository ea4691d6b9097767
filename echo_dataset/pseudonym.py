"""Pseudonymize social-media account identifiers in dataset rows before they are published.

Replaced, each by the stable pseudonym ``user_<8 hex>`` (SHA-256 of the salt and the lower-cased identifier):

- ``@name`` mentions in any text (``@alice``, Bluesky ``@alice.bsky.social``; e-mail addresses are left alone),
  and Reddit's ``u/name`` / ``/u/name`` in text. Mentions are replaced even when they name a brand or a bot
  (``@OpenAI``): the account behind a mention cannot be told apart from a person's by its text. A bare word that
  happens to equal a handle (``alice`` without ``@``) is prose and stays;
- Bluesky and AT Protocol decentralized identifiers (DIDs: ``did:plc:...``, ``did:web:...``, also URL-encoded as
  ``did%3Aplc%3A...``) wherever they appear: CDN image URLs (``cdn.bsky.app/img/feed_fullsize/plain/<did>/...``),
  video URLs, ``at://`` URIs, ``getBlob?did=`` queries, profile URLs;
- the handle inside profile and post URLs of ``x.com`` / ``twitter.com`` (``x.com/alice/status/1`` ->
  ``x.com/user_1a2b3c4d/status/1``; X still resolves the post by its id), X user ids in ``x.com/i/user/<id>``,
  ``intent/user?user_id=`` / ``screen_name=`` queries and ``pbs.twimg.com/profile_images|profile_banners/<id>``,
  ``bsky.app/profile/<handle or did>``, the handle of ``at://<handle>/...``, ``reddit.com/u/<name>`` /
  ``reddit.com/user/<name>`` and Reddit's user-profile subreddits ``r/u_<name>``;
- any *known* identifier (``identifiers=``: the handles and user ids of the posts' authors, collected from the
  input by the build) where it appears as a component of a URL (``scheme://...``) in any value, so that a media or
  profile URL of a host not listed above cannot carry an author's id into the dataset;
- the whole value of author fields (keys ``author``, ``author_id``, ``user``, ``username``, ``handle``,
  ``screen_name``, ``did``).

The same identifier gets the same pseudonym everywhere in a run for a given salt, so threads stay readable.
Pseudonyms are never replaced again (idempotent). With the public default salt (:data:`DEFAULT_SALT`) a pseudonym
of a *known* handle can be recomputed by anyone; ``echo-bench build`` therefore draws a random salt per build
(``OUT/stages/salt``, never published) unless ``--salt-file`` names one to share across builds. Pseudonymized
Bluesky post and image URLs no longer resolve (they need the real handle or DID); the images themselves are
embedded in the dataset.
"""

from __future__ import annotations

import hashlib
import os
import re
import secrets
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

__all__ = [
    "AUTHOR_KEYS",
    "BUILD_SALT_FILE",
    "DEFAULT_SALT",
    "MIN_SALT_LENGTH",
    "author_identifiers",
    "build_salt",
    "pseudonym",
    "pseudonymize",
    "pseudonymize_text",
    "read_salt_file",
]

#: The public default salt: pseudonyms made with it can be recomputed from a known handle.
DEFAULT_SALT = "echo-bench"
#: Where a build keeps its salt, relative to the build folder: beside the raw stage files, which are never published.
BUILD_SALT_FILE = Path("stages") / "salt"
#: The shortest salt accepted from a file (characters): a short salt can be guessed, and the pseudonyms with it.
MIN_SALT_LENGTH = 16
AUTHOR_KEYS = frozenset({"author", "author_id", "user", "username", "handle", "screen_name", "did"})
_PSEUDONYM = re.compile(r"user_[0-9a-f]{8}\Z")
# X paths that are not handles
_X_RESERVED = frozenset(
    {"i", "home", "search", "hashtag", "intent", "share", "explore", "settings", "messages", "notifications",
     "compose", "login", "signup", "tos", "privacy", "about", "jobs"}
)  # fmt: skip

_HANDLE = r"[A-Za-z0-9_](?:[A-Za-z0-9_.-]*[A-Za-z0-9_])?"
_COLON = r"(?::|%3[Aa])"
# W3C DID syntax: did:<method>:<method-specific id>; pct-encoded colons as in URL paths (video.bsky.app)
_DID = r"did" + _COLON + r"[a-z0-9]+" + _COLON + r"[A-Za-z0-9._-]+(?:" + _COLON + r"[A-Za-z0-9._-]+)*"
_PATTERN = re.compile(
    # one pass over the text with alternatives, so that a replacement is never scanned again
    r"(?P<did>(?<![\w.-])" + _DID + r")"
    r"|(?P<x>(?:https?://)?(?:www\.|mobile\.)?(?:x|twitter)\.com/)(?:(?P<xi>i/user/)(?P<xid>\d{1,25})"
    r"|(?P<xh>[A-Za-z0-9_]{1,50}))(?=[/?#]|\b|$)"
    r"|(?P<xq>(?<![\w])(?:user_id|screen_name|author_id)=)(?P<xqv>[A-Za-z0-9_]{1,50})"
    r"|(?P<tw>pbs\.twimg\.com/profile_(?:images|banners)/)(?P<tid>\d{1,25})"
    r"|(?P<bsky>(?:https?://)?(?:www\.)?bsky\.app/profile/)(?!did(?::|%3[Aa]))(?P<bh>" + _HANDLE + r")"
    r"|(?P<at>at://)(?!did(?::|%3[Aa]))(?P<ah>" + _HANDLE + r")"
    r"|(?P<rd>(?:https?://)?(?:(?:www|old|new|np)\.)?reddit\.com/(?:u|user)/)(?P<rh>[A-Za-z0-9_-]{1,40})"
    r"|(?P<ru_>(?<![\w])r/u_)(?P<ruh>[A-Za-z0-9_-]{1,40})"
    r"|(?<![\w.@/])@(?P<mh>" + _HANDLE + r")"
    r"|(?<![\w/])(?P<ru>/?u/)(?P<uh>[A-Za-z0-9_-]{3,20})\b"
)
_URL = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://[^\s<>\"']+")
_COMPONENT = re.compile(r"[\w-]+(?:\.[\w-]+)*")


def pseudonym(handle: str, *, salt: str = DEFAULT_SALT) -> str:
    """The pseudonym of an account identifier (handle, user id or DID; case-insensitive, without a leading
    ``@``; a URL-encoded DID gives the same pseudonym as the plain one): ``user_<8 hex>``."""
    name = handle.strip().lstrip("@").lower().replace("%3a", ":")
    if _PSEUDONYM.match(name):
        return name
    return "user_" + hashlib.sha256(f"{salt}\0{name}".encode()).hexdigest()[:8]


class _KnownIds(frozenset):
    """Known identifiers, lower-cased, ready for lookup (a set: a build's thousands of authors cost O(1) each)."""


def _known_ids(identifiers: Iterable[str] | None) -> _KnownIds:
    if isinstance(identifiers, _KnownIds):
        return identifiers
    names = {i.strip().lstrip("@").lower() for i in identifiers or () if isinstance(i, str)}
    # shorter ones would hit ordinary URL parts ("a", "10"); pseudonyms are never replaced again
    return _KnownIds(n for n in names if len(n) >= 3 and not _PSEUDONYM.match(n))


def pseudonymize_text(
    text: str, *, salt: str = DEFAULT_SALT, identifiers: Iterable[str] | None = None
) -> str:
    """``text`` with every handle mention, DID and identifier-bearing URL pseudonymized (see the module docs).

    ``identifiers``: known account identifiers (handles, user ids; case-insensitive) also replaced wherever one is
    a whole component of a URL in ``text`` (a maximal run of letters, digits, ``_``, ``-`` and inner dots:
    ``alice`` in ``https://img.example/u/alice/1.png``, not in ``.../alice2/...``).
    """
    known = _known_ids(identifiers)

    def replace(match: re.Match[str]) -> str:
        if match["did"] is not None:
            return pseudonym(match["did"], salt=salt)
        if match["x"] is not None:
            if match["xi"] is not None:
                return match["x"] + match["xi"] + pseudonym(match["xid"], salt=salt)
            handle = match["xh"]
            if handle.lower() in _X_RESERVED:
                return match[0]
            return match["x"] + pseudonym(handle, salt=salt)
        for prefix, name in (("xq", "xqv"), ("tw", "tid"), ("bsky", "bh"), ("at", "ah"), ("rd", "rh")):
            if match[prefix] is not None:
                return match[prefix] + pseudonym(match[name], salt=salt)
        if match["ru_"] is not None:
            return match["ru_"] + pseudonym(match["ruh"], salt=salt)
        if match["mh"] is not None:
            return "@" + pseudonym(match["mh"], salt=salt)
        return match["ru"] + pseudonym(match["uh"], salt=salt)

    text = _PATTERN.sub(replace, text)
    if known and "://" in text:

        def component(match: re.Match[str]) -> str:
            return pseudonym(match[0], salt=salt) if match[0].lower() in known else match[0]

        text = _URL.sub(lambda url: _COMPONENT.sub(component, url[0]), text)
    return text


def _walk(value: Any, salt: str, known: _KnownIds, key: str | None = None) -> Any:
    if isinstance(value, str):
        if key in AUTHOR_KEYS and value:
            return pseudonym(value, salt=salt)
        return pseudonymize_text(value, salt=salt, identifiers=known)
    if isinstance(value, Mapping):
        if set(value) == {"bytes", "path"}:  # an encoded image: not text
            return value
        return {k: _walk(v, salt, known, k) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_walk(v, salt, known, key) for v in value]
    return value


def pseudonymize(
    rows: Iterable[Mapping[str, Any]], *, salt: str = DEFAULT_SALT, identifiers: Iterable[str] = ()
) -> list[dict[str, Any]]:
    """New rows with every string value pseudonymized (nested lists and dicts included; ``id`` kept as is).

    Args:
        rows: dataset rows (any mapping of column -> value).
        salt: the pseudonym salt; keep a private one to stop pseudonyms of known handles being recomputed.
        identifiers: known account identifiers of the input (see :func:`author_identifiers`), also replaced
            where they are a component of a URL.

    Deterministic for a given ``salt`` and ``identifiers``, idempotent, and the input rows are not modified.
    """
    known = _known_ids(identifiers)
    out = []
    for row in rows:
        new = {k: (v if k == "id" else _walk(v, salt, known, k)) for k, v in row.items()}
        out.append(new)
    return out


def author_identifiers(posts: Iterable[Mapping[str, Any] | Any]) -> list[str]:
    """The account identifiers of ``posts`` (``Post`` records or their JSON dicts): each ``author`` (handle)
    and ``author_id`` (user id or DID), without a leading ``@``, sorted, placeholders such as Reddit's
    ``[deleted]`` left out."""
    found: set[str] = set()
    for post in posts:
        for field in ("author", "author_id"):
            value = post.get(field) if isinstance(post, Mapping) else getattr(post, field, None)
            if isinstance(value, str):
                value = value.strip().lstrip("@")
                if value and not (value.startswith("[") and value.endswith("]")):
                    found.add(value)
    return sorted(found)


def read_salt_file(path: str | Path) -> str:
    """The salt in ``path`` (a text file; surrounding whitespace ignored).

    Raises:
        ValueError: the file is missing, not a file, not UTF-8 text, or holds fewer than :data:`MIN_SALT_LENGTH`
            characters; the message names the file and how to make a good one.
    """
    file = Path(path)
    hint = "make one with: python -c 'import secrets; print(secrets.token_hex(32))' > FILE"
    if not file.is_file():
        raise ValueError(f"salt file {str(file)!r} does not exist or is not a file; {hint}")
    try:
        salt = file.read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError) as exc:
        raise ValueError(f"salt file {str(file)!r} cannot be read as UTF-8 text ({exc}); {hint}") from None
    if len(salt) < MIN_SALT_LENGTH:
        raise ValueError(
            f"salt file {str(file)!r} holds {len(salt)} characters; a salt needs at least {MIN_SALT_LENGTH}; {hint}"
        )
    return salt


def build_salt(
    build_dir: str | Path, *, salt_file: str | Path | None = None, create: bool = True
) -> str | None:
    """The pseudonym salt of the build in ``build_dir``, kept in ``build_dir/stages/salt`` (never published).

    - ``salt_file`` given: its salt (:func:`read_salt_file`), copied to the build's salt file so that a resumed
      build uses it too. A build that already has a different salt raises ``ValueError`` (its stage files and
      any published release used that one; mixing two salts would give one account two pseudonyms).
    - otherwise the build's stored salt when there is one (a resumed build), else, with ``create``, a new random
      salt of 256 bits (``secrets.token_hex(32)``) written there with owner-only permissions; without ``create``,
      ``None``.
    """
    stored_file = Path(build_dir) / BUILD_SALT_FILE
    stored = stored_file.read_text(encoding="utf-8").strip() if stored_file.is_file() else None
    if salt_file is not None:
        salt = read_salt_file(salt_file)
        if stored and stored != salt:
            raise ValueError(
                f"{str(build_dir)!r} was built with another salt than the one in {str(salt_file)!r}; resume "
                "with the same --salt-file, or choose another --out"
            )
    elif stored or not create:
        return stored or None
    else:
        salt = secrets.token_hex(32)
    if stored != salt:
        stored_file.parent.mkdir(parents=True, exist_ok=True)
        tmp = stored_file.with_name(stored_file.name + ".tmp")
        if tmp.is_symlink() or tmp.is_file():
            tmp.unlink()  # left by a crashed run (a link is removed, never followed)
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
        fd = os.open(tmp, flags, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(salt + "\n")
        os.replace(tmp, stored_file)
    return salt
