"""``roles``: split a sample's images into inputs and outputs (ECHO Flow 1, "roles").

A VLM sees the prompt and the sample's images, numbered, and answers which are the user's inputs and which the
model's outputs; unrelated images and duplicates are dropped; it also flags fill-in-the-blank templates and
ChatGPT conversation screenshots. Inputs and outputs are mutually exclusive; an index the model invents is
ignored and noted. A sample the model cannot classify keeps its images as they were and records the failure.

The ``rules`` baseline cannot see pixels: byte-identical images (same SHA-256) are duplicates; when the task needs
the user's own photo and there are several images, the first image of the first post is the input and the rest
are outputs, otherwise every image is an output; very tall images on a post that mentions ChatGPT are flagged as
conversation screenshots; fill-in-the-blank comes from the prompt's placeholders.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from echo_builder.backends.base import GenerationParams, Message, TextPart
from echo_builder.backends.caller import CallRequest, ModelCaller
from echo_builder.backends.rules import register_rule
from echo_builder.judge.prompts import quote_slot
from echo_builder.records import MediaRef, Sample
from echo_builder.stages.base import StageFailure, sample_stage
from echo_builder.stages.extract import find_placeholders
from echo_builder.stages.registry import StageContext, StageDefinition, StageOutput, declare_stage

__all__ = ["ROLES_VERSION", "RolesAnswer", "RolesResult", "apply_roles", "rules_roles", "run_roles"]

ROLES_VERSION = "roles-v1"
_SYSTEM = "You sort the images of a social-media post about an image-generation model. Answer with JSON only."
_USER = (
    "Prompt the user gave the model:\n<prompt>\n{prompt}\n</prompt>\n\nThe {n} images above are numbered 0 to {last} "
    "in order. Which images are the user's INPUTS (photos or references given to the model), which are the model's "
    "OUTPUTS, and which are unrelated? Duplicates of an image count once. Is the prompt a fill-in-the-blank template "
    "(placeholders like [x], {{x}}, <x>)? Is any image a screenshot of a ChatGPT conversation?\n"
    'Reply with JSON: {{"inputs": [..], "outputs": [..], "unrelated": [..], "fill_in_the_blank": false, '
    '"conversation_screenshot": false}}'
)
_CHATGPT = re.compile(r"chat ?gpt|chatgpt\.com", re.IGNORECASE)


class RolesAnswer(BaseModel):
    """Image indices by role, and two flags."""

    model_config = ConfigDict(extra="ignore")

    inputs: list[int] = Field(default_factory=list)
    outputs: list[int] = Field(default_factory=list)
    unrelated: list[int] = Field(default_factory=list)
    fill_in_the_blank: bool = False
    conversation_screenshot: bool = False


@dataclass
class RolesResult:
    samples: list[Sample]
    failures: list[StageFailure] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def _images(sample: Sample) -> list[MediaRef]:
    return [*sample.input_images, *sample.output_images]


def _dedupe(images: Sequence[MediaRef]) -> list[int]:
    """Indices of the first occurrence of each image (by SHA-256 when known, else by URL or path)."""
    seen: set[str] = set()
    keep = []
    for i, ref in enumerate(images):
        key = ref.sha256 or ref.url or ref.path or f"#{i}"
        if key not in seen:
            seen.add(key)
            keep.append(i)
    return keep


def rules_roles(sample: Sample) -> RolesAnswer:
    """The rules baseline's roles for one sample (see the module docstring)."""
    images = _images(sample)
    keep = _dedupe(images)
    inputs: list[int] = []
    if sample.needs_input_images and len(keep) > 1 and not sample.input_images:
        inputs = [keep[0]]
    elif sample.input_images:
        inputs = [i for i in keep if i < len(sample.input_images)]
    outputs = [i for i in keep if i not in inputs]
    tall = any(ref.width and ref.height and ref.height / ref.width > 1.8 for ref in images)
    return RolesAnswer(
        inputs=inputs,
        outputs=outputs,
        unrelated=[],
        fill_in_the_blank=bool(find_placeholders(sample.prompt)),
        conversation_screenshot=tall and bool(_CHATGPT.search(sample.prompt)),
    )


register_rule("roles")(rules_roles)


def apply_roles(sample: Sample, answer: RolesAnswer, notes: list[str]) -> Sample:
    """``sample`` with its images re-split by ``answer``; invalid, duplicate or overlapping indices are dropped."""
    images = _images(sample)
    valid = set(_dedupe(images))
    bad = [i for i in (*answer.inputs, *answer.outputs, *answer.unrelated) if i not in range(len(images))]
    if bad:
        notes.append(f"sample {sample.id}: ignored image indices that do not exist: {sorted(set(bad))}")
    inputs = [i for i in dict.fromkeys(answer.inputs) if i in valid]
    outputs = [i for i in dict.fromkeys(answer.outputs) if i in valid and i not in inputs]
    return sample.model_copy(
        update={
            "input_images": tuple(images[i] for i in inputs),
            "output_images": tuple(images[i] for i in outputs),
            "prompt_fill_blank": sample.prompt_fill_blank or answer.fill_in_the_blank,
            "is_screenshot": sample.is_screenshot or answer.conversation_screenshot,
        }
    )


def _request(sample: Sample, store_root: Path | None) -> CallRequest:
    """The roles call of ``sample``, whose images are all in ``store_root`` (the caller checked)."""
    from echo_builder.judge.images import prepare_for_judge

    assert store_root is not None
    parts: list = []
    for ref in _images(sample):
        assert ref.path is not None
        parts.append(prepare_for_judge(store_root / ref.path))
    n = len(parts)
    parts.append(TextPart(_USER.format(prompt=quote_slot(sample.prompt, "prompt"), n=n, last=n - 1)))
    messages = (Message("system", (TextPart(_SYSTEM),)), Message("user", tuple(parts)))
    return CallRequest(
        messages, GenerationParams(max_tokens=512), stage="roles", prompt_version=ROLES_VERSION
    )


def run_roles(
    samples: Sequence[Sample],
    *,
    caller: ModelCaller | None = None,
    store_root: Path | None = None,
    progress: str | None = None,
) -> RolesResult:
    """Re-split every sample's images. Samples without images pass unchanged; ``caller=None`` runs the rules."""
    from echo_builder.judge.overlap import call_structured_overlapped

    result = RolesResult(samples=list(samples))
    pending: list[tuple[int, Sample]] = []
    for i, sample in enumerate(samples):
        if not _images(sample):
            continue
        # the model must see every image; without them the rules baseline decides
        if caller is None or store_root is None or not all(ref.path for ref in _images(sample)):
            result.samples[i] = apply_roles(sample, rules_roles(sample), result.notes)
        else:
            pending.append((i, sample))
    if caller is not None and pending:
        # the images of later samples are prepared while earlier samples' calls are in flight
        answers = call_structured_overlapped(
            caller, [s for _, s in pending], lambda s: _request(s, store_root), RolesAnswer, progress=progress
        )
        for (i, _), answer in zip(pending, answers, strict=True):
            if answer.value is None:
                result.failures.append(
                    StageFailure("roles", samples[i].id, answer.error or "no answer", answer.raw_text)
                )
                continue
            result.samples[i] = apply_roles(samples[i], answer.value, result.notes)
    return result


def run_roles_stage(context: StageContext) -> StageOutput:
    """Re-split each sample's images into inputs and outputs (``context.samples`` replaced)."""
    return sample_stage(context, "roles", run_roles)


STAGE = declare_stage(
    StageDefinition(
        name="roles",
        version=ROLES_VERSION,
        run=run_roles_stage,
        after="media",
        reads=("samples",),
        writes=("samples", "failures"),
        report_fields=("notes",),
        calls_model=True,
        description="tell each sample's input images from the target model's outputs",
    )
)
