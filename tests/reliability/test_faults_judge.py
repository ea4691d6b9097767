"""`judge` against a loopback VLM injecting 5%, 20% and 50% faults: same verdicts, or counted failures.

The scripted judge rates each output by a hash of the image it is shown, so a verdict depends only on its
request. The oracle is the server's log (:func:`tests.helpers.reliability.item_outcomes`): a judgment whose last
attempt failed is an ``error`` verdict; one whose answer had the wrong fields twice (or whose re-ask never got
through) is a ``parse_failure``; every other verdict must equal the fault-free run's
(:func:`tests.helpers.reliability.check_judge_faults`). Larger runs: ``python -m bench.reliability faults``.
"""

from __future__ import annotations

import pytest

from tests.helpers.openai_server import ALL_FAULT_KINDS, FakeOpenAIServer
from tests.helpers.reliability import check_judge_faults, fault_plan, run_judge
from tests.helpers.scenarios import JudgeScenario

N_SAMPLES = 8


@pytest.fixture(scope="module")
def scenario(tmp_path_factory):
    folder = tmp_path_factory.mktemp("faults-judge")
    sc = JudgeScenario(N_SAMPLES, folder)
    clean = {}
    with FakeOpenAIServer(sc.reply) as server:
        for mode in ("single", "pairwise"):
            clean[mode] = run_judge(sc, folder / f"clean-{mode}", server, mode=mode, max_attempts=1).verdicts
    assert all(v.status in ("ok", "missing_output") for vs in clean.values() for v in vs)
    return sc, sc.output_keys(), clean


@pytest.mark.slow
@pytest.mark.parametrize(
    ("mode", "rate", "max_attempts", "seed"),
    [("single", 0.05, 4, 3), ("single", 0.20, 6, 20), ("single", 0.50, 3, 50), ("pairwise", 0.50, 3, 51)],
    ids=["single-5%", "single-20%", "single-50%-tight-budget", "pairwise-50%-tight-budget"],
)
def test_judge_under_faults_equals_the_clean_run_or_counts_each_loss(
    scenario, fast_retries, tmp_path, mode, rate, max_attempts, seed
):
    sc, output_keys, clean = scenario
    with FakeOpenAIServer(sc.reply, faults=fault_plan(rate, seed)) as server:
        run_judge(sc, tmp_path / "run", server, mode=mode, max_attempts=max_attempts)
        bodies, faults = list(server.log.bodies), list(server.log.faults)
    summary = check_judge_faults(
        sc, output_keys, tmp_path / "run", clean[mode], bodies, faults, mode=mode, max_attempts=max_attempts
    )
    assert summary["faults"] >= 2  # faults were injected at every rate
    if rate < 0.5:
        assert summary["identical"]
    else:
        assert set(faults) - {""} == set(ALL_FAULT_KINDS) and summary["lost"] >= 3
