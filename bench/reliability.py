"""Benchmark: the long variants of the reliability suite (``tests/reliability/``), results to bench/RESULTS.md.

Run from the repository root:
    python -m bench.reliability faults [--threads 60] [--samples 30]
    python -m bench.reliability kill [--trials 10] [--threads 24] [--samples 20]

``faults``: ``build`` (``--threads`` generated threads of six kinds, every LLM/VLM stage) and ``judge`` (single
and pairwise, ``--samples`` samples x 3 models) in this process against the loopback server injecting 5%, 20% and
50% faults of every kind, with the default budget of 6 attempts and a tight one of 3 at 50%. Retry waits are
milliseconds (as in the tests; attempts, timeouts and Retry-After handling are the production code's). Each run
is checked against the server-log oracle and the fault-free run
(:func:`tests.helpers.reliability.check_build_faults` / ``check_judge_faults``).

``kill``: ``--trials`` trials each of ``echo-bench build`` and ``echo-bench judge`` as subprocesses, each killed
with SIGKILL once or twice at seeded random points (after a random model call, while images download, or after
the last call while the dataset or verdicts are written), then rerun to completion; checked with
:func:`tests.helpers.kill_resume.kill_and_resume` against an uninterrupted run.
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.results import append_section, machine
from tests.helpers.kill_resume import (
    build_command,
    comparable_judge_run,
    draw_kills,
    judge_command,
    kill_and_resume,
)
from tests.helpers.media_server import MediaServer
from tests.helpers.openai_server import FakeOpenAIServer
from tests.helpers.reliability import (
    build_files,
    check_build_faults,
    check_judge_faults,
    fast_retries,
    fault_plan,
    run_build,
    run_judge,
)
from tests.helpers.scenarios import CurationScenario, JudgeScenario

REPO = Path(__file__).resolve().parents[1]
CASES = [(0.05, 6), (0.20, 6), (0.50, 6), (0.50, 3)]


def faults(threads: int, samples: int) -> list[str]:
    rows = []
    with tempfile.TemporaryDirectory() as tmp, fast_retries():
        folder = Path(tmp)
        with MediaServer() as media:
            sc = CurationScenario(threads, media)
            posts = sc.write(folder / "posts.jsonl")
            with FakeOpenAIServer(sc.reply) as server:
                run_build(posts, folder / "clean", server, max_attempts=1)
            for k, (rate, attempts) in enumerate(CASES):
                out = folder / f"build-{k}"
                with FakeOpenAIServer(sc.reply, faults=fault_plan(rate, 100 + k)) as server:
                    start = time.perf_counter()
                    run_build(posts, out, server, max_attempts=attempts)
                    wall = time.perf_counter() - start
                    log = (list(server.log.bodies), list(server.log.faults))
                row = _row("build", rate, attempts, wall, "samples", check_build_faults,
                           sc, out, folder / "clean", *log, max_attempts=attempts)  # fmt: skip
                rows.append(row)
        js = JudgeScenario(samples, folder / "judge")
        keys = js.output_keys()
        for mode in ("single", "pairwise"):
            with FakeOpenAIServer(js.reply) as server:
                clean = run_judge(js, folder / f"clean-{mode}", server, mode=mode, max_attempts=1).verdicts
            for k, (rate, attempts) in enumerate(CASES):
                run = folder / f"judge-{mode}-{k}"
                with FakeOpenAIServer(js.reply, faults=fault_plan(rate, 200 + k)) as server:
                    start = time.perf_counter()
                    run_judge(js, run, server, mode=mode, max_attempts=attempts)
                    wall = time.perf_counter() - start
                    log = (list(server.log.bodies), list(server.log.faults))
                row = _row(f"judge {mode}", rate, attempts, wall, "verdicts", check_judge_faults,
                           js, keys, run, clean, *log, mode=mode, max_attempts=attempts)  # fmt: skip
                rows.append(row)
    return [
        "| flow | fault rate | attempts | requests | faults injected | logical calls | re-asked | lost (= counted "
        "failures) | check | wall s |",
        "|---|---|---|---|---|---|---|---|---|---|",
        *rows,
    ]


def _row(
    flow: str, rate: float, attempts: int, wall: float, unit: str, check: Any, *args: Any, **kw: Any
) -> str:
    """Run one oracle check; a failed check is recorded in the table with its message, not hidden."""
    try:
        s = check(*args, **kw)
        if s["lost"]:
            others = s.get("compared_samples", s["calls"] - s["lost"])
            result = f"{s['lost']} lost, each a counted failure; the other {others} {unit} identical"
        else:
            result = "identical to the fault-free run"
    except AssertionError as exc:
        s = dict.fromkeys(("requests", "faults", "calls", "reasked", "lost"), "-")
        result = f"FAILED: {str(exc).splitlines()[0][:120]}"
    print(f"  {flow} {rate:.0%} x{attempts}: {result} ({wall:.1f} s)", flush=True)
    return (
        f"| {flow} | {rate:.0%} | {attempts} | {s['requests']} | {s['faults']} | {s['calls']} | {s['reasked']} | "
        f"{s['lost']} | {result} | {wall:.1f} |"
    )


def kill(trials: int, threads: int, samples: int, seed: int) -> list[str]:
    env = dict(os.environ, PYTHONPATH=str(REPO))
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        with MediaServer() as media, FakeOpenAIServer(latency_s=0.04) as llm:
            sc = CurationScenario(threads, media, image_delay_s=0.03)
            llm.reply = sc.reply
            posts = sc.write(folder / "posts.jsonl")
            clean = folder / "build-clean"

            def command(out: Path) -> list[str]:
                return build_command(posts, out, llm)

            ref = kill_and_resume(command(clean), resume=["--resume"], cache_dir=clean / "cache", llm=llm,
                                  kills=[], env=env, media=media, media_root=clean / "media")  # fmt: skip
            before_media = sum(1 for b in llm.log.bodies if sc.stage(b) in ("relevance", "extract"))
            rows.append(_trials("build", trials, seed, ref, lambda k, out, kills: kill_and_resume(
                command(out), resume=["--resume"], cache_dir=out / "cache", llm=llm, kills=kills, env=env,
                media=media, media_root=out / "media",
            ), lambda out: build_files(out) == build_files(clean), folder, before_media))  # fmt: skip
        js = JudgeScenario(samples, folder / "judge")
        with FakeOpenAIServer(js.reply, latency_s=0.1) as llm:
            clean = folder / "judge-clean"
            ref = kill_and_resume(judge_command(js, clean, llm), resume=[], cache_dir=clean / "cache", llm=llm,
                                  kills=[], env=env)  # fmt: skip
            rows.append(_trials("judge", trials, seed + 1, ref, lambda k, out, kills: kill_and_resume(
                judge_command(js, out, llm), resume=[], cache_dir=out / "cache", llm=llm, kills=kills, env=env
            ), lambda out: comparable_judge_run(out) == comparable_judge_run(clean), folder, None))  # fmt: skip
    return [
        "| command | trials | kills (after a call / during downloads / after the last call) | runs | "
        "repeated stored calls | repeated stored downloads | in-flight calls sent again (max per kill) | "
        "in-flight downloads sent again (max) | outputs identical | uninterrupted s | all trials s |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
        *rows,
    ]


def _trials(
    name: str, trials: int, seed: int, ref: Any, run: Any, same: Any, folder: Path, media_after: int | None
) -> str:
    rng = random.Random(seed)
    tail_s = ref.wall_s - ref.last_call_at_s
    kinds = {"call": 0, "media": 0, "tail": 0}
    kills = runs = repeated = repeated_media = identical = 0
    in_flight: list[int] = []
    in_flight_media: list[int] = []
    wall = 0.0
    for k in range(trials):
        first = rng.choice(
            ["call", "call", "media", "tail"] if media_after is not None else ["call", "call", "tail"]
        )
        points = draw_kills(
            rng, ref.calls[0], tail_s, kills=rng.choice([1, 2]), first=first, media_after=media_after
        )
        out = folder / f"{name}-trial-{k}"
        try:
            t = run(k, out, points)
        except AssertionError as exc:
            print(f"  {name} trial {k}: FAILED {exc}", flush=True)
            continue
        kinds[first] += t.kills > 0
        kills += t.kills
        runs += t.runs
        repeated += t.repeated_calls
        repeated_media += t.repeated_downloads
        in_flight += t.in_flight_resent
        in_flight_media += t.downloads_in_flight_resent
        ok = same(out)
        identical += ok
        wall += t.wall_s
        print(f"  {name} trial {k}: {points} -> {t.kills} kill(s) at {t.kill_at_s} s, in flight sent again "
              f"{t.in_flight_resent}/{t.downloads_in_flight_resent}, identical {ok}", flush=True)  # fmt: skip
    media = f"{repeated_media}" if media_after is not None else "n/a"
    media_max = f"{max(in_flight_media, default=0)}" if media_after is not None else "n/a"
    return (
        f"| {name} | {trials} | {kills} ({kinds['call']} / {kinds['media']} / {kinds['tail']} trials) | {runs} | "
        f"{repeated} | {media} | {sum(in_flight)} ({max(in_flight, default=0)}) | {media_max} | "
        f"{identical}/{trials} | {ref.wall_s:.1f} | {wall:.0f} |"
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = parser.add_subparsers(dest="what", required=True)
    f = sub.add_parser("faults")
    f.add_argument("--threads", type=int, default=60)
    f.add_argument("--samples", type=int, default=30)
    k = sub.add_parser("kill")
    k.add_argument("--trials", type=int, default=10)
    k.add_argument("--threads", type=int, default=24)
    k.add_argument("--samples", type=int, default=20)
    k.add_argument("--seed", type=int, default=2026)
    for p in (f, k):
        p.add_argument("--no-append", action="store_true", help="print the table only")
    args = parser.parse_args()
    command = "python -m bench.reliability " + " ".join(sys.argv[1:])
    start = time.perf_counter()
    if args.what == "faults":
        lines = faults(args.threads, args.samples)
        heading = "## Reliability: fault injection (`python -m bench.reliability faults`)"
        intro = (
            f"`{command}` ({machine()}; other jobs shared the machine). build: {args.threads} generated threads "
            f"(six kinds, every LLM/VLM stage, images over loopback HTTP); judge: {args.samples} samples x 3 "
            "models (one output missing), single and pairwise. The loopback server drew every fault kind (429 with "
            "Retry-After, 500, timeouts, connection dropped before or during the reply, garbage, truncated JSON, "
            "JSON without choices, well-formed replies whose JSON has the wrong fields) by hashing request and "
            "attempt; retry waits were milliseconds, timeouts 1 s. 'lost' = calls whose last attempt failed per "
            "the server log; each must be a counted failure, everything else equal to the fault-free run."
        )
    else:
        lines = kill(args.trials, args.threads, args.samples, args.seed)
        heading = "## Reliability: kill and resume (`python -m bench.reliability kill`)"
        intro = (
            f"`{command}` ({machine()}; other jobs shared the machine). Each trial ran the real CLI as a subprocess "
            f"(build: {args.threads} threads, concurrency 4, 40 ms per model call, 30 ms per image; judge: "
            f"{args.samples} samples x 3 models, 100 ms per call), sent SIGKILL once or twice at seeded random "
            "points and reran the command (build with --resume) until it completed. 'repeated stored' = a call "
            "in the cache (or an image in the media store) at a kill that was requested again: must be 0. "
            "Outputs compared with an uninterrupted run: build folder byte for byte (stage files, report, card, "
            "Parquet); judge verdicts and run.json except latency, wall time and this process's call counts."
        )
    print("\n".join(lines))
    print(f"total {time.perf_counter() - start:.0f} s")
    if not args.no_append:
        append_section(heading, intro, lines)


if __name__ == "__main__":
    main()
