"""``echo-bench estimate``: what a judge run or a build would cost, before it starts.

Cost = calls x typical tokens per call x list prices (:mod:`echo_builder.prices`), per stage.

- **Calls.** A judge run: counted exactly from the benchmark config and the outputs folder (single and
  probability: one call per sample and model with an output; pairwise: two orders per pair of models with
  outputs), per judge. A build: the posts the ``relevance`` stage would rate are counted exactly (``collect`` and
  ``query`` run; they call no model); each later model stage is that count times its calls per rated post in the
  call cache's history (``--cache``), else times 1, a ceiling that assumes every rated post is kept and becomes one
  sample.
- **Typical tokens.** The mean input and output tokens per call of that stage in the call cache (``--cache``, e.g.
  an earlier run's ``RUN/cache``), from the same model when it has any, else from any model; without history, the
  defaults of :data:`DEFAULT_TOKENS` (judges: :data:`JUDGE_TEXT_TOKENS` + :data:`IMAGE_TOKENS_512` per image).

The estimate never sends a call and writes nothing.
"""

from __future__ import annotations

import itertools
import sqlite3
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from echo_builder.errors import ConfigError
from echo_builder.prices import PriceTable

__all__ = [
    "DEFAULT_TOKENS",
    "IMAGE_TOKENS_512",
    "JUDGE_TEXT_TOKENS",
    "EstimateRow",
    "estimate_build",
    "estimate_judge",
    "format_estimate",
    "stage_history",
]

#: Input tokens of one image as ECHO sends it to judges (shorter side 512 px, e.g. 512 x 683): OpenAI's
#: high-detail count, 85 + 170 per 512 px tile, 2 tiles.
IMAGE_TOKENS_512 = 425
#: Input tokens of a judge prompt's text (instructions, the user's prompt) without images.
JUDGE_TEXT_TOKENS = 400
#: Default (input tokens without images, output tokens) per call by stage, used without cache history. Judge
#: outputs are a short justification and the ``[[N]]`` verdict; ``judge-prob`` asks for one token.
DEFAULT_TOKENS: dict[str, tuple[int, int]] = {
    "judge": (JUDGE_TEXT_TOKENS, 250),
    "judge-pairwise": (JUDGE_TEXT_TOKENS + 100, 300),
    "judge-prob": (JUDGE_TEXT_TOKENS, 1),
    "relevance": (700, 30),
    "extract": (2500, 400),
    "roles": (600 + 2 * IMAGE_TOKENS_512, 60),
    "templates": (500 + 2 * IMAGE_TOKENS_512, 150),
    "screenshots": (700 + IMAGE_TOKENS_512, 250),
    "tier": (600 + 2 * IMAGE_TOKENS_512, 80),
    "applicability": (500 + 2 * IMAGE_TOKENS_512, 60),
}


@dataclass(frozen=True)
class EstimateRow:
    """One line of an estimate.

    Attributes:
        model: the backend spec whose prices apply.
        stage: the call stage (``judge-single``, ``relevance``, ...).
        calls: calls it would make (>= 0).
        input_tokens, output_tokens: total tokens over those calls.
        usd: their cost in US dollars, ``None`` when the model has no price.
        basis: where the tokens per call came from: ``history (N calls)`` or ``default``.
    """

    model: str
    stage: str
    calls: int
    input_tokens: int
    output_tokens: int
    usd: float | None
    basis: str


def stage_history(cache_dir: str | Path | None, stage: str, model: str) -> tuple[float, float, int] | None:
    """Mean ``(input tokens, output tokens)`` per call of ``stage`` in the cache at ``cache_dir`` and the number of
    calls averaged: rows of ``model`` when it has any, else of every model; ``None`` without a usable row.

    The cache is opened read-only (``calls.sqlite``); a missing or unreadable file is no history.
    """
    if cache_dir is None:
        return None
    db = Path(cache_dir) / "calls.sqlite"
    if not db.is_file():
        return None
    try:
        conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    except sqlite3.Error:
        return None
    try:
        for where, args in (("stage = ? AND backend = ?", (stage, model)), ("stage = ?", (stage,))):
            n, tin, tout = conn.execute(
                f"SELECT count(*), avg(input_tokens), avg(output_tokens) FROM calls WHERE {where} "
                "AND input_tokens IS NOT NULL AND output_tokens IS NOT NULL",
                args,
            ).fetchone()
            if n:
                return float(tin), float(tout), int(n)
    except sqlite3.Error:
        return None
    finally:
        conn.close()
    return None


def _stage_calls(cache_dir: str | Path | None) -> dict[str, int]:
    """Calls per stage in the cache's history (``{}`` without one)."""
    if cache_dir is None or not (Path(cache_dir) / "calls.sqlite").is_file():
        return {}
    try:
        conn = sqlite3.connect(f"file:{Path(cache_dir) / 'calls.sqlite'}?mode=ro", uri=True)
        try:
            return dict(conn.execute("SELECT stage, count(*) FROM calls GROUP BY stage").fetchall())
        finally:
            conn.close()
    except sqlite3.Error:
        return {}


def _row(
    prices: PriceTable,
    model: str,
    stage: str,
    calls: int,
    images: int,
    default: tuple[int, int],
    cache_dir: str | Path | None,
    image_tokens: int,
) -> EstimateRow:
    """A row for ``calls`` calls carrying ``images`` images in all."""
    history = stage_history(cache_dir, stage, model)
    if history is not None:
        per_in, per_out, n = history
        tin, tout, basis = round(per_in * calls), round(per_out * calls), f"history ({n} calls)"
    else:
        tin, tout, basis = default[0] * calls + image_tokens * images, default[1] * calls, "default"
    return EstimateRow(model, stage, calls, tin, tout, prices.cost(model, tin, tout).usd, basis)


def estimate_judge(
    benchmark: str | Path,
    config: str,
    outputs_dir: str | Path,
    judges: Sequence[str],
    prices: PriceTable,
    *,
    mode: str = "single",
    limit: int | None = None,
    cache_dir: str | Path | None = None,
    judge_prompt: str | Path | None = None,
) -> list[EstimateRow]:
    """One :class:`EstimateRow` per judge for ``echo-bench judge`` with the same arguments.

    Raises:
        ConfigError: no judge, an unknown mode, or the benchmark and outputs do not match (as ``judge`` would).
    """
    from echo_builder.judge.prompts import PAIRWISE, PROBABILITY_DIGITS, SINGLE, load_judge_prompt
    from echo_builder.judge.run import _identified, check_output_matches, discover_outputs
    from echo_dataset.loading import read_config

    if not judges:
        raise ConfigError("give at least one --judge backend spec")
    if mode not in ("single", "pairwise", "probability"):
        raise ConfigError(f"unknown mode {mode!r}; use single, pairwise or probability")
    samples = _identified(read_config(benchmark, config), f"{benchmark}/{config}")
    outputs = discover_outputs(outputs_dir)
    check_output_matches(benchmark, config, outputs_dir, samples, outputs)
    if limit is not None:
        samples = samples[:limit]
    prompt = {"single": SINGLE, "pairwise": PAIRWISE, "probability": PROBABILITY_DIGITS}[mode]
    if judge_prompt is not None:
        prompt = load_judge_prompt(judge_prompt)
    stage = {"single": f"judge-{prompt.name}", "pairwise": "judge-pairwise", "probability": "judge-prob"}[
        mode
    ]
    default = DEFAULT_TOKENS[
        {"single": "judge", "pairwise": "judge-pairwise", "probability": "judge-prob"}[mode]
    ]
    calls = images = 0
    for row in samples:
        n_inputs = sum(1 for img in (row.get("input_images") or ()) if img is not None)
        present = [m for m in outputs if row["id"] in outputs[m]]
        if mode == "pairwise":
            n = 2 * len(list(itertools.combinations(present, 2)))
            calls, images = calls + n, images + n * (n_inputs + 2)
        else:
            calls, images = calls + len(present), images + len(present) * (n_inputs + 1)
    return [_row(prices, j, stage, calls, images, default, cache_dir, IMAGE_TOKENS_512) for j in judges]


def estimate_build(
    config: Any, prices: PriceTable, *, cache_dir: str | Path | None = None
) -> list[EstimateRow]:
    """One :class:`EstimateRow` per model stage of ``echo-bench build`` with ``config`` (a
    :class:`~echo_builder.pipeline.BuildConfig`); ``collect`` and ``query`` run in memory to count the posts to
    rate. The ``rules`` backend makes no call: no rows.

    Raises:
        ConfigError: bad sources or options (as ``build`` would).
    """
    from echo_builder.stages.registry import StageContext, active_stages

    if config.backend.strip() == "rules":
        return []
    stages = active_stages(config.skip_stages)
    context = StageContext(config=config, out=Path(config.out_dir))
    for definition in stages:
        if definition.name in ("collect", "query"):
            if definition.prepare is not None:
                context.prepared[definition.name] = definition.prepare(config)
            definition.run(context)
    rated = len(context.selected)
    history = _stage_calls(cache_dir)
    base = history.get("relevance", 0)
    rows = []
    model = config.backend.strip()
    for definition in stages:
        if not definition.calls_model:
            continue
        name = definition.name
        if name == "relevance":
            calls = rated
        elif base:  # the history's calls per rated post (0 for a stage it never called)
            calls = round(rated * history.get(name, 0) / base)
        else:
            calls = rated  # ceiling: every rated post kept, one sample each
        default = DEFAULT_TOKENS.get(name, (1000, 300))
        rows.append(_row(prices, model, name, calls, 0, default, cache_dir, 0))
    return rows


def format_estimate(rows: Sequence[EstimateRow], prices: PriceTable) -> str:
    """The rows as a plain-text table with a total line; unpriced models show ``not priced``."""
    header = (
        f"{'model':<28} {'stage':<16} {'calls':>7} {'input tok':>11} {'output tok':>11} {'USD':>10}  basis"
    )
    lines = [header, "-" * len(header)]
    total: float | None = 0.0
    for r in rows:
        usd = "not priced" if r.usd is None else f"{r.usd:.4f}"
        lines.append(
            f"{r.model[:28]:<28} {r.stage[:16]:<16} {r.calls:>7} {r.input_tokens:>11,} {r.output_tokens:>11,} "
            f"{usd:>10}  {r.basis}"
        )
        total = None if total is None or r.usd is None else total + r.usd
    lines.append(
        f"total: {'not priced (a model has no price; add it with --prices)' if total is None else f'{total:.4f} USD'}"
        f" for {sum(r.calls for r in rows)} calls"
    )
    for model in sorted({r.model for r in rows}):
        price = prices.describe(model)
        if price is not None:
            lines.append(
                f"prices of {model}: {price['entry']} {price['input']}/{price['output']} USD per 1M input/output "
                f"tokens, list prices as of {price['date']} ({price['source']})"
            )
    return "\n".join(lines)
