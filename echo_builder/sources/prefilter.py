"""``build --prefilter``: read only the posts a build can keep, and their threads, from dumps far larger than memory.

A plain build materialises every post of its sources (the threads stage needs whole conversations), which for a
monthly Reddit dump is millions of validated posts. The prefilter reads the sources twice, as streams:

1. **Match.** Each JSON Lines line is tested with a cheap text check (the longest whitespace-free part of each
   keyword, lower-cased, in the lower-cased line); only lines passing it are parsed and converted, then the query stage's own rule
   (:func:`echo_builder.stages.query.run_query`: keywords on word boundaries, time windows around the launch date)
   decides which posts match. Their ids, roots and parents make the set of *thread keys* (the platform-native ids:
   ``t3_abc`` and ``abc`` for a Reddit submission, a tweet's conversation id, a Bluesky ``at://`` URI).
2. **Gather.** Each line whose JSON strings include a thread key (a Reddit comment's ``link_id``, a submission's
   ``id``) or that passes the keyword check is converted, and a post is kept when its id, root or parent is one
   of the thread keys: the matched posts and the conversations around them.

Memory is then bounded by the kept posts and their trees, not by the dump. Records outside JSON Lines (a whole
``.json`` document, a top-level list, a collection) are converted in both passes and filtered as posts.

Limits, by design: a problem on a line that the cheap checks skip (invalid JSON, a bad date) is not reported,
since the line is never parsed; a keyword written with JSON escapes in the dump is caught only when the keyword
itself is not ASCII or holds a character JSON may escape (such lines with a backslash are then parsed); replies whose parent is another reply and that carry no
root id (some X exports) are gathered only when their parent is a matched post.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from echo_builder.records import Post
from echo_builder.sources.reader import SourceReport, read_posts

__all__ = ["PrefilterStats", "keyword_line_filter", "prefilter_posts", "thread_keys"]


@dataclass(frozen=True)
class PrefilterStats:
    """What the prefilter did, for the collect stage's report.

    Attributes:
        matched: posts matching the keywords (and time windows) in the first pass.
        thread_keys: native ids of the matched posts' threads (ids, roots, parents).
        kept: posts gathered in the second pass (the matched posts and their threads).
    """

    matched: int
    thread_keys: int
    kept: int


def _native(post_id: str | None) -> str | None:
    """``reddit:t3_abc`` -> ``t3_abc``; ``x:123`` -> ``123``; ``bluesky:at://...`` -> ``at://...``."""
    if not post_id:
        return None
    return post_id.split(":", 1)[1] if ":" in post_id else post_id


def thread_keys(posts: Iterable[Post]) -> set[str]:
    """The native ids of ``posts``, of their roots and of their parents (Reddit fullnames also without their
    ``t1_``/``t3_`` prefix, as dumps spell a submission's ``id``)."""
    keys: set[str] = set()
    for post in posts:
        for value in (post.id, post.root_id, post.reply_to_id):
            native = _native(value)
            if native:
                keys.add(native)
                if native[:3] in ("t1_", "t3_"):
                    keys.add(native[3:])
    return keys


def keyword_line_filter(terms: Sequence[str]) -> Callable[[str], bool]:
    """A cheap test of a raw JSON line: whether it can hold one of ``terms``.

    True when the longest whitespace-free part of some term, lower-cased, occurs in the lower-cased line (a
    superset of the query stage's match, which needs those characters in a row); also true for a line with
    backslash escapes when a term is not ASCII or holds a character JSON may escape (``"``, ``\\``, ``/``).
    With no term, every line passes."""
    needles = sorted({max(t.lower().split(), key=len) for t in terms if t.strip()})
    if not needles:
        return lambda text: True
    escaped = any(not n.isascii() or any(c in n for c in '"\\/') for n in needles)

    def test(text: str) -> bool:
        lower = text.lower()
        for needle in needles:
            if needle in lower:
                return True
        return escaped and "\\" in text

    return test


def prefilter_posts(
    paths: str | os.PathLike[str] | Iterable[str | os.PathLike[str]],
    keywords: Sequence[Any],
    launch: datetime | None,
    *,
    format: str | None = None,
    hf_columns: dict[str, str] | None = None,
) -> tuple[SourceReport, PrefilterStats]:
    """Read from ``paths`` only the posts matching ``keywords`` and the threads around them (see the module
    docstring).

    Args:
        paths: source files and folders, as for :func:`~echo_builder.sources.read_posts`.
        keywords: :class:`~echo_builder.stages.query.Keyword` values (at least one; with none, read every post
            with ``read_posts`` instead).
        launch: the target model's launch date (UTC), for time-windowed keywords.
        format: force a source format, as for ``read_posts``.
        hf_columns: the column mapping of ``hf:`` sources, as for ``read_posts``.

    Returns:
        The second pass's :class:`~echo_builder.sources.SourceReport` (its problems are those of the lines read)
        and :class:`PrefilterStats`.

    Raises:
        ConfigError: ``format`` is unknown, or a windowed keyword comes without ``launch``.
    """
    from echo_builder.stages.query import run_query

    paths = [paths] if isinstance(paths, (str, os.PathLike)) else list(paths)
    quick = keyword_line_filter([k.term for k in keywords])
    first = read_posts(paths, format=format, keep_raw=False, line_filter=quick, hf_columns=hf_columns)
    matched = run_query(first.posts, keywords, launch_date=launch).kept
    keys = thread_keys(matched)
    del first

    def mentions(text: str) -> bool:
        # an id is a JSON string without quotes or escapes, so it is exactly one of the pieces between quotes,
        # whatever the escaped quotes elsewhere in the line
        return quick(text) or not keys.isdisjoint(text.split('"'))

    def in_thread(post: Post) -> bool:
        return any(_native(v) in keys for v in (post.id, post.root_id, post.reply_to_id) if v)

    report = read_posts(
        paths, format=format, line_filter=mentions, post_filter=in_thread, hf_columns=hf_columns
    )
    return report, PrefilterStats(len(matched), len(keys), len(report.posts))
