"""Benchmark: curation throughput.

Run from the repository root:
    python -m bench.curation forest [--sizes 10000 100000 1000000]
    python -m bench.curation llm [--posts 10000] [--latency 0.2]

``forest``: collect (JSONL of posts, 4 files, 20% of posts duplicated across files) and reply-tree reconstruction on
generated forests with random reply structure, 1% missing parents and 0.2% reply cycles; each size runs in its own
process so peak memory (max RSS) is per size. Target: 1M posts in under 60 s and 4 GB.

``llm``: the relevance and extract stages against the loopback OpenAI-compatible server (scripted JSON answers)
with 200 ms latency, at concurrency 32 on ``--posts`` posts and at concurrency 1 on a 1/50 subset (the full run
at concurrency 1 would take hours), plus model calls per 1,000 posts against one call per post per stage.
"""

from __future__ import annotations

import argparse
import json
import random
import resource
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

from echo_builder.records import Post

T0 = datetime(2025, 3, 25, tzinfo=timezone.utc)


def make_forest(n: int, folder: Path, *, seed: int = 0, files: int = 4) -> list[Path]:
    """Write ``n`` distinct posts (plus 20% duplicates) as JSONL in ``files`` files; returns the paths."""
    rng = random.Random(seed)
    lines: list[str] = []
    conversation_start = 0
    for i in range(n):
        if i == conversation_start or rng.random() < 0.02:
            conversation_start, parent = i, None  # a new conversation
        else:
            parent = rng.randrange(conversation_start, i)
        r = rng.random()
        if r < 0.01:
            parent_id = f"x:missing{i}"
        elif r < 0.012 and i + 1 < n:
            parent_id = f"x:{i + 1}"  # with the next post pointing back (often), a reply cycle
        else:
            parent_id = f"x:{parent}" if parent is not None else None
        post = Post(
            id=f"x:{i}",
            platform="x",
            url=f"https://x.com/u{i % 997}/status/{i}",
            author_id=f"u{i % 997}",
            text=f"post {i} about gpt-4o image generation" if i % 10 == 0 else f"reply {i}",
            created_at=T0 + timedelta(seconds=i),
            reply_to_id=parent_id,
        )
        lines.append(post.model_dump_json())
    lines += rng.sample(lines, n // 5)  # duplicates across files
    rng.shuffle(lines)
    paths = []
    for k in range(files):
        path = folder / f"posts-{k}.jsonl"
        path.write_text("\n".join(lines[k::files]) + "\n")
        paths.append(path)
    return paths


def run_forest(n: int) -> dict[str, float]:
    from echo_builder.sources import read_posts
    from echo_builder.stages.threads import build_trees

    with tempfile.TemporaryDirectory() as tmp:
        paths = make_forest(n, Path(tmp))
        start = time.perf_counter()
        collected = read_posts(paths)
        collect_s = time.perf_counter() - start
        posts = list(collected.posts)
        kept = [p for p in posts if p.text.startswith("post")]
        start = time.perf_counter()
        result = build_trees(kept, posts, max_depth=8, max_size=500)
        threads_s = time.perf_counter() - start
    return {
        "posts": n,
        "collected": len(posts),
        "trees": len(result.trees),
        "collect_s": collect_s,
        "threads_s": threads_s,
        "posts_per_s": n / (collect_s + threads_s),
        "max_rss_gb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6,
    }


def forest(sizes: list[int]) -> None:
    print(
        "| posts | collect s | threads s | total s | posts/s | trees | peak RSS GB |\n|---|---|---|---|---|---|---|"
    )
    for n in sizes:
        out = subprocess.run(
            [sys.executable, "-m", "bench.curation", "_forest_one", str(n)],
            capture_output=True,
            text=True,
            check=True,
        )
        r = json.loads(out.stdout.strip().splitlines()[-1])
        print(
            f"| {n:,} | {r['collect_s']:.1f} | {r['threads_s']:.1f} | {r['collect_s'] + r['threads_s']:.1f} | "
            f"{r['posts_per_s']:,.0f} | {r['trees']:,} | {r['max_rss_gb']:.2f} |"
        )


def llm(n_posts: int, latency: float) -> None:
    from echo_builder.backends import create_backend
    from echo_builder.backends.caller import ModelCaller
    from echo_builder.cache import CallCache
    from echo_builder.sources import read_posts
    from echo_builder.stages.extract import run_extract
    from echo_builder.stages.relevance import run_relevance
    from echo_builder.stages.threads import build_trees
    from tests.helpers.openai_server import FakeOpenAIServer

    def reply(body: dict) -> str:
        text = body["messages"][1]["content"]
        if "Rate the post" in text:
            return '{"score": 5, "note": "scripted"}' if "about gpt-4o" in text else '{"score": 1}'
        url = text.split("[1] ", 1)[1].split(" ", 1)[0]
        return json.dumps({"samples": [{"prompt": "scripted", "post_urls": [url], "quality": "Benchmark"}]})

    rows = []
    with FakeOpenAIServer(reply, latency_s=latency) as server, tempfile.TemporaryDirectory() as tmp:
        backend = create_backend("openai:bench-curator", base_url=server.base_url, timeout_s=60)
        for concurrency, n in ((32, n_posts), (1, max(50, n_posts // 50))):
            folder = Path(tmp) / f"c{concurrency}"
            folder.mkdir()
            posts = list(read_posts(make_forest(n, folder, seed=concurrency)).posts)
            caller = ModelCaller(
                backend, cache=CallCache(Path(tmp) / f"cache{concurrency}"), concurrency=concurrency
            )
            start = time.perf_counter()
            relevance = run_relevance(posts, target_model="gpt-4o", caller=caller)
            trees = build_trees(relevance.kept, posts).trees
            run_extract(trees, target_model="gpt-4o", caller=caller)
            elapsed = time.perf_counter() - start
            rows.append((concurrency, n, elapsed, caller.stats.attempts))
    print(
        "| concurrency | posts | wall s | posts/s | model calls | calls per 1,000 posts (one per post per stage: 2,000) |"
    )
    print("|---|---|---|---|---|---|")
    for concurrency, n, elapsed, calls in rows:
        print(
            f"| {concurrency} | {n:,} | {elapsed:.1f} | {n / elapsed:.1f} | {calls:,} | {1000 * calls / n:,.0f} |"
        )


def main() -> None:
    if len(sys.argv) == 3 and sys.argv[1] == "_forest_one":
        print(json.dumps(run_forest(int(sys.argv[2]))))
        return
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = parser.add_subparsers(dest="what", required=True)
    f = sub.add_parser("forest")
    f.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000, 1_000_000])
    m = sub.add_parser("llm")
    m.add_argument("--posts", type=int, default=10_000)
    m.add_argument("--latency", type=float, default=0.2)
    args = parser.parse_args()
    if args.what == "forest":
        forest(args.sizes)
    else:
        llm(args.posts, args.latency)


if __name__ == "__main__":
    main()
