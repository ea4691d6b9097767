"""The generation manifest: what was generated, how, and what failed, per model output folder.

Files in ``OUTPUTS/<model name>/``:

- ``manifest.rank<K>.jsonl``: written while a run is going, one per process. The first line of each run is a
  ``{"type": "run", ...}`` header; then one ``{"type": "sample", ...}`` line per finished sample, appended and
  flushed the moment the sample is done, so a crash loses at most the samples in flight.
- ``manifest.json``: the merged manifest, written atomically by the main process at the end of a run, after which
  the shards are removed. A crashed run leaves its shards; the next run (and :func:`read_records`) reads them.

A sample record holds ``sample_id``, ``status`` (``ok``, ``refused``, ``nsfw``, ``error``, ``missing_input``),
``message``, ``seed``, ``seconds``, ``file`` (``<sample_id>.png`` or ``None``), ``bytes`` and ``sha256`` of the
PNG, ``width``, ``height``, ``rank``, ``finished_at`` (Unix time) and backend ``details``. When a sample has
several records (a failure, then a retry), the latest ``finished_at`` wins.

Nothing here imports torch or a backend: ``judge`` and ``metrics`` read failures with
:func:`generation_failures` to show why an output is missing.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import IO, Any

from echo_builder.errors import ConfigError
from echo_builder.secrets import get_logger, redact

__all__ = [
    "MANIFEST_FILE",
    "MANIFEST_FORMAT",
    "ShardWriter",
    "generation_failures",
    "read_manifest",
    "read_records",
    "read_run_headers",
    "shard_files",
    "write_manifest",
]

log = get_logger(__name__)
MANIFEST_FILE = "manifest.json"
MANIFEST_FORMAT = 1
SHARD_GLOB = "manifest.rank*.jsonl"


def shard_files(model_dir: str | Path) -> list[Path]:
    """The per-process shard files in ``model_dir``, sorted by name."""
    return sorted(Path(model_dir).glob(SHARD_GLOB))


def read_manifest(model_dir: str | Path, *, strict: bool = True) -> dict[str, Any] | None:
    """The merged ``manifest.json`` of ``model_dir``, or ``None`` when there is none.

    Raises :class:`ConfigError` for an unreadable manifest when ``strict`` (else logs and returns ``None``).
    """
    path = Path(model_dir) / MANIFEST_FILE
    if not path.is_file():
        return None
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
        if not isinstance(manifest, dict) or not isinstance(manifest.get("samples", {}), dict):
            raise ValueError("not a JSON object with a 'samples' object")
    except (OSError, ValueError) as exc:
        if strict:
            raise ConfigError(
                f"{path} is unreadable ({exc}); move it away to regenerate every sample of this model"
            ) from None
        log.warning("ignoring unreadable %s: %s", path, exc)
        return None
    return manifest


def _shard_lines(model_dir: str | Path) -> Iterable[dict[str, Any]]:
    for shard in shard_files(model_dir):
        try:
            lines = shard.read_text(encoding="utf-8").splitlines()
        except OSError as exc:
            log.warning("cannot read %s: %s", shard, exc)
            continue
        for n, line in enumerate(lines, 1):
            if not line.strip():
                continue
            try:
                entry = json.loads(line)
            except json.JSONDecodeError:
                # a process killed mid-write leaves at most a partial last line: that sample is simply redone
                log.warning("%s line %d is not valid JSON (a crash mid-write?); ignored", shard.name, n)
                continue
            if isinstance(entry, dict):
                yield entry


def read_records(model_dir: str | Path, *, strict: bool = True) -> dict[str, dict[str, Any]]:
    """``{sample_id: latest record}`` from ``manifest.json`` and any shards left by a running or crashed run."""
    records: dict[str, dict[str, Any]] = {}

    def consider(record: Mapping[str, Any]) -> None:
        sample_id = record.get("sample_id")
        if not isinstance(sample_id, str):
            return
        previous = records.get(sample_id)
        if previous is None or float(record.get("finished_at") or 0) >= float(
            previous.get("finished_at") or 0
        ):
            records[sample_id] = dict(record)

    manifest = read_manifest(model_dir, strict=strict)
    for sample_id, record in (manifest or {}).get("samples", {}).items():
        if isinstance(record, dict):
            consider({**record, "sample_id": sample_id})
    for entry in _shard_lines(model_dir):
        if entry.get("type") == "sample":
            consider({k: v for k, v in entry.items() if k != "type"})
    return records


def read_run_headers(model_dir: str | Path) -> list[dict[str, Any]]:
    """The ``run`` headers of the shards still present (runs not yet merged), in file order."""
    return [entry for entry in _shard_lines(model_dir) if entry.get("type") == "run"]


def generation_failures(model_dir: str | Path) -> dict[str, str]:
    """``{sample_id: reason}`` for samples whose latest generation failed, e.g. ``"generation refused: ..."``.

    Reads ``manifest.json`` and shards without failing: a folder with no or an unreadable manifest has no
    recorded failures (its missing outputs then show the generic reason).
    """
    try:
        records = read_records(model_dir, strict=False)
    except OSError:
        return {}
    out = {}
    for sample_id, record in records.items():
        status = record.get("status")
        if status and status != "ok":
            message = record.get("message") or "no message"
            out[sample_id] = f"generation {status}: {message}"
    return out


class ShardWriter:
    """Appends records to ``manifest.rank<rank>.jsonl``, one flushed line per call (safe against a crash)."""

    def __init__(self, model_dir: str | Path, rank: int) -> None:
        from echo_dataset.safe_io import OutputWriteError, UnsafeOutputPathError, describe_os_error

        self.path = Path(model_dir) / f"manifest.rank{rank}.jsonl"
        flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0)
        try:  # never appended through a symbolic link planted at the shard's name
            fd = os.open(self.path, flags, 0o644)
        except OSError as exc:
            if self.path.is_symlink():
                raise UnsafeOutputPathError(
                    f"{self.path} is a symbolic link; echo-bench never writes through a link: remove it"
                ) from None
            raise OutputWriteError(describe_os_error(exc, self.path)) from None
        self._file: IO[str] | None = os.fdopen(fd, "a", encoding="utf-8")

    def write(self, entry: Mapping[str, Any]) -> None:
        """Append one JSON line and flush it to the operating system."""
        if self._file is None:
            raise ValueError(f"{self.path} is closed")
        # no key a server echoed back (an error, a revised prompt) reaches the manifest
        self._file.write(redact(json.dumps(entry, sort_keys=True, ensure_ascii=False)) + "\n")
        self._file.flush()

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None

    def __enter__(self) -> ShardWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def write_manifest(
    model_dir: str | Path,
    header: Mapping[str, Any],
    records: Mapping[str, Mapping[str, Any]],
    order: Iterable[str] = (),
) -> dict[str, Any]:
    """Write the merged ``manifest.json`` atomically, then remove the shards it absorbed.

    Args:
        header: run-level fields (model spec, seed policy, parameters, versions, ...).
        records: ``{sample_id: record}`` (usually :func:`read_records`' result).
        order: sample ids in benchmark order; samples not listed follow, sorted.

    Returns the manifest written.
    """
    from collections import Counter

    model_dir = Path(model_dir)
    shards = shard_files(model_dir)
    ranked = {sid: i for i, sid in enumerate(dict.fromkeys(order))}
    ids = sorted(records, key=lambda sid: (ranked.get(sid, len(ranked)), sid))
    samples = {sid: {k: v for k, v in records[sid].items() if k != "sample_id"} for sid in ids}
    manifest = {
        **header,
        "format": MANIFEST_FORMAT,
        "updated_at": time.time(),
        "counts": dict(sorted(Counter(r.get("status", "error") for r in samples.values()).items())),
        "samples": samples,
    }
    from echo_dataset.safe_io import write_text

    # atomically, and never through a link planted at the manifest's (or its temporary file's) name
    write_text(
        model_dir,
        model_dir / MANIFEST_FILE,
        redact(json.dumps(manifest, indent=1, ensure_ascii=False)) + "\n",
    )
    for shard in shards:
        shard.unlink(missing_ok=True)
    return manifest
