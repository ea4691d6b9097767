"""The one small interface every LLM/VLM backend implements.

A backend takes a conversation (:class:`Message` objects holding text and images) plus :class:`GenerationParams`
and returns a :class:`Reply` (text, token usage, optional token log-probabilities, backend id and the model
snapshot that answered). Backends raise :class:`~echo_builder.errors.RetryableBackendError` for transient
failures and :class:`~echo_builder.errors.PermanentBackendError` for the rest; retries, timeouts, concurrency and
caching live in :class:`echo_builder.backends.caller.ModelCaller`, so each backend stays a thin protocol adapter.
"""

from __future__ import annotations

import asyncio
import hashlib
import io
import threading
from abc import ABC, abstractmethod
from collections.abc import Coroutine, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field

from echo_builder.errors import BackendError, ConfigError, ImageError

__all__ = [
    "Backend",
    "CandidateScores",
    "GenerationParams",
    "ImagePart",
    "Message",
    "Reply",
    "TextPart",
    "TokenLogprob",
    "Usage",
    "image_part",
    "run_sync",
    "user_message",
]

T = TypeVar("T")


@dataclass(frozen=True)
class TextPart:
    """A piece of text in a message."""

    text: str
    type: Literal["text"] = "text"


@dataclass(frozen=True)
class ImagePart:
    """An encoded image in a message.

    Attributes:
        data: the encoded file bytes (PNG, JPEG, WebP, ...), sent as-is.
        mime_type: ``image/png``, ``image/jpeg``, ...
        sha256: hex SHA-256 of ``data``; the cache keys on it instead of the bytes.
    """

    data: bytes = field(repr=False)
    mime_type: str
    sha256: str
    type: Literal["image"] = "image"

    def to_pil(self) -> Any:
        """Decode to an 8-bit RGB ``PIL.Image.Image`` (:func:`echo_builder.imaging.load_rgb`'s rules).

        Raises :class:`~echo_builder.errors.ImageError` when the data does not decode.
        """
        from echo_builder.imaging import load_rgb

        return load_rgb(self.data, name="image part")


_MIME_BY_FORMAT = {"PNG": "image/png", "JPEG": "image/jpeg", "WEBP": "image/webp", "GIF": "image/gif"}


def image_part(image: Any, *, mime_type: str | None = None) -> ImagePart:
    """Build an :class:`ImagePart` from a ``PIL.Image.Image``, encoded bytes, or a file path.

    PIL images are encoded losslessly as PNG. Bytes and files are sent unchanged; their MIME type is read from the
    file header after a full decode (:func:`echo_builder.imaging.image_format`). Raises :class:`ConfigError` for an
    unsupported input type or a file that cannot be read, :class:`ImageError` for data that does not decode.
    """
    from PIL import Image

    if isinstance(image, ImagePart):
        return image
    if isinstance(image, (str, Path)):
        try:
            data = Path(image).read_bytes()
        except OSError as exc:
            raise ConfigError(f"cannot read image file {str(image)!r}: {exc}") from exc
    elif isinstance(image, (bytes, bytearray, memoryview)):
        data = bytes(image)
    elif isinstance(image, Image.Image):
        buf = io.BytesIO()
        img = image if image.mode in ("RGB", "RGBA", "L") else image.convert("RGB")
        img.save(buf, format="PNG")
        data, mime_type = buf.getvalue(), "image/png"
    else:
        raise ConfigError(
            f"unsupported image input of type {type(image).__name__}; give a PIL image, bytes or a path"
        )
    if mime_type is None:
        from echo_builder.imaging import image_format

        try:
            fmt = image_format(data, name=f"image data ({len(data)} bytes)")
        except ImageError as exc:
            raise ImageError(f"image data is not a readable image: {exc}") from None
        mime_type = _MIME_BY_FORMAT.get(fmt, f"image/{fmt.lower() or 'octet-stream'}")
    return ImagePart(data=data, mime_type=mime_type, sha256=hashlib.sha256(data).hexdigest())


@dataclass(frozen=True)
class Message:
    """One chat turn: a role and an ordered tuple of text and image parts."""

    role: Literal["system", "user", "assistant"]
    content: tuple[TextPart | ImagePart, ...]

    @property
    def text(self) -> str:
        """The concatenated text parts (images omitted)."""
        return "".join(p.text for p in self.content if isinstance(p, TextPart))

    @property
    def images(self) -> tuple[ImagePart, ...]:
        return tuple(p for p in self.content if isinstance(p, ImagePart))


def user_message(*parts: Any, role: Literal["system", "user", "assistant"] = "user") -> Message:
    """Build a message from strings (text parts) and images (anything :func:`image_part` accepts), in order."""
    content: list[TextPart | ImagePart] = []
    for part in parts:
        if isinstance(part, (TextPart, ImagePart)):
            content.append(part)
        elif isinstance(part, str):
            content.append(TextPart(part))
        else:
            content.append(image_part(part))
    return Message(role=role, content=tuple(content))


class GenerationParams(BaseModel):
    """Sampling parameters of a call. Unknown keys are an error so that no setting is silently ignored.

    Attributes:
        temperature: sampling temperature >= 0 (0 = greedy, the default for judging and curation).
        max_tokens: cap on generated tokens (>= 1).
        top_p: nucleus sampling mass in (0, 1], or ``None`` for the server default.
        seed: sampling seed passed to servers that support it.
        stop: stop strings.
        logprobs: ask for token log-probabilities; ``top_logprobs`` alternatives per position (0-20).

    Numbers must be finite (nan and inf are refused). ``temperature``, ``top_p``, ``max_tokens`` and ``seed`` can
    also be set for a whole run as backend options (``-o temperature=0.7``): see
    :data:`echo_builder.backends.GENERATION_OPTIONS`.
    """

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

    temperature: float = Field(default=0.0, ge=0.0, le=2.0)
    max_tokens: int = Field(default=1024, ge=1, le=1_000_000)
    top_p: float | None = Field(default=None, gt=0.0, le=1.0)
    seed: int | None = Field(default=None, ge=0, le=2**63 - 1)
    stop: tuple[str, ...] = ()
    logprobs: bool = False
    top_logprobs: int = Field(default=0, ge=0, le=20)


class Usage(BaseModel):
    """Token usage of one call as reported by the backend (``None`` when it does not say)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    input_tokens: int | None = None
    output_tokens: int | None = None


class TokenLogprob(BaseModel):
    """Log-probability (natural log) of one generated token and its top alternatives at that position."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    token: str
    logprob: float
    top: tuple[tuple[str, float], ...] = ()


class Reply(BaseModel):
    """A backend's answer to one call.

    Attributes:
        text: the generated text ("" when the model returned none, e.g. a content-filter stop).
        finish_reason: ``stop``, ``length``, ``content_filter``, ... as reported.
        usage: token counts.
        logprobs: per generated token, when requested and provided; ``None`` otherwise.
        logprobs_status: ``not_requested``, ``ok`` or ``unavailable`` (requested but the server gave none).
        backend_id: ``<backend>:<model>`` that was called.
        model_snapshot: the exact model version that answered (server-reported name, fingerprint or weights hash).
        latency_s: wall time of the successful attempt in seconds; 0.0 for an answer from the Batch API
            (:mod:`echo_builder.backends.batch`), which has no per-call wall time.
        served_by: the replica (base URL) that answered, when the backend spreads calls over several
            (:class:`~echo_builder.backends.replicas.ReplicatedBackend`); ``None`` otherwise.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    text: str
    finish_reason: str | None = None
    usage: Usage = Usage()
    logprobs: tuple[TokenLogprob, ...] | None = None
    logprobs_status: Literal["not_requested", "ok", "unavailable"] = "not_requested"
    backend_id: str
    model_snapshot: str | None = None
    latency_s: float = 0.0
    served_by: str | None = None


class CandidateScores(BaseModel):
    """Probabilities of candidate answers for the next token, normalised over the candidates.

    Attributes:
        probabilities: candidate -> probability in [0, 1]; the values sum to 1.
        logprobs: candidate -> unnormalised natural-log probability under the model (``-inf`` when unseen).
        coverage: total unnormalised probability mass of the candidates in [0, 1]; low coverage means the model
            wanted to say something else and the normalised numbers deserve little trust.
    """

    model_config = ConfigDict(frozen=True, extra="forbid", ser_json_inf_nan="strings")

    probabilities: dict[str, float]
    logprobs: dict[str, float]
    coverage: float
    backend_id: str
    model_snapshot: str | None = None


def run_sync(coro: Coroutine[Any, Any, T]) -> T:
    """Run ``coro`` to completion from synchronous code, also when called inside a running event loop.

    All synchronous calls share one background event loop, so async HTTP clients keep their connection pools
    between calls (a fresh ``asyncio.run`` per call would strand them on a closed loop).
    """
    return _background_loop().run(coro)


class _LoopThread:
    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="echo-bench-loop", daemon=True)
        self.thread.start()

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        if threading.current_thread() is self.thread:
            raise RuntimeError(
                "run_sync called from inside the echo-bench event loop; await the coroutine instead"
            )
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result()


_loop_lock = threading.Lock()
_loop_thread: _LoopThread | None = None


def _background_loop() -> _LoopThread:
    global _loop_thread
    with _loop_lock:
        if _loop_thread is None:
            _loop_thread = _LoopThread()
        return _loop_thread


Call = tuple[Sequence[Message], GenerationParams]


class Backend(ABC):
    """Base class of LLM/VLM backends. Subclasses register with :func:`echo_builder.backends.register_backend`.

    Attributes:
        name: registry name, the part of a spec before ``:`` (``openai``).
        needs_target: whether a spec must name a model after ``:``.
        answers_prompts: whether it answers free-form prompts (``False`` for the rules baseline).
        native_batching: ``True`` when :meth:`agenerate_batch` runs several calls in one forward pass (local
            models); the caller then sends batches instead of concurrent single calls.
        target: what follows ``:`` in the spec (model name, hub id or path).
    """

    name: ClassVar[str] = ""
    description: ClassVar[str] = ""
    native_batching: ClassVar[bool] = False
    needs_target: ClassVar[bool] = True
    #: ``False`` for backends that answer no free-form prompt (the rules baseline): ``backends ping`` then sends
    #: nothing and reports the backend as available offline.
    answers_prompts: ClassVar[bool] = True

    #: the ``box_format`` option given at creation (see :mod:`echo_builder.backends.boxes`); ``None``: by model name
    box_format_option: str | None = None

    def __init__(self, target: str) -> None:
        self.target = target
        #: Generation parameters set for the whole run (``-o temperature=0.7``); they replace those of each call.
        self.generation_overrides: dict[str, Any] = {}

    def cache_settings(self) -> dict[str, Any]:
        """Backend options, other than the generation parameters, that can change a reply (JSON-compatible).

        They are part of every call's cache key (an empty dict adds nothing, so default runs keep their keys) and
        are recorded in ``run.json`` and the build report. The base class has none.
        """
        return {}

    def settings(self) -> dict[str, Any]:
        """What this run set that changes replies: :attr:`generation_overrides` and :meth:`cache_settings`."""
        return {**self.generation_overrides, **self.cache_settings()}

    @property
    def box_format(self) -> str:
        """How this model writes boxes: ``pixels``, ``norm1000`` or ``norm1000_yx``.

        The ``box_format`` option when given, else the default of the model family named by :attr:`target`
        (:func:`echo_builder.backends.boxes.default_box_format`).
        """
        from echo_builder.backends.boxes import resolve_box_format

        return resolve_box_format(self.box_format_option, self.target)

    def vision_frame(self, width: int, height: int) -> tuple[int, int]:
        """(width, height) in pixels of the image the model sees when sent a ``width`` x ``height`` image.

        The frame of ``pixels`` boxes. The base class assumes the image is seen as sent; backends whose model
        resizes images itself (Qwen2-VL-style processors) override this.
        """
        return width, height

    @property
    def backend_id(self) -> str:
        """``<name>:<target>``, the id recorded in replies, cache entries and verdicts."""
        return f"{self.name}:{self.target}" if self.target else self.name

    @abstractmethod
    async def agenerate(self, messages: Sequence[Message], params: GenerationParams) -> Reply:
        """Answer one conversation. Raises :class:`~echo_builder.errors.BackendError` subclasses on failure."""

    async def agenerate_batch(self, calls: Sequence[Call]) -> list[Reply | BackendError]:
        """Answer several conversations; failures are returned in place, in input order, not raised."""
        results = await asyncio.gather(*(self.agenerate(m, p) for m, p in calls), return_exceptions=True)
        out: list[Reply | BackendError] = []
        for r in results:
            if isinstance(r, BaseException) and not isinstance(r, BackendError):
                raise r
            out.append(r)
        return out

    async def acandidate_probabilities(
        self, messages: Sequence[Message], candidates: Sequence[str], params: GenerationParams | None = None
    ) -> CandidateScores:
        """Probabilities of each candidate answer as the next token, normalised over the candidates.

        Raises :class:`~echo_builder.errors.LogprobsUnavailableError` when the backend cannot provide them.
        """
        raise BackendError(f"{self.backend_id} cannot score candidate answers", backend_id=self.backend_id)

    def generate(self, messages: Sequence[Message], params: GenerationParams | None = None) -> Reply:
        """Synchronous :meth:`agenerate` (without the caller's cache and retries)."""
        return run_sync(self.agenerate(messages, params or GenerationParams()))

    def generate_batch(self, calls: Sequence[Call]) -> list[Reply | BackendError]:
        """Synchronous :meth:`agenerate_batch`."""
        return run_sync(self.agenerate_batch(calls))

    def candidate_probabilities(
        self, messages: Sequence[Message], candidates: Sequence[str], params: GenerationParams | None = None
    ) -> CandidateScores:
        """Synchronous :meth:`acandidate_probabilities`."""
        return run_sync(self.acandidate_probabilities(messages, candidates, params))

    async def aclose(self) -> None:  # noqa: B027 (optional hook: most backends hold nothing to release)
        """Release network clients or models. Safe to call twice."""

    def close(self) -> None:
        run_sync(self.aclose())


def invalid_options(who: str, exc: Any, accepted: Sequence[str] = ()) -> ConfigError:
    """A pydantic ``ValidationError`` of a backend's or generator's options as a one-line :class:`ConfigError`:
    ``invalid options for openai:m: timeout_s: Input should be a finite number (got nan); ...``. Given the
    ``accepted`` option names (the options model's fields and any option taken before the model sees them), an
    unknown option's message lists them: ``bogus: unknown option (accepted: base_url, api_key, ...)``."""
    accepted = f" (accepted: {', '.join(accepted)})" if accepted else ""
    problems = "; ".join(
        f"{'.'.join(map(str, e.get('loc', ()))) or 'value'}: {e.get('msg')} (got {e.get('input')!r})"
        if e.get("type") != "extra_forbidden"
        else f"{'.'.join(map(str, e.get('loc', ())))}: unknown option{accepted}"
        for e in exc.errors()
    )
    return ConfigError(f"invalid options for {who}: {problems}")


def normalise_candidates(
    logprobs: dict[str, float], backend_id: str, snapshot: str | None
) -> CandidateScores:
    """Turn candidate -> log-probability into :class:`CandidateScores` (softmax over the candidates).

    Raises :class:`~echo_builder.errors.LogprobsUnavailableError` when no candidate has finite probability.
    """
    import math

    from echo_builder.errors import LogprobsUnavailableError

    finite = [v for v in logprobs.values() if math.isfinite(v)]
    if not finite:
        raise LogprobsUnavailableError(
            f"none of the candidates {sorted(logprobs)} was among the returned next-token alternatives",
            backend_id=backend_id,
        )
    top = max(finite)
    weights = {k: (math.exp(v - top) if math.isfinite(v) else 0.0) for k, v in logprobs.items()}
    total = sum(weights.values())
    coverage = min(1.0, sum(math.exp(v) for v in finite))
    return CandidateScores(
        probabilities={k: w / total for k, w in weights.items()},
        logprobs=dict(logprobs),
        coverage=coverage,
        backend_id=backend_id,
        model_snapshot=snapshot,
    )
