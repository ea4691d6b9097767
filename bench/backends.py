"""Benchmark: request throughput of the ``openai:`` backend through ModelCaller, and warm-cache lookups.

Run from the repository root:  python -m bench.backends [--entries 100000] [--latency 0.1]

1. Throughput against the loopback OpenAI-compatible server with a fixed injected latency, at concurrency 1, 8
   and 32, measured side by side in one run (target: at 32, >= 15x the concurrency-1 rate).
2. Cache: lookups per second of random keys on a warm cache of ``--entries`` entries, and its size on disk
   (target: >= 5,000 lookups/s at 100k entries).
Prints a Markdown table to paste into bench/RESULTS.md.
"""

from __future__ import annotations

import argparse
import platform
import random
import tempfile
import time
from pathlib import Path

from echo_builder.backends import GenerationParams, Reply, Usage, create_backend, user_message
from echo_builder.backends.caller import CallRequest, ModelCaller
from echo_builder.cache import CallCache
from tests.helpers.openai_server import FakeOpenAIServer


def throughput(latency_s: float, levels: list[int], seconds_per_level: float) -> dict[int, float]:
    rates = {}
    with FakeOpenAIServer(latency_s=latency_s) as server:
        backend = create_backend("openai:bench", base_url=server.base_url, timeout_s=30)
        for concurrency in levels:
            n = max(concurrency * 4, int(seconds_per_level / latency_s * concurrency))
            caller = ModelCaller(backend, concurrency=concurrency)
            reqs = [
                CallRequest((user_message(f"c{concurrency} q{i}"),), GenerationParams(max_tokens=8))
                for i in range(n)
            ]
            caller.call_many(reqs[:concurrency])  # open the connections first
            start = time.perf_counter()
            results = caller.call_many(reqs[concurrency:])
            elapsed = time.perf_counter() - start
            assert all(r.ok for r in results)
            rates[concurrency] = len(results) / elapsed
            print(
                f"  concurrency {concurrency:>3}: {len(results):>5} requests in {elapsed:6.2f} s = {rates[concurrency]:8.1f} req/s"
            )
    return rates


def cache_lookups(entries: int, lookups: int) -> tuple[float, float, int]:
    reply = Reply(
        text="A plausible judge explanation. " * 8 + "[[7]]",
        backend_id="openai:bench",
        usage=Usage(input_tokens=900, output_tokens=120),
        model_snapshot="bench-2026",
        latency_s=1.2,
    )
    value = reply.model_dump(mode="json")
    with tempfile.TemporaryDirectory() as tmp:
        cache = CallCache(Path(tmp))
        keys = [CallRequest((user_message(f"prompt {i}"),)).key("openai:bench") for i in range(entries)]
        start = time.perf_counter()
        for key in keys:
            cache.put(
                key,
                value,
                backend="openai:bench",
                stage="judge",
                input_tokens=900,
                output_tokens=120,
                latency_s=1.2,
            )
        fill_rate = entries / (time.perf_counter() - start)
        cache.close()
        cache = CallCache(Path(tmp))  # warm: reopen, then read
        probe = random.Random(0).choices(keys, k=lookups)
        start = time.perf_counter()
        for key in probe:
            assert cache.get(key, backend="openai:bench") is not None
        rate = lookups / (time.perf_counter() - start)
        size = cache.stats().size_bytes
        cache.close()
    return rate, fill_rate, size


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--latency", type=float, default=0.1, help="injected server latency in seconds")
    parser.add_argument(
        "--seconds", type=float, default=3.0, help="approximate duration of each concurrency level"
    )
    parser.add_argument("--entries", type=int, default=100_000, help="cache entries for the lookup benchmark")
    parser.add_argument("--lookups", type=int, default=20_000)
    args = parser.parse_args()

    print(f"machine: {platform.machine()}, python {platform.python_version()}")
    print(f"throughput, loopback server with {args.latency * 1000:.0f} ms latency:")
    rates = throughput(args.latency, [1, 8, 32], args.seconds)
    print(f"cache, {args.entries:,} entries:")
    lookup_rate, fill_rate, size = cache_lookups(args.entries, args.lookups)
    print(f"  fill {fill_rate:,.0f} puts/s, lookups {lookup_rate:,.0f}/s, {size / 1e6:.1f} MB on disk")

    print("\n| measure | value | target |\n|---|---|---|")
    for c, r in rates.items():
        print(
            f"| requests/s at concurrency {c} | {r:.1f} ({r / rates[1]:.1f}x c=1) | {'>= 15x at 32' if c == 32 else ''} |"
        )
    print(f"| cache lookups/s, {args.entries:,} entries | {lookup_rate:,.0f} | >= 5,000 |")
    print(f"| cache writes/s (one transaction each) | {fill_rate:,.0f} | |")
    print(f"| cache size on disk | {size / 1e6:.1f} MB ({size / args.entries:.0f} B/entry) | |")


if __name__ == "__main__":
    main()
