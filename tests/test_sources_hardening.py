"""Source readers against one bad record among good ones, in every format (issue 13, items 1, 7, 8, 9, 15).

Each defect class is checked in X API v2, X GraphQL, Reddit, Bluesky, JSON Lines of ``Post`` and a prompt
collection: the bad record becomes one counted problem (or, for text that is not valid Unicode, a repaired post
with a note), and every other post of the file, those after it included, is read exactly as without it.
"""

from __future__ import annotations

import json
import os
import stat
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from echo_builder.sources import loading as loading_module
from echo_builder.sources import read_posts
from echo_builder.sources import reader as reader_module
from echo_builder.sources.base import has_surrogate_escape
from tests.helpers.properties import examples

GOOD_TIME = "2025-03-27T12:00:00Z"
FORMATS = ["x_api", "x_graphql", "reddit", "bluesky", "jsonl", "collection"]


# ------------------------------------------------------------------------------------------ record builders
def _x_api_tweet(n: int, **over: Any) -> dict[str, Any]:
    return {"id": str(100 + n), "text": f"post {n}", "author_id": "9", "created_at": GOOD_TIME, **over}


def _graphql_tweet(n: int, **over: Any) -> dict[str, Any]:
    legacy = {"full_text": f"post {n}", "created_at": "Thu Mar 27 12:00:00 +0000 2025"}
    legacy.update(over.pop("legacy", {}))
    return {"__typename": "Tweet", "rest_id": str(100 + n), "legacy": legacy, **over}


def _reddit_comment(n: int, **over: Any) -> dict[str, Any]:
    return {
        "id": f"c{n}",
        "link_id": "t3_p1",
        "parent_id": "t3_p1",
        "subreddit": "aiArt",
        "body": f"post {n}",
        "author": "someone",
        "created_utc": 1743000000,
        **over,
    }


def _bluesky_view(n: int, view: dict[str, Any] | None = None, **record: Any) -> dict[str, Any]:
    return {
        "uri": f"at://did:plc:a{n}/app.bsky.feed.post/k{n}",
        "author": {"did": f"did:plc:a{n}", "handle": f"a{n}.bsky.social"},
        "record": {"text": f"post {n}", "createdAt": GOOD_TIME, **record},
        **(view or {}),
    }


def _post(n: int, **over: Any) -> dict[str, Any]:
    return {"id": f"x:{100 + n}", "platform": "x", "text": f"post {n}", "created_at": GOOD_TIME, **over}


def _case(n: int, **over: Any) -> dict[str, Any]:
    return {"title": f"case {n}", "prompt": f"post {n}", **over}


def write_source(fmt: str, folder: Path, bad: dict[str, Any], count: int = 5, at: int = 2) -> Path:
    """A file (or collection) of ``count`` good records of ``fmt`` whose record number ``at`` gets the fields of
    ``bad`` (for X GraphQL, keys under ``legacy`` go in ``bad["legacy"]``; for Bluesky they go in the record)."""

    def rec(make: Callable[..., dict[str, Any]], n: int) -> dict[str, Any]:
        return make(n, **bad) if n == at else make(n)

    if fmt == "x_api":
        path = folder / "page.json"
        path.write_text(json.dumps({"data": [rec(_x_api_tweet, n) for n in range(count)]}), encoding="utf-8")
    elif fmt == "x_graphql":
        entries = [
            {"content": {"itemContent": {"tweet_results": {"result": rec(_graphql_tweet, n)}}}}
            for n in range(count)
        ]
        value = {
            "data": {"threaded_conversation_with_injections_v2": {"instructions": [{"entries": entries}]}}
        }
        path = folder / "conversation.json"
        path.write_text(json.dumps(value), encoding="utf-8")
    elif fmt == "reddit":
        path = folder / "dump.ndjson"
        path.write_text(
            "".join(json.dumps(rec(_reddit_comment, n)) + "\n" for n in range(count)), encoding="utf-8"
        )
    elif fmt == "bluesky":
        path = folder / "posts.json"
        path.write_text(
            json.dumps({"posts": [rec(_bluesky_view, n) for n in range(count)]}), encoding="utf-8"
        )
    elif fmt == "jsonl":
        path = folder / "posts.jsonl"
        path.write_text("".join(json.dumps(rec(_post, n)) + "\n" for n in range(count)), encoding="utf-8")
    else:
        path = folder / "collection"
        for n in range(count):
            case = path / "cases" / str(n + 1)
            case.mkdir(parents=True)
            (case / "case.yml").write_text(
                yaml.safe_dump(rec(_case, n), allow_unicode=True), encoding="utf-8"
            )
    return path


def _texts(report) -> list[str]:
    return [p.text for p in report.posts]


def _others(count: int = 5, at: int = 2) -> list[str]:
    return [f"post {n}" for n in range(count) if n != at]


# ------------------------------------------------------------ item 7: one record's conversion fails, the rest go on
OUT_OF_RANGE = [
    "9999-12-31T23:00:00-05:00",  # past year 9999 once in UTC
    "0001-01-01T00:00:00+01:00",  # before year 1 once in UTC
    "Fri Dec 31 23:00:00 -0500 9999",  # X's legacy format, same overflow
    10**400,  # an integer beyond float's range
    "1" * 400,  # digits beyond a date
    1e300,  # seconds beyond a date
]
DATE_FIELD = {
    "x_api": lambda v: {"created_at": v},
    "x_graphql": lambda v: {"legacy": {"created_at": v}},
    "reddit": lambda v: {"created_utc": v},
    "bluesky": lambda v: {"createdAt": v},
    "jsonl": lambda v: {"created_at": v},
}


@pytest.mark.parametrize("value", OUT_OF_RANGE, ids=[f"v{i}" for i in range(len(OUT_OF_RANGE))])
@pytest.mark.parametrize("fmt", sorted(DATE_FIELD))
def test_a_date_out_of_range_is_one_problem_and_later_posts_are_read(fmt, value, tmp_path):
    path = write_source(fmt, tmp_path, DATE_FIELD[fmt](value))
    report = read_posts(path)
    assert _texts(report) == _others()  # the posts after the bad one included
    assert len(report.errors) == 1, report.problems
    assert report.errors[0].location is not None  # the record, not the file
    assert "created" in report.errors[0].reason.lower()  # names the field


def test_out_of_range_date_message_names_the_value(tmp_path):
    report = read_posts(write_source("x_api", tmp_path, {"created_at": "9999-12-31T23:00:00-05:00"}))
    assert report.errors[0].location == "data[2]"
    assert report.errors[0].reason == (
        "created_at '9999-12-31T23:00:00-05:00' is out of range: converted to UTC it falls outside years 1-9999"
    )


HUGE_COUNTS = {
    "x_api": {"public_metrics": {"like_count": 10**30}},
    "x_graphql": {"legacy": {"favorite_count": "9" * 5000}},
    "reddit": {"score": 10**19},
    "bluesky": {},  # counts sit on the view, not the record: see below
}


@pytest.mark.parametrize("fmt", ["x_api", "x_graphql", "reddit"])
def test_a_count_beyond_64_bits_is_one_problem(fmt, tmp_path):
    report = read_posts(write_source(fmt, tmp_path, HUGE_COUNTS[fmt]))
    assert _texts(report) == _others()
    assert len(report.errors) == 1 and "out of range for a count" in report.errors[0].reason


def test_any_exception_converting_a_record_stays_with_that_record(tmp_path, monkeypatch):
    """Not only the expected errors: an exception of any type raised while converting one record (here an
    OverflowError and a ZeroDivisionError from the date parser) is that record's problem."""
    from echo_builder.sources import base

    real = base.parse_timestamp

    def flaky(value, what="timestamp"):
        if value == "boom-overflow":
            raise OverflowError("date value out of range")
        if value == "boom-zero":
            raise ZeroDivisionError("division by zero")
        return real(value, what)

    for module in ("x_api", "x_graphql", "reddit", "bluesky"):
        monkeypatch.setattr(f"echo_builder.sources.{module}.parse_timestamp", flaky)
    for fmt in ("x_api", "x_graphql", "reddit", "bluesky"):
        for boom in ("boom-overflow", "boom-zero"):
            folder = tmp_path / f"{fmt}-{boom}"
            folder.mkdir()
            report = read_posts(write_source(fmt, folder, DATE_FIELD[fmt](boom)))
            assert _texts(report) == _others(), (fmt, boom, report.problems)
            assert len(report.errors) == 1 and report.errors[0].location is not None


# --------------------------------------------------------------------- item 8: no assert on input data (Reddit)
@pytest.mark.parametrize("url", [None, "", 42])
def test_reddit_image_post_without_a_url_is_read(url, tmp_path):
    lines = [
        {"id": f"s{n}", "title": f"post {n}", "subreddit": "aiArt", "created_utc": 1743000000}
        for n in range(1000)
    ]
    lines[0].update({"post_hint": "image", "url": url})
    path = tmp_path / "submissions.ndjson"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    report = read_posts(path)
    assert len(report.posts) == 1000 and report.errors == []
    media = report.posts[0].media
    assert [m.url for m in media] == ([] if url in (None, "") else ["42"])


def test_no_assert_statement_in_the_source_readers():
    """``python -O`` strips asserts, and a failed one was an uncaught AssertionError: input is checked instead."""
    import ast

    folder = Path(reader_module.__file__).parent
    found = [
        f"{path.name}:{node.lineno}"
        for path in sorted(folder.glob("*.py"))
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(node, ast.Assert)
    ]
    assert found == []


# -------------------------------------------------- item 9: a field of the wrong JSON type is a record's problem
ODD_VALUES = [["Tweet"], {"a": 1}, 7, True]
TYPENAME = {"x_graphql": lambda v: {"__typename": v}}
WRONG_TYPE = {
    "x_api": [{"text": v} for v in ODD_VALUES] + [{"id": v} for v in ODD_VALUES[:2]],
    "x_graphql": [{"__typename": v} for v in ODD_VALUES] + [{"legacy": {"full_text": v}} for v in ODD_VALUES],
    "reddit": [{"body": v} for v in ODD_VALUES] + [{"link_id": v} for v in ODD_VALUES[:2]],
    "bluesky": [{"text": v} for v in ODD_VALUES],
    "jsonl": [{"text": v} for v in ODD_VALUES[:3]] + [{"media": v} for v in ODD_VALUES[1:]],
    "collection": [{"prompt": v} for v in ODD_VALUES],
}
WRONG_CASES = [(fmt, i, bad) for fmt, bads in WRONG_TYPE.items() for i, bad in enumerate(bads)]


@pytest.mark.parametrize(("fmt", "i", "bad"), WRONG_CASES, ids=[f"{f}-{i}" for f, i, _ in WRONG_CASES])
def test_a_field_of_the_wrong_type_is_one_problem_for_its_record(fmt, i, bad, tmp_path):
    report = read_posts(write_source(fmt, tmp_path, bad))
    assert _texts(report) == _others(), report.problems
    assert len(report.errors) == 1 and report.errors[0].location is not None, report.problems


@pytest.mark.parametrize("typename", [["Tweet"], {"x": "Tweet"}, 3, "SomethingElse"])
def test_graphql_typename_of_any_type_loses_only_its_tweet(typename, tmp_path):
    report = read_posts(write_source("x_graphql", tmp_path, {"__typename": typename}))
    assert [p.id for p in report.posts] == ["x:100", "x:101", "x:103", "x:104"]
    (error,) = report.errors
    assert error.location.endswith("entries[2].content.itemContent.tweet_results.result")


def test_a_malformed_first_record_does_not_hide_the_file(tmp_path):
    """Format detection looks past a first record it cannot recognise, in files and in JSON Lines."""
    for fmt, bad in [
        ("x_api", {"id": None}),
        ("reddit", {"subreddit": None, "body": None, "link_id": None}),
        ("bluesky", {"view": {"uri": None}}),
    ]:
        folder = tmp_path / fmt
        folder.mkdir()
        report = read_posts(write_source(fmt, folder, bad, at=0))
        assert _texts(report) == _others(at=0), (fmt, report.problems)
        assert len(report.errors) == 1 and report.errors[0].location is not None


# ------------------------------------------------ item 1: text that is not valid Unicode entering from a source
SURROGATE = {
    "x_api": {"text": "lone \ud83d here"},
    "x_graphql": {"legacy": {"full_text": "lone \ud83d here"}},
    "reddit": {"body": "lone \ud83d here"},
    "bluesky": {"text": "lone \ud83d here"},
    "jsonl": {"text": "lone \ud83d here"},
    "collection": {"prompt": "lone \ud83d here"},
}


@pytest.mark.parametrize("fmt", FORMATS)
def test_a_lone_surrogate_is_replaced_and_noted_and_every_post_can_be_written(fmt, tmp_path):
    report = read_posts(write_source(fmt, tmp_path, SURROGATE[fmt]))
    texts = _texts(report)
    assert texts[:2] + texts[3:] == _others()
    assert texts[2] == "lone \ufffd here"
    assert report.errors == []
    assert [p.reason for p in report.notes] == [
        "1 string held a lone UTF-16 surrogate (such as a \\ud83d escape without its pair), which is not valid "
        "Unicode; replaced by U+FFFD and the data kept"
    ]
    for post in report.posts:  # every later writer (stage files, Parquet, the cache) needs valid UTF-8
        post.model_dump_json().encode("utf-8")
    for problem in report.problems:
        str(problem).encode("utf-8")


def test_surrogates_in_keys_and_nested_raw_fields_are_repaired(tmp_path):
    tweet = _x_api_tweet(0, text="ok \ud83d\ude00 pair", lang="\udc00")
    tweet["extra \ud800"] = {"deep": ["\udbff", "fine"]}
    path = tmp_path / "page.json"
    path.write_text(json.dumps({"data": [tweet]}), encoding="utf-8")
    report = read_posts(path)
    (post,) = report.posts
    assert post.text == "ok \U0001f600 pair"  # a valid pair is one character, untouched
    assert post.lang == "\ufffd"
    assert post.raw["extra \ufffd"] == {"deep": ["\ufffd", "fine"]}
    assert report.notes[0].reason.startswith("3 strings held a lone UTF-16 surrogate")
    post.model_dump_json().encode("utf-8")


def test_an_escaped_backslash_before_u_is_not_a_surrogate(tmp_path):
    path = tmp_path / "page.json"
    path.write_text(json.dumps({"data": [_x_api_tweet(0, text="C:\\ud83d")]}), encoding="utf-8")
    report = read_posts(path)
    assert report.posts[0].text == "C:\\ud83d" and report.problems == []


def test_file_and_folder_names_that_are_not_utf8_are_shown_repaired(tmp_path):
    folder = tmp_path / "exports"
    folder.mkdir()
    name = os.fsdecode(b"bad\xff.ndjson")  # surrogateescape: '\udcff'
    (folder / name).write_text(json.dumps(_reddit_comment(0)) + "\n", encoding="utf-8")
    (folder / os.fsdecode(b"page\xfe.json")).write_text("{broken", encoding="utf-8")
    report = read_posts(folder)
    assert _texts(report) == ["post 0"]
    assert [f.path for f in report.files] == [
        str(folder / "bad\ufffd.ndjson"),
        str(folder / "page\ufffd.json"),
    ]
    for problem in report.problems:
        str(problem).encode("utf-8")


def test_collection_case_folder_name_not_utf8_gives_a_writable_post(tmp_path):
    root = write_source("collection", tmp_path, {})
    (root / "cases" / "1").rename(root / "cases" / os.fsdecode(b"case\xff"))
    report = read_posts(root)
    assert len(report.posts) == 5 and report.errors == []
    assert "collection:collection/case\ufffd" in [p.id for p in report.posts]
    for post in report.posts:
        post.model_dump_json().encode("utf-8")


# ------------------------------------------------------------------- item 15: only regular files are sources
@pytest.mark.timeout(30, method="thread")  # the bug this guards against blocks forever in open()
def test_a_named_pipe_is_refused_without_being_opened(tmp_path):
    good = write_source("reddit", tmp_path, {})
    fifo = tmp_path / "pipe.ndjson"
    os.mkfifo(fifo)
    report = read_posts([fifo, good])
    assert _texts(report) == [f"post {n}" for n in range(5)]
    assert [(p.file, p.location, p.reason) for p in report.errors] == [
        (
            str(fifo),
            None,
            "a named pipe (FIFO), not a regular file; only regular files and folders are read as sources",
        )
    ]


@pytest.mark.timeout(30, method="thread")
def test_a_named_pipe_inside_a_folder_is_reported_and_skipped(tmp_path):
    folder = tmp_path / "exports"
    write_source("reddit", folder.parent, {}).rename(tmp_path / "keep.ndjson")
    folder.mkdir()
    (tmp_path / "keep.ndjson").rename(folder / "a.ndjson")
    os.mkfifo(folder / "b.json")
    (folder / "c.json").symlink_to(folder / "b.json")
    report = read_posts(folder)
    assert len(report.posts) == 5
    assert [(Path(p.file).name, p.reason.split(",")[0]) for p in report.errors] == [
        ("b.json", "a named pipe (FIFO)"),
        ("c.json", "a named pipe (FIFO)"),
    ]


@pytest.mark.skipif(not Path("/dev/zero").exists(), reason="needs /dev/zero")
@pytest.mark.timeout(30, method="thread")
def test_a_device_or_a_link_to_one_is_refused(tmp_path):
    link = tmp_path / "zero.json"
    link.symlink_to("/dev/zero")
    report = read_posts(["/dev/zero", link, tmp_path / "missing.json"])
    assert report.posts == []
    assert [p.reason.split(";")[0] for p in report.errors] == [
        "a character device, not a regular file",
        "a character device, not a regular file",
        "no such file or folder",
    ]
    assert stat.S_ISCHR(os.stat(link).st_mode)


def test_a_file_over_the_size_cap_is_one_problem_saying_so(tmp_path, monkeypatch):
    big = write_source("reddit", tmp_path, {})
    tiny = tmp_path / "tiny.jsonl"
    tiny.write_text('{"id": "x:1", "platform": "x", "text": "small"}\n', encoding="utf-8")
    monkeypatch.setattr(loading_module, "MAX_FILE_BYTES", 100)
    report = read_posts([big, tiny])
    assert _texts(report) == ["small"]
    (error,) = report.errors
    assert error.location is None and error.file == str(big)
    assert error.reason.startswith(f"file is {big.stat().st_size:,} bytes, over the 100-byte limit")
    assert "split it" in error.reason


def test_a_line_that_is_not_utf8_is_one_problem_in_a_json_lines_file(tmp_path):
    """A dump cut inside a multi-byte character, or one Latin-1 line: that line only, not the file."""
    good = [json.dumps(_reddit_comment(n), ensure_ascii=False).encode("utf-8") for n in range(4)]
    bad = json.dumps(_reddit_comment(9, body="café"), ensure_ascii=False).encode("latin-1")
    cut = json.dumps(_reddit_comment(8, body="ünïcode"), ensure_ascii=False).encode("utf-8")[:-3]
    path = tmp_path / "dump.ndjson"
    path.write_bytes(b"\n".join([good[0], good[1], bad, good[2], good[3], cut[: cut.index(b"\xc3") + 1]]))
    report = read_posts(path)
    column = bad.index(b"\xe9") + 1
    assert _texts(report) == ["post 0", "post 1", "post 2", "post 3"]
    assert [(p.location, p.reason) for p in report.errors] == [
        ("line 3", f"line is not valid UTF-8 (byte 0xe9 at column {column}); skipped"),
        ("line 6", report.errors[1].reason),
    ]
    assert report.errors[1].reason.startswith("line is not valid UTF-8 (byte 0xc3 at column")


def test_a_collection_case_named_by_a_huge_number_is_read_in_order(tmp_path):
    """Case folders sort numerically (by length, then digits), a 250-digit name included."""
    root = write_source("collection", tmp_path, {}, count=3)
    (root / "cases" / "2").rename(root / "cases" / ("9" * 250))
    (root / "cases" / "3").rename(root / "cases" / "010")
    report = read_posts(root)
    assert [p.raw["case"] for p in report.posts] == ["1", "010", "9" * 250]
    assert report.errors == []


ESCAPES = ["\\\\", "\\ud83d", "\\ude00", "\\udc00", "\\uDBFF", "\\uD800", "\\u0041", "a", "u", "d83d"]


@settings(max_examples=examples(400))
@given(st.lists(st.sampled_from(ESCAPES), max_size=8))
def test_the_surrogate_pre_check_never_misses_a_lone_half(parts):
    """The text filter skips the walk only when no parsed string can hold a lone surrogate (valid pairs, the
    usual emoji escapes, are passed over; an escaped backslash before 'uD83D' is not mistaken for half a pair)."""
    text = '"' + "".join(parts) + '"'
    try:
        value = json.loads(text)
    except json.JSONDecodeError:
        return
    lone = any(0xD800 <= ord(c) <= 0xDFFF for c in value)
    if lone:
        assert has_surrogate_escape(text)
    assert has_surrogate_escape('"\\ud83d\\ude00 \\ud83c\\udfa8"') is False


# ---------------------------------------------- a container of records of the wrong type is a problem, not silence
def test_a_container_of_records_of_the_wrong_type_is_reported(tmp_path):
    thread = {
        "thread": {
            "post": _bluesky_view(0),
            "parent": "not a node",
            "replies": {"0": {"post": _bluesky_view(1)}},
        }
    }
    (tmp_path / "thread.json").write_text(json.dumps(thread), encoding="utf-8")
    listing = {"kind": "Listing", "data": {"children": {"t1": _reddit_comment(1)}}}
    (tmp_path / "listing.json").write_text(json.dumps([listing, _reddit_comment(2)]), encoding="utf-8")
    page = {"data": [_x_api_tweet(0)], "includes": {"tweets": {"id": "7", "text": "quoted"}}}
    page2 = {"data": [_x_api_tweet(1)], "includes": ["users"]}
    (tmp_path / "page.json").write_text(json.dumps([page, page2]), encoding="utf-8")
    report = read_posts([tmp_path / "thread.json", tmp_path / "listing.json", tmp_path / "page.json"])
    assert _texts(report) == ["post 0", "post 2", "post 0", "post 1"]
    assert [(Path(p.file).name, p.location, p.reason) for p in report.errors] == [
        ("thread.json", "thread.parent", "expected a thread node object, got str"),
        ("thread.json", "thread.replies", "replies must be a list of thread nodes, got dict; skipped"),
        ("listing.json", "[0].data.children", "listing children must be a list, got dict; skipped"),
        ("page.json", "[0].includes.tweets", "includes.tweets must be a list, got dict; skipped"),
        ("page.json", "[1].includes", "includes must be an object, got list; skipped"),
    ]


def test_an_adapter_failure_on_one_line_loses_no_other_line(tmp_path, monkeypatch):
    """Defence in depth: an exception escaping an adapter for one JSON Lines document (a bug, or a value nested
    too deeply for the code that walks it) is that line's problem; the lines after it are read."""
    from echo_builder.sources.reddit import RedditSource

    real = RedditSource.parse_document

    def flaky(self, document, ctx):
        if document.location == "line 2":
            raise RecursionError("maximum recursion depth exceeded")
        if document.location == "line 4":
            raise OverflowError("date value out of range")
        yield from real(self, document, ctx)

    monkeypatch.setattr(RedditSource, "parse_document", flaky)
    report = read_posts(write_source("reddit", tmp_path, {}))
    assert _texts(report) == ["post 0", "post 2", "post 4"]
    assert [(p.location, p.reason) for p in report.errors] == [
        ("line 2", "record nested too deeply to read"),
        ("line 4", "reading stopped by an unexpected OverflowError: date value out of range"),
    ]


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="RLIMIT_AS is enforced on Linux")
def test_a_small_file_is_read_under_a_tight_memory_limit(tmp_path):
    """The size cap is enforced without a buffer of the cap's size: a small export reads in a process whose
    address space is limited to 1.5 GiB (the cap is 2 GiB)."""
    import subprocess

    path = write_source("reddit", tmp_path, {})
    code = (
        "import resource, sys\n"
        "resource.setrlimit(resource.RLIMIT_AS, (3 << 29, 3 << 29))\n"
        "from echo_builder.sources import read_posts\n"
        "report = read_posts(sys.argv[1])\n"
        "print(len(report.posts), len(report.problems))\n"
    )
    env = {**os.environ, "PYTHONPATH": str(Path(reader_module.__file__).parents[2])}
    done = subprocess.run(
        [sys.executable, "-c", code, str(path)], capture_output=True, text=True, env=env, timeout=120
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["5", "0"]


@pytest.mark.parametrize("fmt", ["x_api", "x_graphql", "reddit", "bluesky", "jsonl"])
def test_an_integer_of_thousands_of_digits_is_one_problem(fmt, tmp_path):
    """``json.loads`` raises a plain ValueError past 4,300 digits, which lost the whole file (and for JSON Lines,
    when it came first, every line)."""
    huge = "9" * 5000
    for at in (0, 2):
        folder = tmp_path / str(at)
        folder.mkdir()
        path = write_source(fmt, folder, DATE_FIELD[fmt](7), at=at)
        path.write_text(path.read_text(encoding="utf-8").replace(": 7", ": " + huge), encoding="utf-8")
        report = read_posts(path)
        assert _texts(report) == _others(at=at), (fmt, at, report.problems)
        assert len(report.errors) == 1 and report.errors[0].location is not None


@pytest.mark.timeout(30, method="thread")
def test_detect_format_refuses_a_named_pipe_without_blocking(tmp_path):
    from echo_builder.errors import RecordError
    from echo_builder.sources import detect_format

    os.mkfifo(tmp_path / "pipe.json")
    with pytest.raises(RecordError, match=r"pipe\.json: a named pipe \(FIFO\), not a regular file"):
        detect_format(tmp_path / "pipe.json")
