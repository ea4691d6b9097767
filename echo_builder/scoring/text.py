"""``text_rendering``: how well an output renders the text its prompt asks for, judged by a VLM (ECHO Flow 3).

The judge reads all text in the output and lists spelling, punctuation, grammar, missing-character and cropping
errors; text the prompt asks for verbatim must match exactly, free text must be coherent and fit. It rates 1-10
as ``[[N]]`` (the last one counts) and the score is reported normalised to [0, 1] as ``(N - 1) / 9`` (1 -> 0,
10 -> 1). Failures follow the judge's rules: API errors, refusals and replies without a valid rating are NaN with
their reason, never a score. Any judge backend works (``openai:...``, ``transformers:...``); several judges give
the mean of their valid normalised ratings.

OCR evidence (``ocr_evidence=True``, ``echo-bench metrics --ocr-evidence``): each output is first read by the
PP-OCRv4 engine of :mod:`echo_builder.ocr`, and the judge gets those lines beside the image, in an
``<ocr_text>`` slot of the prompt ``text-rendering-ocr`` (version ``echo-text-ocr-v1``), which presents them as a
machine reading that may be wrong and tells the judge to trust the image where they disagree. The OCR makes exact
characters (digits, spelling) easier to check; the image still decides layout, fit and legibility. The prompt
version and the OCR engine's id go into the metric's backend id, and the OCR text into every judge call, so
cached calls with and without evidence never collide.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from echo_builder.scoring.base import MetricResult, MetricSpec, register_metric_spec
from echo_builder.scoring.registry import MetricDefinition, MetricOption, declare_metric

__all__ = ["TEXT_RENDERING_SPEC", "check_ocr_placeholder", "normalise_rating", "text_rendering"]

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
    ocr_evidence: bool = False,
    ocr: Any | None = None,
    batch: Any | None = None,
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
            its ``low``/``high`` range is rescaled to [0, 1] the same way. With ``ocr_evidence`` it must place
            ``{ocr_text}``; without, it must not.
        ocr_evidence: read each output with OCR first and give the judge that text beside the image (see the
            module docstring); default template :data:`~echo_builder.judge.prompts.TEXT_RENDERING_OCR`. An
            output the OCR cannot read is NaN (``missing_output: unreadable output: ...``), not judged.
        ocr: the OCR engine (``read(image, name=...) -> OcrReading`` and ``backend_id``; default
            :func:`echo_builder.ocr.default_engine`, PP-OCRv4), used only with ``ocr_evidence``.
        batch: :class:`~echo_builder.backends.batch.BatchSettings` to send the uncached judge calls through the
            OpenAI Batch API (``openai:`` judges only), or ``None`` (online).
        budget: a :class:`~echo_builder.backends.spend.Budget` (``--max-cost``) over all judge calls.

    Returns:
        :class:`MetricResult` with values in [0, 1] (higher is better), NaN with the reason for failures and
        missing outputs; extras ``ratings`` ({judge: n raw 1-10 ratings or NaN}), ``statuses``, ``raw_texts``,
        ``judges``, ``backend`` (one id naming every setting that changes a rating: judges, their options
        without credentials, the prompt template's version and, with OCR evidence, ``+ocr=<engine id>``) and
        ``ocr_text`` (n strings the judge was shown, ``None`` where no OCR ran; all ``None`` without evidence).

    Raises:
        ConfigError: lengths differ, no judge is given, or the template and ``ocr_evidence`` disagree about
            ``{ocr_text}``.
        MissingDependencyError: ``ocr_evidence`` without the ``ocr`` extra (``rapidocr_onnxruntime``).
    """
    from echo_builder.errors import ConfigError
    from echo_builder.judge.api import verdicts_per_judge
    from echo_builder.judge.judging import JudgeItem
    from echo_builder.judge.prompts import TEXT_RENDERING, TEXT_RENDERING_OCR

    template = template or (TEXT_RENDERING_OCR if ocr_evidence else TEXT_RENDERING)
    if template.answer != "rating":
        raise ConfigError(f"judge prompt {template.source}: text_rendering needs answer.kind 'rating'")
    check_ocr_placeholder(template, ocr_evidence)
    if len(prompts) != len(outputs):
        raise ConfigError(f"prompts and outputs differ in length: {len(prompts)} vs {len(outputs)}")
    if not judges:
        raise ConfigError(
            "text_rendering needs at least one judge backend spec, e.g. judges=['openai:gpt-4o']"
        )
    ocr_texts: list[str | None] = [None] * len(outputs)
    unreadable: dict[int, str] = {}
    ocr_backend = None
    if ocr_evidence:
        ocr_texts, unreadable, ocr_backend = _read_outputs(outputs, ocr)
    items = [
        JudgeItem(
            f"sample-{i}",
            p,
            (),
            "model",
            None if i in unreadable else o,
            output_error=unreadable.get(i),
            ocr_text=ocr_texts[i] if ocr_evidence else None,
        )
        for i, (p, o) in enumerate(zip(prompts, outputs, strict=True))
    ]
    verdicts = verdicts_per_judge(
        items,
        judges,
        lambda judge, chunk: judge.single(chunk, template=template, criterion="text_rendering"),
        judge_options=judge_options,
        cache_dir=cache_dir,
        concurrency=concurrency,
        max_attempts=max_attempts,
        batch=batch,
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
            "backend": _backend_id(judges, judge_options or {}, template.version)
            + (f"+ocr={ocr_backend}" if ocr_evidence else ""),
            "ocr_text": ocr_texts,
        },
    )


def check_ocr_placeholder(template: Any, ocr_evidence: bool) -> None:
    """Raise :class:`ConfigError` unless the judge prompt places ``{ocr_text}`` exactly when OCR evidence is on."""
    from echo_builder.errors import ConfigError

    if ocr_evidence and not template.uses_ocr_text:
        raise ConfigError(
            f"judge prompt {template.source} ({template.version}) has no {{ocr_text}} placeholder, so "
            "--ocr-evidence would read text the judge never sees; add {ocr_text} to its user template"
        )
    if template.uses_ocr_text and not ocr_evidence:
        raise ConfigError(
            f"judge prompt {template.source} ({template.version}) places {{ocr_text}}: pass --ocr-evidence "
            "(ocr_evidence=True) so that each output's OCR text fills it"
        )


def _read_outputs(outputs: Sequence[Any], ocr: Any | None) -> tuple[list[str | None], dict[int, str], str]:
    """OCR of every present output: (texts, ``None`` where absent or unreadable), {index: why unreadable}, and
    the engine's id."""
    from echo_builder.errors import ImageError

    engine = ocr
    if engine is None:
        from echo_builder.ocr import default_engine

        engine = default_engine()
    texts: list[str | None] = [None] * len(outputs)
    unreadable: dict[int, str] = {}
    for i, output in enumerate(outputs):
        if output is None:
            continue
        try:
            texts[i] = engine.read(output, name=f"sample {i} output").text
        except ImageError as exc:
            unreadable[i] = f"unreadable output: {exc}"
    return texts, unreadable, str(engine.backend_id)


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
    evidence = bool(options.get("ocr_evidence"))
    result = text_rendering(
        prompts,
        outputs,
        judges,
        judge_options=options.get("judge_options"),
        cache_dir=options.get("cache_dir"),
        template=options.get("judge_prompt"),
        ocr_evidence=evidence,
        batch=options.get("batch"),
        budget=options.get("budget"),
    )
    if evidence:  # each row's detail: the backend id and the OCR text the judge was shown
        backend = result.extras["backend"]
        result.extras["details"] = [{"backend": backend, "ocr_text": t} for t in result.extras["ocr_text"]]
    return result


TEXT_RENDERING_METRIC = declare_metric(
    MetricDefinition(
        name="text_rendering",
        spec=TEXT_RENDERING_SPEC,
        factory=_score_for_run,
        applicability_flag="text_rendering",
        needs_inputs=False,
        needs_judge=True,
        options=(
            MetricOption(
                "ocr_evidence",
                type="bool",
                help="text_rendering: show the judge the OCR text (PP-OCRv4, the ocr extra) of each output "
                "beside the image, marked as machine OCR that may be wrong (prompt echo-text-ocr-v1)",
            ),
        ),
        description="a VLM judge proofreads the rendered text, rating 1-10, reported as (N - 1) / 9",
    ),
    target="echo_builder.scoring.text:TEXT_RENDERING_METRIC",
    order=40,  # position among the built-in metrics (default metric order, rows and columns)
)
