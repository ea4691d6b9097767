"""`echo-bench judge` killed with SIGKILL at a random moment, then rerun: same verdicts, no call repeated.

A judge run resumes by running the same command again: every answered call is in ``RUN/cache`` (committed the
moment it arrives) and ``verdicts.parquet`` is written atomically at the end. Each trial runs the real CLI in a
subprocess against the loopback judge (100 ms per call), kills it after a seeded random call (or, in the last
trial, after the last call, while the verdicts are written), reruns it until it completes, and compares with an
uninterrupted run. Three trials here; ``python -m bench.reliability kill --trials 10`` runs ten.
"""

from __future__ import annotations

import os
import random

import pytest

from tests.conftest import REPO_ROOT
from tests.helpers.kill_resume import comparable_judge_run, draw_kills, judge_command, kill_and_resume
from tests.helpers.openai_server import FakeOpenAIServer
from tests.helpers.scenarios import JudgeScenario

N_SAMPLES = 10
CONCURRENCY = 4  # the default of judge_command
SEED = 9


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory):
    folder = tmp_path_factory.mktemp("kill-judge")
    env = dict(os.environ, PYTHONPATH=str(REPO_ROOT))
    sc = JudgeScenario(N_SAMPLES, folder)
    with FakeOpenAIServer(sc.reply, latency_s=0.1) as llm:
        clean = folder / "clean"
        trial = kill_and_resume(
            judge_command(sc, clean, llm), resume=[], cache_dir=clean / "cache", llm=llm, kills=[], env=env
        )
        assert trial.runs == 1 and trial.calls == [3 * N_SAMPLES - 1]  # one output is missing: no call
        tail_s = trial.wall_s - trial.last_call_at_s
        yield {"sc": sc, "llm": llm, "env": env, "clean": clean, "calls": trial.calls[0], "tail_s": tail_s}


@pytest.mark.slow
@pytest.mark.parametrize("trial", range(3))
def test_judge_killed_at_a_random_moment_reruns_to_identical_verdicts(uninterrupted, tmp_path, trial):
    u = uninterrupted
    rng = random.Random(SEED * 1000 + trial)
    # trial 0: one kill after a random call; 1: two such kills; 2: one kill after the last call
    kills = draw_kills(
        rng, u["calls"], u["tail_s"], kills=2 if trial == 1 else 1, first=("call", "call", "tail")[trial]
    )
    out = tmp_path / "killed"
    result = kill_and_resume(
        judge_command(u["sc"], out, u["llm"]), resume=[], cache_dir=out / "cache", llm=u["llm"], kills=kills,
        env=u["env"],
    )  # fmt: skip
    assert result.kills >= 1, f"the run finished before its kill point {kills}"
    assert result.repeated_calls == 0
    # each kill loses at most the calls its process had sent and not yet stored: ModelCaller stores a reply before
    # freeing its slot, so no more than the concurrency (counted per kill: a resumed run may send the calls the
    # previous kill lost in another order, and die before re-sending all of them)
    assert all(n <= CONCURRENCY for n in result.in_flight_resent), (
        f"sent again, per kill: {result.in_flight_resent}"
    )
    assert comparable_judge_run(out) == comparable_judge_run(u["clean"])
