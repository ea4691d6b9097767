"""The Metric playground: ECHO's community-driven metrics on one uploaded (input, output) pair.

Each metric is the package's own function (``echo_builder.scoring``), so the playground shows exactly what
``echo-bench metrics`` and the ``echo_builder/metrics/<name>`` modules compute. A metric that does not apply, or cannot run in
this Space (no DINO weights, no face backend installed, no judge configured), gives NaN with the reason, never 0.
Direction, range and unit come from :data:`echo_builder.scoring.METRIC_SPECS`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from echo_builder.errors import EchoError
from echo_builder.scoring import METRIC_SPECS
from echo_builder.scoring.base import MetricResult

__all__ = [
    "NO_DINO_WEIGHTS",
    "NO_JUDGE",
    "NO_PROMPT",
    "PLAYGROUND_COLUMNS",
    "PlaygroundResult",
    "score_pair",
    "swatch_image",
]

PLAYGROUND_COLUMNS = ("metric", "value", "better", "note", "range", "unit")
NO_DINO_WEIGHTS = (
    "unavailable in this Space: structure distance needs DINO ViT-S/16 weights; start the Space with "
    "--dino-weights /path/to/model.safetensors (timm/vit_small_patch16_224.dino) or set ECHO_DINO_WEIGHTS"
)
NO_JUDGE = (
    "unavailable in this Space: text rendering needs a VLM judge; start the Space with --judge openai:<model> "
    "(API key from the Space's secrets)"
)
NO_PROMPT = "not applicable: text rendering checks the text the prompt asks for; enter the prompt"


@dataclass
class PlaygroundResult:
    """What the playground shows for one pair.

    Attributes:
        table: one row per metric (:data:`PLAYGROUND_COLUMNS`): ``value`` a float or ``None`` for NaN, ``better``
            ``"lower"``/``"higher"``, ``range`` and ``unit`` from the metric's spec, ``note`` the NaN reason or
            what the value means (e.g. the face backend, a failure score).
        color: the color shift details: ``magnitude``, ``deltas`` (R, G, B output minus input), ``input_means``,
            ``output_means`` (8-bit levels over 5..250), each a float or list of floats (NaN where undefined).
        swatch: a PIL image of the input's and the output's mean colors side by side, or ``None``.
        results: the raw :class:`~echo_builder.scoring.base.MetricResult` per metric that ran.
    """

    table: pd.DataFrame
    color: dict[str, Any]
    swatch: Any
    results: dict[str, MetricResult] = field(default_factory=dict)


def _range(low: float, high: float) -> str:
    def fmt(x: float) -> str:
        return "inf" if math.isinf(x) and x > 0 else "-inf" if math.isinf(x) else f"{x:g}"

    return f"[{fmt(low)}, {fmt(high)}]"


def _spec(name: str) -> Any:
    from echo_builder.scoring.registry import METRICS

    return METRICS.get(name).spec if name in METRICS else METRIC_SPECS[name]


def _row(name: str, value: float, note: str | None) -> dict[str, Any]:
    spec = _spec(name)
    return {
        "metric": name,
        "value": None if math.isnan(value) else round(float(value), 6),
        "better": "higher" if spec.higher_is_better else "lower",
        "range": _range(spec.low, spec.high),
        "unit": spec.unit,
        "note": note or "",
    }


def swatch_image(input_means: Sequence[float], output_means: Sequence[float], *, size: int = 96) -> Any:
    """Two squares, the input's mean color left and the output's right (uint8 RGB PIL image, 2 size x size).

    A channel that is undefined (NaN) is drawn mid-grey (128). Values are clipped to 0..255 and rounded.
    """
    from PIL import Image

    def color(means: Sequence[float]) -> tuple[int, ...]:
        return tuple(128 if math.isnan(float(c)) else int(np.clip(round(float(c)), 0, 255)) for c in means)

    image = Image.new("RGB", (2 * size, size))
    image.paste(color(input_means), (0, 0, size, size))
    image.paste(color(output_means), (size, 0, 2 * size, size))
    return image


def _unavailable(exc: BaseException) -> str:
    return f"unavailable in this Space: {exc}"


def score_pair(
    input_image: Any,
    output_image: Any,
    prompt: str = "",
    *,
    dino_weights: str | None = None,
    face_backend: str | None = "dlib",
    judges: Sequence[str] = (),
    judge_options: dict[str, dict[str, Any]] | None = None,
) -> PlaygroundResult:
    """Color shift, structure distance, face identity and text rendering of one (input, output) pair.

    Args:
        input_image: the input image (path, bytes, PIL image, uint8 array: anything
            :func:`echo_builder.imaging.load_rgb` accepts), or ``None``: then the input-based metrics are not
            applicable.
        output_image: the output image (same types).
        prompt: the prompt, used by text rendering only.
        dino_weights: DINO ViT-S/16 weights for structure distance (a file path, or ``random:<seed>`` for tests);
            ``None``: structure distance is NaN with :data:`NO_DINO_WEIGHTS`.
        face_backend: face backend name (``dlib``, ``auraface``); ``None`` turns face identity off.
        judges: VLM judge specs for text rendering; empty: NaN with :data:`NO_JUDGE`.
        judge_options: backend options per judge spec (e.g. ``{"openai:gpt-4o": {"base_url": ...}}``).

    Returns:
        :class:`PlaygroundResult` with one table row per metric in the order color shift, structure distance,
        face identity, text rendering, then every other metric of the metric registry (plugins) in registry
        order, computed with its declared option defaults.

    Raises:
        ImageError: an image cannot be decoded (the message names it as "input image" or "output image").
        ValueError: no output image.
    """
    from echo_builder.imaging import load_rgb
    from echo_builder.scoring.color import color_shift

    if output_image is None:
        raise ValueError("upload an output image")
    output = load_rgb(output_image, name="output image")
    inputs = [] if input_image is None else [load_rgb(input_image, name="input image")]
    rows: list[dict[str, Any]] = []
    results: dict[str, MetricResult] = {}

    color = results["color_shift"] = color_shift([inputs], [output])
    rows.append(_row("color_shift", color.values[0], color.nan_reasons[0]))
    deltas = color.extras["deltas"][0]
    color_info = {
        "magnitude": float(color.values[0]),
        "deltas": [float(d) for d in deltas],
        "input_means": [float(c) for c in color.extras["input_means"][0]],
        "output_means": [float(c) for c in color.extras["output_means"][0]],
    }
    if not math.isnan(color_info["magnitude"]):
        dr, dg, db = color_info["deltas"]
        rows[-1]["note"] = (
            f"deltas (output - input) R {dr:+.2f} G {dg:+.2f} B {db:+.2f}; a yellow cast is a B drop"
        )
    swatch = (
        swatch_image(color_info["input_means"], color_info["output_means"])
        if not any(math.isnan(c) for c in color_info["output_means"]) and inputs
        else None
    )

    rows.append(_structure(inputs, output, dino_weights, results))
    rows.append(_faces(inputs, output, face_backend, results))
    rows.append(_text(prompt, output, judges, judge_options, results))
    rows.extend(_registered(inputs, output, prompt, judges, judge_options, results))
    table = pd.DataFrame(rows, columns=list(PLAYGROUND_COLUMNS))
    return PlaygroundResult(table=table, color=color_info, swatch=swatch, results=results)


def _structure(
    inputs: list[Any], output: Any, weights: str | None, results: dict[str, MetricResult]
) -> dict[str, Any]:
    from echo_builder.scoring.base import NO_INPUT_IMAGES

    if not inputs:
        return _row("structure_distance", math.nan, NO_INPUT_IMAGES)
    if weights is None:
        return _row("structure_distance", math.nan, NO_DINO_WEIGHTS)
    from echo_builder.scoring.structure import structure_distance

    try:
        result = results["structure_distance"] = structure_distance([inputs], [output], weights=weights)
    except (EchoError, ImportError) as exc:
        return _row("structure_distance", math.nan, _unavailable(exc))
    return _row("structure_distance", result.values[0], result.nan_reasons[0])


def _faces(
    inputs: list[Any], output: Any, backend: str | None, results: dict[str, MetricResult]
) -> dict[str, Any]:
    from echo_builder.scoring.base import NO_INPUT_IMAGES

    if not inputs:
        return _row("face_identity", math.nan, NO_INPUT_IMAGES)
    if backend is None:
        return _row("face_identity", math.nan, "unavailable in this Space: no face backend configured")
    from echo_builder.scoring.faces import face_identity

    try:
        result = results["face_identity"] = face_identity([inputs], [output], backend=backend)
    except (EchoError, ImportError) as exc:
        return _row("face_identity", math.nan, _unavailable(exc))
    extras = result.extras
    if result.nan_reasons[0] is not None:
        note = result.nan_reasons[0]
    else:
        same = extras["same_person"][0]
        note = extras["notes"][0] or (
            f"{extras['n_input_faces'][0]} face(s) in the input, {extras['n_output_faces'][0]} in the output; "
            f"same person by the backend's rule ({extras['same_person_rule']}): {'yes' if same else 'no'}"
        )
    return _row("face_identity", result.values[0], f"{note} [backend {extras['backend']}]")


def _text(
    prompt: str,
    output: Any,
    judges: Sequence[str],
    judge_options: dict[str, dict[str, Any]] | None,
    results: dict[str, MetricResult],
) -> dict[str, Any]:
    if not judges:
        return _row("text_rendering", math.nan, NO_JUDGE)
    if not (prompt or "").strip():
        return _row("text_rendering", math.nan, NO_PROMPT)
    from echo_builder.scoring.text import text_rendering

    try:
        result = results["text_rendering"] = text_rendering(
            [prompt], [output], list(judges), judge_options=judge_options
        )
    except (EchoError, ImportError) as exc:
        return _row("text_rendering", math.nan, _unavailable(exc))
    ratings = ", ".join(
        f"{judge}: {values[0]:g}"
        for judge, values in result.extras.get("ratings", {}).items()
        if values is not None
    )
    return _row("text_rendering", result.values[0], result.nan_reasons[0] or f"judge ratings 1-10: {ratings}")


#: The metrics with their own playground code above; every other registered metric goes through its factory.
_BUILT_IN_ROWS = ("color_shift", "structure_distance", "face_identity", "text_rendering")


def _registered(
    inputs: list[Any],
    output: Any,
    prompt: str,
    judges: Sequence[str],
    judge_options: dict[str, dict[str, Any]] | None,
    results: dict[str, MetricResult],
) -> list[dict[str, Any]]:
    """Rows of the registered metrics other than the four built-ins (plugin metrics), each through its factory
    with its declared option defaults; a metric that cannot run here, or fails, is NaN with the reason."""
    from echo_builder.plugin_deadline import call_with_deadline
    from echo_builder.scoring.base import NO_INPUT_IMAGES
    from echo_builder.scoring.registry import METRICS, metric_definitions

    rows = []
    for definition in metric_definitions():
        name = definition.name
        if name in _BUILT_IN_ROWS:
            continue
        if definition.needs_inputs and not inputs:
            rows.append(_row(name, math.nan, NO_INPUT_IMAGES))
            continue
        if definition.needs_judge and not judges:
            rows.append(
                _row(name, math.nan, f"unavailable in this Space: {name} needs a VLM judge (--judge)")
            )
            continue
        options = {**definition.option_defaults(), "judges": list(judges), "judge_options": judge_options}
        try:
            entry = METRICS.entry(name)
            arguments = ([inputs], [output], [prompt], options)
            if entry.builtin:
                result = definition.load_factory()(*arguments)
            else:  # a plugin's code, under the plugin deadlines: one that never returns is that row's NaN
                factory = call_with_deadline(definition.load_factory, what=f"metric {name!r}", imports=True)
                result = call_with_deadline(factory, *arguments, what=f"metric {name!r} ({entry.origin})")
            if not isinstance(result, MetricResult) or len(result.values) != 1:
                raise EchoError(f"{name} did not return one MetricResult value")
        except Exception as exc:  # a plugin's failure is its own row's NaN, never the playground's
            rows.append(_row(name, math.nan, _unavailable(exc)))
            continue
        results[name] = result
        rows.append(_row(name, result.values[0], result.nan_reasons[0]))
    return rows
