"""X (Twitter) API v2 search through tweepy: ``GET /2/tweets/search/recent`` (the last 7 days) or
``GET /2/tweets/search/all`` (full archive, ``--archive``), with a bearer token (``X_BEARER_TOKEN``).

Each page is asked with the expansions ``build`` reads (``author_id``, ``attachments.media_keys``,
``referenced_tweets.id``, ``referenced_tweets.id.author_id``) and the tweet, user and media fields of
:data:`TWEET_FIELDS`, :data:`USER_FIELDS`, :data:`MEDIA_FIELDS`, so a page is an ``x_api`` response exactly as
:mod:`echo_builder.sources.x_api` documents it. Pagination: ``meta.next_token`` -> ``next_token``; the search ends
when a page has no ``next_token``.

tweepy.Client has no base-URL setting (4.14-4.17 write ``https://api.twitter.com`` into ``BaseClient.request``), so
the client's session is replaced by a guarded one (:func:`echo_builder.network.guarded_requests.guarded_session`:
every hop's address checked against the network policy, at most 5 redirects, a total deadline per request) whose
transport adapter sends requests for that host to ``base_url`` instead (the loopback replay server in the tests, or
a proxy) and gives every request a timeout (tweepy sets none). ``return_type=requests.Response`` keeps the body as X sent it (tweepy's ``Response``
objects would drop ``meta`` fields and ``errors``), and ``wait_on_rate_limit`` is off: the collector waits itself,
with a deadline and an injectable clock.

The ``x_api`` reader skips retweets, so ``-is:retweet`` is added to every query (``--keep-retweets`` leaves it
out): X bills each post read, retweets included.
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

from echo_builder.collect.core import (
    CollectError,
    Job,
    Page,
    RateLimited,
    TransientError,
    Window,
    created_times,
    decode_json,
    env_credential,
    finite_number,
    plausible_cursor,
    require_import,
)

__all__ = ["API_HOST", "MEDIA_FIELDS", "TWEET_FIELDS", "USER_FIELDS", "XSearch", "conversation_job"]

API_HOST = "https://api.twitter.com"
TWEET_FIELDS = [
    "attachments",
    "author_id",
    "conversation_id",
    "created_at",
    "entities",
    "in_reply_to_user_id",
    "lang",
    "note_tweet",
    "public_metrics",
    "referenced_tweets",
]
USER_FIELDS = ["id", "name", "username", "verified"]
MEDIA_FIELDS = ["alt_text", "height", "media_key", "preview_image_url", "type", "url", "variants", "width"]
EXPANSIONS = ["author_id", "attachments.media_keys", "referenced_tweets.id", "referenced_tweets.id.author_id"]


def conversation_job(conversation_id: str, window: Window | None = None) -> Job:
    """A search job for every post of a conversation (``conversation_id:<id>``, the id of its first post): run
    through :class:`~echo_builder.collect.core.Collector` like a keyword search, to fetch a thread's replies.
    Recent search covers the last 7 days; older conversations need ``archive=True``."""
    if not conversation_id.isdigit():
        raise CollectError(
            f"an X conversation id is a number (the id of its first post), got {conversation_id!r}"
        )
    query = f"conversation_id:{conversation_id}"
    return Job(f"conversation-{conversation_id}", query, query, window or Window())


def _host_adapter(base_url: str | None, timeout_s: float) -> Any:
    from echo_builder.network.guarded_requests import GuardedAdapter
    from echo_builder.network.policy import NetworkPolicy

    class _HostAdapter(GuardedAdapter):
        """Sends ``https://api.twitter.com/...`` to ``base_url`` (when set) with a timeout on every request."""

        def send(self, request: Any, **kwargs: Any) -> Any:  # type: ignore[override]
            if base_url and request.url.startswith(API_HOST):
                request.url = base_url.rstrip("/") + request.url[len(API_HOST) :]
            if not kwargs.get("timeout"):
                kwargs["timeout"] = timeout_s
            response = super().send(request, **kwargs)
            if response.status_code >= 400 and not kwargs.get("stream"):
                _readable_error_body(response)
            return response

    return _HostAdapter(NetworkPolicy.for_endpoints([base_url]))


def _readable_error_body(response: Any) -> None:
    """Replace an error answer's body that is not a JSON object (a list, JSON nested past the parser's limit, bytes
    that are not UTF-8) by one that says so: tweepy reads every error body as a JSON object while raising, and
    would fail with a traceback of its own instead of the error."""
    import json

    try:
        body = json.loads(response.content)
    except (ValueError, RecursionError):
        body = None
    errors = body.get("errors", []) if isinstance(body, dict) else None
    if isinstance(errors, list) and all(isinstance(e, dict) for e in errors):
        return
    detail = f"the error body was not an API v2 error object ({len(response.content):,} bytes)"
    response._content = json.dumps({"title": f"HTTP {response.status_code}", "detail": detail}).encode()
    response.headers["content-type"] = "application/json"


def _x_errors(response: Any) -> str:
    """X's error text from a failed response: ``detail``/``title``/``message`` of the body, else the status."""
    try:
        body = response.json()
    except (ValueError, RecursionError):
        return f"HTTP {response.status_code} {response.reason}"
    parts: list[str] = []
    if isinstance(body, dict):
        for entry in [body, *(body.get("errors") or [])]:
            if isinstance(entry, dict):
                for key in ("title", "detail", "message", "reason"):
                    if isinstance(entry.get(key), str) and entry[key] not in parts:
                        parts.append(entry[key])
    return "; ".join(parts) or f"HTTP {response.status_code} {response.reason}"


class XSearch:
    """The X platform of the collector (:class:`echo_builder.collect.core.Platform`).

    Args:
        bearer_token: an app's bearer token; ``None`` reads ``X_BEARER_TOKEN``.
        archive: full-archive search (``/2/tweets/search/all``; Pro or Enterprise access, 1 request/s, pages of
            up to 500 posts) instead of recent search (the last 7 days, pages of up to 100).
        keep_retweets: do not add ``-is:retweet`` to the queries.
        base_url: another API host (tests, proxies); its host and port are the only non-public address requests
            may go to.
        timeout_s: per-read timeout.
        deadline_s: total seconds one request may take, redirects and body included.
    """

    name = "x"
    min_page_size = 10

    def __init__(
        self,
        bearer_token: str | None = None,
        *,
        archive: bool = False,
        keep_retweets: bool = False,
        base_url: str | None = None,
        timeout_s: float = 60.0,
        deadline_s: float = 120.0,
    ) -> None:
        from echo_builder.secrets import register_secret

        register_secret(bearer_token)
        self.bearer_token = bearer_token
        self.deadline_s = deadline_s
        self.archive = archive
        self.keep_retweets = keep_retweets
        self.base_url = base_url
        self.timeout_s = timeout_s
        self.max_page_size = 500 if archive else 100
        self.min_interval_s = 1.0 if archive else 0.0
        self.auth_requests = 0
        self._client: Any = None

    def query_for(self, term: str) -> str:
        """``"term"`` (an exact phrase, so punctuation such as ``gpt-4o`` is literal) plus ``-is:retweet``."""
        phrase = '"' + term.replace('"', " ").strip() + '"'
        return phrase if self.keep_retweets else f"{phrase} -is:retweet"

    def effective_window(self, window: Window, now: float) -> Window:
        """The window X accepts at UNIX time ``now``: the end no later than 30 s ago (X refuses an ``end_time``
        under 10 s before the request); in recent search the start no earlier than 7 days ago (less 2 minutes).

        Raises :class:`CollectError` for a window that ends more than 7 days ago in recent search (it needs
        ``--archive``) or starts in the future.
        """
        until = window.until
        latest = datetime.fromtimestamp(now - 30, timezone.utc)
        if until is None or until > latest:
            until = latest
        since = window.since
        if not self.archive:
            earliest = datetime.fromtimestamp(now - 7 * 86400 + 120, timezone.utc)
            if until <= earliest:
                raise CollectError(
                    f"the window {window.as_dict()} ended more than 7 days ago: X's recent search covers the last 7 "
                    "days only; use --archive (full-archive search) for older posts"
                )
            if since is not None and since < earliest:
                since = earliest
        if since is not None and since >= until:
            raise CollectError(f"the window {window.as_dict()} has not started yet; collect it once it has")
        return Window(since, until)

    def client(self) -> Any:
        """The tweepy client (created on first use: a finished collection never needs the token)."""
        if self._client is None:
            tweepy = require_import("tweepy", "tweepy")
            requests = require_import("requests", "requests")
            token = self.bearer_token or env_credential("X_BEARER_TOKEN", "collect x")
            from echo_builder.network.guarded_requests import guarded_session

            client = tweepy.Client(
                bearer_token=token, return_type=requests.Response, wait_on_rate_limit=False
            )
            adapter = _host_adapter(self.base_url, self.timeout_s)
            client.session = guarded_session(adapter.policy, deadline_s=self.deadline_s, adapter=adapter)
            self._client = client
        return self._client

    def _call(self, what: str, method: str, *args: Any, **params: Any) -> tuple[dict[str, Any], Any]:
        """Call the tweepy client's ``method``; the decoded body and the ``requests`` response. Maps X's answers
        to :class:`RateLimited` (429), :class:`TransientError` (5xx, network), :class:`BadResponse` (an HTML page,
        malformed JSON) and :class:`CollectError` (401, 403, 400, other 4xx, a body that is not an object)."""
        tweepy = require_import("tweepy", "tweepy")
        import requests

        from echo_builder.network import DeadlineExceeded, RefusedDestination

        try:
            response = getattr(self.client(), method)(*args, **params)
        except tweepy.TooManyRequests as exc:
            reset = exc.response.headers.get("x-rate-limit-reset")
            raise RateLimited("HTTP 429", reset_at=finite_number(reset)) from None
        except tweepy.Unauthorized as exc:
            raise CollectError(
                f"X refused the bearer token (401 Unauthorized: {_x_errors(exc.response)}); set X_BEARER_TOKEN to "
                "your app's bearer token from the developer portal"
            ) from None
        except tweepy.Forbidden as exc:
            raise CollectError(
                f"X refused {what} (403 Forbidden: {_x_errors(exc.response)}); the app's access level may not "
                "include this endpoint (full-archive search needs Pro or Enterprise), or the account is suspended"
            ) from None
        except tweepy.BadRequest as exc:
            raise CollectError(f"X rejected {what} (400 Bad Request: {_x_errors(exc.response)})") from None
        except tweepy.TwitterServerError as exc:
            raise TransientError(f"X server error {exc.response.status_code} {exc.response.reason}") from None
        except tweepy.HTTPException as exc:
            raise CollectError(f"X answered {_x_errors(exc.response)} for {what}") from None
        except RefusedDestination as exc:
            raise CollectError(f"X: {exc}; nothing was sent there") from None
        except DeadlineExceeded as exc:
            raise TransientError(f"X did not answer in time ({what}): the request was {exc}") from None
        except requests.TooManyRedirects:
            raise CollectError(
                f"X answered {what} with more than 5 redirects (a redirect loop); check --base-url"
            ) from None
        except (requests.ConnectionError, requests.Timeout) as exc:
            raise TransientError(f"X could not be reached ({type(exc).__name__})") from None
        except requests.RequestException as exc:  # a body cut short, an undecodable content coding
            raise TransientError(f"X answered {what} with a broken reply ({type(exc).__name__})") from None
        except RecursionError:
            raise CollectError(f"X answered {what} with JSON nested too deeply to read") from None
        body = decode_json(response.content, response.headers.get("content-type"), "X")
        if not isinstance(body, dict) or not ({"data", "meta", "errors"} & body.keys()):
            shown = sorted(body) if isinstance(body, dict) else type(body).__name__
            raise CollectError(f"X answered {what} with a body that is no API v2 response (got {shown})")
        return body, response

    def lookup(self, ids: list[str]) -> dict[str, Any]:
        """``GET /2/tweets?ids=...`` (at most 100 ids) with the same expansions and fields as the search: an
        ``x_api`` response (``data``, ``includes``, and ``errors`` for deleted or protected posts). For fetching
        referenced posts and threads later; raises as :meth:`_call`."""
        if not 1 <= len(ids) <= 100:
            raise CollectError(f"X's post lookup takes 1 to 100 ids a request, got {len(ids)}")
        fields = {
            "expansions": EXPANSIONS,
            "tweet_fields": TWEET_FIELDS,
            "user_fields": USER_FIELDS,
            "media_fields": MEDIA_FIELDS,
        }
        body, _ = self._call(f"the lookup of {len(ids)} posts", "get_tweets", ids, **fields)
        return body

    def fetch(self, job: Job, cursor: str | None, page_size: int) -> Page:
        params: dict[str, Any] = {
            "max_results": max(self.min_page_size, min(self.max_page_size, page_size)),
            "expansions": EXPANSIONS,
            "tweet_fields": TWEET_FIELDS,
            "user_fields": USER_FIELDS,
            "media_fields": MEDIA_FIELDS,
        }
        if job.window.since:
            params["start_time"] = job.window.since
        if job.window.until:
            params["end_time"] = job.window.until
        if cursor:
            params["next_token"] = cursor
        method = "search_all_tweets" if self.archive else "search_recent_tweets"
        body, response = self._call(f"the query {job.query!r}", method, job.query, **params)
        meta = body.get("meta") if isinstance(body.get("meta"), dict) else {}
        data = body.get("data") if isinstance(body.get("data"), list) else []
        token, problem = plausible_cursor(meta.get("next_token"), "X")
        remaining = response.headers.get("x-rate-limit-remaining")
        reset = response.headers.get("x-rate-limit-reset")
        reset_at = finite_number(reset) if remaining == "0" else None
        posts = [t for t in data if isinstance(t, dict)]
        return Page(
            body=body,
            next_cursor=token,
            created=created_times(t.get("created_at") if isinstance(t, dict) else None for t in data),
            reset_at=reset_at,
            ids=[str(t.get("id")) for t in posts],
            error=problem,
        )
