"""Reading a judge's verdict out of its reply.

Ratings: the **last** ``[[...]]`` in the reply is the verdict (judges often quote the format or give a provisional
rating first; the reference code took the first, one of the defects listed in ``spec/ECHO.md``). It must be an
integer from 1 to 10; ``[[7.5]]``, ``[[11]]``, ``[[0]]`` or no bracket at all are parse failures. A reply that
declines to judge, or a content-filter stop, is a refusal. Failures are never turned into a score.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

__all__ = [
    "ParsedCriteria",
    "ParsedPreference",
    "ParsedRating",
    "looks_like_refusal",
    "parse_criteria",
    "parse_preference",
    "parse_rating",
]

# the content is stripped in Python: a pattern like r"\[\[\s*(.*?)\s*\]\]" backtracks cubically on "[[" followed
# by a long run of whitespace (a 4,000-space reply took a minute); this one is linear
_BRACKETS = re.compile(r"\[\[([^\[\]]*)\]\]")
_INTEGER = re.compile(r"[+-]?\d+")
_REFUSAL = re.compile(
    r"\b(I\s*(?:can(?:no|')t|am\s+(?:not\s+able|unable)|'m\s+(?:not\s+able|unable|sorry))|I\s+won't|"
    r"unable\s+to\s+(?:assist|help|evaluate|view|see)|content\s+policy|cannot\s+(?:assist|help|evaluate))",
    re.IGNORECASE,
)


def looks_like_refusal(text: str, finish_reason: str | None = None) -> bool:
    """True for a content-filter stop, an empty reply, or a reply that declines the task."""
    return finish_reason == "content_filter" or not text.strip() or bool(_REFUSAL.search(text))


@dataclass(frozen=True)
class ParsedRating:
    """``rating`` in 1..10 when ``status == "ok"``; otherwise ``None`` with the reason."""

    rating: int | None
    status: Literal["ok", "parse_failure", "refusal"]
    reason: str | None = None


def _verdicts(text: str, pattern: str | None) -> list[str]:
    regex = _BRACKETS if pattern is None else re.compile(pattern)
    return [(f if isinstance(f, str) else f[0]).strip() for f in regex.findall(text)]


def parse_rating(
    text: str,
    finish_reason: str | None = None,
    *,
    low: int = 1,
    high: int = 10,
    pattern: str | None = None,
    pick: Literal["first", "last"] = "last",
) -> ParsedRating:
    """Parse the last (or, with ``pick="first"``, the first) ``[[N]]`` of a judge reply as an integer in ``[low, high]``.

    ``pattern`` replaces the ``[[...]]`` form with a regular expression whose one group holds the verdict (a
    judge prompt file's ``answer.pattern``). ``pick="first"`` reproduces ECHO's released code, which took the
    first match; echo-bench's default is the last (judges often quote the format or rate provisionally first).
    """
    found = _verdicts(text, pattern)
    shown = "[[{}]]" if pattern is None else "{!r}"
    if not found:
        if looks_like_refusal(text, finish_reason):
            return ParsedRating(None, "refusal", "the judge declined or was filtered")
        what = "[[N]] rating" if pattern is None else f"rating matching {pattern!r}"
        return ParsedRating(None, "parse_failure", f"no {what} in the reply")
    chosen = found[-1] if pick == "last" else found[0]
    if not _INTEGER.fullmatch(chosen):
        return ParsedRating(None, "parse_failure", f"{pick} rating {shown.format(chosen)} is not an integer")
    value = int(chosen)
    if not low <= value <= high:
        return ParsedRating(
            None, "parse_failure", f"{pick} rating {shown.format(value)} is outside {low}-{high}"
        )
    return ParsedRating(value, "ok")


@dataclass(frozen=True)
class ParsedPreference:
    """``winner`` is ``A``, ``B`` or ``tie`` (from ``[[C]]``) when ``status == "ok"``; ``lean`` is the side a tie
    leans to (``[[C:A]]`` / ``[[C:B]]``, in the positions shown), ``None`` for a bare tie or a decisive verdict."""

    winner: Literal["A", "B", "tie"] | None
    status: Literal["ok", "parse_failure", "refusal"]
    reason: str | None = None
    lean: Literal["A", "B"] | None = None


# a tie with an optional lean: C, TIE, C:A, C-B, C(A), Tie(B), C > A (OpenING writes "Tie(A)")
_TIE = re.compile(r"(?:C|TIE)(?:\s*(?:[:/>-]\s*([AB])|\(\s*([AB])\s*\)))?")


def parse_preference(
    text: str,
    finish_reason: str | None = None,
    *,
    pattern: str | None = None,
    pick: Literal["first", "last"] = "last",
) -> ParsedPreference:
    """Parse the last (or first) ``[[A]]`` / ``[[B]]`` / ``[[C]]`` of a pairwise judge reply (``pattern``: as for
    :func:`parse_rating`). A tie may carry a lean, ``[[C:A]]`` or ``[[C:B]]`` (also ``C-A``, ``C(A)``, ``Tie(A)``;
    any case): the side the judge would pick if forced, for OpenING's forced-decision (FDT) tie treatment."""
    found = _verdicts(text, pattern)
    if not found:
        if looks_like_refusal(text, finish_reason):
            return ParsedPreference(None, "refusal", "the judge declined or was filtered")
        return ParsedPreference(None, "parse_failure", "no [[A]], [[B]] or [[C]] verdict in the reply")
    chosen = found[-1] if pick == "last" else found[0]
    last = chosen.upper()
    if last in ("A", "B"):
        return ParsedPreference(last, "ok")  # type: ignore[arg-type]
    tie = _TIE.fullmatch(last)
    if tie is None:
        return ParsedPreference(None, "parse_failure", f"{pick} verdict [[{chosen}]] is not A, B or C")
    lean = tie.group(1) or tie.group(2)
    return ParsedPreference("tie", "ok", lean=lean)  # type: ignore[arg-type]


@dataclass(frozen=True)
class ParsedCriteria:
    """``ratings`` (criterion -> integer in ``[low, high]``, every expected criterion) when ``status == "ok"``."""

    ratings: dict[str, int] | None
    status: Literal["ok", "parse_failure", "refusal"]
    reason: str | None = None


_OBJECT = re.compile(r"\{[^{}]*\}")


def parse_criteria(
    text: str,
    finish_reason: str | None = None,
    *,
    criteria: tuple[str, ...],
    low: int = 1,
    high: int = 10,
) -> ParsedCriteria:
    """Parse the last JSON object of a judge reply as one integer rating per criterion (answer kind ``criteria``).

    The object (flat, no nesting; e.g. ``{"prompt_following": 7, "realism": 9}``) must give every name in
    ``criteria`` an integer in ``[low, high]`` (``7.0`` counts as 7; ``7.5``, ``"7"``, ``true`` or a missing key are
    parse failures); keys not asked for are ignored. A reply that declines or is filtered is a refusal.
    """
    import json

    found = _OBJECT.findall(text)
    if not found:
        if looks_like_refusal(text, finish_reason):
            return ParsedCriteria(None, "refusal", "the judge declined or was filtered")
        return ParsedCriteria(None, "parse_failure", "no JSON object of criterion ratings in the reply")
    try:
        obj = json.loads(found[-1])
    except ValueError:
        return ParsedCriteria(
            None, "parse_failure", f"the last {{...}} in the reply is not JSON: {found[-1][:200]}"
        )
    ratings: dict[str, int] = {}
    for name in criteria:
        value = obj.get(name)
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        if isinstance(value, bool) or not isinstance(value, int):
            what = "missing" if name not in obj else f"{value!r} is not an integer"
            return ParsedCriteria(None, "parse_failure", f"criterion {name!r}: {what}")
        if not low <= value <= high:
            return ParsedCriteria(
                None, "parse_failure", f"criterion {name!r}: {value} is outside {low}-{high}"
            )
        ratings[name] = value
    return ParsedCriteria(ratings, "ok")
