"""``relevance``: rate each candidate post 1-5 for relevance to image generation with the target model.

Scale (ECHO Flow 1): 1 = unrelated, a coincidental keyword match; 2 = about the company or model family but not
images; 3 = about image generation in general or possibly the target model; 4 = very likely a use or discussion of
the target model's image generation; 5 = certainly a use of the model, often with a prompt or an output image.
Posts scoring at least the threshold (default 4) are kept. Every post gets a :class:`RelevanceScore`; a post the
model could not rate (after repair and one re-ask) is a counted failure and is not kept.

The ``rules`` baseline scores from the text alone: a mention of the target model, image-generation vocabulary,
an explicit prompt, and attached images each add evidence; API, pricing and other off-topic vocabulary without
image words counts against. It is deterministic and documented as a weaker curator than an LLM.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from echo_builder.backends.caller import ModelCaller
from echo_builder.backends.rules import register_rule
from echo_builder.judge.prompts import quote_slot
from echo_builder.records import Post
from echo_builder.stages.base import PromptTemplate, StageFailure
from echo_builder.stages.registry import StageContext, StageDefinition, StageOutput, declare_stage

__all__ = [
    "RELEVANCE_PROMPT",
    "RelevanceAnswer",
    "RelevanceResult",
    "RelevanceScore",
    "rules_relevance",
    "run_relevance",
]

RELEVANCE_PROMPT = PromptTemplate(
    stage="relevance",
    version="relevance-v1",
    system=(
        "You filter social-media posts for a benchmark of image-generation models. You rate how relevant a post is "
        "to generating or editing images with one specific model. Answer with JSON only."
    ),
    user=(
        "Target model: {target_model}\n\nPost ({n_images} attached image(s)):\n<post>\n{text}\n</post>\n\n"
        "Rate the post's relevance to image generation or image editing with the target model:\n"
        "1 = unrelated; the keyword match is a coincidence\n"
        "2 = about the company or model family, but not about images\n"
        "3 = about image generation in general, or possibly the target model\n"
        "4 = very likely a use or discussion of the target model's image generation\n"
        "5 = certainly a use of the target model, often with a prompt or an output image\n\n"
        'Reply with a JSON object: {{"score": <1-5>, "note": "<at most one short sentence, or null>"}}'
    ),
)


class RelevanceAnswer(BaseModel):
    """The model's answer: an integer score 1-5 and an optional short note."""

    model_config = ConfigDict(extra="ignore")

    score: int = Field(ge=1, le=5)
    note: str | None = None


@dataclass(frozen=True)
class RelevanceScore:
    """The relevance of one post: ``score`` in 1..5 (``None`` on failure), the note, and how it was obtained."""

    post_id: str
    score: int | None
    note: str | None
    status: Literal["ok", "parse_failure", "error"]
    kept: bool


@dataclass
class RelevanceResult:
    """Kept posts (score >= threshold, input order), every post's score, and the failures."""

    kept: list[Post]
    scores: list[RelevanceScore]
    failures: list[StageFailure]


_IMAGE_WORDS = re.compile(
    r"(?<![^\W_])(image|images|imagegen|img|picture|pic|photo|photos|render|rendered|generate|generated|generating|"
    r"generation|draw|drew|drawing|illustration|portrait|ghibli|anime|style|edit|edited|editing|inpaint|poster|"
    r"logo|prompt|prompts|selfie|art|artwork|sticker|meme|character|avatar|4o image|image gen)(?![^\W_])",
    re.IGNORECASE,
)
_PROMPT_MARKER = re.compile(
    r"(prompt\s*[:：👇⬇]|prompt (below|in (the )?(replies|comments|thread))|提示词)", re.IGNORECASE
)
_OFF_TOPIC = re.compile(
    r"(?<![^\W_])(api|pricing|price|billing|endpoint|developer|developers|enterprise|tier|subscription|"
    r"deprecat\w*|rate limit|access|v1\.1|v2)(?![^\W_])",
    re.IGNORECASE,
)


def rules_relevance(post: Post, target_model: str | None) -> RelevanceAnswer:
    """The rules baseline's 1-5 score for one post (see the module docstring)."""
    text = post.text
    image_hits = len(_IMAGE_WORDS.findall(text))
    mentions_target = (
        bool(target_model) and re.search(re.escape(target_model or ""), text, re.IGNORECASE) is not None
    )
    has_prompt = bool(_PROMPT_MARKER.search(text))
    has_images = any(m.type in ("photo", "image") for m in post.media)
    off_topic = len(_OFF_TOPIC.findall(text))
    score = 1
    if mentions_target:
        score += 1
    if image_hits:
        score += 1 + (image_hits >= 3)
    if has_prompt:
        score += 1
    if has_images and (image_hits or mentions_target or has_prompt):
        score += 1
    if off_topic and not image_hits:
        score = min(score, 2)
    reasons = [
        r
        for r, on in (
            ("target model", mentions_target),
            ("image words", image_hits),
            ("prompt", has_prompt),
            ("images", has_images),
            ("off-topic words", off_topic),
        )
        if on
    ]
    return RelevanceAnswer(score=min(score, 5), note="rules: " + (", ".join(reasons) or "no evidence"))


register_rule("relevance")(rules_relevance)


def run_relevance(
    posts: Sequence[Post],
    *,
    target_model: str | None,
    caller: ModelCaller | None = None,
    threshold: int = 4,
    progress: str | None = None,
) -> RelevanceResult:
    """Score every post and keep those at or above ``threshold``.

    Args:
        posts: candidate posts (curated collection posts are kept with score 5 and no call).
        target_model: the model the benchmark is about, e.g. ``"GPT-4o image generation"``.
        caller: the LLM to ask; ``None`` runs the rules baseline.
        threshold: minimum score kept, 1-5 (ECHO: 4).
    """
    if not 1 <= threshold <= 5:
        raise ValueError(f"threshold must be 1-5, got {threshold}")
    # index -> (answer or None, status, failure reason, raw model text)
    answers: dict[int, tuple[RelevanceAnswer | None, str, str, str]] = {}
    pending = []
    for i, post in enumerate(posts):
        if post.platform == "collection":
            answers[i] = (RelevanceAnswer(score=5, note="curated prompt collection"), "ok", "", "")
        elif caller is None:
            answers[i] = (rules_relevance(post, target_model), "ok", "", "")
        else:
            pending.append(i)
    if caller is not None and pending:
        requests = [
            RELEVANCE_PROMPT.request(
                target_model=target_model or "(unspecified)",
                text=quote_slot(posts[i].text, "post"),
                n_images=len(posts[i].media),
            )
            for i in pending
        ]
        for i, result in zip(
            pending, caller.call_structured_many(requests, RelevanceAnswer, progress=progress), strict=True
        ):
            answers[i] = (result.value, result.status, result.error or "", result.raw_text)
    kept, scores, failures = [], [], []
    for i, post in enumerate(posts):
        answer, status, reason, raw_text = answers[i]
        if answer is None:
            failures.append(StageFailure("relevance", post.id, reason or "no answer", raw_text))
            scores.append(RelevanceScore(post.id, None, None, status, False))  # type: ignore[arg-type]
            continue
        keep = answer.score >= threshold
        scores.append(RelevanceScore(post.id, answer.score, answer.note, "ok", keep))
        if keep:
            kept.append(post)
    return RelevanceResult(kept, scores, failures)


def run_relevance_stage(context: StageContext) -> StageOutput:
    """Score ``context.selected`` (1-5) and keep those at or above ``config.relevance_threshold``."""
    config = context.config
    posts = context.selected
    relevance = run_relevance(
        posts,
        target_model=config.target_model,
        caller=context.caller,
        threshold=config.relevance_threshold,
        progress=context.progress("relevance"),
    )
    context.selected = relevance.kept
    context.failures.extend(relevance.failures)
    histogram = {str(k): sum(1 for s in relevance.scores if s.score == k) for k in range(1, 6)}
    return StageOutput(
        {
            "in": len(posts),
            "out": len(relevance.kept),
            "failures": len(relevance.failures),
            "threshold": config.relevance_threshold,
            "score_histogram": histogram,
            "failed_ids": [f.record_id for f in relevance.failures],
        },
        files={"relevance.jsonl": [vars(s) for s in relevance.scores]},
    )


STAGE = declare_stage(
    StageDefinition(
        name="relevance",
        version=RELEVANCE_PROMPT.version,
        run=run_relevance_stage,
        after="query",
        reads=("selected",),
        writes=("selected", "failures"),
        report_fields=("threshold", "score_histogram", "failed_ids"),
        calls_model=True,
        description="score each post's relevance to the target model (1-5) and keep those at the threshold",
    )
)
