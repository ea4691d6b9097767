"""``text_accuracy``: does the output image contain, character for character, the text its prompt asks for?

ECHO (arXiv 2510.15021, Flow 3, community-driven metrics) turns the recurring complaint "the text is misspelled"
into a text-rendering metric, judged there by a VLM (:mod:`echo_builder.scoring.text`). A judge's impression and
the actual characters can disagree (a wrong digit in a receipt total, one swapped Chinese character), so this
metric reads the characters with an OCR model instead and scores them with the character error rate (CER).

Definition, per sample:

1. **Required strings** (:func:`required_strings`): the text the prompt asks for verbatim, i.e. every quoted
   span of the prompt, or the values of a text field when one is given (``text_field_values``).
2. **OCR**: the output image is read by PP-OCRv4 (:mod:`echo_builder.ocr`); its lines are joined in reading
   order.
3. **Normalisation** (:func:`normalise`), applied to both sides: Unicode NFKC (full-width ``ＴＯＴＡＬ１２`` ->
   ``TOTAL12``, ideographic space -> space, ligatures split), case folding (``str.casefold``), typographic quotes
   and dashes mapped to their ASCII forms (``‘’‚‛′`` -> ``'``, ``“”„‟″`` -> ``"``, ``‐‑‒–—―−`` -> ``-``), and every
   whitespace character removed: OCR engines split and merge words unreliably, and a line break in the image is
   layout, not spelling, so spaces neither count as errors nor as characters. Invisible characters (controls
   such as NUL, format characters such as the zero-width space) are removed too: they cannot be rendered.
4. **Best alignment** (:func:`best_alignment`): the smallest Levenshtein distance between the normalised
   required string ``r`` (``m`` characters) and any substring of the normalised OCR text (approximate
   substring matching; Sellers 1980, "The theory and computation of evolutionary distances: pattern
   recognition", J. Algorithms 1(4)): insertions, deletions and substitutions cost 1 each.
5. **Score of one string**: ``1 - CER`` with ``CER = distance / m`` (the character error rate, (S + D + I) / N
   with N the reference length, as in OCR and speech-recognition evaluation, e.g. Morris et al. 2004). The
   empty substring is always a candidate, so ``distance <= m`` and the score lies in [0, 1]: 1 = rendered
   exactly, 0 = nothing of it found. Other text in the image does not lower it.
6. **Sample score**: the mean over its required strings (each string weighs the same, whatever its length).

NaN, with the reason beside it, when the prompt asks for no verbatim text (or the text field is empty), the
sample's ``text_rendering`` applicability flag is false, the output is missing, or the output cannot be decoded
or read (``on_image_error="nan"``). An image in which OCR finds no text scores 0, not NaN: the text is missing.

What it catches and what it cannot (as ECHO argues for OCR-based checks): exact digits, spelling, missing or
extra characters, wrong script. It cannot judge layout, fit, font, legibility in context or whether the text sits
on the right object; OCR misreads of stylised lettering count as errors; and a quoted span that is not text to
render (scare quotes, a quoted style name) is still required. The VLM judge's ``text_rendering`` covers the rest.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from echo_builder.errors import ConfigError, ImageError
from echo_builder.scoring.base import (
    OUTPUT_MISSING,
    MetricResult,
    MetricSpec,
    check_on_image_error,
    not_applicable_mask,
    register_metric_spec,
)
from echo_builder.scoring.registry import MetricDefinition, MetricOption, declare_metric

__all__ = [
    "INVALID_PROMPT",
    "INVALID_TEXT_FIELD",
    "NOT_APPLICABLE",
    "NO_REQUIRED_TEXT",
    "NO_TEXT_FIELD",
    "OUTPUT_MISSING",
    "QUOTE_PAIRS",
    "TEXT_ACCURACY",
    "TEXT_ACCURACY_METRIC",
    "Alignment",
    "best_alignment",
    "normalise",
    "required_strings",
    "string_accuracy",
    "text_accuracy",
]

TEXT_ACCURACY = register_metric_spec(
    MetricSpec(
        name="text_accuracy",
        higher_is_better=True,
        low=0.0,
        high=1.0,
        unit="1 - character error rate of the required text's best match in the OCR text, mean over strings",
        source=(
            "ECHO (arXiv 2510.15021), Flow 3 community-driven metrics: text rendering; CER = (S+D+I)/N of the "
            "best approximate substring match (Levenshtein 1966; Sellers 1980), OCR by PP-OCRv4"
        ),
    )
)

#: NaN reasons, word for word, so reports can count them.
NO_REQUIRED_TEXT = "not applicable: the prompt asks for no verbatim text (no quoted string)"
NO_TEXT_FIELD = "not applicable: the sample's text field is empty"
NOT_APPLICABLE = "not applicable: the sample's text_rendering flag is false"
INVALID_PROMPT = "invalid prompt: expected a string"
INVALID_TEXT_FIELD = "invalid text field value: expected a string or a list of strings"

#: Paired quotation marks recognised in prompts (opening, closing). Straight quotes follow their own rules (see
#: :func:`required_strings`). CJK corner brackets 「」『』 are quotation marks in Chinese and Japanese; the
#: book-title marks 《》 name a work (a poster or book title), which a prompt about an image asks to render.
QUOTE_PAIRS: tuple[tuple[str, str], ...] = (
    ("\u201c", "\u201d"),  # “ ” English double
    ("\u2018", "\u2019"),  # ‘ ’ English single
    ("\u201e", "\u201c"),  # „ “ German double
    ("\u201e", "\u201d"),  # „ ” Polish, Hungarian double
    ("\u00ab", "\u00bb"),  # « » guillemets
    ("\u00bb", "\u00ab"),  # » « German, Danish guillemets
    ("\u300c", "\u300d"),  # 「 」 CJK corner brackets
    ("\u300e", "\u300f"),  # 『 』 CJK white corner brackets
    ("\u300a", "\u300b"),  # 《 》 Chinese book-title marks
    ("\uff62", "\uff63"),  # ｢ ｣ half-width corner brackets
)

_PAIRED = [
    re.compile(re.escape(opening) + r"([^" + re.escape(opening + closing) + r"]+)" + re.escape(closing))
    for opening, closing in QUOTE_PAIRS
]
# straight double quotes (and the full-width ＂): paired left to right
_DOUBLE = re.compile(r"[\"\uff02]([^\"\uff02]+)[\"\uff02]")
# straight single quotes (and the full-width ＇): only when clearly a quote, not an apostrophe: the opening mark
# follows the start or a non-word character and precedes a non-space; the closing mark follows a non-space and
# precedes the end or a non-word character; inside, an apostrophe is allowed only between two word characters
# ("'Don't panic'"). So "the girls' dresses", "don't" and "'90s" quote nothing.
_SINGLE = re.compile(r"(?<!\w)['\uff07](?=\S)((?:[^'\uff07]|(?<=\w)['\uff07](?=\w))*?\S)['\uff07](?!\w)")

# an HTML/XML tag written into a prompt (``<span style="color:red">``): quotes inside it hold attribute values
_MARKUP_TAG = re.compile(r"</?[A-Za-z][^<>]*>")

_TYPOGRAPHIC = str.maketrans(
    {
        **dict.fromkeys("\u2018\u2019\u201a\u201b\u2032", "'"),
        **dict.fromkeys("\u201c\u201d\u201e\u201f\u2033", '"'),
        **dict.fromkeys("\u2010\u2011\u2012\u2013\u2014\u2015\u2212", "-"),
    }
)
_WHITESPACE = re.compile(r"\s+")
_INVISIBLE = ("Cc", "Cf")


def _pass(text: str) -> str:
    folded = unicodedata.normalize("NFKC", text).casefold().translate(_TYPOGRAPHIC)
    folded = _WHITESPACE.sub("", folded)
    if not folded.isprintable():  # fast path: only strings holding a control or format character are filtered
        folded = "".join(ch for ch in folded if unicodedata.category(ch) not in _INVISIBLE)
    return folded


def normalise(text: str) -> str:
    """Normalise ``text`` for matching: NFKC, case folding, typographic quotes and dashes to ASCII, whitespace and
    invisible characters (control characters, Unicode category Cc, and format characters such as the zero-width
    space and the soft hyphen, category Cf) removed (see the module docstring, step 3).

    Example:
        >>> normalise("Ｔｏｔａｌ  $127.54\\n")
        'total$127.54'
    """
    folded = _pass(text)
    # case folding, or removing a space that separated a combining mark from its letter (NFKC writes "¯" as
    # space + U+0304), can leave a string NFKC changes again: repeat until stable, so normalise is idempotent
    for _ in range(4):
        again = _pass(folded)
        if again == folded:
            break
        folded = again
    return folded


def required_strings(prompt: str) -> list[str]:
    """The strings ``prompt`` asks to render verbatim: the contents of its quoted spans, in prompt order.

    Quote styles: every pair in :data:`QUOTE_PAIRS` (“..”, ‘..’, „..“, «..», 「..」, 『..』, 《..》, ...), straight
    double quotes ``".."`` (paired left to right) and straight single quotes ``'..'`` when clearly a quote, not
    an apostrophe (see ``_SINGLE`` in the source). A span nested inside another (``‘点右下“我想要”’``) belongs to the
    outer one and is not listed again. Ignored: an unclosed quote, a span whose content normalises to nothing
    (only whitespace), quotes inside an HTML/XML tag written into the prompt (``<span style="color:red">``: an
    attribute value) and a repeat of a string already listed (same :func:`normalise` form; each required string
    counts once). Contents are returned as first written, stripped of surrounding whitespace; :func:`normalise`
    applies when scoring.

    Args:
        prompt: the prompt text (any language).

    Returns:
        list of str, possibly empty (then the prompt asks for no verbatim text).

    Example:
        >>> required_strings("A receipt reading \\"TOTAL $127.54\\" and a sign 「营业中」, the girls' shop")
        ['TOTAL $127.54', '营业中']
    """
    if not isinstance(prompt, str):
        raise ConfigError(f"a prompt must be a string, got {type(prompt).__name__}")
    tags = [(m.start(), m.end()) for m in _MARKUP_TAG.finditer(prompt)]
    spans: list[tuple[int, int, str]] = []
    for pattern in (*_PAIRED, _DOUBLE, _SINGLE):
        spans.extend(
            (m.start(), m.end(), m.group(1))
            for m in pattern.finditer(prompt)
            if not any(low < m.start() < high for low, high in tags)  # an attribute value, not text
        )
    # outermost spans only, in prompt order; of two overlapping spans (mixed styles) the earlier one wins
    spans.sort(key=lambda span: (span[0], -span[1]))
    kept: list[tuple[int, int, str]] = []
    for start, end, content in spans:
        if kept and start < kept[-1][1]:
            continue
        kept.append((start, end, content))
    strings: list[str] = []
    seen: set[str] = set()
    for _, _, content in kept:
        key = normalise(content)
        if key and key not in seen:
            seen.add(key)
            strings.append(content.strip())
    return strings


@dataclass(frozen=True)
class Alignment:
    """Best match of a required string inside a text (both already normalised).

    Attributes:
        distance: Levenshtein distance between the required string and ``text[start:end]`` (int >= 0).
        start, end: the matched substring's bounds in the text (``start == end`` when the best match is empty).
    """

    distance: int
    start: int
    end: int


def best_alignment(required: str, text: str) -> Alignment:
    """Smallest edit distance between ``required`` and any substring of ``text`` (Sellers' algorithm).

    Dynamic programming over ``D[i][j]`` = the distance between ``required[:i]`` and the best substring of
    ``text`` ending at ``j``, with ``D[0][j] = 0`` (a match may start anywhere) and unit costs; the answer is
    ``min_j D[m][j]``. Ties go to the earliest end, then the latest start (the shortest match). O(m * n) time
    in m numpy passes over the text (about 30 ms for 1,000 required characters against 5,000 of OCR text), O(n)
    memory.

    Args:
        required: the string to find (normalise it first).
        text: where to look (normalise it first).

    Returns:
        :class:`Alignment`; ``distance <= len(required)`` always (the empty substring is a candidate).

    Example:
        >>> best_alignment("total$127.54", "receipt total$172.45 thanks")
        Alignment(distance=3, start=8, end=19)
    """
    m, n = len(required), len(text)
    if m == 0:
        return Alignment(0, 0, 0)
    # One row of D at a time, vectorised over j. A cell's distance and the start of its substring travel as one
    # int64 key, ``distance * base + (n + 1 - start)``, so that a minimum picks the smallest distance, then the
    # latest start. The insertion step ``D[i][j] = min(a[j], D[i][j-1] + 1)`` is a running minimum of
    # ``a[k] - k`` (then + j), computed by ``np.minimum.accumulate``.
    base = n + 2
    columns = np.arange(n + 1, dtype=np.int64)
    text_codes = np.frombuffer(text.encode("utf-32-le", "surrogatepass"), dtype=np.uint32)
    required_codes = np.frombuffer(required.encode("utf-32-le", "surrogatepass"), dtype=np.uint32)
    dist = np.zeros(n + 1, dtype=np.int64)
    start = columns.copy()  # D[0][j] = 0: the empty prefix matches the empty substring at j
    for i in range(1, m + 1):
        substitution = (dist[:-1] + (text_codes != required_codes[i - 1])) * base + (n + 1 - start[:-1])
        deletion = (dist[1:] + 1) * base + (n + 1 - start[1:])
        keys = np.empty(n + 1, dtype=np.int64)
        keys[0] = i * base + (n + 1)  # D[i][0] = i, from the empty substring at 0
        keys[1:] = np.minimum(substitution, deletion)
        values, tags = np.divmod(keys, base)
        running = np.minimum.accumulate((values - columns) * base + tags)
        values, tags = np.divmod(running, base)
        dist, start = values + columns, n + 1 - tags
    end = int(np.argmin(dist))  # the first minimum: the earliest end
    return Alignment(int(dist[end]), int(start[end]), end)


def string_accuracy(required: str, text: str) -> tuple[float, Alignment, str, str]:
    """``1 - CER`` of ``required``'s best match in ``text``, after :func:`normalise` on both.

    Returns:
        (score in [0, 1], the :class:`Alignment` in the normalised text, normalised required string, normalised
        text). A required string that normalises to nothing scores NaN (nothing to check).
    """
    r, t = normalise(required), normalise(text)
    alignment = best_alignment(r, t)
    score = 1.0 - alignment.distance / len(r) if r else float("nan")
    return score, alignment, r, t


def _is_missing(value: Any) -> bool:
    """``None`` or a float NaN (how pandas and Arrow write a missing cell)."""
    return value is None or (isinstance(value, float) and value != value)


def _sample_required(prompt: Any, field_value: Any, use_field: bool) -> tuple[list[str], str | None]:
    """The required strings of one sample and the NaN reason when there are none (never raises: a bad record
    is one NaN, not a failed run)."""
    if not use_field:
        if _is_missing(prompt):
            return [], NO_REQUIRED_TEXT
        if not isinstance(prompt, str):
            return [], f"{INVALID_PROMPT}, got {type(prompt).__name__}"
        found = required_strings(prompt)
        return found, None if found else NO_REQUIRED_TEXT
    if _is_missing(field_value):
        values: list[Any] = []
    elif isinstance(field_value, str):
        values = [field_value]
    elif isinstance(field_value, (list, tuple, np.ndarray)):
        values = [v for v in list(field_value) if not _is_missing(v)]
    else:
        return [], f"{INVALID_TEXT_FIELD}, got {type(field_value).__name__}"
    bad = [type(v).__name__ for v in values if not isinstance(v, str)]
    if bad:
        return [], f"{INVALID_TEXT_FIELD}, got a list holding {', '.join(sorted(set(bad)))}"
    found: list[str] = []
    seen: set[str] = set()
    for value in values:
        key = normalise(value)
        if key and key not in seen:
            seen.add(key)
            found.append(value.strip())
    return found, None if found else NO_TEXT_FIELD


def _check_arguments(
    prompts: Sequence[Any],
    outputs: Sequence[Any],
    text_field_values: Sequence[Any] | None,
    on_image_error: str,
    applicable: Sequence[bool | None] | None,
) -> list[bool]:
    if len(prompts) != len(outputs):
        raise ConfigError(
            f"prompts and outputs must pair up one to one: got {len(prompts)} prompts and {len(outputs)} outputs"
        )
    if text_field_values is not None and len(text_field_values) != len(outputs):
        raise ConfigError(
            f"text_field_values needs one entry per sample: got {len(text_field_values)} for {len(outputs)}"
        )
    check_on_image_error(on_image_error)
    return not_applicable_mask(applicable, len(outputs))


def text_accuracy(
    prompts: Sequence[str | None],
    outputs: Sequence[Any],
    *,
    text_field_values: Sequence[str | Sequence[str] | None] | None = None,
    ocr: Any | None = None,
    on_image_error: str = "nan",
    applicable: Sequence[bool | None] | None = None,
    progress: bool = False,
) -> MetricResult:
    """Per-sample text accuracy of output images against the text their prompts ask for (higher is better).

    Args:
        prompts: n prompts; their quoted spans are the required strings (:func:`required_strings`). ``None`` or
            NaN (a missing cell) asks for no text; a non-string makes that sample NaN (:data:`INVALID_PROMPT`).
        outputs: n output images (anything :func:`echo_builder.imaging.load_rgb` accepts); ``None`` = missing.
        text_field_values: optional, n entries replacing the quoted spans as the required strings: a string,
            a list of strings (a repeat counts once), or ``None``/NaN/``""``/``[]`` (then the sample is NaN,
            :data:`NO_TEXT_FIELD`). Another type makes that sample NaN (:data:`INVALID_TEXT_FIELD`).
        ocr: the OCR engine, an object with ``read(image, name=...) -> OcrReading`` and ``backend_id``
            (default: :func:`echo_builder.ocr.default_engine`, PP-OCRv4, created once per process). It is
            created only when some sample needs reading.
        on_image_error: ``"nan"`` (default) makes a sample whose output cannot be decoded or read NaN with the
            error as its reason; ``"raise"`` re-raises the :class:`ImageError`.
        applicable: optional, one flag per sample (the benchmark's ``text_rendering`` flag): ``False`` makes
            the sample NaN with :data:`NOT_APPLICABLE`; ``True``/``None`` computes it.
        progress: show a tqdm progress bar.

    Returns:
        :class:`MetricResult`: ``values`` float64 (n,) in [0, 1] (1 = every required string rendered exactly),
        NaN with a reason as the module docstring lists. ``extras``: ``required`` (n lists of the required
        strings, as written), ``ocr_text`` (n strings, the OCR lines joined with newlines; ``None`` where no
        image was read), ``matches`` (n lists, one dict per required string: ``required``, ``normalised``,
        ``matched`` (the best-matching normalised OCR substring), ``distance`` (int edits), ``cer`` and
        ``score``), ``backend`` (the OCR engine's id; ``None`` when nothing was read) and ``normalisation``
        (a one-line description of the rule).

    Raises:
        ConfigError: lengths differ or a bad ``on_image_error`` (a bad prompt or text field value is one NaN).
        MissingDependencyError: a sample needs OCR and ``rapidocr_onnxruntime`` is not installed
            (``pip install 'echo-bench[ocr]'``).
        ImageError: an output cannot be read (only with ``on_image_error="raise"``).
    """
    skip = _check_arguments(prompts, outputs, text_field_values, on_image_error, applicable)
    n = len(outputs)
    values = np.full(n, np.nan)
    reasons: list[str | None] = [None] * n
    required: list[list[str]] = [[] for _ in range(n)]
    ocr_texts: list[str | None] = [None] * n
    matches: list[list[dict[str, Any]]] = [[] for _ in range(n)]
    engine = ocr
    samples: Any = range(n)
    if progress:
        from tqdm.auto import tqdm

        samples = tqdm(samples, desc="text_accuracy", total=n, unit="sample")
    for i in samples:
        if skip[i]:
            reasons[i] = NOT_APPLICABLE
            continue
        field_value = text_field_values[i] if text_field_values is not None else None
        required[i], reason = _sample_required(prompts[i], field_value, text_field_values is not None)
        if reason is not None:
            reasons[i] = reason
            continue
        if outputs[i] is None:
            reasons[i] = OUTPUT_MISSING
            continue
        if engine is None:
            from echo_builder.ocr import default_engine

            engine = default_engine()
        try:
            reading = engine.read(outputs[i], name=f"sample {i} output")
        except ImageError as exc:
            if on_image_error == "raise":
                raise
            reasons[i] = f"unreadable image: {exc}"
            continue
        ocr_texts[i] = reading.text
        scores = []
        for string in required[i]:
            score, alignment, r, t = string_accuracy(string, reading.text)
            scores.append(score)
            matches[i].append(
                {
                    "required": string,
                    "normalised": r,
                    "matched": t[alignment.start : alignment.end],
                    "distance": alignment.distance,
                    "cer": alignment.distance / len(r),
                    "score": score,
                }
            )
        values[i] = float(np.mean(scores))
    return MetricResult(
        values=values,
        nan_reasons=reasons,
        extras={
            "required": required,
            "ocr_text": ocr_texts,
            "matches": matches,
            "backend": getattr(engine, "backend_id", None) if engine is not None else None,
            "normalisation": "NFKC, casefold, typographic quotes/dashes to ASCII, whitespace removed",
        },
    )


def _score_for_run(
    inputs: list[list[Any]], outputs: list[Any], prompts: list[str], options: Any
) -> MetricResult:
    """The registry's factory: :func:`text_accuracy` on the prompts' quoted strings, or on the values of the
    benchmark column named by ``--text-field`` (``options["text_field"]``: one value per sample), with
    ``extras["details"]``
    (per sample: the OCR backend, the required strings, what the OCR read and the best matches) for the rows'
    ``detail`` column."""
    field_values = options.get("text_field")
    result = text_accuracy(prompts, outputs, text_field_values=field_values)
    extras = result.extras
    extras["details"] = [
        None
        if not extras["required"][i]
        else {
            "backend": extras["backend"],
            "required": extras["required"][i],
            "ocr_text": extras["ocr_text"][i],
            "matches": [
                {k: m[k] for k in ("required", "matched", "distance", "cer")} for m in extras["matches"][i]
            ],
        }
        for i in range(len(outputs))
    ]
    return result


TEXT_ACCURACY_METRIC = declare_metric(
    MetricDefinition(
        name="text_accuracy",
        spec=TEXT_ACCURACY,
        factory=_score_for_run,
        applicability_flag="text_rendering",  # the flag of ECHO's text metric: text is what the sample is about
        needs_inputs=False,
        extra="ocr",
        options=(
            MetricOption(
                "text_field",
                type="column",
                help="text_accuracy: benchmark column holding the text to render (a string or a list of strings "
                "per sample), used instead of the prompt's quoted strings; an empty value makes the sample NaN",
            ),
        ),
        description="OCR (PP-OCRv4) reads the output; 1 - character error rate of each string the prompt quotes",
    ),
    target="echo_builder.scoring.text_accuracy:TEXT_ACCURACY_METRIC",
    order=50,  # position among the built-in metrics (default metric order, rows and columns)
)
