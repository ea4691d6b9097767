"""Typed records that flow through echo-bench: posts, reply trees, samples, judge verdicts and media references.

All records are frozen pydantic models with ``extra="forbid"`` (an unknown field is an error, not silently
dropped) and a lossless JSON round-trip: ``Model.model_validate_json(record.model_dump_json()) == record``.

Post ids are namespaced by platform (``x:1904123``, ``reddit:t1_abc``, ``bluesky:at://did:plc:.../post/...``)
so posts from several platforms can share one store; see :mod:`echo_builder.ids`. Column names of
:class:`Sample` follow ECHO's released dataset (arXiv 2510.15021, Flow 1 in ``spec/ECHO.md``).
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, JsonValue, PrivateAttr, field_validator, model_validator

from echo_builder.ids import PLATFORMS, split_post_id

__all__ = [
    "ApplicabilityFlags",
    "BoundingBox",
    "Feedback",
    "MediaRef",
    "Post",
    "Quality",
    "ReviewReason",
    "Sample",
    "Tree",
    "Verdict",
    "VerdictStatus",
    "to_jsonable",
]

Quality = Literal["Benchmark", "Analysis", "Trash"]
#: Final labels: Benchmark; Analysis (the extract stage's Analysis, kept as its own tier: a discussion worth
#: analysing, not a sample to repair); Manual Review (a would-be benchmark sample with something to review, always
#: with its :data:`ReviewReason`); Discard.
Tier = Literal["Benchmark", "Analysis", "Manual Review", "Discard"]
#: What a Manual Review sample needs reviewed (ECHO's three reasons).
ReviewReason = Literal["prompt", "input image", "output image"]
VerdictStatus = Literal["ok", "parse_failure", "refusal", "error", "missing_output"]


class _Record(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", ser_json_inf_nan="strings")


def _as_utc(value: datetime | None) -> datetime | None:
    if value is None:
        return None
    if value.tzinfo is None:  # naive timestamps in exports are UTC by convention (X, Reddit, Bluesky all are)
        return value.replace(tzinfo=timezone.utc)
    try:
        return value.astimezone(timezone.utc)
    except OverflowError:  # 9999-12-31T23:00:00-05:00: a ValueError is a validation error, not a crash
        raise ValueError(
            f"{value.isoformat()} is out of range: converted to UTC it falls outside years 1-9999"
        ) from None


class MediaRef(_Record):
    """One image (or video) referenced by a post or a sample.

    Attributes:
        url: where the media can be fetched (http/https), if known.
        media_id: the platform's media id (X ``media_key``), if any.
        type: ``photo``, ``video``, ``animated_gif`` or ``image`` (generic).
        alt_text: the author's alternative text.
        width, height: pixel size reported by the platform or measured after download.
        sha256: hex SHA-256 of the downloaded bytes (the content address in the media store), once downloaded.
        path: file path relative to the media store, once downloaded.
    """

    url: str | None = None
    media_id: str | None = None
    type: Literal["photo", "video", "animated_gif", "image"] = "photo"
    alt_text: str | None = None
    width: int | None = Field(default=None, ge=1)
    height: int | None = Field(default=None, ge=1)
    sha256: str | None = Field(default=None, pattern=r"^[0-9a-f]{64}$")
    path: str | None = None


class Post(_Record):
    """A social-media post (or a prompt-collection case) in one platform-independent shape.

    Attributes:
        id: namespaced id ``<platform>:<native id>``; the prefix must equal ``platform``.
        platform: one of :data:`echo_builder.ids.PLATFORMS`.
        url: canonical URL of the post, used for de-duplication across trees.
        author_id: pseudonymous or platform author id; ``author`` is the handle or display name.
        created_at: creation time, always timezone-aware UTC (naive inputs are taken as UTC).
        text: full text of the post.
        media: attached images or videos, in the order the platform lists them.
        reply_to_id / root_id / quoted_id: namespaced ids of the parent, the conversation root and a quoted post.
        engagement: counts such as ``likes``, ``reposts``, ``replies``, ``quotes``, ``views`` (non-negative).
        lang: language code reported by the platform.
        raw: the source object as parsed, kept for audit (may be ``None`` to save space).
    """

    id: str
    platform: str
    url: str | None = None
    author_id: str | None = None
    author: str | None = None
    created_at: datetime | None = None
    text: str = ""
    media: tuple[MediaRef, ...] = ()
    reply_to_id: str | None = None
    root_id: str | None = None
    quoted_id: str | None = None
    engagement: dict[str, int] = Field(default_factory=dict)
    lang: str | None = None
    raw: JsonValue = None

    @field_validator("created_at")
    @classmethod
    def _utc(cls, value: datetime | None) -> datetime | None:
        return _as_utc(value)

    @field_validator("engagement")
    @classmethod
    def _non_negative(cls, value: dict[str, int]) -> dict[str, int]:
        bad = {k: v for k, v in value.items() if v < 0}
        if bad:
            raise ValueError(f"engagement counts must be >= 0, got {bad}")
        return value

    @model_validator(mode="after")
    def _namespaced(self) -> Post:
        if self.platform not in PLATFORMS:
            raise ValueError(f"unknown platform {self.platform!r}; expected one of {sorted(PLATFORMS)}")
        prefix = self.platform + ":"  # a plain prefix test: this runs for every collected post (millions)
        for name in ("id", "reply_to_id", "root_id", "quoted_id"):
            value = getattr(self, name)
            if value is not None and (not value.startswith(prefix) or len(value) == len(prefix)):
                split_post_id(value)  # raises the precise error for an id with no namespace at all
                raise ValueError(f"{name}={value!r} is not namespaced with platform {self.platform!r}")
        return self


class Tree(_Record):
    """A reply tree: a root post, every post reached from it and the parent -> children edges.

    Attributes:
        root_id: id of the root post (the conversation start, or the oldest reachable ancestor when the real
            root is missing).
        posts: every post of the tree, each exactly once, root first then in creation order.
        children: parent id -> ids of its direct replies, in creation order. Posts absent as keys have no replies.
        missing_ids: ids referenced as parents that could not be found (deleted or not collected).
        seed_ids: the kept posts this tree was expanded from.
    """

    root_id: str
    posts: tuple[Post, ...]
    children: dict[str, tuple[str, ...]] = Field(default_factory=dict)
    missing_ids: tuple[str, ...] = ()
    seed_ids: tuple[str, ...] = ()
    _by_id: dict[str, Post] = PrivateAttr(default_factory=dict)  # post id -> post, for O(1) look-ups

    @model_validator(mode="after")
    def _consistent(self) -> Tree:
        ids = [p.id for p in self.posts]
        if len(ids) != len(set(ids)):
            raise ValueError("a post appears more than once in the tree")
        self._by_id = {p.id: p for p in self.posts}
        known = set(ids)
        if self.root_id not in known:
            raise ValueError(f"root {self.root_id!r} is not among the tree's posts")
        for parent, kids in self.children.items():
            unknown = [k for k in (parent, *kids) if k not in known]
            if unknown:
                raise ValueError(f"edges refer to posts not in the tree: {unknown}")
        return self

    def post(self, post_id: str) -> Post:
        """Return the post with ``post_id`` (constant time); raises ``KeyError`` when it is not in the tree."""
        return self._by_id[post_id]


class Feedback(_Record):
    """What one reply said about a sample's output (ECHO's ``community_feedback`` item)."""

    post_url: str
    feedback: str


class BoundingBox(_Record):
    """A box ``[x1, y1, x2, y2]`` in pixels of the original (uncropped) image, ``x1 < x2`` and ``y1 < y2``."""

    x1: float
    y1: float
    x2: float
    y2: float
    role: Literal["input", "output", "prompt"] = "input"

    @model_validator(mode="after")
    def _ordered(self) -> BoundingBox:
        if not (self.x1 < self.x2 and self.y1 < self.y2):
            raise ValueError(
                f"box must satisfy x1 < x2 and y1 < y2, got {self.x1, self.y1, self.x2, self.y2}"
            )
        return self


class ApplicabilityFlags(_Record):
    """Which community-driven metrics apply to a sample: ``True``, ``False`` or ``None`` (unknown).

    ``None`` means the classifier failed or did not run; it is never turned into "not applicable".
    """

    face_identity: bool | None = None
    structure: bool | None = None
    no_color_shift: bool | None = None
    text_rendering: bool | None = None


class Sample(_Record):
    """One benchmark sample distilled from a reply tree (ECHO's released columns plus ours).

    Attributes:
        id: deterministic id from the source post ids (:func:`echo_builder.ids.sample_id`).
        prompt: the user's prompt, verbatim where possible.
        prompt_modified: ``True`` when stitched from several posts or placeholders were filled.
        prompt_fill_blank: ``True`` when the prompt is a fill-in-the-blank template.
        post_urls: source post URLs ordered by importance; the first holds the task.
        source_post_ids: the namespaced ids behind ``post_urls`` (same order where known).
        quality: the extract stage's label; ``tier`` is the final label after the VLM stages.
        tier: Benchmark, Analysis, Manual Review or Discard (``None`` before the tier stage).
        review: what to review (prompt, input image, output image); required when ``tier == "Manual Review"``.
        input_images / output_images: inputs given to the model and the community's outputs of the target model.
        input_bboxes: boxes found in a conversation screenshot, in the screenshot's pixel frame.
        needs_input_images: the task requires the user's own input image(s) (an edit of "this photo"), whether or
            not the images were found; such a sample without inputs cannot be a benchmark row.
        media_errors: one ``"<url or media id>: <reason>"`` per image that could not be fetched or decoded.
        applicability: metric-applicability flags.
        has_nsfw: ``None`` unless a safety checker ran.
    """

    id: str
    prompt: str
    prompt_modified: bool = False
    prompt_fill_blank: bool = False
    post_urls: tuple[str, ...] = ()
    source_post_ids: tuple[str, ...] = ()
    quality: Quality = "Analysis"
    tier: Tier | None = None
    review: ReviewReason | None = None
    community_feedback: tuple[Feedback, ...] = ()
    input_images: tuple[MediaRef, ...] = ()
    output_images: tuple[MediaRef, ...] = ()
    is_screenshot: bool = False
    input_bboxes: tuple[BoundingBox, ...] = ()
    needs_input_images: bool = False
    media_errors: tuple[str, ...] = ()
    applicability: ApplicabilityFlags = ApplicabilityFlags()
    platform: str | None = None
    created_at: datetime | None = None
    has_nsfw: bool | None = None
    tree_id: str | None = None

    @field_validator("created_at")
    @classmethod
    def _utc(cls, value: datetime | None) -> datetime | None:
        return _as_utc(value)

    @model_validator(mode="after")
    def _review_reason(self) -> Sample:
        if self.tier == "Manual Review" and self.review is None:
            raise ValueError(
                f"sample {self.id!r}: tier Manual Review needs its review reason (prompt, input image or "
                "output image)"
            )
        return self


class Verdict(_Record):
    """One judgment by one judge backend: a single-answer rating or a pairwise preference.

    Attributes:
        sample_id: the benchmark sample judged.
        judge: backend id of the judge (``openai:gpt-4o``); ``judge_snapshot`` is the model version it reported.
        mode: ``single`` (one output rated 1-10), ``pairwise`` (outputs A and B compared) or ``probability``
            (rating from token log-probabilities).
        model: the model whose output was rated (single / probability modes).
        model_a, model_b, order: the two models and the presentation order (``AB`` or ``BA``) in pairwise mode.
        rating: the parsed rating (1-10 for single; expected rating for probability mode); ``None`` on failure.
        confidence: for probability mode, the largest normalised rating-token probability in [0, 1].
        winner: pairwise outcome, ``A``, ``B`` or ``tie`` in terms of ``model_a`` / ``model_b``.
        tie_lean: for a ``tie``, the side the judge would pick if forced (``A`` or ``B``, in ``model_a`` /
            ``model_b`` terms; asked by the ``pairwise-lean`` prompt, OpenING's forced-decision tie); ``None``
            when the judge gave no lean or the verdict is not a tie.
        status: ``ok``, ``parse_failure``, ``refusal``, ``error`` (judge failures, which keep ``raw_text`` and
            ``error``), or ``missing_output`` (the model produced no usable image; no judge was called).
        criterion: what was judged (``overall``, ``text_rendering``, ...).
        prompt_version: version of the judge prompt template.
        input_tokens, output_tokens: token usage reported by the backend.
        latency_s: wall time of the original call in seconds (a cache hit keeps the original time); 0.0 for a call
            answered through the Batch API (``--batch``), which has no per-call wall time.
        replica: the replica (base URL) that answered when the judge spread its calls over several
            (``--base-url`` given more than once); ``None`` otherwise.
    """

    sample_id: str
    judge: str
    judge_snapshot: str | None = None
    mode: Literal["single", "pairwise", "probability"] = "single"
    criterion: str = "overall"
    model: str | None = None
    model_a: str | None = None
    model_b: str | None = None
    order: Literal["AB", "BA"] | None = None
    rating: float | None = None
    confidence: float | None = Field(default=None, ge=0.0, le=1.0)
    winner: Literal["A", "B", "tie"] | None = None
    tie_lean: Literal["A", "B"] | None = None
    status: VerdictStatus = "ok"
    raw_text: str = ""
    error: str | None = None
    prompt_version: str = ""
    input_tokens: int | None = None
    output_tokens: int | None = None
    latency_s: float | None = None
    replica: str | None = None

    @model_validator(mode="after")
    def _consistent(self) -> Verdict:
        if self.mode == "pairwise":
            if not (self.model_a and self.model_b):
                raise ValueError("pairwise verdicts need model_a and model_b")
        elif not self.model:
            raise ValueError(f"{self.mode} verdicts need model")
        if self.status == "ok" and self.rating is None and self.winner is None:
            raise ValueError("an ok verdict needs a rating or a winner")
        if self.tie_lean is not None and self.winner != "tie":
            raise ValueError("tie_lean belongs to a tie verdict only")
        if self.status != "ok" and (self.rating is not None or self.winner is not None):
            raise ValueError(f"a {self.status} verdict must not carry a score (failures are never scores)")
        return self


def to_jsonable(record: BaseModel) -> dict[str, Any]:
    """``record`` as a JSON-compatible dict (datetimes as ISO 8601 strings)."""
    return record.model_dump(mode="json")
