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
    args = parser.parse_args()

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
