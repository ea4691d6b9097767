"""Which addresses echo-bench may connect to, for every outgoing request: :class:`NetworkPolicy` (the media
stage's ``--media-allow``, a platform client's ``--base-url``), the addresses never allowed (:data:`NEVER_ALLOWED`:
link-local and cloud metadata), and the IPv4 address an IPv6 one embeds (:func:`embedded_ipv4`: mapped, compatible,
translated, 6to4, Teredo, NAT64), which is judged in its place.

Used by :mod:`echo_builder.stages.media` and by the guarded HTTP clients of :mod:`echo_builder.network` (tweepy,
prawcore, atproto) for every address a host resolves to, every redirect hop and the peer actually connected to.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterable
from dataclasses import dataclass

from echo_builder.errors import ConfigError

__all__ = [
    "LOOPBACK",
    "MAX_REDIRECTS",
    "NEVER_ALLOWED",
    "Address",
    "MediaPolicy",
    "NetworkPolicy",
    "RefusedDestination",
    "embedded_ipv4",
    "host_name",
]

#: Redirects one request may follow (media downloads and every platform client); each hop is checked again.
MAX_REDIRECTS = 5
_LABEL = re.compile(r"[a-z0-9_-]{1,63}")  # one DNS label of a host name (IDNA ASCII, lower case)


def host_name(name: str) -> str:
    """``name`` as IDNA ASCII in lower case (a trailing dot dropped).

    Raises:
        ValueError: a space or control character, a name IDNA cannot encode, an empty or over-long name, or a
            label that is not 1-63 letters, digits, ``-`` or ``_``.
    """
    if any(ord(c) <= 0x20 or ord(c) == 0x7F for c in name):
        raise ValueError(f"host {name!r} contains a space or control character")
    stripped = name[:-1] if name.endswith(".") else name
    try:
        ascii_name = stripped.encode("idna").decode("ascii").lower()
    except UnicodeError as exc:
        raise ValueError(f"host {name!r} is not a valid host name ({exc})") from None
    labels = ascii_name.split(".")
    if not ascii_name or len(ascii_name) > 253 or not all(_LABEL.fullmatch(label) for label in labels):
        raise ValueError(f"host {name!r} is not a valid host name")
    return ascii_name


# never connected to, whatever --media-allow says: link-local (where clouds serve instance metadata and
# credentials), the cloud metadata and host-platform addresses outside it, "this host", multicast and broadcast
NEVER_ALLOWED = tuple(
    ipaddress.ip_network(n)
    for n in (
        "169.254.0.0/16",  # IPv4 link-local; 169.254.169.254 is AWS, GCP, Azure, Oracle and DigitalOcean metadata
        "fe80::/10",  # IPv6 link-local
        "fd00:ec2::254/128",  # AWS instance metadata over IPv6
        "100.100.100.200/32",  # Alibaba Cloud metadata
        "168.63.129.16/32",  # Azure host platform (WireServer)
        "0.0.0.0/8",  # "this host" (reaches loopback on Linux)
        "::/128",
        "224.0.0.0/4",  # multicast
        "ff00::/8",
        "255.255.255.255/32",  # broadcast
    )
)
LOOPBACK = ("127.0.0.0/8", "::1/128")
_NAT64 = ipaddress.ip_network("64:ff9b::/96")  # RFC 6052 well-known prefix
_NAT64_LOCAL = ipaddress.ip_network("64:ff9b:1::/48")  # RFC 8215 local-use prefix
_IPV4_COMPATIBLE = ipaddress.ip_network("::/96")  # deprecated ::a.b.c.d
_IPV4_TRANSLATED = ipaddress.ip_network("::ffff:0:0:0/96")  # RFC 2765 ::ffff:0:a.b.c.d

Address = ipaddress.IPv4Address | ipaddress.IPv6Address


def embedded_ipv4(ip: Address) -> tuple[ipaddress.IPv4Address, ...]:
    """The IPv4 addresses an IPv6 address carries, which is where a packet to it really goes.

    IPv4-mapped (``::ffff:a.b.c.d``), IPv4-translated (``::ffff:0:a.b.c.d``), IPv4-compatible (``::a.b.c.d``),
    6to4 (``2002:AABB:CCDD::/48``), Teredo (``2001::/32``: server and de-obfuscated client) and NAT64
    (``64:ff9b::/96`` and ``64:ff9b:1::/48``, RFC 6052 and 8215). Empty for plain IPv4 or IPv6 addresses.
    """
    if not isinstance(ip, ipaddress.IPv6Address):
        return ()
    found: list[ipaddress.IPv4Address] = []
    n = int(ip)
    if ip.ipv4_mapped is not None:
        found.append(ip.ipv4_mapped)
    if ip in _IPV4_TRANSLATED or ip in _NAT64 or (ip in _IPV4_COMPATIBLE and n > 1):
        found.append(ipaddress.IPv4Address(n & 0xFFFFFFFF))
    if ip in _NAT64_LOCAL:  # /48 prefix: IPv4 in bits 48-63 and 72-87 (bits 64-71 are the zero "u" octet)
        found.append(ipaddress.IPv4Address(((n >> 64) & 0xFFFF) << 16 | ((n >> 40) & 0xFFFF)))
    if ip.sixtofour is not None:
        found.append(ip.sixtofour)
    if ip.teredo is not None:
        found.extend(ip.teredo)
    return tuple(dict.fromkeys(found))


def _is_public(ip: Address) -> bool:
    return ip.is_global and not (ip.is_multicast or ip.is_reserved)


@dataclass(frozen=True)
class _Rule:
    network: ipaddress.IPv4Network | ipaddress.IPv6Network | None  # an address or CIDR entry
    host: str | None  # a host-name entry (IDNA ASCII, lower case)
    port: int | None


class RefusedDestination(Exception):
    """A request was not sent: its destination (first hop or a redirect) is refused by the :class:`NetworkPolicy`.

    Deliberately not an ``OSError``: HTTP libraries retry and re-wrap those, and a refusal is final.
    """


@dataclass(frozen=True)
class NetworkPolicy:
    """Which addresses echo-bench may connect to: public ones, plus the non-public ones an allow-list names.

    Build one with :meth:`from_entries`. Every address a host resolves to, on the first request and on every
    redirect hop, is checked (see :meth:`refusal`); the connection then goes to a checked address, and the address
    actually connected to is checked again, so DNS rebinding cannot slip a private address in. Addresses in
    :data:`NEVER_ALLOWED` (link-local, cloud metadata, this-host, multicast, broadcast) are refused even when an
    entry covers them. An IPv6 address that embeds IPv4 addresses (:func:`embedded_ipv4`) is judged as those.
    """

    rules: tuple[_Rule, ...] = ()
    #: The option that set ``rules``, named in refusals: ``--media-allow`` (media) or ``--base-url`` (API clients).
    option: str = "--media-allow"

    @classmethod
    def for_endpoints(cls, urls: Iterable[str | None]) -> NetworkPolicy:
        """Public addresses, plus the host and port of each URL the user gave (``--base-url``: a proxy, a local
        server), whatever address it has (loopback, a private range), except :data:`NEVER_ALLOWED`.

        A redirect to another non-public host or port, or to the cloud-metadata address, is refused. Raises
        :class:`~echo_builder.errors.ConfigError` for a URL without a host, or one in :data:`NEVER_ALLOWED`.
        """
        from urllib.parse import urlsplit

        entries: list[str] = []
        for url in urls:
            if not url:
                continue
            try:
                parts = urlsplit(url)
                host, port = parts.hostname, parts.port or (443 if parts.scheme == "https" else 80)
            except ValueError as exc:
                raise ConfigError(f"--base-url {url!r} is not a URL ({exc})") from None
            if parts.scheme not in ("http", "https") or not host:
                raise ConfigError(f"--base-url {url!r} must be an http:// or https:// URL with a host")
            entry = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
            try:
                entries.append(_parse_rule(entry))
            except ConfigError:
                raise ConfigError(
                    f"--base-url {url!r} names a link-local, cloud-metadata, this-host or multicast address, "
                    "which echo-bench never connects to"
                ) from None
        return cls(tuple(entries), option="--base-url")

    @classmethod
    def from_entries(cls, entries: Iterable[str]) -> NetworkPolicy:
        """Parse ``--media-allow`` entries: ``HOST[:PORT]`` (a name, an IPv4 address or ``[IPv6]``) or a CIDR.

        ``127.0.0.1:8000`` allows that address and port; ``10.0.0.0/8`` the network on any port; ``::1``
        and ``[::1]:8000`` an IPv6 address; ``mirror.lan:8080`` whatever non-public address that name resolves
        to, for URLs naming that host (and port). Raises :class:`~echo_builder.errors.ConfigError` for an entry
        that parses as none of these, or that lies wholly in :data:`NEVER_ALLOWED`.
        """
        return cls(tuple(_parse_rule(entry) for entry in entries))

    def refusal(self, ip: Address, host: str, port: int) -> str | None:
        """``None`` when connecting to ``ip`` for a URL naming ``host`` and ``port`` is allowed, else why not."""
        judged = embedded_ipv4(ip) or (ip,)
        shown = f"{ip} (which embeds {', '.join(map(str, judged))})" if judged != (ip,) else str(ip)
        for candidate in (ip, *judged):
            if any(candidate.version == net.version and candidate in net for net in NEVER_ALLOWED):
                return (
                    f"non-public address {shown}: link-local, cloud metadata, this-host, multicast or "
                    f"broadcast, never fetched (not even with {self.option})"
                )
        for candidate in judged:
            if not (_is_public(candidate) or any(_matches(r, candidate, host, port) for r in self.rules)):
                if self.option == "--base-url":
                    return f"non-public address {shown} (only public addresses and the --base-url host and port are used)"
                return f"non-public address {shown} (allow a local mirror with --media-allow HOST[:PORT] or CIDR)"
        return None


MediaPolicy = NetworkPolicy  # the media stage's name for it (``--media-allow``)


def _matches(rule: _Rule, ip: Address, host: str, port: int) -> bool:
    if rule.port is not None and rule.port != port:
        return False
    if rule.network is not None:
        return ip.version == rule.network.version and ip in rule.network
    return rule.host == host


def _parse_rule(entry: str) -> _Rule:
    def bad(why: str) -> ConfigError:
        return ConfigError(f"--media-allow {entry!r}: {why} (expected HOST[:PORT], [IPv6]:PORT or a CIDR)")

    text = str(entry).strip()
    port: int | None = None
    try:
        if "/" in text:  # a CIDR network
            network = ipaddress.ip_network(text, strict=False)
            host = None
        else:
            if text.startswith("["):  # [IPv6] or [IPv6]:port
                inside, bracket, rest = text[1:].partition("]")
                if not bracket:
                    raise bad("no closing bracket")
                if rest and not rest.startswith(":"):
                    raise bad("text after the closing bracket")
                address_text, port_text = inside, rest[1:] if rest else None
            elif text.count(":") > 1:  # a bare IPv6 address, no port
                address_text, port_text = text, None
            else:
                address_text, _, port_text = text.partition(":")
                port_text = port_text if ":" in text else None
            if port_text is not None:
                if not port_text.isdigit() or not 1 <= int(port_text) <= 65535:
                    raise bad(f"port {port_text!r} is not 1-65535")
                port = int(port_text)
            try:
                network, host = ipaddress.ip_network(address_text), None
            except ValueError:
                network, host = None, host_name(address_text)
    except ValueError as exc:
        if isinstance(exc, ConfigError):
            raise
        raise bad(str(exc)) from None
    if network is not None:
        if any(network.version == n.version and network.subnet_of(n) for n in NEVER_ALLOWED):  # type: ignore[arg-type]
            raise bad(f"{network} is link-local, cloud-metadata or special; it is never allowed")
        if network.version == 6 and network.num_addresses == 1:
            for v4 in embedded_ipv4(network.network_address):
                if any(v4 in n for n in NEVER_ALLOWED if n.version == 4):
                    raise bad(f"{network} embeds {v4}, which is never allowed")
    return _Rule(network, host, port)
