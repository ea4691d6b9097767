"""The Analysis tab: an ``echo-bench analyze`` folder's report, plots and failure table (shown when the Space is
started with ``ECHO_ANALYSIS=<folder>``).

The report is ``analysis.md`` as written (its numbers are ``analysis.json``'s), without its plot links; the plots are
read into memory (no file needs to be served from outside the working directory).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

__all__ = ["add_analysis_tab", "analysis_view"]

FAILURE_COLUMNS = ("category", "kind", "texts", "samples", "metric")


def analysis_view(folder: str | Path) -> tuple[str, list[tuple[Any, str]], Any]:
    """(report Markdown without the plot links, [(PIL image, caption)], failure-category table) of a folder.

    Raises:
        FileNotFoundError: the folder holds no ``analysis.json`` / ``analysis.md`` (the message names it).
    """
    import pandas as pd
    from PIL import Image

    root = Path(folder)
    for name in ("analysis.json", "analysis.md"):
        if not (root / name).is_file():
            raise FileNotFoundError(f"{root}: no {name}; give the folder of echo-bench analyze --out")
    doc = json.loads((root / "analysis.json").read_text(encoding="utf-8"))
    markdown = (root / "analysis.md").read_text(encoding="utf-8")
    report = "\n".join(line for line in markdown.splitlines() if not line.startswith("!["))
    plots = []
    for name, relative in (doc.get("plots") or {}).items():
        path = root / str(relative)
        inside = path.resolve().is_relative_to(root.resolve() / "plots")
        if inside and path.is_file() and not path.is_symlink():  # only the analysis' own plots
            with Image.open(path) as image:
                plots.append((image.convert("RGB"), name))
    rows = [
        (r["category"], r["kind"], r["items"], r["samples"], r["metric"] or "no metric yet")
        for r in doc["failures"]["categories"]
    ]
    return report, plots, pd.DataFrame(rows, columns=list(FAILURE_COLUMNS))


def add_analysis_tab(folder: str | None) -> bool:
    """Add the Analysis tab (inside a ``gr.Tabs`` block) when ``folder`` names an analysis; returns whether it did."""
    if not folder:
        return False
    import gradio as gr

    report, plots, table = analysis_view(folder)
    with gr.Tab("Analysis", id="analysis"):
        gr.Gallery(
            value=plots,
            label="Failures, tasks, diversity and activity",
            columns=2,
            elem_id="echo-analysis-plots",
        )
        gr.Dataframe(table, label="Failure categories and the metric that measures each", interactive=False)
        gr.Markdown(report, elem_id="echo-analysis-report")
    return True
