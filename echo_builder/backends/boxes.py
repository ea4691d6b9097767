"""Box conventions of grounding VLMs: in which frame a model writes the boxes it finds, and the way back.

Grounding models do not agree on what ``[a, b, c, d]`` means:

============== ========================================================= ==========================================
``box_format`` a box is                                                  models (default by name)
============== ========================================================= ==========================================
``pixels``     ``[x1, y1, x2, y2]`` in absolute pixels of the image the  Qwen2.5-VL; every model not listed here
               model saw (for Qwen2.5-VL: after its own resize to
               multiples of 28 within its min/max pixels)
``norm1000``   ``[x1, y1, x2, y2]`` scaled to 0-1000 on both axes        Qwen2-VL, Qwen3-VL
``norm1000_yx`` ``[ymin, xmin, ymax, xmax]`` scaled to 0-1000            Gemini
============== ========================================================= ==========================================

Sources: the Qwen2.5-VL technical report (arXiv 2502.13923, Sec. 2.1: absolute coordinates on the resized
image), the Qwen2-VL and Qwen3-VL model cards (relative coordinates in [0, 1000)), and Google's Gemini
object-detection guide (``box_2d`` as ``[ymin, xmin, ymax, xmax]`` normalised to 0-1000).

Backends take the convention as the option ``box_format`` (``-o box_format=norm1000``); without it,
:func:`default_box_format` picks one from the model's name. :func:`to_original_frame` turns a box read in that
convention into pixels of the original image.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Literal, get_args

from echo_builder.errors import ConfigError

__all__ = [
    "BOX_FORMATS",
    "BoxFormat",
    "box_format_prompt",
    "default_box_format",
    "resolve_box_format",
    "to_original_frame",
]

BoxFormat = Literal["pixels", "norm1000", "norm1000_yx"]
BOX_FORMATS: tuple[str, ...] = get_args(BoxFormat)

# Checked in order on the lower-cased model name (or the model_type of a local folder's config.json).
_FAMILIES: tuple[tuple[re.Pattern[str], BoxFormat], ...] = (
    (re.compile(r"qwen[-_ ]?2[._-]?5[-_ ]?vl"), "pixels"),
    (re.compile(r"qwen[-_ ]?[23][-_ ]?vl"), "norm1000"),
    (re.compile(r"gemini"), "norm1000_yx"),
)


def _model_type(target: str) -> str:
    """``model_type`` from ``<target>/config.json`` when ``target`` is a local model folder, else ``""``."""
    try:
        config = Path(target) / "config.json"
        if config.is_file():
            value = json.loads(config.read_text(encoding="utf-8")).get("model_type", "")
            return value if isinstance(value, str) else ""
    except (OSError, ValueError):
        pass
    return ""


def default_box_format(model: str) -> BoxFormat:
    """The box convention of a model by family name: ``pixels`` for Qwen2.5-VL, ``norm1000`` for Qwen2-VL and
    Qwen3-VL, ``norm1000_yx`` for Gemini, ``pixels`` otherwise.

    ``model`` is a model name or Hub id (``Qwen/Qwen2.5-VL-7B-Instruct``, ``gemini-2.5-flash``) or a local folder;
    a folder's ``config.json`` ``model_type`` (``qwen2_vl``, ``qwen2_5_vl``, ...) is read when the name says nothing.
    """
    for name in (model.lower(), _model_type(model).lower()):
        for pattern, fmt in _FAMILIES:
            if pattern.search(name):
                return fmt
    return "pixels"


def resolve_box_format(option: str | None, model: str) -> BoxFormat:
    """``option`` when given (validated), else :func:`default_box_format` of ``model``.

    Raises :class:`ConfigError` for a value other than ``pixels``, ``norm1000`` or ``norm1000_yx``.
    """
    if option is None:
        return default_box_format(model)
    if option not in BOX_FORMATS:
        raise ConfigError(f"box_format must be one of {', '.join(BOX_FORMATS)}, got {option!r}")
    return option  # type: ignore[return-value]


def box_format_prompt(fmt: BoxFormat, frame: tuple[int, int]) -> str:
    """How to ask a model for a box in convention ``fmt``; ``frame`` is (width, height) of the image it sees."""
    if fmt == "norm1000":
        return (
            "[x1, y1, x2, y2] with coordinates normalised to 0-1000 (0 is the left or top edge of the image, "
            "1000 the right or bottom edge)"
        )
    if fmt == "norm1000_yx":
        return (
            "[ymin, xmin, ymax, xmax] with coordinates normalised to 0-1000 (0 is the top or left edge of the "
            "image, 1000 the bottom or right edge)"
        )
    return (
        f"[x1, y1, x2, y2] in absolute pixels of this {frame[0]} x {frame[1]} image (origin at the top left, "
        "x to the right, y down)"
    )


def to_original_frame(
    box: Sequence[float], fmt: BoxFormat, *, frame: tuple[int, int], original: tuple[int, int]
) -> tuple[float, float, float, float]:
    """Convert a box read in convention ``fmt`` to ``(x1, y1, x2, y2)`` in pixels of the original image.

    Args:
        box: the four numbers the model wrote, in the order of its convention.
        fmt: ``pixels``, ``norm1000`` or ``norm1000_yx``.
        frame: (width, height) in pixels of the image the model saw; used by ``pixels`` only.
        original: (width, height) in pixels of the original image.

    Returns the corners sorted (``x1 <= x2``, ``y1 <= y2``), not clipped: a box partly outside the image stays so.
    Raises :class:`ValueError` when ``box`` does not hold four finite numbers.
    """
    if len(box) != 4:
        raise ValueError(f"a box has 4 numbers, got {len(box)}")
    values = [float(v) for v in box]
    if not all(math.isfinite(v) for v in values):
        raise ValueError(f"box has a non-finite coordinate: {list(box)}")
    width, height = original
    if fmt == "norm1000_yx":
        y1, x1, y2, x2 = values
        sx, sy = width / 1000.0, height / 1000.0
    elif fmt == "norm1000":
        x1, y1, x2, y2 = values
        sx, sy = width / 1000.0, height / 1000.0
    elif fmt == "pixels":
        x1, y1, x2, y2 = values
        sx, sy = width / frame[0], height / frame[1]
    else:
        raise ConfigError(f"box_format must be one of {', '.join(BOX_FORMATS)}, got {fmt!r}")
    xs, ys = sorted((x1 * sx, x2 * sx)), sorted((y1 * sy, y2 * sy))
    return xs[0], ys[0], xs[1], ys[1]
