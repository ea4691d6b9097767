"""Which process am I: one process, or one of K launched by ``accelerate launch --num_processes K``.

Under ``accelerate launch`` (``WORLD_SIZE > 1``) this is accelerate's ``PartialState``: ranks, the per-process
device (``cuda:<local rank>``), a barrier and ``split_between_processes``. On a machine without an accelerator,
CPU processes launched together (``accelerate launch --multi_gpu --num_processes K`` with no GPU) still form one
gloo group. A plain single process needs neither torch nor accelerate (the ``openai-images:`` and ``command:``
generators run without them).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

__all__ = ["Processes", "accelerate_state", "processes"]

T = TypeVar("T")


def accelerate_state() -> Any:
    """accelerate's ``PartialState``, CPU-only when the machine has no CUDA or MPS device."""
    import torch
    from accelerate import PartialState

    mps = getattr(torch.backends, "mps", None)
    has_accelerator = torch.cuda.is_available() or bool(mps and mps.is_available())
    return PartialState(cpu=not has_accelerator)


@dataclass
class Processes:
    """This process's place among the processes of a run.

    Attributes:
        rank: 0-based process index (0 is the main process).
        num_processes: how many processes share the run (>= 1).
        state: accelerate's ``PartialState`` when launched with several processes, else ``None``.
    """

    rank: int = 0
    num_processes: int = 1
    state: Any = None

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    def wait(self) -> None:
        """Barrier: return once every process got here (no-op in a single process)."""
        if self.state is not None:
            self.state.wait_for_everyone()

    def split(self, items: Sequence[T]) -> list[T]:
        """This process's contiguous share of ``items`` (every process must pass the same list)."""
        if self.state is None:
            return list(items)
        with self.state.split_between_processes(list(items)) as mine:
            return list(mine)


def processes() -> Processes:
    """The current :class:`Processes`; imports accelerate only when several processes were launched."""
    if int(os.environ.get("WORLD_SIZE", "1")) <= 1:
        return Processes()
    state = accelerate_state()
    return Processes(rank=state.process_index, num_processes=state.num_processes, state=state)
