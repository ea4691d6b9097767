"""Human pairwise votes (Chatbot Arena / GenAI-Arena battles): loading, validation and conversion to comparisons.

A vote file is JSON (a list of objects, as GenAI-Arena's ``clean_battle_*.json``), JSON Lines or CSV, with at
least ``model_a``, ``model_b`` and ``winner`` (``model_a``, ``model_b``, ``tie`` or ``tie (bothbad)``; both tie
labels are ties), optionally ``tstamp`` (Unix seconds). Errors name the file and the record or line.
"""

from __future__ import annotations

import csv
import warnings
from pathlib import Path
from typing import Any, Literal

import numpy as np
import pandas as pd

from echo_builder.errors import ConfigError, RecordError
from echo_builder.stats.schema import (
    COMPARISON_COLUMNS,
    VOTE_COLUMNS,
    WINNER_LABELS,
    canonicalize_comparisons,
    require_columns,
)

__all__ = ["as_comparisons", "load_votes", "votes_to_comparisons"]


def _read_records(path: Path) -> tuple[list[dict[str, Any]], list[str]]:
    """Records and, for each, where it sits in the file (``record 3`` / ``line 5``) for error messages."""
    from echo_builder.input_files import parse_json, read_text
    from echo_dataset.safe_yaml import shown_keys

    suffix = path.suffix.lower()
    # a regular file only, UTF-8 (a byte-order mark, as Excel's CSV export writes, is not part of a name)
    text = read_text(path, str(path))
    if not text.strip():
        raise RecordError(f"{path}: the file is empty; expected pairwise votes")
    if suffix == ".json":
        try:
            data = parse_json(text, str(path))
        except ConfigError as exc:
            raise RecordError(str(exc)) from None
        if not isinstance(data, list):
            raise RecordError(f"{path}: expected a JSON list of vote objects, found {type(data).__name__}")
        return data, [f"record {i + 1}" for i in range(len(data))]
    if suffix in (".jsonl", ".ndjson"):
        records, where = [], []
        for lineno, line in enumerate(text.splitlines(), start=1):
            if not line.strip():
                continue
            try:
                records.append(parse_json(line, f"{path}: line {lineno}"))
            except ConfigError as exc:
                detail = str(exc).split(": not valid JSON", 1)[-1].strip(" :")
                raise RecordError(f"{path}: line {lineno} is not valid JSON {detail}".rstrip()) from None
            where.append(f"line {lineno}")
        return records, where
    if suffix == ".csv":
        reader = csv.DictReader(text.splitlines(keepends=True))
        missing = [c for c in VOTE_COLUMNS if c not in (reader.fieldnames or [])]
        if missing:
            raise RecordError(
                f"{path}: header (line 1) lacks column(s) {missing}; expected {list(VOTE_COLUMNS)}, "
                f"found {shown_keys(reader.fieldnames)}"  # names only: never a line of a file that is no votes
            )
        records, where = [], []
        for row in reader:
            records.append(row)
            where.append(f"line {reader.line_num}")
        return records, where
    raise ConfigError(f"{path}: unknown vote file type {suffix!r}; use .json, .jsonl/.ndjson or .csv")


def load_votes(path: str | Path) -> pd.DataFrame:
    """Read and validate pairwise human votes from a JSON, JSON Lines or CSV file (Chatbot Arena battle format).

    Args:
        path: ``.json`` (a list of objects), ``.jsonl``/``.ndjson`` (one object per line) or ``.csv`` (header
            row). Each vote needs ``model_a`` and ``model_b`` (non-empty strings; a self-battle is kept here
            and handled by :func:`votes_to_comparisons`) and ``winner`` in ``model_a``, ``model_b``, ``tie``,
            ``tie (bothbad)``; ``tstamp``, if present, must be a number.

    Returns:
        A Votes DataFrame: ``model_a``, ``model_b``, ``winner`` (str), ``tstamp`` (float, when present), then any
        other fields in file order; index 0..n-1 in file order.

    Raises:
        RecordError: empty file, invalid JSON, a record that is not an object, a missing field, an empty model
            name, an unknown winner label or a non-numeric ``tstamp``; the message names the file and the record
            (JSON: ``record N``, 1-based) or line (JSONL/CSV: ``line N``).
        ConfigError: unknown file extension.
        FileNotFoundError: ``path`` does not exist.
    """
    from echo_dataset.safe_yaml import shown_keys

    path = Path(path)
    records, where = _read_records(path)
    if not records:
        raise RecordError(f"{path}: no votes found")
    for rec, loc in zip(records, where, strict=True):
        if not isinstance(rec, dict):
            raise RecordError(
                f"{path}: {loc} is a {type(rec).__name__}, expected an object with {list(VOTE_COLUMNS)}"
            )
        missing = [c for c in VOTE_COLUMNS if c not in rec]
        if missing:
            raise RecordError(f"{path}: {loc} lacks field(s) {missing}; found {shown_keys(rec)}")
        for col in ("model_a", "model_b"):
            if not isinstance(rec[col], str) or not rec[col].strip():
                raise RecordError(f"{path}: {loc}: {col} must be a non-empty string, found {rec[col]!r}")
        if not isinstance(rec["winner"], str) or rec["winner"] not in WINNER_LABELS:
            raise RecordError(
                f"{path}: {loc}: unknown winner label {rec['winner']!r}; expected one of {sorted(WINNER_LABELS)}"
            )
    df = pd.DataFrame.from_records(records)
    if "tstamp" in df.columns:
        ts = pd.to_numeric(df["tstamp"], errors="coerce")
        bad = ts.isna().to_numpy()
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            raise RecordError(
                f"{path}: {where[i]}: tstamp must be a number, found {records[i].get('tstamp')!r}"
            )
        df["tstamp"] = ts.astype(float)
    front = [c for c in (*VOTE_COLUMNS, "tstamp") if c in df.columns]
    return df[front + [c for c in df.columns if c not in front]].reset_index(drop=True)


def votes_to_comparisons(
    votes: pd.DataFrame,
    *,
    id_column: str | None = None,
    judge: str = "human",
    self_battles: Literal["drop", "error"] = "drop",
) -> pd.DataFrame:
    """Map human votes to canonical comparisons (``model_a < model_b``; 1.0 / 0.0 / 0.5 outcomes).

    Both of Chatbot Arena's tie labels (``tie``, ``tie (bothbad)``) become 0.5, as in its Elo notebook.

    Args:
        votes: a Votes table (``model_a``, ``model_b``, ``winner``; e.g. from :func:`load_votes`).
        id_column: column holding each vote's sample (prompt) id; by default the row index, so every vote is its
            own sample and the bootstrap resamples votes, as Chatbot Arena does.
        judge: value of the ``judge`` column (the voters' own ``judge`` field, if any, is not used).
        self_battles: a vote of a model against itself says nothing about ranking and has no canonical form:
            ``"drop"`` (default) removes it with a ``UserWarning`` giving the count; ``"error"`` raises.

    Returns:
        A canonical Comparisons table; ``tstamp`` is kept when present.

    Raises:
        RecordError: a required column is missing, a winner label is unknown, sample ids repeat when no
            ``id_column`` is given, or a self-battle occurs with ``self_battles="error"``.
        ConfigError: ``self_battles`` is not ``"drop"`` or ``"error"``.
    """
    if self_battles not in ("drop", "error"):
        raise ConfigError(f"self_battles must be 'drop' or 'error', got {self_battles!r}")
    require_columns(votes, VOTE_COLUMNS if id_column is None else (*VOTE_COLUMNS, id_column), "votes")
    winner = votes["winner"].astype(str).to_numpy()
    bad = ~np.isin(winner, sorted(WINNER_LABELS))
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise RecordError(
            f"votes: row {votes.index[i]!r} has unknown winner label {winner[i]!r}; "
            f"expected one of {sorted(WINNER_LABELS)}"
        )
    sample_id = (votes.index if id_column is None else votes[id_column]).astype(str)
    if id_column is None and sample_id.duplicated().any():
        raise RecordError(
            "votes: the row index repeats; reset it or pass id_column so each vote has a sample id"
        )
    outcome = np.where(winner == "model_a", 1.0, np.where(winner == "model_b", 0.0, 0.5))  # both tie labels
    out = pd.DataFrame(
        {
            "sample_id": np.asarray(sample_id),
            "judge": judge,
            "model_a": votes["model_a"].astype(str).to_numpy(),
            "model_b": votes["model_b"].astype(str).to_numpy(),
            "outcome": outcome,
        }
    )
    if "tstamp" in votes.columns:
        out["tstamp"] = pd.to_numeric(votes["tstamp"], errors="coerce").to_numpy(dtype=float)
    same = (out["model_a"] == out["model_b"]).to_numpy()
    if same.any():
        if self_battles == "error":
            i = int(np.flatnonzero(same)[0])
            raise RecordError(f"votes: row {votes.index[i]!r} is a self-battle of {out['model_a'].iloc[i]!r}")
        warnings.warn(f"dropped {int(same.sum())} self-battle vote(s) (a model against itself)", stacklevel=2)
        out = out[~same]
    return canonicalize_comparisons(out)


def as_comparisons(data: pd.DataFrame) -> pd.DataFrame:
    """``data`` itself if it is a Comparisons table, else :func:`votes_to_comparisons` of a Votes table.

    Raises:
        RecordError: ``data`` has neither the comparison nor the vote columns.
    """
    if isinstance(data, pd.DataFrame) and all(c in data.columns for c in COMPARISON_COLUMNS):
        return data
    if isinstance(data, pd.DataFrame) and all(c in data.columns for c in VOTE_COLUMNS):
        return votes_to_comparisons(data)
    require_columns(data, COMPARISON_COLUMNS, "comparisons (or votes with model_a, model_b, winner)")
    return data
