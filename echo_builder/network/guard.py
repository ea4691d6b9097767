"""The destination check shared by the guarded HTTP clients: resolve a host under the current deadline and judge
every address by a :class:`~echo_builder.network.policy.NetworkPolicy` before any connection is opened.
"""

from __future__ import annotations

import ipaddress

from echo_builder.network.deadline import current_deadline, resolve
from echo_builder.network.policy import Address, NetworkPolicy, RefusedDestination, host_name

__all__ = ["check_peer", "checked_addresses"]

LOOKUP_TIMEOUT_S = 30.0


def _shown(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def checked_addresses(policy: NetworkPolicy, host: str, port: int) -> list[Address]:
    """Every address ``host`` resolves to, each allowed by ``policy`` for ``host:port`` (an IP literal is itself).

    Raises:
        RefusedDestination: one address is refused (a host that resolves to a public and a metadata address is
            refused whole), the name is not a valid host name, or it resolves to nothing.
        TimeoutError, OSError: the lookup timed out or failed (the caller's library maps these as network errors).
    """
    bare = host.strip("[]")
    literal = _literal(bare)
    if literal is not None:
        if "%" in bare:
            raise RefusedDestination(
                f"request to {_shown(bare, port)} refused: an IPv6 zone id is never sent to"
            )
        texts, name = [str(literal)], str(literal)
    else:
        try:
            name = host_name(bare)
        except ValueError as exc:
            raise RefusedDestination(f"request refused: {exc}") from None
        deadline = current_deadline()
        timeout = min(LOOKUP_TIMEOUT_S, deadline.check()) if deadline is not None else LOOKUP_TIMEOUT_S
        texts = resolve(name, port, timeout)
    if not texts:
        raise RefusedDestination(f"request to {_shown(name, port)} refused: the host has no address")
    addresses: list[Address] = []
    for text in texts:
        ip = ipaddress.ip_address(text.split("%")[0])
        reason = policy.refusal(ip, name, port)
        if reason is not None:
            what = "is" if literal is not None else "resolves to"
            raise RefusedDestination(f"request to {_shown(name, port)} refused: the host {what} {reason}")
        addresses.append(ip)
    return addresses


def check_peer(policy: NetworkPolicy, peer: str, host: str, port: int) -> None:
    """Judge the address actually connected to (a name that resolved again to another address: DNS rebinding).

    Raises:
        RefusedDestination: the peer is refused.
    """
    ip = ipaddress.ip_address(peer.split("%")[0])
    bare = host.strip("[]")
    try:
        name = host_name(bare) if not _is_ip(bare) else str(ipaddress.ip_address(bare.split("%")[0]))
    except ValueError:
        name = bare
    reason = policy.refusal(ip, name, port)
    if reason is not None:
        raise RefusedDestination(f"request to {_shown(name, port)} refused: connected to {reason}")


def _literal(text: str) -> Address | None:
    """The address ``text`` names without a lookup: an IP literal, or a legacy IPv4 spelling the system resolver
    accepts as one (``2852039166``, ``0xa9fea9fe``, ``169.254.43518``, octal parts), judged as that address."""
    import socket

    try:
        return ipaddress.ip_address(text.split("%")[0])
    except ValueError:
        pass
    if text and all(c in "0123456789abcdefxABCDEFX." for c in text) and text[0].isdigit():
        try:
            return ipaddress.IPv4Address(socket.inet_aton(text))
        except OSError:
            return None
    return None


def _is_ip(text: str) -> bool:
    try:
        ipaddress.ip_address(text.split("%")[0])
    except ValueError:
        return False
    return True
