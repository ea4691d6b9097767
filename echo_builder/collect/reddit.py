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

Rate limits: prawcore paces requests itself from the ``x-ratelimit-remaining`` / ``-reset`` / ``-used`` headers
(sleeping until the reset when none is left) and retries 5xx answers twice. A 429 that still comes back is waited
by the collector (deadline-checked, from ``x-ratelimit-reset``, seconds until the reset); prawcore's own pending
delay for that answer is cleared (``Reddit._core._rate_limiter``, a private attribute, guarded) so the wait is not
made twice.
"""

from __future__ import annotations

from typing import Any

from echo_builder.collect.core import (
    BadResponse,
    CollectError,
    Job,
    Page,
    RateLimited,
    TransientError,
    created_times,
    env_credential,
    require_import,
)

__all__ = ["RedditSearch"]


class RedditSearch:
    """The Reddit platform of the collector (:class:`echo_builder.collect.core.Platform`).

    Args:
        subreddits: where to search (``["all"]``: everywhere; several are searched together as ``a+b``).
        client_id, client_secret, user_agent, username, password: the app; ``None`` reads ``REDDIT_CLIENT_ID``,
            ``REDDIT_CLIENT_SECRET``, ``REDDIT_USER_AGENT``, ``REDDIT_USERNAME``, ``REDDIT_PASSWORD``.
        base_url: one host for both ``oauth.reddit.com`` and ``www.reddit.com`` (tests, proxies).
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
    ) -> None:
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
            self._reddit = praw.Reddit(**kwargs)
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
            wait = headers.get("x-ratelimit-reset") or headers.get("retry-after")
            try:
                wait_s = float(wait) if wait is not None else None
            except ValueError:
                wait_s = None
            raise RateLimited("HTTP 429", wait_s=wait_s + 1 if wait_s is not None else None) from None
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
        except (prawcore.NotFound, prawcore.Redirect) as exc:
            raise CollectError(f"Reddit has no such subreddit or page for {what} ({exc})") from None
        except prawcore.ServerError as exc:
            raise TransientError(f"Reddit server error {exc.response.status_code}") from None
        except prawcore.RequestException as exc:
            raise TransientError(f"Reddit could not be reached ({exc.original_exception!r})") from None
        except prawcore.ResponseException as exc:
            if exc.response.status_code == 401:
                raise CollectError(
                    "Reddit refused the credentials (401); check REDDIT_CLIENT_ID and REDDIT_CLIENT_SECRET"
                ) from None
            raise CollectError(
                f"Reddit answered {exc.response.status_code} for {what}: {_reason(exc.response)}"
            ) from None

    def fetch(self, job: Job, cursor: str | None, page_size: int) -> Page:
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
        stamps = [c.get("data", {}).get("created_utc") if isinstance(c, dict) else None for c in children]
        created = created_times(stamps)
        after = body["data"].get("after")
        next_cursor = after if isinstance(after, str) and after and children else None
        since = job.window.since
        if since is not None and any(c is not None and c < since for c in created):
            next_cursor = None  # newest first: the rest of the listing is older than the window
        return Page(body=body, next_cursor=next_cursor, created=created)


def _reason(response: Any) -> str:
    try:
        body = response.json()
    except ValueError:
        return f"HTTP {response.status_code}"
    if isinstance(body, dict):
        parts = [str(body[k]) for k in ("message", "reason", "explanation") if body.get(k)]
        if parts:
            return "; ".join(parts)
    return f"HTTP {response.status_code}"
