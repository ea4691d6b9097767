"""Plain-function entry points used by the ``echo_judge`` and ``win_rate`` evaluate modules.

Both modules stay thin shells (PRACTICES.md 2): the conversion of their columns and every decision live here.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Literal

import pandas as pd

from echo_builder.errors import ConfigError

__all__ = ["grade_outputs", "verdicts_per_judge", "win_rate_report"]


def grade_outputs(
    prompts: Sequence[str],
    inputs: Sequence[Sequence[Any]],
    outputs: Sequence[Any],
    judges: Sequence[str],
    *,
    judge_options: dict[str, dict[str, Any]] | None = None,
    cache_dir: str | Path | None = None,
    concurrency: int = 8,
    max_attempts: int = 6,
    mode: Literal["single", "probability"] = "single",
    judge_prompt: Any | None = None,
) -> dict[str, Any]:
    """Grade each (prompt, input images, output image) with every judge (ECHO single-answer grading, 1-10).

    Args:
        prompts: n prompts.
        inputs: n lists of input images (empty for text-to-image); PIL images, bytes, paths or datasets dicts.
        outputs: n output images, ``None`` for a missing output.
        judges: backend specs; several make an ensemble whose per-sample score is the mean of valid ratings.
        judge_prompt: a judge prompt file path or :class:`~echo_builder.judge.prompts.JudgePrompt` replacing the
            built-in prompt (``answer.kind`` ``rating`` for single, ``digits`` for probability).

    Returns:
        ``{"ratings": n floats (mean over judges, NaN when every judge failed), "per_judge": {spec: n ratings},
        "statuses": {spec: n statuses}, "raw_texts": {spec: n texts}, "errors": {spec: n reasons or None}}``.
        Ratings are in [1, 10] (single) or [1, 9] (probability); higher is better.

    Raises:
        ConfigError: lengths differ or no judge is given.
    """
    from echo_builder.judge.judging import JudgeItem
    from echo_builder.judge.prompts import JudgePrompt, load_judge_prompt

    prompt = None
    if judge_prompt is not None:
        prompt = judge_prompt if isinstance(judge_prompt, JudgePrompt) else load_judge_prompt(judge_prompt)
        wanted = "rating" if mode == "single" else "digits"
        if prompt.answer != wanted:
            raise ConfigError(
                f"judge prompt {prompt.source}: field 'answer.kind' is {prompt.answer!r}; mode {mode} needs {wanted!r}"
            )
    n = len(prompts)
    if not (len(inputs) == len(outputs) == n):
        raise ConfigError(f"prompts, inputs and outputs differ in length: {n}, {len(inputs)}, {len(outputs)}")
    if not judges:
        raise ConfigError("give at least one judge backend spec, e.g. judges=['openai:gpt-4o']")
    items = [
        JudgeItem(f"sample-{i}", prompts[i], tuple(inputs[i] or ()), "model", outputs[i]) for i in range(n)
    ]

    def grade(judge: Any, batch: Sequence[Any]) -> list[Any]:
        if prompt is not None:
            judge.prompts[prompt.answer] = prompt
        return judge.single(batch) if mode == "single" else judge.probability(batch)

    verdicts = verdicts_per_judge(
        items,
        judges,
        grade,
        judge_options=judge_options,
        cache_dir=cache_dir,
        concurrency=concurrency,
        max_attempts=max_attempts,
    )
    per_judge = {
        j: [v.rating if v.rating is not None else math.nan for v in vs] for j, vs in verdicts.items()
    }
    statuses = {j: [v.status for v in vs] for j, vs in verdicts.items()}
    raw = {j: [v.raw_text for v in vs] for j, vs in verdicts.items()}
    errors = {j: [v.error for v in vs] for j, vs in verdicts.items()}
    ratings = []
    for i in range(n):
        valid = [per_judge[j][i] for j in judges if not math.isnan(per_judge[j][i])]
        ratings.append(sum(valid) / len(valid) if valid else math.nan)
    return {
        "ratings": ratings,
        "per_judge": per_judge,
        "statuses": statuses,
        "raw_texts": raw,
        "errors": errors,
    }


def verdicts_per_judge(
    items: Sequence[Any],
    judges: Sequence[str],
    run: Callable[[Any, Sequence[Any]], list[Any]],
    *,
    judge_options: dict[str, dict[str, Any]] | None = None,
    cache_dir: str | Path | None = None,
    concurrency: int = 8,
    max_attempts: int = 6,
    batch: Any | None = None,
    budget: Any | None = None,
) -> dict[str, list[Any]]:
    """``{spec: run(Judge(spec), items)}`` for every judge spec, sharing one call cache (when given).

    ``run`` chooses the protocol (``judge.single``, ``judge.probability``, a text-rendering template, ...).
    ``batch`` (:class:`~echo_builder.backends.batch.BatchSettings`) sends the uncached calls through the OpenAI
    Batch API; a judge without one raises :class:`~echo_builder.errors.ConfigError` before anything is written.
    ``budget``: a :class:`~echo_builder.backends.spend.Budget` (``--max-cost``) shared by all judges; a call that
    would pass it raises :class:`~echo_builder.errors.BudgetExceededError` (replies so far stay in the cache).
    """
    from echo_builder.backends import create_backend
    from echo_builder.backends.caller import ModelCaller, RetryPolicy
    from echo_builder.cache import CallCache
    from echo_builder.judge.judging import Judge

    out: dict[str, list[Any]] = {}
    pending: list[Any] = []
    cache = None
    try:
        # every judge is created (spec, options, API key checked) before the cache folder is made, so a judge that
        # cannot run leaves nothing behind; creating is cheap (local models load on their first call)
        for spec in judges:
            pending.append(create_backend(spec, **(judge_options or {}).get(spec, {})))
        if batch is not None:
            from echo_builder.backends.batch import check_batchable

            for backend in pending:
                check_batchable(backend)
        cache = CallCache(cache_dir) if cache_dir else None
        budgets = {spec: budget.for_model(spec) for spec in judges} if budget is not None else {}
        for spec in judges:
            caller = ModelCaller(
                pending[0],
                cache=cache,
                concurrency=concurrency,
                retry=RetryPolicy(max_attempts=max_attempts),
                batch=batch,
                budget=budgets.get(spec),
            )
            try:
                out[spec] = run(Judge(caller), items)
            finally:
                pending.pop(0).close()  # frees a local judge's memory before the next one loads
    finally:
        for backend in pending:
            backend.close()
        if cache is not None:
            cache.close()
    return out


def win_rate_report(
    ratings: pd.DataFrame,
    *,
    missing: Literal["loss", "skip"] = "loss",
    n_boot: int = 1000,
    seed: int = 0,
    ci: Literal["bootstrap", "normal"] = "bootstrap",
) -> dict[str, Any]:
    """Win rates, 95% bootstrap intervals over prompts, Bradley-Terry and counts from per-sample scores.

    Args:
        ratings: a Ratings table (``sample_id``, ``model``, ``judge``, ``rating``, ``status``); several judges are
            combined by majority vote after pseudo-pairwise conversion (ECHO Flow 2).
        ci: ``bootstrap`` (95% over prompts) or ``normal`` (the normal approximation over comparisons of ECHO's
            released code); ``ci_method`` in the result names it.

    Returns:
        ``{"win_rate": {model: float in [0, 1]}, "ci_low", "ci_high", "bt_rating", "n_comparisons",
        "n_failures", "n_missing": {model: ...}, "models": models best first, "ci_method": str}``.
    """
    from echo_builder.judge.leaderboard import leaderboard_from_comparisons
    from echo_builder.stats import failure_counts, majority_vote, pseudo_pairwise

    per_judge = pseudo_pairwise(ratings, missing=missing)
    combined = majority_vote(per_judge) if per_judge["judge"].nunique() > 1 else per_judge
    board = leaderboard_from_comparisons(combined, n_boot=n_boot, seed=seed, ci=ci)
    # judge failures add up over judges; a missing output is one per sample whatever the number of judges
    failures = (
        failure_counts(ratings).groupby("model").agg({"judge_failures": "sum", "missing_output": "max"})
    )
    table = board.table.set_index("model")
    out: dict[str, Any] = {"models": list(table.index)}
    for column in ("win_rate", "ci_low", "ci_high", "bt_rating", "n_comparisons"):
        out[column] = {m: (v.item() if hasattr(v, "item") else v) for m, v in table[column].items()}
    out["n_failures"] = {m: int(failures["judge_failures"].get(m, 0)) for m in table.index}
    out["n_missing"] = {m: int(failures["missing_output"].get(m, 0)) for m in table.index}
    out["ci_method"] = board.meta["ci_method"]
    return out
