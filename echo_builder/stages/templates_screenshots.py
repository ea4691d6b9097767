"""``templates`` and ``screenshots``: two VLM stages that recover prompts the text alone does not give.

- ``templates`` (ECHO Flow 1): a fill-in-the-blank prompt ("a figure of [character] on a desk") is filled from each
  output image, only when the model is confident; every confident fill becomes its own sample with that output
  (``prompt_modified`` true). Unconfident or failed fills leave the template as it was, so tiering sends it to
  Manual Review with the reason ``prompt``.
- ``screenshots``: a grounding VLM (ECHO used Qwen2.5-VL) reads the user's prompt from a ChatGPT conversation
  screenshot and returns input/output image boxes. The screenshot is sent with its long side capped at
  :data:`SCREENSHOT_MAX_LONG_SIDE` px (text stays legible; a phone screenshot keeps a ~1000 px shorter side) and
  sides rounded to multiples of 28; boxes are asked for and read in the backend's ``box_format`` (``pixels`` of the
  image the model saw, ``norm1000`` or ``norm1000_yx``, see :mod:`echo_builder.backends.boxes`) and converted to
  the screenshot's original pixel frame. Each box is shrunk 10 px inward (to cut the UI frame, as ECHO did),
  cropped from the original, and stored content-addressed beside the other media; the boxes stay in the row
  (``input_bboxes``, original pixels). Boxes outside the image are clipped; degenerate or unreadable ones are
  dropped and noted. The build report's ``screenshots`` stage entry records the ``box_format`` used.

Neither stage has a pixel-free rules equivalent: with the ``rules`` backend both leave samples unchanged, and the
dataset card says so.
"""

from __future__ import annotations

import hashlib
import io
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from echo_builder.backends.base import GenerationParams, ImagePart, Message, TextPart, image_part
from echo_builder.backends.caller import CallRequest, ModelCaller
from echo_builder.errors import ImageError
from echo_builder.ids import sample_id
from echo_builder.judge.prompts import quote_slot
from echo_builder.records import BoundingBox, MediaRef, Sample
from echo_builder.stages.base import StageFailure, sample_stage
from echo_builder.stages.registry import StageContext, StageDefinition, StageOutput, declare_stage

__all__ = [
    "CROP_MARGIN_PX",
    "SCREENSHOT_MAX_LONG_SIDE",
    "run_screenshots",
    "run_templates",
    "screenshot_send_size",
]

TEMPLATES_VERSION = "templates-v1"
SCREENSHOTS_VERSION = "screenshots-v2"
CROP_MARGIN_PX = 10


@dataclass
class VlmStageResult:
    samples: list[Sample]
    failures: list[StageFailure] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    #: facts about how the stage read its answers, for the build report (e.g. ``box_format``)
    info: dict[str, Any] = field(default_factory=dict)


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
    from echo_builder.judge.overlap import call_structured_overlapped

    result = VlmStageResult(samples=[])
    jobs: list[tuple[int, int, Path, str]] = []
    for i, sample in enumerate(samples):
        outputs = [o for o in sample.output_images if o.path]
        if caller is None or store_root is None or not sample.prompt_fill_blank or not outputs:
            continue
        seen: set[str | None] = set()
        for k, ref in enumerate(outputs):
            # byte-identical outputs (one image posted twice) fill the same prompt: one sample, not two with one id
            if ref.sha256 is not None and ref.sha256 in seen:
                continue
            seen.add(ref.sha256)
            text = _TEMPLATE_USER.format(prompt=quote_slot(sample.prompt, "template"))
            jobs.append((i, k, store_root / ref.path, text))

    def request(job: tuple[int, int, Path, str]) -> CallRequest:  # runs in the preparation pool
        return _request(_TEMPLATE_SYSTEM, [job[2]], job[3], "templates", TEMPLATES_VERSION)

    answers = (
        call_structured_overlapped(caller, jobs, request, TemplateAnswer, progress=progress)
        if caller and jobs
        else []
    )
    filled: dict[int, list[Sample]] = {}
    for (i, k, _, _), answer in zip(jobs, answers, strict=True):
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
#: longest side (px) of the screenshot the VLM is shown. A phone screenshot (1170 x 2532 at 3x density) keeps a
#: shorter side of about 1036 px, so body text (40-50 px tall at 3x) stays about 36 px tall, well above the ~10 px
#: below which VLMs misread text; a 2880 x 1800 desktop screenshot becomes 2240 x 1400. It is a multiple of 28,
#: the resize step of Qwen2-VL-family processors (14 px patches merged 2 x 2).
SCREENSHOT_MAX_LONG_SIDE = 2240
#: both sides of the screenshot sent are multiples of this, so that a Qwen2.5-VL server (within its default pixel
#: budget) sees the image exactly as sent and its ``pixels`` boxes are in the frame the prompt names
SCREENSHOT_SIZE_MULTIPLE = 28
SCREENSHOT_JPEG_QUALITY = 95


class ScreenshotAnswer(BaseModel):
    """The reply of the screenshots VLM. Boxes are read one by one (:func:`_read_box`): one unreadable box is
    dropped with a note and never costs the prompt or the other boxes."""

    model_config = ConfigDict(extra="ignore")

    prompt: str = ""
    boxes: list[Any] = Field(default_factory=list)


_SHOT_SYSTEM = "You read ChatGPT conversation screenshots precisely. Answer with JSON only."
_SHOT_USER = (
    "The image above is a screenshot of a conversation with an image model. Copy the user's prompt text exactly. "
    "Give the box {box_format} of every image the user uploaded (role input) and every image the model "
    "generated (role output). Reply with JSON: "
    '{{"prompt": "...", "boxes": [{{"role": "output", "bbox": [{order}]}}]}}'
)
_BOX_KEYS = ("bbox", "bbox_2d", "box_2d", "box")  # ours, then Qwen2.5-VL's and Gemini's own names


def screenshot_send_size(width: int, height: int) -> tuple[int, int]:
    """(width, height) a ``width`` x ``height`` screenshot is sent at: long side at most
    :data:`SCREENSHOT_MAX_LONG_SIDE` (never enlarged beyond rounding), both sides rounded to the nearest multiple of
    :data:`SCREENSHOT_SIZE_MULTIPLE` (at least one multiple)."""
    scale = min(1.0, SCREENSHOT_MAX_LONG_SIDE / max(width, height))
    step = SCREENSHOT_SIZE_MULTIPLE
    return (max(step, round(width * scale / step) * step), max(step, round(height * scale / step) * step))


def _screenshot_part(image: Any) -> tuple[ImagePart, tuple[int, int]]:
    from PIL import Image

    size = screenshot_send_size(*image.size)
    sent = image if size == image.size else image.resize(size, Image.Resampling.LANCZOS)
    buf = io.BytesIO()
    sent.save(buf, format="JPEG", quality=SCREENSHOT_JPEG_QUALITY)
    return image_part(buf.getvalue(), mime_type="image/jpeg"), size


def _read_box(raw: Any) -> tuple[str, list[Any]]:
    """(role, four numbers) of one box of the reply; raises ValueError when it is not readable."""
    if not isinstance(raw, dict):
        raise ValueError("not an object")
    role = raw.get("role", raw.get("label"))
    if role not in ("input", "output"):
        raise ValueError(f"role {role!r} is neither input nor output")
    numbers = next((raw[k] for k in _BOX_KEYS if k in raw), None)
    if not isinstance(numbers, list) or len(numbers) != 4:
        raise ValueError("no box of four numbers")
    if not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in numbers):
        raise ValueError("a coordinate is not a number")
    return role, numbers


def _crop(original: Any, box: BoundingBox, store_root: Path) -> MediaRef | None:
    x1, y1 = box.x1 + CROP_MARGIN_PX, box.y1 + CROP_MARGIN_PX
    x2, y2 = box.x2 - CROP_MARGIN_PX, box.y2 - CROP_MARGIN_PX
    if x2 - x1 < 1 or y2 - y1 < 1:
        return None
    crop = original.crop((round(x1), round(y1), round(x2), round(y2)))
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
    """Read prompt and image boxes from every conversation screenshot; crops join the sample's images.

    Each screenshot (decoded with EXIF orientation applied, as :func:`echo_builder.imaging.load_rgb` does) is
    sent at :func:`screenshot_send_size`, and the VLM is asked for boxes in its backend's ``box_format``
    (:mod:`echo_builder.backends.boxes`); ``pixels`` boxes are read in the frame the model saw
    (:meth:`~echo_builder.backends.base.Backend.vision_frame`). Boxes are converted to the original screenshot's
    pixels, rounded to whole pixels, clipped, shrunk :data:`CROP_MARGIN_PX` inward and cropped from the original.
    ``info`` records ``box_format`` and the sending size for the build report. An unreadable screenshot is a
    failure of its sample only.
    """
    from echo_builder.backends.boxes import box_format_prompt, resolve_box_format, to_original_frame
    from echo_builder.imaging import load_rgb
    from echo_builder.judge.overlap import call_structured_overlapped

    result = VlmStageResult(samples=list(samples))
    backend = getattr(caller, "backend", None)
    fmt = (
        backend.box_format
        if backend is not None
        else resolve_box_format(None, "")  # no model: nothing is read, the default is only reported
    )
    if caller is not None:
        result.info = {
            "box_format": fmt,
            "screenshot_max_long_side_px": SCREENSHOT_MAX_LONG_SIDE,
            "screenshot_size_multiple_px": SCREENSHOT_SIZE_MULTIPLE,
        }
    order = "ymin, xmin, ymax, xmax" if fmt == "norm1000_yx" else "x1, y1, x2, y2"
    jobs: list[tuple[int, int, Path]] = []  # (job number, sample index, screenshot)
    for i, sample in enumerate(samples):
        shots = [o for o in (*sample.input_images, *sample.output_images) if o.path]
        if caller is None or store_root is None or not sample.is_screenshot or not shots:
            continue
        jobs.append((len(jobs), i, store_root / shots[0].path))
    frames: dict[int, tuple[tuple[int, int], tuple[int, int]]] = {}  # job -> (original size, frame sent)

    def request(job: tuple[int, int, Path]) -> CallRequest | StageFailure:  # runs in the preparation pool
        k, i, path = job
        try:
            image = load_rgb(path)
            part, sent = _screenshot_part(image)
        except (ImageError, OSError) as exc:
            return StageFailure("screenshots", samples[i].id, f"unreadable screenshot: {exc}")
        frame = backend.vision_frame(*sent) if backend is not None and fmt == "pixels" else sent
        frames[k] = (image.size, frame)
        text = _SHOT_USER.format(box_format=box_format_prompt(fmt, frame), order=order)  # type: ignore[arg-type]
        return CallRequest(
            (Message("system", (TextPart(_SHOT_SYSTEM),)), Message("user", (part, TextPart(text)))),
            GenerationParams(max_tokens=1024),
            stage="screenshots",
            prompt_version=SCREENSHOTS_VERSION,
        )

    answers: list[Any] = (
        call_structured_overlapped(caller, jobs, request, ScreenshotAnswer, progress=progress)
        if caller and jobs
        else []
    )
    # unreadable screenshots first, in sample order, as when every image was read before the calls
    result.failures += [answer for answer in answers if isinstance(answer, StageFailure)]
    for (k, i, path), answer in zip(jobs, answers, strict=True):
        if isinstance(answer, StageFailure):
            continue
        (width, height), frame = frames[k]
        sample = samples[i]
        if answer.value is None:
            result.failures.append(
                StageFailure("screenshots", sample.id, answer.error or "no answer", answer.raw_text)
            )
            continue
        try:
            original = load_rgb(path)
        except (ImageError, OSError) as exc:  # changed on disk since it was sent
            result.failures.append(StageFailure("screenshots", sample.id, f"unreadable screenshot: {exc}"))
            continue
        boxes, inputs, outputs = [], [], []
        for raw in answer.value.boxes:
            try:
                role, numbers = _read_box(raw)
                x1, y1, x2, y2 = to_original_frame(
                    numbers,
                    fmt,  # type: ignore[arg-type]
                    frame=frame,
                    original=(width, height),
                )
            except ValueError as exc:
                result.notes.append(f"sample {sample.id}: dropped an unreadable box {str(raw)[:120]} ({exc})")
                continue
            x1, x2 = float(max(0, round(x1))), float(min(width, round(x2)))
            y1, y2 = float(max(0, round(y1))), float(min(height, round(y2)))
            if x2 - x1 <= 2 * CROP_MARGIN_PX or y2 - y1 <= 2 * CROP_MARGIN_PX:
                result.notes.append(f"sample {sample.id}: dropped a degenerate {role} box {numbers} ({fmt})")
                continue
            box = BoundingBox(x1=x1, y1=y1, x2=x2, y2=y2, role=role)  # type: ignore[arg-type]
            crop = _crop(original, box, store_root)  # type: ignore[arg-type]
            if crop is None:
                continue
            boxes.append(box)
            (inputs if role == "input" else outputs).append(crop)
        update: dict = {"input_bboxes": tuple(boxes)}
        if inputs:
            update["input_images"] = tuple(inputs)
        if outputs:
            update["output_images"] = tuple(outputs)
        if answer.value.prompt.strip():
            update["prompt"] = answer.value.prompt.strip()
        result.samples[i] = sample.model_copy(update=update)
    return result


def run_templates_stage(context: StageContext) -> StageOutput:
    """Fill each fill-in-the-blank prompt from its outputs (``context.samples`` replaced)."""
    return sample_stage(context, "templates", run_templates)


def run_screenshots_stage(context: StageContext) -> StageOutput:
    """Read prompts and image boxes from conversation screenshots (``context.samples`` replaced)."""
    return sample_stage(context, "screenshots", run_screenshots)


# two stages of one module: they share the VLM request helpers above
TEMPLATES_STAGE = declare_stage(
    StageDefinition(
        name="templates",
        version=TEMPLATES_VERSION,
        run=run_templates_stage,
        after="roles",
        reads=("samples",),
        writes=("samples", "failures"),
        report_fields=("notes",),
        calls_model=True,
        description="fill each fill-in-the-blank prompt from the images it produced",
    )
)
SCREENSHOTS_STAGE = declare_stage(
    StageDefinition(
        name="screenshots",
        version=SCREENSHOTS_VERSION,
        run=run_screenshots_stage,
        after="templates",
        reads=("samples",),
        writes=("samples", "failures"),
        report_fields=("notes", "box_format", "screenshot_max_long_side_px", "screenshot_size_multiple_px"),
        calls_model=True,
        description="read prompts and image boxes from conversation screenshots and crop the images",
    )
)
