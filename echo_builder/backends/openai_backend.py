"""``openai:<model>``: any OpenAI-compatible chat-completions server through the official ``openai`` client.

Images are sent inline as base64 data URLs. The client's own retries are disabled (``max_retries=0``): retries,
backoff and the hard cap are :class:`~echo_builder.backends.caller.ModelCaller`'s job, so one policy applies to
every backend. The API key is read from the environment (or given explicitly), registered for redaction and never
logged, cached or put in an exception message; so are credentials inside the base URL (``https://user:KEY@host``,
``?api-key=KEY``). Every reply body is read through :mod:`echo_builder.backends.bounded_http`: one over
``max_reply_bytes`` (decoded) fails that call at once, without retries.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import email.utils
import os
import time
from collections.abc import Sequence
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, SecretStr, ValidationError

from echo_builder.backends import register_backend
from echo_builder.backends.base import (
    Backend,
    CandidateScores,
    GenerationParams,
    ImagePart,
    Message,
    Reply,
    TokenLogprob,
    Usage,
    invalid_options,
    normalise_candidates,
    run_sync,
)
from echo_builder.errors import (
    BackendError,
    ConfigError,
    LogprobsUnavailableError,
    MissingDependencyError,
    PermanentBackendError,
    RetryableBackendError,
)
from echo_builder.secrets import get_logger, protect_logging, redact, register_secret, register_url_secrets

__all__ = ["OpenAIBackend", "OpenAIConfig", "OpenAIConnection", "parse_retry_after", "translate_openai_error"]

log = get_logger(__name__)

BASE_URL_ENV = ("ECHO_OPENAI_BASE_URL", "OPENAI_BASE_URL")
API_KEY_ENV = ("ECHO_OPENAI_API_KEY", "OPENAI_API_KEY")
_RETRYABLE_STATUS = {408, 409, 425, 429}
#: Default cap on one chat reply body in bytes, decoded (a reply with 20 log-probabilities per token is ~1 MB).
DEFAULT_MAX_REPLY_BYTES = 16 * 2**20
#: Longest accepted attempt timeout in seconds (one day); longer values are a typo, and overflow the event loop.
MAX_TIMEOUT_S = 86_400.0


class OpenAIConfig(BaseModel):
    """Options of the ``openai:`` backend (unknown keys are an error).

    Attributes:
        base_url: server URL ending in ``/v1``; default from ``ECHO_OPENAI_BASE_URL`` or ``OPENAI_BASE_URL``,
            else OpenAI's.
        api_key: explicit key; default from ``ECHO_OPENAI_API_KEY`` or ``OPENAI_API_KEY``. Local servers
            (a base URL and no key) get the placeholder ``EMPTY``.
        timeout_s: HTTP timeout of one attempt in seconds, in (0, 86400].
        extra_body: extra JSON fields sent with every request (e.g. vLLM's ``top_k``); part of the call-cache key
            and recorded in ``run.json`` and the build report.
        max_reply_bytes: cap on one reply body in bytes, decoded, in [1024, 2**32] (default 16 MiB).

    Generation parameters (``temperature``, ``top_p``, ``max_tokens``, ``seed``) are options of every backend:
    see :data:`echo_builder.backends.GENERATION_OPTIONS`.
    """

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

    base_url: str | None = None
    api_key: SecretStr | None = None
    timeout_s: float = Field(default=120.0, gt=0, le=MAX_TIMEOUT_S)
    extra_body: dict[str, Any] | None = None
    max_reply_bytes: int = Field(default=DEFAULT_MAX_REPLY_BYTES, ge=1024, le=2**32)


def parse_retry_after(headers: Any) -> float | None:
    """Seconds to wait according to ``retry-after-ms`` (OpenAI's) or ``Retry-After`` (seconds or HTTP date).

    Returns ``None`` when neither header is present or readable; negative values become 0.
    """
    if headers is None:
        return None
    raw_ms = headers.get("retry-after-ms")
    if raw_ms is not None:
        try:
            return max(0.0, float(raw_ms) / 1000.0)
        except ValueError:
            pass
    raw = headers.get("retry-after")
    if raw is None:
        return None
    try:
        return max(0.0, float(raw))
    except ValueError:
        pass
    try:
        parsed = email.utils.parsedate_to_datetime(raw)
    except (TypeError, ValueError):
        return None  # neither seconds nor an HTTP date: fall back to our own backoff
    return max(0.0, parsed.timestamp() - time.time())


def _content_parts(message: Message) -> list[dict[str, Any]] | str:
    if all(p.type == "text" for p in message.content):
        return message.text
    parts: list[dict[str, Any]] = []
    for part in message.content:
        if isinstance(part, ImagePart):
            url = f"data:{part.mime_type};base64,{base64.b64encode(part.data).decode('ascii')}"
            parts.append({"type": "image_url", "image_url": {"url": url}})
        else:
            parts.append({"type": "text", "text": part.text})
    return parts


def check_server_url(url: str, who: str) -> None:
    """Refuse a server URL the HTTP client could not use, before any work (one clear line, not a traceback from
    the client's first call): http or https, a host, a port in 1-65535, no space or control character.

    Raises:
        ConfigError: naming the URL (its credentials redacted) and what is wrong with it.
    """
    from urllib.parse import urlsplit

    shown = redact(url)
    try:
        parts = urlsplit(url)
        port = parts.port  # raises ValueError for a port out of range or not a number
        host = parts.hostname
    except ValueError as exc:
        raise ConfigError(f"{who}: base URL {shown!r} cannot be used: {exc}") from None
    if parts.scheme not in ("http", "https"):
        raise ConfigError(f"{who}: base URL {shown!r} must start with http:// or https://")
    if not host:
        raise ConfigError(f"{who}: base URL {shown!r} names no host")
    if port == 0:
        raise ConfigError(f"{who}: base URL {shown!r} has port 0; give a port in 1-65535")
    if any(ord(c) < 33 or ord(c) == 127 for c in url):
        raise ConfigError(f"{who}: base URL {shown!r} holds a space or a control character")


class OpenAIConnection:
    """The server, key and per-event-loop async clients of one OpenAI-compatible endpoint (chat and images).

    Args:
        who: the backend or generator id, named in errors.
        base_url: server URL; default from ``ECHO_OPENAI_BASE_URL`` / ``OPENAI_BASE_URL``, else OpenAI's.
        api_key: explicit key; default from ``ECHO_OPENAI_API_KEY`` / ``OPENAI_API_KEY``. A local server (a base
            URL and no key) gets the placeholder ``EMPTY``; the key is registered for redaction.
        timeout_s: HTTP timeout of one attempt in seconds.
        max_reply_bytes: cap on one reply body (chat, images, listings, errors) in bytes, decoded.

    Raises:
        MissingDependencyError: the ``openai`` package is missing.
        ConfigError: no key and no base URL.
    """

    def __init__(
        self,
        who: str,
        *,
        base_url: str | None,
        api_key: SecretStr | None,
        timeout_s: float,
        max_reply_bytes: int = DEFAULT_MAX_REPLY_BYTES,
    ) -> None:
        try:
            import openai  # noqa: F401
        except ImportError:
            raise MissingDependencyError("openai", "all", f"the {who.split(':')[0]}: backend") from None
        self.base_url = base_url or next((os.environ[k] for k in BASE_URL_ENV if os.environ.get(k)), None)
        register_url_secrets(self.base_url)  # https://user:KEY@host/v1 or ?api-key=KEY
        if self.base_url is not None:
            check_server_url(self.base_url, who)
        protect_logging()  # httpx/httpcore/openai log the URL at INFO/DEBUG
        key = api_key.get_secret_value() if api_key else None
        key = key or next((os.environ[k] for k in API_KEY_ENV if os.environ.get(k)), None)
        if key is None:
            if self.base_url is None:
                raise ConfigError(
                    f"{who}: no API key. Set OPENAI_API_KEY (or ECHO_OPENAI_API_KEY), or point --base-url "
                    "(option base_url) or ECHO_OPENAI_BASE_URL at a local OpenAI-compatible server."
                )
            key = "EMPTY"  # local servers (vLLM, Ollama) accept any key
        register_secret(key)
        self._api_key = key
        self.timeout_s = timeout_s
        self.max_reply_bytes = max_reply_bytes
        self._clients: dict[int, Any] = {}

    @property
    def policy(self) -> Any:
        """The network policy of this connection's requests: public addresses, plus the host and port of its base
        URL (a local or private server is the user's choice); never link-local or cloud metadata, on any hop."""
        from echo_builder.network.policy import NetworkPolicy

        return NetworkPolicy.for_endpoints([_split_query(self.base_url)[0] if self.base_url else None])

    def client(self) -> Any:
        """The ``openai.AsyncOpenAI`` client of the running event loop (httpx clients are bound to one loop)."""
        loop = asyncio.get_running_loop()
        client = self._clients.get(id(loop))
        if client is None:
            import openai

            from echo_builder.backends.bounded_http import capped_client

            base_url, query = _split_query(self.base_url)
            client = openai.AsyncOpenAI(
                api_key=self._api_key,
                base_url=base_url,
                timeout=self.timeout_s,
                max_retries=0,
                http_client=capped_client(self.max_reply_bytes, self.timeout_s, self.policy),
                default_query=query or None,  # ?api-key=... goes on every request, after the route
            )
            self._clients[id(loop)] = client
        return client

    async def aclose(self) -> None:
        """Close the clients (best effort: a client whose loop is gone has nothing left to release)."""
        clients, self._clients = list(self._clients.values()), {}
        for client in clients:
            with contextlib.suppress(RuntimeError):
                await client.close()


def _server_explanation(exc: Exception) -> str:
    """`` - <why>`` from an error body the ``openai`` client does not quote, else ``""``.

    The client quotes only OpenAI's ``{"error": {"message": ...}}``. Other OpenAI-compatible servers explain
    themselves differently: FastAPI servers (``transformers serve``) with ``{"detail": "..."}`` or a list of
    validation errors, TGI and ``transformers serve``'s 503 with ``{"error": "..."}``, others with plain text.
    """
    if " - " in str(exc):
        return ""
    body = getattr(exc, "body", None)
    if isinstance(body, dict):
        body = next((body[k] for k in ("detail", "error", "message") if body.get(k)), body)
    if isinstance(body, list):  # FastAPI validation errors: [{"loc": [...], "msg": "..."}]
        body = "; ".join(str(e.get("msg", e)) if isinstance(e, dict) else str(e) for e in body)
    text = " ".join(str(body).split()) if body not in (None, "", {}) else ""
    return f" - {text[:300]}" if text else ""


def _split_query(url: str | None) -> tuple[str | None, dict[str, str]]:
    """``https://h/v1?api-key=K`` -> (``https://h/v1``, ``{"api-key": "K"}``): the client appends routes to the
    base URL, so a query must travel as its ``default_query``."""
    if not url or "?" not in url:
        return url, {}
    from urllib.parse import parse_qsl

    base, _, query = url.partition("?")
    return base, dict(parse_qsl(query.partition("#")[0], keep_blank_values=True))


def translate_openai_error(exc: Exception, who: str) -> Exception:
    """An ``openai`` client exception as :class:`RetryableBackendError` (timeouts, dropped connections, 408/409/
    425/429, 5xx with the server's ``Retry-After``, unreadable replies) or :class:`PermanentBackendError` (other
    4xx and client errors, a reply body over the size cap, a destination the network policy refuses); anything
    else is returned unchanged. Messages are redacted."""
    import openai

    from echo_builder.backends.bounded_http import ReplyTooLargeError
    from echo_builder.network.policy import RefusedDestination

    cause: BaseException | None = exc
    while cause is not None and not isinstance(cause, (ReplyTooLargeError, RefusedDestination)):
        cause = cause.__cause__ or cause.__context__
    if isinstance(cause, RefusedDestination):  # a redirect to metadata or another private host: never retried
        return PermanentBackendError(redact(f"{cause}; nothing was sent there"), backend_id=who)
    loop: BaseException | None = exc
    while loop is not None and type(loop).__name__ != "TooManyRedirects":  # httpx's (or httpx2's)
        loop = loop.__cause__ or loop.__context__
    if loop is not None:
        return PermanentBackendError(
            "the server answered with more than 5 redirects (a redirect loop); check --base-url",
            backend_id=who,
        )
    if cause is not None:  # the same server will send the same body again: not worth a retry
        return PermanentBackendError(f"reply too large: {cause}", backend_id=who)
    message = redact(f"{type(exc).__name__}: {exc}{_server_explanation(exc)}")
    if isinstance(exc, openai.APITimeoutError):
        return RetryableBackendError(f"timed out: {message}", backend_id=who)
    if isinstance(exc, openai.APIConnectionError):
        return RetryableBackendError(f"connection failed: {message}", backend_id=who)
    if isinstance(exc, openai.APIStatusError):
        status = exc.status_code
        if status in _RETRYABLE_STATUS or status >= 500:
            return RetryableBackendError(
                f"HTTP {status}: {message}",
                backend_id=who,
                status_code=status,
                retry_after_s=parse_retry_after(exc.response.headers),
            )
        return PermanentBackendError(f"HTTP {status}: {message}", backend_id=who, status_code=status)
    if isinstance(exc, (openai.APIResponseValidationError, ValueError, TypeError, KeyError)):
        # Garbage, truncated JSON or a body of the wrong shape: the next attempt may be fine.
        return RetryableBackendError(f"unreadable reply: {message}", backend_id=who)
    if isinstance(exc, openai.OpenAIError):
        return PermanentBackendError(message, backend_id=who)
    return exc


@register_backend(order=10)
class OpenAIBackend(Backend):
    """Chat completions on an OpenAI-compatible server. See :class:`OpenAIConfig` for options."""

    name = "openai"
    description = (
        "any OpenAI-compatible chat-completions server (OpenAI, vLLM, SGLang, TGI, Ollama, OpenRouter)"
    )

    def __init__(self, target: str, **options: Any) -> None:
        super().__init__(target)
        try:
            self.config = OpenAIConfig(**options)
        except ValidationError as exc:
            from echo_builder.backends import MODEL_BACKEND_OPTIONS

            raise invalid_options(
                self.backend_id, exc, [*OpenAIConfig.model_fields, "base_urls", *MODEL_BACKEND_OPTIONS]
            ) from None
        self.connection = OpenAIConnection(
            self.backend_id,
            base_url=self.config.base_url,
            api_key=self.config.api_key,
            timeout_s=self.config.timeout_s,
            max_reply_bytes=self.config.max_reply_bytes,
        )
        self.base_url = self.connection.base_url

    def cache_settings(self) -> dict[str, Any]:
        """``extra_body`` when set: it can change every reply (e.g. ``{"temperature": 1}``)."""
        return {"extra_body": dict(self.config.extra_body)} if self.config.extra_body else {}

    def _request(self, messages: Sequence[Message], params: GenerationParams) -> dict[str, Any]:
        body: dict[str, Any] = {
            "model": self.target,
            "messages": [{"role": m.role, "content": _content_parts(m)} for m in messages],
            "temperature": params.temperature,
            "max_tokens": params.max_tokens,
        }
        if params.top_p is not None:
            body["top_p"] = params.top_p
        if params.seed is not None:
            body["seed"] = params.seed
        if params.stop:
            body["stop"] = list(params.stop)
        if params.logprobs:
            body["logprobs"] = True
            if params.top_logprobs:
                body["top_logprobs"] = params.top_logprobs
        if self.config.extra_body:
            body["extra_body"] = dict(self.config.extra_body)
        return body

    def request_json(self, messages: Sequence[Message], params: GenerationParams) -> dict[str, Any]:
        """The JSON body the online path sends to ``/chat/completions`` for this call (``extra_body``'s fields
        merged in, as the client does): the ``body`` of a Batch API line (:mod:`echo_builder.backends.batch`)."""
        body = self._request(messages, params)
        extra = body.pop("extra_body", None) or {}
        return {**body, **extra}

    def reply_from_completion(
        self, completion: Any, params: GenerationParams, *, latency_s: float = 0.0
    ) -> Reply:
        """Parse a chat completion (the client's object, or its JSON as a dict, e.g. a Batch API answer's
        ``response.body``) exactly as the online path does. Raises ``ValueError`` for a completion without a
        usable choice."""
        if isinstance(completion, dict):
            from openai.types.chat import ChatCompletion

            completion = ChatCompletion.construct(**completion)
        return self._reply(completion, params, latency_s)

    async def agenerate(self, messages: Sequence[Message], params: GenerationParams) -> Reply:
        body = self._request(messages, params)
        start = time.perf_counter()
        try:
            completion = await self.connection.client().chat.completions.create(**body)
            return self._reply(completion, params, time.perf_counter() - start)
        except Exception as exc:
            translated = translate_openai_error(exc, self.backend_id)
            if translated is exc:
                raise
            if (
                isinstance(translated, PermanentBackendError)
                and (
                    translated.status_code == 404
                    or (translated.status_code == 400 and self.target in str(translated))
                )
            ):  # a model name the server does not serve (vLLM, OpenAI: 404; transformers serve: 400): list them
                translated = PermanentBackendError(
                    f"{translated.args[0]}{await self._served_models_hint()}",
                    backend_id=self.backend_id,
                    status_code=translated.status_code,
                )
            raise translated from None

    async def alist_models(self) -> list[str]:
        """Ids of the models the server lists at ``GET /models`` (``transformers serve`` lists the folder path or
        Hub id it was started with). Raises :class:`~echo_builder.errors.BackendError` when it cannot list."""
        try:
            page = await self.connection.client().models.list()
            return [m.id for m in page.data]
        except Exception as exc:
            translated = translate_openai_error(exc, self.backend_id)
            if translated is exc:
                raise
            raise translated from None

    def list_models(self) -> list[str]:
        """Synchronous :meth:`alist_models`."""
        return run_sync(self.alist_models())

    async def _served_models_hint(self) -> str:
        """`` (the server lists: ...)`` when the server's model list (asked once) lacks :attr:`target`."""
        models = getattr(self, "_served_models", None)
        if models is None:
            try:
                models = await asyncio.wait_for(self.alist_models(), timeout=min(10.0, self.config.timeout_s))
            except (BackendError, asyncio.TimeoutError):
                models = []
            self._served_models = models
        if not models or self.target in models or f"models/{self.target}" in models:
            return ""
        return f" (the server lists: {', '.join(models[:10])}; use openai:<one of them>)"

    def _reply(self, completion: Any, params: GenerationParams, latency: float) -> Reply:
        if isinstance(completion, (str, bytes)) or not getattr(completion, "choices", None):
            raise ValueError(f"reply has no choices: {str(completion)[:200]!r}")
        choice = completion.choices[0]
        text = choice.message.content if choice.message is not None else None
        if text is None and choice.finish_reason != "content_filter":
            refusal = getattr(choice.message, "refusal", None)
            if refusal is None:
                raise ValueError("reply choice has no message content")
            text = refusal
        logprobs: tuple[TokenLogprob, ...] | None = None
        status = "not_requested"
        if params.logprobs:
            content = getattr(choice.logprobs, "content", None) if choice.logprobs is not None else None
            if content:
                logprobs = tuple(
                    TokenLogprob(
                        token=t.token,
                        logprob=float(t.logprob),
                        top=tuple((a.token, float(a.logprob)) for a in (t.top_logprobs or ())),
                    )
                    for t in content
                )
                status = "ok"
            else:
                status = "unavailable"
                log.warning("%s: logprobs were requested but the server returned none", self.backend_id)
        usage = completion.usage
        snapshot = completion.model or self.target
        fingerprint = getattr(completion, "system_fingerprint", None)
        if fingerprint:
            snapshot = f"{snapshot}@{fingerprint}"
        return Reply(
            text=text or "",
            finish_reason=choice.finish_reason,
            usage=Usage(
                input_tokens=getattr(usage, "prompt_tokens", None) if usage else None,
                output_tokens=getattr(usage, "completion_tokens", None) if usage else None,
            ),
            logprobs=logprobs,
            logprobs_status=status,  # type: ignore[arg-type]
            backend_id=self.backend_id,
            model_snapshot=snapshot,
            latency_s=latency,
        )

    async def acandidate_probabilities(
        self, messages: Sequence[Message], candidates: Sequence[str], params: GenerationParams | None = None
    ) -> CandidateScores:
        """Normalised next-token probabilities of ``candidates`` from the server's top-20 alternatives.

        Token strings are compared after stripping whitespace, so ``" Good"`` counts for ``"Good"``.
        Raises :class:`LogprobsUnavailableError` when the server returns no log-probabilities or none of the
        candidates is among the alternatives.
        """
        base = params or GenerationParams()
        reply = await self.agenerate(
            messages, base.model_copy(update={"max_tokens": 1, "logprobs": True, "top_logprobs": 20})
        )
        return candidate_scores_from_reply(reply, candidates, self.backend_id)

    async def aclose(self) -> None:
        await self.connection.aclose()


def candidate_scores_from_reply(reply: Reply, candidates: Sequence[str], backend_id: str) -> CandidateScores:
    """:func:`candidate_logprobs_from_alternatives` of a one-token scoring reply (online or from a batch).

    Raises :class:`LogprobsUnavailableError` when the reply holds no log-probabilities or none of the candidates.
    """
    if reply.logprobs_status != "ok" or not reply.logprobs:
        raise LogprobsUnavailableError(
            f"{backend_id}: the server returned no token log-probabilities; probability scoring needs a "
            "server that supports `logprobs` (OpenAI, vLLM, SGLang do)",
            backend_id=backend_id,
        )
    return candidate_logprobs_from_alternatives(reply, candidates)


def candidate_logprobs_from_alternatives(reply: Reply, candidates: Sequence[str]) -> CandidateScores:
    """Sum the probabilities of first-token alternatives that spell each candidate, then normalise."""
    import math

    first = reply.logprobs[0] if reply.logprobs else None
    alternatives = dict(first.top) if first else {}
    if first is not None:
        alternatives.setdefault(first.token, first.logprob)
    wanted = {c: c.strip() for c in candidates}
    mass = dict.fromkeys(candidates, 0.0)
    for token, lp in alternatives.items():
        for cand, stripped in wanted.items():
            if token.strip() == stripped:
                mass[cand] += math.exp(lp)
    logprobs = {c: (math.log(m) if m > 0 else -math.inf) for c, m in mass.items()}
    return normalise_candidates(logprobs, reply.backend_id, reply.model_snapshot)
