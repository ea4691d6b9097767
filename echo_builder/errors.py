"""Exceptions raised by echo-bench.

Everything the package raises on purpose derives from :class:`EchoError`, so callers can catch one type. Messages
say what was expected, what was found and what to do next; secrets never appear in them (see
:func:`echo_builder.secrets.redact`).
"""

from __future__ import annotations

__all__ = [
    "BackendError",
    "BudgetExceededError",
    "ConfigError",
    "EchoError",
    "ImageError",
    "LogprobsUnavailableError",
    "MissingDependencyError",
    "PermanentBackendError",
    "RecordError",
    "RetryableBackendError",
    "StructuredOutputError",
]


class EchoError(Exception):
    """Root of every error echo-bench raises on purpose."""


class ConfigError(EchoError, ValueError):
    """A configuration value, spec string or option is invalid (unknown key, bad type, unknown backend)."""


class RecordError(EchoError, ValueError):
    """A record (post, tree, sample, verdict) is malformed or cannot be decoded."""


class ImageError(EchoError, ValueError):
    """An image cannot be read: corrupt, truncated, not an image, or too large (decompression-bomb guard)."""


class MissingDependencyError(EchoError, ImportError):
    """An optional dependency is not installed; the message carries the ``pip install`` line that fixes it."""

    def __init__(self, package: str, extra: str, purpose: str) -> None:
        self.package = package
        self.extra = extra
        super().__init__(
            f"{purpose} needs the optional package {package!r}, which is not installed. "
            f"Install it with: pip install 'echo-bench[{extra}]'"
        )


class BackendError(EchoError):
    """A model call failed.

    Attributes:
        backend_id: the backend that failed (``openai:gpt-4o``), never a key or URL with credentials.
        status_code: HTTP status when the failure came from a server, else ``None``.
    """

    def __init__(self, message: str, *, backend_id: str = "", status_code: int | None = None) -> None:
        super().__init__(message)
        self.backend_id = backend_id
        self.status_code = status_code


class RetryableBackendError(BackendError):
    """A transient failure (429, 5xx, timeout, dropped connection, unreadable reply) worth retrying.

    Attributes:
        retry_after_s: the server's requested wait in seconds (``Retry-After`` / ``retry-after-ms``), if any.
    """

    def __init__(
        self,
        message: str,
        *,
        backend_id: str = "",
        status_code: int | None = None,
        retry_after_s: float | None = None,
    ) -> None:
        super().__init__(message, backend_id=backend_id, status_code=status_code)
        self.retry_after_s = retry_after_s


class PermanentBackendError(BackendError):
    """A failure that retrying cannot fix (bad request, authentication, model not found, content filter)."""


class LogprobsUnavailableError(BackendError):
    """The backend or server did not return token log-probabilities although they were requested."""


class StructuredOutputError(EchoError, ValueError):
    """A model reply could not be parsed into the expected schema, even after repair and one re-ask.

    Attributes:
        raw_text: the model's last reply, verbatim, so nothing is lost.
        reason: why parsing or validation failed.
    """

    def __init__(self, reason: str, raw_text: str) -> None:
        self.reason = reason
        self.raw_text = raw_text
        preview = raw_text if len(raw_text) <= 200 else raw_text[:200] + "..."
        super().__init__(f"model reply does not match the expected schema: {reason}; reply was: {preview!r}")


class BudgetExceededError(EchoError):
    """The next model call would take the run past its ``--max-cost`` budget; no further call is sent.

    Every reply received before is stored in the call cache, so the same command with a higher ``--max-cost``
    (and ``--resume`` for a build) continues where this one stopped, repeating no paid call.

    Attributes:
        max_usd: the budget in US dollars.
        spent_usd: dollars spent by this run's calls so far (settled with the tokens each reply reported).
    """

    def __init__(self, message: str, *, max_usd: float, spent_usd: float) -> None:
        super().__init__(message)
        self.max_usd = max_usd
        self.spent_usd = spent_usd
