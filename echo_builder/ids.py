"""Namespaced, deterministic identifiers.

Post ids are ``<platform>:<native id>`` (``x:1904123456789``); the native part is the platform's own id, kept
verbatim (it may itself contain colons, as Bluesky's ``at://`` URIs do). Sample ids are derived from the set of
source post ids so that rebuilding from the same inputs gives the same ids, whatever order the posts arrive in.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence
from typing import Any, TypeVar

from echo_builder.errors import RecordError

__all__ = [
    "NAME_MAX",
    "PLATFORMS",
    "make_post_id",
    "safe_file_name",
    "sample_id",
    "split_post_id",
    "unique_sample_ids",
]

_S = TypeVar("_S", bound=Any)

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


def unique_sample_ids(samples: Sequence[_S]) -> tuple[list[_S], list[str]]:
    """The samples with pairwise distinct ids, and a note for each duplicate found (empty when there was none).

    A sample equal in every field to an earlier one with its id is dropped (the same sample reached twice); a
    sample that differs but shares an earlier sample's id keeps its content under a new id, the shared id plus
    ``-2``, ``-3``, ... in input order, so the dataset can be written and the ids stay deterministic. Samples are
    pydantic records with an ``id`` field (``model_copy`` is used to re-id them).
    """
    kept: list[_S] = []
    by_id: dict[str, list[_S]] = {}
    taken = {s.id for s in samples}
    notes: list[str] = []
    for sample in samples:
        earlier = by_id.setdefault(sample.id, [])
        if not earlier:
            earlier.append(sample)
            kept.append(sample)
            continue
        if any(sample == e for e in earlier):
            notes.append(f"sample {sample.id}: an identical copy was dropped")
            continue
        n = len(earlier) + 1
        while f"{sample.id}-{n}" in taken:
            n += 1
        renamed = sample.model_copy(update={"id": f"{sample.id}-{n}"})
        taken.add(renamed.id)
        earlier.append(sample)
        kept.append(renamed)
        notes.append(f"sample {sample.id}: another sample had the same id; this one is {renamed.id}")
    return kept, notes


#: The longest file name (one path component) most file systems accept, in bytes (POSIX ``NAME_MAX``).
NAME_MAX = 255
_WINDOWS_RESERVED = frozenset(
    {"CON", "PRN", "AUX", "NUL", *(f"COM{i}" for i in range(1, 10)), *(f"LPT{i}" for i in range(1, 10))}
)


def safe_file_name(name: str, suffix: str = "", *, max_bytes: int = NAME_MAX) -> str:
    """A file name for ``name`` (a model name, sample id or config value) that every file system accepts.

    ``name + suffix`` is returned unchanged when it is already safe: only letters, digits and ``-_.+``, not starting
    with ``-`` or ``.``, not a Windows device name (``CON``, ``nul.txt``) and at most ``max_bytes`` bytes in UTF-8.
    Otherwise the name is cleaned (other characters become ``_``), cut to fit (on a character boundary) and
    followed by ``-`` and the first 12 hex digits of its SHA-256, so two names that clean or cut to the same text
    (``"a b"`` and ``"a_b"``; two 300-byte names sharing their first 250 bytes) never share a file.

    Args:
        name: any string (may be empty, hold ``/``, NUL, newlines, be longer than the limit).
        suffix: appended as is, e.g. ``".png"`` (must itself be safe and short).
        max_bytes: limit on the whole result in UTF-8 bytes (default :data:`NAME_MAX`, 255).

    Returns:
        A non-empty file name of at most ``max_bytes`` UTF-8 bytes ending in ``suffix``; the same ``name``
        always gives the same result.

    Raises:
        ValueError: ``max_bytes`` leaves no room for the suffix, the hash and one character.
    """
    digest = hashlib.sha256(name.encode("utf-8", "surrogatepass")).hexdigest()[:12]
    room = max_bytes - len(suffix.encode("utf-8")) - len(digest) - 1
    if room < 1:
        raise ValueError(f"max_bytes={max_bytes} leaves no room for a name before {suffix!r}")
    cleaned = "".join(c if c.isalnum() or c in "-_.+" else "_" for c in name).strip(".-") or "file"
    if cleaned.split(".")[0].upper() in _WINDOWS_RESERVED:
        cleaned = "_" + cleaned
    if cleaned == name and len((name + suffix).encode("utf-8")) <= max_bytes:
        return name + suffix
    cut = cleaned.encode("utf-8")[:room].decode("utf-8", "ignore").rstrip(".-") or "file"
    return f"{cut}-{digest}{suffix}"
