"""Per-sample scores from a CSV file, in the layout of ECHO's released judge outputs: ``question_id,model,score``.

``echo-bench leaderboard --ratings FILE.csv`` ranks such a file exactly as a single-answer judge run, so ratings
produced elsewhere (the authors' scripts, another harness) can be put beside echo-bench's numbers.

Columns (header row required, UTF-8, a BOM is accepted): the sample is ``question_id`` (or ``sample_id``), the
model ``model``, the score ``score`` (or ``rating``); an optional ``judge`` column names the judge of each row
(several judges are combined by majority vote as in a run; without it every row is judge ``ratings-file``).
Extra columns are ignored.

Nothing is dropped silently:

- a score cell that is empty, ``nan`` or not a finite number is a judge **failure** of that row (status
  ``error``, the cell's text in ``error``): the judge abstains on that output's comparisons and the failure is
  counted beside the model, as for a run;
- a (sample, model) that has a row for some judge but not for another, or a model that has no row for a sample
  that other models have, is a **missing output** (it loses, or ``--missing skip`` drops the comparison);
- a repeated (sample, model, judge) row, a missing column or an unreadable file is an error naming the file and
  the row.
"""

from __future__ import annotations

import csv
import io
import math
from pathlib import Path

from echo_builder.errors import ConfigError
from echo_builder.records import Verdict

__all__ = ["DEFAULT_JUDGE", "read_ratings_csv"]

DEFAULT_JUDGE = "ratings-file"
_SAMPLE = ("question_id", "sample_id")
_SCORE = ("score", "rating")
#: the largest file read (bytes); ECHO's largest released config has 848 samples x 8 models
MAX_BYTES = 256 * 2**20


def _column(header: list[str], names: tuple[str, ...], path: str) -> str:
    from echo_dataset.safe_yaml import shown_keys

    for name in names:
        if name in header:
            return name
    # the header's names only when they look like names: a file that is no ratings file never has a line printed
    raise ConfigError(
        f"ratings {path}: no {' or '.join(repr(n) for n in names)} column; the header has {shown_keys(header)}; "
        "expected question_id,model,score"
    )


def read_ratings_csv(path: str | Path) -> list[Verdict]:
    """Single-answer :class:`~echo_builder.records.Verdict` rows from a ``question_id,model,score`` CSV file.

    Returns one verdict per (sample, model, judge) of the full grid: ``ok`` with ``rating`` = the score (any
    finite number; higher is better, only the order matters), ``error`` for an unusable score, and
    ``missing_output`` for a grid cell without a row. Sorted by sample, model and judge.

    Raises:
        ConfigError: the file cannot be read, is not UTF-8, is larger than :data:`MAX_BYTES`, has no header or
            lacks a column, holds no row, or repeats a (sample, model, judge) (the message names the row).
    """
    from echo_builder.judge.prompts import read_small_file

    where = str(path)
    raw = read_small_file(path, MAX_BYTES, f"ratings {where}")
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise ConfigError(f"ratings {where}: not UTF-8 text") from None
    reader = csv.DictReader(io.StringIO(text, newline=""))
    try:
        header = [h.strip() for h in (reader.fieldnames or [])]
        if not header:
            raise ConfigError(
                f"ratings {where}: the file is empty; expected a header question_id,model,score"
            )
        reader.fieldnames = header
        return _verdicts(reader, header, where)
    except csv.Error as exc:
        raise ConfigError(
            f"ratings {where}: near line {reader.line_num + 1}: not readable as CSV ({exc})"
        ) from None


def _verdicts(reader: csv.DictReader, header: list[str], where: str) -> list[Verdict]:
    sample_col, score_col = _column(header, _SAMPLE, where), _column(header, _SCORE, where)
    _column(header, ("model",), where)
    has_judge = "judge" in header
    cells: dict[tuple[str, str, str], Verdict] = {}
    for row in reader:
        line = reader.line_num  # the row's last line (a quoted field may span several)
        sample = (row.get(sample_col) or "").strip()
        model = (row.get("model") or "").strip()
        judge = (row.get("judge") or "").strip() if has_judge else DEFAULT_JUDGE
        if not sample or not model or not judge:
            empty = "question_id" if not sample else "model" if not model else "judge"
            raise ConfigError(f"ratings {where}: line {line}: empty {empty}")
        key = (sample, model, judge)
        if key in cells:
            raise ConfigError(
                f"ratings {where}: line {line}: a second row for question {sample!r}, model {model!r}"
                + (f", judge {judge!r}" if has_judge else "")
            )
        raw = (row.get(score_col) or "").strip()
        try:
            score = float(raw)
        except ValueError:
            score = math.nan
        if math.isfinite(score):
            cells[key] = Verdict(sample_id=sample, judge=judge, model=model, rating=score, raw_text=raw)
        else:
            cells[key] = Verdict(
                sample_id=sample,
                judge=judge,
                model=model,
                status="error",
                raw_text=raw,
                error=f"line {line}: score {raw!r} is not a finite number",
            )
    if not cells:
        raise ConfigError(f"ratings {where}: no rows after the header")
    samples = sorted({k[0] for k in cells})
    models = sorted({k[1] for k in cells})
    judges = sorted({k[2] for k in cells})
    out = []
    for sample in samples:
        for model in models:
            for judge in judges:
                verdict = cells.get((sample, model, judge))
                if verdict is None:
                    verdict = Verdict(
                        sample_id=sample,
                        judge=judge,
                        model=model,
                        status="missing_output",
                        error=f"no row for question {sample!r} and model {model!r} in {where}",
                    )
                out.append(verdict)
    return out
