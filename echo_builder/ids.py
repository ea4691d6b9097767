"""Namespaced, deterministic identifiers.

Post ids are ``<platform>:<native id>`` (``x:1904123456789``); the native part is the platform's own id, kept
verbatim (it may itself contain colons, as Bluesky's ``at://`` URIs do). Sample ids are derived from the set of
source post ids so that rebuilding from the same inputs gives the same ids, whatever order the posts arrive in.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable

from echo_builder.errors import RecordError

__all__ = ["PLATFORMS", "make_post_id", "sample_id", "split_post_id"]

#: Platforms a post can come from. ``collection`` is a community prompt collection; ``web`` any other page.
PLATFORMS = frozenset({"x", "reddit", "bluesky", "collection", "web"})


def make_post_id(platform: str, native_id: str | int) -> str:
    """Return ``"<platform>:<native_id>"``; raises :class:`RecordError` for an unknown platform or empty id."""
    if platform not in PLATFORMS:
        raise RecordError(f"unknown platform {platform!r}; expected one of {sorted(PLATFORMS)}")
    native = str(native_id).strip()
    if not native:
        raise RecordError(f"empty native id for platform {platform!r}")
    return f"{platform}:{native}"


def split_post_id(post_id: str) -> tuple[str, str]:
    """Split a namespaced id into ``(platform, native_id)``; raises :class:`RecordError` if it has no namespace."""
    platform, sep, native = post_id.partition(":")
    if not sep or platform not in PLATFORMS or not native:
        raise RecordError(
            f"post id {post_id!r} is not namespaced; expected '<platform>:<id>' with platform in {sorted(PLATFORMS)}"
        )
    return platform, native


def sample_id(source_post_ids: Iterable[str], salt: str = "") -> str:
    """Deterministic sample id: ``echo-`` + 16 hex digits of SHA-256 over the sorted, de-duplicated post ids.

    ``salt`` separates several samples drawn from the same posts (e.g. the index of a distinct prompt).
    Raises :class:`RecordError` when no post id is given.
    """
    ids = sorted(set(source_post_ids))
    if not ids:
        raise RecordError("a sample needs at least one source post id")
    for pid in ids:
        split_post_id(pid)
    digest = hashlib.sha256(("\n".join(ids) + "\x00" + salt).encode("utf-8")).hexdigest()
    return f"echo-{digest[:16]}"
