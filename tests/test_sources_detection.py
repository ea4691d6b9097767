"""Source adapters: format detection and the override, the registry, adapter failures, and less common shapes."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path

import pytest

from echo_builder.errors import ConfigError, RecordError
from echo_builder.records import Post
from echo_builder.sources import (
    SourceAdapter,
    detect_format,
    get_source,
    list_sources,
    read_posts,
    register_source,
)
from echo_builder.sources import base as sources_base

DATA = Path(__file__).parent / "data" / "sources"
COLLECTION = DATA / "collection" / "mini-prompts"
UTC = timezone.utc


def _by_id(report) -> dict[str, Post]:
    return {p.id: p for p in report.posts}


def _problems(report) -> list[tuple[str | None, str]]:
    return [(p.location, p.level) for p in report.problems]


# ------------------------------------------------------------------------------------------------ detection


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("x_api_page.json", "x_api"),
        ("x_api_pages.jsonl", "x_api"),
        ("x_graphql_detail.json", "x_graphql"),
        ("reddit_dump.ndjson", "reddit"),
        ("bluesky_thread.json", "bluesky"),
        ("posts.jsonl", "jsonl"),
        ("collection/mini-prompts", "collection"),
    ],
)
def test_detect_format_of_each_fixture(name, expected):
    assert detect_format(DATA / name) == expected
    report = read_posts(DATA / name)
    assert [f.format for f in report.files] == [expected]


def test_detection_reads_content_not_the_extension(tmp_path):
    odd = tmp_path / "reddit_dump.txt"  # unknown extension, several values: read as JSON Lines
    shutil.copy(DATA / "reddit_dump.ndjson", odd)
    assert detect_format(odd) == "reddit"
    assert len(read_posts(odd).posts) == 6
    single = tmp_path / "thread.data"
    shutil.copy(DATA / "bluesky_thread.json", single)
    assert detect_format(single) == "bluesky"


def test_format_override_reads_what_detection_cannot(tmp_path):
    # comments without a subreddit field do not look like Reddit to the sniffer
    path = tmp_path / "comments.jsonl"
    path.write_text(
        '{"id": "c1", "link_id": "t3_p", "parent_id": "t3_p", "body": "hi", "author": "u", "created_utc": 1}\n',
        encoding="utf-8",
    )
    auto = read_posts(path)
    assert auto.posts == [] and len(auto.problems) == 1
    assert auto.problems[0].location is None and "unknown format" in auto.problems[0].reason
    forced = read_posts(path, format="reddit")
    assert [p.id for p in forced.posts] == ["reddit:t1_c1"] and forced.problems == []
    assert forced.files[0].format == "reddit"


def test_format_override_applies_even_when_wrong():
    report = read_posts(DATA / "posts.jsonl", format="bluesky")
    assert report.posts == [] and report.files[0].format == "bluesky"
    assert len(report.errors) == 4  # every line reported, none silently dropped


def test_unknown_format_name_is_a_config_error():
    with pytest.raises(ConfigError, match="registered formats: bluesky, collection, jsonl"):
        read_posts(DATA / "posts.jsonl", format="mastodon")


def test_folder_format_on_a_file_and_file_format_on_a_collection_are_problems():
    on_file = read_posts(DATA / "posts.jsonl", format="collection")
    assert on_file.posts == [] and "reads folders, not files" in on_file.problems[0].reason
    on_folder = read_posts(COLLECTION, format="jsonl")
    assert on_folder.posts == [] and [p.location for p in on_folder.problems] == [None]
    assert "reads files, but this folder is a 'collection' input" in on_folder.problems[0].reason
    with pytest.raises(RecordError, match=r"case\.yml: file is not valid JSON"):
        detect_format(COLLECTION / "cases" / "1" / "case.yml")
    with pytest.raises(RecordError, match="not an input of any folder format"):
        detect_format(DATA / "collection")


# ------------------------------------------------------------------------------------------------ registry


def test_list_sources_names_every_builtin_adapter():
    infos = list_sources()
    assert [i.name for i in infos] == [
        "bluesky",
        "collection",
        "jsonl",
        "reddit",
        "twscrape",
        "x_api",
        "x_graphql",
    ]
    assert [i.name for i in infos if i.reads_folders] == ["collection"]
    assert all(i.description for i in infos)


def test_a_new_adapter_is_one_registered_class(tmp_path):
    class MastodonSource(SourceAdapter):
        name = "mastodon_test"
        description = "test-only"

        def sniff(self, value):
            return isinstance(value, dict) and "mastodon_statuses" in value

        def parse_document(self, document, ctx):
            for status in document.value["mastodon_statuses"]:
                yield Post(id=f"web:{status['id']}", platform="web", text=status["content"])

    try:
        register_source(MastodonSource)
        assert get_source("mastodon_test").name == "mastodon_test"
        path = tmp_path / "toots.json"
        path.write_text('{"mastodon_statuses": [{"id": "9", "content": "toot"}]}', encoding="utf-8")
        assert detect_format(path) == "mastodon_test"
        assert [p.id for p in read_posts(path).posts] == ["web:9"]

        class Impostor(SourceAdapter):
            name = "mastodon_test"

        with pytest.raises(ConfigError, match="already registered"):
            register_source(Impostor)
    finally:
        sources_base.SOURCES.remove("mastodon_test")
    with pytest.raises(ConfigError, match="unknown source format 'mastodon_test'"):
        get_source("mastodon_test")


def test_an_adapter_bug_is_one_problem_and_the_other_files_still_load(tmp_path):
    class Crashing(SourceAdapter):
        name = "crashing_test"

        def sniff(self, value):
            return isinstance(value, dict) and "crash_me" in value

        def parse_document(self, document, ctx):
            yield Post(id="web:before-crash", platform="web")
            raise RuntimeError("adapter bug")

    bad = tmp_path / "bad.json"
    bad.write_text('{"crash_me": true}', encoding="utf-8")
    try:
        register_source(Crashing)
        report = read_posts([bad, DATA / "posts.jsonl"])
    finally:
        sources_base.SOURCES.remove("crashing_test")
    assert [p.id for p in report.posts][:2] == ["web:before-crash", "x:1"]
    crash = report.problems[0]
    assert (crash.file, crash.location) == (str(bad), None)
    assert crash.reason == "reading stopped by an unexpected RuntimeError: adapter bug"


def test_an_adapter_whose_detection_raises_is_passed_over(tmp_path):
    """A detection bug (a plugin's ``sniff`` or ``sniff_folder`` raising) is "not this format": the next adapter
    is asked and every input is still read; it used to stop the file (sniff) or the whole read_posts (folders)."""

    class ExplodingSniff(SourceAdapter):
        name = "exploding_test"

        def sniff(self, value):
            raise RuntimeError("sniff bug")

    class ExplodingFolder(SourceAdapter):
        name = "exploding_folder_test"
        reads_folders = True

        def sniff_folder(self, folder):
            raise RuntimeError("sniff_folder bug")

    class Claimer(SourceAdapter):
        name = "claimer_test"

        def sniff(self, value):
            return isinstance(value, dict) and "claim_me" in value

        def parse_document(self, document, ctx):
            yield Post(id=f"web:{document.value['claim_me']}", platform="web")

    folder = tmp_path / "exports"
    folder.mkdir()
    (folder / "a.json").write_text('{"claim_me": "a"}', encoding="utf-8")
    shutil.copy(DATA / "posts.jsonl", folder / "b.jsonl")
    try:
        for cls in (ExplodingSniff, ExplodingFolder, Claimer):
            register_source(cls)
        assert detect_format(folder / "a.json") == "claimer_test"
        report = read_posts(folder)
    finally:
        for name in ("exploding_test", "exploding_folder_test", "claimer_test"):
            sources_base.SOURCES.remove(name)
    alone = read_posts(DATA / "posts.jsonl")
    assert [p.id for p in report.posts] == ["web:a", *(p.id for p in alone.posts)]
    assert [(f.format, f.errors) for f in report.files] == [
        ("claimer_test", 0),
        ("jsonl", len(alone.problems)),
    ]


def test_importing_sources_pulls_no_heavy_dependency():
    code = (
        "import sys, echo_builder.sources\n"
        "heavy = [m for m in ('torch', 'transformers', 'openai', 'accelerate', 'datasets') if m in sys.modules]\n"
        "print(','.join(heavy))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == ""


def _gql_tweet(rest_id: str, text: str, **legacy) -> dict:
    return {
        "__typename": "Tweet",
        "rest_id": rest_id,
        "core": {"user_results": {"result": {"rest_id": "9", "core": {"screen_name": "tl_owner"}}}},
        "legacy": {"full_text": text, "created_at": "Mon Mar 31 10:00:00 +0000 2025", **legacy},
    }


def test_x_graphql_retweet_wrapper_is_a_note_and_the_original_a_post(tmp_path):
    original = _gql_tweet("2", "the original post", conversation_id_str="2")
    retweet = _gql_tweet("1", "RT @someone: the original post", retweeted_status_result={"result": original})
    entry = {"content": {"itemContent": {"tweet_results": {"result": retweet}}}}
    timeline = {"data": {"user": {"result": {"timeline": {"instructions": [{"entries": [entry]}]}}}}}
    path = tmp_path / "timeline.json"
    path.write_text(json.dumps(timeline), encoding="utf-8")
    report = read_posts(path)
    assert [p.id for p in report.posts] == ["x:2"]
    assert [(p.level, "retweet of x:2" in p.reason) for p in report.problems] == [("note", True)]
    assert report.posts[0].created_at == datetime(2025, 3, 31, 10, tzinfo=UTC)


def test_bluesky_feed_and_post_list_shapes(tmp_path):
    def view(rkey: str, text: str, parent: str | None = None) -> dict:
        record = {"text": text, "createdAt": "2025-03-27T12:00:00Z"}
        if parent:
            record["reply"] = {"parent": {"uri": parent}, "root": {"uri": parent}}
        return {
            "uri": f"at://did:plc:x/app.bsky.feed.post/{rkey}",
            "author": {"did": "did:plc:x"},
            "record": record,
        }

    parent_uri = "at://did:plc:x/app.bsky.feed.post/p"
    feed = {
        "feed": [
            {"post": view("a", "reply in a feed", parent_uri), "reply": {"parent": view("p", "its parent")}},
            {
                "post": view("b", "reply to a deleted post"),
                "reply": {"parent": {"uri": "at://gone", "notFound": True}},
            },
        ]
    }
    posts = {"posts": [view("c", "from searchPosts"), view("a", "again")]}
    (tmp_path / "1_feed.json").write_text(json.dumps(feed), encoding="utf-8")
    (tmp_path / "2_posts.json").write_text(json.dumps(posts), encoding="utf-8")
    report = read_posts(tmp_path)
    assert [f.format for f in report.files] == ["bluesky", "bluesky"]
    assert [p.id.rsplit("/", 1)[1] for p in report.posts] == ["a", "p", "b", "c"]
    assert report.posts[0].reply_to_id == f"bluesky:{parent_uri}"
    assert report.posts[0].url == "https://bsky.app/profile/did:plc:x/post/a"  # no handle: the DID
    assert report.duplicates == 1
    assert [(p.location, p.level) for p in report.problems] == [("feed[1].reply.parent", "note")]
