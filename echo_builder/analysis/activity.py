"""Activity over time: samples per day relative to the model's launch date (ECHO Fig. 5).

A sample's day is ``floor((created_at - launch) / 1 day)`` with ``launch`` at 00:00 UTC of the launch date: day 0 is
the launch day, negative days come before it. ``created_at`` is the sample's source post time (ISO 8601, a time
without a zone read as UTC; also X's legacy format and Unix seconds, as the source adapters read them). Samples
without a readable time are counted as ``undated``, not dropped silently. Without a launch date the earliest dated sample's day is day 0 (``reference: "first post"``).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable
from datetime import UTC, date, datetime
from typing import Any

__all__ = ["MAX_FILLED_DAYS", "activity", "parse_time"]

#: Longest span of days whose empty days are listed with 0 samples; beyond it (a post dated decades off) only the
#: days with samples are listed.
MAX_FILLED_DAYS = 3660


def parse_time(value: Any) -> datetime | None:
    """``value`` as an aware UTC datetime, or ``None`` when unreadable: a datetime, or what the source adapters
    read (:func:`echo_builder.sources.base.parse_timestamp`): ISO 8601 text (naive means UTC), X's legacy
    ``"Thu Apr 20 23:21:13 +0000 2023"`` and Unix seconds (Reddit's ``created_utc``), as a number or digits."""
    from echo_builder.sources.base import BadRecord, parse_timestamp

    if isinstance(value, datetime):
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)
    if isinstance(value, str) and not value.strip():
        return None
    try:
        return parse_timestamp(value, "created_at")
    except (BadRecord, ValueError, OverflowError, TypeError):
        return None


def activity(rows: Iterable[tuple[str, Any]], launch_date: date | None) -> dict[str, Any]:
    """Samples per day relative to the launch date, per config and in all.

    Args:
        rows: ``(config, created_at)`` pairs, one per sample.
        launch_date: the model's launch date, or ``None`` (day 0 is the first dated sample's day).

    Returns:
        ``{"reference", "launch_date", "days": [{"day", "date", "samples", "by_config": {config: n}}], "undated":
        {config: n}, "first_day", "last_day", "peak_day"}``; days with no sample between the first and the last
        are listed with 0 samples (up to :data:`MAX_FILLED_DAYS`). ``peak_day`` is the earliest day with the most samples (``None`` when none).
    """
    dated: list[tuple[str, datetime]] = []
    undated: Counter[str] = Counter()
    for config, created_at in rows:
        moment = parse_time(created_at)
        if moment is None:
            undated[config] += 1
        else:
            dated.append((config, moment))
    if launch_date is not None:
        origin, reference = launch_date, "launch date"
    elif dated:
        origin, reference = min(m for _, m in dated).date(), "first post"
    else:
        origin, reference = None, "none"
    per_day: dict[int, Counter[str]] = {}
    if origin is not None:
        start = datetime(origin.year, origin.month, origin.day, tzinfo=UTC)
        for config, moment in dated:
            day = math.floor((moment - start).total_seconds() / 86400)
            per_day.setdefault(day, Counter())[config] += 1
    days = []
    if per_day:
        span = max(per_day) - min(per_day)
        listed = range(min(per_day), max(per_day) + 1) if span <= MAX_FILLED_DAYS else sorted(per_day)
        for day in listed:
            counts = per_day.get(day, Counter())
            when = date.fromordinal(origin.toordinal() + day) if origin is not None else None
            days.append(
                {
                    "day": day,
                    "date": when.isoformat() if when else None,
                    "samples": sum(counts.values()),
                    "by_config": dict(sorted(counts.items())),
                }
            )
    peak = max(days, key=lambda d: (d["samples"], -d["day"]))["day"] if days else None
    return {
        "reference": reference,
        "launch_date": launch_date.isoformat() if launch_date else None,
        "origin": origin.isoformat() if origin else None,
        "days": days,
        "undated": dict(sorted(undated.items())),
        "first_day": days[0]["day"] if days else None,
        "last_day": days[-1]["day"] if days else None,
        "peak_day": peak,
    }
