"""Benchmark: judging throughput of `Judge.single` against the loopback server, concurrency 1 vs 32.

Run from the repository root:  python -m bench.judging [--latency 0.5]

Each judgment sends one 512 px JPEG input and one output (ECHO's image preparation included) to the loopback
OpenAI-compatible server, which answers after ``--latency`` seconds with a scripted rating. Both levels run side
by side in one process; prints a Markdown table for bench/RESULTS.md.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

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


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--latency", type=float, default=0.5)
    parser.add_argument("--seconds", type=float, default=5.0, help="approximate duration of each level")
    args = parser.parse_args()
    rates = {}
    with (
        FakeOpenAIServer(lambda body: "Fine. [[7]]", latency_s=args.latency) as server,
        tempfile.TemporaryDirectory() as tmp,
    ):
        backend = create_backend("openai:bench-judge", base_url=server.base_url, timeout_s=60)
        for concurrency in (1, 32):
            n = max(concurrency * 2, int(args.seconds / args.latency * concurrency))
            judge = Judge(
                ModelCaller(backend, cache=CallCache(Path(tmp) / f"c{concurrency}"), concurrency=concurrency)
            )
            batch = items(n, f"c{concurrency}")
            start = time.perf_counter()
            verdicts = judge.single(batch)
            elapsed = time.perf_counter() - start
            assert all(v.status == "ok" and v.rating == 7 for v in verdicts)
            rates[concurrency] = n / elapsed
            print(
                f"concurrency {concurrency:>2}: {n} judgments in {elapsed:.2f} s = {rates[concurrency]:.2f}/s"
            )
    print("\n| measure | value |\n|---|---|")
    for c, r in rates.items():
        print(
            f"| judgments/s at concurrency {c}, {args.latency * 1000:.0f} ms latency | {r:.2f} ({r / rates[1]:.1f}x c=1) |"
        )


if __name__ == "__main__":
    main()
