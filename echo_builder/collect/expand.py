"""Platform-backed reply-tree expansion: fetch the conversations around kept posts (ECHO Flow 1, "threads").

ECHO fetched, for every kept post, its whole conversation from the platform (ancestors and replies, then again for
the posts found), which added about 19k of the paper's 51k posts. Exports hold only what a search returned, so the
``threads`` stage can link only posts that happen to be in the files; :class:`Expander` fills the gaps through the
``collect`` clients:

- X (:class:`~echo_builder.collect.x.XSearch`): missing parents by post lookup (``GET /2/tweets``, 100 ids a
  request), replies by conversation search (``conversation_id:<root id>``, paged by ``next_token``; recent search
  covers the last 7 days, ``archive=True`` the full archive).
- Bluesky (:class:`~echo_builder.collect.bluesky.BlueskySearch`): ``app.bsky.feed.getPostThread`` (ancestors and
  replies in one answer), from the public AppView (threads need no account).
- Reddit (:class:`~echo_builder.collect.reddit.RedditSearch`): the submission's comment tree (``GET /comments/<id>``
  then every ``more`` stub, the stubs queue being the cursor).

Expansion runs in rounds: round 0 plans the requests of the kept posts, round ``r + 1`` those of the posts round
``r`` found, up to ``depth`` rounds. A conversation (X ``conversation_id``, Bluesky root URI, Reddit submission)
is expanded until ``max_tree`` posts were added to it; the whole expansion stops after ``max_requests`` pages
(cached pages count too, so a resumed run stops at the same place). Every page is cached in
``OUT/expand/pages.jsonl`` (one JSON line per page, appended and flushed before it is used), keyed by platform and
request: a rerun makes no request, and a run killed at any point continues from the last stored page (a half-written
line is dropped) and writes byte-identical output. The pages are then written, as the platform sent them, to
``OUT/expand/<platform>.jsonl`` and read by the same readers as exports (``x_api``, ``bluesky``, ``reddit``).

Failures never lose a post: a request that fails for good (401, 403, a rate-limit storm, server errors, HTML pages
or malformed JSON past the retries, see :class:`~echo_builder.collect.core.Collector`) stops that platform's
expansion with its message in ``errors``; an endless cursor ends that request only. Posts fetched before are kept.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from echo_builder.collect.core import MAX_STALE_PAGES, BadResponse, CollectError, Collector, Job, Page, Window
from echo_builder.errors import ConfigError, EchoError
from echo_builder.records import Post

__all__ = ["EXPAND_PLATFORMS", "Expander", "ExpansionCache", "ExpansionResult", "expansion_client"]

#: Platforms ``build --expand`` can fetch from, and the export format (source reader) of their pages.
EXPAND_PLATFORMS = {"x": "x_api", "bluesky": "bluesky", "reddit": "reddit"}
CACHE_VERSION = 1


class ExpansionCache:
    """Fetched pages by request key, in ``path`` (JSON Lines: ``{"v", "key", "body", "next_cursor"}``).

    Each page is appended and flushed (``fsync``) before it is used, so a killed run loses at most the page it was
    writing; a half-written last line is cut off when the cache is opened. Raises :class:`CollectError` for a
    line in the middle that is not a page (a file edited or damaged by hand), naming the file and line.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self.pages: dict[str, dict[str, Any]] = {}
        if not path.exists():
            return
        data = path.read_bytes()
        good = 0
        for number, line in enumerate(data.splitlines(keepends=True), 1):
            if not line.endswith(b"\n"):
                break  # the line a killed run was writing
            try:
                entry = json.loads(line)
                self.pages[entry["key"]] = entry
            except (ValueError, KeyError, TypeError, RecursionError):
                raise CollectError(
                    f"{path} line {number} is not a cached page; move the file aside to fetch again"
                ) from None
            good += len(line)
        if good != len(data):
            with open(path, "r+b") as handle:
                handle.truncate(good)

    def get(self, key: str) -> dict[str, Any] | None:
        return self.pages.get(key)

    def put(
        self, key: str, body: Any, next_cursor: str | None, *, server_cursor: bool = True
    ) -> dict[str, Any]:
        """Store one page (redacted first: a server may echo a credential in it) and return it as stored;
        ``server_cursor=False`` (stored only then) marks a cursor the client keeps (Reddit's "more" stubs)."""
        from echo_builder.secrets import redact

        entry: dict[str, Any] = {"v": CACHE_VERSION, "key": key, "body": body, "next_cursor": next_cursor}
        if not server_cursor:
            entry["server_cursor"] = False
        line = redact(json.dumps(entry, ensure_ascii=False, separators=(",", ":"))) + "\n"
        entry = json.loads(line)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.path, "ab") as handle:
            handle.write(line.encode("utf-8"))
            handle.flush()
            os.fsync(handle.fileno())
        self.pages[key] = entry
        return entry


def _native(post_id: str) -> str:
    return post_id.split(":", 1)[1] if ":" in post_id else post_id


class _XClient:
    """X: lookups of missing parents, conversation searches for replies."""

    name = "x"

    def __init__(self, options: dict[str, Any]) -> None:
        from echo_builder.collect.x import XSearch

        self.platform = XSearch(
            options.get("x_bearer_token"),
            archive=bool(options.get("archive")),
            base_url=options.get("base_url"),
        )
        self.platform.min_interval_s = float(options.get("min_interval_s", self.platform.min_interval_s))
        self._looked_up: set[str] = set()

    def plan(self, post: Post, known: dict[str, Post], children: dict[str, int]) -> list[tuple[str, str]]:
        wanted: list[tuple[str, str]] = []
        if post.reply_to_id and post.reply_to_id not in known:
            wanted.append(("lookup", _native(post.reply_to_id)))
        conversation = post.root_id or (None if post.reply_to_id else post.id)
        if conversation and _native(conversation).isdigit():
            wanted.append(("conversation", _native(conversation)))
        return wanted

    def batch(self, wanted: list[tuple[str, str]]) -> list[tuple[str, str]]:
        lookups = sorted(
            {arg for kind, arg in wanted if kind == "lookup"} - self._looked_up, key=lambda s: (len(s), s)
        )
        self._looked_up.update(lookups)
        out = [(kind, arg) for kind, arg in wanted if kind != "lookup"]  # searches first, then lookups
        return out + [("lookup", ",".join(lookups[i : i + 100])) for i in range(0, len(lookups), 100)]

    def fetch(self, kind: str, arg: str, cursor: str | None) -> Page:
        if kind == "lookup":
            return Page(body=self.platform.lookup(arg.split(",")), next_cursor=None)
        from echo_builder.collect.x import conversation_job

        return self.platform.fetch(conversation_job(arg), cursor, self.platform.max_page_size)


class _BlueskyClient:
    """Bluesky: ``getPostThread`` of a post whose parent or replies are missing (and of every kept post)."""

    name = "bluesky"

    def __init__(self, options: dict[str, Any], depth: int) -> None:
        from echo_builder.collect.bluesky import BlueskySearch

        self.platform = BlueskySearch(base_url=options.get("base_url"))
        self.depth = max(1, min(depth, 1000))

    def plan(self, post: Post, known: dict[str, Post], children: dict[str, int]) -> list[tuple[str, str]]:
        parent_missing = bool(post.reply_to_id) and post.reply_to_id not in known
        root_missing = bool(post.root_id) and post.root_id not in known
        replies_missing = post.engagement.get("replies", 0) > children.get(post.id, 0)
        if parent_missing or root_missing or replies_missing:
            return [("thread", _native(post.id))]
        return []

    def batch(self, wanted: list[tuple[str, str]]) -> list[tuple[str, str]]:
        return wanted

    def fetch(self, kind: str, arg: str, cursor: str | None) -> Page:
        params = {"uri": arg, "depth": self.depth, "parentHeight": self.depth}
        body, _ = self.platform.query_raw("app.bsky.feed.getPostThread", params, public=True)
        if not isinstance(body, dict) or not isinstance(body.get("thread"), dict):
            shown = sorted(body) if isinstance(body, dict) else type(body).__name__
            raise BadResponse(f"Bluesky getPostThread answered a body without a thread (got {shown})")
        return Page(body=body, next_cursor=None)


class _RedditClient:
    """Reddit: the comment tree of the submission a post belongs to (``more`` stubs expanded)."""

    name = "reddit"

    def __init__(self, options: dict[str, Any]) -> None:
        from echo_builder.collect.reddit import RedditSearch

        self.platform = RedditSearch(base_url=options.get("base_url"))

    def plan(self, post: Post, known: dict[str, Post], children: dict[str, int]) -> list[tuple[str, str]]:
        link = _native(post.root_id or post.id)
        return [("comments", link)] if link.startswith("t3_") else []

    def batch(self, wanted: list[tuple[str, str]]) -> list[tuple[str, str]]:
        return wanted

    def fetch(self, kind: str, arg: str, cursor: str | None) -> Page:
        return self.platform.fetch_thread(arg, cursor)


def expansion_client(platform: str, options: dict[str, Any], depth: int) -> Any:
    """The expansion client of ``platform`` (``x``, ``bluesky``, ``reddit``); ``options``: ``base_url`` (another
    API host: tests, proxies), ``archive`` (X full-archive search). Credentials are read from the environment as
    ``collect`` reads them, on the first request. Raises :class:`ConfigError` for another platform."""
    if platform == "x":
        return _XClient(options)
    if platform == "bluesky":
        return _BlueskyClient(options, depth)
    if platform == "reddit":
        return _RedditClient(options)
    raise ConfigError(f"--expand takes {', '.join(EXPAND_PLATFORMS)}, got {platform!r}")


@dataclass
class ExpansionResult:
    """What one platform's expansion did.

    Attributes:
        pages: every page's body in request order (the platform's JSON: the export written for the reader).
        requests: pages used (fetched now or read from the cache): the same in a rerun or a resumed run.
        requests_this_run: pages fetched from the platform by this run (0 when everything was cached).
        trees_touched: conversations a request was made for.
        truncated_by_budget / truncated_by_depth / truncated_by_size: conversations left unfinished because the
            request budget ran out, ``depth`` rounds were done, or ``max_tree`` posts were added.
        errors: what stopped a request or the expansion (messages for the report).
        added: id -> (round, request key) of each post the expansion found that was not known before.
    """

    platform: str
    pages: list[Any] = field(default_factory=list)
    requests: int = 0
    requests_this_run: int = 0
    trees_touched: int = 0
    truncated_by_budget: int = 0
    truncated_by_depth: int = 0
    truncated_by_size: int = 0
    errors: list[str] = field(default_factory=list)
    added: dict[str, tuple[int, str]] = field(default_factory=dict)


class _Stop(Exception):
    pass


class Expander:
    """Expands the reply trees of ``seeds`` on one platform (see the module docstring).

    Args:
        client: from :func:`expansion_client`.
        cache: the page cache (:class:`ExpansionCache`), shared by the platforms of a build.
        depth: rounds of expansion (>= 1): round 0 fetches around the kept posts, round ``r`` around what round
            ``r - 1`` found. A 10,000-post reply chain is bounded by it (X: one lookup per round).
        max_tree: the most posts added to one conversation (>= 1).
        max_requests: the most pages for this platform, cached ones included (>= 0); ``None``: no limit.
        max_wait_s, max_attempts, max_rate_limited, sleep, clock: as :class:`~echo_builder.collect.core.Collector`.
        parse: ``parse(body) -> list[Post]``, the platform's export reader on one page.
    """

    def __init__(
        self,
        client: Any,
        cache: ExpansionCache,
        *,
        parse: Callable[[Any], list[Post]],
        depth: int = 8,
        max_tree: int = 500,
        max_requests: int | None = 1000,
        max_wait_s: float = 900.0,
        max_attempts: int = 4,
        max_rate_limited: int = 5,
        sleep: Callable[[float], None] = time.sleep,
        clock: Callable[[], float] = time.time,
    ) -> None:
        if depth < 1 or max_tree < 1 or (max_requests is not None and max_requests < 0):
            raise ConfigError(
                f"expansion bounds: depth and max tree size must be >= 1 and max requests >= 0, got {depth}, "
                f"{max_tree}, {max_requests}"
            )
        self.client = client
        self.cache = cache
        self.parse = parse
        self.depth = depth
        self.max_tree = max_tree
        self.max_requests = max_requests
        self._fetcher = _Fetcher(
            client.platform,
            [],
            cache.path.parent,
            max_wait_s=max_wait_s,
            max_attempts=max_attempts,
            max_rate_limited=max_rate_limited,
            sleep=sleep,
            clock=clock,
        )
        self._state: dict[str, Any] = {
            "requests": 0,
            "rate_limit_waits": 0,
            "rate_limit_wait_s": 0.0,
            "retries": 0,
        }

    def _page(self, kind: str, arg: str, cursor: str | None) -> dict[str, Any]:
        key = json.dumps([self.client.name, kind, arg, cursor], separators=(",", ":"))
        entry = self.cache.get(key)
        if entry is not None:
            return entry
        job = Job(f"expand-{kind}", kind, arg, Window())
        client = self.client

        class _One:  # the collector's retry loop around one expansion request
            name = client.platform.name
            min_interval_s = client.platform.min_interval_s

            @property
            def auth_requests(self) -> int:
                return client.platform.auth_requests

            def fetch(self, _job: Job, _cursor: str | None, _size: int) -> Page:
                try:
                    return client.fetch(kind, arg, cursor)
                except BadResponse as exc:
                    if "recursion" not in str(exc).lower():
                        raise
                except RecursionError:
                    pass
                raise CollectError(  # JSON nested past the parser's limit: retrying cannot help
                    f"{client.name} answered {kind} {arg!r} with JSON nested too deeply to read (a thread "
                    "thousands of levels deep); lower --expand-depth"
                )

        self._fetcher.platform = _One()
        page = self._fetcher._fetch(job, cursor, 0, self._state)
        self.result.requests_this_run += 1
        if page.error:  # a page kept, its cursor not (too long, not text): this request ends here
            from echo_builder.secrets import redact

            self.result.errors.append(redact(f"{client.name} {kind} {arg}: {page.error}"))
        return self.cache.put(key, page.body, page.next_cursor, server_cursor=page.server_cursor)

    def run(self, seeds: Sequence[Post], known_posts: Sequence[Post]) -> ExpansionResult:
        """Expand around ``seeds`` (kept posts of this platform); ``known_posts`` are the posts already read (the
        exports), which are not fetched again nor counted as added."""
        from echo_builder.secrets import redact

        result = self.result = ExpansionResult(self.client.name)
        known: dict[str, Post] = {p.id: p for p in known_posts}
        children: dict[str, int] = {}
        for post in known.values():
            if post.reply_to_id:
                children[post.reply_to_id] = children.get(post.reply_to_id, 0) + 1
        per_tree: dict[str, int] = {}
        touched: dict[str, None] = {}
        done: set[tuple[str, str]] = set()
        frontier = list(dict.fromkeys(s.id for s in seeds))
        by_id = {s.id: s for s in seeds}
        known.update({s.id: s for s in seeds if s.id not in known})
        unfinished: dict[str, str] = {}

        def tree_of(post: Post) -> str:
            return post.root_id or post.id

        try:
            for round_no in range(self.depth):
                wanted: list[tuple[str, str]] = []
                owner: dict[tuple[str, str], str] = {}
                for pid in frontier:
                    post = by_id.get(pid) or known[pid]
                    tree = tree_of(post)
                    if per_tree.get(tree, 0) >= self.max_tree:
                        unfinished.setdefault(tree, "size")
                        continue
                    for request in self.client.plan(post, known, children):
                        if request not in done and request not in owner:
                            owner[request] = tree
                            wanted.append(request)
                plan = self.client.batch(wanted)
                found: list[str] = []
                for kind, arg in plan:
                    done.add((kind, arg))
                    tree = owner.get((kind, arg)) or owner.get(("lookup", arg.split(",")[0]), "")
                    if per_tree.get(tree, 0) >= self.max_tree:  # grown to the bound by an earlier request
                        unfinished[tree] = "size"
                        continue
                    touched.setdefault(tree, None)
                    cursor: str | None = None
                    seen: set[str] = set()
                    stale = 0  # pages in a row that brought no post not known before
                    while True:
                        if self.max_requests is not None and result.requests >= self.max_requests:
                            for request in plan:  # this request's and every later one's conversation
                                if request not in done or request == (kind, arg):
                                    first = ("lookup", request[1].split(",")[0])
                                    unfinished[owner.get(request) or owner.get(first, "")] = "budget"
                            raise _Stop
                        entry = self._page(kind, arg, cursor)
                        result.requests += 1
                        result.pages.append(entry["body"])
                        try:
                            posts = self.parse(entry["body"])
                        except RecursionError:
                            raise CollectError(
                                f"its answer to {kind} {arg!r} is nested too deeply to read (a thread thousands of "
                                "levels deep); lower --expand-depth"
                            ) from None
                        before = len(found)
                        for post in posts:
                            if post.id in known:
                                continue
                            known[post.id] = post
                            if post.reply_to_id:
                                children[post.reply_to_id] = children.get(post.reply_to_id, 0) + 1
                            result.added[post.id] = (round_no + 1, f"{kind} {arg}")
                            key = tree_of(post)
                            per_tree[key] = per_tree.get(key, 0) + 1
                            found.append(post.id)
                        cursor = entry["next_cursor"]
                        if cursor is None:
                            break
                        if per_tree.get(tree, 0) >= self.max_tree:  # no further page for a full conversation
                            unfinished[tree] = "size"
                            break
                        # only a server's cursor can lead on forever (Reddit's "more" stubs are ours, each used once)
                        fresh = len(found) > before or not entry.get("server_cursor", True)
                        stale = 0 if fresh else stale + 1
                        if stale >= MAX_STALE_PAGES:
                            result.errors.append(
                                redact(
                                    f"{self.client.name} {kind} {arg}: {stale} pages in a row brought no post not "
                                    "seen before although the server offered another page; this request was "
                                    "stopped there, its pages are kept"
                                )
                            )
                            break
                        if cursor in seen:
                            shown = cursor if len(cursor) <= 80 else cursor[:80] + "..."
                            result.errors.append(
                                redact(
                                    f"{self.client.name} {kind} {arg}: endless cursor (the cursor {shown!r} came "
                                    f"back after {len(seen)} page(s)); this request was stopped there, its pages "
                                    "are kept"
                                )
                            )
                            break
                        seen.add(cursor)
                frontier = found
                if not frontier:
                    break
            else:
                for pid in frontier:
                    unfinished.setdefault(tree_of(known[pid]), "depth")
        except _Stop:
            pass
        except EchoError as exc:  # CollectError, or a credential that is not set (ConfigError)
            result.errors.append(redact(f"{self.client.name}: {exc}"))
        result.trees_touched = len(touched)
        reasons = list(unfinished.values())
        result.truncated_by_budget = reasons.count("budget")
        result.truncated_by_depth = reasons.count("depth")
        result.truncated_by_size = reasons.count("size")
        return result


class _Fetcher(Collector):
    """The collector's request loop (waits, retries, error mapping) without its checkpoint file."""

    wait_option = "--expand-max-wait"

    def _save_state(self, state: dict[str, Any]) -> None:
        pass


def write_pages(root: Path, path: Path, pages: Sequence[Any]) -> None:
    """The pages as the platform sent them (credentials redacted), one JSON line each (the export the readers
    read), atomically."""
    from echo_builder.secrets import redactor
    from echo_dataset.safe_io import open_atomic

    clean = redactor()
    with open_atomic(root, path, "w") as handle:
        for body in pages:
            handle.write(clean(json.dumps(body, ensure_ascii=False, separators=(",", ":"))) + "\n")
