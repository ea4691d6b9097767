"""Reddit search through PRAW: ``GET /r/<subreddits>/search`` (``q``, ``sort=new``, ``t=all``, ``limit`` up to
100, ``after``) with an OAuth "script" app (``REDDIT_CLIENT_ID``, ``REDDIT_CLIENT_SECRET``, ``REDDIT_USER_AGENT``;
``REDDIT_USERNAME`` / ``REDDIT_PASSWORD`` optional: without them PRAW signs in read-only, application-only OAuth).

A page is the ``{"kind": "Listing", "data": {"children": [{"kind": "t3", "data": <submission>}], "after"}}`` body as
Reddit sent it, the shape the ``reddit`` reader (:mod:`echo_builder.sources.reddit`) reads. ``Reddit.request`` is
used rather than ``subreddit.search``: the listing generator returns PRAW objects, not the JSON, and hides
``after``, which the checkpoint needs.

Time windows: Reddit's search has no date bounds, so the search runs newest first (``sort=new``) and stops after
the first page that reaches posts older than the window's start; posts newer than its end are read (they cannot
be skipped) and left to ``build``'s query stage, which applies the windows again. Reddit serves at most about
1,000 results per search listing.

Comment trees (``--comments``): once the searches are done, every submission they found gets a job that reads
``GET /comments/<id>`` and then expands each ``more`` stub (``POST /api/morechildren``, "continue this thread"
links through ``GET /comments/<id>/_/<comment>``), its queue of stubs being the job's checkpointed cursor
(:meth:`RedditSearch.fetch_thread`).

Rate limits: prawcore paces requests itself from the ``x-ratelimit-remaining`` / ``-reset`` / ``-used`` headers
(sleeping until the reset when none is left) and retries 5xx answers twice. A 429 that still comes back is waited
by the collector (deadline-checked, from ``x-ratelimit-reset``, seconds until the reset); prawcore's own pending
delay for that answer is cleared (``Reddit._core._rate_limiter``, a private attribute, guarded) so the wait is not
made twice.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from echo_builder.collect.core import (
    BadResponse,
    CollectError,
    Job,
    Page,
    RateLimited,
    TransientError,
    Window,
    created_times,
    env_credential,
    finite_number,
    plausible_cursor,
    require_import,
)

__all__ = ["RedditSearch", "thread_job"]


class RedditSearch:
    """The Reddit platform of the collector (:class:`echo_builder.collect.core.Platform`).

    Args:
        subreddits: where to search (``["all"]``: everywhere; several are searched together as ``a+b``).
        client_id, client_secret, user_agent, username, password: the app; ``None`` reads ``REDDIT_CLIENT_ID``,
            ``REDDIT_CLIENT_SECRET``, ``REDDIT_USER_AGENT``, ``REDDIT_USERNAME``, ``REDDIT_PASSWORD``.
        base_url: one host for both ``oauth.reddit.com`` and ``www.reddit.com`` (tests, proxies); its host and
            port are the only non-public address requests may go to (every request goes through
            :func:`echo_builder.network.guarded_requests.guarded_session`: address policy, at most 5 redirects, a
            total deadline of ``deadline_s`` per request).
        comments: after the searches, read the comment tree of every submission found, ``more`` stubs expanded
            (:meth:`fetch_thread`); one output file ``posts/comments-<id>.jsonl`` per submission.
        comment_sort: the comment order asked for (``confidence``, Reddit's default "best", ``new``, ``old``, ...).
    """

    name = "reddit"
    max_page_size = 100
    min_page_size = 1
    min_interval_s = 0.0

    def __init__(
        self,
        subreddits: list[str] | tuple[str, ...] = ("all",),
        *,
        client_id: str | None = None,
        client_secret: str | None = None,
        user_agent: str | None = None,
        username: str | None = None,
        password: str | None = None,
        base_url: str | None = None,
        comments: bool = False,
        comment_sort: str = "confidence",
        deadline_s: float = 120.0,
    ) -> None:
        from echo_builder.secrets import register_secret

        for secret in (client_id, client_secret, password):
            register_secret(secret)
        self.deadline_s = deadline_s
        self.comments = comments
        self.comment_sort = comment_sort
        names = [s.strip().removeprefix("r/").removeprefix("/r/") for s in subreddits if s.strip()]
        if not names:
            from echo_builder.errors import ConfigError

            raise ConfigError("--subreddit needs at least one subreddit name (or 'all')")
        self.subreddits = names
        self.credentials = (client_id, client_secret, user_agent, username, password)
        self.base_url = base_url
        self.auth_requests = 0
        self._reddit: Any = None

    def query_for(self, term: str) -> str:
        """``"term"``: an exact phrase."""
        return '"' + term.replace('"', " ").strip() + '"'

    def reddit(self) -> Any:
        """The praw.Reddit instance (created on first use: a finished collection never signs in)."""
        if self._reddit is None:
            import os

            praw = require_import("praw", "praw")
            client_id, secret, agent, user, password = self.credentials
            client_id = client_id or env_credential("REDDIT_CLIENT_ID", "collect reddit")
            secret = secret or env_credential("REDDIT_CLIENT_SECRET", "collect reddit")
            agent = agent or os.environ.get("REDDIT_USER_AGENT", "").strip()
            if not agent:
                from echo_builder.errors import ConfigError

                raise ConfigError(
                    "collect reddit: set the environment variable REDDIT_USER_AGENT, e.g. "
                    "'script:echo-bench-collect:v1 (by u/yourname)' (Reddit blocks generic agents)"
                )
            user = user or os.environ.get("REDDIT_USERNAME") or None
            password = password or (env_credential("REDDIT_PASSWORD", "collect reddit") if user else None)
            kwargs: dict[str, Any] = {
                "client_id": client_id,
                "client_secret": secret,
                "user_agent": agent,
                "check_for_updates": False,
                "check_for_async": False,
            }
            if user:
                kwargs.update(username=user, password=password)
            if self.base_url:
                kwargs.update(oauth_url=self.base_url.rstrip("/"), reddit_url=self.base_url.rstrip("/"))
            from echo_builder.network.guarded_requests import guarded_session
            from echo_builder.network.policy import NetworkPolicy

            session = guarded_session(
                NetworkPolicy.for_endpoints([self.base_url]), deadline_s=self.deadline_s
            )
            self._session = session
            self._reddit = praw.Reddit(requestor_kwargs={"session": session}, **kwargs)
            self.auth_requests += 1  # the token is fetched with the first request
        return self._reddit

    def _clear_prawcore_delay(self) -> None:
        limiter = getattr(getattr(self._reddit, "_core", None), "_rate_limiter", None)
        if limiter is not None and hasattr(limiter, "next_request_timestamp_ns"):
            limiter.next_request_timestamp_ns = None

    def request(self, method: str, path: str, params: dict[str, Any], what: str) -> Any:
        """The decoded JSON of one API request. Raises :class:`RateLimited`, :class:`TransientError` /
        :class:`BadResponse`, or :class:`CollectError`."""
        prawcore = require_import("prawcore", "praw")
        reddit = self.reddit()
        try:
            if method == "GET":
                return reddit.request(method="GET", path=path, params=params)
            return reddit.request(method=method, path=path, data=params)
        except prawcore.TooManyRequests as exc:
            headers = exc.response.headers
            self._clear_prawcore_delay()
            wait_s = finite_number(headers.get("x-ratelimit-reset") or headers.get("retry-after"))
            raise RateLimited("HTTP 429", wait_s=wait_s + 1 if wait_s is not None else None) from None
        except RecursionError:
            raise CollectError(f"Reddit answered {what} with JSON nested too deeply to read") from None
        except prawcore.BadJSON as exc:
            from echo_builder.collect.core import decode_json

            decode_json(exc.response.content, exc.response.headers.get("content-type"), f"Reddit {what}")
            raise BadResponse(f"Reddit {what} answered a body that is not JSON") from None
        except (prawcore.OAuthException, prawcore.InvalidToken) as exc:
            raise CollectError(
                f"Reddit refused the credentials ({exc}); check REDDIT_CLIENT_ID, REDDIT_CLIENT_SECRET (a 'script' "
                "app from https://www.reddit.com/prefs/apps) and REDDIT_USERNAME / REDDIT_PASSWORD"
            ) from None
        except prawcore.Forbidden as exc:
            raise CollectError(
                f"Reddit refused {what} (403 Forbidden: {_reason(exc.response)}); the subreddit may be private, "
                "banned or quarantined, or the account suspended"
            ) from None
        except (
            prawcore.Redirect
        ) as exc:  # not followed: Reddit redirects unknown subreddits to its search page
            raise CollectError(
                f"Reddit answered {what} with a redirect ({exc}), not followed: the subreddit may not exist"
            ) from None
        except prawcore.NotFound as exc:
            raise CollectError(f"Reddit has no such subreddit or page for {what} ({exc})") from None
        except prawcore.ServerError as exc:
            raise TransientError(f"Reddit server error {exc.response.status_code}") from None
        except prawcore.RequestException as exc:
            import requests

            from echo_builder.network import DeadlineExceeded, RefusedDestination

            cause = exc.original_exception
            if isinstance(cause, RefusedDestination):
                raise CollectError(f"Reddit: {cause}; nothing was sent there") from None
            if isinstance(cause, requests.TooManyRedirects):
                raise CollectError(
                    f"Reddit answered {what} with more than 5 redirects (a redirect loop); check --base-url"
                ) from None
            if isinstance(cause, RecursionError):
                raise CollectError(f"Reddit answered {what} with JSON nested too deeply to read") from None
            if isinstance(cause, DeadlineExceeded):
                raise TransientError(
                    f"Reddit did not answer in time ({what}): the request was {cause}"
                ) from None
            raise TransientError(f"Reddit could not be reached ({type(cause).__name__})") from None
        except prawcore.ResponseException as exc:
            if exc.response.status_code == 401:
                raise CollectError(
                    "Reddit refused the credentials (401); check REDDIT_CLIENT_ID and REDDIT_CLIENT_SECRET"
                ) from None
            raise CollectError(
                f"Reddit answered {exc.response.status_code} for {what}: {_reason(exc.response)}"
            ) from None
        except (KeyError, TypeError, AttributeError, AssertionError, IndexError) as exc:
            # PRAW or prawcore choking on an error answer of an unexpected shape (a 401 without its
            # www-authenticate header, a 400 body without "reason"): the status is the cause to name
            status = getattr(getattr(self, "_session", None), "last_status", None)
            if status == 401:
                raise CollectError(
                    "Reddit refused the credentials (401); check REDDIT_CLIENT_ID and REDDIT_CLIENT_SECRET"
                ) from None
            if isinstance(status, int) and status >= 500:
                raise TransientError(f"Reddit server error {status}") from None
            raise CollectError(
                f"Reddit answered {what} with HTTP {status} and a body PRAW cannot read "
                f"({type(exc).__name__}: {str(exc)[:80]})"
            ) from None

    # -- comment trees ------------------------------------------------------------------------------------------
    def followup_jobs(self, files: list[Path]) -> list[Job]:
        """With ``comments``: one job per submission of the finished search pages (first appearance order), which
        reads its comment tree (see :meth:`fetch_thread`)."""
        if not self.comments:
            return []
        ids: dict[str, None] = {}
        for path in files:
            if not path.exists():
                continue
            with open(path, encoding="utf-8") as handle:
                for line in handle:
                    body = json.loads(line)
                    data = body.get("data") if isinstance(body, dict) else None
                    children = data.get("children") if isinstance(data, dict) else None
                    for child in children if isinstance(children, list) else []:
                        if isinstance(child, dict) and child.get("kind") == "t3":
                            sid = _data(child).get("id")
                            if isinstance(sid, str) and sid.isascii() and sid.isalnum() and len(sid) <= 16:
                                ids.setdefault(sid, None)
        return [thread_job(sid) for sid in ids]

    def fetch_thread(self, link: str, cursor: str | None) -> Page:
        """One page of the comment tree of submission ``link`` (``t3_<id>``).

        The first page is ``GET /comments/<id>`` (``[submission listing, comment listing]``); every ``more`` stub
        in it becomes a task of the cursor (a JSON list, in document order): stubs that list comment ids are
        expanded with ``POST /api/morechildren`` (at most 100 ids a request; the answer is written as Reddit sent
        it, ``{"json": {"data": {"things"}}}``), and "continue this thread" stubs (id ``_``) with
        ``GET /comments/<id>/_/<comment id>``. Stubs in those answers join the queue; the tree is done when the
        queue is empty.
        """
        sid = link.removeprefix("t3_")
        params = {"limit": 500, "sort": self.comment_sort, "raw_json": 1}
        what = f"the comments of {link}"
        tasks: list[list[Any]] = json.loads(cursor) if cursor else []
        if cursor is None:
            body = self.request("GET", f"/comments/{sid}", params, what)
            if not (isinstance(body, list) and body and all(isinstance(b, dict) for b in body)):
                raise BadResponse(f"Reddit answered {what} with a body that is not [submission, comments]")
        else:
            kind, arg = tasks.pop(0)
            if kind == "more":
                form = {
                    "api_type": "json",
                    "link_id": link,
                    "children": ",".join(arg),
                    "sort": self.comment_sort,
                }
                body = self.request("POST", "/api/morechildren", form, f"{what} (morechildren)")
                if not isinstance(body, dict) or not isinstance(body.get("json"), dict):
                    raise BadResponse(f"Reddit answered morechildren for {link} with an unexpected body")
                errors = body["json"].get("errors")
                if errors:
                    raise CollectError(f"Reddit refused morechildren for {link}: {errors}")
            else:
                body = self.request("GET", f"/comments/{sid}/_/{arg}", params, f"{what} (thread {arg})")
                if not isinstance(body, list):
                    raise BadResponse(f"Reddit answered {what} (thread {arg}) with a body that is no list")
        things = _things(body)
        tasks.extend(_stub_tasks(things))
        posts = [t for t in things if t.get("kind") in ("t1", "t3")]
        return Page(
            body=body,
            next_cursor=json.dumps(tasks, separators=(",", ":")) if tasks else None,
            created=created_times(t["data"].get("created_utc") for t in posts),
            ids=[str(t["data"].get("name") or t["data"].get("id")) for t in posts],
            server_cursor=False,
        )

    def fetch(self, job: Job, cursor: str | None, page_size: int) -> Page:
        if job.query.startswith("t3_"):
            return self.fetch_thread(job.query, cursor)
        subs = "+".join(self.subreddits)
        params: dict[str, Any] = {
            "q": job.query,
            "sort": "new",
            "t": "all",
            "limit": max(1, min(100, page_size)),
            "restrict_sr": "false" if subs == "all" else "true",
            "raw_json": 1,
        }
        if cursor:
            params["after"] = cursor
        body = self.request("GET", f"/r/{subs}/search", params, f"the search {job.query!r} in r/{subs}")
        if not (
            isinstance(body, dict) and body.get("kind") == "Listing" and isinstance(body.get("data"), dict)
        ):
            shown = sorted(body) if isinstance(body, dict) else type(body).__name__
            raise BadResponse(f"Reddit search answered a body that is no Listing (got {shown})")
        children = body["data"].get("children") if isinstance(body["data"].get("children"), list) else []
        stamps = [_data(c).get("created_utc") for c in children]
        created = created_times(stamps)
        next_cursor, problem = plausible_cursor(body["data"].get("after") if children else None, "Reddit")
        since = job.window.since
        if since is not None and any(c is not None and c < since for c in created):
            next_cursor = None  # newest first: the rest of the listing is older than the window
        ids = [str(_data(c).get("name") or _data(c).get("id")) for c in children]
        return Page(body=body, next_cursor=next_cursor, created=created, ids=ids, error=problem)


def thread_job(submission_id: str) -> Job:
    """The comment-tree job of a submission (``t3_<id>``; its query never starts with a quote, as searches do)."""
    return Job(
        f"comments-{submission_id}", f"comments of t3_{submission_id}", f"t3_{submission_id}", Window()
    )


def _things(body: Any) -> list[dict[str, Any]]:
    """Every thing (``t1``, ``t3``, ``more``) of a listing, listing array or morechildren answer, in document
    order (depth first, iteratively)."""
    out: list[dict[str, Any]] = []
    stack: list[Any] = [body]
    while stack:
        node = stack.pop()
        if isinstance(node, list):
            stack.extend(reversed(node))
        elif isinstance(node, dict):
            if node.get("kind") == "Listing" and isinstance(node.get("data"), dict):
                stack.append(node["data"].get("children") or [])
            elif isinstance(node.get("json"), dict) and isinstance(node["json"].get("data"), dict):
                stack.append(node["json"]["data"].get("things") or [])
            elif node.get("kind") in ("t1", "t3", "more") and isinstance(node.get("data"), dict):
                out.append(node)
                replies = node["data"].get("replies")
                if isinstance(replies, dict):
                    stack.append(replies)
    return out


def _data(thing: Any) -> dict[str, Any]:
    """The ``data`` object of a listing child, or ``{}`` for a child that has none (an odd record)."""
    data = thing.get("data") if isinstance(thing, dict) else None
    return data if isinstance(data, dict) else {}


def _stub_tasks(things: list[dict[str, Any]]) -> list[list[Any]]:
    tasks: list[list[Any]] = []
    for thing in things:
        if thing.get("kind") != "more":
            continue
        data = thing["data"]
        children = [c for c in data.get("children") or [] if isinstance(c, str)]
        if children:
            tasks.extend(["more", children[i : i + 100]] for i in range(0, len(children), 100))
        elif data.get("id") == "_" and isinstance(data.get("parent_id"), str):
            tasks.append(["continue", data["parent_id"].removeprefix("t1_")])
    return tasks


def _reason(response: Any) -> str:
    try:
        body = response.json()
    except (ValueError, RecursionError):
        return f"HTTP {response.status_code}"
    if isinstance(body, dict):
        parts = [str(body[k]) for k in ("message", "reason", "explanation") if body.get(k)]
        if parts:
            return "; ".join(parts)
    return f"HTTP {response.status_code}"
