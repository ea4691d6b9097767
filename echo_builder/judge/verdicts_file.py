"""The judge run's files, read and written by both the judge run and the leaderboard.

:mod:`echo_builder.judge.run` writes a run folder and :mod:`echo_builder.judge.leaderboard` ranks it; both need the
file names, the Parquet reader and writer of :class:`~echo_builder.records.Verdict` rows, and the models a pairwise
``missing_output`` verdict names. They live here, so neither of the two imports the other.

Files of a run folder:

- :data:`VERDICTS_FILE` (``verdicts.parquet``): one :class:`~echo_builder.records.Verdict` row per judgment, the
  columns in ``Verdict.model_fields`` order;
- :data:`RUN_FILE` (``run.json``): what was judged and how (see :func:`echo_builder.judge.run.run_judging`).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from echo_builder.errors import ConfigError
from echo_builder.judge.judging import MISSING_PREFIX
from echo_builder.records import Verdict
from echo_dataset.safe_io import open_atomic

__all__ = [
    "MAX_RUN_FILE_BYTES",
    "RUN_FILE",
    "VERDICTS_FILE",
    "missing_models",
    "read_run_meta",
    "read_verdicts",
    "write_verdicts",
]

#: The verdicts table of a run folder.
VERDICTS_FILE = "verdicts.parquet"
#: The run metadata of a run folder.
RUN_FILE = "run.json"


def write_verdicts(verdicts: Sequence[Verdict], path: str | Path, *, root: str | Path | None = None) -> None:
    """Write verdicts as Parquet atomically (temp file, then rename), so a crash never leaves half a file.

    ``root`` is the folder the file must stay in (default: the file's own folder): no symbolic link below it is
    followed (see :mod:`echo_dataset.safe_io`).
    """
    import pandas as pd

    path = Path(path)
    frame = pd.DataFrame([v.model_dump(mode="json") for v in verdicts], columns=list(Verdict.model_fields))
    with open_atomic(path.parent if root is None else root, path) as f:
        frame.to_parquet(f, index=False)


def read_verdicts(path: str | Path) -> list[Verdict]:
    """Verdicts from a Parquet file written by :func:`write_verdicts` (or a run folder holding one).

    Raises:
        ConfigError: there is no such file.
    """
    import pandas as pd

    path = Path(path)
    if path.is_dir():
        path = path / VERDICTS_FILE
    if not path.is_file():
        raise ConfigError(f"no verdicts at {str(path)!r}; run `echo-bench judge ... --out RUN` first")
    frame = pd.read_parquet(path)
    rows = frame.astype(object).where(frame.notna(), None).to_dict(orient="records")
    return [Verdict.model_validate(row) for row in rows]


def missing_models(verdict: Verdict) -> list[str]:
    """Models named in a pairwise ``missing_output`` verdict's error (written by the judge as JSON); ``[]`` for
    any other verdict."""
    if (
        verdict.status != "missing_output"
        or not verdict.error
        or not verdict.error.startswith(MISSING_PREFIX)
    ):
        return []
    return list(json.loads(verdict.error[len(MISSING_PREFIX) :].split("\n", 1)[0]))


#: Largest ``run.json`` read for a results dataset (bytes); a judge run writes a few kilobytes.
MAX_RUN_FILE_BYTES = 8 * 2**20


def read_run_meta(run_dir: str | Path) -> dict[str, Any] | None:
    """The judge run's ``run.json`` as a dict, or ``None`` when the run folder has none.

    Raises:
        ConfigError: the file is a link, not a regular file, larger than :data:`MAX_RUN_FILE_BYTES`, not UTF-8, or
            not a JSON object; the message names the file.
    """
    from echo_builder.input_files import read_small_file

    path = Path(run_dir) / RUN_FILE
    if not path.exists() and not path.is_symlink():
        return None
    if path.is_symlink():
        raise ConfigError(
            f"{path}: is a symbolic link; a run's metadata is read only from the run folder itself"
        )
    raw = read_small_file(path, MAX_RUN_FILE_BYTES, str(path))
    try:
        meta = json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError:
        raise ConfigError(f"{path}: not UTF-8 text") from None
    except ValueError as exc:
        raise ConfigError(f"{path}: not valid JSON ({exc})") from None
    if not isinstance(meta, dict):
        raise ConfigError(f"{path}: expected a JSON object, got {type(meta).__name__}")
    return meta
