"""Source adapters on the real public data in ../shared/data (skipped when absent).

Expected values are read from the files here with plain JSON / YAML walking, independently of the adapters.
"""

from __future__ import annotations

import html
import json
from datetime import datetime
from pathlib import Path

import pytest
import yaml

from echo_builder.sources import detect_format, read_posts

pytestmark = pytest.mark.shared_data

ROOT = "x:1649191520250245121"
EXAMPLE_CASES = {"3", "34", "51", "61", "80", "82"}


def _tweets_in_order(path: Path) -> list[dict]:
    """Every object with ``__typename == "Tweet"`` and a ``legacy``, first occurrence per id, document order."""
    found: dict[str, dict] = {}

    def walk(node):
        if isinstance(node, dict):
            if node.get("__typename") == "Tweet" and "legacy" in node:
                found.setdefault(node["rest_id"], node)
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(json.loads(path.read_text(encoding="utf-8")))
    return list(found.values())


def _expected_text(tweet: dict) -> str:
    note = tweet.get("note_tweet", {}).get("note_tweet_results", {}).get("result", {}).get("text")
    return note if note else html.unescape(tweet["legacy"]["full_text"])


def test_tweet_detail_conversation(shared_data):
    path = shared_data / "x_graphql" / "raw_tweet_details.json"
    assert detect_format(path) == "x_graphql"
    report = read_posts(path)
    assert report.errors == [] and len(report.posts) == 37
    assert {p.root_id for p in report.posts} == {ROOT}
    posts = {p.id: p for p in report.posts}
    assert posts[ROOT].reply_to_id is None
    assert all(p.reply_to_id is not None for p in report.posts if p.id != ROOT)

    expected = _tweets_in_order(path)
    assert [p.id for p in report.posts] == [f"x:{t['rest_id']}" for t in expected]
    for tweet in (expected[0], expected[1], expected[-1]):
        post = posts[f"x:{tweet['rest_id']}"]
        legacy = tweet["legacy"]
        assert post.text == _expected_text(tweet)
        assert post.created_at == datetime.strptime(legacy["created_at"], "%a %b %d %H:%M:%S %z %Y")
        assert post.author == tweet["core"]["user_results"]["result"]["core"]["screen_name"]
        assert post.engagement["likes"] == legacy["favorite_count"]
        assert post.engagement["views"] == int(tweet["views"]["count"])
        parent = legacy.get("in_reply_to_status_id_str")
        assert post.reply_to_id == (f"x:{parent}" if parent else None)
    assert posts[ROOT].text.startswith("Today, we are deprecating our Premium v1.1 API")
    # the author's self-thread: the three posts right after the root reply to the post before them
    chain = [p for p in report.posts if p.author_id == posts[ROOT].author_id]
    assert [p.reply_to_id for p in chain[1:4]] == [p.id for p in chain[:3]]


def test_search_timeline_prefers_note_text_and_reads_extended_media(shared_data):
    path = shared_data / "x_graphql" / "raw_search.json"
    report = read_posts(path)
    expected = _tweets_in_order(path)
    assert [p.id for p in report.posts] == [f"x:{t['rest_id']}" for t in expected]
    assert report.errors == []
    # one quoted tweet appears only as {"__typename": "Tweet", "rest_id": ...}: a note, not a post
    assert [p.level for p in report.problems] == ["note"]
    assert "reference without content" in report.problems[0].reason
    posts = {p.id: p for p in report.posts}
    long_posts = [t for t in expected if "note_tweet" in t]
    assert long_posts
    for tweet in long_posts:
        note = tweet["note_tweet"]["note_tweet_results"]["result"]["text"]
        assert posts[f"x:{tweet['rest_id']}"].text == note
    for tweet in expected:
        media = tweet["legacy"].get("extended_entities", {}).get("media", [])
        got = posts[f"x:{tweet['rest_id']}"].media
        assert [m.url for m in got] == [m["media_url_https"] for m in media]
        assert [m.type for m in got] == [m["type"] for m in media]
    quoting = [t for t in expected if t["legacy"].get("quoted_status_id_str")]
    for tweet in quoting:
        assert posts[f"x:{tweet['rest_id']}"].quoted_id == f"x:{tweet['legacy']['quoted_status_id_str']}"


def test_user_media_timeline_photo_urls(shared_data):
    path = shared_data / "x_graphql" / "raw_user_media.json"
    report = read_posts(path)
    assert report.problems == [] and len(report.posts) == 37
    expected = _tweets_in_order(path)
    by_id = {p.id: p for p in report.posts}
    photos = 0
    for tweet in expected:
        media = tweet["legacy"].get("extended_entities", {}).get("media", [])
        post = by_id[f"x:{tweet['rest_id']}"]
        assert [(m.url, m.media_id, m.width, m.height) for m in post.media] == [
            (m["media_url_https"], m["media_key"], m["original_info"]["width"], m["original_info"]["height"])
            for m in media
        ]
        photos += sum(m["type"] == "photo" for m in media)
    assert photos == sum(m.type == "photo" for p in report.posts for m in p.media) > 0
    assert sum(bool(p.media) for p in report.posts) == 36


def test_whole_x_graphql_folder_counts_the_repeated_conversation_as_duplicates(shared_data):
    report = read_posts(shared_data / "x_graphql")
    files = {Path(f.path).name: f for f in report.files}
    assert set(files) == {
        "raw_search.json",
        "raw_tweet_details.json",
        "raw_tweet_replies.json",
        "raw_tweet_thread.json",
        "raw_user_media.json",
    }
    assert report.skipped_files == [str(shared_data / "x_graphql" / "LICENSE")]
    # the replies and thread pages hold the same conversation as the details page, read before them
    assert files["raw_tweet_replies.json"].posts == 0 and files["raw_tweet_replies.json"].duplicates == 37
    assert files["raw_tweet_details.json"].posts == 37
    assert len({p.id for p in report.posts}) == len(report.posts)
    assert report.errors == []


def test_prompt_collection(shared_data):
    folder = shared_data / "prompt_collections" / "awesome-gpt4o-images"
    assert detect_format(folder) == "collection"
    report = read_posts(folder)
    assert report.problems == [] and len(report.posts) == 100
    assert [p.id for p in report.posts] == [f"collection:awesome-gpt4o-images/{n}" for n in range(1, 101)]
    needs_input = 0
    for post in report.posts:
        n = post.id.rsplit("/", 1)[1]
        case_dir = folder / "cases" / n
        case = yaml.safe_load((case_dir / "case.yml").read_text(encoding="utf-8"))
        assert post.text == case["prompt"].rstrip("\n")
        assert post.raw["prompt_en"] == case["prompt_en"]
        assert post.raw["needs_input_image"] is bool(case["reference_note"].strip())
        links = case["source_links"]  # a few cases have none
        assert post.url == (links[0]["url"] if links else None)
        assert post.author == case["author"]
        needs_input += post.raw["needs_input_image"]
        if n in EXAMPLE_CASES:
            assert len(post.media) == 1
            media = post.media[0]
            assert Path(media.path).is_file() and media.url is None and media.type == "image"
            assert Path(media.path) == (case_dir / case["image"]).resolve()
        else:
            assert post.media == ()
    assert needs_input == 38
    assert sum(bool(p.media) for p in report.posts) == len(EXAMPLE_CASES)
    # original languages kept: some prompts are Chinese, none were replaced by the English version
    assert any("\u4e00" <= ch <= "\u9fff" for p in report.posts for ch in p.text)
