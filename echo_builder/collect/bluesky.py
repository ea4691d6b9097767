"""Bluesky search through the atproto SDK: ``app.bsky.feed.searchPosts`` (``q``, ``since``, ``until``,
``sort=latest``, ``limit`` up to 100, ``cursor``), signed in with an app password (``BLUESKY_HANDLE``,
``BLUESKY_APP_PASSWORD``; ``com.atproto.server.createSession``): Bluesky's appview no longer serves search to
anonymous callers.

A page is the ``{"posts": [<postView>], "cursor", "hitsTotal"}`` body as the server sent it, the shape the
``bluesky`` reader (:mod:`echo_builder.sources.bluesky`) reads. ``Client.invoke_query`` is used rather than
``client.app.bsky.feed.search_posts``: the generated method returns pydantic models, and dumping them back would
not give the server's JSON byte for byte (unknown fields of newer lexicons are kept as the server sent them only in
the raw body). The search ends when a page has no ``cursor``.

Threads (``app.bsky.feed.getPostThread``) and posts (``getPosts``) are public: :meth:`BlueskySearch.query_raw`
reads any XRPC query the same way, signed in or (``public=True``) from the public AppView without an account, for
later use by thread expansion.
"""

from __future__ import annotations

import inspect
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
    finite_number,
    plausible_cursor,
    require_import,
)

__all__ = ["DEFAULT_SERVICE", "PUBLIC_APPVIEW", "BlueskySearch"]

DEFAULT_SERVICE = "https://bsky.social"
#: Bluesky's AppView for anonymous reads (threads, posts; not search).
PUBLIC_APPVIEW = "https://public.api.bsky.app"


def _iso_ms(moment: Any) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%S.000Z")


def _xrpc_message(response: Any) -> str:
    content = getattr(response, "content", None)
    parts = [getattr(content, "error", None), getattr(content, "message", None)]
    text = ": ".join(p for p in parts if isinstance(p, str) and p)
    return text or f"HTTP {getattr(response, 'status_code', '?')}"


class BlueskySearch:
    """The Bluesky platform of the collector (:class:`echo_builder.collect.core.Platform`).

    Args:
        handle, app_password: the account; ``None`` reads ``BLUESKY_HANDLE`` / ``BLUESKY_APP_PASSWORD``.
        base_url: the service (PDS or entryway) to sign in at; default ``https://bsky.social``. After the sign-in
            the SDK talks to the account's own PDS when the session names one. A given ``base_url``'s host and
            port are the only non-public address requests may go to (every request goes through
            :func:`echo_builder.network.guarded_httpx.atproto_request`: address policy, at most 5 redirects, a
            total deadline of ``deadline_s`` per request).
        sort: ``latest`` (every match, newest first) or ``top``.
    """

    name = "bluesky"
    max_page_size = 100
    min_page_size = 1
    min_interval_s = 0.0

    def __init__(
        self,
        handle: str | None = None,
        app_password: str | None = None,
        *,
        base_url: str | None = None,
        sort: str = "latest",
        deadline_s: float = 120.0,
        timeout_s: float = 60.0,
    ) -> None:
        from echo_builder.network.policy import NetworkPolicy
        from echo_builder.secrets import register_secret

        for secret in (handle, app_password):
            register_secret(secret)
        self.handle = handle
        self.app_password = app_password
        self.policy = NetworkPolicy.for_endpoints([base_url])
        self.deadline_s = deadline_s
        self.timeout_s = timeout_s
        self.base_url = base_url or DEFAULT_SERVICE
        self.sort = sort
        self.auth_requests = 0
        self._client: Any = None
        self._public: Any = None

    def query_for(self, term: str) -> str:
        """``"term"``: an exact phrase (searchPosts uses Lucene syntax; quotes keep ``gpt-4o`` one token)."""
        return '"' + term.replace('"', " ").strip() + '"'

    def client(self) -> Any:
        """The signed-in atproto client (created on first use: a finished collection never signs in)."""
        if self._client is None:
            atproto = require_import("atproto", "atproto")
            handle = self.handle or env_credential("BLUESKY_HANDLE", "collect bluesky")
            password = self.app_password or env_credential("BLUESKY_APP_PASSWORD", "collect bluesky")
            client = atproto.Client(base_url=self.base_url, request=self._request())
            kwargs: dict[str, Any] = {}
            if "fetch_bsky_profile" in inspect.signature(client.login).parameters:
                kwargs["fetch_bsky_profile"] = False  # one request less; the profile is not needed
            self.auth_requests += 1
            try:
                client.login(handle, password, **kwargs)
            except Exception as exc:
                self._raise(exc, "signing in")
            self._client = client
        return self._client

    def _request(self) -> Any:
        from echo_builder.network.guarded_httpx import atproto_request

        return atproto_request(self.policy, deadline_s=self.deadline_s, timeout_s=self.timeout_s)

    def _raise(self, exc: Exception, what: str) -> None:
        import httpx
        from atproto_client import exceptions as ex

        from echo_builder.network import DeadlineExceeded, RefusedDestination

        cause = exc.__cause__ if isinstance(exc, ex.AtProtocolError) and exc.__cause__ is not None else exc
        if isinstance(cause, RefusedDestination):
            raise CollectError(f"Bluesky {what}: {cause}; nothing was sent there") from None
        if isinstance(cause, DeadlineExceeded):
            raise TransientError(
                f"Bluesky did not answer in time ({what}): the request was {cause}"
            ) from None
        if isinstance(cause, httpx.TooManyRedirects):
            raise CollectError(
                f"Bluesky answered {what} with more than 5 redirects (a redirect loop); check --base-url"
            ) from None
        if isinstance(cause, RecursionError) or "recursion" in str(cause).lower():
            raise CollectError(f"Bluesky answered {what} with JSON nested too deeply to read") from None
        if isinstance(cause, (httpx.TransportError, httpx.DecodingError, httpx.StreamError)):
            raise TransientError(f"Bluesky {what} failed ({type(cause).__name__})") from None
        response = getattr(exc, "response", None)
        status = getattr(response, "status_code", None)
        headers = getattr(response, "headers", None) or {}
        if isinstance(exc, ex.RateLimitExceededError) or status == 429:
            raise RateLimited("HTTP 429", reset_at=finite_number(headers.get("ratelimit-reset"))) from None
        if isinstance(exc, ex.UnauthorizedError):
            raise CollectError(
                f"Bluesky refused {what} ({status}: {_xrpc_message(response)}); check BLUESKY_HANDLE and "
                "BLUESKY_APP_PASSWORD (an app password from Settings > Privacy and security > App passwords)"
            ) from None
        if isinstance(exc, ex.BadRequestError):
            raise CollectError(f"Bluesky rejected {what} (400: {_xrpc_message(response)})") from None
        if isinstance(exc, (ex.InvokeTimeoutError, ex.NetworkError)) or (
            status is not None and status >= 500
        ):
            raise TransientError(f"Bluesky {what} failed ({status or type(exc).__name__})") from None
        if isinstance(exc, ValueError):  # pydantic_core's from_json on a body that is not JSON
            raise BadResponse(f"Bluesky answered with malformed JSON while {what} ({exc})") from None
        if isinstance(exc, ex.AtProtocolError):
            raise CollectError(
                f"Bluesky failed {what}: {status or ''} {_xrpc_message(response)}".strip()
            ) from None
        if isinstance(exc, (TypeError, KeyError, AttributeError)):  # the SDK choking on an odd answer
            raise BadResponse(
                f"Bluesky answered {what} with a body the SDK cannot read ({type(exc).__name__})"
            ) from None
        raise exc

    def query_raw(
        self, nsid: str, params: dict[str, Any], *, public: bool = False
    ) -> tuple[Any, dict[str, str]]:
        """The decoded JSON body and headers of the XRPC query ``nsid`` (e.g. ``app.bsky.feed.getPostThread``
        with ``{"uri", "depth", "parentHeight"}``, ``app.bsky.feed.getPosts`` with ``{"uris": [...]}``).

        ``public``: ask the public AppView (``PUBLIC_APPVIEW``, or ``base_url`` when one was given) without
        signing in; threads and posts are public, search is not. Raises :class:`RateLimited`,
        :class:`TransientError` / :class:`BadResponse`, or :class:`CollectError`.
        """
        from atproto_client.models.dot_dict import DotDict

        if public:
            if self._public is None:
                atproto = require_import("atproto", "atproto")
                given = self.base_url if self.base_url != DEFAULT_SERVICE else None
                self._public = atproto.Client(base_url=given or PUBLIC_APPVIEW, request=self._request())
            client = self._public
        else:
            client = self.client()
        try:
            response = client.invoke_query(nsid, params=DotDict(params))
        except Exception as exc:
            self._raise(exc, nsid)
            raise  # unreachable: _raise always raises
        body = response.content
        if isinstance(body, (bytes, bytearray)):
            from echo_builder.collect.core import decode_json

            body = decode_json(bytes(body), response.headers.get("content-type"), f"Bluesky {nsid}")
        return body, response.headers

    def fetch(self, job: Job, cursor: str | None, page_size: int) -> Page:
        params: dict[str, Any] = {"q": job.query, "sort": self.sort, "limit": max(1, min(100, page_size))}
        if job.window.since:
            params["since"] = _iso_ms(job.window.since)
        if job.window.until:
            params["until"] = _iso_ms(job.window.until)
        if cursor:
            params["cursor"] = cursor
        body, headers = self.query_raw("app.bsky.feed.searchPosts", params)
        if not isinstance(body, dict) or not isinstance(body.get("posts"), list):
            shown = sorted(body) if isinstance(body, dict) else type(body).__name__
            raise BadResponse(f"Bluesky searchPosts answered a body without a posts list (got {shown})")
        posts = body["posts"]
        stamps = []
        for post in posts:
            record = post.get("record") if isinstance(post, dict) else None
            stamps.append(record.get("createdAt") if isinstance(record, dict) else None)
        next_cursor, problem = plausible_cursor(body.get("cursor") if posts else None, "Bluesky")
        reset_at = None
        if headers.get("ratelimit-remaining") == "0":
            reset_at = finite_number(headers.get("ratelimit-reset"))
        return Page(
            body=body,
            next_cursor=next_cursor,
            created=created_times(stamps),
            reset_at=reset_at,
            ids=[str(p.get("uri")) for p in posts if isinstance(p, dict)],
            error=problem,
        )
