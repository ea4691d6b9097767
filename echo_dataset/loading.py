"""Reading a hub-shaped ECHO folder: ``<folder>/<config>/test-*.parquet`` (one Parquet set per config).

This is the layout ``datasets`` reads offline with ``load_dataset(folder, config)`` and the Hub serves; the
writer (``echo_dataset`` writer) produces it. Reading here goes through ``pyarrow`` so that judging or metrics do
not need ``datasets``; a Hub dataset id is loaded with ``datasets.load_dataset`` when the folder does not exist.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from echo_dataset import CONFIG_NAMES, SPLIT

__all__ = [
    "BenchmarkNotFoundError",
    "UnimportedReleaseError",
    "check_not_release",
    "config_files",
    "iter_config",
    "load_config",
    "read_config",
]


class BenchmarkNotFoundError(FileNotFoundError):
    """The benchmark folder, config or its Parquet files do not exist."""


class UnimportedReleaseError(BenchmarkNotFoundError):
    """The benchmark is the authors' ECHO release as published (image columns of media-id / URL tokens, text
    feedback), which echo-bench reads only after ``echo-bench import echo2025``."""


def check_not_release(schema: Any, source: str | Path, config: str) -> None:
    """Raise :class:`UnimportedReleaseError` when ``schema`` (a ``pyarrow.Schema``) is the release's schema.

    One line naming the source, the sign found and the command that converts it, so that ``judge``, ``metrics``,
    ``generate`` and the Space stop at once instead of failing on every sample.
    """
    from echo_dataset.release import release_schema_reason

    reason = release_schema_reason(schema)
    if reason is not None:
        raise UnimportedReleaseError(
            f"{str(source)!r} config {config!r} is the official ECHO release as published ({reason}); "
            f"convert it once with `echo-bench import echo2025 {source} --out DIR [--images DIR]` and use DIR "
            "as the benchmark"
        )


def config_files(folder: str | Path, config: str) -> list[Path]:
    """The Parquet files of ``config``'s ``test`` split, sorted by name. Raises :class:`BenchmarkNotFoundError`."""
    root = Path(folder)
    if not root.is_dir():
        raise BenchmarkNotFoundError(f"benchmark folder {str(root)!r} does not exist")
    files = sorted((root / config).glob(f"{SPLIT}-*.parquet"))
    if not files:
        present = sorted(p.name for p in root.iterdir() if p.is_dir() and any(p.glob("*.parquet")))
        raise BenchmarkNotFoundError(
            f"no '{SPLIT}-*.parquet' files for config {config!r} in {str(root)!r}; configs present: "
            f"{', '.join(present) or 'none'} (ECHO's configs are {', '.join(CONFIG_NAMES)})"
        )
    return files


def _hub_id(value: str) -> bool:
    """Whether a missing local path should be read as a Hub dataset id ``owner/name``.

    Raises :class:`BenchmarkNotFoundError` at once where it cannot be one, rather than after the Hub client's
    retries: a path whose first part is a local folder (a typo such as ``builds/lumne``), and any id while
    Hugging Face is offline (``HF_HUB_OFFLINE``)."""
    import os

    parts = value.split("/")
    if len(parts) != 2 or not all(parts) or value.startswith((".", "/", "~")):
        return False
    if Path(parts[0]).is_dir():
        raise BenchmarkNotFoundError(
            f"benchmark folder {value!r} does not exist (folder {parts[0]!r} has: "
            f"{', '.join(sorted(p.name for p in Path(parts[0]).iterdir() if p.is_dir())[:10]) or 'no folders'})"
        )
    if os.environ.get("HF_HUB_OFFLINE", "").lower() in ("1", "true", "yes", "on"):
        raise BenchmarkNotFoundError(
            f"benchmark {value!r} is not a local folder, and Hugging Face is offline (HF_HUB_OFFLINE), so it "
            "cannot be loaded as a Hub dataset"
        )
    return True


def iter_config(
    folder_or_repo: str | Path,
    config: str,
    *,
    columns: Sequence[str] | None = None,
    batch_size: int = 64,
) -> Iterator[dict[str, Any]]:
    """Rows of ``config`` one at a time, read ``batch_size`` rows at a time from each shard in order: memory holds
    one batch, not the config (a 30k-row analysis config with images is tens of GB). ``columns`` reads only those
    columns (absent ones are skipped); ``None`` reads all. A Hub id is read as :func:`read_config` does.

    Raises:
        BenchmarkNotFoundError, UnimportedReleaseError: as :func:`read_config`, before the first row.
    """
    path = Path(folder_or_repo)
    if not path.exists() and _hub_id(str(folder_or_repo)):
        for row in read_config(folder_or_repo, config):
            yield {k: v for k, v in row.items() if columns is None or k in columns}
        return
    import pyarrow.parquet as pq

    files = config_files(path, config)
    check_not_release(pq.read_schema(files[0]), folder_or_repo, config)
    for file in files:
        parquet = pq.ParquetFile(file)
        wanted = None if columns is None else [c for c in columns if c in parquet.schema_arrow.names]
        for batch in parquet.iter_batches(batch_size=batch_size, columns=wanted):
            yield from batch.to_pylist()


def read_config(
    folder_or_repo: str | Path, config: str, *, columns: Sequence[str] | None = None
) -> list[dict[str, Any]]:
    """Rows of ``config`` as dicts (images as ``{"bytes", "path"}`` dicts, as ``datasets`` stores them), every
    shard in order. ``columns`` reads only those columns (absent ones are skipped); :func:`iter_config` reads
    without holding the config in memory.

    ``folder_or_repo`` is a local hub-shaped folder or, when no such folder exists and it looks like
    ``owner/name``, a Hub dataset id (needs ``datasets`` and network access).

    Raises:
        BenchmarkNotFoundError: no such folder or config, a path that is a typo of a local folder, or a Hub id
            that cannot be loaded (offline, unknown, unreachable); one line saying which.
        UnimportedReleaseError: the authors' release as published (see :func:`check_not_release`).
    """
    path = Path(folder_or_repo)
    if not path.exists() and _hub_id(str(folder_or_repo)):
        try:
            import datasets
        except ImportError:
            raise BenchmarkNotFoundError(
                f"{folder_or_repo!r} is not a folder; loading it from the Hub needs `pip install datasets`"
            ) from None
        try:
            raw = datasets.load_dataset(str(folder_or_repo), config, split=SPLIT)
        except Exception as exc:  # connection, not found, gated, bad config: one clear line, not a traceback
            reason = (str(exc).strip().splitlines() or [""])[0][:300]
            raise BenchmarkNotFoundError(
                f"{folder_or_repo!r} is neither a local folder nor a loadable Hub dataset "
                f"({type(exc).__name__}: {reason})"
            ) from None
        check_not_release(raw.data.schema, folder_or_repo, config)
        if columns is not None:
            raw = raw.select_columns([c for c in columns if c in raw.column_names])
        for column, feature in raw.features.items():
            if isinstance(feature, datasets.Image):  # keep encoded bytes; decoding is the consumer's job
                raw = raw.cast_column(column, datasets.Image(decode=False))
        return list(raw)
    return list(iter_config(path, config, columns=columns, batch_size=1024))


def load_config(folder_or_repo: str | Path, config: str, **kwargs: Any) -> Any:
    """``config``'s ``test`` split as a ``datasets.Dataset`` (images decoded to PIL on access).

    A local hub-shaped folder is loaded offline from its ``<config>/test-*.parquet`` files (the features come
    from the files' metadata (a config with no rows gives an empty dataset; ``load_dataset`` itself refuses it
    with "corresponds to no data"); anything else is taken as a Hub dataset id. ``kwargs`` go to
    ``load_dataset`` (``cache_dir``, ``revision``, ...).
    """
    import datasets

    path = Path(folder_or_repo)
    if path.exists():
        files = [str(f) for f in config_files(path, config)]  # a clear error for a missing config
        # The packaged parquet builder keys its cache by these files (paths and modification times), whereas
        # load_dataset(folder, config) keys it by the folder's name and README metadata only: a rewritten or
        # another folder of the same name could be served from a stale cache.
        import pyarrow.parquet as pq

        check_not_release(pq.read_schema(files[0]), folder_or_repo, config)
        if (
            sum(pq.ParquetFile(f).metadata.num_rows for f in files) == 0
        ):  # datasets refuses a split of no rows
            features = datasets.Features.from_arrow_schema(pq.read_schema(files[0]))
            empty = {name: [] for name in features}
            return datasets.Dataset.from_dict(empty, features=features, split=datasets.Split(SPLIT))
        return datasets.load_dataset("parquet", data_files={SPLIT: files}, split=SPLIT, **kwargs)
    data = datasets.load_dataset(str(folder_or_repo), config, split=SPLIT, **kwargs)
    check_not_release(data.data.schema, folder_or_repo, config)
    return data
