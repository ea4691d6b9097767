"""The media stage's address policy: :mod:`echo_builder.network.policy`, kept importable under its old name."""

from echo_builder.network.policy import (
    LOOPBACK,
    NEVER_ALLOWED,
    Address,
    MediaPolicy,
    NetworkPolicy,
    embedded_ipv4,
    host_name,
)

__all__ = [
    "LOOPBACK",
    "NEVER_ALLOWED",
    "Address",
    "MediaPolicy",
    "NetworkPolicy",
    "embedded_ipv4",
    "host_name",
]
