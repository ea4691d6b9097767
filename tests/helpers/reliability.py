"""Bookkeeping shared by ``tests/reliability/`` and ``bench/reliability.py``.

- the scenarios (generated posts, benchmark, scripted VLM and judge) are in :mod:`tests.helpers.scenarios`.
- :func:`item_outcomes`: from the fake server's log alone, what became of each logical model call (first ask plus
  its one re-ask): the oracle the fault-injection tests compare a run's reported failures with.
- :func:`check_build_faults` / :func:`check_judge_faults`: a faulted run against the oracle and the clean run.
- :func:`run_build` / :func:`run_judge`: the two commands in this process, as the fault-injection cases run them.
  Kill and resume (subprocesses, SIGKILL) is :mod:`tests.helpers.kill_resume`.
- :func:`build_files` / :func:`stage_rows`: a build folder's outputs, for comparing runs.
"""

from __future__ import annotations

import contextlib
import json
from collections import defaultdict
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.helpers.openai_server import ALL_FAULT_KINDS
from tests.helpers.scenarios import (
    _TOKEN,
    TRANSPORT_FAULTS,
    CurationScenario,
    JudgeScenario,
    canonical,
    reply_id,
    root_id,
)

__all__ = [
    "JUDGE",
    "LLM_STAGES",
    "TIMEOUT_S",
    "TRANSPORT_FAULTS",
    "ItemOutcome",
    "build_files",
    "canonical",
    "check_build_faults",
    "check_judge_faults",
    "fast_retries",
    "fault_plan",
    "item_outcomes",
    "run_build",
    "run_judge",
    "stage_rows",
    "tokens_of",
]


# -- retry waits ----------------------------------------------------------------------------------------------------
@contextlib.contextmanager
def fast_retries(initial_backoff_s: float = 0.002, max_backoff_s: float = 0.02) -> Iterator[type]:
    """Within the block, ``build`` and ``judge`` (in this process) retry after milliseconds instead of seconds.

    Only the backoff changes (the policy's defaults, which both commands use): the number of attempts, the
    per-attempt timeout and ``Retry-After`` handling stay the production code's, a server's ``Retry-After`` being
    honoured up to ``max_backoff_s``.
    """
    from pydantic import Field

    from echo_builder.backends import caller
    from echo_builder.judge import run

    initial, cap = initial_backoff_s, max_backoff_s  # a class body cannot see same-named enclosing locals

    class FastRetry(caller.RetryPolicy):  # type: ignore[misc, valid-type]
        initial_backoff_s: float = Field(default=initial, ge=0.0)
        max_backoff_s: float = Field(default=cap, ge=0.0)

    saved = caller.RetryPolicy, run.RetryPolicy
    caller.RetryPolicy = run.RetryPolicy = FastRetry  # type: ignore[misc]
    try:
        yield FastRetry
    finally:
        caller.RetryPolicy, run.RetryPolicy = saved  # type: ignore[misc]


# -- the oracle ----------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class ItemOutcome:
    """What the server did to one logical call: ``ok``, ``error`` (transport faults to the end) or
    ``parse_failure`` (wrong fields twice, or a re-ask that never got through), with the attempt counts."""

    first: dict[str, Any]
    status: str
    attempts: int
    reask_attempts: int
    reasked: bool


def item_outcomes(
    bodies: Sequence[dict[str, Any]], faults: Sequence[str], *, reask_failure: str = "error"
) -> dict[str, ItemOutcome]:
    """Outcome of every logical call in a server log, keyed by :func:`canonical` of its first request.

    A re-ask is recognised as the first request's two messages followed by an assistant turn and a user turn. The
    last attempt the server logged decides (a reply that landed after the client's timeout is followed by another
    attempt, so it never counts as the last one). ``reask_failure`` is the status when a re-ask never got through:
    the build's structured stages record ``error``; the judge keeps the unparseable first answer
    (``parse_failure``).
    """
    attempts: dict[str, list[str]] = defaultdict(list)
    reasks: dict[str, list[str]] = defaultdict(list)
    firsts: dict[str, dict[str, Any]] = {}
    for body, fault in zip(bodies, faults, strict=True):
        first = dict(body, messages=body["messages"][:2])
        key = canonical(first)
        firsts.setdefault(key, first)
        (reasks if len(body["messages"]) > 2 else attempts)[key].append(fault)
    out = {}
    for key, first in firsts.items():
        tries, again = attempts[key], reasks.get(key, [])
        last = tries[-1] if tries else ""
        if last in TRANSPORT_FAULTS:
            status = "error"
        elif last == "wrong_schema":
            if not again or again[-1] in TRANSPORT_FAULTS:
                status = reask_failure
            else:
                status = "parse_failure" if again[-1] == "wrong_schema" else "ok"
        else:
            status = "ok"
        out[key] = ItemOutcome(first, status, len(tries), len(again), bool(again))
    return out


# -- outputs -------------------------------------------------------------------------------------------------------
def build_files(out: Path, *, without_cost: bool = False) -> dict[str, bytes]:
    """Every output of a build folder that must not depend on how the run went: stage files, report, card,
    dataset Parquet. Excludes the cache, the media store, ``run_stats.json`` (wall times, cache hits) and
    ``build.json`` (settings, compared by the resume check itself). ``without_cost`` also leaves out the curation
    cost (``report.json``'s ``cost``, the card's "Curation cost" line), which counts every reply used, so a
    run whose garbage replies were asked again really did cost more."""
    names: list[Path] = [out / "report.json", out / "README.md"]
    names += sorted((out / "stages").glob("*.jsonl"))
    names += sorted(out.glob("*/test-*.parquet"))
    files = {p.relative_to(out).as_posix(): p.read_bytes() for p in names if p.is_file()}
    if without_cost:
        if "report.json" in files:
            files["report.json"] = json.dumps(
                _without_cost(json.loads(files["report.json"])), sort_keys=True
            ).encode()
        if "README.md" in files:
            lines = files["README.md"].decode("utf-8").splitlines(keepends=True)
            files["README.md"] = "".join(x for x in lines if not x.startswith("- Curation cost:")).encode()
    return files


def _without_cost(value: Any) -> Any:
    """``value`` with every ``cost`` entry removed, at any depth (the run's and each stage's)."""
    if isinstance(value, dict):
        return {k: _without_cost(v) for k, v in value.items() if k != "cost"}
    if isinstance(value, list):
        return [_without_cost(v) for v in value]
    return value


def stage_rows(out: Path, stage: str) -> list[dict[str, Any]]:
    """The rows of ``OUT/stages/<stage>.jsonl``."""
    path = out / "stages" / f"{stage}.jsonl"
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def tokens_of(rows: Iterable[dict[str, Any]]) -> dict[str, str]:
    """Sample or post id -> thread token, from any rows with a ``prompt`` or ``text`` holding one."""
    found = {}
    for row in rows:
        text = row.get("prompt") or row.get("text") or ""
        match = _TOKEN.search(text)
        if match:
            found[row["id"]] = f"{match.group(1)}{match.group(2)}"
    return found


# -- checks shared by the fault-injection tests and bench/reliability.py ------------------------------------------
LLM_STAGES = ("relevance", "extract", "roles", "templates", "screenshots", "tier", "applicability")


def check_build_faults(
    sc: CurationScenario,
    out: Path,
    clean: Path,
    bodies: Sequence[dict[str, Any]],
    faults: Sequence[str],
    *,
    max_attempts: int,
) -> dict[str, Any]:
    """Assert that a build under faults reported exactly the calls the server log says were lost, and equals the
    fault-free build ``clean`` everywhere else (byte for byte when nothing was lost). Returns counts."""
    import pyarrow.parquet as pq

    outcomes = item_outcomes(bodies, faults).values()
    assert all(o.attempts <= max_attempts and o.reask_attempts <= max_attempts for o in outcomes)
    lost = sorted((sc.stage(o.first), sc.token(o.first)) for o in outcomes if o.status != "ok")
    ids = {root_id(i): f"k{i}" for i in range(sc.n)} | {reply_id(i): f"r{i}" for i in range(sc.n)}
    for stage in ("extract", "media", "roles", "templates", "screenshots", "tier", "samples"):
        ids |= tokens_of(stage_rows(out, stage))
    ids |= tokens_of(stage_rows(clean, "samples"))
    reported = sorted((f["stage"], ids[f["record_id"]]) for f in stage_rows(out, "failures"))
    assert reported == lost, (
        f"reported failures {reported} != calls the server failed beyond the budget {lost}"
    )
    report = json.loads((out / "report.json").read_text(encoding="utf-8"))
    counts = {s["name"]: s["failures"] for s in report["stages"]}
    assert {s: counts[s] for s in LLM_STAGES} == {s: sum(1 for x, _ in lost if x == s) for s in LLM_STAGES}
    summary = {
        "requests": len(bodies),
        "faults": sum(1 for f in faults if f),
        "calls": len(outcomes),
        "reasked": sum(o.reasked for o in outcomes),
        "lost": len(lost),
        "identical": False,
    }
    if not lost:  # the retry budget sufficed everywhere: byte-identical outputs
        # the curation cost counts the tokens of the garbage replies that were asked again: what the faults cost
        a, b = build_files(out, without_cost=True), build_files(clean, without_cost=True)
        assert a == b, [k for k in a if a.get(k) != b.get(k)]
        summary["identical"] = True
        summary["compared_samples"] = len(stage_rows(clean, "samples"))
        return summary
    # otherwise identical wherever no call of that thread was lost
    touched = {token for _, token in lost}
    lost_relevance = {t for s, t in lost if s == "relevance"}
    faulted = {r["post_id"]: r for r in stage_rows(out, "relevance")}
    for row in stage_rows(clean, "relevance"):
        if ids[row["post_id"]] not in lost_relevance:
            assert faulted[row["post_id"]] == row
    kept = {row["id"]: row for row in stage_rows(clean, "samples") if ids[row["id"]] not in touched}
    assert {row["id"]: row for row in stage_rows(out, "samples") if ids[row["id"]] not in touched} == kept
    for path in sorted(clean.glob("*/test-*.parquet")):
        a = {row["id"]: row for row in pq.read_table(path).to_pylist() if row["id"] in kept}
        b = {
            row["id"]: row
            for row in pq.read_table(out / path.relative_to(clean)).to_pylist()
            if row["id"] in kept
        }
        assert a == b, path.parent.name
    summary["compared_samples"] = len(kept)
    return summary


def check_judge_faults(
    sc: JudgeScenario,
    output_keys: dict[str, tuple[str, str]],
    run: Path,
    clean_verdicts: Sequence[Any],
    bodies: Sequence[dict[str, Any]],
    faults: Sequence[str],
    *,
    mode: str,
    max_attempts: int,
) -> dict[str, Any]:
    """Assert that every verdict the server log says was lost has the oracle's failure status (and run.json
    counts it), and that every other verdict equals the fault-free run's. Returns counts."""
    from collections import Counter

    from echo_builder.judge.run import read_verdicts

    def key(v: Any) -> tuple:
        return (v.sample_id, v.model, v.model_a, v.model_b, v.order)

    measured, cost = {"latency_s"}, {"input_tokens", "output_tokens"}  # a re-ask sends a longer conversation
    expected: dict[tuple, ItemOutcome] = {}
    for o in item_outcomes(bodies, faults, reask_failure="parse_failure").values():
        assert o.attempts <= max_attempts and o.reask_attempts <= max_attempts
        (first_model, sample), *rest = [output_keys[im] for im in sc.images(o.first)[1:]]  # after the input
        if mode == "single":
            k: tuple = (sample, first_model, None, None, None)
        else:
            a, b = sorted((first_model, rest[0][0]))
            k = (sample, None, a, b, "AB" if first_model == a else "BA")
        assert k not in expected  # one logical call per verdict
        expected[k] = o
    verdicts = read_verdicts(run)
    reference = {key(v): v for v in clean_verdicts}
    assert sorted(map(key, verdicts)) == sorted(reference)  # nothing dropped, nothing added
    for v in verdicts:
        ref = reference[key(v)]
        if ref.status == "missing_output":  # no call, in both runs
            assert key(v) not in expected and v.model_dump(exclude=measured) == ref.model_dump(
                exclude=measured
            )
            continue
        outcome = expected[key(v)]
        if outcome.status == "ok":
            ignored = measured | (cost if outcome.reasked else set())
            assert v.model_dump(exclude=ignored) == ref.model_dump(exclude=ignored)
            if outcome.reasked:  # the re-ask cost more input tokens than the first ask alone
                assert v.input_tokens > ref.input_tokens
        else:
            assert v.status == outcome.status and v.rating is None and v.winner is None and v.error
    lost = Counter(o.status for o in expected.values() if o.status != "ok")
    summary = json.loads((run / "run.json").read_text(encoding="utf-8"))
    statuses = Counter(v.status for v in clean_verdicts)
    assert summary["statuses"] == dict(
        Counter({"ok": statuses["ok"] - sum(lost.values()), "missing_output": statuses["missing_output"]})
        + lost
    )
    return {
        "requests": len(bodies),
        "faults": sum(1 for f in faults if f),
        "calls": len(expected),
        "reasked": sum(o.reasked for o in expected.values()),
        "lost": sum(lost.values()),
        "lost_by_status": dict(lost),
        "identical": not lost
        and [v.model_dump(exclude=measured | cost) for v in verdicts]
        == [v.model_dump(exclude=measured | cost) for v in clean_verdicts],
    }


# -- how the suite runs the two commands ---------------------------------------------------------------------------
TIMEOUT_S = 1.0  # per attempt, for the in-process runs under faults
JUDGE = "openai:judge"


def fault_plan(rate: float, seed: int) -> Any:
    """Every fault kind at ``rate``; 429s carry ``retry-after-ms`` and ``Retry-After``; a slow reply outlasts
    the per-attempt timeout."""
    from tests.helpers.openai_server import FaultPlan

    return FaultPlan(
        rate=rate, kinds=ALL_FAULT_KINDS, seed=seed, retry_after_ms=5, retry_after_s=1, slow_s=TIMEOUT_S + 0.2
    )


def run_build(posts: Path, out: Path, server: Any, *, max_attempts: int, concurrency: int = 8) -> Any:
    """``build`` in this process with a :data:`TIMEOUT_S` per attempt (fast waits: :func:`fast_retries`)."""
    from echo_builder.pipeline import BuildConfig, build
    from tests.helpers.kill_resume import shared_salt_file

    return build(
        BuildConfig(
            sources=[posts],
            out_dir=out,
            backend="openai:vlm",
            backend_options={"base_url": server.base_url, "timeout_s": TIMEOUT_S},
            target_model="GPT-4o",
            media_allow=["127.0.0.1"],
            progress=False,
            concurrency=concurrency,
            timeout_s=TIMEOUT_S,
            max_attempts=max_attempts,
            salt_file=shared_salt_file(posts),  # faulted and clean builds compare byte for byte
        )
    )


def run_judge(
    sc: JudgeScenario, out: Path, server: Any, *, mode: str, max_attempts: int, concurrency: int = 8
) -> Any:
    """``judge`` in this process with a :data:`TIMEOUT_S` per attempt (fast waits: :func:`fast_retries`)."""
    from echo_builder.judge.run import run_judging

    return run_judging(
        sc.benchmark,
        "image_to_image",
        sc.outputs,
        [JUDGE],
        out,
        mode=mode,  # type: ignore[arg-type]
        judge_options={JUDGE: {"base_url": server.base_url, "timeout_s": TIMEOUT_S}},
        concurrency=concurrency,
        timeout_s=TIMEOUT_S,
        max_attempts=max_attempts,
        progress=False,
    )
