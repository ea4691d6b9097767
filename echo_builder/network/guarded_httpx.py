"""An ``httpx`` transport under the network policy, for the clients built on ``httpx`` (atproto for Bluesky):
:class:`GuardedTransport` and :func:`atproto_request`.

The same rules as :mod:`echo_builder.network.guarded_requests`: every hop's host is resolved and every address
judged before connecting (httpcore's network backend is wrapped, so the connection goes to a checked address and
the peer is judged again); redirects are bounded (``max_redirects``) and each hop passes the transport again; one
request with its redirects and body takes at most ``deadline_s`` (its sockets are shut down at the deadline);
rate-limit headers are made sane and a sign-in answer's session tokens are registered for redaction before the
library reads them; environment proxies are not used.
"""

from __future__ import annotations

from typing import Any

from echo_builder.network.deadline import DeadlineExceeded, current_deadline, using_deadline
from echo_builder.network.guard import check_peer, checked_addresses
from echo_builder.network.headers import register_issued_credentials, sanitize_rate_limit_headers
from echo_builder.network.policy import MAX_REDIRECTS, NetworkPolicy

__all__ = ["GuardedTransport", "atproto_request", "guard_async_transport"]

#: XRPC procedures whose answer carries session tokens.
_SESSION_PATHS = ("/xrpc/com.atproto.server.createSession", "/xrpc/com.atproto.server.refreshSession")


class _GuardedBackend:
    """httpcore's network backend, connecting only to addresses the policy allows (see the module docstring)."""

    def __init__(self, inner: Any, policy: NetworkPolicy) -> None:
        self.inner = inner
        self.policy = policy

    def connect_tcp(self, host: str, port: int, timeout: float | None = None, **kwargs: Any) -> Any:
        failure: Exception | None = None
        for address in checked_addresses(self.policy, host, port):
            try:
                stream = self.inner.connect_tcp(str(address), port, timeout=timeout, **kwargs)
            except Exception as exc:  # httpcore's ConnectError / ConnectTimeout: try the next address
                failure = exc
                continue
            sock = stream.get_extra_info("socket")
            try:
                deadline = current_deadline()
                if deadline is not None and sock is not None:
                    deadline.watch(sock)
                if sock is not None:
                    check_peer(self.policy, sock.getpeername()[0], host, port)
            except BaseException:
                stream.close()
                raise
            return stream
        assert failure is not None
        raise failure

    def connect_unix_socket(self, *args: Any, **kwargs: Any) -> Any:
        from echo_builder.network.policy import RefusedDestination

        raise RefusedDestination("request refused: Unix sockets are not used by echo-bench's clients")

    def sleep(self, seconds: float) -> None:
        self.inner.sleep(seconds)


class _GuardedAsyncBackend:
    """httpcore's async network backend, connecting only to addresses the policy allows; the name lookup runs in
    a worker thread so that it never blocks the event loop."""

    def __init__(self, inner: Any, policy: NetworkPolicy) -> None:
        self.inner = inner
        self.policy = policy

    async def connect_tcp(self, host: str, port: int, timeout: float | None = None, **kwargs: Any) -> Any:
        import anyio.to_thread

        failure: Exception | None = None
        for address in await anyio.to_thread.run_sync(checked_addresses, self.policy, host, port):
            try:
                stream = await self.inner.connect_tcp(str(address), port, timeout=timeout, **kwargs)
            except Exception as exc:  # httpcore's ConnectError / ConnectTimeout: try the next address
                failure = exc
                continue
            sock = stream.get_extra_info("socket")
            try:
                if sock is not None:
                    check_peer(self.policy, sock.getpeername()[0], host, port)
            except BaseException:
                await stream.aclose()
                raise
            return stream
        assert failure is not None
        raise failure

    async def connect_unix_socket(self, *args: Any, **kwargs: Any) -> Any:
        from echo_builder.network.policy import RefusedDestination

        raise RefusedDestination("request refused: Unix sockets are not used by echo-bench's clients")

    async def sleep(self, seconds: float) -> None:
        await self.inner.sleep(seconds)


def guard_async_transport(transport: Any, policy: NetworkPolicy) -> Any:
    """``transport`` (an ``httpx.AsyncHTTPTransport``) with its connections held to ``policy``, in place; returned.

    Used under the ``openai`` client of the judge and generator backends. Raises ``RuntimeError`` when the installed
    httpx/httpcore no longer has the connection pool's network backend this wraps (a loud failure, not an unguarded
    client)."""
    pool = getattr(transport, "_pool", None)
    if pool is None or not hasattr(pool, "_network_backend"):
        raise RuntimeError(
            "echo-bench cannot guard this httpx/httpcore version's connections (no network backend found); "
            "install httpx 0.27-0.28"
        )
    pool._network_backend = _GuardedAsyncBackend(pool._network_backend, policy)
    return transport


def _transport_base() -> type:
    import httpx

    return httpx.HTTPTransport


class GuardedTransport(_transport_base()):  # type: ignore[misc]
    """``httpx.HTTPTransport`` whose connections obey ``policy``; other arguments as ``httpx.HTTPTransport``.

    Raises :class:`~echo_builder.network.policy.RefusedDestination` from ``handle_request`` for a refused
    destination (nothing was sent). Raises ``RuntimeError`` at construction when the installed httpx/httpcore no
    longer has the connection pool's network backend this wraps (a loud failure, not an unguarded client).
    """

    def __init__(self, policy: NetworkPolicy, **kwargs: Any) -> None:
        kwargs.setdefault("trust_env", False)
        super().__init__(**kwargs)
        pool = getattr(self, "_pool", None)
        if pool is None or not hasattr(pool, "_network_backend"):
            raise RuntimeError(
                "echo-bench cannot guard this httpx/httpcore version's connections (no network backend found); "
                "install httpx 0.27-0.28"
            )
        pool._network_backend = _GuardedBackend(pool._network_backend, policy)

    def handle_request(self, request: Any) -> Any:
        response = super().handle_request(request)
        sanitize_rate_limit_headers(response.headers)
        if request.url.path in _SESSION_PATHS:
            register_issued_credentials(response.read())
        return response


def atproto_request(policy: NetworkPolicy, *, deadline_s: float = 120.0, timeout_s: float = 60.0) -> Any:
    """An ``atproto_client.request.Request`` (pass it as ``atproto.Client(request=...)``) whose every request goes
    through a :class:`GuardedTransport`, follows at most :data:`MAX_REDIRECTS` redirects and, with its redirects
    and body, ends within ``deadline_s`` (raising :class:`~echo_builder.network.deadline.DeadlineExceeded`)."""
    from atproto_client.request import Request

    class GuardedRequest(Request):
        def _send_request(self, method: str, url: str, **kwargs: Any) -> Any:
            with using_deadline(deadline_s) as deadline:
                try:
                    return super()._send_request(method, url, **kwargs)
                except DeadlineExceeded:
                    raise
                except Exception:
                    if deadline.expired:
                        raise deadline.error() from None
                    raise

    return GuardedRequest(
        transport=GuardedTransport(policy), max_redirects=MAX_REDIRECTS, timeout=timeout_s, trust_env=False
    )
