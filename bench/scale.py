"""Benchmark: ``echo-bench build`` on 100k generated posts against the loopback VLM, then rerun from the cache.

Run from the repository root:  python -m bench.scale [--posts 100000] [--latency 0.05] [--fault-rate 0.05]
                                                     [--concurrency 64] [--no-append]

The posts (deterministic, seed 0) are conversations with reply trees: 40% of the roots mention GPT-4o and are
one of the six thread kinds of :class:`tests.helpers.reliability.CurationScenario` (text-to-image, edit,
fill-in-the-blank, conversation screenshot, API pricing, analysis; 1-2 images each, served over loopback HTTP),
the other roots are about something else; each root gets a random tree of replies (up to depth 4), 15% of which
mention GPT-4o. The real CLI runs as a subprocess (``--backend openai:vlm --concurrency 64``, default retry
policy) against the fake server (``--latency`` per call, ``--fault-rate`` of every fault kind, scripted answers
for every stage); then the same command with ``--resume`` measures the rerun served from the cache. Reported:
wall time, model calls and retries, failures, cache hits on the rerun, and the child's peak RSS
(``os.wait4``). ``--profile`` runs the child under cProfile and prints the top functions.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

from bench.results import append_section, machine
from tests.helpers.media_server import MediaServer
from tests.helpers.openai_server import ALL_FAULT_KINDS, FakeOpenAIServer, FaultPlan
from tests.helpers.reliability import build_files
from tests.helpers.scenarios import T0, CurationScenario

REPO = Path(__file__).resolve().parents[1]


class ScaleScenario(CurationScenario):
    """``n`` posts: conversations with reply trees around the threads of :class:`CurationScenario`."""

    def __post_init__(self) -> None:
        from echo_builder.records import Post

        rng = random.Random(0)
        conversation = reply = 0
        while len(self.posts) < self.n:
            if conversation % 5 < 2:  # a root about the target model: thread kind KINDS[conversation % 6]
                tree = self.thread(conversation)
            else:
                tree = [
                    Post(
                        id=f"x:{40_000_000 + conversation}",
                        platform="x",
                        url=f"https://x.com/o{conversation % 997}/status/{40_000_000 + conversation}",
                        author_id=f"o{conversation % 997}",
                        created_at=T0 + timedelta(minutes=10 * conversation),
                        text=rng.choice(
                            ["lunch today", "Midjourney v7 is out", "new phone, who dis", "rain again"]
                        ),
                    )
                ]
            depth = {p.id: 0 if p.reply_to_id is None else 1 for p in tree}
            for _ in range(
                min(self.n - len(self.posts) - len(tree), rng.choice([0, 1, 2, 3, 4, 5, 6, 8, 10]))
            ):
                parent = rng.choice([p for p in tree if depth[p.id] < 4])
                pid = f"x:{30_000_000 + reply}"
                mention = rng.random() < 0.15
                tree.append(
                    Post(
                        id=pid,
                        platform="x",
                        url=f"https://x.com/r{reply % 991}/status/{30_000_000 + reply}",
                        author_id=f"r{reply % 991}",
                        created_at=parent.created_at + timedelta(minutes=1 + rng.randrange(60)),
                        text=f"GPT-4o really did that? #r{reply}"
                        if mention
                        else rng.choice(["lol", "nice", "how?"]),
                        reply_to_id=parent.id,
                    )
                )
                depth[pid] = depth[parent.id] + 1
                reply += 1
            self.posts.extend(tree[: self.n - len(self.posts)])
            conversation += 1


def run_build(argv: list[str], env: dict[str, str]) -> tuple[float, int, int, float]:
    """Run ``argv``; returns (wall s, exit code, peak RSS of the child in bytes, its CPU time in s)."""
    start = time.perf_counter()
    with tempfile.TemporaryFile() as err:
        proc = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=err)
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
        if proc.returncode != 0:
            err.seek(0)
            sys.stderr.write(err.read().decode(errors="replace")[-5000:])
    return (
        time.perf_counter() - start,
        proc.returncode,
        usage.ru_maxrss * 1024,
        usage.ru_utime + usage.ru_stime,
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--posts", type=int, default=100_000)
    parser.add_argument("--latency", type=float, default=0.05, help="seconds per model call")
    parser.add_argument("--fault-rate", type=float, default=0.05)
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--profile", action="store_true", help="run the build under cProfile (slower)")
    parser.add_argument("--no-append", action="store_true", help="print the table only")
    args = parser.parse_args()
    env = dict(os.environ, PYTHONPATH=str(REPO))
    with tempfile.TemporaryDirectory() as tmp, MediaServer() as media:
        folder = Path(tmp)
        start = time.perf_counter()
        sc = ScaleScenario(args.posts, media)
        posts = sc.write(folder / "posts.jsonl")
        gen_s = time.perf_counter() - start
        print(f"generated {len(sc.posts):,} posts, {sc.images:,} images in {gen_s:.1f} s", flush=True)
        plan = FaultPlan(rate=args.fault_rate, kinds=ALL_FAULT_KINDS, seed=0, retry_after_ms=10, slow_s=2.0)
        with FakeOpenAIServer(sc.reply, latency_s=args.latency, faults=plan, record_bodies=False) as llm:
            out = folder / "out"
            argv = [sys.executable, *(["-m", "cProfile", "-o", str(folder / "prof")] if args.profile else []),
                    "-m", "echo_builder.cli", "build", str(posts), "--out", str(out), "--backend", "openai:vlm",
                    "--base-url", llm.base_url, "--target-model", "GPT-4o", "--media-allow", "127.0.0.1",
                    "--concurrency", str(args.concurrency)]  # fmt: skip
            first = run_build(argv, env)
            requests, faults, peak = llm.calls, sum(1 for f in llm.log.faults if f), llm.log.max_in_flight
            hits = media.total_hits
            stats1 = json.loads((out / "run_stats.json").read_text())
            report = json.loads((out / "report.json").read_text())
            outputs = build_files(out)
            print(f"build: {first[0]:.0f} s, exit {first[1]}, {requests:,} requests", flush=True)
            llm.reset_log()
            second = run_build([*argv, "--resume"], env)
            stats2 = json.loads((out / "run_stats.json").read_text())
            rerun_requests, rerun_hits = llm.calls, media.total_hits - hits
            same = build_files(out) == outputs
            print(f"rerun: {second[0]:.0f} s, exit {second[1]}, {rerun_requests} requests", flush=True)
        if args.profile:
            import pstats

            pstats.Stats(str(folder / "prof")).sort_stats("cumulative").print_stats(40)
    lines = table(args, len(sc.posts), sc.images, gen_s, first, second, requests, faults, hits, stats1, stats2,
                  report, rerun_requests, rerun_hits, peak, same)  # fmt: skip
    print("\n".join(lines))
    if not args.no_append and not args.profile:
        command = "python -m bench.scale " + " ".join(sys.argv[1:])
        intro = (
            f"`{command}` ({machine()}; other jobs shared the machine, so wall times are upper bounds). "
            f"{len(sc.posts):,} generated posts (conversations with reply trees; 40% of roots about GPT-4o, 15% of "
            f"replies mention it; {sc.images:,} images on a loopback HTTP server) through `echo-bench build "
            f"--backend openai:vlm --concurrency {args.concurrency}` as a subprocess against the loopback VLM "
            f"({args.latency * 1000:.0f} ms per call, {args.fault_rate:.0%} faults of every kind, default retry "
            "policy), then the same command with `--resume`."
        )
        append_section("## Scale (`python -m bench.scale`)", intro, lines)


def table(args: Any, n_posts: int, n_images: int, gen_s: float, first: tuple, second: tuple, requests: int,
          faults: int, hits: int, stats1: dict, stats2: dict, report: dict, rerun_requests: int,
          rerun_hits: int, peak: int, same: bool) -> list[str]:  # fmt: skip
    calls1, calls2 = stats1["model_calls"], stats2["model_calls"]
    stages = {s["name"]: s for s in report["stages"]}
    failures = {name: s["failures"] for name, s in stages.items() if s["failures"]}
    configs = stages["applicability"]["configs"]
    slowest = sorted(stats1["wall_time_s"].items(), key=lambda kv: -kv[1])[:4]
    return [
        "| measure | build | rerun (`--resume`, same folder) |",
        "|---|---|---|",
        f"| wall time | {first[0]:.0f} s ({n_posts / first[0]:,.0f} posts/s) | {second[0]:.1f} s |",
        f"| CPU time of the build process | {first[3]:.0f} s | {second[3]:.1f} s |",
        f"| exit code | {first[1]} | {second[1]} |",
        f"| model requests at the server (incl. retries) | {requests:,} | {rerun_requests:,} |",
        f"| caller: logical calls / attempts / retries / failures | {calls1['requests']:,} / {calls1['attempts']:,} "
        f"/ {calls1['retries']:,} / {calls1['failures']:,} | {calls2['requests']:,} / {calls2['attempts']:,} / "
        f"{calls2['retries']:,} / {calls2['failures']:,} |",
        f"| faults injected | {faults:,} | 0 requests |",
        f"| cache hits | {calls1['cache_hits']:,} | {calls2['cache_hits']:,} of {calls2['requests']:,} "
        f"({calls2['cache_hits'] / max(1, calls2['requests']):.0%}) |",
        f"| image downloads | {hits:,} of {n_images:,} | {rerun_hits:,} |",
        f"| peak RSS of the build process | {first[2] / 2**30:.2f} GiB | {second[2] / 2**30:.2f} GiB |",
        f"| stage failures (after retries) | {failures or 'none'} | |",
        f"| samples per config | {configs} | |",
        f"| outputs (stage files, report, card, Parquet) | | {'byte-identical' if same else 'DIFFERENT'} |",
        f"| slowest stages | {', '.join(f'{k} {v:.0f} s' for k, v in slowest)} | |",
        f"| peak requests in flight at the server | {peak} (concurrency {args.concurrency}) | |",
        f"| post generation | {gen_s:.0f} s (not in the wall time) | |",
    ]


if __name__ == "__main__":
    main()
