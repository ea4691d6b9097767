"""A size cap on every HTTP reply body the ``openai:`` backend and the ``openai-images:`` generator read.

A server (or anything between it and us) can answer with a body far larger than any reply: a 1 MB gzip body that
inflates to 1 GB, or an endless stream. :class:`CappedTransport` sits under the ``openai`` client's HTTP client and
reads each reply body itself, incrementally, before the client sees it: the raw bytes and the decoded bytes are
both counted, decompression is asked for at most the bytes still allowed (``zlib``'s ``max_length``), and past
the cap the connection is closed and the call fails with :class:`ReplyTooLargeError`, so memory stays within the
cap plus one network read. Only ``gzip``, ``deflate`` and ``identity`` content codings are accepted (the request
says so in ``Accept-Encoding``); a reply in another coding fails the same way, since its expansion cannot be
bounded here. This applies to every body: chat completions, image replies, model listings, error bodies and the
bodies of redirects.
"""

from __future__ import annotations

import importlib
import zlib
from typing import Any

__all__ = ["CappedTransport", "ReplyTooLargeError", "capped_client", "read_capped"]

#: Content codings this module decodes itself; their decoded size is bounded as it is produced.
ACCEPT_ENCODING = "gzip, deflate"


class ReplyTooLargeError(Exception):
    """A reply body was over the cap (decoded or raw bytes), or in a content coding that cannot be bounded.

    Attributes:
        limit: the cap in bytes.
        read: decoded bytes read before stopping (at most ``limit + 1``).
    """

    def __init__(self, message: str, *, limit: int, read: int) -> None:
        super().__init__(message)
        self.limit = limit
        self.read = read


def _decoder(encoding: str, limit: int) -> Any:
    coding = [c.strip().lower() for c in encoding.split(",") if c.strip() and c.strip().lower() != "identity"]
    if not coding:
        return None
    if len(coding) == 1 and coding[0] in ("gzip", "x-gzip"):
        return zlib.decompressobj(16 + zlib.MAX_WBITS)
    if len(coding) == 1 and coding[0] == "deflate":
        return "deflate"  # zlib-wrapped or raw: decided on the first bytes
    raise ReplyTooLargeError(
        f"reply in content coding {encoding!r}, whose decoded size cannot be bounded (accepted: gzip, deflate)",
        limit=limit,
        read=0,
    )


async def read_capped(response: Any, limit: int) -> bytes:
    """The decoded body of an unread ``httpx``-style response, read incrementally and stopped past ``limit``.

    Args:
        response: a response whose body has not been read (``aiter_raw`` gives the bytes as sent).
        limit: the most decoded (and raw) bytes accepted.

    Returns:
        The decoded body (``len <= limit``).

    Raises:
        ReplyTooLargeError: the body (raw or decoded) is over ``limit``, its ``Content-Length`` says it will be, or
            it uses a content coding other than gzip/deflate/identity. The stream is closed by the caller.
    """
    declared = response.headers.get("content-length")
    if declared is not None and declared.strip().isdigit() and int(declared) > limit:
        raise ReplyTooLargeError(
            f"reply body of {int(declared):,} bytes (Content-Length) is over the {limit:,}-byte cap",
            limit=limit,
            read=0,
        )
    decoder = _decoder(response.headers.get("content-encoding", ""), limit)
    out = bytearray()
    raw_total = 0

    def too_large(what: str) -> ReplyTooLargeError:
        return ReplyTooLargeError(
            f"reply body over the {limit:,}-byte cap ({what}); stopped reading after {len(out):,} decoded "
            f"and {raw_total:,} received bytes",
            limit=limit,
            read=len(out),
        )

    async for raw in response.aiter_raw():
        raw_total += len(raw)
        if raw_total > limit:
            raise too_large("bytes received")
        if decoder is None:
            out += raw
        else:
            if decoder == "deflate":
                wbits = zlib.MAX_WBITS if raw[:1] and (raw[0] & 0x0F) == 8 else -zlib.MAX_WBITS
                decoder = zlib.decompressobj(wbits)
            data = raw
            while data and not decoder.eof:
                try:
                    out += decoder.decompress(data, limit + 1 - len(out))
                except zlib.error as exc:
                    raise ValueError(
                        f"reply body is not valid {response.headers.get('content-encoding')}: {exc}"
                    ) from None
                if len(out) > limit:
                    raise too_large("decoded bytes")
                data = decoder.unconsumed_tail
        if len(out) > limit:
            raise too_large("decoded bytes")
    return bytes(out)


class CappedTransport:
    """An async HTTP transport that hands on every reply with its body already read through :func:`read_capped`.

    Args:
        inner: the transport that talks to the network (``httpx.AsyncHTTPTransport`` or compatible).
        limit: the most bytes one reply body may have, decoded and as received.
        http: the ``httpx``-compatible module the client uses (its ``Response`` class builds the replies).
    """

    def __init__(self, inner: Any, limit: int, http: Any) -> None:
        self.inner = inner
        self.limit = limit
        self._http = http

    async def handle_async_request(self, request: Any) -> Any:
        request.headers["Accept-Encoding"] = ACCEPT_ENCODING
        response = await self.inner.handle_async_request(request)
        try:
            body = await read_capped(response, self.limit)
        finally:
            await response.aclose()
        headers = [
            (k, v)
            for k, v in response.headers.multi_items()
            if k.lower() not in ("content-encoding", "content-length", "transfer-encoding")
        ]
        return self._http.Response(
            response.status_code, headers=headers, content=body, extensions=response.extensions
        )

    async def aclose(self) -> None:
        await self.inner.aclose()

    async def __aenter__(self) -> CappedTransport:
        await self.inner.__aenter__()
        return self

    async def __aexit__(self, *args: Any) -> None:
        await self.inner.__aexit__(*args)


def _http_module(client_class: type) -> Any:
    """The ``httpx``-compatible package whose ``AsyncClient`` ``client_class`` derives from (``httpx`` or the
    ``httpx2`` of newer ``openai`` releases)."""
    for cls in client_class.__mro__:
        if cls.__name__ == "AsyncClient":
            return importlib.import_module(cls.__module__.split(".")[0])
    import httpx

    return httpx


def capped_client(limit: int, timeout_s: float, policy: Any = None) -> Any:
    """An ``openai.DefaultAsyncHttpxClient`` whose every reply body (also through an environment proxy and on
    redirects) is read through :class:`CappedTransport` with cap ``limit`` bytes; with ``policy`` (a
    :class:`~echo_builder.network.policy.NetworkPolicy`), its direct connections go only to addresses the policy
    allows (:func:`~echo_builder.network.guarded_httpx.guard_async_transport`). A proxy named in the environment
    is the user's choice and is connected to as it is."""
    import openai

    http = _http_module(openai.DefaultAsyncHttpxClient)
    # openai's own pool defaults (1,000 connections): far above any sensible caller concurrency
    limits = http.Limits(max_connections=1000, max_keepalive_connections=100)
    inner = http.AsyncHTTPTransport(limits=limits)
    if policy is not None:
        from echo_builder.network.guarded_httpx import guard_async_transport

        guard_async_transport(inner, policy)
    from echo_builder.network.policy import MAX_REDIRECTS

    client = openai.DefaultAsyncHttpxClient(
        transport=CappedTransport(inner, limit, http), timeout=timeout_s, max_redirects=MAX_REDIRECTS
    )
    mounts = getattr(client, "_mounts", None)
    if isinstance(mounts, dict):  # transports of $HTTPS_PROXY and friends: cap them too
        for pattern, transport in list(mounts.items()):
            if transport is not None and not isinstance(transport, CappedTransport):
                mounts[pattern] = CappedTransport(transport, limit, http)
    return client
