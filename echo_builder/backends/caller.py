"""Calling a backend for real work: cache, concurrency limit, per-call timeout, retries, structured output.

:class:`ModelCaller` wraps any :class:`~echo_builder.backends.base.Backend`:

1. looks the call up in the :class:`~echo_builder.cache.CallCache` (a hit makes no model call);
2. otherwise runs it with at most ``concurrency`` calls in flight, each attempt bounded by ``timeout_s``;
3. retries transient failures (429, 5xx, timeouts, dropped connections, unreadable replies) with exponential
   backoff and full jitter, waiting at least what ``Retry-After`` asks, and stops after ``max_attempts`` or
   ``max_total_s``, whichever comes first: never an endless loop;
4. stores each successful reply the moment it arrives, so a crash loses only the calls in flight;
5. returns a :class:`CallResult` for every request, in input order: failures are recorded with their reason,
   never raised in the middle of a batch and never dropped.

For structured answers, :meth:`ModelCaller.acall_structured` parses the reply (with repair), validates it against
a pydantic schema, re-asks once on invalid output and otherwise records a ``parse_failure`` that keeps the raw text.
"""

from __future__ import annotations

import asyncio
import dataclasses
import math
import numbers
import random
import time
from collections.abc import Awaitable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError
from tenacity import (
    AsyncRetrying,
    RetryCallState,
    retry_if_exception_type,
    stop_after_attempt,
    stop_after_delay,
)

from echo_builder.backends.base import (
    Backend,
    CandidateScores,
    GenerationParams,
    Message,
    Reply,
    TextPart,
    run_sync,
)
from echo_builder.backends.spend import Budget, UsageMeter, hold
from echo_builder.cache import CacheWriteError, CallCache, call_key
from echo_builder.errors import (
    BackendError,
    ConfigError,
    PermanentBackendError,
    RetryableBackendError,
    StructuredOutputError,
)
from echo_builder.secrets import get_logger, redact
from echo_builder.structured import parse_structured, reask_message

__all__ = [
    "CallRequest",
    "CallResult",
    "CallerStats",
    "ModelCaller",
    "RetryPolicy",
    "StructuredResult",
    "check_call_limits",
]

log = get_logger(__name__)
M = TypeVar("M", bound=BaseModel)
#: Longest accepted attempt timeout in seconds (one day): longer is a typo, and overflows the event loop's clock.
MAX_TIMEOUT_S = 86_400.0
#: Most calls in flight (or batch size of a local model) one caller accepts.
MAX_CONCURRENCY = 1024
T = TypeVar("T")


class RetryPolicy(BaseModel):
    """When and how long to retry transient failures.

    The wait before attempt ``n + 1`` is ``uniform(0, min(max_backoff_s, initial_backoff_s * 2**(n-1)))`` (full
    jitter), raised to the server's ``Retry-After`` when it asks for longer, and never above ``max_backoff_s``.

    Attributes:
        max_attempts: attempts per call including the first (>= 1).
        initial_backoff_s, max_backoff_s: backoff scale and cap in seconds.
        max_total_s: hard cap in seconds on the time one call may spend across attempts and waits.
        jitter: ``False`` waits the full exponential step (deterministic, for tests and benchmarks).
    """

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

    max_attempts: int = Field(default=6, ge=1, le=100)
    initial_backoff_s: float = Field(default=1.0, ge=0.0, le=MAX_TIMEOUT_S)
    max_backoff_s: float = Field(default=60.0, ge=0.0, le=MAX_TIMEOUT_S)
    max_total_s: float = Field(default=900.0, gt=0.0, le=7 * MAX_TIMEOUT_S)
    jitter: bool = True

    def wait_s(self, attempt: int, retry_after_s: float | None, rng: random.Random) -> float:
        """Seconds to wait after failed attempt number ``attempt`` (1-based)."""
        step = min(self.max_backoff_s, self.initial_backoff_s * (2 ** (attempt - 1)))
        wait = rng.uniform(0.0, step) if self.jitter else step
        if retry_after_s is not None:
            wait = max(wait, retry_after_s)
        return min(wait, self.max_backoff_s)


async def gather_all(awaitables: Iterable[Awaitable[T]]) -> list[T]:
    """``asyncio.gather`` that lets every awaitable finish before raising the first exception: a call in flight
    when another fails (e.g. its reply could not be stored) still completes and stores its reply."""
    outcomes = await asyncio.gather(*awaitables, return_exceptions=True)
    for outcome in outcomes:
        if isinstance(outcome, BaseException):
            raise outcome
    return list(outcomes)  # type: ignore[arg-type]


@dataclass(frozen=True)
class CallRequest:
    """One model call: the conversation, its parameters, and what it is for (part of the cache key)."""

    messages: tuple[Message, ...]
    params: GenerationParams = field(default_factory=GenerationParams)
    stage: str = "adhoc"
    prompt_version: str = "0"

    def key(self, backend_id: str, *, kind: str = "generate", extra: dict[str, Any] | None = None) -> str:
        return call_key(
            stage=self.stage,
            prompt_version=self.prompt_version,
            backend_id=backend_id,
            params=self.params.model_dump(mode="json"),
            messages=self.messages,
            kind=kind,
            extra=extra,
        )


@dataclass(frozen=True)
class CallResult:
    """Outcome of one :class:`CallRequest`.

    Attributes:
        reply: the reply when the call succeeded, else ``None``.
        error: why it failed (redacted; names the last error and the attempt count), else ``None``.
        error_kind: ``retries_exhausted`` (transient failures up to the cap) or ``permanent``.
        attempts: attempts made now (0 for a cache hit).
        cached: the reply came from the cache.
    """

    request: CallRequest
    key: str
    reply: Reply | None = None
    error: str | None = None
    error_kind: Literal["retries_exhausted", "permanent"] | None = None
    attempts: int = 0
    cached: bool = False

    @property
    def ok(self) -> bool:
        return self.reply is not None


@dataclass(frozen=True)
class StructuredResult(Generic[M]):
    """Outcome of a structured call: ``value`` when ``status == "ok"``; the raw text is always kept."""

    status: Literal["ok", "parse_failure", "error"]
    value: M | None
    raw_text: str
    error: str | None
    calls: tuple[CallResult, ...]


@dataclass
class CallerStats:
    """Counters of one caller: requests, cache hits, attempts sent, failures, peak concurrency."""

    requests: int = 0
    cache_hits: int = 0
    attempts: int = 0
    retries: int = 0
    failures: int = 0
    in_flight: int = 0
    max_in_flight: int = 0
    input_tokens: int = 0
    output_tokens: int = 0


def check_call_limits(*, concurrency: int, timeout_s: float, max_attempts: int | None = None) -> None:
    """Check the numbers that bound model calls, before anything is written.

    Args:
        concurrency: calls in flight, a whole number in [1, 1024].
        timeout_s: seconds per attempt, finite, in (0, 86400].
        max_attempts: attempts per call, a whole number in [1, 100] (``None``: not checked).

    Raises:
        ConfigError: a value out of range, nan or inf, naming the value and the accepted range.
    """
    if (
        isinstance(concurrency, bool)
        or not isinstance(concurrency, numbers.Integral)
        or not 1 <= concurrency <= MAX_CONCURRENCY
    ):
        raise ConfigError(
            f"concurrency must be a whole number in [1, {MAX_CONCURRENCY}], got {concurrency!r}"
        )
    if (
        isinstance(timeout_s, bool)
        or not isinstance(timeout_s, numbers.Real)
        or not math.isfinite(timeout_s)
        or not 0 < timeout_s <= MAX_TIMEOUT_S
    ):
        raise ConfigError(
            f"timeout_s must be a number of seconds in (0, {MAX_TIMEOUT_S:g}], got {timeout_s!r}"
        )
    if max_attempts is not None and (
        isinstance(max_attempts, bool)
        or not isinstance(max_attempts, numbers.Integral)
        or not 1 <= max_attempts <= 100
    ):
        raise ConfigError(f"max_attempts must be a whole number in [1, 100], got {max_attempts!r}")


class ModelCaller:
    """Cache-backed, concurrency-limited, retrying access to one backend.

    Args:
        backend: the backend to call.
        cache: where replies are stored and looked up; ``None`` disables caching.
        concurrency: maximum calls in flight at once, in [1, 1024]. For backends with native batching this is the
            batch size handed to the backend.
        timeout_s: wall-clock limit of one attempt in seconds, finite, in (0, 86400].
        retry: the :class:`RetryPolicy`.
        seed: seed of the jitter random generator.
        batch: run uncached calls of :meth:`acall_many` through the OpenAI Batch API
            (:class:`~echo_builder.backends.batch.BatchSettings`; ``openai:`` backends only), ``None``: online.
        budget: a :class:`~echo_builder.backends.spend.Budget` (``--max-cost``) checked before every call sent;
            a call that would pass it raises :class:`~echo_builder.errors.BudgetExceededError` instead (calls
            already in flight finish and are stored). ``None``: no cap.

    :attr:`meter` (a :class:`~echo_builder.backends.spend.UsageMeter`) counts the tokens of every reply handed
    out, per call stage, cache hits apart from calls made now.

    The backend's run-wide generation parameters (:attr:`Backend.generation_overrides`, e.g. from
    ``-o temperature=0.7``) replace those of every request before the cache lookup, and its
    :meth:`Backend.cache_settings` (e.g. ``extra_body``) join every cache key: a run that changes either makes
    its own calls instead of being served another run's replies.

    Raises:
        ConfigError: ``concurrency`` or ``timeout_s`` out of range (nan and inf included), or ``batch`` given
            for a backend without a Batch API.
    """

    def __init__(
        self,
        backend: Backend,
        *,
        cache: CallCache | None = None,
        concurrency: int = 8,
        timeout_s: float = 120.0,
        retry: RetryPolicy | None = None,
        seed: int = 0,
        batch: Any | None = None,
        budget: Budget | None = None,
    ) -> None:
        check_call_limits(concurrency=concurrency, timeout_s=timeout_s)
        if batch is not None:
            from echo_builder.backends.batch import check_batchable

            check_batchable(backend)
        self.batch = batch
        self.budget = budget
        self.meter = UsageMeter()
        self.backend = backend
        self.cache = cache
        self._halted: BaseException | None = None  # a storage failure: no further call is sent
        self.concurrency = concurrency
        self.timeout_s = timeout_s
        self.retry = retry or RetryPolicy()
        self.stats = CallerStats()
        self._rng = random.Random(seed)
        self._semaphores: dict[int, asyncio.Semaphore] = {}

    # -- run-wide settings -------------------------------------------------------------------------------------------
    def _prepare(self, request: CallRequest) -> CallRequest:
        """``request`` with the backend's run-wide generation parameters in place of its own."""
        overrides = getattr(self.backend, "generation_overrides", None)
        if not overrides:
            return request
        return dataclasses.replace(request, params=request.params.model_copy(update=overrides))

    def _key(
        self, request: CallRequest, *, kind: str = "generate", extra: dict[str, Any] | None = None
    ) -> str:
        """The cache key of a prepared request: its own fields plus the backend's :meth:`cache_settings`."""
        settings_of = getattr(self.backend, "cache_settings", None)
        settings = settings_of() if callable(settings_of) else {}
        if settings:
            extra = {**(extra or {}), "backend_settings": settings}
        return request.key(self.backend.backend_id, kind=kind, extra=extra)

    # -- single calls ------------------------------------------------------------------------------------------------
    def _semaphore(self) -> asyncio.Semaphore:
        loop_id = id(asyncio.get_running_loop())
        sem = self._semaphores.get(loop_id)
        if sem is None:
            sem = self._semaphores[loop_id] = asyncio.Semaphore(self.concurrency)
        return sem

    def _lookup(self, request: CallRequest, key: str) -> CallResult | None:
        self.stats.requests += 1
        if self.cache is None:
            return None
        value = self.cache.get(key, backend=self.backend.backend_id)
        if value is None:
            return None
        try:
            reply = Reply.model_validate(value)
        except ValidationError:  # a stored row of another shape (damaged, or a foreign cache): call again
            log.warning(
                "call cache: the stored reply of call %s does not read as a reply; calling again", key[:12]
            )
            return None
        self.stats.cache_hits += 1
        self.meter.record(request.stage, reply.usage, cached=True)
        return CallResult(request, key, reply=self._redacted(reply), cached=True)

    @staticmethod
    def _redacted(reply: Reply) -> Reply:
        """``reply`` with any known secret (a key the server echoed back) replaced by ``***``."""
        text, snapshot = redact(reply.text), redact(reply.model_snapshot) if reply.model_snapshot else None
        if text == reply.text and snapshot == reply.model_snapshot:
            return reply
        return reply.model_copy(update={"text": text, "model_snapshot": snapshot})

    def _store(self, request: CallRequest, key: str, reply: Reply) -> None:
        self.stats.input_tokens += reply.usage.input_tokens or 0
        self.stats.output_tokens += reply.usage.output_tokens or 0
        self.meter.record(request.stage, reply.usage, cached=False)
        if self.cache is not None:
            try:
                self._put(request, key, reply)
            except CacheWriteError as exc:
                # the disk is full or read-only: send no further call (its reply could not be kept either)
                self._halted = exc
                raise

    def _put(self, request: CallRequest, key: str, reply: Reply) -> None:
        if self.cache is not None:
            self.cache.put(
                key,
                reply.model_dump(mode="json"),
                backend=self.backend.backend_id,
                stage=request.stage,
                prompt_version=request.prompt_version,
                input_tokens=reply.usage.input_tokens,
                output_tokens=reply.usage.output_tokens,
                latency_s=reply.latency_s,
            )

    def _wait(self, state: RetryCallState) -> float:
        exc = state.outcome.exception() if state.outcome else None
        retry_after = exc.retry_after_s if isinstance(exc, RetryableBackendError) else None
        return self.retry.wait_s(state.attempt_number, retry_after, self._rng)

    async def _attempt(self, request: CallRequest, key: str) -> Reply:
        async with self._semaphore():
            if self._halted is not None:
                raise self._halted
            async with hold(self.budget, request.messages, request.params, request.stage) as charge:
                reply = self._redacted(await self._send(request, charge))
            # stored before the slot is freed: a killed run loses at most `concurrency` answered calls
            self._store(request, key, reply)
            return reply

    async def _send(self, request: CallRequest, charge: Any) -> Reply:
        """One attempt of ``request`` (inside the semaphore and the budget's reservation)."""
        self.stats.attempts += 1
        self.stats.in_flight += 1
        self.stats.max_in_flight = max(self.stats.max_in_flight, self.stats.in_flight)
        try:
            reply = await asyncio.wait_for(
                self.backend.agenerate(request.messages, request.params), timeout=self.timeout_s
            )
            if not isinstance(reply, Reply):
                raise TypeError(f"agenerate returned {type(reply).__name__}, not a Reply")
            charge(reply.usage)
            return reply
        except asyncio.TimeoutError:
            raise RetryableBackendError(
                f"no reply within {self.timeout_s:g} s", backend_id=self.backend.backend_id
            ) from None
        except BackendError:
            raise
        except Exception as exc:
            origin = self._plugin_origin()
            if origin is None:  # echo-bench's own backend: a bug, shown as one
                raise
            # a plugin's bug is a failed call of that plugin (recorded, never retried); the run goes on
            raise PermanentBackendError(
                f"the plugin backend {self.backend.name!r} ({origin}) raised {type(exc).__name__}: {exc}",
                backend_id=self.backend.backend_id,
            ) from exc
        finally:
            self.stats.in_flight -= 1

    def _plugin_origin(self) -> str | None:
        """The distribution of the backend when it is a plugin's (``None`` for a built-in or an unregistered class)."""
        from echo_builder.backends import BACKENDS

        name = getattr(self.backend, "name", None)
        if not isinstance(name, str) or name not in BACKENDS:
            return None
        entry = BACKENDS.entry(name)
        return None if entry.builtin else entry.origin

    async def _with_retries(self, request: CallRequest, key: str) -> CallResult:
        attempts = 0
        try:
            async for attempt in self._retrying():
                with attempt:
                    attempts += 1
                    reply = await self._attempt(request, key)
        except RetryableBackendError as exc:
            self.stats.failures += 1
            return CallResult(
                request,
                key,
                error=redact(f"gave up after {attempts} attempt(s): {exc}"),
                error_kind="retries_exhausted",
                attempts=attempts,
            )
        except BackendError as exc:
            self.stats.failures += 1
            return CallResult(request, key, error=redact(str(exc)), error_kind="permanent", attempts=attempts)
        return CallResult(request, key, reply=reply, attempts=attempts)

    def _retrying(self) -> AsyncRetrying:
        """Retries of transient failures only, bounded by attempts and total time; the last error is re-raised."""
        return AsyncRetrying(
            retry=retry_if_exception_type(RetryableBackendError),
            stop=stop_after_attempt(self.retry.max_attempts) | stop_after_delay(self.retry.max_total_s),
            wait=self._wait,
            reraise=True,
            before_sleep=self._log_retry,
        )

    def _log_retry(self, state: RetryCallState) -> None:
        self.stats.retries += 1
        exc = state.outcome.exception() if state.outcome else None
        log.debug("%s: attempt %d failed (%s); retrying", self.backend.backend_id, state.attempt_number, exc)

    async def acall(self, request: CallRequest) -> CallResult:
        """Answer one request from the cache or the backend; failures come back as a :class:`CallResult`."""
        request = self._prepare(request)
        key = self._key(request)
        hit = self._lookup(request, key)
        if hit is not None:
            return hit
        if self.backend.native_batching:
            return (await self._run_batched([(request, key)]))[0]
        return await self._with_retries(request, key)

    def call(self, request: CallRequest) -> CallResult:
        """Synchronous :meth:`acall`."""
        return run_sync(self.acall(request))

    # -- many calls ------------------------------------------------------------------------------------------------
    async def acall_many(
        self, requests: Sequence[CallRequest], *, progress: str | None = None
    ) -> list[CallResult]:
        """Answer every request (cache first), at most ``concurrency`` at a time, results in input order.

        Identical requests (same cache key) are sent once and share the result.

        Args:
            requests: the calls to make.
            progress: a label to show a progress bar with (shown only on a terminal), or ``None`` for none.
        """
        from tqdm.auto import tqdm

        results: list[CallResult | None] = [None] * len(requests)
        missing: dict[str, tuple[CallRequest, list[int]]] = {}  # identical requests are sent once
        for i, request in enumerate(map(self._prepare, requests)):
            key = self._key(request)
            if key in missing:
                missing[key][1].append(i)
                continue
            hit = self._lookup(request, key)
            if hit is not None:
                results[i] = hit
            else:
                missing[key] = (request, [i])
        todo = [(key, request, slots) for key, (request, slots) in missing.items()]
        n_todo = sum(len(slots) for _, _, slots in todo)
        bar = tqdm(
            total=len(requests),
            initial=len(requests) - n_todo,
            desc=progress,
            disable=True if progress is None else None,
        )  # None: shown on a terminal only

        def place(slots: list[int], result: CallResult) -> None:
            for i in slots:
                results[i] = result
            bar.update(len(slots))

        try:
            if self.batch is not None and todo:
                from echo_builder.backends.batch import BatchRunner

                done = await BatchRunner(self, self.batch).run([(k, r) for k, r, _ in todo])
                for key, _, slots in todo:
                    place(slots, done[key])
            elif self.backend.native_batching:
                for start in range(0, len(todo), self.concurrency):
                    chunk = todo[start : start + self.concurrency]
                    done = await self._run_batched([(r, k) for k, r, _ in chunk])
                    for (_, _, slots), result in zip(chunk, done, strict=True):
                        place(slots, result)
            else:

                async def one(key: str, request: CallRequest, slots: list[int]) -> None:
                    place(slots, await self._with_retries(request, key))

                # every call in flight finishes (and its reply is stored) before an error is raised: a reply that
                # was paid for is never dropped because another call's write failed
                await gather_all(one(k, r, slots) for k, r, slots in todo)
        finally:
            bar.close()
            if self.cache is not None:
                self.cache.flush_counters()
        return [r for r in results if r is not None]

    def call_many(self, requests: Sequence[CallRequest], *, progress: str | None = None) -> list[CallResult]:
        """Synchronous :meth:`acall_many`."""
        return run_sync(self.acall_many(requests, progress=progress))

    async def _run_batched(self, items: Sequence[tuple[CallRequest, str]]) -> list[CallResult]:
        self.stats.attempts += len(items)
        replies = await self.backend.agenerate_batch([(r.messages, r.params) for r, _ in items])
        out = []
        for (request, key), reply in zip(items, replies, strict=True):
            if isinstance(reply, Reply):
                reply = self._redacted(reply)
                self._store(request, key, reply)
                out.append(CallResult(request, key, reply=reply, attempts=1))
            else:
                self.stats.failures += 1
                out.append(
                    CallResult(request, key, error=redact(str(reply)), error_kind="permanent", attempts=1)
                )
        return out

    # -- structured output -------------------------------------------------------------------------------------------
    async def acall_structured(
        self, request: CallRequest, schema: type[M], *, reask: bool = True
    ) -> StructuredResult[M]:
        """Call, parse the reply as JSON into ``schema``; on invalid output re-ask once, then record a failure.

        The re-ask shows the model its previous reply and the reason it was rejected; it is cached like any call.
        """
        first = await self.acall(request)
        return await self._finish_structured(request, first, schema, reask)

    async def _finish_structured(
        self,
        request: CallRequest,
        first: CallResult,
        schema: type[M],
        reask: bool,
        second: CallResult | None = None,
    ) -> StructuredResult[M]:
        if first.reply is None:
            return StructuredResult("error", None, "", first.error, (first,))
        try:
            return StructuredResult(
                "ok", parse_structured(first.reply.text, schema), first.reply.text, None, (first,)
            )
        except StructuredOutputError as exc:
            if not reask:
                return StructuredResult("parse_failure", None, first.reply.text, exc.reason, (first,))
            follow_up = _follow_up(request, first.reply.text, exc.reason, schema)
        if second is None:  # else answered already (in batch mode)
            second = await self.acall(follow_up)
        if second.reply is None:
            return StructuredResult("error", None, first.reply.text, second.error, (first, second))
        try:
            value = parse_structured(second.reply.text, schema)
        except StructuredOutputError as exc:
            return StructuredResult("parse_failure", None, second.reply.text, exc.reason, (first, second))
        return StructuredResult("ok", value, second.reply.text, None, (first, second))

    async def acall_structured_many(
        self,
        requests: Sequence[CallRequest],
        schema: type[M],
        *,
        reask: bool = True,
        progress: str | None = None,
    ) -> list[StructuredResult[M]]:
        """:meth:`acall_structured` for many requests: first answers in one concurrent pass, re-asks in a second."""
        firsts = await self.acall_many(requests, progress=progress)
        seconds: dict[int, CallResult] = {}
        if self.batch is not None and reask:  # the re-asks go into one batch too, not one call each
            follow = {
                i: self._reask_request(r, f, schema)
                for i, (r, f) in enumerate(zip(requests, firsts, strict=True))
            }
            follow = {i: request for i, request in follow.items() if request is not None}
            seconds = dict(zip(follow, await self.acall_many(list(follow.values())), strict=True))
        return await gather_all(
            self._finish_structured(r, f, schema, reask, seconds.get(i))
            for i, (r, f) in enumerate(zip(requests, firsts, strict=True))
        )

    @staticmethod
    def _reask_request(request: CallRequest, first: CallResult, schema: type[M]) -> CallRequest | None:
        """The re-ask :meth:`_finish_structured` sends after ``first``, or ``None`` when none is needed."""
        if first.reply is None:
            return None
        try:
            parse_structured(first.reply.text, schema)
        except StructuredOutputError as exc:
            return _follow_up(request, first.reply.text, exc.reason, schema)
        return None

    def call_structured_many(
        self,
        requests: Sequence[CallRequest],
        schema: type[M],
        *,
        reask: bool = True,
        progress: str | None = None,
    ) -> list[StructuredResult[M]]:
        """Synchronous :meth:`acall_structured_many`."""
        return run_sync(self.acall_structured_many(requests, schema, reask=reask, progress=progress))

    # -- candidate probabilities ---------------------------------------------------------------------------------------
    async def acandidate_probabilities(
        self, request: CallRequest, candidates: Sequence[str]
    ) -> CandidateScores:
        """Cached :meth:`Backend.acandidate_probabilities`, with the same retry policy as generation.

        Raises :class:`~echo_builder.errors.BackendError` (e.g. ``LogprobsUnavailableError``) when it fails.
        """
        request = self._prepare(request)
        key = self._key(request, kind="candidates", extra={"candidates": list(candidates)})
        self.stats.requests += 1
        if self.cache is not None:
            value = self.cache.get(key, backend=self.backend.backend_id)
            try:
                scores = CandidateScores.model_validate(value) if value is not None else None
            except ValidationError:  # a damaged row: call again
                scores = None
            if scores is not None:
                self.stats.cache_hits += 1
                return scores
        async for attempt in self._retrying():
            with attempt:
                async with self._semaphore():
                    self.stats.attempts += 1
                    start = time.perf_counter()
                    async with hold(self.budget, request.messages, request.params, request.stage) as charge:
                        scores = await asyncio.wait_for(
                            self.backend.acandidate_probabilities(
                                request.messages, candidates, request.params
                            ),
                            timeout=self.timeout_s,
                        )
                        charge(None)  # no token counts come with scores: the estimate is charged
        if self.cache is not None:
            self.cache.put(
                key,
                scores.model_dump(mode="json"),
                backend=self.backend.backend_id,
                stage=request.stage,
                prompt_version=request.prompt_version,
                latency_s=time.perf_counter() - start,
            )
        return scores


def _follow_up(request: CallRequest, reply_text: str, reason: str, schema: type[BaseModel]) -> CallRequest:
    """The one re-ask of a structured call: the conversation so far, the model's rejected reply, and why."""
    return CallRequest(
        messages=(
            *request.messages,
            Message("assistant", (TextPart(reply_text),)),
            Message("user", (TextPart(reask_message(reason, schema)),)),
        ),
        params=request.params,
        stage=request.stage,
        prompt_version=request.prompt_version,
    )
