"""Benchmark: judging throughput of `Judge.single` against the loopback server, concurrency 1 vs 32.

Run from the repository root:  python -m bench.judging [--latency 0.5]

Each judgment sends one 512 px JPEG input and one output (ECHO's image preparation included) to the loopback
OpenAI-compatible server, which answers after ``--latency`` seconds with a scripted rating. The server runs in a
child process, as a real judge server is another process (in the benchmark's own process its request parsing would
hold the client's GIL). Both levels run side by side in one run; prints a Markdown table for bench/RESULTS.md.
"""

from __future__ import annotations

import argparse
import contextlib
import multiprocessing
import os
import tempfile
import time
from pathlib import Path
from typing import Any

from PIL import Image

from echo_builder.backends import create_backend
from echo_builder.backends.caller import ModelCaller
from echo_builder.cache import CallCache
from echo_builder.judge import Judge, JudgeItem
from tests.helpers.openai_server import FakeOpenAIServer


def items(n: int, tag: str) -> list[JudgeItem]:
    source = Image.new("RGB", (1024, 768), (120, 110, 100))
    return [
        JudgeItem(
            f"{tag}-{i}",
            f"prompt {tag} {i}",
            (source,),
            "model",
            Image.new("RGB", (1024, 768), (i % 256, 80, 40)),
        )
        for i in range(n)
    ]


def _rating(body: dict[str, Any]) -> str:
    return "Fine. [[7]]"


def _serve(latency_s: float, conn: Any) -> None:
    """Child process: run the loopback server, send its URL, and serve until the parent closes the pipe."""
    with FakeOpenAIServer(_rating, latency_s=latency_s, record_bodies=False) as server:
        conn.send(server.base_url)
        with contextlib.suppress(EOFError):  # raised when the parent closes its end
            conn.recv()


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--latency", type=float, default=0.5)
    parser.add_argument(
        "--seconds",
        type=float,
        default=15.0,
        help="approximate duration of each level (long enough for steady state)",
    )
    args = parser.parse_args()
    rates: dict[int, float] = {}
    cpu_ms: dict[int, float] = {}
    load_before = os.getloadavg()[0]
    context = multiprocessing.get_context("spawn")
    parent, child = context.Pipe()
    server = context.Process(target=_serve, args=(args.latency, child), daemon=True)
    server.start()
    if not parent.poll(60):
        raise SystemExit("the loopback server did not start within 60 s")
    base_url = parent.recv()
    with tempfile.TemporaryDirectory() as tmp:
        backend = create_backend("openai:bench-judge", base_url=base_url, timeout_s=60)
        for concurrency in (1, 32):
            n = max(concurrency * 2, int(args.seconds / args.latency * concurrency))
            judge = Judge(
                ModelCaller(backend, cache=CallCache(Path(tmp) / f"c{concurrency}"), concurrency=concurrency)
            )
            batch = items(n, f"c{concurrency}")
            start, cpu = time.perf_counter(), time.process_time()
            verdicts = judge.single(batch)
            elapsed, cpu = time.perf_counter() - start, time.process_time() - cpu
            cpu_ms[concurrency] = cpu / n * 1000
            assert all(v.status == "ok" and v.rating == 7 for v in verdicts)
            rates[concurrency] = n / elapsed
            print(
                f"concurrency {concurrency:>2}: {n} judgments in {elapsed:.2f} s = {rates[concurrency]:.2f}/s "
                f"(client CPU {cpu_ms[concurrency]:.1f} ms per judgment)"
            )
    parent.close()
    server.join(timeout=10)
    if server.is_alive():
        server.terminate()
    print("\n| measure | value |\n|---|---|")
    for c, r in rates.items():
        print(
            f"| judgments/s at concurrency {c}, {args.latency * 1000:.0f} ms latency | {r:.2f} ({r / rates[1]:.1f}x c=1) |"
        )
    print(f"| client CPU per judgment at concurrency 32 | {cpu_ms[32]:.1f} ms |")
    print(
        f"| load average (1 min) before / after, {os.cpu_count()} CPUs | {load_before:.1f} / "
        f"{os.getloadavg()[0]:.1f} |"
    )


if __name__ == "__main__":
    main()
