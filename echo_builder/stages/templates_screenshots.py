"""``templates`` and ``screenshots``: two VLM stages that recover prompts the text alone does not give.

- ``templates`` (ECHO Flow 1): a fill-in-the-blank prompt ("a figure of [character] on a desk") is filled from each
  output image, only when the model is confident; every confident fill becomes its own sample with that output
  (``prompt_modified`` true). Unconfident or failed fills leave the template as it was, so tiering sends it to
  Manual Review with the reason ``prompt``.
- ``screenshots``: a grounding VLM (ECHO used Qwen2.5-VL) reads the user's prompt from a ChatGPT conversation
  screenshot and returns input/output image boxes ``[x1, y1, x2, y2]`` in the screenshot's original pixel frame.
  Each box is shrunk 10 px inward (to cut the UI frame, as ECHO did), cropped, and stored content-addressed beside
  the other media; the boxes stay in the row (``input_bboxes``). Boxes outside the image are clipped; degenerate
  ones are dropped and noted.

Neither stage has a pixel-free rules equivalent: with the ``rules`` backend both leave samples unchanged, and the
dataset card says so.
"""

from __future__ import annotations

import hashlib
import io
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from echo_builder.backends.base import GenerationParams, Message, TextPart
from echo_builder.backends.caller import CallRequest, ModelCaller
from echo_builder.errors import ImageError
from echo_builder.ids import sample_id
from echo_builder.judge.prompts import quote_slot
from echo_builder.records import BoundingBox, MediaRef, Sample
from echo_builder.stages.base import StageFailure

__all__ = ["CROP_MARGIN_PX", "run_screenshots", "run_templates"]

TEMPLATES_VERSION = "templates-v1"
SCREENSHOTS_VERSION = "screenshots-v1"
CROP_MARGIN_PX = 10


@dataclass
class VlmStageResult:
    samples: list[Sample]
    failures: list[StageFailure] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def _request(system: str, images: Sequence[Path], text: str, stage: str, version: str) -> CallRequest:
    from echo_builder.judge.images import prepare_for_judge

    parts = [*(prepare_for_judge(p) for p in images), TextPart(text)]
    return CallRequest(
        (Message("system", (TextPart(system),)), Message("user", tuple(parts))),
        GenerationParams(max_tokens=1024),
        stage=stage,
        prompt_version=version,
    )


# -- templates --------------------------------------------------------------------------------------------------------
class TemplateAnswer(BaseModel):
    model_config = ConfigDict(extra="ignore")

    filled_prompt: str
    confident: bool = False


_TEMPLATE_SYSTEM = (
    "You fill in fill-in-the-blank image prompts from the image they produced. Answer with JSON only."
)
_TEMPLATE_USER = (
    "This prompt template was used to make the image above:\n<template>\n{prompt}\n</template>\n\nReplace each "
    "placeholder ([x], {{x}}, <x>, 【x】) with what the image shows, keeping every other word exactly. Say whether you "
    'are confident. Reply with JSON: {{"filled_prompt": "...", "confident": true}}'
)


def run_templates(
    samples: Sequence[Sample],
    *,
    caller: ModelCaller | None,
    store_root: Path | None,
    progress: str | None = None,
) -> VlmStageResult:
    """Fill every fill-in-the-blank sample from each of its outputs (see the module docstring)."""
    result = VlmStageResult(samples=[])
    jobs: list[tuple[int, int, CallRequest]] = []
    for i, sample in enumerate(samples):
        outputs = [o for o in sample.output_images if o.path]
        if caller is None or store_root is None or not sample.prompt_fill_blank or not outputs:
            continue
        for k, ref in enumerate(outputs):
            text = _TEMPLATE_USER.format(prompt=quote_slot(sample.prompt, "template"))
            jobs.append(
                (
                    i,
                    k,
                    _request(_TEMPLATE_SYSTEM, [store_root / ref.path], text, "templates", TEMPLATES_VERSION),
                )
            )
    answers = (
        caller.call_structured_many([j[2] for j in jobs], TemplateAnswer, progress=progress)
        if caller and jobs
        else []
    )
    filled: dict[int, list[Sample]] = {}
    for (i, k, _), answer in zip(jobs, answers, strict=True):
        sample = samples[i]
        if answer.value is None:
            result.failures.append(
                StageFailure("templates", sample.id, answer.error or "no answer", answer.raw_text)
            )
            continue
        if not answer.value.confident or not answer.value.filled_prompt.strip():
            result.notes.append(f"sample {sample.id}: output {k} not filled (not confident)")
            continue
        output = [o for o in sample.output_images if o.path][k]
        filled.setdefault(i, []).append(
            sample.model_copy(
                update={
                    "id": sample_id(
                        sample.source_post_ids or [f"web:{sample.id}"], salt=f"template-{output.sha256}"
                    ),
                    "prompt": answer.value.filled_prompt.strip(),
                    "prompt_modified": True,
                    "output_images": (output,),
                }
            )
        )
    for i, sample in enumerate(samples):
        result.samples.extend(filled.get(i, [sample]))
    return result


# -- screenshots ------------------------------------------------------------------------------------------------------
class ScreenshotBox(BaseModel):
    model_config = ConfigDict(extra="ignore")

    role: Literal["input", "output"]
    bbox: list[float] = Field(min_length=4, max_length=4)


class ScreenshotAnswer(BaseModel):
    model_config = ConfigDict(extra="ignore")

    prompt: str = ""
    boxes: list[ScreenshotBox] = Field(default_factory=list)


_SHOT_SYSTEM = "You read ChatGPT conversation screenshots precisely. Answer with JSON only."
_SHOT_USER = (
    "The image above is a screenshot of a conversation with an image model; it is {width} x {height} pixels. "
    "Copy the user's prompt text exactly. Give the box [x1, y1, x2, y2] in pixels of this screenshot of every image "
    "the user uploaded (role input) and every image the model generated (role output). Reply with JSON: "
    '{{"prompt": "...", "boxes": [{{"role": "output", "bbox": [x1, y1, x2, y2]}}]}}'
)


def _crop(screenshot: Path, box: BoundingBox, store_root: Path) -> MediaRef | None:
    from echo_builder.imaging import load_rgb

    x1, y1 = box.x1 + CROP_MARGIN_PX, box.y1 + CROP_MARGIN_PX
    x2, y2 = box.x2 - CROP_MARGIN_PX, box.y2 - CROP_MARGIN_PX
    if x2 - x1 < 1 or y2 - y1 < 1:
        return None
    img = load_rgb(screenshot, name=str(screenshot))  # the size the VLM was told (EXIF orientation applied)
    crop = img.crop((round(x1), round(y1), round(x2), round(y2)))
    buf = io.BytesIO()
    crop.save(buf, format="PNG")
    data = buf.getvalue()
    sha = hashlib.sha256(data).hexdigest()
    relative = Path(sha[:2]) / f"{sha}.png"
    target = store_root / relative
    if not target.exists():
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.with_suffix(".tmp")
        tmp.write_bytes(data)
        tmp.replace(target)
    return MediaRef(type="image", sha256=sha, path=str(relative), width=crop.width, height=crop.height)


def run_screenshots(
    samples: Sequence[Sample],
    *,
    caller: ModelCaller | None,
    store_root: Path | None,
    progress: str | None = None,
) -> VlmStageResult:
    """Read prompt and image boxes from every conversation screenshot; crops join the sample's images."""
    from echo_builder.imaging import open_image

    result = VlmStageResult(samples=list(samples))
    jobs: list[tuple[int, Path, tuple[int, int], CallRequest]] = []
    for i, sample in enumerate(samples):
        shots = [o for o in (*sample.input_images, *sample.output_images) if o.path]
        if caller is None or store_root is None or not sample.is_screenshot or not shots:
            continue
        path = store_root / shots[0].path
        try:
            size = open_image(path, name=shots[0].path).size  # as the VLM sees it (EXIF orientation applied)
        except ImageError as exc:
            result.failures.append(StageFailure("screenshots", sample.id, str(exc)))
            continue
        text = _SHOT_USER.format(width=size[0], height=size[1])
        jobs.append((i, path, size, _request(_SHOT_SYSTEM, [path], text, "screenshots", SCREENSHOTS_VERSION)))
    answers = (
        caller.call_structured_many([j[3] for j in jobs], ScreenshotAnswer, progress=progress)
        if caller and jobs
        else []
    )
    for (i, path, (width, height), _), answer in zip(jobs, answers, strict=True):
        sample = samples[i]
        if answer.value is None:
            result.failures.append(
                StageFailure("screenshots", sample.id, answer.error or "no answer", answer.raw_text)
            )
            continue
        boxes, inputs, outputs = [], [], []
        for raw in answer.value.boxes:
            x1, y1, x2, y2 = raw.bbox
            x1, x2 = max(0.0, min(x1, x2)), min(float(width), max(x1, x2))
            y1, y2 = max(0.0, min(y1, y2)), min(float(height), max(y1, y2))
            if x2 - x1 <= 2 * CROP_MARGIN_PX or y2 - y1 <= 2 * CROP_MARGIN_PX:
                result.notes.append(f"sample {sample.id}: dropped a degenerate {raw.role} box {raw.bbox}")
                continue
            box = BoundingBox(x1=x1, y1=y1, x2=x2, y2=y2, role=raw.role)
            crop = _crop(path, box, store_root)  # type: ignore[arg-type]
            if crop is None:
                continue
            boxes.append(box)
            (inputs if raw.role == "input" else outputs).append(crop)
        update: dict = {"input_bboxes": tuple(boxes)}
        if inputs:
            update["input_images"] = tuple(inputs)
        if outputs:
            update["output_images"] = tuple(outputs)
        if answer.value.prompt.strip():
            update["prompt"] = answer.value.prompt.strip()
        result.samples[i] = sample.model_copy(update=update)
    return result
