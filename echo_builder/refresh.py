"""Versioned refresh of a living benchmark: ``echo-bench build --previous DATASET`` (issue 19, item 4).

ECHO's benchmark is *living*: each collection window adds what the community posted since, and what was published
stays published unless it has to go. A refreshed build therefore holds

- **added**: samples of the new window whose id the previous version does not have;
- **kept**: samples of the previous version that the new window produced again (the id is a hash of the source
  post ids, :func:`echo_builder.ids.sample_id`, so the same posts give the same id; the row is rebuilt from the
  fresh posts, so an edited reply or a re-fetched image is current);
- **carried**: samples of the previous version whose posts lie outside the new window, copied unchanged (their
  Parquet rows, images included; they were pseudonymized when first published);

and leaves out the **removed** ones, each with a reason:

- ``takedown``: the sample id, or one of its source post ids, is listed in the takedown file (``--takedowns``);
- ``filtered``: every source post was collected again, yet the curation no longer keeps the sample (it now routes
  to Trash/Discard or was not extracted);
- ``deleted``: one of its source posts was read again as a deletion marker (Reddit's ``[deleted]`` /
  ``[removed]``), some of its source posts were collected again and others were not (part of the thread is gone),
  or none was although the sample was posted inside the new window (deleted, or no longer returned by the
  collection's search);
- ``missing``: not produced again although posted inside the new window, and the previous version's source post
  ids are unknown (a Hub dataset has no stage files), so ``deleted`` and ``filtered`` cannot be told apart.

Source post ids of the previous version come from its ``stages/samples.jsonl`` (and, for rows it carried over
itself, its ``changes.json``) when ``--previous`` is a build folder; a sample with no ``created_at`` is treated as outside the window (carried). Everything lands in
``OUT/changes.json`` and in the card's "Version" section.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

from echo_builder.errors import ConfigError

if TYPE_CHECKING:  # pragma: no cover
    from echo_builder.pipeline import BuildConfig
    from echo_builder.records import Sample

__all__ = [
    "DELETION_MARKERS",
    "REMOVAL_REASONS",
    "RefreshInputs",
    "RefreshPlan",
    "apply_refresh",
    "carried_rows",
    "gone_post_ids",
    "plan_refresh",
    "read_previous",
    "read_takedowns",
    "refresh_inputs",
]

#: Why a previously published sample is not in the new version (see the module docstring).
REMOVAL_REASONS = ("takedown", "filtered", "deleted", "missing")
CHANGES_FILE = "changes.json"


@dataclass
class Previous:
    """What a refresh needs of the previous version: per config ``{id: created_at}``, source post ids per sample
    id (empty when unknown), the card's version and where it was read."""

    source: str
    ids: dict[str, dict[str, str | None]]
    post_ids: dict[str, tuple[str, ...]]
    version: str | None


def read_previous(source: str | Path) -> Previous:
    """Read the previous version (a dataset or build folder, or a Hub dataset id) before anything is written.

    Raises:
        ConfigError: it cannot be read (naming it and why) or its card's version is malformed.
    """
    from echo_dataset.errors import EchoDatasetError
    from echo_dataset.versioning import card_version, dataset_ids

    try:
        found = dataset_ids(source, columns=("id", "created_at"))
        version = card_version(source)
    except (EchoDatasetError, FileNotFoundError) as exc:
        raise ConfigError(f"--previous {str(source)!r}: {exc}") from None
    ids = {c: {i: row.get("created_at") for i, row in rows.items()} for c, rows in found.items()}
    post_ids: dict[str, tuple[str, ...]] = {}
    stage_file = Path(source) / "stages" / "samples.jsonl"
    if stage_file.is_file():
        with stage_file.open(encoding="utf-8") as f:
            for number, line in enumerate(f, 1):
                if not line.strip():
                    continue
                try:
                    record = json.loads(line)
                    post_ids[record["id"]] = tuple(record.get("source_post_ids") or ())
                except (ValueError, KeyError, TypeError):
                    raise ConfigError(f"--previous: {stage_file}:{number} is not a sample record") from None
    changes_file = Path(source) / CHANGES_FILE  # a refreshed build: the post ids of the rows it carried over
    if changes_file.is_file():
        try:
            carried = json.loads(changes_file.read_text(encoding="utf-8")).get("carried_post_ids") or {}
        except (OSError, ValueError, AttributeError):
            raise ConfigError(f"--previous: {changes_file} is not a changes file") from None
        for sid, posts in carried.items():
            post_ids.setdefault(sid, tuple(posts))
    return Previous(str(source), ids, post_ids, version)


def read_takedowns(path: str | Path | None) -> frozenset[str]:
    """Ids listed in a takedown file: one sample id (``echo-...``) or post id (``x:123``) a line; blank lines and
    ``#`` comments are skipped. ``None`` gives the empty set.

    Raises:
        ConfigError: the file cannot be read, or a line is neither a sample id nor a namespaced post id.
    """
    from echo_builder.errors import RecordError
    from echo_builder.ids import split_post_id

    if path is None:
        return frozenset()
    try:
        lines = Path(path).read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"--takedowns {str(path)!r} cannot be read: {exc}") from None
    ids = set()
    for number, line in enumerate(lines, 1):
        entry = line.split("#", 1)[0].strip()
        if not entry:
            continue
        if not entry.startswith("echo-"):
            try:
                split_post_id(entry)
            except RecordError:
                raise ConfigError(
                    f"--takedowns {path}:{number}: {entry!r} is neither a sample id (echo-...) nor a post id "
                    "(<platform>:<id>)"
                ) from None
        ids.add(entry)
    return frozenset(ids)


@dataclass
class RefreshPlan:
    """The outcome of a refresh: which new samples to write, which previous rows to carry, and ``changes`` (the
    content of ``changes.json``)."""

    keep_new: set[str]
    carried: dict[str, list[str]]
    changes: dict[str, Any] = field(default_factory=dict)


def _parse_time(value: Any) -> datetime | None:
    if not value:
        return None
    if not isinstance(value, datetime):
        try:
            value = datetime.fromisoformat(str(value).replace("Z", "+00:00"))
        except ValueError:
            return None
    return value if value.tzinfo is not None else value.replace(tzinfo=timezone.utc)  # naive: UTC, as records


def plan_refresh(
    previous: Previous,
    new: Sequence[tuple[str, str | None, Sequence[str]]],
    *,
    collected_post_ids: Iterable[str],
    gone_post_ids: Iterable[str] = (),
    window: tuple[datetime, datetime] | None,
    takedowns: frozenset[str] = frozenset(),
    version: str | None,
) -> RefreshPlan:
    """Decide, sample by sample, what the new version holds (see the module docstring for the rules).

    Args:
        previous: :func:`read_previous`.
        new: the new build's samples as ``(id, config or None when dropped, source post ids)``.
        collected_post_ids: every post id the new build read.
        gone_post_ids: posts read as deletion markers (:func:`gone_post_ids`): a sample of one of them is
            ``deleted``, not ``filtered``.
        window: first and last ``created_at`` of the posts read (UTC), ``None`` when no post had a time.
        takedowns: :func:`read_takedowns`.
        version: the new version (``X.Y.Z``; ``None`` for an unversioned build with a takedown file).

    Returns:
        A :class:`RefreshPlan`; its ``changes`` lists ``added``, ``kept``, ``carried`` (config -> sorted ids),
        ``removed`` (``[{id, config, reason}]`` sorted by id), ``withheld`` (new samples dropped by a takedown),
        ``moved`` (kept samples whose config changed), ``carried_post_ids`` (source post ids of the carried
        samples, where known, read back by the next refresh) and ``counts``.
    """
    collected = set(collected_post_ids)
    gone = set(gone_post_ids)
    routed = {i: c for i, c, _ in new if c is not None}
    new_posts = {i: tuple(p) for i, _, p in new}
    withheld = sorted(i for i, c in routed.items() if i in takedowns or takedowns & set(new_posts[i]))
    keep_new = set(routed) - set(withheld)
    where_old = {i: c for c, ids in previous.ids.items() for i in ids}
    added: dict[str, list[str]] = {}
    kept: dict[str, list[str]] = {}
    carried: dict[str, list[str]] = {}
    removed: list[dict[str, str]] = []
    moved: list[dict[str, str]] = []
    for sid, config in sorted(routed.items()):
        if sid in keep_new:
            (kept if sid in where_old else added).setdefault(config, []).append(sid)
            if sid in where_old and where_old[sid] != config:
                moved.append({"id": sid, "from": where_old[sid], "to": config})
    for sid, config in sorted(where_old.items()):
        if sid in keep_new:
            continue
        posts = previous.post_ids.get(sid) or new_posts.get(sid) or ()
        created = _parse_time(previous.ids[config][sid])
        inside = window is not None and created is not None and window[0] <= created <= window[1]
        reason: str | None
        if sid in takedowns or takedowns & set(posts):
            reason = "takedown"
        elif gone & set(posts):
            reason = "deleted"
        elif posts:
            found = [p for p in posts if p in collected]
            if found and len(found) == len(posts):
                reason = "filtered"
            elif found or inside:
                reason = "deleted"
            else:
                reason = None
        else:
            reason = "missing" if inside else None
        if reason is None:
            carried.setdefault(config, []).append(sid)
        else:
            removed.append({"id": sid, "config": config, "reason": reason})

    def total(groups: dict[str, list[str]]) -> int:
        return sum(len(v) for v in groups.values())

    changes = {
        "version": version,
        "previous": {"source": previous.source, "version": previous.version},
        "window": [w.isoformat().replace("+00:00", "Z") for w in window] if window else None,
        "added": added,
        "kept": kept,
        "carried": carried,
        "removed": removed,
        "withheld": withheld,
        "moved": moved,
        # what the next refresh needs to tell ``deleted`` from ``filtered`` for rows this one only copied
        "carried_post_ids": {
            sid: list(previous.post_ids[sid])
            for ids in carried.values()
            for sid in ids
            if previous.post_ids.get(sid)
        },
        "counts": {
            "added": total(added),
            "kept": total(kept),
            "carried": total(carried),
            "removed": len(removed),
            "withheld": len(withheld),
            "removed_by_reason": dict(sorted(Counter(r["reason"] for r in removed).items())),
        },
    }
    return RefreshPlan(keep_new, carried, changes)


#: Texts a platform leaves in place of a post's content when it is gone (Reddit: ``[deleted]`` by its author,
#: ``[removed]`` by moderators or Reddit).
DELETION_MARKERS = frozenset({"[deleted]", "[removed]"})


def gone_post_ids(posts: Iterable[Any]) -> set[str]:
    """Ids of the posts (records with ``id`` and ``text``) whose text is only a deletion marker
    (:data:`DELETION_MARKERS`)."""
    return {p.id for p in posts if (getattr(p, "text", "") or "").strip().lower() in DELETION_MARKERS}


def carried_rows(source: str, carried: dict[str, list[str]]) -> dict[str, list[dict[str, Any]]]:
    """The previous version's full rows (images included) of the ``carried`` ids, per config."""
    from echo_dataset.loading import iter_config

    rows: dict[str, list[dict[str, Any]]] = {}
    for config, ids in carried.items():
        wanted = set(ids)
        rows[config] = [row for row in iter_config(source, config) if row["id"] in wanted]
    return rows


# ------------------------------------------------------------------------------------------------ a build's refresh
@dataclass
class RefreshInputs:
    """What a refreshed build needs before it starts: the previous version, the new version, the takedowns."""

    previous: Any  # echo_builder.refresh.Previous, or None for a first build (--version or --takedowns alone)
    version: str | None
    takedowns: frozenset[str]


def refresh_inputs(config: BuildConfig) -> RefreshInputs | None:
    """Read ``config.previous`` (a :class:`~echo_builder.pipeline.BuildConfig`) and the takedown file and fix the
    version; ``None`` for a plain build. Called before the build writes anything.

    Raises:
        ConfigError: an unreadable previous version or takedown file, or a malformed version.
    """
    if config.previous is None and config.version is None and config.takedowns is None:
        return None
    from echo_dataset.errors import EchoDatasetError
    from echo_dataset.versioning import bump_minor, check_version

    if config.previous is not None and Path(config.previous).resolve() == Path(config.out_dir).resolve():
        raise ConfigError(
            f"--previous {config.previous} is the build folder itself; write the new version to another --out"
        )
    previous = read_previous(config.previous) if config.previous is not None else None
    if previous is not None and config.pseudonymize and _unpseudonymized(Path(config.previous)):
        raise ConfigError(
            f"--previous {config.previous} was built with --no-pseudonymize: its rows would be carried over into a "
            "dataset marked pseudonymized; rebuild it with pseudonymization, or build this version with "
            "--no-pseudonymize too"
        )
    try:
        if config.version is not None:
            version: str | None = check_version(config.version)
        else:  # a takedown file alone versions nothing
            version = bump_minor(previous.version) if previous is not None else None
    except EchoDatasetError as exc:
        raise ConfigError(f"--version: {exc}") from None
    return RefreshInputs(previous, version, read_takedowns(config.takedowns))


def _unpseudonymized(folder: Path) -> bool:
    """Whether a Parquet file of the local dataset ``folder`` records ``pseudonymized: false`` (a Hub id: no)."""
    import pyarrow.parquet as pq

    from echo_dataset import SPLIT
    from echo_dataset.writer import ECHO_METADATA_KEY

    for file in sorted(folder.glob(f"*/{SPLIT}-*.parquet")) if folder.is_dir() else ():
        meta = pq.read_schema(file).metadata or {}
        if json.loads(meta.get(ECHO_METADATA_KEY, b"{}")).get("pseudonymized") is False:
            return True
    return False


def apply_refresh(refresh: RefreshInputs, samples: Sequence[Sample], posts: Sequence[Any]) -> dict[str, Any]:
    """``changes.json``'s content for this build (plus ``_keep``, the ids of the new samples to write), from the
    curated ``samples`` and the collected ``posts``."""
    from echo_builder.dataset_rows import route

    times = sorted(p.created_at for p in posts if getattr(p, "created_at", None) is not None)
    previous = refresh.previous or Previous("", {}, {}, None)
    plan = plan_refresh(
        previous,
        [(s.id, route(s), s.source_post_ids) for s in samples],
        collected_post_ids=[p.id for p in posts],
        gone_post_ids=gone_post_ids(posts),
        window=(times[0], times[-1]) if times else None,
        takedowns=refresh.takedowns,
        version=refresh.version,
    )
    changes = dict(plan.changes)
    if refresh.previous is None:
        changes["previous"] = {"source": None, "version": None}
    changes["_keep"] = plan.keep_new | {s.id for s in samples if route(s) is None}
    return changes
