"""One judge served by several replicas of the same model (``--base-url`` given more than once).

:class:`ReplicatedBackend` holds one backend per replica (the same spec and options, a different ``base_url``) and
answers as one backend with the spec's id, so the call cache, verdicts and reports do not depend on which replica
answered. Each call goes to the replica with the fewest calls outstanding (ties: the one chosen longest ago), and
fails over to the next replica not yet tried for that call when one raises a
:class:`~echo_builder.errors.BackendError` (HTTP errors, timeouts, refused connections); the last error is raised
when every replica failed, for the :class:`~echo_builder.backends.caller.ModelCaller` to retry as usual. The
replica that answered is recorded in :attr:`Reply.served_by <echo_builder.backends.base.Reply.served_by>` (and so
in each verdict), with per-replica counts in :meth:`ReplicatedBackend.spread`.

This is meant for a handful of replicas; beyond that, put a router in front of them (SGLang's router, vLLM's
production-stack router, a LiteLLM proxy) and give its one URL (docs/backends.md).
"""

from __future__ import annotations

import itertools
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar

from echo_builder.backends.base import Backend, CandidateScores, GenerationParams, Message, Reply
from echo_builder.errors import BackendError, ConfigError
from echo_builder.secrets import get_logger, redact

__all__ = ["ReplicatedBackend"]

log = get_logger(__name__)
T = TypeVar("T")
#: Most replicas one judge spreads calls over (more: use a router, see the module docstring).
MAX_REPLICAS = 16


class ReplicatedBackend(Backend):
    """Several replicas of one model behind one backend id: least outstanding requests, failover on errors.

    Args:
        replicas: the replica backends (2 to :data:`MAX_REPLICAS`), all of one spec (same ``backend_id``).
        labels: what names each replica in records (its base URL), in the same order; secrets are redacted.

    Raises:
        ConfigError: fewer than 2 or more than :data:`MAX_REPLICAS` replicas, labels of another length or
            repeated, or replicas of different specs.
    """

    def __init__(self, replicas: Sequence[Backend], labels: Sequence[str]) -> None:
        if not 2 <= len(replicas) <= MAX_REPLICAS:
            raise ConfigError(
                f"a judge takes 2 to {MAX_REPLICAS} replica URLs, got {len(replicas)}; for more, put a router "
                "(SGLang router, vLLM production-stack router, LiteLLM proxy) in front and give its URL"
            )
        if len(labels) != len(replicas) or len(set(labels)) != len(labels):
            raise ConfigError(f"replica URLs must be distinct, one per replica: {list(labels)}")
        ids = {r.backend_id for r in replicas}
        if len(ids) != 1:
            raise ConfigError(f"replicas of one judge must share one spec, got {sorted(ids)}")
        first = replicas[0]
        super().__init__(first.target)
        self.name = first.name  # type: ignore[misc]  (the spec's backend: ids, cache keys and plugin checks)
        self.replicas = list(replicas)
        self.labels = [redact(label) for label in labels]
        self.outstanding = [0] * len(replicas)
        self.answered = [0] * len(replicas)
        self.failed = [0] * len(replicas)
        self._ticks = itertools.count()
        self._last_pick = [-1] * len(replicas)

    # -- what the wrapped backends share --------------------------------------------------------------------------------
    def cache_settings(self) -> dict[str, Any]:
        return self.replicas[0].cache_settings()

    def vision_frame(self, width: int, height: int) -> tuple[int, int]:
        return self.replicas[0].vision_frame(width, height)

    # -- routing ------------------------------------------------------------------------------------------------------
    def _pick(self, tried: set[int]) -> int:
        """The untried replica with the fewest calls outstanding; ties go to the one picked longest ago."""
        free = [i for i in range(len(self.replicas)) if i not in tried]
        best = min(free, key=lambda i: (self.outstanding[i], self._last_pick[i], i))
        self._last_pick[best] = next(self._ticks)
        return best

    async def _route(self, call: Callable[[Backend], Awaitable[T]]) -> tuple[T, int]:
        tried: set[int] = set()
        last: BackendError | None = None
        while len(tried) < len(self.replicas):
            i = self._pick(tried)
            tried.add(i)
            self.outstanding[i] += 1
            try:
                result = await call(self.replicas[i])
            except BackendError as exc:
                self.failed[i] += 1
                last = exc
                log.info("replica %s of %s failed (%s); trying another", self.labels[i], self.backend_id, exc)
                continue
            finally:
                self.outstanding[i] -= 1
            self.answered[i] += 1
            return result, i
        assert last is not None
        raise last  # every replica failed: the caller retries (transient) or records the failure

    async def agenerate(self, messages: Sequence[Message], params: GenerationParams) -> Reply:
        reply, i = await self._route(lambda backend: backend.agenerate(messages, params))
        return reply.model_copy(update={"served_by": self.labels[i]})

    async def acandidate_probabilities(
        self, messages: Sequence[Message], candidates: Sequence[str], params: GenerationParams | None = None
    ) -> CandidateScores:
        scores, _ = await self._route(
            lambda backend: backend.acandidate_probabilities(messages, candidates, params)
        )
        return scores

    def spread(self) -> dict[str, dict[str, int]]:
        """Per replica label: calls ``answered`` and ``failed`` (failed over to another replica) so far."""
        return {
            label: {"answered": self.answered[i], "failed": self.failed[i]}
            for i, label in enumerate(self.labels)
        }

    async def aclose(self) -> None:
        for backend in self.replicas:
            await backend.aclose()
