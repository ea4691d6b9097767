"""`build` against a loopback VLM injecting 5%, 20% and 50% faults: same result, or counted failures.

Every fault kind of the fake server is drawn (429 with Retry-After, 500, timeouts, dropped connections before
and during the reply, garbage, truncated JSON, JSON without ``choices``, and well-formed replies whose JSON has
the wrong fields). Which attempt fails is a hash of the request and its attempt number, so each case is
reproducible. The oracle is the server's own log (:func:`tests.helpers.reliability.item_outcomes`): a call whose
last attempt failed, or whose re-ask never got a valid answer, is lost; every lost call must be a counted failure
of its stage, and everything else must equal the fault-free run exactly
(:func:`tests.helpers.reliability.check_build_faults`). Larger runs: ``python -m bench.reliability faults``.
"""

from __future__ import annotations

import pytest

from echo_builder.structured import parse_structured
from tests.helpers.media_server import MediaServer
from tests.helpers.openai_server import ALL_FAULT_KINDS, FakeOpenAIServer
from tests.helpers.reliability import check_build_faults, fault_plan, run_build
from tests.helpers.scenarios import CurationScenario

N_THREADS = 18


@pytest.fixture(scope="module")
def scenario(tmp_path_factory):
    """The posts (on a module-wide media server, so image URLs are the same in every run) and a clean build."""
    folder = tmp_path_factory.mktemp("faults-build")
    with MediaServer() as media, FakeOpenAIServer() as server:
        sc = CurationScenario(N_THREADS, media)
        posts = sc.write(folder / "posts.jsonl")
        server.reply = sc.reply
        clean = run_build(posts, folder / "clean", server, max_attempts=1)
        assert all(s["failures"] == 0 for s in clean.report["stages"])
        yield sc, posts, folder / "clean"


@pytest.mark.slow
@pytest.mark.parametrize(
    ("rate", "max_attempts", "seed"),
    [(0.05, 4, 5), (0.20, 6, 20), (0.50, 3, 50)],
    ids=["5%", "20%", "50%-tight-budget"],
)
def test_build_under_faults_equals_the_clean_run_or_counts_each_loss(
    scenario, fast_retries, tmp_path, rate, max_attempts, seed
):
    sc, posts, clean = scenario
    with FakeOpenAIServer(sc.reply, faults=fault_plan(rate, seed)) as server:
        run_build(posts, tmp_path / "faulted", server, max_attempts=max_attempts)
        bodies, faults = list(server.log.bodies), list(server.log.faults)
    summary = check_build_faults(sc, tmp_path / "faulted", clean, bodies, faults, max_attempts=max_attempts)
    assert summary["faults"] >= 2  # faults were injected at every rate
    if rate < 0.5:  # a budget of 4-6 attempts recovers every call here: byte-identical to the clean build
        assert summary["identical"] and summary["reasked"] >= 1
    else:  # 3 attempts at 50%: calls are lost, each a counted failure; the surviving samples are identical
        assert set(faults) - {""} == set(ALL_FAULT_KINDS)
        assert summary["lost"] >= 3 and summary["compared_samples"] >= 5


def test_json_with_the_wrong_fields_is_rejected_even_when_every_field_has_a_default():
    """Regression: roles/applicability/screenshots answers have all-default schemas, so ``{"result": "ok"}``
    used to validate as an empty answer (images unassigned, flags unknown) instead of being re-asked."""
    from echo_builder.errors import StructuredOutputError
    from echo_builder.stages.roles import RolesAnswer
    from echo_builder.stages.tier import ApplicabilityAnswer

    with pytest.raises(StructuredOutputError, match="none of its fields") as info:
        parse_structured('{"result": "ok", "items": []}', RolesAnswer)
    assert info.value.raw_text == '{"result": "ok", "items": []}'
    with pytest.raises(StructuredOutputError, match="found an empty object"):
        parse_structured("{}", ApplicabilityAnswer)
    # one known field is enough: the others stay unknown, as the stage documents
    assert parse_structured('{"structure": true, "extra": 1}', ApplicabilityAnswer) == ApplicabilityAnswer(
        structure=True
    )
    assert parse_structured('{"outputs": [1]}', RolesAnswer).outputs == [1]
