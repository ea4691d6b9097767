"""The three tables the statistics work on, their columns, and the checks every public function runs first.

Ratings (single-answer judging, one row per sample x model x judge):
    ``sample_id`` (str), ``model`` (str), ``judge`` (str), ``rating`` (float, NaN when absent), ``status``
    (str, one of :data:`RATING_STATUSES`). ``"missing_output"`` means the *model* produced nothing for the
    sample; ``"parse_failure"``, ``"refusal"`` and ``"error"`` mean the *judge* failed (ECHO Flow 2: a failure is
    recorded, never turned into a score).

Comparisons (one row per sample x judge x unordered model pair):
    ``sample_id`` (str), ``judge`` (str), ``model_a`` (str), ``model_b`` (str), ``outcome`` (float: 1.0 =
    ``model_a`` wins, 0.0 = ``model_b`` wins, 0.5 = tie). Canonical form has ``model_a < model_b``
    lexicographically, so reordering models, judges or rows cannot change a result. Optional ``tie_lean``
    (float: for a tie, 1.0 = the judge leaned to ``model_a``, 0.0 = to ``model_b``, NaN = no lean) feeds
    OpenING's forced-decision treatment (:mod:`echo_builder.stats.ties`).

Votes (human arena battles, Chatbot Arena / GenAI-Arena export):
    ``model_a`` (str), ``model_b`` (str), ``winner`` (one of :data:`WINNER_LABELS`; both tie labels are ties),
    optional ``tstamp`` (float, Unix seconds). :func:`echo_builder.stats.votes.votes_to_comparisons` maps them to
    comparisons.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np
import pandas as pd

from echo_builder.errors import RecordError

__all__ = [
    "COMPARISON_COLUMNS",
    "JUDGE_FAILURE_STATUSES",
    "RATING_COLUMNS",
    "RATING_STATUSES",
    "TIE_LABELS",
    "TIE_LEAN_COLUMN",
    "VOTE_COLUMNS",
    "WINNER_LABELS",
    "canonicalize_comparisons",
    "encode_labels",
    "require_columns",
]

RATING_COLUMNS = ("sample_id", "model", "judge", "rating", "status")
COMPARISON_COLUMNS = ("sample_id", "judge", "model_a", "model_b", "outcome")
VOTE_COLUMNS = ("model_a", "model_b", "winner")
JUDGE_FAILURE_STATUSES = frozenset({"parse_failure", "refusal", "error"})
RATING_STATUSES = frozenset({"ok", "missing_output"}) | JUDGE_FAILURE_STATUSES
TIE_LABELS = frozenset({"tie", "tie (bothbad)"})
WINNER_LABELS = frozenset({"model_a", "model_b"}) | TIE_LABELS
TIE_LEAN_COLUMN = "tie_lean"


def encode_labels(*columns: Iterable[object]) -> tuple[np.ndarray, list[np.ndarray]]:
    """The sorted distinct labels of several columns together, and each column as indices into them.

    Labels stay Python strings in an object array: numpy's fixed-width ``str`` dtype drops trailing NUL
    characters, which would merge a model called ``"\\x00"`` into ``""`` (or ``"a\\x00"`` into ``"a"``).

    Args:
        *columns: sequences of labels (converted with ``str``), e.g. a table's ``model_a`` and ``model_b``.
    Returns:
        ``(labels, codes)``: ``labels`` is a 1-D object array of the distinct labels in Python's string order;
        ``codes[i]`` is an int64 array, ``labels[codes[i]]`` equals column ``i``.
    """
    values = [np.fromiter((str(v) for v in col), dtype=object) for col in columns]
    labels = np.array(sorted(set().union(*(set(v.tolist()) for v in values))), dtype=object)
    index = pd.Index(labels)
    return labels, [index.get_indexer(v).astype(np.int64) for v in values]


def require_columns(df: pd.DataFrame, columns: Iterable[str], what: str) -> None:
    """Raise :class:`RecordError` naming every required column that ``df`` lacks.

    Args:
        df: the table to check.
        columns: the required column names.
        what: the table's name in the message (``"ratings"``, ``"comparisons"``, ``"votes"``).

    Raises:
        RecordError: ``df`` is not a DataFrame or lacks a column.
    """
    if not isinstance(df, pd.DataFrame):
        raise RecordError(f"{what} must be a pandas DataFrame, got {type(df).__name__}")
    missing = [c for c in columns if c not in df.columns]
    if missing:
        raise RecordError(
            f"{what} table lacks required column(s) {missing}; expected at least {list(columns)}, "
            f"found {list(df.columns)}"
        )


def canonicalize_comparisons(comparisons: pd.DataFrame) -> pd.DataFrame:
    """Return comparisons in canonical form: ``model_a < model_b``, validated outcomes, sorted rows.

    A row with ``model_a > model_b`` is swapped and its outcome flipped (``1 - outcome``), so it says the same
    thing. Rows are sorted by (sample_id, judge, model_a, model_b) and the index reset, so any permutation of the
    input rows gives an identical table. Extra columns are kept.

    Args:
        comparisons: a Comparisons table (see the module docstring); ``sample_id`` and ``judge`` are cast to str.

    Returns:
        A new DataFrame; ``outcome`` is float64 in {0.0, 0.5, 1.0}.

    Raises:
        RecordError: a required column is missing, an outcome is not 0, 0.5 or 1, or a model is compared with
            itself.
    """
    require_columns(comparisons, COMPARISON_COLUMNS, "comparisons")
    df = comparisons.copy()
    for col in ("sample_id", "judge", "model_a", "model_b"):
        df[col] = df[col].astype(str)
    outcome = pd.to_numeric(df["outcome"], errors="coerce").to_numpy(dtype=float)
    bad = ~np.isin(outcome, (0.0, 0.5, 1.0))
    if bad.any():
        row = int(np.flatnonzero(bad)[0])
        raise RecordError(
            f"comparisons: outcome must be 1.0 (model_a wins), 0.0 (model_b wins) or 0.5 (tie); "
            f"row {row} has {comparisons['outcome'].iloc[row]!r} ({int(bad.sum())} bad rows)"
        )
    a, b = df["model_a"].to_numpy(dtype=object), df["model_b"].to_numpy(dtype=object)
    same = a == b
    if same.any():
        row = int(np.flatnonzero(same)[0])
        raise RecordError(f"comparisons: row {row} compares model {a[row]!r} with itself")
    swap = a > b
    df["model_a"] = np.where(swap, b, a)
    df["model_b"] = np.where(swap, a, b)
    df["outcome"] = np.where(swap, 1.0 - outcome, outcome)
    if TIE_LEAN_COLUMN in df.columns:  # the lean names a side, so it flips with the sides
        lean = pd.to_numeric(df[TIE_LEAN_COLUMN], errors="coerce").to_numpy(dtype=float)
        df[TIE_LEAN_COLUMN] = np.where(swap, 1.0 - lean, lean)
    for col in ("model_a", "model_b"):
        df[col] = df[col].astype(str)
    return df.sort_values(list(COMPARISON_COLUMNS), kind="stable").reset_index(drop=True)
