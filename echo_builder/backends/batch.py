"""Batch API mode: send a run's uncached model calls as one OpenAI Batch API job instead of one request each.

OpenAI's Batch API (and compatible servers) takes a JSONL file of requests, answers them within a 24 h completion
window at about half the price of online calls, and returns a JSONL file of answers. With
:class:`~echo_builder.backends.caller.ModelCaller`'s ``batch=`` setting, :meth:`ModelCaller.acall_many
<echo_builder.backends.caller.ModelCaller.acall_many>` serves cached calls first and hands the rest to
:class:`BatchRunner`, which

1. writes them as Batch API lines ``{"custom_id": <call-cache key>, "method": "POST", "url":
   "/v1/chat/completions", "body": <the chat request the online path sends>}`` (at most ``max_requests`` lines
   and ``max_file_bytes`` bytes per file; larger runs become several batches);
2. uploads the file (``client.files.create(purpose="batch")``) and creates the batch
   (``client.batches.create(completion_window="24h")``), writing a checkpoint file under ``state_dir``
   (``OUT/batches/<hash of the call keys>-<n>.json``, atomically) before the upload, after it and after the
   creation, so a killed run never submits the same calls twice: a rerun finds the checkpoint, retrieves the
   batch in flight (or finds it by its input file when the kill came between creation and checkpoint) and waits
   for it;
3. polls ``client.batches.retrieve`` with exponential backoff (``poll_initial_s`` doubling to ``poll_max_s``)
   until the batch ends or ``max_wait_s`` has passed since submission (default 25 h: the 24 h window plus an hour
   for the server to finalise); past it the run stops with an error naming the checkpoint, and a rerun picks the
   batch up again;
4. downloads the output and error files (``client.files.content``), parses every answer with the online path's
   own parser (:meth:`OpenAIBackend.reply_from_completion
   <echo_builder.backends.openai_backend.OpenAIBackend.reply_from_completion>`) and stores it in the call cache
   under its key: the stage or judge code then runs exactly as online and finds every reply in the cache, so
   batch and online runs write identical files for identical replies;
5. retries failed lines (HTTP 408/409/425/429 and 5xx answers, unreadable answers, and the lines an ``expired``
   or ``cancelled`` batch left unanswered) ``online`` (with the caller's retry policy), in one follow-up
   ``batch``, or not at all (``none``); other failures (400, 401, 404, ...) are recorded as permanent failures of
   their call, like online.

Next-token scoring (the judge's probability mode) is batched by :func:`prefetch_candidates`: the one-token
calls with ``top_logprobs`` 20, whose candidate probabilities are cached as the online path caches them.

A reply that came through a batch has ``latency_s == 0.0``: a batch has no per-call wall time (its own wall time,
submission to end, is in the checkpoint file). Only ``openai:`` backends can batch (:func:`check_batchable`).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import math
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from echo_builder.errors import (
    BackendError,
    ConfigError,
    PermanentBackendError,
    RetryableBackendError,
)
from echo_builder.secrets import get_logger, redact

if TYPE_CHECKING:
    from echo_builder.backends.caller import CallRequest, CallResult, ModelCaller

__all__ = [
    "BATCH_ENDPOINT",
    "COMPLETION_WINDOW",
    "BatchError",
    "BatchRunner",
    "BatchSettings",
    "batch_line",
    "batch_settings",
    "check_batchable",
    "prefetch_candidates",
]

log = get_logger(__name__)

#: The Batch API endpoint of every line (chat completions).
BATCH_ENDPOINT = "/v1/chat/completions"
#: The only completion window the Batch API offers.
COMPLETION_WINDOW = "24h"
#: Batch states after which nothing changes.
TERMINAL_STATES = frozenset({"completed", "failed", "expired", "cancelled"})
#: Format version of the checkpoint files.
CHECKPOINT_FORMAT = 1
#: The Batch API's limits per input file: 50,000 requests and 200 MB (a margin is kept below the latter).
MAX_REQUESTS = 50_000
MAX_FILE_BYTES = 190 * 10**6
#: Default cap on one downloaded output or error file in bytes (50,000 long replies with log-probabilities).
MAX_OUTPUT_BYTES = 2 * 2**30
#: Seconds one file download may take at least (a large output file outlasts a chat call's timeout).
MIN_DOWNLOAD_TIMEOUT_S = 600.0
_RETRYABLE_STATUS = frozenset({408, 409, 425, 429})
RetryMode = Literal["online", "batch", "none"]


class BatchError(BackendError):
    """A batch as a whole could not be run: the upload or creation was refused, the server failed the batch's
    validation, or it did not end before the deadline. The message names the batch and its checkpoint file."""


@dataclass(frozen=True)
class BatchSettings:
    """How a :class:`~echo_builder.backends.caller.ModelCaller` runs its uncached calls through the Batch API.

    Attributes:
        state_dir: folder of the checkpoint files (``OUT/batches``); created on first use.
        root: the output folder ``state_dir`` lies in: no component below it may be a symbolic link (``None``:
            ``state_dir`` itself).
        retry: what happens to lines that failed transiently: ``online`` (sent again one by one, with the caller's
            retries), ``batch`` (one follow-up batch) or ``none`` (recorded as failures).
        poll_initial_s, poll_max_s: first wait between status checks in seconds, doubled after each check up to
            ``poll_max_s``.
        max_wait_s: seconds from submission after which a batch still running stops the run (the checkpoint stays;
            a rerun waits again). Default 25 h: the 24 h completion window plus an hour of finalising.
        max_requests, max_file_bytes: most lines and bytes per input file (the Batch API accepts 50,000 and 200 MB).
        max_output_bytes: cap on one downloaded output or error file in bytes (default 2 GiB; the backend's
            ``max_reply_bytes`` bounds chat replies, not these files). A larger file fails the run with an error
            naming the batch; its checkpoint stays, so a rerun with a higher cap harvests it.
        sleep: the coroutine function waiting between polls (tests pass one that returns at once).
        clock: wall-clock seconds since the epoch (tests pass a fake clock).

    Raises:
        ConfigError: a number out of range or an unknown ``retry``.
    """

    state_dir: Path
    root: Path | None = None
    retry: RetryMode = "online"
    poll_initial_s: float = 10.0
    poll_max_s: float = 300.0
    max_wait_s: float = 25 * 3600.0
    max_requests: int = MAX_REQUESTS
    max_file_bytes: int = MAX_FILE_BYTES
    max_output_bytes: int = MAX_OUTPUT_BYTES
    sleep: Callable[[float], Awaitable[Any]] = field(default=asyncio.sleep, repr=False)
    clock: Callable[[], float] = field(default=time.time, repr=False)

    def __post_init__(self) -> None:
        if self.retry not in ("online", "batch", "none"):
            raise ConfigError(f"batch retry must be online, batch or none, got {self.retry!r}")
        for name in ("poll_initial_s", "poll_max_s", "max_wait_s"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
                raise ConfigError(f"batch {name} must be a finite number of seconds, got {value!r}")
            if value < 0 or (name != "poll_initial_s" and value <= 0):
                raise ConfigError(f"batch {name} must be positive, got {value!r}")
        if not 1 <= self.max_requests <= MAX_REQUESTS:
            raise ConfigError(f"batch max_requests must be in [1, {MAX_REQUESTS}], got {self.max_requests!r}")
        if self.max_file_bytes < 1024:
            raise ConfigError(f"batch max_file_bytes must be at least 1024, got {self.max_file_bytes!r}")
        if self.max_output_bytes < 1024:
            raise ConfigError(f"batch max_output_bytes must be at least 1024, got {self.max_output_bytes!r}")


def batch_settings(
    out: str | Path, *, retry: RetryMode = "online", poll_s: float = 30.0, root: str | Path | None = None
) -> BatchSettings:
    """The :class:`BatchSettings` of a command writing to the folder ``out``: checkpoints in ``out/batches``, the
    first status check after ``poll_s`` seconds, then doubling up to 10 minutes (or ``poll_s`` when larger).

    Raises:
        ConfigError: ``retry`` unknown or ``poll_s`` not a positive finite number.
    """
    out = Path(out)
    return BatchSettings(
        state_dir=out / "batches",
        root=Path(root) if root is not None else out,
        retry=retry,
        poll_initial_s=poll_s,
        poll_max_s=max(600.0, poll_s)
        if isinstance(poll_s, (int, float)) and math.isfinite(poll_s)
        else poll_s,
    )


def check_batchable(backend: Any) -> None:
    """Raise :class:`ConfigError` unless ``backend`` can run through the Batch API (an ``openai:`` backend).

    The rules baseline calls no model and ``transformers:`` backends run locally (they batch on the accelerator
    already): neither has a Batch API.
    """
    from echo_builder.backends.openai_backend import OpenAIBackend

    if not isinstance(backend, OpenAIBackend):
        backend_id = getattr(backend, "backend_id", type(backend).__name__)
        raise ConfigError(
            f"--batch needs an openai: backend (an OpenAI-compatible server with the Batch API); {backend_id} "
            "has no Batch API. Run it without --batch."
        )


def batch_line(custom_id: str, body: dict[str, Any]) -> dict[str, Any]:
    """One line of a Batch API input file: ``custom_id``, ``method`` (POST), ``url`` and the request ``body``."""
    return {"custom_id": custom_id, "method": "POST", "url": BATCH_ENDPOINT, "body": body}


@dataclass
class _Checkpoint:
    """What a checkpoint file holds (``OUT/batches/<name>.json``)."""

    name: str
    backend: str
    custom_ids: list[str]
    status: str = "uploading"  # uploading -> submitted -> done (or failed)
    input_file_id: str | None = None
    batch_id: str | None = None
    submitted_at: float | None = None
    ended_at: float | None = None
    batch_status: str | None = None
    counts: dict[str, int] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {"format": CHECKPOINT_FORMAT, **{k: v for k, v in vars(self).items() if k != "name"}}


class BatchRunner:
    """Runs uncached calls of one :class:`~echo_builder.backends.caller.ModelCaller` through the Batch API.

    Args:
        caller: the caller whose backend (an ``openai:`` backend), cache and retry policy are used.
        settings: the :class:`BatchSettings`.

    Raises:
        ConfigError: the backend cannot batch (:func:`check_batchable`).
    """

    def __init__(self, caller: ModelCaller, settings: BatchSettings) -> None:
        check_batchable(caller.backend)
        self.caller = caller
        self.backend: Any = caller.backend
        self.settings = settings
        self.state_dir = Path(settings.state_dir)
        self.root = Path(settings.root) if settings.root is not None else self.state_dir
        #: the candidate answers when the calls score next-token probabilities (:func:`prefetch_candidates`)
        self.candidates: tuple[str, ...] | None = None

    # -- entry point -------------------------------------------------------------------------------------------------
    async def run(self, todo: Sequence[tuple[str, CallRequest]]) -> dict[str, CallResult]:
        """Answer every ``(cache key, prepared request)``: each reply is stored in the cache; returns key -> result.

        Batches an earlier run left in flight are picked up first; the rest is submitted anew. Failed lines are
        retried as :attr:`BatchSettings.retry` says.

        Raises:
            BatchError: a batch was refused or failed validation, or did not end before the deadline.
        """
        pending = dict(todo)
        results: dict[str, CallResult] = {}
        if not pending:
            return results
        jobs: list[Awaitable[dict[str, CallResult]]] = []
        for checkpoint in self._open_checkpoints():
            mine = {k: pending.pop(k) for k in checkpoint.custom_ids if k in pending}
            if not mine:  # every call it holds was answered since: nothing left to wait for
                checkpoint.status = "done"
                self._save(checkpoint)
                continue
            log.info("resuming batch %s (%d calls) from %s", checkpoint.batch_id, len(mine), checkpoint.name)
            jobs.append(self._finish(checkpoint, mine))
        jobs.extend(self._submit_and_finish(chunk) for chunk in self._chunks(pending))
        for done in await _gather_all(jobs):
            results.update(done)
        retry = {
            k: r
            for k, r in results.items()
            if r.reply is None and r.error_kind == "retries_exhausted" and self.settings.retry != "none"
        }
        if retry and self.candidates is not None and self.settings.retry == "online":
            retry = {}  # the judge's own per-call path sends them online (a cache miss there)
        if retry and self.settings.retry == "batch":
            log.info("%d failed batch lines go into a follow-up batch", len(retry))
            follow = [
                self._submit_and_finish(chunk)
                for chunk in self._chunks({k: r.request for k, r in retry.items()})
            ]
            for done in await _gather_all(follow):
                results.update(done)
        elif retry:
            log.info("%d failed batch lines are sent again online", len(retry))
            # online attempts count their own failures in the caller's stats
            again = await _gather_all(self.caller._with_retries(r.request, k) for k, r in retry.items())
            results.update({r.key: r for r in again})
        self.caller.stats.failures += sum(
            1
            for k, r in results.items()
            if r.reply is None and not (k in retry and self.settings.retry == "online")
        )
        return results

    # -- submission ----------------------------------------------------------------------------------------------------
    def _params(self, request: CallRequest) -> Any:
        """The parameters sent: those of ``request``, or those of next-token scoring (as
        :meth:`OpenAIBackend.acandidate_probabilities` sends them) when :attr:`candidates` is set."""
        if self.candidates is None:
            return request.params
        return request.params.model_copy(update={"max_tokens": 1, "logprobs": True, "top_logprobs": 20})

    def _lines(self, items: dict[str, CallRequest]) -> list[bytes]:
        return [
            json.dumps(
                batch_line(key, self.backend.request_json(request.messages, self._params(request))),
                ensure_ascii=False,
                separators=(",", ":"),
            ).encode("utf-8")
            + b"\n"
            for key, request in items.items()
        ]

    def _chunks(self, items: dict[str, CallRequest]) -> list[dict[str, CallRequest]]:
        """``items`` split so that each input file holds at most ``max_requests`` lines and ``max_file_bytes``."""
        chunks: list[dict[str, CallRequest]] = []
        current: dict[str, CallRequest] = {}
        size = 0
        for (key, request), line in zip(items.items(), self._lines(items), strict=True):
            if len(line) > self.settings.max_file_bytes:
                raise BatchError(
                    f"one call of stage {request.stage!r} is {len(line)} bytes as a batch line, over the "
                    f"{self.settings.max_file_bytes}-byte file limit; run without --batch",
                    backend_id=self.backend.backend_id,
                )
            if current and (
                len(current) >= self.settings.max_requests or size + len(line) > self.settings.max_file_bytes
            ):
                chunks.append(current)
                current, size = {}, 0
            current[key] = request
            size += len(line)
        if current:
            chunks.append(current)
        return chunks

    async def _submit_and_finish(self, items: dict[str, CallRequest]) -> dict[str, CallResult]:
        checkpoint = await self._submit(items)
        return await self._finish(checkpoint, items)

    async def _submit(self, items: dict[str, CallRequest]) -> _Checkpoint:
        """Upload ``items`` and create their batch, checkpointing before the upload, after it and after creation."""
        ids = sorted(items)
        digest = hashlib.sha256("\n".join(ids).encode()).hexdigest()[:16]
        number = 1  # the same calls submitted again (a follow-up batch, a rerun after expiry): a new file
        while (self.state_dir / f"{digest}-{number}.json").exists():
            number += 1
        name = f"{digest}-{number}.json"
        checkpoint = _Checkpoint(name=name, backend=self.backend.backend_id, custom_ids=ids)
        self._save(checkpoint)
        data = b"".join(self._lines(items))
        client = self.backend.connection.client()
        upload = await self._api(
            client.files.create(file=(f"echo-bench-{digest}.jsonl", data), purpose="batch"),
            "upload the batch",
        )
        checkpoint.input_file_id = upload.id
        self._save(checkpoint)
        return await self._create(checkpoint)

    async def _create(self, checkpoint: _Checkpoint) -> _Checkpoint:
        client = self.backend.connection.client()
        batch = await self._api(
            client.batches.create(
                input_file_id=checkpoint.input_file_id,
                endpoint=BATCH_ENDPOINT,
                completion_window=COMPLETION_WINDOW,
                metadata={"echo_bench_checkpoint": checkpoint.name},
            ),
            "create the batch",
        )
        checkpoint.batch_id = batch.id
        checkpoint.status = "submitted"
        checkpoint.submitted_at = self.settings.clock()
        self._save(checkpoint)
        log.info("submitted batch %s (%d calls)", batch.id, len(checkpoint.custom_ids))
        return checkpoint

    async def _recover(self, checkpoint: _Checkpoint, items: dict[str, CallRequest]) -> _Checkpoint:
        """A checkpoint written before its batch id was known: find the batch created from its input file, or
        create it (upload again when the upload itself was not recorded)."""
        if checkpoint.input_file_id is None:
            return await self._submit(items)
        client = self.backend.connection.client()
        async for batch in await self._api(client.batches.list(limit=100), "list the batches"):
            if batch.input_file_id == checkpoint.input_file_id:
                checkpoint.batch_id = batch.id
                checkpoint.status = "submitted"
                checkpoint.submitted_at = checkpoint.submitted_at or self.settings.clock()
                self._save(checkpoint)
                return checkpoint
        return await self._create(checkpoint)

    # -- waiting and harvesting ----------------------------------------------------------------------------------------
    async def _finish(self, checkpoint: _Checkpoint, items: dict[str, CallRequest]) -> dict[str, CallResult]:
        if checkpoint.batch_id is None:
            checkpoint = await self._recover(checkpoint, items)
        batch = await self._poll(checkpoint)
        checkpoint.batch_status = batch.status
        if batch.status == "failed":
            checkpoint.status = "failed"
            checkpoint.ended_at = self.settings.clock()
            self._save(checkpoint)
            reasons = "; ".join(
                f"line {e.line}: {e.message}" if getattr(e, "line", None) else str(e.message)
                for e in (getattr(batch.errors, "data", None) or [])
            )
            raise BatchError(
                f"batch {batch.id} failed validation on the server: {reasons or 'no reason given'} "
                f"(checkpoint {self.state_dir / checkpoint.name})",
                backend_id=self.backend.backend_id,
            )
        answers: dict[str, dict[str, Any]] = {}
        for file_id in (batch.output_file_id, batch.error_file_id):
            if file_id:
                for line in await self._download(file_id):
                    if isinstance(line, dict) and isinstance(line.get("custom_id"), str):
                        answers[line["custom_id"]] = line
        results = {key: self._result(key, request, answers.get(key), batch) for key, request in items.items()}
        self.caller.stats.attempts += len(items)
        if batch.status in ("expired", "cancelled"):
            unanswered = sum(1 for r in results.values() if r.reply is None)
            then = {
                "online": "sent again online",
                "batch": "put into a follow-up batch",
                "none": "recorded as failures",
            }
            log.warning(
                "batch %s was %s%s: %d of %d calls unanswered; they are %s",
                batch.id,
                batch.status,
                " (the 24 h completion window passed)" if batch.status == "expired" else "",
                unanswered,
                len(results),
                then[self.settings.retry],
            )
        checkpoint.status = "done"
        checkpoint.ended_at = self.settings.clock()
        checkpoint.counts = {
            "answered": sum(1 for r in results.values() if r.reply is not None),
            "failed": sum(1 for r in results.values() if r.reply is None),
        }
        self._save(checkpoint)
        return results

    async def _poll(self, checkpoint: _Checkpoint) -> Any:
        """The batch once it has ended; transient errors while asking are retried at the next poll."""
        client = self.backend.connection.client()
        start = checkpoint.submitted_at if checkpoint.submitted_at is not None else self.settings.clock()
        deadline = start + self.settings.max_wait_s
        wait = self.settings.poll_initial_s
        status = "unknown"
        while True:
            try:
                batch = await self._api(client.batches.retrieve(checkpoint.batch_id), "check the batch")
                status = batch.status
                if status in TERMINAL_STATES:
                    return batch
                counts = batch.request_counts
                log.info(
                    "batch %s: %s%s",
                    checkpoint.batch_id,
                    status,
                    f", {counts.completed + counts.failed}/{counts.total} answered"
                    if counts is not None
                    else "",
                )
            except RetryableBackendError as exc:
                log.info("checking batch %s failed (%s); trying again", checkpoint.batch_id, exc)
            left = deadline - self.settings.clock()
            if left <= 0:
                raise BatchError(
                    f"batch {checkpoint.batch_id} is still {status} {self.settings.max_wait_s:g} s after it was "
                    f"submitted; its id is kept in {self.state_dir / checkpoint.name}: run the same command again "
                    "to wait for it (nothing is submitted twice)",
                    backend_id=self.backend.backend_id,
                )
            await self.settings.sleep(min(wait, left))
            wait = min(max(wait, 1e-3) * 2, self.settings.poll_max_s)

    async def _download(self, file_id: str) -> list[Any]:
        """The JSON lines of an output or error file, read through a client capped at ``max_output_bytes``."""
        from echo_builder.backends.bounded_http import capped_client

        connection = self.backend.connection
        timeout = max(connection.timeout_s, MIN_DOWNLOAD_TIMEOUT_S)
        client = connection.client().copy(
            http_client=capped_client(self.settings.max_output_bytes, timeout, connection.policy),
            timeout=timeout,
        )
        try:
            content = await self._api(client.files.content(file_id), f"download file {file_id}")
        finally:
            await client.close()
        lines = []
        for number, raw in enumerate(content.content.splitlines(), 1):
            if not raw.strip():
                continue
            try:
                lines.append(json.loads(raw))
            except ValueError:
                log.warning(
                    "batch file %s: line %d is not JSON; its call counts as unanswered", file_id, number
                )
        return lines

    def _result(
        self, key: str, request: CallRequest, answer: dict[str, Any] | None, batch: Any
    ) -> CallResult:
        from echo_builder.backends.caller import CallResult

        where = f"batch {batch.id}"
        response = answer.get("response") if answer is not None else None
        if isinstance(response, dict) and response.get("status_code") == 200:
            try:
                reply = self.caller._redacted(
                    self.backend.reply_from_completion(
                        response.get("body"), self._params(request), latency_s=0.0
                    )
                )
            except (ValueError, TypeError, KeyError, AttributeError) as exc:
                return self._failure(request, key, f"{where}: unreadable reply: {exc}", retryable=True)
            if self.candidates is not None:
                return self._store_candidates(request, key, reply)
            self.caller._store(request, key, reply)
            return CallResult(request, key, reply=reply, attempts=1)
        if answer is None:
            why = f"{where} ended {batch.status} without an answer for this call"
            return self._failure(request, key, why, retryable=True)
        if isinstance(response, dict) and isinstance(response.get("status_code"), int):
            status = response["status_code"]
            body = response.get("body")
            message = body.get("error", {}).get("message") if isinstance(body, dict) else None
            retryable = status in _RETRYABLE_STATUS or status >= 500
            return self._failure(
                request,
                key,
                f"{where}: HTTP {status}: {message or body!s:.300}",
                retryable=retryable,
                status=status,
            )
        error = answer.get("error") if isinstance(answer.get("error"), dict) else {}
        code, message = error.get("code"), error.get("message")
        return self._failure(
            request, key, f"{where}: {code or 'error'}: {message or 'no reason given'}", retryable=True
        )

    def _store_candidates(self, request: CallRequest, key: str, reply: Any) -> CallResult:
        """Turn a scoring reply into candidate probabilities (as the online path does) and cache them."""
        from echo_builder.backends.caller import CallResult
        from echo_builder.backends.openai_backend import candidate_scores_from_reply
        from echo_builder.cache import CacheWriteError

        try:
            scores = candidate_scores_from_reply(reply, self.candidates or (), self.backend.backend_id)
        except BackendError as exc:  # the online path's own error, word for word
            return self._failure(request, key, str(exc), retryable=False)
        if self.caller.cache is not None:
            try:
                self.caller.cache.put(
                    key,
                    scores.model_dump(mode="json"),
                    backend=self.backend.backend_id,
                    stage=request.stage,
                    prompt_version=request.prompt_version,
                    latency_s=0.0,
                )
            except CacheWriteError as exc:
                self.caller._halted = exc
                raise
        return CallResult(request, key, reply=reply, attempts=1)

    def _failure(
        self, request: CallRequest, key: str, why: str, *, retryable: bool, status: int | None = None
    ) -> CallResult:
        from echo_builder.backends.caller import CallResult

        error: BackendError = (
            RetryableBackendError(why, backend_id=self.backend.backend_id, status_code=status)
            if retryable
            else PermanentBackendError(why, backend_id=self.backend.backend_id, status_code=status)
        )
        return CallResult(
            request,
            key,
            error=redact(str(error)),
            error_kind="retries_exhausted" if retryable else "permanent",
            attempts=1,
        )

    async def _api(self, call: Awaitable[Any], what: str) -> Any:
        """Await one Files or Batches API call; client errors become :class:`BackendError` (retryable or not)."""
        from echo_builder.backends.openai_backend import translate_openai_error

        try:
            return await call
        except Exception as exc:
            translated = translate_openai_error(exc, self.backend.backend_id)
            if translated is exc:
                raise
            if isinstance(translated, RetryableBackendError) and what == "check the batch":
                raise translated from None
            raise BatchError(f"could not {what}: {translated}", backend_id=self.backend.backend_id) from None

    # -- checkpoints ---------------------------------------------------------------------------------------------------
    def _save(self, checkpoint: _Checkpoint) -> None:
        from echo_dataset.safe_io import ensure_dir, write_json

        ensure_dir(self.root, self.state_dir)
        write_json(self.root, self.state_dir / checkpoint.name, checkpoint.to_json(), sort_keys=True)

    def _open_checkpoints(self) -> list[_Checkpoint]:
        """Checkpoints of this backend whose batch has not been harvested, oldest first."""
        if not self.state_dir.is_dir():
            return []
        found = []
        for path in sorted(self.state_dir.glob("*.json")):
            if path.is_symlink():
                continue
            try:
                data = json.loads(path.read_text(encoding="utf-8"))
                checkpoint = _Checkpoint(
                    name=path.name,
                    backend=str(data["backend"]),
                    custom_ids=[str(k) for k in data["custom_ids"]],
                    status=str(data.get("status", "uploading")),
                    input_file_id=data.get("input_file_id"),
                    batch_id=data.get("batch_id"),
                    submitted_at=data.get("submitted_at"),
                )
            except (OSError, ValueError, KeyError, TypeError) as exc:
                log.warning("batch checkpoint %s is unreadable (%s); ignored", path, exc)
                continue
            if checkpoint.backend == self.backend.backend_id and checkpoint.status in (
                "uploading",
                "submitted",
            ):
                found.append(checkpoint)
        return sorted(found, key=lambda c: c.submitted_at or 0.0)


async def prefetch_candidates(
    caller: ModelCaller, requests: Sequence[CallRequest], candidates: Sequence[str]
) -> list[str | None]:
    """Answer the next-token scoring calls of ``requests`` (as :meth:`ModelCaller.acandidate_probabilities
    <echo_builder.backends.caller.ModelCaller.acandidate_probabilities>` would make them) in one Batch API job and
    store their candidate probabilities in the caller's cache, where the per-call path then finds them.

    Returns, per request, ``None`` (answered, cached before, or left to the online path: a transient failure with
    ``retry="online"``) or the reason its call failed for good (permanent, or ``retry`` ``batch``/``none``).
    Does nothing (all ``None``) when the caller has no batch settings or no cache.
    """
    if caller.batch is None or caller.cache is None or not requests:
        return [None] * len(requests)
    keys: list[str] = []
    todo: dict[str, CallRequest] = {}
    for request in requests:
        prepared = caller._prepare(request)
        key = caller._key(prepared, kind="candidates", extra={"candidates": list(candidates)})
        keys.append(key)
        if key not in todo and key not in caller.cache:
            todo[key] = prepared
    if not todo:
        return [None] * len(requests)
    runner = BatchRunner(caller, caller.batch)
    runner.candidates = tuple(candidates)
    results = await runner.run(list(todo.items()))
    errors: list[str | None] = []
    for key in keys:
        result = results.get(key)
        transient_online = (
            result is not None and result.error_kind == "retries_exhausted" and caller.batch.retry == "online"
        )
        errors.append(None if result is None or result.ok or transient_online else result.error)
    return errors


async def _gather_all(awaitables: Any) -> list[Any]:
    from echo_builder.backends.caller import gather_all

    return await gather_all(awaitables)
