"""Reading a hub-shaped ECHO folder: ``<folder>/<config>/test-*.parquet`` (one Parquet set per config).

This is the layout ``datasets`` reads offline with ``load_dataset(folder, config)`` and the Hub serves; the
writer (``echo_dataset`` writer) produces it. Reading here goes through ``pyarrow`` so that judging or metrics do
not need ``datasets``; a Hub dataset id is loaded with ``datasets.load_dataset`` when the folder does not exist.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from echo_dataset import CONFIG_NAMES, SPLIT

__all__ = ["BenchmarkNotFoundError", "config_files", "read_config"]


class BenchmarkNotFoundError(FileNotFoundError):
    """The benchmark folder, config or its Parquet files do not exist."""


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


def read_config(folder_or_repo: str | Path, config: str) -> list[dict[str, Any]]:
    """Rows of ``config`` as dicts (images as ``{"bytes", "path"}`` dicts, as ``datasets`` stores them).

    ``folder_or_repo`` is a local hub-shaped folder or, when no such folder exists and it looks like
    ``owner/name``, a Hub dataset id (needs ``datasets`` and network access).
    """
    path = Path(folder_or_repo)
    if not path.exists() and "/" in str(folder_or_repo) and not str(folder_or_repo).startswith((".", "/")):
        try:
            import datasets
        except ImportError:
            raise BenchmarkNotFoundError(
                f"{folder_or_repo!r} is not a folder; loading it from the Hub needs `pip install datasets`"
            ) from None
        raw = datasets.load_dataset(str(folder_or_repo), config, split=SPLIT)
        for column, feature in raw.features.items():
            if isinstance(feature, datasets.Image):  # keep encoded bytes; decoding is the consumer's job
                raw = raw.cast_column(column, datasets.Image(decode=False))
        return list(raw)
    import pyarrow.parquet as pq

    rows: list[dict[str, Any]] = []
    for file in config_files(path, config):
        rows.extend(pq.read_table(file).to_pylist())
    return rows
