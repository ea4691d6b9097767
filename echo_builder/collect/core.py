"""The platform-neutral part of ``echo-bench collect``: query windows, resumable paging, budgets, rate-limit waits.

A collection is a list of :class:`Job` (one search query over one time window). Each job is paged to the end, or
until a budget runs out, through a :class:`Platform` (X, Bluesky, Reddit: :mod:`echo_builder.collect.x`,
:mod:`~echo_builder.collect.bluesky`, :mod:`~echo_builder.collect.reddit`), and every page is appended, as the
platform returned it, to ``OUT/posts/<job>.jsonl`` (one JSON response per line: the shapes ``build`` reads).

Output folder::

    OUT/posts/<NN>-<term>.jsonl   one API response page per line, in the platform's own JSON shape
    OUT/collect.json              queries, windows, per-query and per-day post counts, requests, waits, status
    OUT/.collect/state.json       the checkpoint: per-job cursor, cursors seen, output size (bytes), counters

Resume: after each page the checkpoint is written twice, atomically (a temporary file, then ``os.replace``): first
with the page itself as ``pending``, then, once the page is appended and flushed to the output file, with the next
cursor and the output's new size. A run that starts again truncates each output to the size in the checkpoint
(dropping a half-written line) and appends a ``pending`` page from the checkpoint, so no page is requested twice and
the output is byte-for-byte what an uninterrupted run writes. A job that is done is never requested again, so a
second run of a finished collection makes no request.

Waits: a rate-limited answer (HTTP 429, or a page whose headers say no request is left) waits until the reset time
the platform gives, through the injectable ``sleep``; the waits of a run together may not exceed ``max_wait_s``
(past it the run stops with a message naming the reset time, everything so far kept). Server errors (5xx), network
errors and unreadable bodies (an HTML page, truncated JSON) are retried ``max_attempts`` times with exponential
backoff (1, 2, 4, ... s), then stop the run with a message. Answers that retrying cannot fix (401, 403, 400) stop
the run at once. A cursor that comes back again (an endless cursor) ends that job with a recorded error and the
other jobs go on.

Credentials are read from the environment by the platform modules and never written: neither the checkpoint nor
``collect.json`` holds them, and they are registered with :func:`echo_builder.secrets.register_secret` so error
messages are redacted.
"""

from __future__ import annotations

import json
import os
import re
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any, Protocol

from echo_builder.errors import ConfigError, EchoError

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

STATE_VERSION = 1
SUMMARY_NAME = "collect.json"
#: Default budget of one query (a search, a conversation, a comment tree) when no other is given: pages, posts.
DEFAULT_QUERY_REQUESTS = 50
DEFAULT_QUERY_POSTS = 2000
#: Consecutive pages that bring no post not seen before after which a query is stopped (a server that keeps
#: handing out cursors to empty or repeated pages).
MAX_STALE_PAGES = 3
#: Longest cursor accepted from a platform (X's tokens and Bluesky's cursors are tens of characters).
MAX_CURSOR_CHARS = 4096
#: Cursor digests and post-id digests kept per query in the checkpoint (a bounded window: the checkpoint does not
#: grow with the pages read).
SEEN_CURSORS = 64
RECENT_IDS = 2000
#: Longest single rate-limit wait; a reset further away (``1e18``, a date in 2100) is waited this long at most,
#: and only if ``--max-wait`` allows it. Unreadable values (``nan``, ``inf``, ``tomorrow``, none at all) wait
#: :data:`DEFAULT_RATE_LIMIT_WAIT_S`; a reset already past waits 0 s (a 429 still waits 1 s before its retry).
MAX_RATE_LIMIT_WAIT_S = 3600.0
DEFAULT_RATE_LIMIT_WAIT_S = 60.0
STATE_PATH = Path(".collect") / "state.json"
POSTS_DIR = "posts"
#: Files of the output-folder lock (:mod:`echo_builder.outlock`), which an empty folder may already hold.
LOCK_NAMES = frozenset({".echo-bench.lock", ".echo-bench.owner.json"})


class CollectError(EchoError):
    """A collection stopped: the message says why and what to do; everything collected before is kept.

    The message is redacted when the error is made (:func:`echo_builder.secrets.redact`): it often quotes what a
    server sent back, which may echo a credential.
    """

    def __init__(self, message: object = "", *args: object) -> None:
        from echo_builder.secrets import redact

        super().__init__(redact(str(message)), *args)


class RateLimited(Exception):
    """The platform refused a request for now. ``reset_at``: UNIX time (s) when requests are allowed again;
    ``wait_s``: seconds to wait (when the platform gives a duration instead); neither: unknown (60 s is waited)."""

    def __init__(self, message: str, *, reset_at: float | None = None, wait_s: float | None = None) -> None:
        super().__init__(message)
        self.reset_at = reset_at
        self.wait_s = wait_s


class TransientError(Exception):
    """A failure that a later attempt may not see: 5xx, a dropped connection, a timeout."""


class BadResponse(TransientError):
    """A body that is not the JSON the endpoint documents (an HTML page, truncated or malformed JSON)."""


@dataclass(frozen=True)
class Window:
    """A time window in UTC; ``None`` bounds are open (the platform's own limit applies)."""

    since: datetime | None = None
    until: datetime | None = None

    def as_dict(self) -> dict[str, str | None]:
        return {"since": _iso(self.since), "until": _iso(self.until)}


@dataclass(frozen=True)
class Job:
    """One search: ``query`` (the platform's query syntax) over ``window``; ``term`` is the keyword it came from;
    ``key`` names the output file ``posts/<key>.jsonl`` and the job's checkpoint entry."""

    key: str
    term: str
    query: str
    window: Window


@dataclass
class Page:
    """One answer of a search endpoint.

    Attributes:
        body: the decoded JSON body, written to the output as is (one line).
        next_cursor: the cursor of the next page; ``None`` when the search is exhausted.
        created: the creation time of each post of the page (``None`` when a post has none), for counts per day.
        reset_at: UNIX time when the quota resets, set when the headers say no request is left in the window
            (the next request waits until then instead of drawing a 429).
        ids: the platform's id of each post of the page (to tell pages that bring no new post); empty when the
            platform gives none (every post then counts as new).
        error: set when the page is kept but its query must stop (an implausible cursor, see
            :func:`plausible_cursor`); recorded as the query's error.
        server_cursor: the next cursor is the server's (a search); ``False`` when the client keeps it (Reddit's
            queue of comment stubs, which shrinks as answers come): pages without new posts then do not count as
            stale (:data:`MAX_STALE_PAGES`); the query's own budget still bounds it.
    """

    body: Any
    next_cursor: str | None
    created: list[datetime | None] = field(default_factory=list)
    reset_at: float | None = None
    ids: list[str] = field(default_factory=list)
    error: str | None = None
    server_cursor: bool = True


class Platform(Protocol):
    """What the collector needs from a platform module."""

    name: str
    #: Largest page the search endpoint serves, and the smallest it accepts (posts).
    max_page_size: int
    min_page_size: int
    #: Seconds to leave between two requests (X's full-archive search allows 1 per second).
    min_interval_s: float
    #: Requests made besides the search pages (a login, a token exchange).
    auth_requests: int

    def query_for(self, term: str) -> str: ...

    # Optional: ``effective_window(window, now) -> Window``, the window actually asked for at UNIX time ``now``
    # (X refuses an end in the future and, in recent search, a start over 7 days old). Fixed at a query's first
    # page and kept in the checkpoint, so its continuation pages ask for the same window.

    def fetch(self, job: Job, cursor: str | None, page_size: int) -> Page: ...


def _digest(text: str) -> str:
    import hashlib

    return hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=8).hexdigest()


def finite_number(value: Any) -> float | None:
    """``value`` (a header's text, a number) as a finite float, else ``None`` (``nan``, ``inf``, ``tomorrow``)."""
    import math

    try:
        number = float(value)
    except (TypeError, ValueError, OverflowError):
        return None
    return number if math.isfinite(number) else None


def plausible_cursor(value: Any, where: str) -> tuple[str | None, str | None]:
    """A platform's next-page cursor, checked: ``(cursor, None)``, ``(None, None)`` at the end of the results, or
    ``(None, why)`` for a cursor over :data:`MAX_CURSOR_CHARS` characters (the query stops with that error)."""
    if not isinstance(value, str) or not value:
        return None, None
    if len(value) > MAX_CURSOR_CHARS:
        return None, (
            f"{where} returned a cursor of {len(value):,} characters (more than {MAX_CURSOR_CHARS:,}), which is no "
            "cursor; this query was stopped there (its pages so far are kept)"
        )
    return value, None


def _iso(moment: datetime | None) -> str | None:
    return moment.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ") if moment else None


def _slug(term: str) -> str:
    slug = re.sub(r"[^0-9a-z]+", "-", term.lower()).strip("-")
    return slug[:40] or "term"


def plan_jobs(
    keywords: Sequence[Any],
    platform: Platform,
    *,
    launch: datetime | None,
    since: datetime | None = None,
    until: datetime | None = None,
) -> tuple[list[Job], list[str]]:
    """The jobs of a keyword list (:func:`echo_builder.stages.query.load_keywords`): one per keyword, over its
    window around the launch date (``launch - before_days`` to ``launch + window_days``, as the ``query`` stage
    applies it) intersected with ``since``/``until``; a keyword without a window searches ``since``-``until``.

    Returns the jobs (duplicates of the same query and window once) and notes for keywords whose window is empty.
    Raises :class:`ConfigError` for windowed keywords without a launch date or ``since`` after ``until``.
    """
    if since and until and since >= until:
        raise ConfigError(f"--since {_iso(since)} is not before --until {_iso(until)}")
    if launch is None and any(k.window_days is not None for k in keywords):
        raise ConfigError(
            "time-windowed keywords need the target model's launch date (--launch-date YYYY-MM-DD)"
        )
    jobs: list[Job] = []
    notes: list[str] = []
    seen: set[tuple[str, Window]] = set()
    for keyword in keywords:
        start, end = since, until
        if keyword.window_days is not None and launch is not None:
            low = launch - timedelta(days=keyword.before_days)
            high = launch + timedelta(days=keyword.window_days)
            start = max(low, since) if since else low
            end = min(high, until) if until else high
        if start and end and start >= end:
            notes.append(
                f"keyword {keyword.term!r}: its window and --since/--until do not overlap; not searched"
            )
            continue
        window = Window(start, end)
        query = platform.query_for(keyword.term)
        if (query, window) in seen:
            continue
        seen.add((query, window))
        jobs.append(Job(f"{len(jobs) + 1:02d}-{_slug(keyword.term)}", keyword.term, query, window))
    return jobs, notes


@dataclass
class CollectResult:
    """What a run did: ``summary`` is what ``collect.json`` holds; ``requests_this_run`` counts this run's
    requests (0 for a finished collection run again); ``errors`` the jobs that ended with an error."""

    summary: dict[str, Any]
    requests_this_run: int
    errors: list[str]
    budget_reached: bool
    #: Queries that stopped at ``--max-posts-per-query`` / ``--max-requests-per-query`` (the run's own budget is
    #: ``budget_reached`` without them).
    query_budgets: int = 0


def _write_atomic(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w", encoding="utf-8") as handle:
        handle.write(text)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(tmp, path)


def _day(moment: datetime | None) -> str:
    return moment.astimezone(timezone.utc).strftime("%Y-%m-%d") if moment else "unknown"


class Collector:
    """Runs jobs through a platform into ``out_dir`` (see the module docstring).

    Args:
        platform: the platform client (:class:`Platform`).
        jobs: from :func:`plan_jobs`.
        out_dir: the output folder; nothing is written outside it.
        max_posts: stop once this many posts were read in all (X bills per post read); ``None``: no limit.
        max_requests: stop once this many requests were made in all; ``None``: no limit.
        max_posts_per_query, max_requests_per_query: the budget of each query (pages and posts; default
            :data:`DEFAULT_QUERY_POSTS`, :data:`DEFAULT_QUERY_REQUESTS`): a query that reaches it stops there
            (status ``budget``) and a later run with a larger one continues it. ``None``: no per-query limit.
        max_wait_s: the most seconds a run waits for rate limits, together.
        max_attempts: attempts per page for server errors and unreadable bodies (>= 1).
        max_rate_limited: consecutive rate-limited answers for one page before giving up (a 429 storm).
        sleep, clock: injectable (tests pass a recorder and a fake clock).
        progress: show a progress bar (tqdm, on stderr) of posts read.
    """

    #: The option that sets ``max_wait_s``, named when a wait would pass it.
    wait_option = "--max-wait"

    def __init__(
        self,
        platform: Platform,
        jobs: Sequence[Job],
        out_dir: str | os.PathLike[str],
        *,
        max_posts: int | None = None,
        max_requests: int | None = None,
        max_posts_per_query: int | None = DEFAULT_QUERY_POSTS,
        max_requests_per_query: int | None = DEFAULT_QUERY_REQUESTS,
        max_wait_s: float = 900.0,
        max_attempts: int = 4,
        max_rate_limited: int = 5,
        sleep: Callable[[float], None] = time.sleep,
        clock: Callable[[], float] = time.time,
        progress: bool = False,
    ) -> None:
        if max_attempts < 1:
            raise ConfigError(f"max_attempts must be >= 1, got {max_attempts}")
        self.platform = platform
        self.jobs = list(jobs)
        self._searches = list(jobs)
        self.out = Path(out_dir)
        self.max_posts = max_posts
        self.max_requests = max_requests
        self.max_posts_per_query = max_posts_per_query
        self.max_requests_per_query = max_requests_per_query
        self.max_wait_s = max_wait_s
        self.max_attempts = max_attempts
        self.max_rate_limited = max_rate_limited
        self.sleep = sleep
        self.clock = clock
        self.progress = progress
        self._waited_this_run = 0.0
        self._last_request: float | None = None
        self._reset_at: float | None = None

    # -- checkpoint -------------------------------------------------------------------------------------------
    def _load_state(self) -> dict[str, Any]:
        path = self.out / STATE_PATH
        if not path.exists():
            if self.out.is_dir() and any(p.name not in LOCK_NAMES for p in self.out.iterdir()):
                raise CollectError(
                    f"{self.out} is not empty and holds no collection (no {STATE_PATH}); give collect a new or empty "
                    "--out folder"
                )
            return {
                "version": STATE_VERSION,
                "platform": self.platform.name,
                "requests": 0,
                "posts": 0,
                "rate_limit_waits": 0,
                "rate_limit_wait_s": 0.0,
                "retries": 0,
                "jobs": {},
                "pending": None,
            }
        try:
            state = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise CollectError(
                f"{path}: the collection checkpoint is unreadable ({exc}); move the folder aside and start again"
            ) from None
        if not isinstance(state, dict) or state.get("version") != STATE_VERSION:
            raise CollectError(f"{path}: not a checkpoint of this echo-bench version; use a new --out folder")
        if state.get("platform") != self.platform.name:
            raise CollectError(
                f"{self.out} holds a {state.get('platform')!r} collection; collect {self.platform.name} into "
                "another --out folder"
            )
        return state

    def _save_state(self, state: dict[str, Any]) -> None:
        from echo_builder.secrets import redact

        _write_atomic(self.out / STATE_PATH, redact(json.dumps(state, ensure_ascii=False, sort_keys=True)))

    def _job_state(self, state: dict[str, Any], job: Job) -> dict[str, Any]:
        return state["jobs"].setdefault(
            job.key,
            {
                "query": job.query,
                "window": job.window.as_dict(),
                "cursor": None,
                "seen": [],
                "pages": 0,
                "posts": 0,
                "per_day": {},
                "bytes": 0,
                "done": False,
                "error": None,
                "effective": None,
                "stale_pages": 0,
                "recent_ids": [],
            },
        )

    def _output(self, job: Job) -> Path:
        return self.out / POSTS_DIR / f"{job.key}.jsonl"

    def _append(self, job: Job, js: dict[str, Any], line: str) -> None:
        path = self._output(job)
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "ab") as handle:
            handle.truncate(js["bytes"])  # a half-written line of a killed run goes
            handle.seek(js["bytes"])
            handle.write(line.encode("utf-8"))
            handle.flush()
            os.fsync(handle.fileno())
            js["bytes"] = handle.tell()

    def _commit(self, state: dict[str, Any], pending: dict[str, Any]) -> None:
        """Append a received page to its output and advance the job (the second checkpoint write)."""
        job = next(j for j in self.jobs if j.key == pending["job"])
        js = self._job_state(state, job)
        self._append(job, js, pending["line"])
        js["pages"] += 1
        js["posts"] += len(pending["created"])
        for day in pending["created"]:
            js["per_day"][day] = js["per_day"].get(day, 0) + 1
        ids = pending.get("ids") or []
        recent = js.setdefault("recent_ids", [])
        fresh = [i for i in ids if i not in recent] if ids else pending["created"]
        recent.extend(i for i in dict.fromkeys(ids) if i not in recent)
        del recent[:-RECENT_IDS]
        stale = not fresh and pending.get("server_cursor", True)
        js["stale_pages"] = js.get("stale_pages", 0) + 1 if stale else 0
        cursor = pending["next_cursor"]
        seen = js["seen"]
        if pending.get("error"):
            js["error"] = pending["error"]
            js["done"] = True
        elif cursor is not None and (_digest(cursor) in seen or cursor in seen or cursor == js["cursor"]):
            shown = cursor if len(cursor) <= 80 else cursor[:80] + "..."
            js["error"] = (
                f"endless cursor: {self.platform.name} returned the cursor {shown!r} again after {js['pages']} "
                "page(s); this query was stopped there (its pages so far are kept)"
            )
            js["done"] = True
        elif cursor is None:
            js["done"] = True
        elif js["stale_pages"] >= MAX_STALE_PAGES:
            js["error"] = (
                f"{js['stale_pages']} pages in a row brought no post not seen before although {self.platform.name} "
                "kept giving a next cursor; this query was stopped there (its pages so far are kept)"
            )
            js["done"] = True
        else:
            if js["cursor"] is not None:
                seen.append(_digest(js["cursor"]))
                del seen[:-SEEN_CURSORS]
            js["cursor"] = cursor
        state["posts"] += len(pending["created"])
        state["pending"] = None
        self._save_state(state)

    # -- requests ---------------------------------------------------------------------------------------------
    def _wait(self, seconds: float, reason: str, state: dict[str, Any]) -> None:
        asked = finite_number(seconds)
        seconds = bounded_wait(seconds)
        if self._waited_this_run + seconds > self.max_wait_s:
            shown = asked if asked is not None and asked >= seconds else seconds
            try:
                moment = datetime.fromtimestamp(self.clock() + shown, timezone.utc)
                resume_at = moment.strftime("%Y-%m-%d %H:%M:%S UTC")
            except (OverflowError, OSError, ValueError):
                resume_at = "a time too far away to name"
            raise CollectError(
                f"{reason}: the next request is allowed at {resume_at} (in {shown:.0f} s), past what "
                f"{self.wait_option} {self.max_wait_s:.0f} s leaves of this run's waits ({self._waited_this_run:.0f} s "
                "waited so far); run the same command again after that time to continue (everything "
                "collected so far is kept)"
            )
        self._waited_this_run += seconds
        state["rate_limit_waits"] += 1
        state["rate_limit_wait_s"] = round(state["rate_limit_wait_s"] + seconds, 3)
        self._save_state(state)
        self.sleep(seconds)

    def _fetch(self, job: Job, cursor: str | None, page_size: int, state: dict[str, Any]) -> Page:
        attempts = 0
        limited = 0
        while True:
            if self._reset_at is not None:
                reset_at = finite_number(self._reset_at)
                wait = reset_at - self.clock() if reset_at is not None else 0.0
                self._reset_at = None
                if wait > 0:
                    self._wait(wait + 1, f"{self.platform.name}'s rate limit is used up", state)
            if self._last_request is not None and self.platform.min_interval_s > 0:
                gap = self._last_request + self.platform.min_interval_s - self.clock()
                if gap > 0:
                    self.sleep(gap)
            if self.max_requests is not None and state["requests"] >= self.max_requests:
                raise _BudgetReached
            state["requests"] += 1
            self._last_request = self.clock()
            signed_in = self.platform.auth_requests
            try:
                return self.platform.fetch(job, cursor, page_size)
            except RateLimited as exc:
                limited += 1
                if limited > self.max_rate_limited:
                    raise CollectError(
                        f"{self.platform.name} answered {limited} times in a row that the rate limit is exceeded "
                        f"(query {job.query!r}); stopped. Run the same command later to continue (everything "
                        "collected so far is kept)"
                    ) from None
                reset_at, wait_s = finite_number(exc.reset_at), finite_number(exc.wait_s)
                if reset_at is not None:
                    wait = reset_at - self.clock() + 1
                elif wait_s is not None:
                    wait = wait_s
                else:
                    wait = DEFAULT_RATE_LIMIT_WAIT_S
                self._wait(max(wait, 1.0), f"{self.platform.name} rate limit ({exc})", state)
            except TransientError as exc:
                attempts += 1
                if attempts >= self.max_attempts:
                    raise CollectError(
                        f"{self.platform.name} failed {attempts} times for query {job.query!r} "
                        f"({'its first page' if cursor is None else 'a later page'}): {exc}; stopped. Run the same command again to continue (everything "
                        "collected so far is kept)"
                    ) from None
                state["retries"] += 1
                self._save_state(state)
                self.sleep(float(2 ** (attempts - 1)))
            finally:
                state["auth_requests"] = (
                    state.get("auth_requests", 0) + self.platform.auth_requests - signed_in
                )

    # -- the run ----------------------------------------------------------------------------------------------
    def run(self) -> CollectResult:
        """Collect every job to its end (or the budget). Raises :class:`CollectError` when the run had to stop;
        ``collect.json`` and the checkpoint are written first."""
        state = self._load_state()
        self.out.mkdir(parents=True, exist_ok=True)
        start_requests = state["requests"]
        searches = [job.key for job in self._searches]
        recorded = state.setdefault("searches", searches)  # the query file's searches, fixed at the first run
        if (
            recorded != searches
        ):  # a reordered or edited query file renumbers the searches: pages would be paid twice
            gone, new = [k for k in recorded if k not in searches], [k for k in searches if k not in recorded]
            raise CollectError(
                f"{self.out} was collected with another query file ({len(gone)} of its {len(recorded)} searches are "
                f"not in this one, {len(new)} are new{'; e.g. ' + (gone or new)[0] if gone or new else ', reordered'}); "
                "collect this query file into a new --out folder, or run with the earlier one to finish that collection"
            )
        self._add_followups(state)
        keys = {job.key for job in self.jobs}
        for job in self.jobs:
            js = self._job_state(state, job)
            if js["query"] != job.query or js["window"] != job.window.as_dict():
                raise CollectError(
                    f"{self.out} collected {job.key} as {js['query']!r} over {js['window']}, but the query file and "
                    f"options now give {job.query!r} over {job.window.as_dict()}; collect into a new --out folder "
                    "(or run with the earlier query file and options to finish that collection)"
                )
            path = self._output(job)
            if path.exists() and path.stat().st_size != js["bytes"]:  # a page half-written by a killed run
                with open(path, "ab") as handle:
                    handle.truncate(js["bytes"])
        if state.get("pending"):
            if state["pending"]["job"] not in keys:
                raise CollectError(
                    f"{self.out} holds a received page of {state['pending']['job']}, which the query file no longer "
                    "gives; run with the earlier query file to finish that collection, or use a new --out folder"
                )
            self._commit(state, state["pending"])
        from echo_builder.secrets import redact

        budget_reached = query_budget = False
        bar = self._progress_bar(state)
        try:
            index = 0
            while index < len(self.jobs):  # follow-up jobs join the list once the searches are done
                job = self.jobs[index]
                index += 1
                js = self._job_state(state, job)
                while not js["done"]:
                    if self.max_posts is not None and state["posts"] >= self.max_posts:
                        raise _BudgetReached
                    if self._query_budget_reached(js):
                        js["budget"] = True
                        query_budget = True
                        break
                    js.pop("budget", None)
                    size = self.platform.max_page_size
                    if self.max_posts is not None:
                        size = max(self.platform.min_page_size, min(size, self.max_posts - state["posts"]))
                    if self.max_posts_per_query is not None:
                        left = self.max_posts_per_query - js["posts"]
                        size = max(self.platform.min_page_size, min(size, left))
                    if js.get("effective") is None:  # fixed at the first page; continuations reuse it
                        effective = getattr(self.platform, "effective_window", None)
                        window = effective(job.window, self.clock()) if effective else job.window
                        js["effective"] = window.as_dict()
                    asked = replace(
                        job,
                        window=Window(
                            parse_bound(js["effective"]["since"], "since"),
                            parse_bound(js["effective"]["until"], "until"),
                        ),
                    )
                    page = self._fetch(asked, js["cursor"], size, state)
                    self._reset_at = page.reset_at
                    # a server may echo a credential inside a page: it never reaches the posts file
                    line = redact(json.dumps(page.body, ensure_ascii=False, separators=(",", ":"))) + "\n"
                    pending = {
                        "job": job.key,
                        "line": line,
                        "next_cursor": page.next_cursor,
                        "created": [_day(c) for c in page.created],
                        "ids": [_digest(str(i)) for i in page.ids],
                        "error": page.error,
                        "server_cursor": page.server_cursor,
                    }
                    state["pending"] = pending
                    self._save_state(state)  # the page is safe from here on
                    self._commit(state, pending)
                    if bar is not None:
                        bar.update(len(page.created))
                self._write_summary(state, "running")
                if index == len(self.jobs):
                    self._add_followups(state)
        except _BudgetReached:
            budget_reached = True
        except CollectError as exc:
            self._write_summary(state, "stopped", str(exc))
            raise
        finally:
            if bar is not None:
                bar.close()
        errors = [f"{key}: {js['error']}" for key, js in state["jobs"].items() if js.get("error")]
        run_budget = budget_reached
        budget_reached = budget_reached or query_budget
        status = "budget" if budget_reached else ("errors" if errors else "complete")
        summary = self._write_summary(state, status)
        at_query_budget = sum(
            1 for job in self.jobs if self._query_budget_reached(self._job_state(state, job))
        )
        return CollectResult(
            summary,
            state["requests"] - start_requests,
            errors,
            run_budget,
            0 if run_budget else at_query_budget,
        )

    def _query_budget_reached(self, js: dict[str, Any]) -> bool:
        pages_full = self.max_requests_per_query is not None and js["pages"] >= self.max_requests_per_query
        posts_full = self.max_posts_per_query is not None and js["posts"] >= self.max_posts_per_query
        return pages_full or posts_full

    def _add_followups(self, state: dict[str, Any]) -> None:
        """Once every search job is done, add the platform's follow-up jobs (``followup_jobs(files)``: e.g. the
        comment trees of the submissions found), derived from the finished output files only, so a resumed run
        derives the same list."""
        follow = getattr(self.platform, "followup_jobs", None)
        if follow is None or not all(state["jobs"].get(j.key, {}).get("done") for j in self._searches):
            return
        known = {job.key for job in self.jobs}
        for job in follow([self._output(j) for j in self._searches]):
            if job.key not in known:
                self.jobs.append(job)
                known.add(job.key)

    def _progress_bar(self, state: dict[str, Any]) -> Any:
        if not self.progress:
            return None
        from tqdm import tqdm

        return tqdm(
            total=self.max_posts, initial=state["posts"], unit="post", desc=f"collect {self.platform.name}"
        )

    def _write_summary(self, state: dict[str, Any], status: str, error: str | None = None) -> dict[str, Any]:
        queries = []
        per_day: dict[str, int] = {}
        for job in self.jobs:
            js = self._job_state(state, job)
            for day, n in js["per_day"].items():
                per_day[day] = per_day.get(day, 0) + n
            queries.append(
                {
                    "key": job.key,
                    "term": job.term,
                    "query": job.query,
                    "window": job.window.as_dict(),
                    "searched": js.get("effective"),
                    "file": f"{POSTS_DIR}/{job.key}.jsonl",
                    "status": "error"
                    if js["error"]
                    else ("done" if js["done"] else ("budget" if js.get("budget") else "incomplete")),
                    "error": js["error"],
                    "pages": js["pages"],
                    "posts": js["posts"],
                    "per_day": dict(sorted(js["per_day"].items())),
                }
            )
        summary = {
            "platform": self.platform.name,
            "status": status,
            "error": error,
            "posts": state["posts"],
            "requests": state["requests"],
            "auth_requests": state.get("auth_requests", 0),
            "retries": state["retries"],
            "rate_limit_waits": {"count": state["rate_limit_waits"], "seconds": state["rate_limit_wait_s"]},
            "budget": {
                "max_posts": self.max_posts,
                "max_requests": self.max_requests,
                "max_posts_per_query": self.max_posts_per_query,
                "max_requests_per_query": self.max_requests_per_query,
            },
            "per_day": dict(sorted(per_day.items())),
            "queries": queries,
        }
        from echo_builder.secrets import redact

        text = redact(json.dumps(summary, ensure_ascii=False, indent=2))
        _write_atomic(self.out / SUMMARY_NAME, text + "\n")
        return json.loads(text)


class _BudgetReached(Exception):
    pass


def bounded_wait(seconds: Any) -> float:
    """A rate-limit wait in seconds made sane: unreadable or infinite values (``nan``, ``inf``, ``"tomorrow"``,
    ``None``) wait :data:`DEFAULT_RATE_LIMIT_WAIT_S`; others are clipped to [0, :data:`MAX_RATE_LIMIT_WAIT_S`]
    (a negative wait, a reset already past, is 0 s)."""
    value = finite_number(seconds)
    if value is None:
        return DEFAULT_RATE_LIMIT_WAIT_S
    return min(max(0.0, value), MAX_RATE_LIMIT_WAIT_S)


def parse_bound(value: str | None, option: str) -> datetime | None:
    """``YYYY-MM-DD`` or an ISO 8601 time (UTC when no offset is given) -> an aware datetime; ``None`` passes.
    Raises :class:`ConfigError` naming ``option``."""
    if value is None:
        return None
    try:
        moment = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        raise ConfigError(f"{option} must be YYYY-MM-DD or an ISO 8601 time, got {value!r}") from None
    return moment if moment.tzinfo else moment.replace(tzinfo=timezone.utc)


def created_times(values: Iterable[Any]) -> list[datetime | None]:
    """ISO strings or UNIX seconds -> aware datetimes (``None`` for what is neither)."""
    out: list[datetime | None] = []
    for value in values:
        moment: datetime | None = None
        try:
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                moment = datetime.fromtimestamp(float(value), timezone.utc)
            elif isinstance(value, str):
                moment = datetime.fromisoformat(value.replace("Z", "+00:00"))
                moment = moment if moment.tzinfo else moment.replace(tzinfo=timezone.utc)
        except (ValueError, OverflowError, OSError):
            moment = None
        out.append(moment)
    return out


def decode_json(content: bytes, content_type: str | None, where: str) -> Any:
    """A response body -> JSON. Raises :class:`BadResponse` naming ``where`` for an HTML page (with its title)
    or malformed / truncated JSON (with the position)."""
    text = content.decode("utf-8", "replace")
    stripped = text.lstrip()[:512].lower()
    if "html" in (content_type or "").lower() or stripped.startswith(("<!doctype html", "<html")):
        title = re.search(r"<title[^>]*>(.*?)</title>", text, re.IGNORECASE | re.DOTALL)
        shown = " ".join(title.group(1).split())[:120] if title else text.strip()[:120]
        raise BadResponse(f"{where} answered with an HTML page, not JSON ({shown!r})")
    try:
        return json.loads(text)
    except RecursionError:
        raise CollectError(
            f"{where} answered with JSON nested too deeply to read ({len(content):,} bytes); not an API answer"
        ) from None
    except ValueError as exc:
        raise BadResponse(
            f"{where} answered with malformed JSON ({exc}; {len(content)} bytes, possibly truncated)"
        ) from None


def require_import(module: str, package: str) -> Any:
    """Import ``module`` of the ``collect`` extra, or raise :class:`MissingDependencyError` with the install hint."""
    import importlib

    from echo_builder.errors import MissingDependencyError

    try:
        return importlib.import_module(module)
    except ImportError:
        error = MissingDependencyError(package, "collect", f"echo-bench collect ({package})")
        error.msg = (
            f'{error.args[0]} (in a source checkout: pip install -e ".[collect]")'  # ImportError's text
        )
        error.args = (error.msg,)
        raise error from None


def env_credential(name: str, what: str) -> str:
    """The value of environment variable ``name``, registered as a secret (redacted from messages and logs).
    Raises :class:`ConfigError` saying which variable to set for ``what``."""
    from echo_builder.secrets import register_secret

    value = os.environ.get(name, "").strip()
    if not value:
        raise ConfigError(f"{what}: set the environment variable {name} (see docs/collect.md)")
    register_secret(value)
    return value
