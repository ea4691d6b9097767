"""Hostile-corpus flows of the offline models (issue 21): ``text_accuracy`` with the real PP-OCRv4 weights on a
hostile output image, or on a hostile prompt, beside a sample that must still be scored."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from PIL import Image, ImageDraw, ImageFont

from tests.reliability.hostile_workspace import Observed, Workspace

_FONT = Path("/usr/share/fonts/truetype/dejavu/DejaVuSans-Bold.ttf")
_PROMPT = 'a shop sign reading "OPEN"'


def _sign() -> Image.Image:
    """A clean rendering of the sign's text: the sample beside the hostile one, which must score 1.0."""
    if not _FONT.is_file():
        pytest.skip(f"no DejaVu Sans Bold at {_FONT} to render the sign")
    image = Image.new("RGB", (320, 160), (250, 248, 240))
    ImageDraw.Draw(image).text((40, 40), "OPEN", font=ImageFont.truetype(str(_FONT), 60), fill=(20, 20, 20))
    return image


def _score(ws: Workspace, prompts: list[Any], outputs: list[Any]) -> Observed:
    pytest.importorskip("rapidocr_onnxruntime", reason="the ocr extra is not installed")
    from echo_builder.scoring.text_accuracy import text_accuracy

    ws.begin()
    try:
        result = text_accuracy(prompts, outputs)
    except BaseException as exc:  # the test reports it: a hostile sample must not stop the run
        return Observed(None, f"{type(exc).__name__}: {exc}", exc, {}, lambda where: "")
    facts = {
        "value": float(result.values[0]),
        "other_value": float(result.values[1]),
        "n_required": len(result.extras["required"][0]),
    }
    reason = result.nan_reasons[0] or ""
    return Observed(0, "", None, facts, lambda where: reason)


def flow_text_accuracy(case: dict[str, Any], ws: Workspace) -> Observed:
    """``text_accuracy`` where sample 0's output image is ``file`` (the NaN reason is recorded under ``where:
    nan_reason``) and sample 1 is a clean rendering of the prompt's text."""
    sign = _sign()
    return _score(ws, [_PROMPT, _PROMPT], [ws.source(case["file"]), sign])


def flow_text_accuracy_prompt(case: dict[str, Any], ws: Workspace) -> Observed:
    """``text_accuracy`` where sample 0's prompt is ``input.prefix + input.prompt * input.repeat + input.suffix``
    (repeat defaults to 1, prefix and suffix to ""), over the clean sign; sample 1 is the usual prompt over it."""
    sign = _sign()
    given = case["input"]
    prompt = given.get("prefix", "") + given["prompt"] * int(given.get("repeat", 1)) + given.get("suffix", "")
    return _score(ws, [prompt, _PROMPT], [sign, sign])
