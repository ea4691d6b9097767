"""HTTP for the media stage: one image URL fetched under :class:`~echo_builder.stages.media_policy.MediaPolicy`.

The network half of :func:`echo_builder.stages.media.fetch_media` (its docstring states the security rules): URL
parsing, DNS lookup with a deadline, connection to a checked address (the peer checked again), one GET with a
capped body, and the classification of every failure as permanent (never retried) or transient (retried by the
caller with backoff, honouring ``Retry-After``). One :class:`_Deadline` bounds everything done for one URL.
"""

from __future__ import annotations

import email.utils
import functools
import http.client
import ipaddress
import math
import socket
import time
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, urljoin, urlsplit

from echo_builder.network.deadline import Deadline, resolve
from echo_builder.network.policy import MAX_REDIRECTS, Address, MediaPolicy, host_name

USER_AGENT = "echo-bench-media/0.1"
_RETRY_STATUS = {408, 425, 429, 500, 502, 503, 504}


class _Permanent(Exception):
    """A failure retrying cannot fix (refused URL, 4xx, wrong type, too large, undecodable)."""


class _Transient(Exception):
    """A failure worth retrying (429, 5xx, timeout, dropped connection); ``retry_after_s`` from the server."""

    def __init__(self, reason: str, retry_after_s: float | None = None) -> None:
        super().__init__(reason)
        self.retry_after_s = retry_after_s


# ------------------------------------------------------------------------------------------------ URLs
@dataclass(frozen=True)
class _Target:
    """A URL checked and split for one request."""

    scheme: str
    host: str  # IDNA ASCII, lower case, no brackets
    port: int
    literal: Address | None  # the host when it is an IP address
    host_header: str
    path: str  # path and query, percent-encoded where needed


_PATH_SAFE = "!$&'()*+,/:;=?@[]~%"


def _host_name(name: str) -> str:
    """``name`` as IDNA ASCII in lower case (:func:`~echo_builder.stages.media_policy.host_name`), or
    ``_Permanent`` naming what is wrong with it."""
    try:
        return host_name(name)
    except ValueError as exc:
        raise _Permanent(str(exc)) from None


def _parse_url(url: str) -> _Target:
    """Check and split a media URL (from a post or a redirect); ``_Permanent`` names what is wrong with it."""
    if not isinstance(url, str):
        raise _Permanent(f"URL must be a string, got {type(url).__name__}")
    if any(ord(c) < 0x20 or ord(c) == 0x7F for c in url):
        raise _Permanent("URL contains a control character")
    try:
        url.encode("utf-8")
    except UnicodeError:
        raise _Permanent("URL is not valid Unicode (it holds a lone surrogate)") from None
    try:
        parts = urlsplit(url)
        explicit_port = parts.port
        hostname = parts.hostname
        has_credentials = bool(parts.username or parts.password)
    except ValueError as exc:
        raise _Permanent(f"invalid URL ({exc})") from None
    if parts.scheme not in ("http", "https"):
        raise _Permanent(f"scheme {parts.scheme or '(none)'!r} is refused (only http and https)")
    if not hostname:
        raise _Permanent("URL has no host")
    if has_credentials:
        raise _Permanent("URLs with credentials are refused")
    if explicit_port == 0:
        raise _Permanent("invalid URL (port 0)")
    literal: Address | None
    if "[" in parts.netloc:
        if "%" in hostname:
            raise _Permanent(f"IPv6 zone id in host [{hostname}] is refused")
        try:
            literal = ipaddress.IPv6Address(hostname)
        except ValueError:
            raise _Permanent(f"invalid IPv6 address [{hostname}] in URL") from None
        host, host_text = str(literal), f"[{literal}]"
    else:
        try:
            literal = ipaddress.IPv4Address(hostname)
            host = host_text = str(literal)
        except ValueError:
            literal = None
            host = host_text = _host_name(hostname)
    port = explicit_port or (443 if parts.scheme == "https" else 80)
    path = quote(parts.path or "/", safe=_PATH_SAFE) + (
        f"?{quote(parts.query, safe=_PATH_SAFE)}" if parts.query else ""
    )
    header = host_text + (f":{explicit_port}" if explicit_port is not None else "")
    return _Target(parts.scheme, host, port, literal, header, path)


# ------------------------------------------------------------------------------------------------ deadline
class _Deadline(Deadline):
    """The total time one URL may take (every attempt, redirect, connect, header and body read, and retry wait):
    :class:`~echo_builder.network.deadline.Deadline`, its error worded for the media record."""

    def error(self) -> _Permanent:
        return _Permanent(
            f"download abandoned: over the {self.seconds:g} s total deadline per URL "
            "(connect, redirects, headers, body and retries)"
        )


def _lookup(host: str, port: int, timeout_s: float) -> list[str]:
    """:func:`~echo_builder.network.deadline.resolve`, its failures classified for the retry loop."""
    try:
        return resolve(host, port, timeout_s)
    except TimeoutError as exc:
        raise _Transient(str(exc)) from None
    except (OSError, UnicodeError) as exc:
        raise _Transient(f"cannot resolve host {host!r} ({exc})") from None
    except Exception as exc:
        raise _Permanent(f"cannot resolve host {host!r} ({type(exc).__name__}: {exc})") from None


def _addresses(target: _Target, opts: dict[str, Any], deadline: _Deadline) -> list[Address]:
    """The addresses ``target`` resolves to, every one checked against the policy (a refusal is final)."""
    if target.literal is not None:
        texts = [str(target.literal)]
    else:
        texts = _lookup(target.host, target.port, min(opts["timeout_s"], deadline.check()))
    if not texts:
        raise _Permanent(f"host {target.host!r} has no address")
    addresses = []
    for text in texts:
        try:
            ip = ipaddress.ip_address(text.split("%")[0])
        except ValueError:
            raise _Permanent(f"host {target.host!r} resolves to {text!r}, not an IP address") from None
        reason = opts["policy"].refusal(ip, target.host, target.port)
        if reason is not None:
            verb = "is" if target.literal is not None else "resolves to"
            raise _Permanent(f"host {target.host!r} {verb} {reason}")
        addresses.append(ip)
    return addresses


@functools.cache
def _connection_classes() -> tuple[type, type]:
    """urllib3's HTTP and HTTPS connections, made to check the address connected to and to obey a deadline."""
    import urllib3.connection

    class Guarded:
        guard: tuple[_Deadline, MediaPolicy, _Target]

        def _new_conn(self) -> socket.socket:
            sock = super()._new_conn()  # type: ignore[misc]
            deadline, policy, target = self.guard
            try:
                deadline.watch(sock)  # before the TLS handshake, which a server can drip too
                peer = ipaddress.ip_address(sock.getpeername()[0].split("%")[0])
                reason = policy.refusal(peer, target.host, target.port)
                if reason is not None:
                    raise _Permanent(f"connected to {reason}")
            except BaseException:
                sock.close()
                raise
            return sock

    class HTTP(Guarded, urllib3.connection.HTTPConnection):
        pass

    class HTTPS(Guarded, urllib3.connection.HTTPSConnection):
        pass

    return HTTP, HTTPS


def _connect(target: _Target, opts: dict[str, Any], deadline: _Deadline) -> Any:
    """An open connection to the first reachable checked address of ``target``."""
    import urllib3

    http_cls, https_cls = _connection_classes()
    failure: Exception | None = None
    for address in _addresses(target, opts, deadline):
        timeout = min(opts["timeout_s"], deadline.check())
        if target.scheme == "https":
            conn = https_cls(
                str(address),
                target.port,
                timeout=timeout,
                cert_reqs="CERT_REQUIRED",
                server_hostname=target.host,
                assert_hostname=target.host,
            )
        else:
            conn = http_cls(str(address), target.port, timeout=timeout)
        conn.guard = (deadline, opts["policy"], target)
        try:
            conn.connect()
            return conn
        except (urllib3.exceptions.NewConnectionError, urllib3.exceptions.ConnectTimeoutError) as exc:
            conn.close()
            failure = exc
        except BaseException:  # TLS, a refused peer: no other address is tried
            conn.close()
            raise
    if isinstance(failure, urllib3.exceptions.ConnectTimeoutError):
        raise _Transient(f"connecting to {target.host}:{target.port} timed out")
    raise _Transient(f"cannot connect to {target.host}:{target.port}")


def _retry_after(value: str | None) -> float | None:
    if not value:
        return None
    try:
        seconds = float(value)
    except ValueError:
        try:  # an HTTP date
            seconds = email.utils.parsedate_to_datetime(value).timestamp() - time.time()
        except (TypeError, ValueError, IndexError, OverflowError):
            return None
    return max(0.0, seconds) if math.isfinite(seconds) else None


def _get_once(url: str, opts: dict[str, Any], deadline: _Deadline) -> tuple[bytes, str]:
    """One GET of ``url`` with manual, re-checked redirects; returns ``(body, content type)``."""
    for _hop in range(MAX_REDIRECTS + 1):
        target = _parse_url(url)
        deadline.check()
        conn = None
        try:
            conn = _connect(target, opts, deadline)
            conn.request(
                "GET",
                target.path,
                headers={
                    "Host": target.host_header,
                    "User-Agent": USER_AGENT,
                    "Accept": "image/*",
                    "Accept-Encoding": "identity",
                },
                preload_content=False,
            )
            resp = conn.getresponse()
            status = resp.status
            if status in (301, 302, 303, 307, 308):
                location = resp.headers.get("Location")
                if not location:
                    raise _Permanent(f"HTTP {status} redirect without a Location")
                try:
                    url = urljoin(url, location)
                except ValueError as exc:
                    raise _Permanent(
                        f"HTTP {status} redirect to an invalid URL {location!r} ({exc})"
                    ) from None
                continue
            if status in _RETRY_STATUS:
                raise _Transient(f"HTTP {status}", _retry_after(resp.headers.get("Retry-After")))
            if status != 200:
                raise _Permanent(f"HTTP {status}")
            ctype = (resp.headers.get("Content-Type") or "").split(";")[0].strip().lower()
            if not ctype.startswith("image/"):
                raise _Permanent(f"content type {ctype or '(none)'!r} is not an image")
            limit = opts["max_bytes"]
            declared = (resp.headers.get("Content-Length") or "").strip()
            if declared.isascii() and declared.isdigit() and int(declared) > limit:
                raise _Permanent(f"Content-Length {int(declared):,} bytes is over the {limit:,} byte limit")
            body = bytearray()
            for chunk in resp.stream(65536):
                body += chunk
                if len(body) > limit:
                    raise _Permanent(f"body is over the {limit:,} byte limit")
                deadline.check()
            deadline.check()  # a socket shut at the deadline ends an unsized body early: not a whole image
            return bytes(body), ctype
        except (_Permanent, _Transient):
            if deadline.expired:
                raise deadline.error() from None
            raise
        except Exception as exc:
            if deadline.expired:
                raise deadline.error() from None
            raise _failure(exc, target, opts) from None
        finally:
            if conn is not None:
                conn.close()
    raise _Permanent(f"more than {MAX_REDIRECTS} redirects")


def _failure(exc: Exception, target: _Target, opts: dict[str, Any]) -> _Permanent | _Transient:
    """What a network exception of one request means: retry it or not, and the reason recorded."""
    import ssl

    import urllib3

    if isinstance(exc, (urllib3.exceptions.SSLError, ssl.SSLError)):
        if isinstance(exc, ssl.SSLEOFError):
            return _Transient("network error (TLS connection closed)")
        return _Permanent(f"TLS error ({exc})")
    if isinstance(exc, (TimeoutError, urllib3.exceptions.TimeoutError)):
        return _Transient(f"timed out (timeout {opts['timeout_s']:g} s)")
    if isinstance(exc, (OSError, http.client.HTTPException, urllib3.exceptions.HTTPError)):
        return _Transient(f"network error ({type(exc).__name__})")
    if isinstance(exc, ValueError):  # e.g. a header value http.client will not send
        return _Permanent(f"cannot request {target.host} ({exc})")
    return _Permanent(f"unexpected error ({type(exc).__name__}: {exc})")  # one bad URL never stops the run
