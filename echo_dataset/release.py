"""Cells of the authors' ECHO release (``echo-bench/echo2025`` on the Hub), read leniently.

The release stores what echo-bench keeps as typed columns in plain strings (facts from the authors' loader and
download script; ``spec/ECHO.md``, "The authors' release"):

- ``input_images`` / ``output_images``: sequences of string tokens, each an X media id (``GnXyz...``, served as
  ``https://pbs.twimg.com/media/<ID>?format=jpg&name=orig``) or a full ``http(s)`` URL;
- ``community_feedback`` and the screenshot boxes (``input_bboxs`` as the download script reads it, ``bboxes`` as
  the card says): strings holding JSON, Python ``repr`` text, plain prose, or nothing.

This module turns such cells into values without ever raising on a cell: :func:`parse_cell` says which form it
found, so a caller counts every cell that was not JSON. :func:`release_schema_reason` tells a release-shaped table
from an echo-bench benchmark (whose image columns hold encoded images), so that ``judge``, ``metrics`` and
``generate`` stop with one line pointing to ``echo-bench import echo2025`` instead of failing on every sample.
It imports nothing heavy (``pyarrow`` only inside :func:`release_schema_reason`).
"""

from __future__ import annotations

import ast
import json
import re
from collections.abc import Mapping
from typing import Any

__all__ = [
    "BOX_COLUMNS",
    "MEDIA_URL_TEMPLATE",
    "RELEASE_ID",
    "boxes_per_image",
    "feedback_items",
    "lenient_bool",
    "parse_cell",
    "release_schema_reason",
    "token_list",
    "token_url",
]

#: The authors' release on the Hub (a variant ``echo-bench/echo2025-mit`` embeds the images).
RELEASE_ID = "echo-bench/echo2025"
#: URL of an X media id (``{media_id}`` is replaced), as the authors' download script builds it.
MEDIA_URL_TEMPLATE = "https://pbs.twimg.com/media/{media_id}?format=jpg&name=orig"
#: Names of the screenshot-box column: the download script reads ``input_bboxs``, the card says ``bboxes``.
BOX_COLUMNS = ("input_bboxs", "bboxes")
#: Longest cell given to ``ast.literal_eval`` (characters); longer text that is not JSON is kept as prose.
MAX_REPR_CHARS = 100_000

_MEDIA_ID = re.compile(r"[A-Za-z0-9_-]{4,64}")
_MEDIA_FILE = re.compile(r"([A-Za-z0-9_-]{4,64})\.(?:jpe?g|png|webp|gif)", re.IGNORECASE)
_EMPTY = frozenset({"", "none", "null", "nan", "n/a"})
_TEXT_KEYS = ("feedback", "text", "comment", "content", "reply", "body", "message")
_URL_KEYS = ("post_url", "url", "link", "tweet_url", "source", "source_url")
_TRUE = frozenset({"true", "1", "yes", "y", "t"})
_FALSE = frozenset({"false", "0", "no", "n", "f"})


def parse_cell(value: Any) -> tuple[Any, str]:
    """A release cell as a value, and the form it was in.

    Returns:
        ``(value, form)``: form ``"empty"`` (``None``, blank, ``None`` / ``null`` / ``nan`` text; value ``None``),
        ``"json"`` (parsed with :func:`json.loads`), ``"python"`` (Python literal text such as ``[{'a': 1}]``,
        parsed with :func:`ast.literal_eval`, never evaluated as code), ``"prose"`` (any other text; value is the
        stripped text) or ``"value"`` (not a string: returned as it is, e.g. a list from Parquet).
    Never raises.
    """
    if value is None:
        return None, "empty"
    if not isinstance(value, str):
        return value, "value"
    text = value.strip()
    if text.lower() in _EMPTY:
        return None, "empty"
    try:
        return json.loads(text), "json"
    except (ValueError, RecursionError):
        pass
    if len(text) <= MAX_REPR_CHARS:
        try:
            return ast.literal_eval(text), "python"
        except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
            pass
    return text, "prose"


def _as_list(value: Any) -> list[Any] | None:
    """A list/tuple/numpy array as a list; ``None`` for anything else."""
    if isinstance(value, (list, tuple)):
        return list(value)
    if hasattr(value, "tolist") and not isinstance(value, (str, bytes)):
        out = value.tolist()
        return out if isinstance(out, list) else None
    return None


def feedback_items(value: Any) -> list[dict[str, str]]:
    """``community_feedback`` in any form as ``[{"post_url", "feedback"}]`` (echo-bench's shape).

    Accepts echo-bench's list of dicts, the release's string cells (JSON, Python repr, plain prose: one item with
    an empty ``post_url``), a dict of one reply, a list of strings, or nothing (``[]``). Text keys read:
    ``feedback``, ``text``, ``comment``, ``content``, ``reply``, ``body``, ``message``; URL keys ``post_url``,
    ``url``, ``link``, ``tweet_url``, ``source``, ``source_url``. Never raises.
    """
    parsed, _ = parse_cell(value) if isinstance(value, str) else (value, "value")
    out: list[dict[str, str]] = []
    _collect(parsed, out, depth=0)
    return out


def _collect(value: Any, out: list[dict[str, str]], depth: int) -> None:
    if value is None or depth > 8:
        return
    if isinstance(value, str):
        if value.strip():
            out.append({"post_url": "", "feedback": value.strip()})
        return
    if isinstance(value, Mapping):
        url = next((value[k] for k in _URL_KEYS if isinstance(value.get(k), str) and value.get(k)), "")
        if any(k in value for k in _TEXT_KEYS):  # one reply record (its text may be empty: kept as it is)
            text = next((value[k] for k in _TEXT_KEYS if value.get(k) not in (None, "")), "")
            out.append({"post_url": str(url), "feedback": text if isinstance(text, str) else str(text)})
        else:  # e.g. {"<post url>": "text"} or {"1": "text"}: every value, keys as URLs where they are URLs
            for key, item in value.items():
                before = len(out)
                _collect(item, out, depth + 1)
                if str(key).startswith(("http://", "https://")):
                    for entry in out[before:]:
                        entry["post_url"] = entry["post_url"] or str(key)
        return
    items = _as_list(value)
    if items is not None:
        for item in items:
            _collect(item, out, depth + 1)
        return
    out.append({"post_url": "", "feedback": str(value)})


def token_url(token: Any, template: str = MEDIA_URL_TEMPLATE) -> str | None:
    """The URL of one image token: a full ``http(s)`` URL as it is, an X media id (optionally with an image
    extension, ``GnXyz.jpg``) as ``template`` with ``{media_id}`` filled in; ``None`` for anything else (blank,
    a path, text with spaces)."""
    if not isinstance(token, str):
        return None
    text = token.strip()
    if text.lower().startswith(("http://", "https://")) and not any(c.isspace() for c in text):
        return text
    match = _MEDIA_ID.fullmatch(text) or _MEDIA_FILE.fullmatch(text)
    if match is None:
        return None
    # replace, not str.format: other braces in a user's template are kept as they are
    return template.replace("{media_id}", match.group(1) if match.re is _MEDIA_FILE else text)


def token_list(value: Any) -> tuple[list[Any], str]:
    """An image column cell as a list of tokens (strings, or embedded ``{"bytes", "path"}`` images) and its form.

    A list cell is taken as it is; a string cell is parsed (:func:`parse_cell`): a list in JSON or Python repr, or
    a single token / URL. Form as in :func:`parse_cell`.
    """
    parsed, form = parse_cell(value)
    if parsed is None:
        return [], form
    if isinstance(parsed, (str, Mapping, bytes)):
        return [parsed], form
    items = _as_list(parsed)
    return ([v for v in items if v is not None] if items is not None else [str(parsed)]), form


def lenient_bool(value: Any) -> bool | None:
    """``True`` / ``False`` from a bool, a number or text (``true``/``1``/``yes``, ``false``/``0``/``no``);
    ``None`` when absent or unreadable (unknown, never guessed)."""
    if value is None:
        return None
    if isinstance(value, bool):
        return value
    if isinstance(value, (int, float)) and value == value:  # not NaN
        return bool(value)
    if hasattr(value, "item"):  # numpy scalars
        return lenient_bool(value.item())
    text = str(value).strip().lower()
    return True if text in _TRUE else False if text in _FALSE else None


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        if isinstance(value, str):
            try:
                value = float(value)
            except ValueError:
                return None
        else:
            return None
    return float(value) if value == value and abs(value) != float("inf") else None


def _box(value: Any) -> tuple[float, float, float, float] | None:
    """One box ``(x1, y1, x2, y2)`` from four numbers or a dict (``x1``..``y2``, or ``bbox`` / ``box``)."""
    if isinstance(value, Mapping):
        if all(k in value for k in ("x1", "y1", "x2", "y2")):
            value = [value[k] for k in ("x1", "y1", "x2", "y2")]
        else:
            inner = next((value[k] for k in ("bbox", "box", "bbox_2d", "coordinates") if k in value), None)
            return _box(inner) if inner is not None else None
    items = _as_list(value)
    if items is None or len(items) != 4:
        return None
    numbers = [_number(v) for v in items]
    if any(n is None for n in numbers):
        return None
    return numbers[0], numbers[1], numbers[2], numbers[3]  # type: ignore[return-value]


def _box_list(value: Any, dropped: list[str]) -> list[tuple[float, float, float, float]] | None:
    """One box or a list of boxes as a list; unreadable items of a list are left out (and noted in ``dropped``);
    ``None`` when nothing in it is a box."""
    if value is None:
        return []
    single = _box(value)
    if single is not None:
        return [single]
    items = _as_list(value)
    if items is None:
        return None
    boxes = [b for b in (_box(v) for v in items) if b is not None]
    if items and not boxes:
        return None
    dropped.extend(repr(v)[:80] for v in items if _box(v) is None)
    return boxes


def boxes_per_image(
    parsed: Any, dropped: list[str] | None = None
) -> dict[int, list[tuple[float, float, float, float]]] | None:
    """Screenshot boxes per input image (``k`` from 1, in column order) from a parsed box cell.

    Forms read: one box (four numbers or ``{x1, y1, x2, y2}``) or a list of boxes (all of input 1, the
    screenshot); a list of such lists (one per input image); a dict whose keys end in the image number
    (``input_1``, ``"2"``) or, failing that, whose values are taken in order. Boxes are ``[x1, y1, x2, y2]``
    pixels of the original image; a coordinate that is not a finite number makes its box unreadable: it is left
    out and noted in ``dropped`` (when given). ``{}`` for an empty cell; ``None`` when nothing in the cell can be
    read as a box.
    """
    notes: list[str] = [] if dropped is None else dropped
    if parsed is None:
        return {}
    start = len(notes)
    flat = _box_list(parsed, notes)
    if flat is not None and (flat or not _as_list(parsed)):
        return {1: flat} if flat else {}
    del notes[start:]  # not a flat list of boxes: read again as one group per image
    groups: list[tuple[int, Any]]
    if isinstance(parsed, Mapping):
        groups = []
        for position, (key, value) in enumerate(parsed.items(), start=1):
            match = re.search(r"(\d+)\s*$", str(key))
            groups.append((int(match.group(1)) if match else position, value))
    else:
        items = _as_list(parsed)
        if items is None:
            return None
        groups = list(enumerate(items, start=1))
    out: dict[int, list[tuple[float, float, float, float]]] = {}
    for k, value in groups:
        boxes = _box_list(value, notes)
        if boxes is None:
            notes.append(repr(value)[:80])
            continue
        if boxes:
            out.setdefault(k, []).extend(boxes)
    return out if out or not groups else None


def release_schema_reason(schema: Any) -> str | None:
    """Why a table (a ``pyarrow.Schema``) is in the authors' release schema rather than echo-bench's; ``None``
    when it is not.

    The sign is an image column (``input_images`` / ``output_images``) of strings or lists of strings: tokens (X
    media ids, URLs) that no command can read as images. Text feedback or a box column of the release's name alone
    do not count: ``judge``, ``metrics`` and ``generate`` do not read them, and the Space reads feedback in any
    form.
    """
    import pyarrow as pa

    for column in ("input_images", "output_images"):
        if column in schema.names:
            kind = schema.field(column).type
            nested = pa.types.is_list(kind) or pa.types.is_large_list(kind)
            inner = kind.value_type if nested else kind
            if pa.types.is_string(inner) or pa.types.is_large_string(inner):
                return f"column {column!r} holds text tokens (X media ids or URLs), not images"
    return None
