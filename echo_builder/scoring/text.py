"""``text_rendering``: how well an output renders the text its prompt asks for, judged by a VLM (ECHO Flow 3).

The judge reads all text in the output and lists spelling, punctuation, grammar, missing-character and cropping
errors; text the prompt asks for verbatim must match exactly, free text must be coherent and fit. It rates 1-10
as ``[[N]]`` (the last one counts) and the score is reported normalised to [0, 1] as ``(N - 1) / 9`` (1 -> 0,
10 -> 1). Failures follow the judge's rules: API errors, refusals and replies without a valid rating are NaN with
their reason, never a score. Any judge backend works (``openai:...``, ``transformers:...``); several judges give
the mean of their valid normalised ratings.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from echo_builder.scoring.base import MetricResult, MetricSpec, register_metric_spec
from echo_builder.scoring.registry import MetricDefinition, declare_metric

__all__ = ["TEXT_RENDERING_SPEC", "normalise_rating", "text_rendering"]

TEXT_RENDERING_SPEC = register_metric_spec(
    MetricSpec(
        name="text_rendering",
        higher_is_better=True,
        low=0.0,
        high=1.0,
        unit="judge rating 1-10 rescaled to [0, 1]",
        source="ECHO (arXiv 2510.15021), Flow 3: VLM judge of rendered text, [[N]] 1-10",
    )
)


def normalise_rating(rating: float) -> float:
    """A 1-10 rating mapped linearly to [0, 1]: ``(rating - 1) / 9``."""
    return (rating - 1.0) / 9.0


def text_rendering(
    prompts: Sequence[str],
    outputs: Sequence[Any],
    judges: Sequence[str],
    *,
    judge_options: dict[str, dict[str, Any]] | None = None,
    cache_dir: str | Path | None = None,
    concurrency: int = 8,
    max_attempts: int = 6,
    template: Any | None = None,
    budget: Any | None = None,
) -> MetricResult:
    """Judge the text rendering of each output image.

    Args:
        prompts: n prompts (the text they ask for is what the judge checks).
        outputs: n output images (path, bytes, PIL image or datasets dict); ``None`` for a missing output.
        judges: judge backend specs.
        judge_options: backend options per spec; cache_dir: call cache (reruns repeat no call).
        template: a :class:`~echo_builder.judge.prompts.JudgePrompt` (``answer.kind: rating``, e.g. from
            :func:`~echo_builder.judge.prompts.load_judge_prompt`) replacing the built-in text-rendering prompt;
            its ``low``/``high`` range is rescaled to [0, 1] the same way.
        budget: a :class:`~echo_builder.backends.spend.Budget` (``--max-cost``) over all judge calls.

    Returns:
        :class:`MetricResult` with values in [0, 1] (higher is better), NaN with the reason for failures and
        missing outputs; extras ``ratings`` ({judge: n raw 1-10 ratings or NaN}), ``statuses``, ``raw_texts``,
        ``judges`` and ``backend`` (one id naming every setting that changes a rating: judges, their options
        without credentials, the prompt template's version).

    Raises:
        ConfigError: lengths differ or no judge is given.
    """
    from echo_builder.errors import ConfigError
    from echo_builder.judge.api import verdicts_per_judge
    from echo_builder.judge.judging import JudgeItem
    from echo_builder.judge.prompts import TEXT_RENDERING

    template = template or TEXT_RENDERING
    if template.answer != "rating":
        raise ConfigError(f"judge prompt {template.source}: text_rendering needs answer.kind 'rating'")
    if len(prompts) != len(outputs):
        raise ConfigError(f"prompts and outputs differ in length: {len(prompts)} vs {len(outputs)}")
    if not judges:
        raise ConfigError(
            "text_rendering needs at least one judge backend spec, e.g. judges=['openai:gpt-4o']"
        )
    items = [
        JudgeItem(f"sample-{i}", p, (), "model", o)
        for i, (p, o) in enumerate(zip(prompts, outputs, strict=True))
    ]
    verdicts = verdicts_per_judge(
        items,
        judges,
        lambda judge, batch: judge.single(batch, template=template, criterion="text_rendering"),
        judge_options=judge_options,
        cache_dir=cache_dir,
        concurrency=concurrency,
        max_attempts=max_attempts,
        budget=budget,
    )
    ratings = {j: [v.rating if v.rating is not None else math.nan for v in vs] for j, vs in verdicts.items()}
    statuses = {j: [v.status for v in vs] for j, vs in verdicts.items()}
    raw = {j: [v.raw_text for v in vs] for j, vs in verdicts.items()}
    errors = {j: [v.error for v in vs] for j, vs in verdicts.items()}
    values, reasons = [], []
    for i in range(len(items)):
        valid = [
            (ratings[j][i] - template.low) / (template.high - template.low)
            for j in judges
            if not math.isnan(ratings[j][i])
        ]
        values.append(float(np.mean(valid)) if valid else math.nan)
        reasons.append(None if valid else "; ".join(f"{j}: {statuses[j][i]}: {errors[j][i]}" for j in judges))
    return MetricResult(
        np.array(values),
        reasons,
        {
            "ratings": ratings,
            "statuses": statuses,
            "raw_texts": raw,
            "judges": list(judges),
            "backend": _backend_id(judges, judge_options or {}, template.version),
        },
    )


_NOT_IN_ID = ("key", "token", "secret", "password", "base_url", "header", "timeout", "concurrency")


def _backend_id(
    judges: Sequence[str], judge_options: dict[str, dict[str, Any]], prompt_version: str | None = None
) -> str:
    """Every setting that changes a rating: the judges, the prompt template's version and each judge's options
    (credentials, server address and call limits left out), e.g.
    ``"text_rendering:openai:gpt-4o{temperature=0}+prompt=echo-text-v1"``."""
    from echo_builder.judge.prompts import TEXT_RENDERING

    prompt_version = prompt_version or TEXT_RENDERING.version
    parts = []
    for judge in judges:
        options = {
            k: v
            for k, v in sorted((judge_options.get(judge) or {}).items())
            if not any(word in k.lower() for word in _NOT_IN_ID)
        }
        shown = ",".join(f"{k}={v}" for k, v in options.items())
        parts.append(f"{judge}{{{shown}}}" if shown else judge)
    return f"text_rendering:{','.join(parts)}+prompt={prompt_version}"


def _score_for_run(
    inputs: list[list[Any]], outputs: list[Any], prompts: list[str], options: Any
) -> MetricResult:
    """The registry's factory: :func:`text_rendering` with the run's judges (a :class:`ConfigError` without one)."""
    from echo_builder.errors import ConfigError

    judges = list(options.get("judges") or [])
    if not judges:
        raise ConfigError("text_rendering needs a judge: pass --judge openai:<model> or transformers:<path>")
    return text_rendering(
        prompts,
        outputs,
        judges,
        judge_options=options.get("judge_options"),
        cache_dir=options.get("cache_dir"),
        template=options.get("judge_prompt"),
        budget=options.get("budget"),
    )


TEXT_RENDERING_METRIC = declare_metric(
    MetricDefinition(
        name="text_rendering",
        spec=TEXT_RENDERING_SPEC,
        factory=_score_for_run,
        applicability_flag="text_rendering",
        needs_inputs=False,
        needs_judge=True,
        description="a VLM judge proofreads the rendered text, rating 1-10, reported as (N - 1) / 9",
    ),
    target="echo_builder.scoring.text:TEXT_RENDERING_METRIC",
)
