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
            the SDK talks to the account's own PDS when the session names one.
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
    ) -> None:
        self.handle = handle
        self.app_password = app_password
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
            client = atproto.Client(base_url=self.base_url)
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

    def _raise(self, exc: Exception, what: str) -> None:
        from atproto_client import exceptions as ex

        response = getattr(exc, "response", None)
        status = getattr(response, "status_code", None)
        headers = getattr(response, "headers", None) or {}
        if isinstance(exc, ex.RateLimitExceededError) or status == 429:
            reset = headers.get("ratelimit-reset")
            try:
                reset_at = float(reset) if reset is not None else None
            except ValueError:
                reset_at = None
            raise RateLimited("HTTP 429", reset_at=reset_at) from None
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
                self._public = atproto.Client(base_url=given or PUBLIC_APPVIEW)
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
        next_cursor = body.get("cursor")
        reset_at = None
        if headers.get("ratelimit-remaining") == "0":
            try:
                reset_at = float(headers.get("ratelimit-reset", ""))
            except ValueError:
                reset_at = None
        return Page(
            body=body,
            next_cursor=next_cursor if isinstance(next_cursor, str) and next_cursor and posts else None,
            created=created_times(stamps),
            reset_at=reset_at,
        )
