"""Benchmark: reading exports into posts (the ``collect`` stage) on synthetic files of realistic size.

Run from the repository root:  python -m bench.sources [--scale 1.0] [--repeats 3] [--append]

Writes, in a temporary folder, one export per format at ``--scale`` x these sizes and times ``read_posts``:
1. Reddit NDJSON: 20,000 submissions (a third galleries) + 80,000 comments.
2. X API v2: 1,000 JSONL pages of 100 tweets with ``includes`` (users, media, quoted tweets).
3. X GraphQL: 200 TweetDetail-like responses of 50 tweets each (entries, conversation modules, quotes).
4. Bluesky: 500 threads of 1 post + 20 replies + 20 nested replies.
5. JSON Lines of ``Post``: 100,000 posts (the package's own format, written by ``write_jsonl``).
Each read is timed ``--repeats`` times, best kept, with and without ``raw``. Prints a Markdown table; ``--append``
also appends it, with date and machine, to bench/RESULTS.md.

``python -m bench.sources --dump [--dump-gb 2] [--plain-gb 0.25] [--append]`` (issue 17, deliverable 3) instead
generates a Reddit-style zstd dump of ``--dump-gb`` GB uncompressed (Arctic Shift field layout, threads of a
submission and 2-14 comments, 0.2% of threads mentioning the keyword ``gpt-image-1``), streamed to disk in a temporary
folder (about a tenth of the size on disk), and runs ``echo-bench build --backend rules --offline --keywords`` on
it in a child process: with ``--prefilter`` on the whole dump, and plain on a ``--plain-gb`` dump (a plain build
keeps every post, so its memory grows with the dump; a 2 GB plain build needs about 16 GB). For each it records
wall time, the child's CPU time, the decompressed MB/s over both, and the child's peak RSS.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from bench.results import append_section, machine
from echo_builder.sources import read_posts, write_jsonl

HEADING = "## Sources (`python -m bench.sources`)"
TEXT = "Tried the new image model on my cat 🐱 &amp; the result is wild. Prompt: a watercolor portrait, soft light"


def write_reddit(path: Path, n_submissions: int, n_comments: int) -> None:
    with path.open("w", encoding="utf-8") as fh:
        for i in range(n_submissions):
            item = {
                "id": f"s{i}",
                "name": f"t3_s{i}",
                "subreddit": "aiArt",
                "title": f"Post {i}: {TEXT}",
                "selftext": TEXT * 3,
                "author": f"user{i % 997}",
                "author_fullname": f"t2_u{i % 997}",
                "created_utc": 1_743_000_000 + i,
                "score": i % 500,
                "num_comments": 4,
                "permalink": f"/r/aiArt/comments/s{i}/post_{i}/",
                "url": f"https://i.redd.it/img{i}.jpg",
                "post_hint": "image",
                "preview": {
                    "images": [
                        {
                            "source": {
                                "url": f"https://preview.redd.it/img{i}.jpg?a=1&amp;b=2",
                                "width": 1024,
                                "height": 1024,
                            }
                        }
                    ]
                },
            }
            if i % 3 == 0:
                item |= {
                    "is_gallery": True,
                    "gallery_data": {"items": [{"media_id": f"g{i}a"}, {"media_id": f"g{i}b"}]},
                    "media_metadata": {
                        f"g{i}{k}": {
                            "status": "valid",
                            "e": "Image",
                            "s": {
                                "u": f"https://preview.redd.it/g{i}{k}.png?w=1&amp;s=x",
                                "x": 1024,
                                "y": 768,
                            },
                        }
                        for k in "ab"
                    },
                }
            fh.write(json.dumps(item) + "\n")
        for j in range(n_comments):
            link = f"t3_s{j % max(n_submissions, 1)}"
            parent = link if j % 2 == 0 else f"t1_c{j - 1}"
            comment = {
                "id": f"c{j}",
                "link_id": link,
                "parent_id": parent,
                "subreddit": "aiArt",
                "body": f"comment {j}: the colours look &lt;warm&gt; to me",
                "author": f"user{j % 1009}",
                "created_utc": 1_743_100_000 + j,
                "score": j % 50 - 5,
            }
            fh.write(json.dumps(comment) + "\n")


def _v2_tweet(i: int, page: int) -> dict:
    tid = str(1_900_000_000_000_000_000 + page * 1000 + i)
    tweet = {
        "id": tid,
        "text": f"{TEXT} #{i}",
        "author_id": str(500 + i % 50),
        "created_at": "2025-03-26T18:02:11.000Z",
        "conversation_id": str(1_900_000_000_000_000_000 + page * 1000),
        "lang": "en",
        "attachments": {"media_keys": [f"3_{tid}"]},
        "public_metrics": {
            "like_count": i,
            "retweet_count": 1,
            "reply_count": 2,
            "quote_count": 0,
            "impression_count": 900,
        },
    }
    if i:
        tweet["referenced_tweets"] = [{"type": "replied_to", "id": str(int(tid) - 1)}]
    return tweet


def write_x_api(path: Path, pages: int, per_page: int) -> None:
    with path.open("w", encoding="utf-8") as fh:
        for page in range(pages):
            tweets = [_v2_tweet(i, page) for i in range(per_page)]
            response = {
                "data": tweets,
                "includes": {
                    "users": [
                        {"id": str(500 + u), "username": f"user_{u}", "name": f"U {u}"} for u in range(50)
                    ],
                    "media": [
                        {
                            "media_key": f"3_{t['id']}",
                            "type": "photo",
                            "url": f"https://pbs.twimg.com/media/{t['id']}.jpg",
                            "width": 1024,
                            "height": 1024,
                        }
                        for t in tweets
                    ],
                    "tweets": [_v2_tweet(per_page + 1, page + pages)],
                },
                "meta": {"result_count": per_page},
            }
            fh.write(json.dumps(response) + "\n")


def _graphql_tweet(tid: int, root: int, parent: int | None, quoted: dict | None = None) -> dict:
    legacy = {
        "id_str": str(tid),
        "full_text": f"{TEXT} {tid}",
        "created_at": "Thu Apr 20 23:21:13 +0000 2023",
        "conversation_id_str": str(root),
        "user_id_str": str(tid % 1000),
        "lang": "en",
        "favorite_count": 3,
        "retweet_count": 1,
        "reply_count": 0,
        "quote_count": 0,
        "bookmark_count": 0,
        "extended_entities": {
            "media": [
                {
                    "id_str": str(tid),
                    "media_key": f"3_{tid}",
                    "media_url_https": f"https://pbs.twimg.com/media/{tid}.jpg",
                    "type": "photo",
                    "original_info": {"width": 1200, "height": 800},
                }
            ]
        },
    }
    if parent is not None:
        legacy["in_reply_to_status_id_str"] = str(parent)
    tweet = {
        "__typename": "Tweet",
        "rest_id": str(tid),
        "core": {
            "user_results": {
                "result": {
                    "__typename": "User",
                    "rest_id": str(tid % 1000),
                    "core": {"screen_name": f"user_{tid % 1000}"},
                }
            }
        },
        "views": {"count": "1234"},
        "legacy": legacy,
    }
    if quoted is not None:
        tweet["quoted_status_result"] = {"result": quoted}
        legacy["quoted_status_id_str"] = quoted["rest_id"]
    return tweet


def write_x_graphql(folder: Path, files: int, per_file: int) -> None:
    for f in range(files):
        root = 1_600_000_000_000_000_000 + f * 10_000
        entries = [
            {"content": {"itemContent": {"tweet_results": {"result": _graphql_tweet(root, root, None)}}}}
        ]
        for k in range(1, per_file, 2):
            quoted = _graphql_tweet(root + 5000 + k, root + 5000 + k, None)
            items = [
                {
                    "item": {
                        "itemContent": {"tweet_results": {"result": _graphql_tweet(root + k, root, root)}}
                    }
                },
                {
                    "item": {
                        "itemContent": {
                            "tweet_results": {"result": _graphql_tweet(root + k + 1, root, root + k, quoted)}
                        }
                    }
                },
            ]
            entries.append({"content": {"items": items}})
        response = {
            "data": {"threaded_conversation_with_injections_v2": {"instructions": [{"entries": entries}]}}
        }
        (folder / f"detail_{f:04d}.json").write_text(json.dumps(response), encoding="utf-8")


def _bsky_post(uri: str, text: str, parent: str | None, root: str | None) -> dict:
    record: dict = {
        "$type": "app.bsky.feed.post",
        "text": text,
        "createdAt": "2025-03-27T12:00:00.000Z",
        "langs": ["en"],
    }
    if parent:
        record["reply"] = {"parent": {"uri": parent}, "root": {"uri": root}}
    did = uri.split("/")[2]
    return {
        "uri": uri,
        "cid": "bafy",
        "author": {"did": did, "handle": f"{did[8:]}.bsky.social"},
        "record": record,
        "embed": {
            "$type": "app.bsky.embed.images#view",
            "images": [
                {
                    "thumb": f"{uri}/t",
                    "fullsize": f"{uri}/f",
                    "alt": "an image",
                    "aspectRatio": {"width": 4, "height": 3},
                }
            ],
        },
        "likeCount": 1,
        "repostCount": 0,
        "replyCount": 1,
        "quoteCount": 0,
    }


def write_bluesky(path: Path, threads: int, replies: int) -> None:
    with path.open("w", encoding="utf-8") as fh:
        for t in range(threads):
            root = f"at://did:plc:r{t}/app.bsky.feed.post/root"
            nodes = []
            for r in range(replies):
                uri = f"at://did:plc:a{r}/app.bsky.feed.post/t{t}r{r}"
                nested_uri = f"at://did:plc:b{r}/app.bsky.feed.post/t{t}n{r}"
                nested = {"post": _bsky_post(nested_uri, TEXT, uri, root), "replies": []}
                nodes.append({"post": _bsky_post(uri, TEXT, root, root), "replies": [nested]})
            fh.write(
                json.dumps({"thread": {"post": _bsky_post(root, TEXT, None, None), "replies": nodes}}) + "\n"
            )


_WORDS = [
    "the",
    "a",
    "cat",
    "dog",
    "light",
    "soft",
    "portrait",
    "watercolor",
    "result",
    "wild",
    "prompt",
    "model",
    "image",
    "render",
    "style",
    "colours",
    "look",
    "warm",
    "cool",
    "sharp",
    "detail",
    "face",
    "hand",
    "text",
    "sign",
    "poster",
]
_SUBMISSION = (
    '{"id":"%s","name":"t3_%s","subreddit":"aiArt","subreddit_id":"t5_2r0ij","title":"%s","selftext":"%s",'
    '"author":"user%d","author_fullname":"t2_u%d","created_utc":%d,"retrieved_on":%d,"score":%d,"num_comments":%d,'
    '"permalink":"/r/aiArt/comments/%s/p/","url":"https://i.redd.it/%s.jpg","post_hint":"image","domain":"i.redd.it",'
    '"is_self":false,"over_18":false,"spoiler":false,"stickied":false,"locked":false,"gilded":0,"edited":false,'
    '"distinguished":null,"author_flair_text":null,"link_flair_text":"Discussion","all_awardings":[],"awarders":[],'
    '"thumbnail":"https://b.thumbs.redditmedia.com/%s.jpg","upvote_ratio":0.97,"num_crossposts":0}\n'
)
_COMMENT = (
    '{"id":"%s","name":"t1_%s","link_id":"t3_%s","parent_id":"%s","subreddit":"aiArt","subreddit_id":"t5_2r0ij",'
    '"body":"%s","author":"user%d","author_fullname":"t2_u%d","created_utc":%d,"retrieved_on":%d,"score":%d,'
    '"permalink":"/r/aiArt/comments/%s/p/%s/","controversiality":0,"gilded":0,"edited":false,"stickied":false,'
    '"distinguished":null,"author_flair_text":null,"is_submitter":false,"collapsed":false,"all_awardings":[],'
    '"score_hidden":false,"send_replies":true}\n'
)


def write_reddit_dump(
    path: Path, target_bytes: int, keyword: str = "gpt-image-1", rate: float = 0.002
) -> int:
    """A zstd Reddit dump of about ``target_bytes`` uncompressed; returns the uncompressed size. Templated lines
    (no JSON encoder per record) so that writing 2 GB takes well under a minute."""
    import random

    import zstandard

    rng = random.Random(0)
    texts = [" ".join(rng.choice(_WORDS) for _ in range(rng.randint(8, 60))) for _ in range(4096)]
    hits = [
        f"{t[:40]} made with {keyword.upper() if i % 2 else keyword} {t[40:]}"
        for i, t in enumerate(texts[:256])
    ]
    written, thread, t0 = 0, 0, 1_743_000_000
    compressor = zstandard.ZstdCompressor(level=3, threads=2, write_content_size=False)
    with path.open("wb") as fh, compressor.stream_writer(fh) as out:
        while written < target_bytes:
            batch = []
            for _ in range(200):
                sid = f"s{thread:x}"
                thread += 1
                hot = rng.random() < rate
                title = (hits[thread % 256] if hot else texts[thread % 4096])[:120]
                n = rng.randint(2, 14)
                user = thread % 9973
                batch.append(
                    _SUBMISSION
                    % (
                        *(sid, sid, title, texts[thread * 7 % 4096], user, user),
                        *(t0 + thread, t0 + thread + 9, thread % 500, n, sid, sid, sid),
                    )
                )
                parent = f"t3_{sid}"
                for k in range(n):
                    cid = f"{sid}c{k}"
                    mention = (hot and k == 0) or rng.random() < rate / 4
                    body = hits[(thread + k) % 256] if mention else texts[(thread * 13 + k) % 4096]
                    who = (thread + k) % 10007
                    batch.append(
                        _COMMENT
                        % (
                            *(cid, cid, sid, parent, body, who, who),
                            *(t0 + thread + k, t0 + thread + k + 9, k - 2, sid, cid),
                        )
                    )
                    parent = f"t1_{cid}" if k % 2 == 0 else parent
            data = "".join(batch).encode()
            out.write(data)
            written += len(data)
    return written


def run_build(args: list[str]) -> dict[str, float]:
    """``echo-bench build ARGS`` in a child process: wall seconds, the child's CPU seconds, its peak RSS (MB)."""
    import os
    import subprocess
    import sys

    start = time.perf_counter()
    child = subprocess.Popen(
        [sys.executable, "-m", "echo_builder.cli", "build", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    output = child.stdout.read() if child.stdout else b""  # type: ignore[union-attr]
    _, status, usage = os.wait4(child.pid, 0)
    child.returncode = os.waitstatus_to_exitcode(status)
    wall = time.perf_counter() - start
    if child.returncode != 0:
        raise SystemExit(f"build failed ({child.returncode}):\n{output.decode(errors='replace')[-3000:]}")
    return {"wall": wall, "cpu": usage.ru_utime + usage.ru_stime, "rss_mb": usage.ru_maxrss / 1024}


def dump_main(args: argparse.Namespace) -> None:
    import shutil

    rows = []
    with tempfile.TemporaryDirectory(prefix="echo-bench-dump-") as tmp:
        root = Path(tmp)
        free = shutil.disk_usage(root).free
        if free < args.dump_gb * 0.3e9:
            raise SystemExit(
                f"{root}: {free / 1e9:.1f} GB free; the dump needs about {args.dump_gb * 0.15:.1f} GB"
            )
        (root / "keywords.txt").write_text("gpt-image-1\n", encoding="utf-8")
        runs = [("--prefilter", args.dump_gb, ["--prefilter"]), ("plain", args.plain_gb, [])]
        for label, gb, extra in runs:
            if gb <= 0:
                continue
            dump = root / f"RC_synthetic_{gb:g}GB.zst"
            started = time.perf_counter()
            size = write_reddit_dump(dump, int(gb * 1e9))
            made = time.perf_counter() - started
            print(
                f"wrote {dump.name}: {size / 1e6:,.0f} MB uncompressed, {dump.stat().st_size / 1e6:,.0f} MB on disk "
                f"in {made:.0f} s",
                flush=True,
            )
            out = root / f"out-{label.strip('-')}"
            flags = [
                "--out",
                str(out),
                "--backend",
                "rules",
                "--offline",
                "--keywords",
                str(root / "keywords.txt"),
            ]
            result = run_build([str(dump), *flags, *extra])
            report = json.loads((out / "report.json").read_text(encoding="utf-8"))
            collect = report["stages"][0]
            mb = size / 1e6
            rows.append(
                (
                    f"build {label}",
                    f"{mb:,.0f} MB ({dump.stat().st_size / 1e6:,.0f} MB .zst)",
                    f"{collect['out']:,} posts collected, {report['stages'][1]['out']:,} matched",
                    f"{result['wall']:.0f} s ({mb / result['wall']:.1f} MB/s)",
                    f"{result['cpu']:.0f} s ({mb / result['cpu']:.1f} MB/s)",
                    f"{result['rss_mb']:,.0f} MB",
                )
            )
            print(rows[-1], flush=True)
            dump.unlink()
            shutil.rmtree(out)
    lines = [
        "| run | input (decompressed) | posts | wall time | CPU time of the build | peak RSS |",
        "|---|---|---|---|---|---|",
    ]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    print("\n".join(lines))
    if args.append:
        intro = (
            "Generated Reddit-style zstd dump (Arctic Shift field layout, about 730 bytes a line, 0.2% of threads "
            "mentioning the keyword) through `echo-bench build --backend rules --offline --keywords` in a child "
            f"process; MB/s are decompressed input bytes over wall and over CPU time; {machine()}."
        )
        append_section("## Streaming sources (`python -m bench.sources --dump`)", intro, lines)


def best_of(repeats: int, fn: Callable[[], object]) -> tuple[float, object]:
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
    parser.add_argument("--scale", type=float, default=1.0, help="multiply every size by this")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--append", action="store_true", help="append the table to bench/RESULTS.md")
    parser.add_argument(
        "--dump", action="store_true", help="benchmark builds from a generated .zst dump instead"
    )
    parser.add_argument(
        "--dump-gb", type=float, default=2.0, help="decompressed size of the --prefilter dump"
    )
    parser.add_argument(
        "--plain-gb", type=float, default=0.25, help="decompressed size of the plain-build dump"
    )
    args = parser.parse_args()
    if args.dump:
        dump_main(args)
        return

    def n(x: int) -> int:
        return max(1, round(x * args.scale))

    rows = []
    with tempfile.TemporaryDirectory(prefix="echo-bench-sources-") as tmp:
        root = Path(tmp)
        (root / "graphql").mkdir()
        write_reddit(root / "reddit.ndjson", n(20_000), n(80_000))
        write_x_api(root / "x_api.jsonl", n(1_000), 100)
        write_x_graphql(root / "graphql", n(200), 50)
        write_bluesky(root / "bluesky.jsonl", n(500), 20)
        sample = read_posts(root / "reddit.ndjson").posts[:1000]
        write_jsonl(
            (sample[i % len(sample)].model_copy(update={"id": f"reddit:t1_x{i}"}) for i in range(n(100_000))),
            root / "posts.jsonl",
        )
        inputs = [
            ("reddit (NDJSON)", root / "reddit.ndjson"),
            ("x_api (JSONL pages)", root / "x_api.jsonl"),
            ("x_graphql (JSON files)", root / "graphql"),
            ("bluesky (JSONL threads)", root / "bluesky.jsonl"),
            ("jsonl of Post", root / "posts.jsonl"),
        ]
        for label, path in inputs:
            size = sum(p.stat().st_size for p in ([path] if path.is_file() else path.iterdir()))
            t_raw, report = best_of(args.repeats, lambda path=path: read_posts(path))
            t_lean, _ = best_of(args.repeats, lambda path=path: read_posts(path, keep_raw=False))
            count = len(report.posts)  # type: ignore[attr-defined]
            assert not report.errors, report.errors[:3]  # type: ignore[attr-defined]
            rows.append(
                (
                    label,
                    f"{count:,} posts, {size / 1e6:.1f} MB",
                    f"{t_raw:.2f} s ({count / t_raw:,.0f} posts/s, {size / 1e6 / t_raw:.1f} MB/s)",
                    f"{t_lean:.2f} s ({count / t_lean:,.0f} posts/s)",
                )
            )
    lines = ["| input | size | read_posts | keep_raw=False |", "|---|---|---|---|"]
    lines += [f"| {a} | {b} | {c} | {d} |" for a, b, c, d in rows]
    print("\n".join(lines))
    if args.append:
        where = machine()
        intro = (
            f"Synthetic exports at scale {args.scale} (sizes in the module docstring), each read whole with "
            f"read_posts (decode, parse, detect, map, validate, de-duplicate). Best of {args.repeats} runs; {where}."
        )
        append_section(HEADING, intro, lines)


if __name__ == "__main__":
    main()
