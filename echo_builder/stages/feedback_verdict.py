"""``feedback_verdict``: the optional stage that labels what each community reply says about the output it answers.

ECHO keeps the replies to a post as ``community_feedback`` ("amazing result", "it changed her face"). This stage
labels each item's **verdict** on the target model's output:

- ``positive``: the reply praises the result;
- ``negative``: it points out a failure;
- ``mixed``: it does both;
- ``not_a_verdict``: it judges nothing about the image (a question, a joke, a tag).

It runs only in a build with ``feedback_verdicts`` set (``echo-bench build --feedback-verdicts``); without it the
build writes exactly what it did before. It labels the feedback of every sample that becomes a dataset row (Trash /
Discard samples are not labelled). With a model backend each item is one call with the versioned prompt
``echo_builder/prompt_files/feedback-verdict.yaml`` (format ``echo-bench-feedback-verdict-prompt/1``; its
``version`` is part of the call-cache key); with ``--backend rules`` the keyword-and-negation lexicon of
:func:`rules_feedback_verdict` labels it. A failed model answer falls back to the rules label and is recorded in
``stages/failures.jsonl`` (``source`` says which labeller decided).

``stages/feedback_verdict.jsonl`` holds one line per feedback item: ``sample_id`` (the dataset row's id, unless
the build made a duplicate id unique after the stage), ``index`` (0-based position in ``community_feedback``),
``post_url`` and ``feedback`` (as the posts had them: the dataset pseudonymizes handles), ``verdict`` (one of :data:`VERDICTS`), ``source`` (``rules`` or ``model``) and
``error`` (the model's failure, or null). The samples and the dataset rows are unchanged.
:func:`echo_builder.judge.community.community_agreement` reads the file to measure how a judge's ratings of the
community's outputs agree with these verdicts (``echo-bench agreement RUN --community``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict

from echo_builder.backends.rules import register_rule
from echo_builder.errors import ConfigError
from echo_builder.stages.base import StageFailure
from echo_builder.stages.registry import StageContext, StageDefinition, StageOutput, declare_stage

if TYPE_CHECKING:
    from echo_builder.pipeline import BuildConfig

__all__ = [
    "FEEDBACK_VERDICT_FILE",
    "FEEDBACK_VERDICT_PROMPT_FILE",
    "VERDICTS",
    "FeedbackVerdictPrompt",
    "load_feedback_verdict_prompt",
    "rules_feedback_verdict",
    "run_feedback_verdict_stage",
    "sample_verdict",
]

FeedbackLabel = Literal["positive", "negative", "mixed", "not_a_verdict"]
#: The labels of one feedback item, in this order everywhere (report counts, docs).
VERDICTS: tuple[str, ...] = ("positive", "negative", "mixed", "not_a_verdict")
#: The stage file (under ``OUT/stages/``).
FEEDBACK_VERDICT_FILE = "feedback_verdict.jsonl"
#: The versioned prompt a model backend gets (format ``echo-bench-feedback-verdict-prompt/1``).
FEEDBACK_VERDICT_PROMPT_FILE = (
    Path(__file__).resolve().parent.parent / "prompt_files" / "feedback-verdict.yaml"
)
_PROMPT_FORMAT = "echo-bench-feedback-verdict-prompt/1"
#: The rules lexicon's version (the stage version with ``--backend rules``; bump it when the lexicon changes).
RULES_VERSION = "feedback-verdict-rules-v1"

# -- the rules baseline: a keyword lexicon with negation ---------------------------------------------------------
# Each cue is a regular expression matched case-insensitively on word boundaries (emoji match as they are).
_POSITIVE_CUES = (
    r"amazing",
    r"awesome",
    r"impressive",
    r"impressed",
    r"incredible",
    r"insane(?:ly good)?",
    r"stunning",
    r"gorgeous",
    r"beautiful",
    r"perfect(?:ly)?",
    r"flawless",
    r"excellent",
    r"fantastic",
    r"great",
    r"good",
    r"nice",
    r"cool",
    r"love(?:ly|s)?",
    r"best",
    r"nailed(?: it)?",
    r"spot[ -]on",
    r"wow+",
    r"mind[ -]?blowing",
    r"works?",
    r"worked",
    r"accurate",
    r"clean",
    r"better",
    r"crisp",
    r"well done",
    r"looks? (?:real|right)",
    r"太棒",
    r"好看",
    r"厉害",
    r"牛",
)
_POSITIVE_SYMBOLS = ("🔥", "😍", "👍", "🤩", "👏", "❤️", "💯")
_NEGATIVE_CUES = (
    r"changed (?:her|his|their|my|the) (?:face|identity|eyes|hair|expression)",
    r"(?:lost|loses|losing) (?:the |her |his |their )?(?:face|identity|likeness|details?)",
    r"not the same (?:person|face)",
    r"doesn'?t look like",
    r"does not look like",
    r"wrong",
    r"bad",
    r"terrible",
    r"awful",
    r"horrible",
    r"ugly",
    r"fail(?:s|ed|ure)?",
    r"broken",
    r"broke",
    r"ruin(?:s|ed)?",
    r"mess(?:ed)? up",
    r"artifacts?",
    r"distorted",
    r"deformed",
    r"blurry",
    r"garbled",
    r"misspell(?:ed|ing|s)?",
    r"gibberish",
    r"ignored",
    r"worse",
    r"disappointing",
    r"disappointed",
    r"weird",
    r"creepy",
    r"uncanny",
    r"(?:turned|went|came out|looks?|is|are) (?:\w+ ){0,3}(?:yellow|orange|washed[- ]out)",
    r"(?:yellow|orange|colou?r) (?:tint|cast|shift)",
    r"washed[- ]out",
    r"(?:has|have|had|with) no \w+",
    r"extra (?:fingers?|limbs?|arms?|legs?)",
    r"missing",
    r"not (?:\w+ ){0,4}(?:i|we) asked for",
    r"崩",
    r"不对",
    r"不像",
    r"错",
)
_NEGATIVE_SYMBOLS = ("👎", "🤮", "😬", "🙄")
_NEGATORS = re.compile(
    r"(?<![^\W_])(?:not|no|never|hardly|isn'?t|wasn'?t|aren'?t|doesn'?t|don'?t|didn'?t|ain'?t|nothing|"
    r"barely|without)(?![^\W_])",
    re.IGNORECASE,
)


def _cue_pattern(cues: tuple[str, ...]) -> re.Pattern[str]:
    return re.compile(r"(?<![^\W_])(?:" + "|".join(cues) + r")(?![^\W_])", re.IGNORECASE)


_POSITIVE = _cue_pattern(_POSITIVE_CUES)
_NEGATIVE = _cue_pattern(_NEGATIVE_CUES)
#: How many words before a cue a negator flips it ("not that good", "doesn't look bad").
_NEGATION_WINDOW = 3


def _negated(text: str, start: int) -> bool:
    """Whether a negator stands among the :data:`_NEGATION_WINDOW` words before ``start`` (same clause)."""
    before = re.split(r"[.!?;,:\n]", text[:start])[-1]
    words = re.findall(r"[\w']+", before)[-_NEGATION_WINDOW:]
    return any(_NEGATORS.fullmatch(w) for w in words)


def rules_feedback_verdict(feedback: str) -> FeedbackLabel:
    """The rules baseline's verdict on one reply: keyword cues with negation.

    Positive cues ("amazing", "nailed it", "🔥") and negative cues ("changed her face", "wrong", "artifacts",
    "👎") are counted; a word cue preceded by a negator within three words of the same clause flips its polarity
    ("not good" is negative, "not bad" positive). Both polarities -> ``mixed``; one -> that one; none ->
    ``not_a_verdict``. A real but weak labeller (no sarcasm, no context): the LLM prompt is the better one.

    Args:
        feedback: the reply's text (any length; empty -> ``not_a_verdict``).
    Returns:
        One of :data:`VERDICTS`.
    """
    positive = negative = 0
    for pattern, polarity in ((_POSITIVE, 1), (_NEGATIVE, -1)):
        for match in pattern.finditer(feedback):
            value = -polarity if _negated(feedback, match.start()) else polarity
            positive += value > 0
            negative += value < 0
    positive += sum(feedback.count(s) for s in _POSITIVE_SYMBOLS)
    negative += sum(feedback.count(s) for s in _NEGATIVE_SYMBOLS)
    if positive and negative:
        return "mixed"
    if positive:
        return "positive"
    if negative:
        return "negative"
    return "not_a_verdict"


register_rule("feedback_verdict")(rules_feedback_verdict)


def sample_verdict(labels: list[str]) -> str:
    """One output's community verdict from its feedback items' labels (:data:`VERDICTS`).

    ``positive`` when at least one item is positive and none negative or mixed; ``negative`` likewise; ``mixed``
    when both polarities (or a mixed item) occur; ``not_a_verdict`` when no item judges the output (or there is
    none).
    """
    judged = {label for label in labels if label != "not_a_verdict"}
    if not judged:
        return "not_a_verdict"
    if judged == {"positive"}:
        return "positive"
    if judged == {"negative"}:
        return "negative"
    return "mixed"


# -- the model prompt --------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class FeedbackVerdictPrompt:
    """The versioned prompt: ``system`` and ``user`` templates (``{prompt}`` and ``{feedback}`` slots)."""

    name: str
    version: str
    system: str
    user: str


def load_feedback_verdict_prompt(path: str | Path | None = None) -> FeedbackVerdictPrompt:
    """Read a feedback-verdict prompt file (default :data:`FEEDBACK_VERDICT_PROMPT_FILE`).

    Raises:
        ConfigError: the file is missing, not YAML, not of format ``echo-bench-feedback-verdict-prompt/1``, lacks
            one of ``name``, ``version``, ``system``, ``user`` (strings), or its user template lacks ``{feedback}``.
    """
    from echo_builder.input_files import read_prompt_yaml

    where = Path(path) if path is not None else FEEDBACK_VERDICT_PROMPT_FILE
    data = read_prompt_yaml(where, "feedback-verdict prompt file", _PROMPT_FORMAT)
    if "{feedback}" not in data["user"]:
        raise ConfigError(
            f"feedback-verdict prompt file {str(where)!r}: the user template lacks {{feedback}}"
        )
    return FeedbackVerdictPrompt(data["name"], data["version"], data["system"], data["user"])


class FeedbackVerdictAnswer(BaseModel):
    """The model's answer: ``{"verdict": "positive" | "negative" | "mixed" | "not_a_verdict"}``."""

    model_config = ConfigDict(extra="ignore")

    verdict: FeedbackLabel


def prepare_feedback_verdict(config: BuildConfig) -> FeedbackVerdictPrompt:
    """The prompt, read (and checked) before anything is written."""
    return load_feedback_verdict_prompt()


def run_feedback_verdict_stage(context: StageContext) -> StageOutput:
    """Label every feedback item of every sample that becomes a dataset row (see the module)."""
    from echo_builder.backends.base import GenerationParams, Message, TextPart
    from echo_builder.backends.caller import CallRequest
    from echo_builder.dataset_rows import route
    from echo_builder.judge.prompts import quote_slot

    prompt: FeedbackVerdictPrompt = context.prepared["feedback_verdict"]
    rows: list[dict[str, Any]] = []
    pending: list[tuple[int, CallRequest]] = []
    labelled = 0
    for sample in context.samples:
        if route(sample) is None or not sample.community_feedback:
            continue
        labelled += 1
        for index, item in enumerate(sample.community_feedback):
            rows.append(
                {
                    "sample_id": sample.id,
                    "index": index,
                    "post_url": item.post_url,
                    "feedback": item.feedback,
                    "verdict": rules_feedback_verdict(item.feedback),
                    "source": "rules",
                    "error": None,
                }
            )
            if context.caller is None:
                continue
            user = prompt.user.format(
                prompt=quote_slot(sample.prompt, "prompt"), feedback=quote_slot(item.feedback, "reply")
            )
            messages = (Message("system", (TextPart(prompt.system),)), Message("user", (TextPart(user),)))
            request = CallRequest(
                messages,
                GenerationParams(max_tokens=64),
                stage="feedback_verdict",
                prompt_version=prompt.version,
            )
            pending.append((len(rows) - 1, request))
    failures = 0
    if context.caller is not None and pending:
        answers = context.caller.call_structured_many(
            [r for _, r in pending], FeedbackVerdictAnswer, progress=context.progress("feedback_verdict")
        )
        for (i, _), answer in zip(pending, answers, strict=True):
            row = rows[i]
            if answer.value is None:  # the rules label stays, marked as such
                failures += 1
                row["error"] = answer.error or "no answer"
                context.failures.append(
                    StageFailure(
                        "feedback_verdict",
                        f"{row['sample_id']}#{row['index']}",
                        row["error"],
                        answer.raw_text,
                    )
                )
                continue
            row.update(verdict=answer.value.verdict, source="model")
    return StageOutput(
        {
            "in": labelled,
            "out": labelled,
            "failures": failures,
            "labeller": RULES_VERSION if context.caller is None else prompt.version,
            "items": len(rows),
            "verdicts": {v: sum(1 for r in rows if r["verdict"] == v) for v in VERDICTS},
        },
        files={FEEDBACK_VERDICT_FILE: rows},
    )


FEEDBACK_VERDICT_STAGE = declare_stage(
    StageDefinition(
        name="feedback_verdict",
        version=load_feedback_verdict_prompt().version,
        run=run_feedback_verdict_stage,
        after="safety",  # last: it reads the final samples and changes none (safety, optional too, may be off)
        reads=("samples",),
        writes=("failures",),
        report_fields=("labeller", "items", "verdicts"),
        calls_model=True,
        prepare=prepare_feedback_verdict,
        when=lambda config: bool(getattr(config, "feedback_verdicts", False)),
        description="community verdicts (--feedback-verdicts): positive / negative / mixed / not a verdict per "
        "feedback item",
    )
)
