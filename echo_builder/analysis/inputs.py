"""What ``analyze`` reads: a build or benchmark folder's configs, and reference prompt sets for ``--compare``.

A build folder (``echo-bench build --out``) is a benchmark folder too: both hold ``<config>/test-*.parquet``; a
build also has ``build.json`` (target model, launch date). Only the text columns are read (``id``, ``prompt``,
``community_feedback``, ``created_at``), so images are never decoded. A Hub dataset id is read through
:func:`echo_dataset.loading.read_config`.

A reference prompt set is a file: ``.txt`` (one prompt per line; blank lines skipped), ``.csv``/``.tsv`` or
``.parquet`` (the column named by ``column``, else the only column, else a column called ``prompt``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from echo_builder.errors import ConfigError, RecordError

__all__ = ["Benchmark", "Sample", "read_benchmark", "read_prompt_file"]

#: The configs ``analyze`` reads, in report order.
CONFIGS = ("text_to_image", "image_to_image", "analysis")
_COLUMNS = ("id", "prompt", "community_feedback", "created_at")
#: Largest reference file read, in bytes (a prompt set is kilobytes to a few megabytes).
MAX_PROMPT_FILE_BYTES = 512 * 1024 * 1024


@dataclass(frozen=True)
class Sample:
    """The text of one benchmark sample: id, config, prompt, feedback texts and post time (``None``: absent)."""

    sample_id: str
    config: str
    prompt: str
    feedback: tuple[str, ...]
    created_at: Any


@dataclass
class Benchmark:
    """The samples of every config present, the build's settings (``{}`` for a benchmark), and the rows that
    could not be read (``problems``: one line each, e.g. a row without a prompt)."""

    source: str
    samples: list[Sample] = field(default_factory=list)
    configs: list[str] = field(default_factory=list)
    build: dict[str, Any] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def read_benchmark(source: str | Path) -> Benchmark:
    """The samples of ``source``'s configs (see the module docstring).

    Raises:
        BenchmarkNotFoundError: no such folder, or no ECHO config in it (one line, naming what is there).
        UnimportedReleaseError: the authors' release as published (convert it with ``echo-bench import``).
    """
    from echo_dataset.loading import BenchmarkNotFoundError, check_not_release, read_config

    bench = Benchmark(str(source))
    root = Path(source)
    local = root.is_dir()
    if not local and root.exists():
        raise BenchmarkNotFoundError(f"{str(source)!r} is a file; give a build or benchmark folder")
    if local:
        present = [c for c in CONFIGS if any((root / c).glob("test-*.parquet"))]
        if not present:
            found = sorted(p.name for p in root.iterdir() if p.is_dir())
            raise BenchmarkNotFoundError(
                f"{str(source)!r} holds no benchmark config ({', '.join(CONFIGS)}); folders found: "
                f"{', '.join(found[:10]) or 'none'}; give a build folder (echo-bench build --out) or a benchmark"
            )
        try:
            data = json.loads((root / "build.json").read_text(encoding="utf-8"))
            bench.build = data if isinstance(data, dict) else {}
        except (OSError, ValueError):
            bench.build = {}
    else:
        present = list(CONFIGS)
    last_error = ""
    for config in present:
        if local:
            import pyarrow as pa
            import pyarrow.parquet as pq

            rows: list[dict[str, Any]] = []
            for file in sorted((root / config).glob("test-*.parquet")):
                try:
                    schema = pq.read_schema(file)
                    check_not_release(schema, source, config)
                    columns = [c for c in _COLUMNS if c in schema.names]
                    rows.extend(pq.read_table(file, columns=columns).to_pylist())
                except (OSError, pa.ArrowException) as exc:
                    bench.problems.append(
                        f"{file}: unreadable Parquet file ({type(exc).__name__}: {exc})"[:300]
                    )
        else:
            try:
                rows = read_config(source, config)
            except BenchmarkNotFoundError as exc:
                last_error = str(exc)
                continue
        bench.configs.append(config)
        seen: set[str] = set()
        for k, row in enumerate(rows):
            sample_id = _text(row.get("id")) or f"{config}-row-{k}"
            prompt = _text(row.get("prompt"))
            if prompt is None:
                bench.problems.append(f"{config} row {k} ({sample_id}): no prompt text; skipped")
                continue
            if sample_id in seen:
                bench.problems.append(
                    f"{config} row {k}: sample id {sample_id!r} is repeated; both rows kept"
                )
            seen.add(sample_id)
            raw = row.get("community_feedback")
            if isinstance(raw, str):  # one text instead of a list of {post_url, feedback}
                raw = [raw]
            elif raw is not None and not isinstance(raw, (list, tuple)):
                bench.problems.append(
                    f"{config} row {k} ({sample_id}): community_feedback is {type(raw).__name__}, not a list; ignored"
                )
                raw = None
            feedback = []
            for entry in raw or []:
                text = _text(entry.get("feedback")) if isinstance(entry, dict) else _text(entry)
                if text and text.strip():
                    feedback.append(text)
            bench.samples.append(Sample(sample_id, config, prompt, tuple(feedback), row.get("created_at")))
    if not bench.configs:
        raise BenchmarkNotFoundError(
            f"{str(source)!r}: no benchmark config could be read ({', '.join(CONFIGS)}) {last_error}".strip()
        )
    return bench


def read_prompt_file(path: str | Path, column: str | None = None) -> list[str]:
    """The prompts of a reference set (see the module docstring), blank prompts skipped.

    Raises:
        ConfigError: missing or unreadable file, not UTF-8 text, an unknown format, a missing or ambiguous
            column, or no prompt at all; one line naming the file.
    """
    file = Path(path)
    if file.is_dir():
        raise ConfigError(f"--compare {file}: is a folder; give a prompt file (.txt, .csv, .tsv or .parquet)")
    if not file.is_file():
        raise ConfigError(f"--compare {file}: no such file")
    if file.stat().st_size > MAX_PROMPT_FILE_BYTES:
        raise ConfigError(
            f"--compare {file}: larger than {MAX_PROMPT_FILE_BYTES // 2**20} MiB; is it a prompt set?"
        )
    suffix = file.suffix.lower()
    if suffix in ("", ".txt"):
        try:
            text = file.read_text(encoding="utf-8-sig")
        except UnicodeDecodeError as exc:
            raise ConfigError(
                f"--compare {file}: not UTF-8 text (byte {exc.start}); save it as UTF-8"
            ) from None
        except OSError as exc:
            raise ConfigError(f"--compare {file}: cannot be read ({exc.strerror or exc})") from None
        if "\x00" in text:
            raise ConfigError(f"--compare {file}: holds NUL bytes; a prompt set is text, one prompt per line")
        prompts = [line.strip() for line in text.splitlines()]
    elif suffix in (".csv", ".tsv", ".parquet"):
        import pandas as pd

        try:
            if suffix == ".parquet":
                frame = pd.read_parquet(file)
            else:
                frame = pd.read_csv(
                    file,
                    sep="\t" if suffix == ".tsv" else ",",
                    dtype=str,
                    keep_default_na=False,
                    encoding="utf-8",
                )
        except UnicodeDecodeError:
            raise ConfigError(f"--compare {file}: not UTF-8 text; save it as UTF-8") from None
        except Exception as exc:  # pandas/pyarrow parse errors have no common base
            first = (str(exc).strip().splitlines() or [""])[0][:200]
            raise ConfigError(
                f"--compare {file}: cannot be read as {suffix[1:]} ({type(exc).__name__}: {first})"
            ) from None
        names = [str(c) for c in frame.columns]
        # column names are listed only when they look like names: the header of a file that is no prompt set is
        # its first line, never printed
        from echo_dataset.safe_yaml import shown_key

        listed = ", ".join(n if shown_key(n) else f"column {k}" for k, n in enumerate(names[:20], 1))
        if column is not None:
            if column not in names:
                raise ConfigError(f"--compare {file}: no column {column!r} (columns: {listed})")
            chosen = column
        elif len(names) == 1:
            chosen = names[0]
        elif "prompt" in names:
            chosen = "prompt"
        else:
            raise ConfigError(
                f"--compare {file}: which column holds the prompts? give --compare-column (columns: {listed})"
            )
        prompts = [v.strip() if isinstance(v, str) else "" for v in frame[chosen].tolist()]
    else:
        raise ConfigError(
            f"--compare {file}: unknown format {suffix!r}; use .txt (one prompt a line), .csv, .tsv or .parquet"
        )
    prompts = [p for p in prompts if p]
    if not prompts:
        raise RecordError(f"--compare {file}: no prompt in it")
    return prompts
