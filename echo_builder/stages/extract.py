"""``extract``: distil each reply tree into benchmark samples (ECHO Flow 1, "extract").

The model reads the tree and returns samples: ``prompt`` (verbatim where possible), ``prompt_modified`` (stitched
from several posts or placeholders filled), ``post_urls`` ordered by importance (the first holds the task),
``quality`` in {Benchmark, Analysis, Trash} and ``community_feedback`` [{post_url, feedback}]. Rules enforced on
every answer, whoever wrote it: at least one sample per tree, a new sample per distinct prompt, each post used at
most once, and URLs must belong to the tree (unknown ones are dropped and noted).

The ``rules`` baseline: curated collection cases are Benchmark samples with their prompt verbatim; in social
trees, an explicit marker (``Prompt:``, ``提示词：``), a long quoted passage, or a "prompt below / in the replies"
root whose prompt sits in the author's reply gives the prompt; a prompt about the user's own image ("my photo",
"this picture of ...", "the attached image") marks the sample as needing input images, so the roles baseline takes
the first image as the input (an edit); replies from other people that judge the result
become feedback; a tree with no prompt is Analysis when it has images or feedback, Trash otherwise, and a tree
about another model is Trash.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from echo_builder.backends.caller import ModelCaller
from echo_builder.backends.rules import register_rule
from echo_builder.ids import sample_id
from echo_builder.records import Feedback, Post, Sample, Tree
from echo_builder.stages.base import PromptTemplate, StageFailure
from echo_builder.stages.registry import StageContext, StageDefinition, StageOutput, declare_stage

__all__ = [
    "EXTRACT_PROMPT",
    "ExtractAnswer",
    "ExtractResult",
    "find_placeholders",
    "render_tree",
    "rules_extract",
    "run_extract",
]

EXTRACT_PROMPT = PromptTemplate(
    stage="extract",
    version="extract-v1",
    system=(
        "You turn social-media threads about an image-generation model into benchmark samples. You copy prompts "
        "verbatim, never invent them, and answer with JSON only."
    ),
    user=(
        "Target model: {target_model}\n\nThread (each post: [number] URL, author, attached images, then its text; "
        "replies are indented under their parent):\n{tree}\n\n"
        "Return every distinct request a user made to the model as one sample. For each sample give:\n"
        "- prompt: the user's prompt, copied verbatim; if it is spread over several posts, stitch it and set "
        "prompt_modified to true\n"
        "- post_urls: the URLs of the posts this sample uses, most important first (the first holds the task); "
        "use each post in at most one sample\n"
        "- quality: Benchmark (a clear, self-contained prompt with the model's output image), Analysis (useful "
        "discussion or results without a usable prompt), or Trash (unrelated, or about another model)\n"
        "- community_feedback: what other people's replies say about the result, as {{post_url, feedback}}\n"
        "A post saying the prompt is below or in the replies: find the prompt in the replies. Return at least "
        'one sample. Reply with JSON: {{"samples": [{{"prompt": "...", "prompt_modified": false, "post_urls": '
        '["..."], "quality": "Benchmark", "community_feedback": [{{"post_url": "...", "feedback": "..."}}]}}]}}'
    ),
)


class ExtractedFeedback(BaseModel):
    model_config = ConfigDict(extra="ignore")

    post_url: str
    feedback: str


class ExtractedSample(BaseModel):
    model_config = ConfigDict(extra="ignore")

    prompt: str
    prompt_modified: bool = False
    post_urls: list[str] = Field(min_length=1)
    quality: Literal["Benchmark", "Analysis", "Trash"]
    community_feedback: list[ExtractedFeedback] = Field(default_factory=list)


class ExtractAnswer(BaseModel):
    """The model's answer: at least one sample."""

    model_config = ConfigDict(extra="ignore")

    samples: list[ExtractedSample] = Field(min_length=1)


@dataclass
class ExtractResult:
    """Samples from every tree, the trees that failed, and notes on answers that needed fixing."""

    samples: list[Sample]
    failures: list[StageFailure]
    notes: list[str]


# -- shared helpers ---------------------------------------------------------------------------------------------------
_PLACEHOLDER = re.compile(
    r"\[[^\[\]\n\"]{1,40}\](?!\()"  # [Brand Logo]; not a markdown link [text](url) nor a JSON list ["a", "b"]
    r"|\{[^{}\n\"]{1,40}\}"  # {Programmer}
    r"|<(?!/)[^<>\n=/]{1,40}>"  # <your name>; not an HTML tag with attributes or a closing tag
    r"|【[^【】\n]{1,20}】"  # 【成龙】; longer 【...】 runs are emphasis, not blanks
    r"|\((?:your|insert|name of|[A-Z][A-Z _]{2,})[^()\n]{0,40}\)"  # (YOUR TEXT), (insert name)
)
_HTML_TAG = re.compile(
    r"^<(?:h[1-6]|p|b|i|u|em|strong|span|div|br|hr|li|ul|ol|code|pre|sub|sup|small|mark)>$", re.I
)


def find_placeholders(prompt: str) -> list[str]:
    """Fill-in-the-blank placeholders in a prompt: ``[x]``, ``{x}``, ``<x>``, ``【x】`` and ``(YOUR X)``.

    Bracketed JSON lists, markdown links, HTML tags and long 【emphasis】 runs are not placeholders.
    """
    return [p for p in _PLACEHOLDER.findall(prompt) if not _HTML_TAG.match(p)]


def _post_label(post: Post) -> str:
    return post.url or post.id


#: deepest indentation in a rendered tree; deeper replies (long reply chains) are drawn at this level, so the
#: text stays linear in the number of posts however deep the chain
MAX_RENDER_INDENT = 12


def render_tree(tree: Tree, *, max_chars_per_post: int = 2000) -> str:
    """The tree as indented text for the model: ``[n] URL (author, k image(s))`` then the text.

    Depth-first in reply order, iterative (a reply chain thousands of posts deep needs no recursion); indentation
    is two spaces per reply level up to :data:`MAX_RENDER_INDENT` levels.
    """
    by_id = {p.id: p for p in tree.posts}
    lines: list[str] = []
    stack = [(tree.root_id, 0)]
    counter = 0
    while stack:
        post_id, depth = stack.pop()
        counter += 1
        post = by_id[post_id]
        indent = "  " * min(depth, MAX_RENDER_INDENT)
        text = (
            post.text if len(post.text) <= max_chars_per_post else post.text[:max_chars_per_post] + " [...]"
        )
        images = sum(1 for m in post.media if m.type in ("photo", "image"))
        lines.append(
            f"{indent}[{counter}] {_post_label(post)} ({post.author or 'unknown author'}, {images} image(s))"
        )
        lines.extend(f"{indent}    {line}" for line in text.splitlines() or [""])
        stack.extend((child, depth + 1) for child in reversed(tree.children.get(post_id, ())))
    return "\n".join(lines)


def _make_sample(
    tree: Tree,
    posts: list[Post],
    prompt: str,
    quality: str,
    *,
    modified: bool,
    feedback: list[Feedback],
    salt: str = "",
    needs_input: bool = False,
) -> Sample:
    root = tree.post(tree.root_id)
    needs_input = needs_input or any(
        isinstance(p.raw, dict) and bool(p.raw.get("needs_input_image")) for p in posts
    )
    return Sample(
        id=sample_id([p.id for p in posts], salt=salt),
        prompt=prompt,
        prompt_modified=modified,
        prompt_fill_blank=bool(find_placeholders(prompt)),
        post_urls=tuple(_post_label(p) for p in posts),
        source_post_ids=tuple(p.id for p in posts),
        quality=quality,  # type: ignore[arg-type]
        community_feedback=tuple(feedback),
        output_images=tuple(m for p in posts for m in p.media if m.type in ("photo", "image")),
        needs_input_images=needs_input,
        platform=root.platform,
        created_at=posts[0].created_at,
        tree_id=tree.root_id,
    )


# -- rules baseline -----------------------------------------------------------------------------------------------------
_MARKER = re.compile(r"(?:^|\n|\s)(?:prompt|提示词|プロンプト)\s*[:：]\s*(.+)", re.IGNORECASE | re.DOTALL)
_PROMPT_ELSEWHERE = re.compile(
    r"prompt\s*(?:below|👇|⬇|in (?:the )?(?:replies|comments|thread|alt))", re.IGNORECASE
)
_QUOTED = re.compile(r"[\"“«]([^\"”»]{25,})[\"”»]")
_URL = re.compile(r"https?://\S+")
# a prompt about the user's own image ("my photo", "this picture of my street", "the attached image"): an edit
_OWN_IMAGE = re.compile(
    r"(?<![^\W_])(?:this|these|my|our|attached|uploaded|the attached|the uploaded|the original)\s+"
    r"(?:[\w'-]+\s+){0,2}?(?:photo|photos|image|images|picture|pictures|pic|pics|selfie|drawing|sketch)(?![^\W_])",
    re.IGNORECASE,
)
_FEEDBACK = re.compile(
    r"(?<![^\W_])(wow|amazing|awesome|great|beautiful|insane|incredible|love|perfect|impressive|nailed|realistic|"
    r"wrong|bad|ugly|fail|fails|failed|broken|weird|yellow|tint|blurry|distorted|off|missing|doesn't|didn't|"
    r"can't|not|worse|better|looks|face|hands|text|typo|spelling)(?![^\W_])",
    re.IGNORECASE,
)
_OTHER_MODELS = re.compile(
    r"(?<![^\W_])(midjourney|stable diffusion|sdxl|flux|dall-?e ?[23]|imagen ?[34]|ideogram|"
    r"leonardo|firefly)(?![^\W_])",
    re.IGNORECASE,
)


def _clean(text: str) -> str:
    return _URL.sub("", text).strip()


def _marker_prompt(text: str) -> str | None:
    match = _MARKER.search(text)
    if match and _clean(match.group(1)):
        return _clean(match.group(1))
    quoted = _first_quoted(text)
    return quoted.strip() if quoted is not None else None


_QUOTE_MARKS = re.compile(r"[\"“«”»]")


def _first_quoted(text: str) -> str | None:
    """What ``_QUOTED.search(text)`` finds (group 1), in linear time: the regex retries from every opening mark
    of an unclosed run, quadratic on hostile text ('“a' x 10,000 took 2 s). A match ends at the first closing mark
    after its start, so only the earliest opening mark since the last closing one can give the longest run."""
    start = None
    for mark in _QUOTE_MARKS.finditer(text):
        if mark.group() in '"”»':  # a closing mark ('"' opens too)
            if start is not None and mark.start() - start - 1 >= 25:
                return text[start + 1 : mark.start()]
            start = mark.start() if mark.group() == '"' else None
        elif start is None:
            start = mark.start()
    return None


def _self_thread(tree: Tree) -> list[Post]:
    """The root and the chain of replies in which the root's author continues, in order."""
    root = tree.post(tree.root_id)
    chain, current = [root], root
    while True:
        nxt = next(
            (
                tree.post(c)
                for c in tree.children.get(current.id, ())
                if tree.post(c).author_id is not None and tree.post(c).author_id == root.author_id
            ),
            None,
        )
        if nxt is None:
            return chain
        chain.append(nxt)
        current = nxt


def rules_extract(tree: Tree, target_model: str | None) -> list[Sample]:
    """The rules baseline's samples for one tree (see the module docstring)."""
    root = tree.post(tree.root_id)
    if root.platform == "collection":
        return [_make_sample(tree, [root], root.text, "Benchmark", modified=False, feedback=[])]
    thread = _self_thread(tree)
    thread_ids = {p.id for p in thread}
    prompt, holder = None, None
    for post in thread:
        prompt = _marker_prompt(post.text)
        if prompt:
            holder = post
            break
    if prompt is None and _PROMPT_ELSEWHERE.search(root.text) and len(thread) > 1:
        holder = thread[1]
        prompt = _clean(holder.text) or None
    feedback_posts = [p for p in tree.posts if p.id not in thread_ids and _FEEDBACK.search(p.text)]
    feedback = [Feedback(post_url=_post_label(p), feedback=_clean(p.text)[:500]) for p in feedback_posts]
    about_other = bool(_OTHER_MODELS.search(root.text)) and not (
        target_model and re.search(re.escape(target_model), root.text, re.IGNORECASE)
    )
    with_images = [p for p in thread if any(m.type in ("photo", "image") for m in p.media)]
    if about_other:
        return [_make_sample(tree, [root], _clean(root.text), "Trash", modified=False, feedback=[])]
    if prompt is not None and holder is not None:
        used = [holder] + [p for p in [root, *with_images] if p.id != holder.id]
        used = list({p.id: p for p in used}.values())  # keep order, drop repeats
        quality = "Benchmark" if with_images else "Analysis"
        own_image = bool(_OWN_IMAGE.search(prompt))  # the roles stage then takes the first image as the input
        return [
            _make_sample(
                tree, used, prompt, quality, modified=False, feedback=feedback, needs_input=own_image
            )
        ]
    quality = "Analysis" if (with_images or feedback) else "Trash"
    return [
        _make_sample(
            tree,
            [root, *[p for p in with_images if p.id != root.id]],
            _clean(root.text),
            quality,
            modified=False,
            feedback=feedback,
        )
    ]


register_rule("extract")(rules_extract)


# -- model answers --------------------------------------------------------------------------------------------------------
def _samples_from_answer(tree: Tree, answer: ExtractAnswer, notes: list[str]) -> list[Sample]:
    by_url = {_post_label(p): p for p in tree.posts}
    used: set[str] = set()
    samples: list[Sample] = []
    seen_prompts: set[str] = set()
    for extracted in answer.samples:
        posts = []
        for url in extracted.post_urls:
            post = by_url.get(url)
            if post is None:
                notes.append(f"tree {tree.root_id}: dropped a URL not in the tree: {url}")
            elif post.id in used:
                notes.append(f"tree {tree.root_id}: {url} was already used by another sample")
            else:
                posts.append(post)
                used.add(post.id)
        if not posts:
            notes.append(f"tree {tree.root_id}: a sample had no usable post; skipped")
            continue
        key = extracted.prompt.strip()
        if key in seen_prompts and key:
            notes.append(f"tree {tree.root_id}: a repeated prompt was merged into the first sample")
            continue
        seen_prompts.add(key)
        feedback = [
            Feedback(post_url=f.post_url, feedback=f.feedback)
            for f in extracted.community_feedback
            if f.post_url in by_url
        ]
        salt = hashlib.sha256(key.encode()).hexdigest()[:8] if len(answer.samples) > 1 else ""
        samples.append(
            _make_sample(
                tree,
                posts,
                extracted.prompt,
                extracted.quality,
                modified=extracted.prompt_modified,
                feedback=feedback,
                salt=salt,
            )
        )
    return samples


def run_extract(
    trees: Sequence[Tree],
    *,
    target_model: str | None,
    caller: ModelCaller | None = None,
    progress: str | None = None,
) -> ExtractResult:
    """Samples from every tree, in tree order. ``caller=None`` runs the rules baseline.

    A tree whose answer stays invalid after repair and one re-ask is a counted failure with the raw text kept.
    Curated collection cases never need the model: the case is the sample.
    """
    result = ExtractResult(samples=[], failures=[], notes=[])
    per_tree: dict[int, list[Sample]] = {}
    pending: list[int] = []
    for i, tree in enumerate(trees):
        if caller is None or tree.post(tree.root_id).platform == "collection":
            per_tree[i] = rules_extract(tree, target_model)
        else:
            pending.append(i)
    if caller is not None and pending:
        requests = [
            EXTRACT_PROMPT.request(target_model=target_model or "(unspecified)", tree=render_tree(trees[i]))
            for i in pending
        ]
        answers = caller.call_structured_many(requests, ExtractAnswer, progress=progress)
        for i, answer in zip(pending, answers, strict=True):
            if answer.value is None:
                result.failures.append(
                    StageFailure("extract", trees[i].root_id, answer.error or "no answer", answer.raw_text)
                )
                continue
            samples = _samples_from_answer(trees[i], answer.value, result.notes)
            if not samples:
                result.failures.append(
                    StageFailure(
                        "extract", trees[i].root_id, "no usable sample in the answer", answer.raw_text
                    )
                )
            per_tree[i] = samples
    for i in range(len(trees)):
        result.samples.extend(per_tree.get(i, []))
    return result


def sample_summary(samples: Sequence[Sample]) -> dict[str, Any]:
    """Counts per quality label, fill-in-the-blank and needs-input flags, for reports."""
    out: dict[str, Any] = {"samples": len(samples)}
    for label in ("Benchmark", "Analysis", "Trash"):
        out[label] = sum(1 for s in samples if s.quality == label)
    out["fill_in_the_blank"] = sum(1 for s in samples if s.prompt_fill_blank)
    out["needs_input_images"] = sum(1 for s in samples if s.needs_input_images)
    return out


def run_extract_stage(context: StageContext) -> StageOutput:
    """Distil ``context.trees`` into benchmark samples -> ``context.samples``."""
    trees = context.trees
    extracted = run_extract(
        trees,
        target_model=context.config.target_model,
        caller=context.caller,
        progress=context.progress("extract"),
    )
    context.samples = extracted.samples
    context.failures.extend(extracted.failures)
    return StageOutput(
        {
            "in": len(trees),
            "out": len(extracted.samples),
            "failures": len(extracted.failures),
            **sample_summary(extracted.samples),
            "notes": extracted.notes,
            "failed_ids": [f.record_id for f in extracted.failures],
        },
        files={"extract.jsonl": extracted.samples},
    )


STAGE = declare_stage(
    StageDefinition(
        name="extract",
        version=EXTRACT_PROMPT.version,
        run=run_extract_stage,
        after="threads",
        reads=("trees",),
        writes=("samples", "failures"),
        report_fields=(
            "samples",
            "Benchmark",
            "Analysis",
            "Trash",
            "fill_in_the_blank",
            "needs_input_images",
            "notes",
            "failed_ids",
        ),
        calls_model=True,
        description="distil each reply tree into samples: prompt, images, feedback, quality label",
    )
)
