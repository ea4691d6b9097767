"""Source adapters on bad and extreme input: whole-file problems, bad lines among good ones, huge and odd text,
deep nesting, duplicates across files, folder walking, and the JSONL round-trip (property-based)."""

from __future__ import annotations

import json
import shutil
import tempfile
from datetime import datetime, timedelta, timezone
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from echo_builder.ids import PLATFORMS
from echo_builder.records import MediaRef, Post
from echo_builder.sources import read_posts, write_jsonl
from tests.helpers.properties import examples

DATA = Path(__file__).parent / "data" / "sources"
UTC = timezone.utc


def _reddit_comment(cid: str, body: str, parent: str = "t3_p1") -> dict:
    return {
        "id": cid,
        "link_id": "t3_p1",
        "parent_id": parent,
        "subreddit": "aiArt",
        "body": body,
        "author": "someone",
        "created_utc": 1743000000,
        "score": 1,
    }


def _only_file_problem(report, path: Path) -> str:
    assert [(p.file, p.location, p.level) for p in report.problems] == [(str(path), None, "error")]
    return report.problems[0].reason


# ------------------------------------------------------------------------------------------ whole files


def test_truncated_json_is_one_problem_and_other_files_still_load(tmp_path):
    text = (DATA / "x_api_page.json").read_text(encoding="utf-8")
    cut = tmp_path / "cut.json"
    cut.write_text(text[: len(text) // 2], encoding="utf-8")
    report = read_posts([cut, DATA / "reddit_dump.ndjson"])
    assert "truncated" in report.problems[0].reason and report.problems[0].location is None
    assert len(report.posts) == 6  # the Reddit file after it
    assert (report.files[0].path, report.files[0].posts, report.files[0].errors) == (str(cut), 0, 1)


def test_non_utf8_file_is_one_problem_saying_where(tmp_path):
    path = tmp_path / "latin1.ndjson"
    line = json.dumps(_reddit_comment("c1", "café au lait"), ensure_ascii=False)
    path.write_bytes((line + "\n").encode("latin-1"))
    reason = _only_file_problem(read_posts(path), path)
    assert "not valid UTF-8" in reason and "byte 0xe9" in reason and "line 1" in reason


def test_empty_and_blank_files_are_one_problem_each(tmp_path):
    empty, blank = tmp_path / "empty.json", tmp_path / "blank.jsonl"
    empty.write_bytes(b"")
    blank.write_text("\n  \n\t\n", encoding="utf-8")
    report = read_posts([empty, blank])
    assert [(p.file, p.location) for p in report.problems] == [(str(empty), None), (str(blank), None)]
    assert all("empty" in p.reason for p in report.problems)


def test_missing_path_is_a_problem_not_an_exception(tmp_path):
    report = read_posts([tmp_path / "nope.json", DATA / "posts.jsonl"])
    assert report.problems[0].reason == "no such file or folder"
    assert len(report.posts) == 3


def test_utf8_bom_and_crlf_line_endings_are_accepted(tmp_path):
    path = tmp_path / "bom.ndjson"
    lines = [json.dumps(_reddit_comment(f"c{i}", f"body {i}")) for i in range(3)]
    path.write_bytes(b"\xef\xbb\xbf" + "\r\n".join(lines).encode("utf-8") + b"\r\n")
    report = read_posts(path)
    assert [p.text for p in report.posts] == ["body 0", "body 1", "body 2"] and report.problems == []


def test_a_json_file_holding_several_lines_of_json_is_read_as_json_lines(tmp_path):
    path = tmp_path / "RC_2025-03.json"  # dumps are often named .json but hold one object per line
    path.write_text("\n".join(json.dumps(_reddit_comment(f"c{i}", "x")) for i in range(4)), encoding="utf-8")
    assert len(read_posts(path).posts) == 4


# ------------------------------------------------------------------------------------------ bad records


def test_one_bad_line_among_good_ones_is_reported_with_its_line_number(tmp_path):
    good = [Post(id=f"x:{i}", platform="x", text=f"post {i}") for i in range(5)]
    path = tmp_path / "posts.jsonl"
    lines = [p.model_dump_json() for p in good]
    lines.insert(3, '{"id": "x:99", "platform": "x", "text": "cut here')
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    report = read_posts(path)
    assert report.posts == good
    assert [(p.location, p.level) for p in report.problems] == [("line 4", "error")]


def test_a_file_where_no_line_parses_is_one_problem(tmp_path):
    path = tmp_path / "garbage.jsonl"
    path.write_text("not json\nstill not json\n", encoding="utf-8")
    reason = _only_file_problem(read_posts(path), path)
    assert "no line of this JSON Lines file could be parsed" in reason


def test_records_of_the_wrong_type_are_reported_not_crashed_on(tmp_path):
    path = tmp_path / "page.json"
    page = {
        "data": [
            {"id": "1", "text": "ok", "author_id": "5"},
            {"id": {"nested": True}, "text": "id is an object"},
            {"id": "3", "text": 42},
            {"id": "4", "text": "bad count", "public_metrics": {"like_count": "many"}},
            {"id": "5", "text": "negative count", "public_metrics": {"like_count": -1}},
            "just a string",
            {"id": "7", "text": "ok too", "attachments": {"media_keys": [None, 5]}},
        ]
    }
    path.write_text(json.dumps(page), encoding="utf-8")
    report = read_posts(path)
    assert [p.id for p in report.posts] == ["x:1", "x:7"]
    assert [p.location for p in report.errors] == ["data[1]", "data[2]", "data[3]", "data[4]", "data[5]"]
    assert "tweet id must be a string" in report.errors[0].reason
    assert "has no text" in report.errors[1].reason
    assert "like_count must be a count" in report.errors[2].reason
    assert "engagement counts must be >= 0" in report.errors[3].reason
    assert report.posts[1].media == (MediaRef(media_id="5", type="image"),)


# ------------------------------------------------------------------------------------------ odd text


def test_one_megabyte_post_loads_whole(tmp_path):
    body = ("prompt 🎨 " * 120_000)[:1_000_000]
    path = tmp_path / "big.ndjson"
    path.write_text(json.dumps(_reddit_comment("big", body)) + "\n", encoding="utf-8")
    report = read_posts(path)
    assert report.problems == [] and report.posts[0].text == body and len(body) == 1_000_000


def test_emoji_rtl_and_control_characters_round_trip_exactly(tmp_path):
    text = (
        "\u202eRTL override \u202c مرحبا بالعالم שלום 👩‍👩‍👧‍👦 🇪🇺 e\u0301 "
        "\x00nul \x07bell \x1b[31mansi\x1b[0m \u2028line-sep\u2029para-sep \x85nel \ufeffbom \U0010ffff end"
    )
    sources = tmp_path / "sources"
    sources.mkdir()
    (sources / "c.ndjson").write_text(json.dumps(_reddit_comment("c1", text)) + "\n", encoding="utf-8")
    (sources / "b.json").write_text(
        json.dumps({"thread": _bsky_node("at://did:plc:a/app.bsky.feed.post/1", text)}, ensure_ascii=False),
        encoding="utf-8",
    )
    report = read_posts(sources)
    assert [p.text for p in report.posts] == [text, text] and report.problems == []
    out = tmp_path / "out.jsonl"
    write_jsonl(report.posts, out)
    assert read_posts(out).posts == report.posts


def test_only_platform_escapes_are_undone(tmp_path):
    path = tmp_path / "c.ndjson"
    body = "a &amp;lt;b&amp;gt; &lt;i&gt; &quot;kept&quot; &#39;kept&#39; &amp;amp;"
    path.write_text(json.dumps(_reddit_comment("c1", body)) + "\n", encoding="utf-8")
    assert read_posts(path).posts[0].text == "a &lt;b&gt; <i> &quot;kept&quot; &#39;kept&#39; &amp;"


# ------------------------------------------------------------------------------------------ nesting


def test_json_bomb_of_deep_nesting_is_a_clear_problem(tmp_path):
    bomb = tmp_path / "bomb.json"
    bomb.write_text("[" * 100_000 + "]" * 100_000, encoding="utf-8")
    lines = tmp_path / "bomb.jsonl"
    lines.write_text(
        json.dumps(_reddit_comment("c1", "fine")) + "\n" + '{"a": ' + "[" * 100_000 + "]" * 100_000 + "}\n",
        encoding="utf-8",
    )
    posts = tmp_path / "posts.jsonl"  # the jsonl adapter validates line text directly (pydantic's parser)
    posts.write_text(
        '{"id": "x:1", "platform": "x", "raw": ' + "[" * 100_000 + "]" * 100_000 + "}\n"
        '{"id": "x:2", "platform": "x"}\n',
        encoding="utf-8",
    )
    report = read_posts([bomb, lines, posts])
    assert [(p.file, p.location) for p in report.problems] == [
        (str(bomb), None),
        (str(lines), "line 2"),
        (str(posts), "line 1"),
    ]
    assert all("nested deeper than the parser allows" in p.reason for p in report.problems[:2])
    assert "recursion limit exceeded" in report.problems[2].reason
    assert [p.id for p in report.posts] == ["reddit:t1_c1", "x:2"]


def _bsky_node(uri: str, text: str, parent: str | None = None) -> dict:
    record = {"text": text, "createdAt": "2025-03-27T12:00:00Z"}
    if parent:
        record["reply"] = {"parent": {"uri": parent}, "root": {"uri": "at://did:plc:a/app.bsky.feed.post/0"}}
    did = uri.split("/")[2]
    return {
        "$type": "app.bsky.feed.defs#threadViewPost",
        "post": {"uri": uri, "author": {"did": did, "handle": "a.bsky.social"}, "record": record},
        "replies": [],
    }


def test_long_reply_chain_is_walked_without_recursion(tmp_path):
    depth = 300  # 600 levels of JSON nesting: parses, and must not need 300 Python frames per walk
    uris = [f"at://did:plc:a/app.bsky.feed.post/{i}" for i in range(depth + 1)]
    top = node = _bsky_node(uris[0], "root")
    for i in range(1, depth + 1):
        child = _bsky_node(uris[i], f"reply {i}", parent=uris[i - 1])
        node["replies"] = [child]
        node = child
    path = tmp_path / "chain.json"
    path.write_text(json.dumps({"thread": top}), encoding="utf-8")
    report = read_posts(path)
    assert report.problems == []
    assert [p.id for p in report.posts] == [f"bluesky:{u}" for u in uris]
    assert report.posts[-1].reply_to_id == f"bluesky:{uris[-2]}"


def test_raw_too_deep_for_pydantic_keeps_the_post_without_raw(tmp_path):
    deep: list = []
    for _ in range(400):
        deep = [deep]
    comment = _reddit_comment("c1", "deep extra field") | {"extra_field": deep}
    path = tmp_path / "deep.ndjson"
    path.write_text(json.dumps(comment) + "\n", encoding="utf-8")
    report = read_posts(path)
    assert [(p.id, p.raw) for p in report.posts] == [("reddit:t1_c1", None)]
    assert [(p.level, "raw source object" in p.reason) for p in report.problems] == [("note", True)]


# ------------------------------------------------------------------------------------------ duplicates


def test_duplicate_ids_across_files_keep_the_first_and_are_counted(tmp_path):
    copy = tmp_path / "again.ndjson"
    shutil.copy(DATA / "reddit_dump.ndjson", copy)
    first = read_posts(DATA / "reddit_dump.ndjson")
    report = read_posts([DATA / "reddit_dump.ndjson", copy])
    assert report.posts == first.posts
    assert report.duplicates == 6 and report.duplicate_ids == {p.id: 1 for p in first.posts}
    assert [(f.posts, f.duplicates) for f in report.files] == [(6, 0), (0, 6)]
    assert "| **total** | | 6 |" in report.summary()


def test_first_occurrence_wins_even_when_a_later_copy_differs(tmp_path):
    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    write_jsonl([Post(id="x:1", platform="x", text="first")], a)
    write_jsonl([Post(id="x:1", platform="x", text="edited later"), Post(id="x:2", platform="x")], b)
    report = read_posts([b, a])
    assert [(p.id, p.text) for p in report.posts] == [("x:1", "edited later"), ("x:2", "")]
    assert read_posts([a, b]).posts[0].text == "first"


# ------------------------------------------------------------------------------------------ folders


def test_folder_is_read_in_sorted_order_with_collections_and_skipped_files(tmp_path):
    root = tmp_path / "exports"
    (root / "sub").mkdir(parents=True)
    (root / ".hidden").mkdir()
    write_jsonl([Post(id="x:b", platform="x")], root / "b.jsonl")
    write_jsonl([Post(id="x:a", platform="x")], root / "a.jsonl")
    write_jsonl([Post(id="x:c", platform="x")], root / "sub" / "c.jsonl")
    write_jsonl([Post(id="x:hidden", platform="x")], root / ".hidden" / "h.jsonl")
    (root / "README.md").write_text("notes", encoding="utf-8")
    shutil.copytree(DATA / "collection" / "mini-prompts", root / "prompts")
    report = read_posts(root)
    assert [p.id for p in report.posts] == [
        "x:a",
        "x:b",
        "collection:prompts/1",
        "collection:prompts/2",
        "collection:prompts/10",
        "x:c",
    ]
    assert report.skipped_files == [str(root / "README.md")]
    assert [f.format for f in report.files] == ["jsonl", "jsonl", "collection", "jsonl"]


def test_reading_twice_gives_identical_reports(tmp_path):
    first = read_posts(DATA)
    second = read_posts(DATA)
    assert first.posts == second.posts and first.problems == second.problems
    assert len(first.posts) == 29 and first.duplicates == 0


# ------------------------------------------------------------------------------------------ round trip


_json_leaf = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**53), max_value=2**53)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=20)
)
_json = st.recursive(
    _json_leaf,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
    max_leaves=12,
)
_offsets = st.builds(timezone, st.timedeltas(min_value=timedelta(hours=-23), max_value=timedelta(hours=23)))
_times = st.none() | st.datetimes(
    min_value=datetime(1990, 1, 1), max_value=datetime(2100, 1, 1), timezones=_offsets
)
_media = st.builds(
    MediaRef,
    url=st.none() | st.text(max_size=30),
    media_id=st.none() | st.text(max_size=10),
    type=st.sampled_from(["photo", "video", "animated_gif", "image"]),
    alt_text=st.none() | st.text(max_size=30),
    width=st.none() | st.integers(1, 100_000),
    height=st.none() | st.integers(1, 100_000),
    sha256=st.none() | st.text("0123456789abcdef", min_size=64, max_size=64),
    path=st.none() | st.text(max_size=30),
)


@st.composite
def _posts(draw) -> Post:
    platform = draw(st.sampled_from(sorted(PLATFORMS)))

    def ref() -> str | None:
        return draw(st.none() | st.text(min_size=1, max_size=12).map(lambda s: f"{platform}:{s}"))

    return Post(
        id=f"{platform}:{draw(st.text(min_size=1, max_size=16))}",
        platform=platform,
        url=draw(st.none() | st.text(max_size=30)),
        author_id=draw(st.none() | st.text(max_size=10)),
        author=draw(st.none() | st.text(max_size=10)),
        created_at=draw(_times),
        text=draw(st.text(max_size=200)),
        media=tuple(draw(st.lists(_media, max_size=3))),
        reply_to_id=ref(),
        root_id=ref(),
        quoted_id=ref(),
        engagement=draw(st.dictionaries(st.text(max_size=8), st.integers(0, 2**53), max_size=4)),
        lang=draw(st.none() | st.text(max_size=5)),
        raw=draw(_json),
    )


@settings(max_examples=examples(75), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(_posts(), max_size=8, unique_by=lambda p: p.id))
def test_any_post_list_written_as_jsonl_reads_back_equal(posts):
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "posts.jsonl"
        assert write_jsonl(posts, path) == len(posts)
        if not posts:
            assert path.read_bytes() == b""
            return
        report = read_posts(path)
        assert report.problems == []
        assert report.posts == posts
        assert [f.format for f in report.files] == ["jsonl"]
