"""A ``requests`` session under the network policy, for the clients built on ``requests`` (tweepy for X, prawcore
for Reddit): :func:`guarded_session`.

Through the libraries' own hooks only (tweepy's ``Client.session``, prawcore's ``Requestor(session=...)``):

- every hop's destination is checked before connecting: the host is resolved and every address judged by the
  :class:`~echo_builder.network.policy.NetworkPolicy`, the connection goes to a checked address, and the address
  actually connected to is judged again (a mounted :class:`GuardedAdapter` whose urllib3 connections do this);
- redirects are bounded (``max_redirects``) and each hop goes through the same adapter, so it is re-checked;
- one request, its redirects and its body together take at most ``deadline_s``: the sockets it opened are shut down
  at the deadline (:class:`~echo_builder.network.deadline.Deadline`), so a server dripping one byte at a time
  cannot hold it;
- every answer's rate-limit headers are made sane and the credentials a token answer issues are registered for
  redaction before the library sees them (:mod:`echo_builder.network.headers`);
- proxies and ``.netrc`` from the environment are not used (``trust_env`` off): a proxy would be the only address
  checked; give a proxy as the command's ``--base-url`` instead.
"""

from __future__ import annotations

import functools
from typing import Any

from echo_builder.network.deadline import DeadlineExceeded, current_deadline, using_deadline
from echo_builder.network.guard import check_peer, checked_addresses
from echo_builder.network.headers import register_issued_credentials, sanitize_rate_limit_headers
from echo_builder.network.policy import MAX_REDIRECTS, NetworkPolicy

__all__ = ["GuardedAdapter", "guarded_session"]

#: Token answers whose body holds issued credentials (Reddit's OAuth endpoint).
_TOKEN_PATHS = ("/api/v1/access_token",)


@functools.cache
def _connection_classes() -> tuple[type, type]:
    import urllib3.connection
    import urllib3.exceptions

    class Guarded:
        policy: NetworkPolicy

        def _new_conn(self) -> Any:
            host, port = self.host, self.port  # type: ignore[attr-defined]
            failure: Exception | None = None
            for address in checked_addresses(self.policy, host, port):
                self._dns_host = str(address)  # connect to the address just checked, not a new lookup
                try:
                    sock = super()._new_conn()  # type: ignore[misc]
                except urllib3.exceptions.NewConnectionError as exc:
                    failure = exc
                    continue
                try:
                    deadline = current_deadline()
                    if deadline is not None:
                        deadline.watch(sock)  # before the TLS handshake, which a server can drip too
                    check_peer(self.policy, sock.getpeername()[0], host, port)
                except BaseException:
                    sock.close()
                    raise
                return sock
            assert failure is not None
            raise failure

    class HTTP(Guarded, urllib3.connection.HTTPConnection):
        pass

    class HTTPS(Guarded, urllib3.connection.HTTPSConnection):
        pass

    return HTTP, HTTPS


def _adapter_base() -> type:
    from requests.adapters import HTTPAdapter

    return HTTPAdapter


class GuardedAdapter(_adapter_base()):  # type: ignore[misc]
    """A ``requests`` transport adapter whose connections obey ``policy`` (see the module docstring).

    Subclass it to rewrite URLs (``send``) and keep the guard. Raises
    :class:`~echo_builder.network.policy.RefusedDestination` from ``send`` for a refused destination.
    """

    def __init__(self, policy: NetworkPolicy, **kwargs: Any) -> None:
        self.policy = policy
        super().__init__(**kwargs)

    def init_poolmanager(self, *args: Any, **kwargs: Any) -> None:
        import urllib3

        super().init_poolmanager(*args, **kwargs)
        http_cls, https_cls = _connection_classes()
        policy = self.policy

        class Pool(urllib3.HTTPConnectionPool):
            ConnectionCls = type("PolicyHTTPConnection", (http_cls,), {"policy": policy})

        class TLSPool(urllib3.HTTPSConnectionPool):
            ConnectionCls = type("PolicyHTTPSConnection", (https_cls,), {"policy": policy})

        self.poolmanager.pool_classes_by_scheme = {"http": Pool, "https": TLSPool}

    def send(self, request: Any, **kwargs: Any) -> Any:  # type: ignore[override]
        deadline = current_deadline()
        if deadline is not None:
            left = max(0.001, deadline.check())
            timeout = kwargs.get("timeout")
            if timeout is None or isinstance(timeout, (int, float)):
                kwargs["timeout"] = min(float(timeout), left) if timeout else left
        response = super().send(request, **kwargs)
        sanitize_rate_limit_headers(response.headers)
        if any(request.path_url.startswith(p) for p in _TOKEN_PATHS) and not kwargs.get("stream"):
            register_issued_credentials(response.content)
        return response


def guarded_session(
    policy: NetworkPolicy,
    *,
    deadline_s: float = 120.0,
    max_redirects: int = MAX_REDIRECTS,
    adapter: GuardedAdapter | None = None,
) -> Any:
    """A ``requests.Session`` whose every request obeys ``policy`` and a total ``deadline_s`` (see the module
    docstring); ``adapter`` (a :class:`GuardedAdapter` subclass) replaces the default one on ``http://`` and
    ``https://``.

    Errors raised by its requests, besides ``requests``' own: :class:`~echo_builder.network.policy.RefusedDestination`
    (nothing was sent to that address), :class:`~echo_builder.network.deadline.DeadlineExceeded`, and
    ``requests.TooManyRedirects`` past ``max_redirects``.
    """
    import requests

    class GuardedSession(requests.Session):
        def send(self, request: Any, **kwargs: Any) -> Any:  # type: ignore[override]
            if current_deadline() is not None:  # a redirect hop: the outer request's deadline goes on
                return super().send(request, **kwargs)
            with using_deadline(deadline_s) as deadline:
                try:
                    response = super().send(request, **kwargs)
                    if kwargs.get("stream"):
                        response.content  # noqa: B018 - read under the deadline, not after it
                    deadline.check()  # a body cut short by the deadline is not a whole answer
                    return response
                except DeadlineExceeded:
                    raise
                except Exception:
                    if deadline.expired:
                        raise deadline.error() from None
                    raise

    session = GuardedSession()
    session.last_status = None  # the status of the last answer (a client library's own error may hide it)
    session.hooks["response"].append(
        lambda response, **_: setattr(session, "last_status", response.status_code)
    )
    session.trust_env = False
    session.max_redirects = max_redirects
    mounted = adapter or GuardedAdapter(policy)
    session.mount("http://", mounted)
    session.mount("https://", mounted)
    return session
