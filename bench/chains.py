"""Benchmark: ``echo-bench build`` on reply chains 10,000 to 100,000 posts deep (issue 13 item 12).

Run from the repository root:  python -m bench.chains [--sizes 10000,30000,100000] [--append]

Each chain (``tests.helpers.chains``) is built by the real CLI in a subprocess with the offline rules backend,
twice: every post on topic (all kept, one tree with every post as a seed) and only the deepest post on topic. The
table gives the wall time, the time per 1,000 posts, and each size's time relative to the smallest size: linear
work keeps the time per 1,000 posts flat (the ratio grows like the size); before the fix the threads stage was
cubic (3,000 kept posts: 140 s; 30,000 posts with one kept: 512 s).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.results import append_section, machine
from tests.helpers.chains import write_chain

HEADING = "## Reply-chain depth (`python -m bench.chains`)"


def build_seconds(source: Path, out: Path) -> float:
    argv = [sys.executable, "-m", "echo_builder.cli", "build", str(source), "--target-model", "Lumen-2"]
    argv += ["--launch-date", "2025-06-10", "--offline", "--out", str(out)]
    started = time.perf_counter()
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=1800)
    return time.perf_counter() - started


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="10000,30000,100000", help="chain lengths, comma-separated")
    parser.add_argument("--append", action="store_true", help="append the table to bench/RESULTS.md")
    args = parser.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",")]
    lines = [
        "| kept | posts | wall (s) | s per 1,000 posts | time vs smallest | size vs smallest |",
        "|---|---|---|---|---|---|",
    ]
    with tempfile.TemporaryDirectory(prefix="echo-bench-chains-") as tmp:
        for kept in ("all", "last"):
            first = None
            for n in sizes:
                folder = Path(tmp) / f"{kept}-{n}"
                folder.mkdir()
                wall = build_seconds(write_chain(folder / "chain.jsonl", n, kept=kept), folder / "out")
                first = first or wall
                lines.append(
                    f"| {kept} | {n:,} | {wall:.1f} | {1000 * wall / n:.3f} | {wall / first:.1f}x | {n / sizes[0]:.0f}x |"
                )
                print(lines[-1], flush=True)
    if args.append:
        append_section(
            HEADING,
            "echo-bench build (rules backend, offline) on one reply chain, every post kept or only the deepest; "
            f"wall time includes the CLI's start (about 3 s). Machine: {machine()}.",
            lines,
        )


if __name__ == "__main__":
    main()
