"""The hostile-input corpus (``tests/data/hostile/cases.yaml`` and ``cases.d/*.yaml``) driven through the real entry points.

One parametrized test per case: the case's input goes through its flow (mostly the ``echo-bench`` CLI through
click's runner, against the loopback VLM where a model is needed), the outcome is checked against the manifest (a
clear error, a recorded failure, or a correct result with its facts), and nothing may be written outside the
case's output folder: the test's temporary tree (inputs included), its parent folder, the working directory and
the marker file a YAML tag would have created are compared before and after.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.reliability import (
    hostile_analysis,
    hostile_collection,
    hostile_curation,
    hostile_deadlines,
    hostile_evaluation,
    hostile_metric_modules,
    hostile_models,
)
from tests.reliability.hostile_workspace import CASES, HOSTILE, Observed, Workspace, _snapshot

FLOWS: dict[str, Callable[[dict[str, Any], Workspace], Observed]] = {
    name.removeprefix("flow_"): fn
    for module in (
        hostile_analysis,
        hostile_collection,
        hostile_curation,
        hostile_deadlines,
        hostile_evaluation,
        hostile_metric_modules,
        hostile_models,
    )
    for name, fn in vars(module).items()
    if name.startswith("flow_")
}


# ------------------------------------------------------------------------------------------------------ the test
@pytest.fixture(scope="module")
def generated(tmp_path_factory) -> Callable[[str], Path]:
    """Large and bomb cases, written once per module on first use by the corpus's own script."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("make_corpus", HOSTILE / "make_corpus.py")
    assert spec is not None and spec.loader is not None
    make_corpus = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(make_corpus)
    folder = tmp_path_factory.mktemp("hostile-generated")

    def get(name: str) -> Path:
        if not (folder / name).exists():
            make_corpus.write_large(folder, [name])
        return folder / name

    return get


def _same(expected: Any, measured: Any, tolerance: float) -> bool:
    if isinstance(expected, float) and isinstance(measured, float):
        if math.isnan(expected):
            return math.isnan(measured)
        return abs(expected - measured) <= tolerance
    return expected == measured


# a regression to a quadratic or cubic regex hangs inside C code, where the default signal timeout cannot interrupt
# it; the thread method ends the run with a stack dump instead of letting CI hang
@pytest.mark.timeout(120, method="thread")
@pytest.mark.parametrize("case", CASES, ids=[c["id"] for c in CASES])
def test_hostile_case(case, tmp_path, generated, request, monkeypatch):
    ws = Workspace(tmp_path, generated, lambda: request.getfixturevalue("openai_server"))
    if "file" in case:
        assert ws.source(case["file"]).exists(), f"corpus file {case['file']} is missing"
    monkeypatch.chdir(ws.root / "cwd")
    observed = FLOWS[case["flow"]](case, ws)
    assert ws.before is not None, "the flow did not take its snapshot"
    assert _snapshot(ws) == ws.before, "something was written outside the output folder"

    expect = case["expect"]
    output = observed.output
    assert "Traceback" not in output, output
    if expect["outcome"] == "error":
        assert observed.exit_code == 1, output
        assert isinstance(observed.exception, SystemExit), repr(observed.exception)
        assert output.startswith("error: ") and output.count("\n") == 1, output  # one clear line
        for fragment in expect["contains"]:
            assert fragment in output, f"{fragment!r} not in {output!r}"
        assert not (ws.out / "stages").exists() and not list(ws.out.glob("*/*.parquet"))  # nothing half-made
        return
    # a run that goes on: no exception other than the CLI's own exit
    assert observed.exception is None or isinstance(observed.exception, SystemExit), repr(observed.exception)
    if expect["outcome"] == "recorded_failure":
        record = observed.record(expect["where"])
        for fragment in expect["contains"]:
            assert fragment in record, f"{fragment!r} not recorded in {expect['where']}"
    else:
        assert expect["outcome"] == "correct", expect
    tolerance = float(expect.get("tolerance", 0.0))
    facts = {"exit_code": observed.exit_code, **observed.facts}
    for key, value in (expect.get("facts") or {}).items():
        assert key in facts, f"fact {key!r} was not measured; measured: {sorted(facts)}"
        assert _same(value, facts[key], tolerance), f"{key}: expected {value!r}, measured {facts[key]!r}"


def test_every_corpus_file_has_a_case():
    """The manifest and the folder agree: every committed input is exercised, every case names an existing input."""
    named = {c["file"].split("/")[0] + "/" + c["file"].split("/")[1] for c in CASES if "file" in c}
    on_disk = {
        p.relative_to(HOSTILE).as_posix()
        for sub in ("sources", "images", "injection", "modules")
        for p in (HOSTILE / sub).iterdir()
    } | {f"collection/{p.name}" for p in (HOSTILE / "collection").iterdir()}
    assert on_disk <= named | {"collection/good"}, sorted(on_disk - named)
    assert len({c["id"] for c in CASES}) == len(CASES)
    assert sum(p.stat().st_size for p in HOSTILE.rglob("*") if p.is_file()) < 1_000_000
