"""Small example data bundled with the package, authored for echo-bench (no third-party content).

- ``example_votes.jsonl``: 600 pairwise votes among four fictional image models, drawn from a Bradley-Terry model
  with known strengths (see :func:`make_example_votes`), so the leaderboard command has something real to rank
  offline. True order: ``aurora-xl`` > ``brushwork-2`` > ``canvas-lite`` > ``doodle-mini``.
"""

from __future__ import annotations

import json
import random
from importlib.resources import files
from pathlib import Path

__all__ = ["EXAMPLE_STRENGTHS", "example_votes_path", "make_example_votes"]

#: Bradley-Terry strengths of the fictional models (P(i beats j) = s_i / (s_i + s_j), before ties).
EXAMPLE_STRENGTHS = {"aurora-xl": 4.0, "brushwork-2": 2.0, "canvas-lite": 1.0, "doodle-mini": 0.5}


def example_votes_path() -> Path:
    """Path of the bundled ``example_votes.jsonl``."""
    return Path(str(files("echo_builder.examples") / "example_votes.jsonl"))


def make_example_votes(
    n: int = 600, *, tie_rate: float = 0.15, seed: int = 20260329
) -> list[dict[str, object]]:
    """Regenerate the example votes: uniform random pairs, a tie with probability ``tie_rate``, else a
    Bradley-Terry draw from :data:`EXAMPLE_STRENGTHS`. Deterministic for a given seed."""
    rng = random.Random(seed)
    models = sorted(EXAMPLE_STRENGTHS)
    votes = []
    for i in range(n):
        a, b = rng.sample(models, 2)
        if rng.random() < tie_rate:
            winner = rng.choice(["tie", "tie (bothbad)"])
        else:
            p_a = EXAMPLE_STRENGTHS[a] / (EXAMPLE_STRENGTHS[a] + EXAMPLE_STRENGTHS[b])
            winner = "model_a" if rng.random() < p_a else "model_b"
        votes.append({"model_a": a, "model_b": b, "winner": winner, "tstamp": 1_767_225_600 + 60 * i})
    return votes


def _write() -> None:  # python -c "from echo_builder.examples import _write; _write()"
    with open(example_votes_path(), "w") as f:
        for vote in make_example_votes():
            f.write(json.dumps(vote) + "\n")
