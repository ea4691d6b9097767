"""What the failure taxonomy and the task labels share: a stable category set, a keyword lexicon, folding of
open labels, the versioned prompt files, and one labelling run (rules or an LLM through the cached caller).

A :class:`Category` is one entry of a stable taxonomy: a name (``snake_case``), what it means, the metric that
measures it (``None``: no metric yet), the synonyms an LLM may use for it, and the keyword patterns of the
``rules`` baseline. :func:`fold` maps an open label (``"Yellow tint"``, ``"colour-drift"``) onto the taxonomy;
a label that matches no category stays an open category of its own (``in_taxonomy: false``), never a default.

An LLM labelling run (:func:`label_items`) asks the model once per item through
:class:`~echo_builder.backends.caller.ModelCaller` (cached, so a rerun repeats no call); an item whose call fails
or whose answer cannot be parsed (a refusal, prose, a wrong schema such as a label without its evidence quote,
after one re-ask) is a counted failure and stays unlabelled.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import cache
from importlib import resources
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from echo_builder.errors import ConfigError
from echo_builder.stages.base import PromptTemplate

__all__ = [
    "Category",
    "Item",
    "Label",
    "LabelledItem",
    "LabellingResult",
    "fold",
    "label_items",
    "load_prompt",
    "normalise_label",
    "open_category",
    "rules_labels",
]

#: Longest evidence quote kept, in characters.
MAX_EVIDENCE = 300
#: Labels that mean "nothing to label" (an LLM's way of giving an empty list): no label, not a category.
NULL_LABELS = frozenset(
    {"none", "no", "n a", "na", "null", "nothing", "no complaint", "no failure", "no issue", "other"}
)
#: Words that do not tell one open category from another ("watermark added", "added watermark" and "watermark
#: issue" are one category): dropped from an open label's name by :func:`open_category`.
OPEN_FILLER = frozenset(
    {
        "a", "an", "the", "of", "in", "on", "to", "for", "with", "and", "is", "are", "was", "be",
        "added", "adds", "adding", "appears", "appearing", "appeared", "present", "visible", "shown",
        "issue", "issues", "problem", "problems", "error", "errors", "failure", "failures", "defect", "defects",
        "bad", "poor", "wrong", "incorrect", "unwanted", "undesired", "unexpected", "complaint", "complaints",
    }
)  # fmt: skip


@dataclass(frozen=True)
class Category:
    """One category of a stable taxonomy.

    Attributes:
        name: ``snake_case`` identifier, e.g. ``color_drift``.
        description: what it means, in one line (shown to the LLM and in the report).
        kind: ``practical`` or ``curiosity`` (failures, ECHO Fig. 4), ``behaviour`` (how users interact, Fig. 5)
            or ``task`` (new tasks).
        metric: the echo-bench metric that measures it (``color_shift``, ``face_identity``,
            ``structure_distance``, ``text_rendering``), or ``None`` when no metric covers it yet.
        synonyms: other names an LLM may give it (folded onto ``name``).
        patterns: regular expressions of the ``rules`` lexicon (case-insensitive; whole words, except patterns
            starting with a non-ASCII character, which match anywhere, for Chinese and Japanese text).
    """

    name: str
    description: str
    kind: str = "practical"
    metric: str | None = None
    synonyms: tuple[str, ...] = ()
    patterns: tuple[str, ...] = ()

    @property
    def lexicon(self) -> re.Pattern[str]:
        return _compiled(self.patterns)


@cache
def _compiled(patterns: tuple[str, ...]) -> re.Pattern[str]:
    """One regex: patterns in Latin script match whole words; patterns starting with a non-ASCII character (CJK
    text has no spaces between words) match anywhere."""
    words = [p for p in patterns if p.isascii()]
    anywhere = [p for p in patterns if not p.isascii()]
    parts = []
    if words:
        parts.append(r"(?<![^\W_])(?:" + "|".join(words) + r")(?![^\W_])")
    if anywhere:
        parts.append("(?:" + "|".join(anywhere) + ")")
    return re.compile("|".join(parts) or r"(?!x)x", re.IGNORECASE)


@dataclass(frozen=True)
class Item:
    """One text to label: ``item_id`` (``<sample id>#feedback-<k>``, ``<sample id>#post`` or the sample id),
    the sample it belongs to, its config, where the text came from and the text itself."""

    item_id: str
    sample_id: str
    config: str
    source: str
    text: str


@dataclass(frozen=True)
class Label:
    """A label of one item: the category (folded onto the taxonomy when it fits), whether it is a taxonomy
    category, the label the labeller gave before folding, and the evidence (a quote of the item's text)."""

    category: str
    in_taxonomy: bool
    raw: str
    evidence: str
    quoted: bool = True

    def to_dict(self) -> dict[str, Any]:
        return {
            "category": self.category,
            "in_taxonomy": self.in_taxonomy,
            "raw": self.raw,
            "evidence": self.evidence,
            "quoted": self.quoted,
        }


@dataclass(frozen=True)
class LabelledItem:
    """An item with its labels; ``status`` is ``ok`` or the failure (``error``, ``parse_failure``), in which
    case ``labels`` is empty and ``reason`` says why (the item is unlabelled, never given a default label)."""

    item: Item
    labels: tuple[Label, ...]
    status: Literal["ok", "parse_failure", "error"] = "ok"
    reason: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {
            "item_id": self.item.item_id,
            "sample_id": self.item.sample_id,
            "config": self.item.config,
            "source": self.item.source,
            "text": self.item.text,
            "status": self.status,
            "reason": self.reason,
            "labels": [label.to_dict() for label in self.labels],
        }


@dataclass
class LabellingResult:
    """Every item's labels (input order), and how many calls failed."""

    items: list[LabelledItem] = field(default_factory=list)

    @property
    def failures(self) -> list[LabelledItem]:
        return [i for i in self.items if i.status != "ok"]


def normalise_label(label: str) -> str:
    """``label`` lowercased, with every run of characters other than (Unicode) letters and digits one space:
    ``"Colour-Drift!"`` -> ``"colour drift"``, ``"Dérive de couleur"`` -> ``"dérive de couleur"``; a label in
    Chinese or any other script keeps its letters (``"颜色偏黄"``), so it is folded or kept open, never lost."""
    return " ".join(re.sub(r"[\W_]+", " ", label.lower()).split())


def fold(label: str, categories: Sequence[Category]) -> tuple[str, bool]:
    """The taxonomy category an open label means, and whether it is one.

    A label folds onto a category when, normalised (:func:`normalise_label`), it equals the category's name
    (underscores as spaces) or one of its synonyms, or when the lexicon's patterns match it whole words. Anything
    else is an open category (:func:`open_category`: ``("watermark", False)`` for ``"Watermark added"``); an empty label or one meaning
    "nothing" (:data:`NULL_LABELS`: ``"none"``, ``"no complaint"``, ...) gives ``("", False)``: no label.
    """
    norm = normalise_label(label)
    if not norm or norm in NULL_LABELS:
        return "", False
    for category in categories:
        names = {category.name.replace("_", " "), *(normalise_label(s) for s in category.synonyms)}
        if norm in names:
            return category.name, True
    for category in categories:
        if category.patterns and category.lexicon.search(norm):
            return category.name, True
    return open_category(norm), False


def _singular(word: str) -> str:
    """A plural English noun's singular by its ending alone (``watermarks`` -> ``watermark``, ``faces`` ->
    ``face``); words of four letters or fewer, and ``-ss``/``-us``/``-is`` endings, are kept."""
    if len(word) <= 4 or not word.isascii() or word.endswith(("ss", "us", "is")):
        return word
    if word.endswith("ies"):
        return word[:-3] + "y"
    return word[:-1] if word.endswith("s") else word


def open_category(norm: str) -> str:
    """The name of the open category a normalised label (:func:`normalise_label`) belongs to.

    Labels that differ only in plural endings or in words that name no category (:data:`OPEN_FILLER`: "added",
    "issue", "wrong", ...) are one category, named by the remaining words singularised, in their order, joined
    by ``_``: ``"Watermark added"``, ``"added watermarks"`` and ``"watermark issue"`` are all ``watermark``. The
    name depends on the label alone, so the taxonomy is the same whatever else a run labels. A label made only of
    such words keeps all of them. At most 60 characters.
    """
    words = norm.split()
    kept = list(dict.fromkeys(_singular(w) for w in words if w not in OPEN_FILLER)) or words
    return "_".join(kept)[:60]


def rules_labels(text: str, categories: Sequence[Category], *, first_only: bool = False) -> list[Label]:
    """The ``rules`` baseline: every category whose lexicon matches ``text``, the first match as evidence (in
    taxonomy order; ``first_only`` keeps the first category only)."""
    labels = []
    for category in categories:
        if not category.patterns:
            continue
        match = category.lexicon.search(text)
        if match is None:
            continue
        labels.append(Label(category.name, True, f"rules: {match[0].lower()}", _context(text, match)))
        if first_only:
            break
    return labels


def _context(text: str, match: re.Match[str], width: int = 60) -> str:
    """The words around a lexicon match (about ``width`` characters each side, whole words), as the evidence."""
    before = text[max(0, match.start() - width) : match.start()]
    after = text[match.end() : match.end() + width]
    if match.start() - width > 0:
        before = before.split(None, 1)[-1] if " " in before else ""
    if match.end() + width < len(text):
        after = after.rsplit(None, 1)[0] if " " in after else ""
    return " ".join((before + match[0] + after).split())[:MAX_EVIDENCE]


@cache
def load_prompt(name: str, stage: str) -> PromptTemplate:
    """The prompt file ``echo_builder/analysis/prompt_files/<name>.yaml`` as a :class:`PromptTemplate`.

    Raises:
        ConfigError: the file is missing or lacks ``version``, ``system`` or ``user``.
    """
    from echo_dataset.safe_yaml import load_yaml

    where = f"analysis prompt file {name}.yaml"
    try:
        text = (
            resources.files("echo_builder.analysis")
            .joinpath("prompt_files", f"{name}.yaml")
            .read_text("utf-8")
        )
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(
            f"{where} cannot be read: {getattr(exc, 'strerror', None) or type(exc).__name__}"
        ) from None
    data = load_yaml(text, where, error=ConfigError)
    if not isinstance(data, dict) or not all(
        isinstance(data.get(k), str) for k in ("version", "system", "user")
    ):
        raise ConfigError(f"analysis prompt file {name}.yaml needs string fields version, system and user")
    return PromptTemplate(stage=stage, version=data["version"], system=data["system"], user=data["user"])


def _needs_evidence(label: str, evidence: str) -> None:
    """Every label carries its evidence: a label (other than one meaning "nothing") without a quote is a wrong
    schema, so the caller re-asks once and then counts the item a failure, rather than keeping an unsupported
    label."""
    norm = normalise_label(label)
    if norm and norm not in NULL_LABELS and not evidence.strip():
        raise ValueError(f"label {label!r} has no evidence: quote the words of the text that show it")


class LabelAnswer(BaseModel):
    """One label of an LLM answer, with its evidence (required unless the label means "nothing")."""

    model_config = ConfigDict(extra="ignore")

    category: str = Field(min_length=1, max_length=200)
    evidence: str = Field(default="", max_length=2000)

    @model_validator(mode="after")
    def _evidence(self) -> LabelAnswer:
        _needs_evidence(self.category, self.evidence)
        return self


class LabelsAnswer(BaseModel):
    """The failure labeller's answer: a list of labels (empty: the text complains about nothing)."""

    model_config = ConfigDict(extra="ignore")

    labels: list[LabelAnswer] = Field(max_length=20)


class TaskAnswer(BaseModel):
    """The task labeller's answer: one task and its evidence."""

    model_config = ConfigDict(extra="ignore")

    task: str = Field(min_length=1, max_length=200)
    evidence: str = Field(default="", max_length=2000)

    @model_validator(mode="after")
    def _evidence(self) -> TaskAnswer:
        _needs_evidence(self.task, self.evidence)
        return self


def category_list(categories: Sequence[Category]) -> str:
    """The categories as prompt lines ``- name: description``."""
    return "\n".join(f"- {c.name}: {c.description}" for c in categories)


def label_items(
    items: Sequence[Item],
    categories: Sequence[Category],
    *,
    caller: Any | None,
    prompt: PromptTemplate,
    schema: type[LabelsAnswer] | type[TaskAnswer],
    fields: Callable[[Item], dict[str, Any]],
    first_only: bool = False,
    progress: str | None = None,
) -> LabellingResult:
    """Label every item with the rules lexicon (``caller is None``) or the LLM.

    Args:
        items: the texts to label.
        categories: the stable taxonomy labels are folded onto.
        caller: a :class:`~echo_builder.backends.caller.ModelCaller`, or ``None`` for the rules baseline.
        prompt: the versioned prompt (its version is part of every cache key).
        schema: :class:`LabelsAnswer` (several labels) or :class:`TaskAnswer` (one task).
        fields: the prompt's ``str.format`` fields for one item (besides ``text``).
        first_only: the rules baseline keeps one label per item (tasks).

    Returns:
        A :class:`LabellingResult` in input order; failed items have no labels and a reason.
    """
    from echo_builder.judge.prompts import quote_slot

    result = LabellingResult()
    if caller is None:
        for item in items:
            result.items.append(
                LabelledItem(item, tuple(rules_labels(item.text, categories, first_only=first_only)))
            )
        return result
    requests = [prompt.request(text=quote_slot(item.text, "text"), **fields(item)) for item in items]
    answers = caller.call_structured_many(requests, schema, progress=progress) if requests else []
    for item, answer in zip(items, answers, strict=True):
        if answer.value is None:
            reason = answer.error or f"{answer.status}: {answer.raw_text[:200]!r}"
            result.items.append(LabelledItem(item, (), answer.status, reason))
            continue
        raw = answer.value.labels if isinstance(answer.value, LabelsAnswer) else [answer.value]
        labels: list[Label] = []
        seen: set[str] = set()
        for entry in raw:
            name = entry.category if isinstance(entry, LabelAnswer) else entry.task
            category, known = fold(name, categories)
            if not category or category in seen:
                continue
            seen.add(category)
            evidence = " ".join(entry.evidence.split())
            quoted = bool(evidence) and evidence.lower() in " ".join(item.text.split()).lower()
            labels.append(Label(category, known, name[:200], evidence[:MAX_EVIDENCE], quoted))
        result.items.append(LabelledItem(item, tuple(labels)))
    return result
