"""Benchmark: the statistics pipeline of ECHO Flow 2 on a synthetic run of realistic size.

Run from the repository root:  python -m bench.stats [--models 8] [--prompts 1000] [--judges 3] [--boot 1000]
                                                    [--bt-boot 1000] [--repeats 3] [--append]

1. 8 models x 1,000 prompts x 3 judges of 1-10 ratings (1% judge failures, 2% missing outputs) -> pseudo-pairwise
   -> majority vote -> bootstrap win rates with 1,000 replicates over prompts (target: under 2 s in total).
2. Bradley-Terry on the majority-voted comparisons, and its bootstrap (``--bt-boot`` replicates over prompts).
Each step is timed ``--repeats`` times and the best is kept (the machines here are noisy). Prints a Markdown
table; ``--append`` also appends it, with date and machine, to bench/RESULTS.md.
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import pandas as pd

from bench.results import append_section, machine
from echo_builder.stats import (
    bootstrap_bradley_terry,
    bootstrap_win_rates,
    bradley_terry,
    majority_vote,
    pseudo_pairwise,
)

HEADING = "## Statistics (`python -m bench.stats`)"


def synthetic_ratings(n_models: int, n_prompts: int, n_judges: int, seed: int = 0) -> pd.DataFrame:
    """Ratings with model quality, prompt difficulty shared by all models, and judge noise; a few gaps."""
    rng = np.random.default_rng(seed)
    quality = np.linspace(-1.5, 1.5, n_models)
    difficulty = rng.normal(0.0, 1.5, n_prompts)
    m, p, j = np.meshgrid(np.arange(n_models), np.arange(n_prompts), np.arange(n_judges), indexing="ij")
    raw = 6.0 + quality[m] + difficulty[p] + rng.normal(0.0, 1.2, m.shape)
    rating = np.clip(np.rint(raw), 1, 10).astype(float)
    status = np.full(m.shape, "ok", dtype=object)
    missing = rng.random((n_models, n_prompts)) < 0.02  # a missing output is missing for every judge
    status[np.broadcast_to(missing[:, :, None], m.shape)] = "missing_output"
    failed = (rng.random(m.shape) < 0.01) & (status == "ok")
    status[failed] = rng.choice(["parse_failure", "refusal", "error"], size=int(failed.sum()))
    rating[status != "ok"] = np.nan
    return pd.DataFrame(
        {
            "sample_id": np.char.add("p", p.ravel().astype(str)),
            "model": np.char.add("model_", m.ravel().astype(str)),
            "judge": np.char.add("judge_", j.ravel().astype(str)),
            "rating": rating.ravel(),
            "status": status.ravel(),
        }
    )


def best_of(repeats: int, fn):
    best, result = float("inf"), None
    for _ in range(repeats):
        start = time.perf_counter()
        result = fn()
        best = min(best, time.perf_counter() - start)
    return best, result


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--models", type=int, default=8)
    parser.add_argument("--prompts", type=int, default=1000)
    parser.add_argument("--judges", type=int, default=3)
    parser.add_argument("--boot", type=int, default=1000)
    parser.add_argument("--bt-boot", type=int, default=1000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--append", action="store_true", help="append the table to bench/RESULTS.md")
    args = parser.parse_args()

    ratings = synthetic_ratings(args.models, args.prompts, args.judges)
    t_pp, comps = best_of(args.repeats, lambda: pseudo_pairwise(ratings))
    t_mv, voted = best_of(args.repeats, lambda: majority_vote(comps))
    t_bw, table = best_of(args.repeats, lambda: bootstrap_win_rates(voted, n_boot=args.boot, seed=0))
    t_bt, _ = best_of(args.repeats, lambda: bradley_terry(voted))
    t_btb, bt_table = best_of(
        args.repeats, lambda: bootstrap_bradley_terry(voted, n_boot=args.bt_boot, seed=0)
    )
    total = t_pp + t_mv + t_bw
    width = (table["ci_high"] - table["ci_low"]).mean()

    rows = [
        ("ratings rows (models x prompts x judges)", f"{len(ratings):,}", ""),
        (
            "pseudo-pairwise",
            f"{t_pp:.3f} s ({len(comps):,} comparisons, {comps.attrs['n_abstentions']:,} abstentions)",
            "",
        ),
        ("majority vote", f"{t_mv:.3f} s ({len(voted):,} comparisons)", ""),
        (f"bootstrap win rates, {args.boot:,} replicates", f"{t_bw:.3f} s (mean 95% width {width:.3f})", ""),
        ("total: ratings -> intervals", f"{total:.3f} s", f"< 2 s: {'met' if total < 2 else 'NOT met'}"),
        ("Bradley-Terry fit", f"{t_bt:.3f} s", ""),
        (
            f"Bradley-Terry bootstrap, {args.bt_boot:,} replicates",
            f"{t_btb:.3f} s (mean 95% width {(bt_table['ci_high'] - bt_table['ci_low']).mean():.1f} Elo)",
            "",
        ),
    ]
    lines = ["| measure | value | target |", "|---|---|---|"]
    lines += [f"| {a} | {b} | {c} |" for a, b, c in rows]
    print("\n".join(lines))
    if args.append:
        where = machine(f"numpy {np.__version__}", f"pandas {pd.__version__}")
        intro = (
            f"{args.models} models x {args.prompts:,} prompts x {args.judges} judges of synthetic 1-10 ratings "
            "(model quality + prompt difficulty shared by all models + judge noise; 2% missing outputs, 1% judge "
            f"failures). Best of {args.repeats} runs; {where}."
        )
        append_section(HEADING, intro, lines)


if __name__ == "__main__":
    main()
