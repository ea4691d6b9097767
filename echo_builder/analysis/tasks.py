"""Task labels: which task each benchmark prompt asks for (the new tasks of ECHO's analysis).

ECHO found tasks that earlier benchmarks lack: re-rendering product labels across languages, receipts and
documents with specified contents, novel view synthesis, virtual try-on, templated product images, subjects
spread over several input images, style transfer written as code, and edits that need reasoning. :data:`TASKS`
holds those and the familiar tasks beside them, so counts can be compared; every prompt gets one task label
(the first lexicon match in :data:`TASKS` order for the ``rules`` baseline, which lists the specific tasks before
the general ones), or none when nothing matches (shown as unlabelled, never a default task).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from echo_builder.analysis.labelling import (
    Category,
    Item,
    LabellingResult,
    TaskAnswer,
    category_list,
    label_items,
    load_prompt,
)

__all__ = ["PROMPT_FILE", "TASKS", "label_tasks"]

#: The prompt file of the LLM labeller (``prompt_files/task-labels.yaml``).
PROMPT_FILE = "task-labels"


def _task(
    name: str, description: str, synonyms: tuple[str, ...], patterns: tuple[str, ...], new: bool
) -> Category:
    return Category(
        name, description, kind="new_task" if new else "task", synonyms=synonyms, patterns=patterns
    )


TASKS: tuple[Category, ...] = (
    _task(
        "label_translation",
        "re-render a product label or packaging text in another language",
        ("label localization", "multilingual label", "translate label", "packaging translation"),
        (
            r"translat\w*",
            r"in (?:japanese|chinese|korean|spanish|french|german|arabic|hindi)",
            r"(?:label|packaging) in",
        ),
        True,
    ),
    _task(
        "document_generation",
        "a receipt, invoice, form, menu or document with specified contents or totals",
        ("receipt", "receipt generation", "invoice", "document", "fake document", "menu generation"),
        (
            r"receipts?",
            r"invoices?",
            r"totals?",
            r"menu",
            r"business card",
            r"passport",
            r"certificate",
            r"tickets?",
            r"boarding pass",
        ),
        True,
    ),
    _task(
        "novel_view_synthesis",
        "the same subject or scene from another viewpoint or angle",
        ("novel view", "new viewpoint", "view synthesis", "multi view", "turnaround"),
        (
            r"from (?:the )?(?:back|behind|side|above|top|below)",
            r"(?:other|another|different|side|back|top) "
            r"(?:view|angle)",
            r"360",
            r"turnaround",
            r"multi[- ]?view",
            r"rotate the camera",
        ),
        True,
    ),
    _task(
        "virtual_try_on",
        "dress a person in given clothing or accessories",
        ("try on", "virtual tryon", "outfit swap", "clothing transfer"),
        (
            r"try[- ]?on",
            r"wear(?:ing)? (?:this|these|the)",
            r"put (?:this|these|the) (?:\w+ )?on (?:me|him|her)",
            r"outfit",
        ),
        True,
    ),
    _task(
        "templated_product_image",
        "a product shot, mockup or ad from a template with fill-in fields",
        ("product mockup", "product photo", "mockup", "advertisement", "product template"),
        (
            r"mock-?ups?",
            r"product (?:shot|photo|image)",
            r"\[(?:brand|product|logo)[^\]]*\]",
            r"\{[^}]+\}",
            r"packaging",
            r"advert\w*",
        ),
        True,
    ),
    _task(
        "multi_image_composition",
        "combine subjects or elements from several input images",
        ("multi image", "multi subject", "composite", "combine images", "multiple references"),
        (
            r"(?:these|both|two|three|all) (?:images|photos|pictures)",
            r"combine",
            r"merge",
            r"first image",
            r"second image",
        ),
        True,
    ),
    _task(
        "code_style_transfer",
        "a style given as code or a structured spec (JSON, CSS, HTML, SVG)",
        ("code style", "json prompt", "structured prompt", "code to image"),
        (r"json", r"css", r"html", r"svg", r"yaml", r"\{\s*\""),
        True,
    ),
    _task(
        "reasoning_edit",
        "an edit or image that needs reasoning (counts, physics, what happens next, puzzles)",
        ("reasoning", "reasoning edit", "logic", "physics", "puzzle", "counting"),
        (
            r"what (?:would|will) (?:happen|it look)",
            r"after \d+ (?:years|hours|days)",
            r"solve",
            r"puzzle",
            r"how many",
            r"if (?:it|this|the)",
        ),
        True,
    ),
    _task(
        "text_rendering",
        "an image whose point is legible text: poster, sign, infographic, logo, comic",
        ("poster", "typography", "infographic", "text in image", "sign"),
        (
            r"posters?",
            r"signs?",
            r"infographic",
            r"logo",
            r"typograph\w*",
            r"title",
            r"caption",
            r"comic",
            r"reads?",
            r"says?",
            r"text",
        ),
        False,
    ),
    _task(
        "style_transfer",
        "restyle an image or subject (Ghibli, anime, watercolor, figurine, ...)",
        ("restyle", "stylization", "style change", "art style"),
        (
            r"ghibli",
            r"anime",
            r"in the style of",
            r"style",
            r"watercolou?r",
            r"pixar",
            r"cartoon",
            r"figurine",
            r"clay",
            r"lego",
            r"sketch",
        ),
        False,
    ),
    _task(
        "portrait_edit",
        "edit a person: face, expression, hair, age, pose",
        ("face edit", "portrait", "person edit", "selfie edit"),
        (
            r"(?:her|his|my|their) (?:face|hair|expression|smile)",
            r"portrait",
            r"selfie",
            r"older",
            r"younger",
            r"woman",
            r"man",
        ),
        False,
    ),
    _task(
        "object_edit",
        "add, remove or replace an object",
        ("object editing", "add object", "remove object", "replace object", "inpainting"),
        (r"add", r"remove", r"replace", r"erase", r"delete", r"swap", r"change (?:the|my)"),
        False,
    ),
    _task(
        "scene_generation",
        "a general scene, object or character from a description",
        ("text to image", "scene", "general generation", "illustration"),
        (r"a (?:photo|picture|painting|illustration|drawing|render)", r"scene", r"landscape", r"storefront"),
        False,
    ),
)

#: Chinese keywords of the ``rules`` lexicon (matched anywhere: Chinese has no spaces between words); community
#: prompt collections are often written in Chinese first.
_CJK: dict[str, tuple[str, ...]] = {
    "label_translation": ("翻译",),
    "document_generation": ("收据", "发票", "护照", "菜单", "名片", "证书", "票据"),
    "novel_view_synthesis": ("视角", "俯视", "侧面"),
    "virtual_try_on": ("穿搭", "试穿", "换装"),
    "templated_product_image": ("包装", "广告", "产品"),
    "multi_image_composition": ("两张", "多张", "融合"),
    "reasoning_edit": ("推理", "计算"),
    "text_rendering": ("海报", "文字", "标题", "信息图", "封面", "漫画"),
    "style_transfer": ("风格", "吉卜力", "手办", "Q版", "素描"),
    "portrait_edit": ("人物", "人脸", "自拍"),
    "object_edit": ("添加", "去掉", "删除", "替换"),
    "scene_generation": ("照片", "渲染", "插画", "场景"),
}
TASKS = tuple(replace(t, patterns=t.patterns + _CJK.get(t.name, ())) for t in TASKS)


def label_tasks(
    items: Sequence[Item], *, caller: object | None, target_model: str, progress: str | None = None
) -> LabellingResult:
    """One task label per prompt, by the rules lexicon (``caller=None``) or an LLM (folded onto :data:`TASKS`).

    Args:
        items: prompts (``config`` says text-to-image or image-to-image).
        caller: a :class:`~echo_builder.backends.caller.ModelCaller` or ``None`` (rules).
        target_model: the model the prompts were written for.

    Returns:
        Every prompt with at most one task and the evidence; failed calls leave the prompt unlabelled.
    """
    prompt = load_prompt(PROMPT_FILE, "analysis-tasks")
    tasks = category_list(TASKS)
    kinds = {
        "text_to_image": "text-to-image",
        "image_to_image": "image editing with input images",
        "analysis": "a post about the model, possibly with a prompt",
    }
    return label_items(
        items,
        TASKS,
        caller=caller,
        prompt=prompt,
        schema=TaskAnswer,
        fields=lambda item: {
            "target_model": target_model,
            "tasks": tasks,
            "kind": kinds.get(item.config, item.config),
        },
        first_only=True,
        progress=progress,
    )
