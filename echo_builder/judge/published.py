"""ECHO's published win rates, to show beside a user's own run on the same config.

Source: "Constantly Improving Image Models Need Constantly Improving Benchmarks" (ECHO), ICLR 2026,
arXiv 2510.15021, the win-rate table of its evaluation (image-to-image and text-to-image splits of
``echo-bench/echo2025``; the authors' judge protocol, see ``docs/reproducing-echo.md``). These are the paper's
numbers as printed (two decimals), not recomputed here; they are facts to compare with, not a result of this
package. A user's run differs in judge, prompt wording, models and opponents, so only the ordering and the rough
size of gaps compare, and only on the same config.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

import pandas as pd

from echo_builder.citation import ECHO_BIBTEX, ECHO_PAPER_URL

__all__ = [
    "ECHO_BIBTEX",
    "ECHO_PAPER_URL",
    "PAPER_CITATION",
    "PAPER_LABEL",
    "PUBLISHED_WIN_RATES",
    "match_paper_model",
    "paper_comparison",
    "published_win_rates",
]

PAPER_LABEL = "from the paper (ECHO, arXiv 2510.15021)"
PAPER_CITATION = "Constantly Improving Image Models Need Constantly Improving Benchmarks (ECHO). ICLR 2026. arXiv:2510.15021."
#: ``{config: {model: win rate in [0, 1]}}`` as published (I2I / T2I), best first.
PUBLISHED_WIN_RATES: Mapping[str, Mapping[str, float]] = {
    "image_to_image": {
        "4o Image Gen": 0.81,
        "Nano Banana": 0.66,
        "Gemini 2.0 Flash": 0.53,
        "Bagel-Think": 0.49,
        "Bagel": 0.48,
        "Flux Kontext": 0.45,
        "LLM+Diffusion": 0.18,
        "Anole": 0.07,
    },
    "text_to_image": {
        "4o Image Gen": 0.76,
        "Nano Banana": 0.74,
        "LLM+Diffusion": 0.60,
        "Gemini 2.0 Flash": 0.55,
        "Bagel-Think": 0.46,
        "Bagel": 0.41,
        "Flux Kontext": 0.40,
        "Anole": 0.10,
    },
}


def published_win_rates(config: str) -> pd.DataFrame:
    """The paper's win rates for ``config`` (``image_to_image`` or ``text_to_image``).

    Returns:
        DataFrame with ``model`` (the paper's name), ``win_rate`` (float in [0, 1], higher is better) and
        ``source`` (:data:`PAPER_LABEL`), best first; empty (same columns) for a config the paper did not rank.
    """
    rates = PUBLISHED_WIN_RATES.get(config, {})
    frame = pd.DataFrame(
        {"model": list(rates), "win_rate": list(rates.values())}, columns=["model", "win_rate"]
    )
    frame["source"] = PAPER_LABEL
    return frame.sort_values("win_rate", ascending=False, kind="stable").reset_index(drop=True)


def _key(name: str) -> str:
    return re.sub(r"[^0-9a-z+]", "", name.lower())


def match_paper_model(name: str, config: str) -> str | None:
    """The paper's model that ``name`` (a run's model folder) names, ignoring case, spaces and punctuation
    (``nano-banana``, ``Nano_Banana`` -> ``Nano Banana``; ``4o-image-gen`` -> ``4o Image Gen``); else ``None``."""
    wanted = _key(name)
    for paper_name in PUBLISHED_WIN_RATES.get(config, {}):
        if _key(paper_name) == wanted:
            return paper_name
    return None


def paper_comparison(table: pd.DataFrame | None, config: str | None) -> pd.DataFrame:
    """A run's win rates beside the paper's, on the same config.

    Args:
        table: a leaderboard table (``model``, ``win_rate``, ``ci_low``, ``ci_high``; e.g.
            :attr:`~echo_builder.judge.leaderboard.Leaderboard.table`), or ``None`` for the paper's numbers alone.
        config: the run's config; one the paper did not rank (or ``None``) gives an empty frame.

    Returns:
        DataFrame with ``model``, ``your_win_rate``, ``your_ci_low``, ``your_ci_high`` (NaN for a paper model not
        in the run), ``paper_model`` and ``paper_win_rate`` (NaN for a run model the paper did not rank),
        ``paper_source`` (:data:`PAPER_LABEL`): first the run's models in the run's order, then the paper's
        models absent from the run, best first. Models are matched by :func:`match_paper_model`.
    """
    columns = ["model", "your_win_rate", "your_ci_low", "your_ci_high", "paper_model", "paper_win_rate"]
    if not config or config not in PUBLISHED_WIN_RATES:
        return pd.DataFrame(columns=[*columns, "paper_source"])
    paper = PUBLISHED_WIN_RATES[config]
    rows: list[dict[str, Any]] = []
    matched: set[str] = set()
    nan = float("nan")
    for record in [] if table is None else table.to_dict(orient="records"):
        paper_name = match_paper_model(str(record["model"]), config)
        if paper_name:
            matched.add(paper_name)
        rows.append(
            {
                "model": record["model"],
                "your_win_rate": record.get("win_rate"),
                "your_ci_low": record.get("ci_low"),
                "your_ci_high": record.get("ci_high"),
                "paper_model": paper_name,
                "paper_win_rate": paper[paper_name] if paper_name else nan,
            }
        )
    for paper_name, rate in paper.items():
        if paper_name not in matched:
            rows.append(
                {
                    "model": "",
                    "your_win_rate": nan,
                    "your_ci_low": nan,
                    "your_ci_high": nan,
                    "paper_model": paper_name,
                    "paper_win_rate": rate,
                }
            )
    frame = pd.DataFrame(rows, columns=columns)
    for column in [*columns[1:4], "paper_win_rate"]:
        frame[column] = frame[column].astype(float)
    frame["paper_source"] = PAPER_LABEL
    return frame
