"""Shared checks of the analysis tests: numbers in analysis.md against analysis.json, independent counts."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

_NUMBER = re.compile(r"(?<![\w.:/-])-?\d+(?:\.\d+)?(?![\w.:/-]|\.\d)")


def json_numbers(value: Any) -> set[float]:
    """Every number anywhere in a JSON document (bools excluded)."""
    out: set[float] = set()
    if isinstance(value, bool) or value is None:
        return out
    if isinstance(value, (int, float)):
        out.add(float(value))
    elif isinstance(value, dict):
        for v in value.values():
            out |= json_numbers(v)
    elif isinstance(value, list):
        for v in value:
            out |= json_numbers(v)
    return out


def md_numbers(markdown: str) -> list[tuple[str, float]]:
    """The numbers of analysis.md's tables and summary sentences (headings, quotes and paths left out)."""
    found = []
    for line in markdown.splitlines():
        if line.startswith(("#", "- ", "![", "Input ")) or set(line) <= set("|-: "):
            continue
        for cell in line.split("|"):
            if cell.strip().count("-") == 2 and re.fullmatch(r"\s*\d{4}-\d{2}-\d{2}\s*", cell):
                continue  # a date
            for match in _NUMBER.finditer(cell):
                found.append((line, float(match[0])))
    return found


def assert_md_matches_json(out: Path, doc: dict[str, Any]) -> None:
    """Every number printed in analysis.md is a number of analysis.json, written the same way."""
    markdown = (out / "analysis.md").read_text(encoding="utf-8")
    numbers = json_numbers(doc)
    found = md_numbers(markdown)
    assert found, "no number found in analysis.md"
    missing = [(line, n) for line, n in found if n not in numbers]
    assert not missing, missing[:5]


def independent_first_bigrams(prompts: list[str]) -> int:
    """Unique first bigrams counted here, without the package: lowercase, split on non-alphanumerics."""
    starts = set()
    for prompt in prompts:
        tokens = [t for t in re.split(r"[\W_]+", prompt.lower()) if t]
        if len(tokens) >= 2:
            starts.add((tokens[0], tokens[1]))
    return len(starts)


def md_row(markdown: str, first_cell: str) -> list[str]:
    """The cells of the first table row of analysis.md whose first cell is ``first_cell``."""
    for line in markdown.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if line.startswith("|") and cells and cells[0] == first_cell:
            return cells
    raise AssertionError(f"no row {first_cell!r} in analysis.md")
