"""Versions of a living ECHO benchmark: semantic version numbers, what a dataset holds per config, and the diff of
two versions (``echo-bench diff OLD NEW``).

A refreshed build (``echo-bench build --previous DATASET``) records its version (``X.Y.Z``, semantic versioning
2.0.0, https://semver.org) in the card's front matter (``version:``) and in a "Version" section; sample ids are
deterministic hashes of the source post ids (:func:`echo_builder.ids.sample_id`), so the same sample has the same id
in every version and two versions are compared by id.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from echo_dataset import CONFIG_NAMES
from echo_dataset.errors import EchoDatasetError
from echo_dataset.loading import BenchmarkNotFoundError, iter_config
from echo_dataset.safe_yaml import YAMLReadError, load_yaml

__all__ = [
    "FIRST_VERSION",
    "bump_minor",
    "card_version",
    "check_version",
    "dataset_ids",
    "diff_datasets",
    "read_labels",
    "render_diff",
]

#: The version of a first release when none is given.
FIRST_VERSION = "1.0.0"
_SEMVER = re.compile(r"(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)")


def check_version(version: str) -> str:
    """``version`` when it is ``MAJOR.MINOR.PATCH`` (non-negative integers, no leading zero, no pre-release tag).

    Raises:
        EchoDatasetError: any other text, naming it.
    """
    if not isinstance(version, str) or not _SEMVER.fullmatch(version.strip()):
        raise EchoDatasetError(f"version {version!r} is not MAJOR.MINOR.PATCH (e.g. 1.2.0)")
    return version.strip()


def bump_minor(version: str | None) -> str:
    """The next minor version (``1.2.3`` -> ``1.3.0``), or :data:`FIRST_VERSION` when ``version`` is ``None``."""
    if version is None:
        return FIRST_VERSION
    major, minor, _ = (int(p) for p in check_version(version).split("."))
    return f"{major}.{minor + 1}.0"


def _front_matter(text: str) -> dict[str, Any]:
    if not text.startswith("---\n"):
        return {}
    end = text.find("\n---", 4)
    if end < 0:
        return {}
    try:
        meta = load_yaml(text[4:end], "the card's front matter")
    except YAMLReadError:
        return {}
    return meta if isinstance(meta, dict) else {}


def card_version(folder_or_repo: str | Path) -> str | None:
    """The ``version`` in the card (README.md front matter) of a dataset folder or Hub dataset id; ``None`` when
    the card has none (a dataset built before versions existed) or a Hub card cannot be read.

    Raises:
        EchoDatasetError: the card's ``version`` is not ``MAJOR.MINOR.PATCH``.
    """
    path = Path(folder_or_repo)
    if path.exists():
        readme = path / "README.md"
        text = readme.read_text(encoding="utf-8") if readme.is_file() else ""
    else:
        try:
            from huggingface_hub import hf_hub_download

            text = Path(hf_hub_download(str(folder_or_repo), "README.md", repo_type="dataset")).read_text(
                "utf-8"
            )
        except Exception:  # no card, offline, unknown repo: treated as unversioned (the data read decides)
            return None
    version = _front_matter(text).get("version")
    return None if version is None else check_version(str(version))


def dataset_ids(
    folder_or_repo: str | Path, *, columns: tuple[str, ...] = ("id", "created_at")
) -> dict[str, dict[str, dict[str, Any]]]:
    """Per config, every sample id of the dataset with the ``columns`` asked for: ``{config: {id: row}}``.

    A config the dataset lacks (no Parquet file) is an empty dict. Raises
    :class:`~echo_dataset.loading.BenchmarkNotFoundError` when the folder (or Hub id) holds no config at all.
    """
    found: dict[str, dict[str, dict[str, Any]]] = {}
    error: BenchmarkNotFoundError | None = None
    for config in CONFIG_NAMES:
        try:
            found[config] = {row["id"]: row for row in iter_config(folder_or_repo, config, columns=columns)}
        except BenchmarkNotFoundError as exc:  # this config is absent (an empty one has its file)
            found[config], error = {}, exc
    if error is not None and not any(found.values()) and not _has_any_config(folder_or_repo):
        if not Path(folder_or_repo).exists():  # a mistyped folder or an unreadable Hub id: its own reason
            raise error
        raise BenchmarkNotFoundError(
            f"{str(folder_or_repo)!r} holds none of ECHO's configs ({', '.join(CONFIG_NAMES)}): {error}"
        )
    return found


def _has_any_config(folder_or_repo: str | Path) -> bool:
    root = Path(folder_or_repo)
    return root.is_dir() and any(any((root / c).glob("test-*.parquet")) for c in CONFIG_NAMES)


def read_labels(analysis_dir: str | Path) -> dict[str, dict[str, list[str]]]:
    """Categories per sample from an ``echo-bench analyze`` folder's ``labels.jsonl``:
    ``{"task": {sample_id: [category, ...]}, "failure": {...}}`` (prompt items give tasks, feedback items give
    failure categories; unlabelled items are skipped).

    Raises:
        EchoDatasetError: the folder has no ``labels.jsonl`` or a line is not JSON (naming the line).
    """
    file = Path(analysis_dir) / "labels.jsonl"
    if not file.is_file():
        raise EchoDatasetError(
            f"{str(analysis_dir)!r} has no labels.jsonl (write one with `echo-bench analyze`)"
        )
    out: dict[str, dict[str, list[str]]] = {"task": {}, "failure": {}}
    with file.open(encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                item = json.loads(line)
            except ValueError:
                raise EchoDatasetError(f"{file}:{number}: not a JSON line") from None
            kind = "task" if item.get("labeller") == "task" else "failure"
            if item.get("status", "ok") != "ok" or not item.get("sample_id"):
                continue
            cats = [lab.get("category") for lab in item.get("labels") or () if lab.get("category")]
            out[kind].setdefault(item["sample_id"], []).extend(cats)
    return out


def _shift(old: Mapping[str, list[str]], new: Mapping[str, list[str]]) -> list[dict[str, Any]]:
    before = Counter(c for cats in old.values() for c in cats)
    after = Counter(c for cats in new.values() for c in cats)
    n_old, n_new = sum(before.values()), sum(after.values())
    rows = []
    for cat in sorted(set(before) | set(after)):
        share_old = before[cat] / n_old if n_old else None
        share_new = after[cat] / n_new if n_new else None
        rows.append(
            {
                "category": cat,
                "old": before[cat],
                "new": after[cat],
                "old_share": None if share_old is None else round(share_old, 4),
                "new_share": None if share_new is None else round(share_new, 4),
                "shift": None if share_old is None or share_new is None else round(share_new - share_old, 4),
            }
        )
    return rows


def diff_datasets(
    old: str | Path,
    new: str | Path,
    *,
    old_labels: Mapping[str, Mapping[str, list[str]]] | None = None,
    new_labels: Mapping[str, Mapping[str, list[str]]] | None = None,
) -> dict[str, Any]:
    """Compare two versions of a benchmark (folders or Hub ids) by sample id.

    Returns a JSON-ready dict: ``old``/``new`` (source and card ``version``), ``configs`` (per config: ``old`` and
    ``new`` row counts, ``added`` and ``removed`` ids, sorted; an id that changed config counts as removed from
    one and added to the other and is listed in ``moved`` as ``{id, from, to}``), ``totals`` (distinct ids:
    ``old``, ``new``, ``added``, ``removed``, ``kept``), and, when both label sets are given (see
    :func:`read_labels`), ``task_shift`` and ``failure_shift``: per category the label counts in each version,
    their shares of all labels and ``shift`` (new share minus old share, in [-1, 1]).

    Raises:
        BenchmarkNotFoundError: either dataset cannot be read.
        EchoDatasetError: a card's version is malformed.
    """
    before, after = dataset_ids(old, columns=("id",)), dataset_ids(new, columns=("id",))
    where_old = {i: c for c, ids in before.items() for i in ids}
    where_new = {i: c for c, ids in after.items() for i in ids}
    configs = {}
    for config in CONFIG_NAMES:
        o, n = set(before[config]), set(after[config])
        configs[config] = {
            "old": len(o),
            "new": len(n),
            "added": sorted(n - o),
            "removed": sorted(o - n),
        }
    moved = [
        {"id": i, "from": where_old[i], "to": where_new[i]}
        for i in sorted(set(where_old) & set(where_new))
        if where_old[i] != where_new[i]
    ]
    result: dict[str, Any] = {
        "old": {"source": str(old), "version": card_version(old)},
        "new": {"source": str(new), "version": card_version(new)},
        "configs": configs,
        "moved": moved,
        "totals": {
            "old": len(where_old),
            "new": len(where_new),
            "added": len(set(where_new) - set(where_old)),
            "removed": len(set(where_old) - set(where_new)),
            "kept": len(set(where_old) & set(where_new)),
        },
    }
    if old_labels is not None and new_labels is not None:
        for kind in ("task", "failure"):
            result[f"{kind}_shift"] = _shift(old_labels.get(kind, {}), new_labels.get(kind, {}))
    return result


def render_diff(diff: Mapping[str, Any], *, max_ids: int = 20) -> str:
    """The text table ``echo-bench diff`` prints: counts per config, then the added and removed ids (at most
    ``max_ids`` per list, with how many more), moved ids and any category shifts."""
    o, n = diff["old"], diff["new"]
    lines = [
        f"old: {o['source']} (version {o['version'] or 'none'})",
        f"new: {n['source']} (version {n['version'] or 'none'})",
        "",
        f"{'config':<16} {'old':>7} {'new':>7} {'added':>7} {'removed':>8}",
    ]
    for config, c in diff["configs"].items():
        lines.append(f"{config:<16} {c['old']:>7} {c['new']:>7} {len(c['added']):>7} {len(c['removed']):>8}")
    t = diff["totals"]
    lines.append(
        f"{'all (distinct)':<16} {t['old']:>7} {t['new']:>7} {t['added']:>7} {t['removed']:>8}   kept {t['kept']}"
    )
    for config, c in diff["configs"].items():
        for what in ("added", "removed"):
            ids = c[what]
            if ids:
                shown = ", ".join(ids[:max_ids]) + (
                    f" (+{len(ids) - max_ids} more)" if len(ids) > max_ids else ""
                )
                lines.append(f"{what} in {config}: {shown}")
    for m in diff.get("moved") or ():
        lines.append(f"moved: {m['id']} {m['from']} -> {m['to']}")
    for kind in ("task", "failure"):
        rows = diff.get(f"{kind}_shift")
        if rows is None:
            continue
        lines += ["", f"{kind} categories (labels; share of all {kind} labels):"]
        lines.append(f"  {'category':<28} {'old':>6} {'new':>6} {'shift':>8}")
        for r in rows:
            shift = "n/a" if r["shift"] is None else f"{r['shift']:+.3f}"
            lines.append(f"  {r['category']:<28} {r['old']:>6} {r['new']:>6} {shift:>8}")
    return "\n".join(lines)
