"""Image preparation overlapping the judge calls: no idle concurrency while images are resized and encoded.

Judging one output means preparing its images (resize to the judge's short side, JPEG encode: tens of ms per
megapixel image) and then waiting for the judge (hundreds of ms to seconds). Preparing every image before the
first call leaves the call slots idle for the whole preparation; :func:`prepare_and_call` instead prepares in a
bounded thread pool (Pillow releases the GIL while resizing and encoding) and sends each call the moment its
request is ready, keeping at most ``lookahead`` items prepared or in flight, so memory stays bounded however many
items there are.

Identical requests (same cache key) are sent once and share the result, as
:meth:`~echo_builder.backends.caller.ModelCaller.acall_many` does. Backends with native batching (local models)
keep the batch path: everything is prepared, then sent in batches.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from pydantic import BaseModel

from echo_builder.backends.base import run_sync
from echo_builder.backends.caller import CallRequest, ModelCaller, StructuredResult, gather_all

__all__ = ["DEFAULT_PREP_WORKERS", "call_structured_overlapped", "prepare_and_call"]

T = TypeVar("T")
#: Threads preparing images: the CPU count, at most 8 (preparation is CPU-bound; more threads only queue).
DEFAULT_PREP_WORKERS = max(1, min(8, os.cpu_count() or 1))

#: What ``build`` returns for one item: entries of (metadata, a finished value or a request to send).
Entries = list[tuple[Any, Any]]


async def prepare_and_call(
    caller: ModelCaller,
    items: Sequence[T],
    build: Callable[[T], Entries],
    *,
    progress: str | None = None,
    workers: int = DEFAULT_PREP_WORKERS,
    schema: type[BaseModel] | None = None,
) -> list[tuple[Any, Any]]:
    """Run ``build`` on every item in a pool of ``workers`` threads and send each request it returns as soon as
    it is ready.

    Args:
        caller: the model caller (cache, concurrency, retries, budget).
        items: the items to judge.
        build: item -> ``[(meta, value)]``; a ``value`` that is a :class:`CallRequest` is sent, anything else
            (e.g. a ``missing_output`` verdict) is passed through. Runs in worker threads: it must be thread-safe.
        progress: a progress-bar label (shown on a terminal only), or ``None``.
        workers: preparation threads (>= 1).
        schema: send structured calls (:meth:`ModelCaller.acall_structured`: parse into ``schema``, re-ask once)
            and return :class:`~echo_builder.backends.caller.StructuredResult` in place of ``CallResult``.

    Returns:
        ``[(meta, value or CallResult)]`` for every entry of every item, in item order then entry order.

    Raises:
        whatever ``build`` or the caller raises (e.g. :class:`~echo_builder.errors.BudgetExceededError`), after
        every call already in flight has finished and been stored; no new item is started once one has failed.
    """
    if caller.backend.native_batching or getattr(caller, "batch", None) is not None:
        # local models batch natively, and a Batch API job takes every uncached request at once
        return await _prepare_then_batch(caller, items, build, progress, schema)
    from tqdm.auto import tqdm

    loop = asyncio.get_running_loop()
    lookahead = (
        caller.concurrency + 2 * workers
    )  # prepared-or-in-flight items: enough to keep every slot busy
    window = asyncio.Semaphore(lookahead)
    shared: dict[str, asyncio.Future[Any]] = {}
    slots: list[Entries | None] = [None] * len(items)
    failed: list[BaseException] = []
    bar = tqdm(total=len(items), desc=progress, disable=True if progress is None else None)

    async def send(request: CallRequest) -> Any:
        key = request.key(caller.backend.backend_id)
        pending = shared.get(key)
        if pending is not None:  # an identical request is (or was) in flight: share its result
            return await asyncio.shield(pending)
        future: asyncio.Future[Any] = loop.create_future()
        shared[key] = future
        try:
            result = await (
                caller.acall(request) if schema is None else caller.acall_structured(request, schema)
            )
        except BaseException as exc:
            future.set_exception(exc)
            future.exception()  # retrieved: a shared failure is raised by its owner, not logged as lost
            raise
        future.set_result(result)
        if _served_from_cache(result):
            # a cache hit answers at once (nothing can be waiting on it): a later duplicate looks itself up and
            # counts as a hit, as in ModelCaller.acall_many
            del shared[key]
        return result

    async def one(index: int, pool: ThreadPoolExecutor) -> None:
        try:
            entries = await loop.run_in_executor(pool, build, items[index])
            done: Entries = []
            calls = [send(v) for _, v in entries if isinstance(v, CallRequest)]
            results = iter(await gather_all(calls))
            for meta, value in entries:
                done.append((meta, next(results) if isinstance(value, CallRequest) else value))
            slots[index] = done
            bar.update(1)
        except BaseException as exc:
            failed.append(exc)
            raise
        finally:
            window.release()

    tasks: list[asyncio.Task[None]] = []
    with ThreadPoolExecutor(max_workers=max(1, workers), thread_name_prefix="judge-prep") as pool:
        try:
            for index in range(len(items)):
                await window.acquire()
                if failed:
                    window.release()
                    break
                tasks.append(asyncio.ensure_future(one(index, pool)))
            await gather_all(tasks)
        finally:
            bar.close()
            if caller.cache is not None:
                caller.cache.flush_counters()
    return [entry for entries in slots if entries is not None for entry in entries]


def _served_from_cache(result: Any) -> bool:
    """Whether a :class:`CallResult` (or every call of a :class:`StructuredResult`) came from the cache."""
    if isinstance(result, StructuredResult):
        return bool(result.calls) and all(c.cached for c in result.calls)
    return bool(result.cached)


def call_structured_overlapped(
    caller: ModelCaller,
    jobs: Sequence[T],
    build: Callable[[T], Any],
    schema: type[BaseModel],
    *,
    progress: str | None = None,
) -> list[Any]:
    """Structured calls for ``jobs`` (curation's VLM stages), each request built by ``build`` (image preparation)
    in the preparation pool while earlier calls are in flight; results in job order (see
    :func:`prepare_and_call`): a :class:`StructuredResult` per request, or what ``build`` returned instead of a
    request (e.g. the failure of an unreadable image), passed through."""

    def entries(job: T) -> Entries:
        return [(None, build(job))]

    done = run_sync(prepare_and_call(caller, jobs, entries, progress=progress, schema=schema))
    return [value for _, value in done]


async def _prepare_then_batch(
    caller: ModelCaller,
    items: Sequence[T],
    build: Callable[[T], Entries],
    progress: str | None,
    schema: type[BaseModel] | None = None,
) -> list[tuple[Any, Any]]:
    """Local models batch natively, and the Batch API answers a whole job: prepare everything, then one
    :meth:`ModelCaller.acall_many` (or :meth:`ModelCaller.acall_structured_many`)."""
    entries = [entry for item in items for entry in build(item)]
    requests = [v for _, v in entries if isinstance(v, CallRequest)]
    if schema is None:
        answered: list[Any] = await caller.acall_many(requests, progress=progress)
    else:
        answered = await caller.acall_structured_many(requests, schema, progress=progress)
    results = iter(answered)
    return [(meta, next(results) if isinstance(v, CallRequest) else v) for meta, v in entries]
