"""The About tab: what ECHO is, the metrics' declared directions and ranges, the dataset card, the citation."""

from __future__ import annotations

import math

import pandas as pd

from echo_builder.citation import ECHO_BIBTEX, ECHO_PAPER_URL

__all__ = ["ECHO_SUMMARY", "about_markdown", "card_body", "metric_specs_table"]

ECHO_SUMMARY = f"""\
**ECHO** (*Extracting Community Hatched Observations*; "Constantly Improving Image Models Need Constantly Improving
Benchmarks", ICLR 2026, [arXiv 2510.15021]({ECHO_PAPER_URL})) turns what people post about a newly released image
model into a benchmark. Posts found by keyword are rated for relevance, their reply threads are rebuilt, and
language and vision-language models extract each prompt, its input and output images and the community's
feedback. The samples are tiered into three configs: `text_to_image`, `image_to_image` and `analysis`.

Models are ranked by VLM judges: each judge rates every output 1-10 (or compares pairs in both orders), ratings
become pseudo-pairwise comparisons, several judges are combined by majority, and win rates come with 95% bootstrap
intervals over prompts, beside Bradley-Terry ratings and the count of judge failures (never scored, never dropped).
The community's recurring complaints became metrics: color shift (the "yellow cast"), face identity, structure
drift and text rendering; each returns NaN with a reason where it does not apply.

This Space shows the benchmark (Benchmark tab), a judged run (Leaderboard tab) and the metrics on your own image
pair (Metric playground). It is built with echo-bench, an open implementation of ECHO.
"""


def card_body(card: str | None) -> str:
    """The dataset card's Markdown without its YAML front matter (``---`` ... ``---``); ``""`` for no card."""
    if not card:
        return ""
    text = card.lstrip("\ufeff")
    if text.startswith("---"):
        lines = text.splitlines(keepends=True)
        for end in range(1, len(lines)):
            if lines[end].strip() == "---":
                return "".join(lines[end + 1 :]).lstrip("\n")
    return text


def metric_specs_table() -> pd.DataFrame:
    """One row per registered metric (built-ins, then plugins, in the metric registry's order): name,
    direction, range, unit, source and the pip extra it needs (empty for the core)."""
    from echo_builder.scoring.registry import metric_definitions

    def bound(x: float) -> str:
        return ("inf" if x > 0 else "-inf") if math.isinf(x) else f"{x:g}"

    return pd.DataFrame(
        [
            {
                "metric": spec.name,
                "better": "higher" if spec.higher_is_better else "lower",
                "range": f"[{bound(spec.low)}, {bound(spec.high)}]",
                "unit": spec.unit,
                "source": spec.source,
                "extra": definition.extra or "",
            }
            for definition in metric_definitions()
            for spec in (definition.spec,)
        ],
        columns=["metric", "better", "range", "unit", "source", "extra"],
    )


def about_markdown(card: str | None, source: str) -> tuple[str, str]:
    """The About tab's Markdown in two parts, shown around the metrics table.

    Returns:
        ``(intro, details)``: what ECHO is; then how the data was made (the dataset card of ``source`` without its
        YAML front matter and its own citation section) and the citation (:data:`echo_builder.citation.ECHO_BIBTEX`).
    """
    body = _without_section(card_body(card), "Citation")
    made = (
        f"## How this benchmark was made\n\nFrom the dataset card of `{source}`:\n\n{_demote_headings(body)}"
        if body
        else f"## How this benchmark was made\n\n`{source}` has no dataset card (README.md)."
    )
    citation = f"## Citation\n\nPaper: <{ECHO_PAPER_URL}>\n\n```bibtex\n{ECHO_BIBTEX.rstrip()}\n```\n"
    return f"## What ECHO is\n\n{ECHO_SUMMARY}", f"{made}\n\n{citation}"


def _without_section(markdown: str, title: str) -> str:
    """``markdown`` without the section headed ``title`` (any level), up to the next heading of that level or above."""
    out, skipping, level = [], False, 0
    fenced = False
    for line in markdown.splitlines():
        if line.lstrip().startswith("```"):
            fenced = not fenced
        heading = not fenced and line.startswith("#")
        depth = len(line) - len(line.lstrip("#")) if heading else 0
        if heading and line[depth:].strip() == title:
            skipping, level = True, depth
            continue
        if skipping and heading and depth <= level:
            skipping = False
        if not skipping:
            out.append(line)
    text = "\n".join(out).rstrip()
    return text + "\n" if text else ""


def _demote_headings(markdown: str) -> str:
    """Push the card's headings down two levels so they nest under this tab's own headings (outside code fences)."""
    out, fenced = [], False
    for line in markdown.splitlines():
        if line.lstrip().startswith("```"):
            fenced = not fenced
        if not fenced and line.startswith("#"):
            level = len(line) - len(line.lstrip("#"))
            line = "#" * min(level + 2, 6) + line[level:]
        out.append(line)
    return "\n".join(out)
