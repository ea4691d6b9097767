"""Write a hub-shaped ECHO folder: ``<folder>/<config>/test-0000K-of-0000N.parquet`` per config plus README.md.

A config is one Parquet file (``test-00000-of-00001.parquet``) unless its rows' estimated size passes
``max_shard_bytes`` (500 MB by default, the shard size ``datasets``' ``push_to_hub`` uses): then it is split into
shards of contiguous rows (by id), each at most that size by the estimate, named as the Hub names shards.

This is the layout ``datasets.load_dataset(folder, config)`` reads offline, the Hub serves after
:func:`echo_dataset.publish.publish`, and :func:`echo_dataset.loading.read_config` reads without ``datasets``.
The output is deterministic: the same rows and media give byte-identical Parquet files and README (rows sorted by
id, no timestamps in any metadata).
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from echo_dataset import CONFIG_NAMES, SPLIT
from echo_dataset.card import render_card
from echo_dataset.errors import RowError
from echo_dataset.features import COLUMNS, IMAGE_COLUMNS, URL_TWINS, features_for
from echo_dataset.pseudonym import DEFAULT_SALT, pseudonymize
from echo_dataset.safe_io import open_atomic, remove

__all__ = [
    "DEFAULT_MAX_SHARD_BYTES",
    "ECHO_METADATA_KEY",
    "SHARD_NAME",
    "encode_rows",
    "load_images",
    "shard_name",
    "shard_rows",
    "write_hub_folder",
]

SHARD_NAME = f"{SPLIT}-00000-of-00001.parquet"
#: A config's Parquet files are split past this estimated size (bytes): ``datasets``' own ``push_to_hub`` default
#: (``max_shard_size="500MB"``), small enough for the Hub's viewer and for one shard in memory while writing.
DEFAULT_MAX_SHARD_BYTES = 500 * 1000 * 1000
#: Parquet schema metadata key recording how the file was written (``{"pseudonymized": bool}``).
ECHO_METADATA_KEY = b"echo_bench"
_LIST_COLUMNS = frozenset(
    {
        *IMAGE_COLUMNS,
        *URL_TWINS.values(),
        "input_bboxes",
        "community_feedback",
        "source_post_urls",
        "media_errors",
    }
)


_LAZY_FILE = "_file"  # key of a not-yet-read image file in a normalized row
ROW_GROUP_SIZE = 100


def _embed(value: Any, twin: str | None, media_root: Path | None, errors: list[str]) -> dict[str, Any] | None:
    """One image entry: a path relative to ``media_root`` -> ``{"bytes", "path"}``; missing file -> ``None``."""
    if value is None:
        return None
    if isinstance(value, Mapping):  # already encoded
        return {"bytes": value.get("bytes"), "path": value.get("path")} if value.get("bytes") else None
    if isinstance(value, bytes | bytearray):
        return {"bytes": bytes(value), "path": None}
    if media_root is None:  # an URL-only dataset: nothing to embed, not an error
        return None
    file = media_root / str(value)
    if not file.resolve().is_relative_to(media_root.resolve()):
        # an absolute or ``..`` path (from a hostile post, or a local file the media stage refused) must never
        # embed a file from elsewhere on the machine into the dataset
        errors.append(f"{twin or value}: path is outside the media root, not embedded ({value})")
        return None
    if not file.is_file():
        errors.append(f"{twin or value}: not found under the media root ({value})")
        return None
    # the bytes are read only when the row's row group is written, so memory holds one row group, not the dataset
    return {"bytes": None, "path": Path(str(value)).name, _LAZY_FILE: str(file)}


def _as_list_cell(value: Any, column: str, row_id: Any) -> list[Any]:
    """A list column's value as a list. A text value is never split into characters: ``community_feedback`` text
    (JSON, Python repr or prose, as in the authors' release) is read as reply records, a single path or URL
    becomes a list of one, and text boxes are refused (:class:`RowError`)."""
    if isinstance(value, str):
        if column == "community_feedback":
            from echo_dataset.release import feedback_items

            return feedback_items(value)
        if column == "input_bboxes":
            raise RowError(
                f"row {row_id!r}: input_bboxes is text ({value[:80]!r}); give a list of {{x1, y1, x2, y2, role}}"
            )
        return [value]
    return list(value or ())


def _normalized(row: Mapping[str, Any], media_root: Path | None) -> dict[str, Any]:
    unknown = sorted(set(row) - set(COLUMNS))
    if unknown:
        raise RowError(
            f"row {row.get('id')!r} has unknown columns {unknown}; the columns are {', '.join(COLUMNS)}"
        )
    out: dict[str, Any] = {c: row.get(c, [] if c in _LIST_COLUMNS else None) for c in COLUMNS}
    for column in _LIST_COLUMNS:
        out[column] = _as_list_cell(out[column], column, out.get("id"))
    errors = list(out["media_errors"])
    for column, twin_column in URL_TWINS.items():
        images, urls = out[column], out[twin_column]
        if row.get(twin_column) is not None and len(urls) != len(images):
            raise RowError(
                f"row {out['id']!r}: {column} has {len(images)} entries but {twin_column} has {len(urls)}; "
                "they must match position by position"
            )
        urls = urls or [None] * len(images)
        out[twin_column] = urls
        out[column] = [_embed(v, u, media_root, errors) for v, u in zip(images, urls, strict=True)]
    out["media_errors"] = errors
    return out


def encode_rows(
    rows: Sequence[Mapping[str, Any]],
    config: str,
    *,
    media_root: str | Path | None = None,
    pseudonymize_rows: bool = True,
    salt: str = DEFAULT_SALT,
    identifiers: Iterable[str] = (),
) -> list[dict[str, Any]]:
    """Rows ready for ``features_for(config)``: images embedded, pseudonymized, sorted by id.

    ``salt`` and ``identifiers`` (known account identifiers of the input) as in
    :func:`echo_dataset.pseudonym.pseudonymize`.

    Raises:
        RowError: an unknown column, a duplicate id, or image and URL lists of different lengths.
    """
    features_for(config)  # validates the name
    root = Path(media_root) if media_root is not None else None
    normalized = [_normalized(r, root) for r in rows]
    if pseudonymize_rows:
        normalized = pseudonymize(normalized, salt=salt, identifiers=identifiers)
    normalized.sort(key=lambda r: r["id"])
    ids = [r["id"] for r in normalized]
    duplicates = sorted({i for i in ids if ids.count(i) > 1}) if len(set(ids)) != len(ids) else []
    if duplicates:
        raise RowError(f"config {config!r}: duplicate ids {duplicates[:5]}")
    return normalized


def _write_parquet(
    rows: list[dict[str, Any]], config: str, file: Any, *, pseudonymized: bool, public_salt: bool
) -> int:
    """Write ``rows`` as Parquet into the open binary ``file``; returns the bytes written."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    features = features_for(config)
    schema = features.arrow_schema
    record = {"pseudonymized": pseudonymized} | ({"public_salt": public_salt} if pseudonymized else {})
    schema = schema.with_metadata({**(schema.metadata or {}), ECHO_METADATA_KEY: json.dumps(record).encode()})
    with pq.ParquetWriter(file, schema, compression="zstd") as writer:
        # an empty config has no row group at all (datasets cannot read a row group of 0 rows)
        for start in range(0, len(rows), ROW_GROUP_SIZE):
            chunk = [features.encode_example(load_images(r)) for r in rows[start : start + ROW_GROUP_SIZE]]
            writer.write_table(pa.Table.from_pylist(chunk, schema=schema))
    return int(file.tell())


def load_images(row: dict[str, Any]) -> dict[str, Any]:
    """``row`` (from :func:`encode_rows`) with every lazily referenced image file read into its ``bytes``."""
    out = dict(row)
    for column in URL_TWINS:
        out[column] = [
            {"bytes": Path(img[_LAZY_FILE]).read_bytes(), "path": img["path"]}
            if isinstance(img, Mapping) and _LAZY_FILE in img
            else img
            for img in row[column]
        ]
    return out


def shard_name(index: int, count: int) -> str:
    """The Hub's name of shard ``index`` (0-based) of ``count``: ``test-00002-of-00005.parquet``."""
    return f"{SPLIT}-{index:05d}-of-{count:05d}.parquet"


def _estimated_bytes(row: Mapping[str, Any]) -> int:
    """A row's size in a shard, estimated before writing: its images' bytes (read from disk only by ``stat``) plus
    its other values as UTF-8 text. Images dominate and are stored as they are (already compressed), so the
    estimate is close for image configs and an overestimate for text (which zstd compresses)."""
    size = 0
    for column, value in row.items():
        if column in URL_TWINS:
            for img in value or ():
                if isinstance(img, Mapping) and _LAZY_FILE in img:
                    with contextlib.suppress(OSError):
                        size += Path(img[_LAZY_FILE]).stat().st_size
                elif isinstance(img, Mapping) and img.get("bytes"):
                    size += len(img["bytes"])
        elif value is not None:
            size += len(str(value).encode("utf-8", "surrogatepass"))
    return size


def shard_rows(rows: Sequence[Mapping[str, Any]], max_shard_bytes: int) -> list[Sequence[Mapping[str, Any]]]:
    """``rows`` (sorted by id) cut into contiguous shards of at most ``max_shard_bytes`` estimated bytes each.

    A row larger than the limit is a shard of its own (a row is never split). An empty config is one empty
    shard, so every config has a file. Deterministic: the same rows and files give the same cuts.

    Raises:
        ValueError: ``max_shard_bytes`` is not a positive integer.
    """
    if isinstance(max_shard_bytes, bool) or not isinstance(max_shard_bytes, int) or max_shard_bytes <= 0:
        raise ValueError(f"max_shard_bytes must be a positive number of bytes, got {max_shard_bytes!r}")
    shards: list[Sequence[Mapping[str, Any]]] = []
    start, size = 0, 0
    for i, row in enumerate(rows):
        row_size = _estimated_bytes(row)
        if i > start and size + row_size > max_shard_bytes:
            shards.append(rows[start:i])
            start, size = i, 0
        size += row_size
    shards.append(rows[start:])
    return shards


def _dataset_info(config: str, rows: int, size: int) -> dict[str, Any]:
    """The README ``dataset_info`` entry of a config (features and split size, as ``datasets`` writes it).

    Besides showing the schema on the Hub, it makes ``datasets``' local cache key depend on each config's size:
    ``load_dataset(folder, config)`` keys its cache by the folder name and README metadata only, not by the
    Parquet files' content.
    """
    import datasets

    info = datasets.DatasetInfo(
        features=features_for(config),
        splits=datasets.SplitDict({SPLIT: datasets.SplitInfo(name=SPLIT, num_bytes=size, num_examples=rows)}),
        config_name=config,
        download_size=size,
        dataset_size=size,
    )
    return {"config_name": config, **{k: v for k, v in info._to_yaml_dict().items() if k != "config_name"}}


def write_hub_folder(
    rows_by_config: Mapping[str, Sequence[Mapping[str, Any]]],
    folder: str | Path,
    *,
    media_root: str | Path | None = None,
    card_context: Mapping[str, Any],
    pseudonymize: bool = True,
    salt: str = DEFAULT_SALT,
    identifiers: Iterable[str] = (),
    card_template: str | Path | None = None,
    max_shard_bytes: int = DEFAULT_MAX_SHARD_BYTES,
    carried: Mapping[str, Sequence[Mapping[str, Any]]] | None = None,
) -> Path:
    """Write every ECHO config (an absent one as an empty table) and the dataset card into ``folder``.

    The card's ``configs`` and ``dataset_info`` declare only the configs that have rows: ``datasets`` cannot
    load a split of no rows (``load_dataset(folder, config)`` fails with "corresponds to no data"), so an empty
    config is left undeclared (``load_dataset`` then names the configs available) while its empty Parquet file
    stays for :func:`echo_dataset.loading.load_config`, which returns it as an empty ``Dataset`` with the
    config's ``Features``.

    Args:
        rows_by_config: config name -> rows (see :mod:`echo_dataset.rows`; image columns hold paths relative to
            ``media_root``, or already encoded ``{"bytes", "path"}`` dicts).
        folder: the output folder (created; stale ``test-*.parquet`` shards of the configs are removed). Every
            file is written atomically and all are renamed into place together at the end, never through a
            symbolic link below ``folder``.
        media_root: where image paths are resolved; ``None`` writes URLs only (no image embedded). A missing file,
            or a path that leads outside ``media_root`` (absolute, ``..``), leaves ``None`` in the image list, keeps
            its URL twin and adds a ``media_errors`` entry.
        card_context: run statistics for the card (see :func:`echo_dataset.card.render_card`);
            :func:`echo_dataset.card.card_context_from_report` builds one from a build's ``report.json``.
        pseudonymize: replace social-media handles by stable pseudonyms (on by default; see
            :mod:`echo_dataset.pseudonym`). Recorded in each Parquet file's metadata; :func:`publish` checks it.
        salt: the pseudonym salt. The default, :data:`echo_dataset.pseudonym.DEFAULT_SALT`, is public: anyone can
            recompute the pseudonym of a known handle. ``echo-bench build`` passes a random per-build salt (or
            the one of ``--salt-file``); the card says which kind was used, and each Parquet file's metadata
            records ``public_salt``. The salt itself is written nowhere in ``folder``.
        identifiers: known account identifiers of the input (authors' handles and user ids, see
            :func:`echo_dataset.pseudonym.author_identifiers`), also replaced inside any URL.
        card_template: a card template instead of ``echo_dataset/templates/echo_card.md.tmpl``.
        max_shard_bytes: a config whose rows are estimated above this many bytes is written as several shards
            ``test-0000K-of-0000N.parquet`` (see :func:`shard_rows`); ``datasets.load_dataset`` and
            :func:`echo_dataset.loading.read_config` read them in order. Default 500 MB.
        carried: config name -> rows of an earlier version of the dataset, as read back from its Parquet files
            (images as ``{"bytes", "path"}``), written unchanged beside ``rows_by_config``: they were
            pseudonymized when first written, so they are not pseudonymized again (``build --previous``).

    Returns:
        The folder.

    Raises:
        RowError: an unknown config or column, a duplicate id (before anything is written).
        ValueError: ``max_shard_bytes`` is not a positive integer (before anything is written).
        echo_dataset.safe_io.UnsafeOutputPathError: a path to write is a symbolic link below ``folder``.
        echo_dataset.safe_io.OutputWriteError: the folder is read-only or the disk is full (the previous files
            are kept).
    """
    unknown = sorted(set(rows_by_config) - set(CONFIG_NAMES))
    if unknown:
        raise RowError(f"unknown configs {unknown}; ECHO's configs are {', '.join(CONFIG_NAMES)}")
    root = Path(folder)
    encoded = {
        c: encode_rows(
            rows_by_config.get(c, ()),
            c,
            media_root=media_root,
            pseudonymize_rows=pseudonymize,
            salt=salt,
            identifiers=identifiers,
        )
        for c in CONFIG_NAMES
    }
    for config, rows in (carried or {}).items():
        if config not in encoded:
            raise RowError(
                f"unknown config {config!r} of carried rows; ECHO's configs are {', '.join(CONFIG_NAMES)}"
            )
        if rows:
            merged = encoded[config] + encode_rows(rows, config, pseudonymize_rows=False)
            ids = [r["id"] for r in merged]
            if len(set(ids)) != len(ids):
                both = sorted({i for i in ids if ids.count(i) > 1})
                raise RowError(f"config {config!r}: carried rows repeat ids of new rows {both[:5]}")
            encoded[config] = sorted(merged, key=lambda r: r["id"])
    context = dict(card_context)
    context.setdefault("pseudonymized", pseudonymize)
    context.setdefault("public_salt", salt == DEFAULT_SALT)
    if not context.get("collection_window"):
        times = sorted(r["created_at"] for rows in encoded.values() for r in rows if r["created_at"])
        context["collection_window"] = (times[0], times[-1]) if times else None
    counts = {c: len(r) for c, r in encoded.items()}
    shards = {c: shard_rows(rows, max_shard_bytes) for c, rows in encoded.items()}
    render_card(context, counts=counts, template=card_template)  # a template problem fails before any write
    # Every file is written to a temporary name first and all are renamed into place only once every one is
    # complete: a failure (full disk, a bad image) leaves the previous dataset exactly as it was. No write goes
    # through a symbolic link (a planted `<config>/` or README.md link is refused; see echo_dataset.safe_io).
    infos = []
    names: dict[str, set[str]] = {}
    with contextlib.ExitStack() as commit:
        for config, rows in encoded.items():
            size = 0
            parts = shards[config]
            names[config] = {shard_name(i, len(parts)) for i in range(len(parts))}
            for i, part in enumerate(parts):
                file = commit.enter_context(
                    open_atomic(root, root / config / shard_name(i, len(parts)), "wb")
                )
                size += _write_parquet(
                    list(part), config, file, pseudonymized=pseudonymize, public_salt=salt == DEFAULT_SALT
                )
            if rows:  # a config of no rows is not declared: load_dataset cannot read an empty split
                infos.append(_dataset_info(config, len(rows), size))
        readme = render_card(context, counts=counts, template=card_template, dataset_info=infos)
        commit.enter_context(open_atomic(root, root / "README.md", "wb")).write(readme.encode("utf-8"))
    for config in encoded:
        for stale in sorted((root / config).glob(f"{SPLIT}-*.parquet")):
            if (
                stale.name not in names[config]
            ):  # an older write's shards: this write replaces the whole config
                remove(root, stale)
    return root
