"""``tier`` and ``applicability``: the final quality label, and which fine-grained metrics apply (ECHO Flow 1).

Tier: Benchmark / Analysis / Manual Review (always with the reason: ``prompt``, ``input image`` or
``output image``) / Discard. A sample the extract stage labelled Analysis (a discussion of the model rather than
a reproducible task) keeps the tier Analysis: it is not a sample with something to review. Routing (see
:func:`route`): Benchmark with inputs -> ``image_to_image``, without -> ``text_to_image``; Analysis and Manual
Review -> ``analysis``; Trash / Discard are dropped and counted. The structural checks are rules that
hold whoever labels the sample: a sample without a usable output image cannot be Benchmark, nor a task that
needs the user's photo when no input image was found, nor an unfilled template or an unread screenshot.

Applicability: face identity preservation, structure preservation and no color shift expected (image-to-image),
text rendering (text-to-image). A classifier failure is ``None`` (unknown), never ``False`` ("not applicable").
The ``rules`` baseline reads the prompt: person words for faces; edits that keep the layout for structure; asked
color, lighting or style changes for color; quoted text or text words for text rendering. Where the prompt says
nothing it answers ``None`` rather than guess.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, model_validator

from echo_builder.backends.base import GenerationParams, Message, TextPart
from echo_builder.backends.caller import CallRequest, ModelCaller
from echo_builder.backends.rules import register_rule
from echo_builder.judge.prompts import quote_slot
from echo_builder.records import ApplicabilityFlags, ReviewReason, Sample, Tier
from echo_builder.stages.base import StageFailure
from echo_builder.stages.registry import StageContext, StageDefinition, StageOutput, declare_stage

__all__ = [
    "APPLICABILITY_VERSION",
    "route",
    "rules_applicability",
    "run_applicability",
    "run_tier",
    "structural_tier",
]

APPLICABILITY_VERSION = "applicability-v1"

_PERSON = re.compile(
    r"(?<![^\W_])(person|people|man|woman|girl|boy|child|kid|baby|face|faces|portrait|selfie|me|my "
    r"face|couple|family|friend|wife|husband|daughter|son|mom|dad|mother|father|photo of (?:me|us|myself)|"
    r"headshot|character|人物|人|照片里的人)(?![^\W_])",
    re.IGNORECASE,
)
_KEEP_LAYOUT = re.compile(
    r"(?<![^\W_])(change|replace|add|remove|recolou?r|turn|make|convert|restyle|redraw|"
    r"transform|edit|put|swap|keep|改|换|加|去掉|转换)",
    re.IGNORECASE,
)
_COLOR_CHANGE = re.compile(
    r"(?<![^\W_])(colou?r|colou?rize|tint|hue|lighting|sunset|night|black and white|"
    r"grayscale|sepia|palette|warm|cool tone|style|ghibli|anime|cartoon|painting|风格|颜色)",
    re.IGNORECASE,
)
_TEXT = re.compile(
    r"[\"“「『][^\"”」』]{1,200}[\"”」』]|(?<![^\W_])(text|says|saying|reads|title|headline|caption|"
    r"slogan|sign|poster|logo|label|banner|typography|letters|words|文字|标语|字)(?![^\W_])",
    re.IGNORECASE,
)


def route(sample: Sample) -> str | None:
    """The config a sample lands in: ``image_to_image``, ``text_to_image``, ``analysis``, or ``None`` (dropped).

    One rule for the whole package: :func:`echo_dataset.rows.route_sample_dict`, which the dataset writer uses.
    """
    from echo_dataset.rows import route_sample_dict

    return route_sample_dict(sample.model_dump(mode="json"))


def structural_tier(sample: Sample) -> tuple[Tier, ReviewReason | None]:
    """The tier the structure of a sample allows: Discard (quality Trash), Analysis (quality Analysis), Manual
    Review with its reason (ECHO's three) or Benchmark. The reason is ``None`` exactly when the tier is not
    Manual Review."""
    if sample.quality == "Trash":
        return "Discard", None
    if sample.quality == "Analysis":
        return "Analysis", None
    if not any(ref.sha256 or ref.path for ref in sample.output_images):
        return "Manual Review", "output image"
    if sample.needs_input_images and not sample.input_images:
        return "Manual Review", "input image"
    if sample.prompt_fill_blank and not sample.prompt_modified:
        return "Manual Review", "prompt"
    if sample.is_screenshot and not sample.prompt.strip():
        return "Manual Review", "prompt"
    return "Benchmark", None


class TierAnswer(BaseModel):
    """A VLM's tier for one sample, with the review reason for Manual Review (an answer of Manual Review without
    a reason does not validate: it counts as a failed answer and the structural tier stays)."""

    model_config = ConfigDict(extra="ignore")

    tier: Literal["Benchmark", "Manual Review", "Discard"]
    review: ReviewReason | None = None

    @model_validator(mode="after")
    def _reason(self) -> TierAnswer:
        if self.tier == "Manual Review" and self.review is None:
            raise ValueError('"Manual Review" needs "review": "prompt", "input image" or "output image"')
        return self


TIER_VERSION = "tier-v1"
_TIER_SYSTEM = "You are the last quality check of an image-generation benchmark. Answer with JSON only."
_TIER_USER = (
    "Prompt:\n<prompt>\n{prompt}\n</prompt>\n\nThe first {n_in} image(s) above are the user's inputs, the rest the "
    "model's outputs. Is this a good benchmark sample: a clear, self-contained prompt, inputs that match it, and an "
    "output the prompt produced? Answer Benchmark, Manual Review (say what to review: prompt, input image or output "
    'image) or Discard. Reply with JSON: {{"tier": "Benchmark", "review": null}}'
)


@dataclass
class TierResult:
    samples: list[Sample]
    failures: list[StageFailure] = field(default_factory=list)


def run_tier(
    samples: Sequence[Sample],
    *,
    caller: ModelCaller | None = None,
    store_root: Path | None = None,
    progress: str | None = None,
) -> TierResult:
    """Every sample with its final ``tier`` and ``review`` reason.

    The structural rules decide first; a VLM (when given) then re-checks the samples they let through as Benchmark
    and may demote them, never promote a sample the rules stopped. A failed VLM answer keeps the structural tier
    and is recorded.
    """
    from echo_builder.judge.images import prepare_for_judge
    from echo_builder.judge.overlap import call_structured_overlapped

    result = TierResult(samples=[])
    pending: list[tuple[int, Sample]] = []
    for i, sample in enumerate(samples):
        tier, reason = structural_tier(sample)
        result.samples.append(sample.model_copy(update={"tier": tier, "review": reason}))
        refs = [*sample.input_images, *sample.output_images]
        if caller is None or store_root is None or tier != "Benchmark" or not all(r.path for r in refs):
            continue
        pending.append((i, sample))

    def request(
        sample: Sample,
    ) -> CallRequest:  # runs in the preparation pool while other calls are in flight
        assert store_root is not None
        refs = [*sample.input_images, *sample.output_images]
        parts = [*(prepare_for_judge(store_root / r.path) for r in refs if r.path)]
        parts.append(
            TextPart(
                _TIER_USER.format(prompt=quote_slot(sample.prompt, "prompt"), n_in=len(sample.input_images))
            )
        )
        messages = (Message("system", (TextPart(_TIER_SYSTEM),)), Message("user", tuple(parts)))
        return CallRequest(
            messages, GenerationParams(max_tokens=256), stage="tier", prompt_version=TIER_VERSION
        )

    if caller is not None and pending:
        answers = call_structured_overlapped(
            caller, [s for _, s in pending], request, TierAnswer, progress=progress
        )
        for (i, _), answer in zip(pending, answers, strict=True):
            if answer.value is None:
                result.failures.append(
                    StageFailure("tier", samples[i].id, answer.error or "no answer", answer.raw_text)
                )
                continue
            review = answer.value.review if answer.value.tier == "Manual Review" else None
            result.samples[i] = result.samples[i].model_copy(
                update={"tier": answer.value.tier, "review": review}
            )
    return result


register_rule("tier")(structural_tier)


# -- applicability ---------------------------------------------------------------------------------------------------
class ApplicabilityAnswer(BaseModel):
    """The classifier's answer; a field it leaves out stays unknown."""

    model_config = ConfigDict(extra="ignore")

    face_identity: bool | None = None
    structure: bool | None = None
    no_color_shift: bool | None = None
    text_rendering: bool | None = None


_SYSTEM = (
    "You decide which automatic metrics apply to an image-generation benchmark sample. Answer with JSON only."
)
_USER = (
    "Prompt:\n<prompt>\n{prompt}\n</prompt>\n\nThe images above are the user's input image(s), if any. Answer with "
    "true or false:\n- face_identity: an input shows a person's face whose identity the output should keep\n"
    "- structure: the output should keep the input's layout (positions of things)\n- no_color_shift: the output "
    "should keep the input's colors (the prompt does not ask for a color, lighting or style change)\n"
    "- text_rendering: the prompt asks for specific text to appear in the image\n"
    'Reply with JSON: {{"face_identity": false, "structure": false, "no_color_shift": false, "text_rendering": false}}'
)


def rules_applicability(sample: Sample) -> ApplicabilityFlags:
    """The rules baseline's flags (see the module docstring); ``None`` where the prompt gives no evidence."""
    prompt = sample.prompt
    if not sample.input_images:  # text-to-image: only text rendering is defined
        return ApplicabilityFlags(text_rendering=bool(_TEXT.search(prompt)))
    return ApplicabilityFlags(
        face_identity=True if _PERSON.search(prompt) else None,
        structure=True if _KEEP_LAYOUT.search(prompt) else None,
        no_color_shift=not _COLOR_CHANGE.search(prompt),
    )


register_rule("applicability")(rules_applicability)


@dataclass
class ApplicabilityResult:
    samples: list[Sample]
    failures: list[StageFailure] = field(default_factory=list)


def run_applicability(
    samples: Sequence[Sample],
    *,
    caller: ModelCaller | None = None,
    store_root: Path | None = None,
    progress: str | None = None,
) -> ApplicabilityResult:
    """Flags for every Benchmark-tier sample (others keep unknown flags). A failed classification stays unknown."""
    from echo_builder.judge.images import prepare_for_judge
    from echo_builder.judge.overlap import call_structured_overlapped

    result = ApplicabilityResult(samples=list(samples))
    pending: list[tuple[int, list[Path]]] = []
    for i, sample in enumerate(samples):
        if sample.tier != "Benchmark":
            continue
        images = [store_root / r.path for r in sample.input_images if r.path] if store_root else []
        if caller is None or len(images) != len(sample.input_images):
            result.samples[i] = sample.model_copy(update={"applicability": rules_applicability(sample)})
            continue
        pending.append((i, images))

    def request(job: tuple[int, list[Path]]) -> CallRequest:  # runs in the preparation pool
        i, images = job
        parts = [
            *(prepare_for_judge(p) for p in images),
            TextPart(_USER.format(prompt=quote_slot(samples[i].prompt, "prompt"))),
        ]
        messages = (Message("system", (TextPart(_SYSTEM),)), Message("user", tuple(parts)))
        return CallRequest(
            messages,
            GenerationParams(max_tokens=256),
            stage="applicability",
            prompt_version=APPLICABILITY_VERSION,
        )

    if caller is not None and pending:
        answers = call_structured_overlapped(caller, pending, request, ApplicabilityAnswer, progress=progress)
        for (i, _), answer in zip(pending, answers, strict=True):
            if answer.value is None:  # unknown, never "not applicable"
                result.failures.append(
                    StageFailure("applicability", samples[i].id, answer.error or "no answer", answer.raw_text)
                )
                continue
            flags = answer.value
            if not samples[i].input_images:
                flags = ApplicabilityAnswer(text_rendering=flags.text_rendering)
            result.samples[i] = samples[i].model_copy(
                update={"applicability": ApplicabilityFlags(**flags.model_dump())}
            )
    return result


TIERS = ("Benchmark", "Analysis", "Manual Review", "Discard")
REVIEW_REASONS = ("prompt", "input image", "output image")
CONFIGS = ("image_to_image", "text_to_image", "analysis")


def run_tier_stage(context: StageContext) -> StageOutput:
    """The final tier and review reason of every sample (``context.samples`` replaced)."""
    samples = context.samples
    result = run_tier(
        samples, caller=context.caller, store_root=context.store_root, progress=context.progress("tier")
    )
    context.failures.extend(result.failures)
    context.samples = tiered = result.samples
    return StageOutput(
        {
            "in": len(samples),
            "out": len(tiered),
            "failures": len(result.failures),
            **{label: sum(1 for t in tiered if t.tier == label) for label in TIERS},
            "review_reasons": {r: sum(1 for t in tiered if t.review == r) for r in REVIEW_REASONS},
        },
        files={"tier.jsonl": tiered},
    )


def run_applicability_stage(context: StageContext) -> StageOutput:
    """The metric applicability flags of every Benchmark sample, and the dataset config each sample goes to."""
    samples = context.samples
    flagged = run_applicability(
        samples,
        caller=context.caller,
        store_root=context.store_root,
        progress=context.progress("applicability"),
    )
    context.failures.extend(flagged.failures)
    context.samples = flagged.samples
    routed = [(x, route(x)) for x in flagged.samples]
    flags = {
        name: {
            str(v).lower(): sum(1 for x, config in routed if config and getattr(x.applicability, name) is v)
            for v in (True, False, None)
        }
        for name in ApplicabilityFlags.model_fields
    }
    return StageOutput(
        {
            "in": len(samples),
            "out": len(flagged.samples),
            "failures": len(flagged.failures),
            "configs": {c: sum(1 for _, config in routed if config == c) for c in CONFIGS},
            "dropped": sum(1 for _, config in routed if config is None),
            "flags": flags,
        },
        files={"applicability.jsonl": flagged.samples},
    )


# two stages of one module: the tier decides the config (``route``) that applicability flags are counted in
TIER_STAGE = declare_stage(
    StageDefinition(
        name="tier",
        version=TIER_VERSION,
        run=run_tier_stage,
        after="screenshots",
        reads=("samples",),
        writes=("samples", "failures"),
        report_fields=(*TIERS, "review_reasons"),
        calls_model=True,
        description="final quality tier (Benchmark, Analysis, Manual Review, Discard) and what to review",
    )
)
APPLICABILITY_STAGE = declare_stage(
    StageDefinition(
        name="applicability",
        version=APPLICABILITY_VERSION,
        run=run_applicability_stage,
        after="tier",
        reads=("samples",),
        writes=("samples", "failures"),
        report_fields=("configs", "dropped", "flags"),
        calls_model=True,
        description="which community metrics apply to each Benchmark sample; the dataset config it goes to",
    )
)
