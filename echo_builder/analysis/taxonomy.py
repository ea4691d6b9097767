"""The failure taxonomy: what users complain about (ECHO Fig. 4) and how they interact (Fig. 5).

ECHO clustered the community's feedback into failure categories: practical ones that a metric can measure
(identity shift, color drift, text rendering errors, structure/pose drift) and ones no metric covers yet (style
mismatch, anatomy, missing elements, quality artifacts), plus curiosity-driven ones (originality, reasoning about
counts and volumes); and it tagged the users' own solutions and exploratory behaviours. :data:`CATEGORIES` is that
taxonomy, stable across runs, each category with the metric that measures it or ``None`` ("no metric yet").

The ``rules`` baseline is the keyword lexicon in each category's ``patterns`` (case-insensitive, whole words; a
feedback text gets every category whose lexicon matches, with the matched words as evidence). It is
deterministic, misses paraphrases and negations ("the colors are fine, no yellow at all" is still color drift),
and is documented as weaker than an LLM labeller (``--backend``), whose open labels are folded onto the same
taxonomy with the synonyms below.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from echo_builder.analysis.labelling import (
    Category,
    Item,
    LabellingResult,
    LabelsAnswer,
    category_list,
    label_items,
    load_prompt,
)

__all__ = ["CATEGORIES", "FAILURE_KINDS", "PROMPT_FILE", "category", "label_feedback"]

#: The prompt file of the LLM labeller (``prompt_files/feedback-taxonomy.yaml``).
PROMPT_FILE = "feedback-taxonomy"
#: Category kinds that are failures of the model (the rest, ``behaviour``, are how users interact).
FAILURE_KINDS = ("practical", "curiosity")

#: Defects and body parts of the ``anatomy_error`` lexicon.
_BAD_BODY = (
    r"(?:extra|six|seven|missing|too many|weird|wrong|deformed|distorted|mangled|broken|fused|melted|bad"
    r"|messed[- ]up|malformed)"
)
_BODY_PART = r"(?:fingers?|hands?|limbs?|arms?|legs?|feet|toes?|teeth)"

CATEGORIES: tuple[Category, ...] = (
    Category(
        "color_drift",
        "the colors changed or look off: a yellow, orange, sepia or warm cast, washed-out or oversaturated colors",
        kind="practical",
        metric="color_shift",
        synonyms=(
            "color shift",
            "colour shift",
            "colour drift",
            "yellow tint",
            "color cast",
            "colour cast",
            "warm tint",
            "yellowing",
            "sepia tint",
            "color change",
            "color error",
            "wrong colors",
        ),
        patterns=(
            r"yellow\w*",
            r"sepia",
            r"tint(?:ed)?",
            r"(?:colou?r|warm|orange) (?:cast|shift|drift|tint)",
            r"colou?rs? (?:are|is|look|looks|were|got) (?:off|wrong|washed out|different|weird)",
            r"washed[- ]out",
            r"oversaturated",
            r"too warm",
            r"piss filter",
            r"orange filter",
        ),
    ),
    Category(
        "identity_shift",
        "a person's face or identity changed: not the same person any more",
        metric="face_identity",
        kind="practical",
        synonyms=(
            "identity drift",
            "identity loss",
            "face change",
            "face changed",
            "face drift",
            "identity preservation",
            "likeness",
            "facial identity",
        ),
        patterns=(
            r"(?:changed|changes|change|altered) (?:her|his|their|my|the) face",
            r"not (?:the same|even the same) (?:person|face|guy|girl|woman|man)",
            r"different person",
            r"doesn'?t look like (?:me|her|him|them)",
            r"face (?:changed|is different|looks different)",
            r"lost (?:the|her|his|my)? ?(?:identity|likeness)",
            r"identity",
        ),
    ),
    Category(
        "text_rendering_error",
        "text in the image is misspelled, garbled, wrong or missing",
        metric="text_rendering",
        kind="practical",
        synonyms=(
            "text error",
            "text rendering",
            "spelling error",
            "typo",
            "misspelling",
            "garbled text",
            "text rendering errors",
            "wrong text",
        ),
        patterns=(
            r"misspell\w*",
            r"typos?",
            r"spelling",
            r"spelled wrong",
            r"garbled (?:text|letters)",
            r"gibberish (?:text|letters)",
            r"text is (?:wrong|broken|garbled|unreadable)",
            r"wrong (?:text|letters|words)",
            r"letters are",
        ),
    ),
    Category(
        "structure_drift",
        "the layout, pose, composition or framing changed where it should have been kept",
        metric="structure_distance",
        kind="practical",
        synonyms=(
            "structure change",
            "pose drift",
            "pose change",
            "composition change",
            "layout change",
            "structure/pose drift",
            "geometry change",
            "cropping",
            "zoomed in",
        ),
        patterns=(
            r"pose (?:changed|is different)",
            r"changed the (?:pose|composition|layout|framing|background)",
            r"composition (?:changed|is different)",
            r"layout (?:changed|is different)",
            r"cropped",
            r"zoomed (?:in|out)",
            r"moved (?:the|my|her|his)",
            r"shifted",
            r"structure",
        ),
    ),
    Category(
        "style_mismatch",
        "the style is not the one asked for (too realistic, plastic, generic AI look, wrong art style)",
        kind="practical",
        synonyms=(
            "style drift",
            "wrong style",
            "style error",
            "style inconsistency",
            "ai look",
            "plastic look",
        ),
        patterns=(
            r"(?:wrong|different|not the) style",
            r"style is (?:off|wrong)",
            r"too realistic",
            r"looks? (?:so )?(?:ai|fake|plastic|cartoonish)",
            r"plasticky",
            r"plastic (?:look|skin|feel|faces?)",  # not bare "plastic": a material a prompt asks for
        ),
    ),
    Category(
        "anatomy_error",
        "malformed bodies: extra or missing fingers, limbs, distorted hands or faces",
        kind="practical",
        synonyms=("bad anatomy", "anatomy", "hand errors", "extra fingers", "deformed hands"),
        # a body part only with a defect: prompts and posts name hands and fingers without complaining about them
        patterns=(
            _BAD_BODY + " " + _BODY_PART,
            _BODY_PART + r"(?: and \w+)? (?:are|is|look|looks|still|came out|come out|got)(?: \w+){0,2} "
            r"(?:hit and miss|weird|wrong|off|broken|deformed|distorted|messed up|mangled|bad|melted|fused|a mess)",
            _BODY_PART + r" (?:problems?|issues?|errors?)",
            r"anatomy",
            r"deformed",
        ),
    ),
    Category(
        "missing_element",
        "something the prompt asked for is missing or the instruction was ignored",
        kind="practical",
        synonyms=(
            "prompt adherence",
            "ignored instruction",
            "instruction ignored",
            "missing object",
            "prompt ignored",
            "incomplete edit",
            "instruction following",
        ),
        patterns=(
            r"ignored",
            r"missing",
            r"forgot",
            r"(?:has|have|there'?s) no",  # not "with no": prompts ask for "with no text"
            r"did(?:n'?t| not) (?:add|remove|change|do|include)",
            r"no (?:hat|change)",
            r"left out",
        ),
    ),
    Category(
        "quality_artifact",
        "blur, noise, artifacts, low resolution or other visual defects",
        kind="practical",
        synonyms=("artifacts", "image quality", "low quality", "blurriness", "visual artifacts"),
        patterns=(r"blurr?y", r"artifacts?", r"low[- ]res\w*", r"grainy", r"noisy", r"pixelated", r"jpeg"),
    ),
    Category(
        "originality",
        "curiosity: whether outputs are original or copy existing works, look generic or repeat themselves",
        kind="curiosity",
        synonyms=(
            "creativity",
            "novelty",
            "copying",
            "memorization",
            "lack of originality",
            "repetitive outputs",
        ),
        patterns=(
            r"original\w*",
            r"creativ\w*",
            r"copied",
            r"copies",
            r"same (?:face|image|output) every",
            r"generic",
            r"repetitive",
        ),
    ),
    Category(
        "reasoning",
        "curiosity: counting, volumes, physics, maths or other reasoning the image gets wrong",
        kind="curiosity",
        synonyms=(
            "counting",
            "reasoning about volume",
            "physics",
            "spatial reasoning",
            "math",
            "counting error",
            "logic",
        ),
        patterns=(
            r"how many",
            r"counts?",
            r"counting",
            r"volume",
            r"physics",
            r"math\w*",
            r"reasoning",
            r"wrong number",
        ),
    ),
    Category(
        "user_solution",
        "behaviour: the user shares a fix or workaround (a prompt trick, re-rolling, another tool)",
        kind="behaviour",
        synonyms=("workaround", "fix", "solution", "prompt trick", "tip"),
        patterns=(
            r"workaround",
            r"fixed it",
            r"fix(?:ed)? (?:this|that) by",
            r"what worked",
            r"try adding",
            r"add(?:ing)? \S+ to (?:the|your) prompt",
            r"re-?roll\w*",
            r"regenerat\w*",
            r"tip:?",
        ),
    ),
    Category(
        "exploration",
        "behaviour: the user probes the model out of curiosity (tries limits, compares, experiments)",
        kind="behaviour",
        synonyms=("exploratory behaviour", "experimentation", "probing", "comparison", "testing limits"),
        patterns=(
            r"i tried",
            r"i ran",
            r"what happens if",
            r"experiment\w*",
            r"testing",
            r"compared?",
            r"every edit i tried",
            r"in my own tries",
        ),
    ),
)

#: Chinese keywords of the ``rules`` lexicon (matched anywhere).
_CJK: dict[str, tuple[str, ...]] = {
    "color_drift": ("偏黄", "发黄", "色偏", "偏色"),
    "identity_shift": ("不像本人", "脸变了", "换了一个人"),
    "text_rendering_error": ("错别字", "乱码"),
    "anatomy_error": ("手指变形", "手指畸形", "多了手指", "六根手指", "手部变形", "手崩"),
    "missing_element": ("没有按照", "漏了"),
}
CATEGORIES = tuple(replace(c, patterns=c.patterns + _CJK.get(c.name, ())) for c in CATEGORIES)


def category(name: str) -> object | None:
    """The :class:`Category` called ``name``, or ``None`` (an open category)."""
    return next((c for c in CATEGORIES if c.name == name), None)


def label_feedback(
    items: Sequence[Item], *, caller: object | None, target_model: str, progress: str | None = None
) -> LabellingResult:
    """Failure and behaviour labels of feedback texts, by the rules lexicon (``caller=None``) or an LLM.

    Args:
        items: feedback texts (and analysis-split posts) to label.
        caller: a :class:`~echo_builder.backends.caller.ModelCaller` or ``None`` (rules).
        target_model: the model the feedback is about, shown to the LLM (``"the model"`` when unknown).

    Returns:
        Every item with zero or more labels (folded onto :data:`CATEGORIES`, open ones kept as their own) and the
        evidence; an item whose call failed has status ``error``/``parse_failure`` and no label.
    """
    prompt = load_prompt(PROMPT_FILE, "analysis-taxonomy")
    categories = category_list(CATEGORIES)
    return label_items(
        items,
        CATEGORIES,
        caller=caller,
        prompt=prompt,
        schema=LabelsAnswer,
        fields=lambda item: {"target_model": target_model, "categories": categories},
        progress=progress,
    )
