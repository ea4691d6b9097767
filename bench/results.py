"""Appending a benchmark's Markdown table to bench/RESULTS.md, with the date and the machine."""

from __future__ import annotations

import datetime as dt
import os
import platform
import textwrap
from collections.abc import Sequence
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "RESULTS.md"


def machine(*extra: str) -> str:
    """'N cores, arch, Python x.y.z' plus any library versions given."""
    return ", ".join(
        [f"{os.cpu_count()} cores", platform.machine(), f"Python {platform.python_version()}", *extra]
    )


def append_section(heading: str, intro: str, lines: Sequence[str], path: Path = RESULTS) -> None:
    """Append ``heading, <today>``, the wrapped ``intro`` and the table ``lines`` to ``path``."""
    text = path.read_text(encoding="utf-8") if path.exists() else "# Benchmark results\n"
    section = f"\n{heading}, {dt.date.today().isoformat()}\n\n" + textwrap.fill(intro, width=110) + "\n\n"
    path.write_text(text.rstrip("\n") + "\n" + section + "\n".join(lines) + "\n", encoding="utf-8")
    print(f"appended to {path}")
