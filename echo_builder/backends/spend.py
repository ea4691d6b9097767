"""Token accounting and a spending cap for one :class:`~echo_builder.backends.caller.ModelCaller`.

:class:`UsageMeter` adds up the tokens of every reply a caller hands out, per call stage, split into replies
served from the cache and calls made now. The first total prices "what this build or run's replies cost" (the same
on a resumed run, so it can go into ``report.json``); the second prices what this invocation spent.

:class:`Budget` is ``--max-cost``: before each call it reserves an estimate of that call's cost, and refuses the
call with :class:`~echo_builder.errors.BudgetExceededError` when spent + reserved + estimate would pass the cap;
when the reply comes the reservation is settled with the tokens the server reported.

The estimate of a call: output = its ``max_tokens`` (an upper bound; :data:`DEFAULT_MAX_OUTPUT_TOKENS` when unset);
input = ``ceil(characters / 3)`` of its text + :data:`IMAGE_TOKENS` per image, scaled up by the largest ratio of
reported to estimated input tokens seen so far in the same stage. Until the first reply of a stage has come, that
stage's calls go one at a time, so the ratio is known before calls run in parallel on a guess. The cap holds as
long as no call uses more input tokens than its stage's worst ratio predicts (never on an output overrun).
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import math
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass
from typing import Any

from echo_builder.backends.base import GenerationParams, ImagePart, Message, TextPart, Usage
from echo_builder.errors import BudgetExceededError, ConfigError
from echo_builder.prices import PriceTable, TokenCost

__all__ = [
    "DEFAULT_MAX_OUTPUT_TOKENS",
    "IMAGE_TOKENS",
    "Budget",
    "UsageMeter",
    "estimate_input_tokens",
    "hold",
]

#: Tokens assumed per image before any reply calibrated the estimate: OpenAI's high-detail count for a
#: 768 x 1152 px image (85 + 170 per 512 px tile, 6 tiles), above what a 512 px judge image costs there.
IMAGE_TOKENS = 1105
#: Output tokens assumed for a call that sets no ``max_tokens``.
DEFAULT_MAX_OUTPUT_TOKENS = 4096


def estimate_input_tokens(messages: Sequence[Message]) -> int:
    """Rule-of-thumb input tokens of ``messages``: ``ceil(characters / 3)`` of the text + :data:`IMAGE_TOKENS`
    per image (English averages about 4 characters per token, so the text part errs high)."""
    chars = 0
    images = 0
    for message in messages:
        for part in message.content:
            if isinstance(part, TextPart):
                chars += len(part.text)
            elif isinstance(part, ImagePart):
                images += 1
    return math.ceil(chars / 3) + IMAGE_TOKENS * images


class UsageMeter:
    """Tokens per call stage: ``all`` replies handed out (cache hits included) and ``fresh`` ones (called now)."""

    def __init__(self) -> None:
        self.all: dict[str, list[int]] = {}
        self.fresh: dict[str, list[int]] = {}

    def record(self, stage: str, usage: Usage, *, cached: bool) -> None:
        """Count a reply of ``stage`` (tokens the backend did not report count as 0)."""
        tokens = (usage.input_tokens or 0, usage.output_tokens or 0)
        for table in (self.all,) if cached else (self.all, self.fresh):
            row = table.setdefault(stage, [0, 0])
            row[0] += tokens[0]
            row[1] += tokens[1]

    def totals(self, *, fresh: bool = False) -> tuple[int, int]:
        """``(input_tokens, output_tokens)`` over all stages."""
        table = self.fresh if fresh else self.all
        return sum(r[0] for r in table.values()), sum(r[1] for r in table.values())

    def snapshot(self) -> dict[str, tuple[int, int]]:
        """A copy of the ``all`` table, to take the difference a later stage added (:meth:`since`)."""
        return {k: (v[0], v[1]) for k, v in self.all.items()}

    def since(self, before: dict[str, tuple[int, int]]) -> tuple[int, int]:
        """``(input_tokens, output_tokens)`` added to the ``all`` table since ``before``."""
        now = self.snapshot()
        return (
            sum(v[0] - before.get(k, (0, 0))[0] for k, v in now.items()),
            sum(v[1] - before.get(k, (0, 0))[1] for k, v in now.items()),
        )

    def costs(self, prices: PriceTable, model: str, *, fresh: bool = False) -> dict[str, TokenCost]:
        """stage -> :class:`~echo_builder.prices.TokenCost` (``usd`` ``None`` when ``model`` has no price)."""
        table = self.fresh if fresh else self.all
        return {stage: prices.cost(model, i, o) for stage, (i, o) in sorted(table.items())}


@dataclass
class _Purse:
    """Dollars spent and reserved, shared by the budgets of one run (one per judge of an ensemble)."""

    spent_usd: float = 0.0
    reserved_usd: float = 0.0


@dataclass
class _Ticket:
    """One reserved call: its stage, estimated input tokens and cost, and the calibration lock it holds."""

    stage: str
    rule_input: int
    usd: float
    lock: asyncio.Lock | None


class Budget:
    """A cap on what the calls of one run may cost (``--max-cost``), checked before each call.

    Args:
        max_usd: the cap in US dollars, finite and > 0.
        prices: the price table.
        model: the backend spec or model whose price applies (e.g. ``openai:gpt-4o``).
        batch: price calls at the Batch API's prices.

    Raises:
        ConfigError: ``max_usd`` is not a finite number > 0, or ``model`` has no price (a cap on an unpriced model
            could not stop anything).
    """

    def __init__(
        self,
        max_usd: float,
        prices: PriceTable,
        model: str,
        *,
        batch: bool = False,
    ) -> None:
        if isinstance(max_usd, bool) or not isinstance(max_usd, (int, float)) or not math.isfinite(max_usd):
            raise ConfigError(f"--max-cost must be a number of US dollars > 0, got {max_usd!r}")
        if max_usd <= 0:
            raise ConfigError(f"--max-cost must be a number of US dollars > 0, got {max_usd!r}")
        self._prices = prices
        price = prices.lookup(model)
        if price is None:
            raise ConfigError(
                f"--max-cost: no price for {model!r}; add an entry for it to a --prices file "
                "(see echo_builder/prices.yaml for the shape)"
            )
        self.max_usd = float(max_usd)
        self.model = model
        self.price = price[1]
        self.batch = batch
        self._purse = _Purse()
        self._ratio: dict[str, float] = {}  # stage -> largest reported / rule-estimated input tokens
        self._locks: dict[tuple[int, str], asyncio.Lock] = {}

    def for_model(self, model: str) -> Budget:
        """A budget for another model's calls drawing on the same cap and spending (an ensemble of judges).

        Raises:
            ConfigError: ``model`` has no price.
        """
        found = self._prices.lookup(model)
        if found is None:
            raise ConfigError(
                f"--max-cost: no price for {model!r}; add an entry for it to a --prices file "
                "(see echo_builder/prices.yaml for the shape)"
            )
        other = copy.copy(self)  # the purse object is shared; estimates and calibration are per model
        other.model, other.price = model, found[1]
        other._ratio, other._locks = {}, {}
        return other

    @property
    def spent_usd(self) -> float:
        """US dollars the settled calls cost (shared with :meth:`for_model` budgets)."""
        return self._purse.spent_usd

    @spent_usd.setter
    def spent_usd(self, value: float) -> None:
        self._purse.spent_usd = value

    @property
    def reserved_usd(self) -> float:
        """US dollars reserved by calls in flight."""
        return self._purse.reserved_usd

    @reserved_usd.setter
    def reserved_usd(self, value: float) -> None:
        self._purse.reserved_usd = value

    def estimate_usd(self, messages: Sequence[Message], params: GenerationParams, stage: str) -> float:
        """Estimated cost in USD of one call (see the module docstring)."""
        rule = estimate_input_tokens(messages)
        return self._estimate(rule, params, stage)

    def _estimate(self, rule_input: int, params: GenerationParams, stage: str) -> float:
        input_tokens = math.ceil(rule_input * max(1.0, self._ratio.get(stage, 1.0)))
        output_tokens = params.max_tokens or DEFAULT_MAX_OUTPUT_TOKENS
        return self.price.cost(input_tokens, output_tokens, batch=self.batch)

    async def reserve(self, messages: Sequence[Message], params: GenerationParams, stage: str) -> _Ticket:
        """Reserve the estimated cost of one call, waiting while the stage's first call calibrates the estimate.

        Raises:
            BudgetExceededError: spent + reserved + this estimate would pass :attr:`max_usd`.
        """
        lock = None
        if stage not in self._ratio:
            lock = self._locks.setdefault((id(asyncio.get_running_loop()), stage), asyncio.Lock())
            await lock.acquire()
            if stage in self._ratio:  # calibrated while this call waited
                lock.release()
                lock = None
        rule = estimate_input_tokens(messages)
        usd = self._estimate(rule, params, stage)
        if self.spent_usd + self.reserved_usd + usd > self.max_usd:
            if lock is not None:
                lock.release()
            raise BudgetExceededError(
                f"--max-cost {self.max_usd:g} USD reached: {self.spent_usd:.4f} USD spent, "
                f"{self.reserved_usd:.4f} USD in flight, and the next {stage} call is estimated at {usd:.4f} USD. "
                "Every reply so far is kept in the call cache: run the same command again with a higher "
                "--max-cost (builds: add --resume) to continue without repeating a paid call.",
                max_usd=self.max_usd,
                spent_usd=self.spent_usd,
            )
        self.reserved_usd += usd
        return _Ticket(stage, rule, usd, lock)

    def settle(self, ticket: _Ticket, usage: Usage | None) -> None:
        """Replace the reservation with the cost of the reported tokens (the estimate when none were reported)."""
        self.reserved_usd = max(0.0, self.reserved_usd - ticket.usd)
        if usage is None or usage.input_tokens is None or usage.output_tokens is None:
            self.spent_usd += ticket.usd
        else:
            self.spent_usd += self.price.cost(usage.input_tokens, usage.output_tokens, batch=self.batch)
            if ticket.rule_input > 0:
                ratio = usage.input_tokens / ticket.rule_input
                self._ratio[ticket.stage] = max(self._ratio.get(ticket.stage, 0.0), ratio)
        self._ratio.setdefault(ticket.stage, 1.0)
        self._unlock(ticket)

    def release(self, ticket: _Ticket) -> None:
        """Drop the reservation of a call that failed (a failed call is not charged)."""
        self.reserved_usd = max(0.0, self.reserved_usd - ticket.usd)
        self._unlock(ticket)

    @staticmethod
    def _unlock(ticket: _Ticket) -> None:
        if ticket.lock is not None and ticket.lock.locked():
            ticket.lock.release()
            ticket.lock = None

    def summary(self) -> dict[str, Any]:
        """``{"max_usd", "spent_usd"}`` for run records."""
        return {"max_usd": self.max_usd, "spent_usd": round(self.spent_usd, 6)}


@contextlib.asynccontextmanager
async def hold(
    budget: Budget | None, messages: Sequence[Message], params: GenerationParams, stage: str
) -> AsyncIterator[Callable[[Usage | None], None]]:
    """Reserve one call's estimate on ``budget`` around the call; yields ``charge(usage)`` to settle it with the
    reported tokens (``None``: charge the estimate). A call that leaves without being charged (it failed) releases
    its reservation. With ``budget=None`` nothing is checked and ``charge`` does nothing.

    Raises:
        BudgetExceededError: on entry, when the call would pass the cap (see :meth:`Budget.reserve`).
    """
    if budget is None:
        yield lambda usage: None
        return
    ticket = await budget.reserve(messages, params, stage)
    charged = False

    def charge(usage: Usage | None) -> None:
        nonlocal charged
        if not charged:
            budget.settle(ticket, usage)
            charged = True

    try:
        yield charge
    finally:
        if not charged:
            budget.release(ticket)
