"""One network policy for every outgoing request echo-bench makes.

- :mod:`~echo_builder.network.policy`: which addresses may be connected to (:class:`NetworkPolicy`: public ones,
  the non-public ones the user names, never link-local or cloud metadata).
- :mod:`~echo_builder.network.deadline`: a total deadline per request that a slow drip cannot stretch.
- :mod:`~echo_builder.network.guarded_requests`: a ``requests`` session for tweepy (X) and prawcore (Reddit).
- :mod:`~echo_builder.network.guarded_httpx`: an ``httpx`` transport for atproto (Bluesky).
- :mod:`~echo_builder.network.headers`: rate-limit headers made sane, issued credentials registered for redaction.

The media stage (:mod:`echo_builder.stages.media_http`) applies the same policy and deadline with its own
connections. See RELIABILITY.md ("Collection and expansion").
"""

from echo_builder.network.deadline import Deadline, DeadlineExceeded
from echo_builder.network.policy import NEVER_ALLOWED, NetworkPolicy, RefusedDestination

__all__ = ["NEVER_ALLOWED", "Deadline", "DeadlineExceeded", "NetworkPolicy", "RefusedDestination"]
