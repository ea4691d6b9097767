"""Benchmark-length run of the hypothesis property tests: fresh random examples, 25x each test's CI budget.

Run from the repository root:  python -m bench.properties [-k EXPR] [--append]

CI runs the same tests under the derandomised ``ci`` profile (the same examples every run, so the suite cannot
flip); this runs them under the ``long`` profile (``tests/helpers/properties.py``), which draws new examples on
every run and multiplies each test's ``max_examples`` by ``LONG_FACTOR``. A failure prints the falsifying example
and a ``@reproduce_failure`` blob. ``--append`` records the counts in bench/RESULTS.md.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time

from bench.results import append_section, machine
from tests.helpers.properties import LONG_FACTOR, PROFILE_VARIABLE

HEADING = "## Property tests, long profile (`python -m bench.properties`)"
# Every test module that holds a hypothesis property (grep -l "@given" tests -r).
PROPERTY_MODULES = (
    "tests/reliability/test_properties.py",
    "tests/test_records.py",
    "tests/test_sources_fuzz.py",
    "tests/test_sources_hardening.py",
    "tests/test_sources_robustness.py",
    "tests/test_stats_bradley_terry.py",
    "tests/test_stats_ensemble.py",
    "tests/test_stats_labels.py",
    "tests/test_stats_pseudo_pairwise.py",
    "tests/test_stats_win_rates.py",
)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-k", default="", help="pytest -k expression to select properties")
    parser.add_argument("--append", action="store_true", help="append the result to bench/RESULTS.md")
    args = parser.parse_args(argv)
    modules = [m for m in PROPERTY_MODULES if os.path.exists(m)]
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *modules]
    if args.k:
        command += ["-k", args.k]
    started = time.perf_counter()
    done = subprocess.run(command, env={**os.environ, PROFILE_VARIABLE: "long"}, check=False)
    wall = time.perf_counter() - started
    verdict = "passed" if done.returncode == 0 else f"FAILED (pytest exit {done.returncode})"
    print(f"long profile ({LONG_FACTOR}x examples, random seeds): {verdict} in {wall:.0f} s")
    if args.append:
        append_section(
            HEADING,
            f"The property tests of {len(modules)} modules under the long profile ({LONG_FACTOR}x each test's CI "
            f"budget, fresh random examples). Machine: {machine()}.",
            [
                "| modules | result | wall (s) |",
                "|---|---|---|",
                f"| {len(modules)} | {verdict} | {wall:.0f} |",
            ],
        )
    return done.returncode


if __name__ == "__main__":
    raise SystemExit(main())
