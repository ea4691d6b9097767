"""``echo-bench collect``: keyword searches on X, Bluesky and Reddit into the export files ``build`` reads.

:mod:`echo_builder.collect.core` holds the platform-neutral collector (windows, resumable paging, budgets,
rate-limit waits, ``collect.json``); one module per platform wraps its client library:
:mod:`~echo_builder.collect.x` (tweepy), :mod:`~echo_builder.collect.bluesky` (atproto),
:mod:`~echo_builder.collect.reddit` (praw). :mod:`~echo_builder.collect.expand` reuses them for ``build --expand``
(fetching the kept posts' missing ancestors and replies). See ``docs/collect.md``.
"""

from echo_builder.collect.core import (
    BadResponse,
    CollectError,
    Collector,
    CollectResult,
    Job,
    Page,
    Platform,
    RateLimited,
    TransientError,
    Window,
    plan_jobs,
)

__all__ = [
    "BadResponse",
    "CollectError",
    "CollectResult",
    "Collector",
    "Job",
    "Page",
    "Platform",
    "RateLimited",
    "TransientError",
    "Window",
    "plan_jobs",
]
