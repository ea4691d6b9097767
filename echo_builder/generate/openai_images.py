"""``openai-images:<model>``: OpenAI-compatible image generation and edit endpoints (e.g. ``gpt-image-1``).

A sample without input images calls ``POST /v1/images/generations``; a sample with input images calls
``POST /v1/images/edits`` with the images as PNG files (one file, or a list when there are several, as
gpt-image-1 accepts). One image per sample (``n=1``); the reply's ``b64_json`` is decoded and checked to be an
image.

Reliability follows the chat backends' rules (:class:`~echo_builder.backends.caller.RetryPolicy`, tenacity):
429, 408/409/425, 5xx, timeouts, dropped connections and unreadable replies are retried with exponential backoff
and full jitter, waiting at least what ``Retry-After`` / ``retry-after-ms`` asks, up to ``max_attempts`` and
``max_total_s``; the client's own retries are off. A content-policy refusal (HTTP 400 with
``content_policy_violation`` / ``moderation_blocked``, or a message about the safety system) is recorded as
``refused`` and never retried; other 4xx are ``error``. Nothing is re-sent for a sample already generated: the
outputs folder and its manifest are this backend's cache (see :mod:`echo_builder.generate.run`).

The base URL comes from ``base_url`` or ``ECHO_OPENAI_BASE_URL`` / ``OPENAI_BASE_URL``; the key from ``api_key``
or ``ECHO_OPENAI_API_KEY`` / ``OPENAI_API_KEY``, registered for redaction and never written to the manifest.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import io
import random
import time
from collections.abc import Sequence
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, SecretStr, ValidationError

from echo_builder.backends.base import invalid_options, run_sync
from echo_builder.backends.caller import RetryPolicy
from echo_builder.backends.openai_backend import OpenAIConnection, translate_openai_error
from echo_builder.errors import (
    BackendError,
    ImageError,
    PermanentBackendError,
    RetryableBackendError,
)
from echo_builder.generate import register_generator
from echo_builder.generate.base import GenerationRequest, GenerationResult, Generator
from echo_builder.secrets import get_logger, redact

__all__ = ["OpenAIImagesConfig", "OpenAIImagesGenerator", "RefusedError"]

log = get_logger(__name__)
_REFUSAL_CODES = {"content_policy_violation", "moderation_blocked", "content_filter"}
_REFUSAL_WORDS = ("safety system", "content policy", "content_policy", "moderation")


class RefusedError(PermanentBackendError):
    """The service declined to make the image (content policy, moderation); not retried."""


class OpenAIImagesConfig(BaseModel):
    """Options of the ``openai-images:`` generator (unknown keys are an error).

    Attributes:
        base_url: server URL ending in ``/v1`` (default: ``ECHO_OPENAI_BASE_URL``, ``OPENAI_BASE_URL``, OpenAI).
        api_key: explicit key (default from the environment; a local server with no key gets ``EMPTY``).
        size, quality, background, output_format, moderation: sent as given (``1024x1024``, ``high``, ...);
            ``None`` leaves the server's default.
        input_fidelity: edits only (gpt-image-1: ``high`` keeps faces and details closer to the input).
        response_format: ``b64_json`` for models that default to URLs (dall-e-*); ``None`` sends nothing.
        concurrency: requests in flight at once (1-64).
        timeout_s: seconds one attempt may take, in (0, 86400].
        max_attempts, initial_backoff_s, max_backoff_s, max_total_s: the retry policy (see ``RetryPolicy``), in
            seconds, finite.
        extra_body: extra JSON fields for every request.
        max_reply_bytes: cap on one reply body in bytes, decoded, in [1024, 2**32] (default 256 MiB: a 4096 px
            PNG in base64 is ~60 MB); a larger reply fails that sample at once, without retries.
    """

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

    base_url: str | None = None
    api_key: SecretStr | None = None
    size: str | None = None
    quality: str | None = None
    background: str | None = None
    output_format: str | None = None
    moderation: str | None = None
    input_fidelity: str | None = None
    response_format: Literal["b64_json", "url"] | None = None
    concurrency: int = Field(default=4, ge=1, le=64)
    timeout_s: float = Field(default=300.0, gt=0, le=86_400.0)
    max_attempts: int = Field(default=6, ge=1, le=100)
    initial_backoff_s: float = Field(default=1.0, ge=0.0, le=86_400.0)
    max_backoff_s: float = Field(default=60.0, ge=0.0, le=86_400.0)
    max_total_s: float = Field(default=900.0, gt=0.0, le=7 * 86_400.0)
    extra_body: dict[str, Any] | None = None
    max_reply_bytes: int = Field(default=256 * 2**20, ge=1024, le=2**32)


def _png(image: Any) -> bytes:
    buf = io.BytesIO()
    image.save(buf, format="PNG")
    return buf.getvalue()


@register_generator(order=20)
class OpenAIImagesGenerator(Generator):
    """Images from an OpenAI-compatible images API. See :class:`OpenAIImagesConfig` for options."""

    name = "openai-images"
    description = "OpenAI-compatible image generation and edit endpoints (e.g. gpt-image-1)"
    runtime_options = frozenset(
        {
            "base_url",
            "api_key",
            "concurrency",
            "timeout_s",
            "max_attempts",
            "initial_backoff_s",
            "max_backoff_s",
            "max_total_s",
            "max_reply_bytes",
        }
    )

    def __init__(self, target: str, **options: Any) -> None:
        super().__init__(target)
        try:
            self.config = OpenAIImagesConfig(**options)
        except ValidationError as exc:
            raise invalid_options(self.spec, exc, list(OpenAIImagesConfig.model_fields)) from None
        self.connection = OpenAIConnection(
            self.spec,
            base_url=self.config.base_url,
            api_key=self.config.api_key,
            timeout_s=self.config.timeout_s,
            max_reply_bytes=self.config.max_reply_bytes,
        )
        self.base_url = self.connection.base_url
        self.retry = RetryPolicy(
            max_attempts=self.config.max_attempts,
            initial_backoff_s=self.config.initial_backoff_s,
            max_backoff_s=self.config.max_backoff_s,
            max_total_s=self.config.max_total_s,
        )
        self._rng = random.Random(0)

    @property
    def batch_size(self) -> int:
        return self.config.concurrency

    def parameters(self) -> dict[str, Any]:
        return self.config.model_dump(mode="json", exclude={"api_key", "base_url"})

    def info(self) -> dict[str, Any]:
        return {"model": self.target}

    # -- one request -----------------------------------------------------------------------------------------
    def _translate(self, exc: Exception) -> Exception:
        import openai

        if isinstance(exc, openai.APIStatusError):
            code = getattr(exc, "code", None)
            if exc.status_code == 400 and (
                code in _REFUSAL_CODES or any(w in str(exc).lower() for w in _REFUSAL_WORDS)
            ):
                message = redact(f"{type(exc).__name__}: {exc}")
                return RefusedError(
                    f"HTTP {exc.status_code}: {message}", backend_id=self.spec, status_code=exc.status_code
                )
        return translate_openai_error(exc, self.spec)

    def _body(self, request: GenerationRequest) -> dict[str, Any]:
        c = self.config
        body: dict[str, Any] = {"model": self.target, "prompt": request.prompt, "n": 1}
        for key in ("size", "quality", "background", "output_format", "moderation", "response_format"):
            if getattr(c, key) is not None:
                body[key] = getattr(c, key)
        if request.input_images:
            files = [
                (f"input_{i}.png", _png(img), "image/png") for i, img in enumerate(request.input_images, 1)
            ]
            body["image"] = files[0] if len(files) == 1 else files
            if c.input_fidelity is not None:
                body["input_fidelity"] = c.input_fidelity
        if c.extra_body:
            body["extra_body"] = dict(c.extra_body)
        return body

    async def _attempt(self, request: GenerationRequest) -> tuple[bytes, dict[str, Any]]:
        from echo_builder.imaging import load_rgb

        body = self._body(request)
        images = self.connection.client().images
        try:
            call = images.edit(**body) if request.input_images else images.generate(**body)
            reply = await asyncio.wait_for(call, timeout=self.config.timeout_s)
        except asyncio.TimeoutError:
            raise RetryableBackendError(
                f"no reply within {self.config.timeout_s:g} s", backend_id=self.spec
            ) from None
        except Exception as exc:
            translated = self._translate(exc)
            if translated is exc:
                raise
            raise translated from None
        data = getattr(reply, "data", None)
        if not data:
            raise RetryableBackendError(
                f"unreadable reply: no image in {str(reply)[:200]!r}", backend_id=self.spec
            )
        item = data[0]
        if not getattr(item, "b64_json", None):
            if getattr(item, "url", None):
                raise PermanentBackendError(
                    "the server answered with an image URL; ask for base64 with -o response_format=b64_json",
                    backend_id=self.spec,
                )
            raise RetryableBackendError("unreadable reply: the image has no b64_json", backend_id=self.spec)
        try:
            image = base64.b64decode(item.b64_json, validate=True)
            load_rgb(image, name="the returned image")
        except (binascii.Error, ValueError, ImageError) as exc:
            raise RetryableBackendError(f"unreadable reply: {exc}", backend_id=self.spec) from None
        details: dict[str, Any] = {}
        if getattr(item, "revised_prompt", None):
            details["revised_prompt"] = item.revised_prompt
        return image, details

    async def _one(self, request: GenerationRequest, semaphore: asyncio.Semaphore) -> GenerationResult:
        from tenacity import (
            AsyncRetrying,
            RetryCallState,
            retry_if_exception_type,
            stop_after_attempt,
            stop_after_delay,
        )

        def wait(state: RetryCallState) -> float:
            exc = state.outcome.exception() if state.outcome else None
            retry_after = exc.retry_after_s if isinstance(exc, RetryableBackendError) else None
            return self.retry.wait_s(state.attempt_number, retry_after, self._rng)

        attempts = 0
        start = time.perf_counter()
        try:
            async with semaphore:
                async for attempt in AsyncRetrying(
                    retry=retry_if_exception_type(RetryableBackendError),
                    stop=stop_after_attempt(self.retry.max_attempts)
                    | stop_after_delay(self.retry.max_total_s),
                    wait=wait,
                    reraise=True,
                ):
                    with attempt:
                        attempts += 1
                        image, details = await self._attempt(request)
        except RefusedError as exc:
            return self._failure("refused", str(exc), attempts, start)
        except RetryableBackendError as exc:
            return self._failure("error", f"gave up after {attempts} attempt(s): {exc}", attempts, start)
        except BackendError as exc:
            return self._failure("error", str(exc), attempts, start)
        seconds = time.perf_counter() - start
        return GenerationResult("ok", image=image, seconds=seconds, details={**details, "attempts": attempts})

    @staticmethod
    def _failure(status: str, message: str, attempts: int, start: float) -> GenerationResult:
        return GenerationResult(
            status,  # type: ignore[arg-type]
            message=redact(message),
            seconds=time.perf_counter() - start,
            details={"attempts": attempts},
        )

    async def agenerate_batch(self, requests: Sequence[GenerationRequest]) -> list[GenerationResult]:
        """All requests concurrently (at most ``concurrency`` in flight), results in order."""
        semaphore = asyncio.Semaphore(self.config.concurrency)
        return list(await asyncio.gather(*(self._one(r, semaphore) for r in requests)))

    def generate_batch(self, requests: Sequence[GenerationRequest]) -> list[GenerationResult]:
        return run_sync(self.agenerate_batch(requests))

    def close(self) -> None:
        try:
            run_sync(self.connection.aclose())
        except Exception as exc:  # closing is best effort: a client bound to another loop may refuse
            log.debug("closing the images client failed: %s", exc)
