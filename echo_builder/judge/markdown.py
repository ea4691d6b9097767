"""Markdown table text shared by the judge's outputs (leaderboard, results card, validity card, per-task tables).

Its own module so the modules writing Markdown import it without importing one another.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Sequence
from typing import Any

__all__ = ["markdown_cell", "markdown_table"]

# characters with a meaning in Markdown (a table cell, emphasis, links, HTML, code)
_MARKDOWN_SPECIAL = frozenset("\\|*_`[]<>~&#!")


def markdown_cell(value: Any) -> str:
    """``value`` as text for one Markdown table cell: Markdown's special characters are backslash-escaped (``|`` would
    end the cell, ``<`` open HTML) and control characters (a line break would end the row) are shown as ``\\xNN``."""
    out = []
    for ch in str(value):
        if unicodedata.category(ch) in ("Cc", "Cf", "Zl", "Zp"):
            out.append("\\\\" + ch.encode("unicode_escape").decode("ascii").lstrip("\\"))
        elif ch in _MARKDOWN_SPECIAL:
            out.append("\\" + ch)
        else:
            out.append(ch)
    return "".join(out)


def markdown_table(header: Sequence[str], rows: Sequence[Sequence[str]], right: Sequence[bool]) -> list[str]:
    """Lines of a GitHub-flavoured Markdown table (cells already escaped); ``right``: right-align that column."""
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---:" if r else ":---" for r in right) + "|"]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return lines
