"""One judge over several replicas: least outstanding requests, failover, the replica recorded per verdict."""

from __future__ import annotations

import itertools
import json
import threading
from collections import Counter

import pytest
from click.testing import CliRunner
from PIL import Image

from echo_builder.backends import create_backend
from echo_builder.backends.replicas import ReplicatedBackend
from echo_builder.cli import cli
from echo_builder.errors import ConfigError
from echo_builder.judge.run import read_verdicts, run_judging
from tests.helpers.benchmark import make_benchmark, make_outputs
from tests.helpers.openai_server import FakeOpenAIServer, FaultPlan

SAMPLES = [f"s{i}" for i in range(10)]


@pytest.fixture
def bench(tmp_path):
    folder = make_benchmark(
        tmp_path / "bench", "text_to_image", [{"id": s, "prompt": f"prompt {s}"} for s in SAMPLES]
    )
    outputs = make_outputs(
        tmp_path / "outputs",
        {
            m: {s: Image.new("RGB", (24, 24), (i * 20, 40 + 60 * j, 30)) for i, s in enumerate(SAMPLES)}
            for j, m in enumerate(("m1", "m2", "m3"))
        },
    )
    return folder, outputs


def _every_other():
    """A fault predicate that fails every second request it sees (exactly half, whatever the order)."""
    counter = itertools.count()
    lock = threading.Lock()

    def fail(body):
        with lock:
            return next(counter) % 2 == 0

    return fail


def _answered(server) -> list[str]:
    """Digests of the requests a server answered (no fault)."""
    return [d for d, f in zip(server.log.digests, server.log.faults, strict=True) if not f]


def test_three_replicas_one_failing_half_its_calls(bench, tmp_path):
    folder, outputs = bench
    servers = [
        FakeOpenAIServer(lambda body: "Fine. [[7]]", latency_s=0.02),
        FakeOpenAIServer(lambda body: "Fine. [[7]]", latency_s=0.02),
        FakeOpenAIServer(
            lambda body: "Fine. [[7]]",
            latency_s=0.02,
            faults=FaultPlan(always=_every_other(), always_kind="500"),
        ),
    ]
    for server in servers:
        server.start()
    try:
        urls = [s.base_url for s in servers]
        result = run_judging(
            folder,
            "text_to_image",
            outputs,
            ["openai:judge"],
            tmp_path / "run",
            judge_options={"openai:judge": {"base_urls": urls}},
            concurrency=6,
            max_attempts=1,  # no retry by the caller: the failover alone must answer every call
            progress=False,
        )
    finally:
        for server in servers:
            server.stop()
    verdicts = read_verdicts(tmp_path / "run")
    assert len(verdicts) == 30 and all(v.status == "ok" and v.rating == 7 for v in verdicts)
    answered = [_answered(s) for s in servers]
    # every call answered exactly once over the three replicas: none lost, none answered twice
    flat = [d for per in answered for d in per]
    assert len(flat) == 30 and len(set(flat)) == 30
    # the failing replica failed half of what it was sent, and each failure was answered elsewhere
    faults = servers[2].log.faults
    assert faults.count("500") == (len(faults) + 1) // 2 and faults.count("500") >= 1
    # the verdicts and run.json record which replica answered, matching what each server answered
    by_verdict = Counter(v.replica for v in verdicts)
    assert by_verdict == Counter({u: len(a) for u, a in zip(urls, answered, strict=True) if a})
    spread = json.loads((tmp_path / "run" / "run.json").read_text())["judges"][0]["replicas"]
    assert spread == {
        u: {"answered": len(a), "failed": s.log.faults.count("500")}
        for u, a, s in zip(urls, answered, servers, strict=True)
    }
    assert all(len(a) >= 3 for a in answered[:2])  # the healthy replicas share the load
    assert result.summary["judges"][0]["spec"] == "openai:judge"


def test_least_outstanding_choice_and_failover_on_timeout(bench, tmp_path):
    """A replica that hangs past the backend's timeout fails over; the two others take the calls."""
    folder, outputs = bench
    fast = [FakeOpenAIServer(lambda body: "Ok. [[5]]", latency_s=0.05) for _ in range(2)]
    hung = FakeOpenAIServer(
        lambda body: "Ok. [[5]]", faults=FaultPlan(always=lambda body: True, always_kind="slow", slow_s=3.0)
    )
    for server in (*fast, hung):
        server.start()
    try:
        urls = [fast[0].base_url, hung.base_url, fast[1].base_url]
        run_judging(
            folder,
            "text_to_image",
            outputs,
            ["openai:judge"],
            tmp_path / "run",
            judge_options={"openai:judge": {"base_urls": urls, "timeout_s": 0.5}},
            concurrency=3,
            max_attempts=1,
            limit=3,
            progress=False,
        )
    finally:
        for server in (*fast, hung):
            server.stop()
    verdicts = read_verdicts(tmp_path / "run")
    assert [v.status for v in verdicts] == ["ok"] * 9
    assert {v.replica for v in verdicts} <= {urls[0], urls[2]}
    assert hung.calls >= 1  # it was tried (least outstanding at first), timed out, and failed over


def test_pick_prefers_the_replica_with_fewest_calls_outstanding():
    replicas = [create_backend("openai:j", base_url=f"http://127.0.0.1:{9000 + i}/v1") for i in range(3)]
    router = ReplicatedBackend(replicas, ["a", "b", "c"])
    router.outstanding = [2, 0, 1]
    assert router._pick(set()) == 1
    assert router._pick({1}) == 2
    router.outstanding = [0, 0, 0]
    picks = [router._pick(set()) for _ in range(6)]
    assert picks == [0, 1, 2, 0, 1, 2]  # ties rotate
    assert router.backend_id == "openai:j"


def test_bad_replica_lists_are_refused():
    with pytest.raises(ConfigError, match="must be a list of server URLs"):
        create_backend("openai:j", base_urls="http://127.0.0.1:1/v1")
    with pytest.raises(ConfigError, match="either base_url or base_urls"):
        create_backend("openai:j", base_urls=["http://127.0.0.1:1/v1"], base_url="http://127.0.0.1:2/v1")
    with pytest.raises(ConfigError, match="distinct"):
        create_backend("openai:j", base_urls=["http://127.0.0.1:1/v1"] * 2)
    single = create_backend("openai:j", base_urls=["http://127.0.0.1:1/v1"])
    assert not isinstance(single, ReplicatedBackend)


def test_cli_repeated_base_url_and_run_config_base_urls(bench, tmp_path):
    folder, outputs = bench
    servers = [FakeOpenAIServer(lambda body: "Fine. [[6]]") for _ in range(2)]
    for server in servers:
        server.start()
    urls = [s.base_url for s in servers]
    try:
        common = ["judge", "--benchmark", str(folder), "--config", "text_to_image", "--outputs", str(outputs)]
        common += ["--judge", "openai:judge", "--limit", "2"]
        args = [*common, "--out", str(tmp_path / "r1")]
        for server in servers:
            args += ["--base-url", server.base_url]
        done = CliRunner().invoke(cli, args, catch_exceptions=False)
        assert done.exit_code == 0, done.output
        config = tmp_path / "run.yaml"
        config.write_text("base_urls:\n" + "".join(f"  - {s.base_url}\n" for s in servers))
        again = CliRunner().invoke(
            cli, [*common, "--out", str(tmp_path / "r2"), "--run-config", str(config)], catch_exceptions=False
        )
        assert again.exit_code == 0, again.output
    finally:
        for server in servers:
            server.stop()
    for run in ("r1", "r2"):
        spread = json.loads((tmp_path / run / "run.json").read_text())["judges"][0]["replicas"]
        assert sorted(spread) == sorted(urls)
        assert sum(v["answered"] for v in spread.values()) == 6
    # r2 is another folder with its own cache: its six calls were sent again
    assert sum(s.calls for s in servers) == 12
