"""Streaming sources (issue 17, deliverable 3): compressed dumps decompressed on the fly, JSON Lines and large
top-level lists read record by record, and every unreadable or unsupported file a counted, named problem.

Large-file paths are exercised on small files by lowering ``loading.WHOLE_BYTES`` (the size read as one buffer) and
``loading._CHUNK`` (the read size while walking a list), so that records straddle chunk boundaries.
"""

from __future__ import annotations

import bz2
import gzip
import io
import json
import lzma
from pathlib import Path
from typing import Any

import pytest
import zstandard

from echo_builder.sources import loading as loading_module
from echo_builder.sources import read_posts, streams


def _comment(n: int, **over: Any) -> dict[str, Any]:
    return {
        "id": f"c{n}",
        "link_id": "t3_p1",
        "parent_id": "t3_p1",
        "subreddit": "aiArt",
        "body": f"comment {n} ünïcode 🎨",
        "author": "someone",
        "created_utc": 1743000000 + n,
        **over,
    }


def _ndjson(count: int, **over: Any) -> bytes:
    return "".join(json.dumps(_comment(n, **over), ensure_ascii=False) + "\n" for n in range(count)).encode()


def _texts(report: Any) -> list[str]:
    return [p.text for p in report.posts]


def _zstd(data: bytes, **params: Any) -> bytes:
    return zstandard.ZstdCompressor(**params).compress(data)


COMPRESS = {
    ".zst": _zstd,
    ".gz": gzip.compress,
    ".bz2": lambda data: bz2.compress(data, 1),  # 100 kB blocks: a cut file still holds whole blocks
    ".xz": lzma.compress,
}


@pytest.fixture
def streamed(monkeypatch):
    """Every file takes the streaming path, with 7-byte reads while walking a top-level list."""
    monkeypatch.setattr(loading_module, "WHOLE_BYTES", 16)
    monkeypatch.setattr(loading_module, "_CHUNK", 7)


# ------------------------------------------------------------------------------------------------ compression
@pytest.mark.parametrize("suffix", sorted(COMPRESS))
@pytest.mark.parametrize("size", ["whole", "streamed"])
def test_each_compression_is_read_on_the_fly(tmp_path, monkeypatch, suffix, size):
    if size == "streamed":
        monkeypatch.setattr(loading_module, "WHOLE_BYTES", 16)
    path = tmp_path / f"RC_2025-03.ndjson{suffix}"
    path.write_bytes(COMPRESS[suffix](_ndjson(6)))
    report = read_posts(path)
    assert report.problems == []
    assert _texts(report) == [f"comment {n} ünïcode 🎨" for n in range(6)]
    assert [p.id for p in report.posts] == [f"reddit:t1_c{n}" for n in range(6)]
    assert (report.files[0].format, report.files[0].posts) == ("reddit", 6)


def test_multi_member_gzip_and_multi_frame_zstd_are_read_to_the_end(tmp_path):
    data = _ndjson(4)
    half = data.index(b"\n", len(data) // 2) + 1
    gz = tmp_path / "dump.ndjson.gz"
    gz.write_bytes(gzip.compress(data[:half]) + gzip.compress(data[half:]))
    zst = tmp_path / "dump.ndjson.zst"
    zst.write_bytes(_zstd(data[:half]) + _zstd(data[half:]))
    for path in (gz, zst):
        assert len(read_posts(path).posts) == 4, path.name


def test_zstd_with_a_long_window_as_reddit_dumps_use(tmp_path):
    """A frame declaring a 512 MiB window (zstd --long=29): refused by zstandard's default limit (128 MiB),
    read here. Written without a content size, so the header keeps the large window."""
    params = zstandard.ZstdCompressionParameters.from_level(3, window_log=29, enable_ldm=True)
    out = io.BytesIO()
    with zstandard.ZstdCompressor(compression_params=params).stream_writer(out, closefd=False) as writer:
        writer.write(_ndjson(3))
    frame = out.getvalue()
    assert zstandard.get_frame_parameters(frame).window_size == 2**29
    with pytest.raises(zstandard.ZstdError):
        zstandard.ZstdDecompressor().decompressobj().decompress(frame)
    path = tmp_path / "RS_2025-03.zst"
    path.write_bytes(frame)
    report = read_posts(path)
    assert report.problems == [] and len(report.posts) == 3


@pytest.mark.parametrize("suffix", [".zst", ".gz", ".bz2", ".xz"])
def test_a_truncated_dump_keeps_the_posts_before_the_cut_and_says_truncated(tmp_path, monkeypatch, suffix):
    monkeypatch.setattr(loading_module, "WHOLE_BYTES", 16)  # streamed: posts come before the end is reached
    lines = _ndjson(2000)
    data = COMPRESS[suffix](lines)
    path = tmp_path / f"dump.ndjson{suffix}"
    path.write_bytes(data[: len(data) * 3 // 4])
    report = read_posts(path)
    assert 0 < len(report.posts) < 2000
    (error,) = report.errors
    assert error.file == str(path)
    assert "truncated or corrupt" in error.reason and "decompressed bytes" in error.reason
    assert error.location == f"line {len(report.posts) + 1}"


def test_a_truncated_small_dump_keeps_its_complete_lines(tmp_path):
    """Read as one buffer: the lines before the cut are kept, the problem is located after them."""
    data = gzip.compress(_ndjson(3))
    path = tmp_path / "small.ndjson.gz"
    path.write_bytes(data[:-6])  # the deflate stream is whole, its trailer (CRC, size) cut
    report = read_posts(path)
    assert len(report.posts) == 3
    (error,) = report.errors
    assert error.location == "line 4" and error.reason.startswith(
        "gzip data is truncated or corrupt after 483"
    )
    path.write_bytes(data[:40])  # not one whole line
    (error,) = read_posts(path).errors
    assert error.location is None and error.reason.startswith("gzip data is truncated or corrupt")


def test_a_decompression_bomb_stops_with_a_clear_error(tmp_path, monkeypatch):
    monkeypatch.setattr(loading_module, "WHOLE_BYTES", 16)
    monkeypatch.setattr(streams, "RATIO_FLOOR_BYTES", 10_000)
    payload = _ndjson(3) + b" " * 5_000_000 + b"\n" + _ndjson(1)
    path = tmp_path / "bomb.ndjson.zst"
    path.write_bytes(_zstd(payload, level=19))
    assert len(payload) / path.stat().st_size > streams.MAX_RATIO
    report = read_posts(path)
    assert len(report.posts) == 3  # the posts before the guard tripped are kept
    (error,) = report.errors
    assert error.reason.startswith("decompression stopped:") and "decompression bomb" in error.reason
    assert f"over {streams.MAX_RATIO}x" in error.reason


def test_the_absolute_decompressed_cap(tmp_path, monkeypatch):
    monkeypatch.setattr(streams, "MAX_DECOMPRESSED_BYTES", 2_000)
    path = tmp_path / "big.ndjson.xz"
    path.write_bytes(lzma.compress(_ndjson(50)))
    report = read_posts(path)
    (error,) = report.errors
    assert error.reason.startswith("decompression stopped: over 2,000 decompressed bytes")


def test_a_name_that_lies_about_its_compression_is_refused_by_name(tmp_path):
    plain = tmp_path / "dump.ndjson.zst"
    plain.write_bytes(_ndjson(2))
    gz_named_zst = tmp_path / "other.zst"
    gz_named_zst.write_bytes(gzip.compress(_ndjson(2)))
    report = read_posts([plain, gz_named_zst])
    assert report.posts == []
    first, second = (e.reason for e in report.errors)
    assert first.startswith("the name says zstd-compressed (.zst) but the file is not compressed")
    assert second.startswith("the name says zstd-compressed (.zst) but the file is gzip-compressed")


def test_compressed_content_that_is_not_text_never_asks_to_re_encode(tmp_path):
    path = tmp_path / "image.json.gz"
    path.write_bytes(gzip.compress(bytes(range(256)) * 4))
    (error,) = read_posts(path).errors
    assert "re-encode" not in error.reason
    assert error.reason.startswith("the gzip-decompressed content is not UTF-8 text (byte 0x80 at offset 128")


def test_a_zip_archive_is_unsupported_and_says_what_to_do(tmp_path):
    import zipfile

    path = tmp_path / "export.json"
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("a.ndjson", _ndjson(1))
    (error,) = read_posts(path).errors
    assert error.reason.startswith("a ZIP archive, which is not read as a source; unpack it")


# --------------------------------------------------------------------------------------------- streamed JSON
def test_a_json_list_split_across_chunk_boundaries_reads_like_the_whole_file(tmp_path, monkeypatch):
    items = [_comment(n) for n in range(12)]
    items[4]["body"] = 'quote " and backslash \\ and \\ud83d lone'  # escapes cut by 7-byte chunks
    items[7]["created_utc"] = 1743000000.5
    path = tmp_path / "comments.json"
    path.write_text(" \n[\n" + ",\n  ".join(json.dumps(i, ensure_ascii=False) for i in items) + "\n]\n")
    whole = read_posts(path)
    monkeypatch.setattr(loading_module, "WHOLE_BYTES", 16)
    monkeypatch.setattr(loading_module, "_CHUNK", 7)
    streamed = read_posts(path)
    assert len(streamed.posts) == 12
    assert [p.model_dump() for p in streamed.posts] == [p.model_dump() for p in whole.posts]
    assert streamed.posts[4].text == 'quote " and backslash \\ and \\ud83d lone'


def test_a_streamed_list_with_a_bad_item_keeps_the_items_before_it(tmp_path, streamed):
    good = [json.dumps(_comment(n)) for n in range(3)]
    path = tmp_path / "list.json"
    path.write_text("[" + ",".join(good) + ', {"id": "c9", "body": tru}, ' + good[0] + "]")
    report = read_posts(path)
    assert len(report.posts) == 3
    (error,) = report.errors
    assert error.location == "[3]"
    assert error.reason.startswith("not valid JSON in item 3 of the top-level list: Expecting value")


def test_a_streamed_list_cut_short_is_truncated_at_its_item(tmp_path, streamed):
    text = "[" + ",".join(json.dumps(_comment(n)) for n in range(4)) + "]"
    path = tmp_path / "cut.json"
    path.write_text(text[:-30])
    report = read_posts(path)
    assert len(report.posts) == 3
    (error,) = report.errors
    assert (error.location, error.reason) == (
        "[3]",
        "file ends inside item 3 of the top-level list (truncated?)",
    )


def test_a_bad_line_in_the_middle_is_reported_with_its_number_and_the_rest_kept(tmp_path, streamed):
    lines = _ndjson(6).split(b"\n")
    lines[3] = b'{"id": "c3", "body": '
    lines[4] = b"\xff\xfe not utf-8"
    path = tmp_path / "dump.ndjson.zst"
    path.write_bytes(_zstd(b"\n".join(lines)))
    report = read_posts(path)
    assert _texts(report) == [f"comment {n} ünïcode 🎨" for n in (0, 1, 2, 5)]
    assert [(e.location, e.reason.split(" (")[0]) for e in report.errors] == [
        ("line 4", "not valid JSON: Expecting value at column 21"),
        ("line 5", "line is not valid UTF-8"),
    ]


def test_a_json_file_of_lines_is_streamed_as_json_lines(tmp_path, streamed):
    path = tmp_path / "RC_2025-03.zst"  # no inner extension: the content decides
    path.write_bytes(_zstd(_ndjson(5)))
    report = read_posts(path)
    assert report.problems == [] and len(report.posts) == 5


def test_streaming_memory_does_not_grow_with_the_file(tmp_path):
    """Read a 60 MB dump (over WHOLE_BYTES at 8 MB) with keep_raw off: tracemalloc's peak stays a few MB plus
    the posts, far below the file."""
    import tracemalloc

    line = json.dumps(_comment(0, body="x" * 6000)).encode() + b"\n"
    path = tmp_path / "big.ndjson.gz"
    with gzip.open(path, "wb", compresslevel=1) as out:
        for n in range(10_000):
            out.write(line.replace(b'"c0"', f'"c{n}"'.encode()))
    original = loading_module.WHOLE_BYTES
    loading_module.WHOLE_BYTES = 8 * 1024**2
    tracemalloc.start()
    try:
        report = read_posts(path, keep_raw=False, post_filter=lambda post: post.id.endswith("7"))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
        loading_module.WHOLE_BYTES = original
    assert len(report.posts) == 1000 and report.problems == []
    assert peak < 30 * 1024**2, peak


# ---------------------------------------------------------------------------------------------- folders
def test_a_folder_reads_compressed_dumps_and_names_every_bad_file(tmp_path):
    folder = tmp_path / "dumps"
    folder.mkdir()
    (folder / "RC_2025-03.zst").write_bytes(_zstd(_ndjson(3)))
    (folder / "good.ndjson.gz").write_bytes(gzip.compress(_ndjson(2, link_id="t3_p2", parent_id="t3_p2")))
    (folder / "broken.ndjson.bz2").write_bytes(bz2.compress(_ndjson(2))[:-10])
    (folder / "renamed.json.xz").write_bytes(b"not xz at all")
    (folder / "notes.txt.gz").write_bytes(gzip.compress(b"hello"))
    report = read_posts(folder)
    ids = sorted(p.id for p in report.posts)
    assert ids == ["reddit:t1_c0", "reddit:t1_c1", "reddit:t1_c2"]
    assert report.duplicates == 4  # c0 and c1 again: read from before the cut of the .bz2, and in the .gz
    assert {Path(e.file).name for e in report.errors} == {"broken.ndjson.bz2", "renamed.json.xz"}
    assert [Path(f).name for f in report.skipped_files] == ["notes.txt.gz"]
    assert {Path(f.path).name: f.errors for f in report.files} == {
        "RC_2025-03.zst": 0,
        "broken.ndjson.bz2": 1,
        "good.ndjson.gz": 0,
        "renamed.json.xz": 1,
    }


# ---------------------------------------------------------------------------------------------- prefilter
def _thread(sub: str, title: str, comments: list[str], t0: int = 1743000000) -> list[dict[str, Any]]:
    """A Reddit submission and a chain of comments, each replying to the one before."""
    rows: list[dict[str, Any]] = [
        {
            "id": sub,
            "name": f"t3_{sub}",
            "subreddit": "aiArt",
            "title": title,
            "author": "op",
            "created_utc": t0,
        }
    ]
    parent = f"t3_{sub}"
    for k, body in enumerate(comments):
        cid = f"{sub}c{k}"
        rows.append(
            {
                "id": cid,
                "link_id": f"t3_{sub}",
                "parent_id": parent,
                "subreddit": "aiArt",
                "body": body,
                "author": f"u{k}",
                "created_utc": t0 + k + 1,
            }
        )
        parent = f"t1_{cid}"
    return rows


def _dump(tmp_path: Path) -> Path:
    rows = (
        _thread("s1", "a cat in watercolor", ["nice", 'made with GPT-Image-1 (the "new" one)', "wow"])
        + _thread("s2", "GPT-Image-1: a poster with text", ["it spells well", "agreed"])
        + _thread("s3", "an unrelated landscape", ["gpt-image-10 is not a match", "ok"])
        + _thread("s4", "gpt-image-1 teaser", ["old news"], t0=1600000000)
    )
    rows.insert(5, rows.pop(2))  # comments out of order, as in real dumps
    path = tmp_path / "RC_2025-03.zst"
    path.write_bytes(_zstd(b"".join(json.dumps(r).encode() + b"\n" for r in rows)))
    return path


def test_prefilter_keeps_the_matches_and_their_whole_threads_only(tmp_path, streamed):
    from echo_builder.sources.prefilter import prefilter_posts
    from echo_builder.stages.query import Keyword

    path = _dump(tmp_path)
    keywords = [Keyword("gpt-image-1", window_days=30)]
    report, stats = prefilter_posts(path, keywords, parse_launch("2025-03-25"))
    ids = sorted(p.id for p in report.posts)
    thread_1 = ["reddit:t3_s1", "reddit:t1_s1c0", "reddit:t1_s1c1", "reddit:t1_s1c2"]
    assert ids == sorted([*thread_1, "reddit:t3_s2", "reddit:t1_s2c0", "reddit:t1_s2c1"])
    assert (stats.matched, stats.kept) == (2, 7)  # s4 is outside the window; gpt-image-10 is another word
    plain = read_posts(path)
    kept = {p.id: p for p in report.posts}
    assert all(p.model_dump() == kept[p.id].model_dump() for p in plain.posts if p.id in kept)


def test_prefilter_line_checks_are_supersets_of_the_query(tmp_path):
    from echo_builder.sources.prefilter import keyword_line_filter, thread_keys

    check = keyword_line_filter(["GPT Image 1", "nano-banana"])
    assert check('{"body": "gpt image 1 rocks"}') and check('{"body": "NANO-BANANA"}')
    assert not check('{"body": "gpt-4o"}')
    assert keyword_line_filter(["café"])('{"body": "caf\\u00e9"}')  # may be written escaped: parsed
    assert keyword_line_filter([])("anything")
    report = read_posts(_dump(tmp_path))
    assert {"t3_s1", "s1", "t1_s1c1"} <= thread_keys(p for p in report.posts if p.id == "reddit:t1_s1c2")


def parse_launch(day: str):
    from echo_builder.stages.query import parse_launch_date

    return parse_launch_date(day)


def _build(tmp_path: Path, *args: str):
    from click.testing import CliRunner

    from echo_builder.cli import cli

    out = tmp_path / "out"
    result = CliRunner().invoke(cli, ["build", *args, "--out", str(out), "--offline"])
    report = json.loads((out / "report.json").read_text()) if (out / "report.json").exists() else None
    return result, report


def test_build_prefilter_reads_a_compressed_dump(tmp_path):
    path = _dump(tmp_path)
    (tmp_path / "kw.txt").write_text("gpt-image-1\n")
    result, report = _build(tmp_path, str(path), "--keywords", str(tmp_path / "kw.txt"), "--prefilter")
    assert result.exit_code == 0, result.output
    collect = report["stages"][0]
    assert collect["name"] == "collect" and collect["out"] == 9  # s1, s2 and s4 with their comments
    assert collect["prefilter"] == {
        "matched": 3,
        "thread_keys": collect["prefilter"]["thread_keys"],
        "kept": 9,
    }
    assert report["stages"][1]["out"] == 3  # the query keeps the three matches


def test_a_folder_of_good_and_bad_dumps_builds_and_names_the_bad_ones(tmp_path):
    folder = tmp_path / "dumps"
    folder.mkdir()
    (folder / "RC_2025-03.zst").write_bytes(_zstd(_ndjson(3)))
    (folder / "cut.ndjson.gz").write_bytes(gzip.compress(_ndjson(3, link_id="t3_p9"))[:-12])
    (folder / "fake.json.zst").write_bytes(b'{"not": "compressed"}')
    (folder / "readme.txt").write_text("notes")
    result, report = _build(tmp_path, str(folder), "--target-model", "comment")
    assert result.exit_code == 0, result.output
    collect = report["stages"][0]
    assert collect["out"] == 3
    assert [(Path(f["file"]).name, f["errors"]) for f in collect["files_with_errors"]] == [
        ("cut.ndjson.gz", 1),
        ("fake.json.zst", 1),
    ]
    assert "gzip data is truncated or corrupt" in collect["files_with_errors"][0]["first"]
    assert [Path(f).name for f in collect["skipped_files"]] == ["readme.txt"]
    assert "warning: 2 of 3 source files had errors" in result.output
    assert "fake.json.zst: 1 error(s); first:" in result.output
    assert "1 file(s) in the given folders are not a source format" in result.output


def test_a_plain_build_over_the_post_threshold_points_at_prefilter(tmp_path, monkeypatch):
    from echo_builder.stages import collect

    monkeypatch.setattr(collect, "LARGE_BUILD_POSTS", 2)
    path = tmp_path / "dump.ndjson"
    path.write_bytes(_ndjson(3))
    result, _ = _build(tmp_path, str(path), "--target-model", "comment")
    assert result.exit_code == 0, result.output
    assert "the sources hold 3 posts, all kept in memory; build --prefilter reads" in result.output


# ---------------------------------------------------------------------------------------------- twscrape
def _tw_user(n: int) -> dict[str, Any]:
    return {
        "id": 4400 + n,
        "id_str": str(4400 + n),
        "url": f"https://x.com/maker{n}",
        "username": f"maker{n}",
        "displayname": f"Maker {n}",
        "rawDescription": "",
        "created": "2011-05-01 10:00:00+00:00",
        "followersCount": 10,
        "_type": "snscrape.modules.twitter.User",
    }


def _tweet(tid: int, text: str, *, reply_to: int | None = None, conversation: int | None = None, **over: Any):
    """A tweet as twscrape's ``Tweet.json()`` writes it (dates through ``str(datetime)``)."""
    return {
        "id": tid,
        "id_str": str(tid),
        "url": f"https://x.com/maker{tid % 3}/status/{tid}",
        "date": "2025-03-26 18:02:11+00:00",
        "user": _tw_user(tid % 3),
        "lang": "en",
        "rawContent": text,
        "replyCount": 1,
        "retweetCount": 2,
        "likeCount": 30,
        "quoteCount": 0,
        "bookmarkedCount": 4,
        "conversationId": conversation or tid,
        "conversationIdStr": str(conversation or tid),
        "hashtags": [],
        "cashtags": [],
        "mentionedUsers": [],
        "links": [],
        "media": {"photos": [], "videos": [], "animated": []},
        "viewCount": 1234,
        "retweetedTweet": None,
        "quotedTweet": None,
        "inReplyToTweetId": reply_to,
        "inReplyToTweetIdStr": str(reply_to) if reply_to else None,
        "_type": "snscrape.modules.twitter.Tweet",
        **over,
    }


def test_twscrape_lines_are_detected_and_mapped(tmp_path):
    from echo_builder.sources import detect_format

    root = _tweet(
        1901,
        "made with GPT-Image-1 & it's <great>",
        media={"photos": [{"url": "https://pbs.twimg.com/a.jpg"}]},
    )
    quoted = _tweet(1800, "the original prompt")
    reply = _tweet(1902, "how?", reply_to=1901, conversation=1901, quotedTweet=quoted)
    video = {"thumbnailUrl": "https://pbs.twimg.com/v.jpg", "variants": [], "duration": 5000}
    retweet = _tweet(
        1903, "RT @maker0: ...", retweetedTweet=_tweet(1700, "old post", media={"videos": [video]})
    )
    broken = _tweet(1904, "no date", date="yesterday")
    path = tmp_path / "tweets.jsonl.gz"
    path.write_bytes(
        gzip.compress("".join(json.dumps(t) + "\n" for t in (root, reply, retweet, broken)).encode())
    )
    assert detect_format(path) == "twscrape"
    report = read_posts(path)
    posts = {p.id: p for p in report.posts}
    assert list(posts) == ["x:1901", "x:1902", "x:1800", "x:1700"]
    first = posts["x:1901"]
    assert (first.platform, first.url, first.author, first.author_id) == (
        "x",
        "https://x.com/maker2/status/1901",
        "maker2",
        "4402",
    )
    assert first.text == "made with GPT-Image-1 & it's <great>" and first.lang == "en"
    assert first.created_at.isoformat() == "2025-03-26T18:02:11+00:00"
    assert [(m.url, m.type) for m in first.media] == [("https://pbs.twimg.com/a.jpg", "photo")]
    assert first.engagement == {
        "likes": 30,
        "reposts": 2,
        "replies": 1,
        "quotes": 0,
        "views": 1234,
        "bookmarks": 4,
    }
    assert (first.root_id, first.reply_to_id) == ("x:1901", None)
    second = posts["x:1902"]
    assert (second.reply_to_id, second.root_id, second.quoted_id) == ("x:1901", "x:1901", "x:1800")
    assert [(m.url, m.type) for m in posts["x:1700"].media] == [("https://pbs.twimg.com/v.jpg", "video")]
    assert [(p.location, p.level) for p in report.problems] == [("line 3", "note"), ("line 4", "error")]
    assert "is a retweet" in report.problems[0].reason
    assert report.problems[1].reason.startswith("date 'yesterday' is not an ISO 8601 date")


def test_twscrape_detection_leaves_the_other_formats_alone():
    from echo_builder.sources import get_source

    twscrape = get_source("twscrape")
    assert twscrape.sniff(_tweet(1, "x")) and twscrape.sniff([_tweet(1, "x")])
    assert not twscrape.sniff({"id": "1", "text": "an X API v2 tweet", "author_id": "9"})
    assert not twscrape.sniff({"id": "x:1", "platform": "x", "text": "a Post line"})
    assert not twscrape.sniff({"rawContent": "no user"})
    assert not twscrape.sniff(_comment(1))


# ---------------------------------------------------------------------------------------------- hf: sources
def _prompt_dataset(tmp_path: Path) -> Path:
    """A local dataset folder as ``datasets.load_dataset`` reads it (a Hub repository's layout, offline)."""
    repo = tmp_path / "curated-prompts"
    (repo / "data").mkdir(parents=True)
    image = tmp_path / "example.png"
    image.write_bytes(b"\x89PNG\r\n\x1a\n")
    rows = [
        {
            "uid": "a1",
            "text": "a red fox in the snow, ukiyo-e",
            "img": "https://example.org/fox.png",
            "edit": False,
        },
        {"uid": "a2", "text": "   ", "img": None, "edit": False},
        {"uid": "a3", "text": "turn my photo into a watercolor", "img": str(image), "edit": True},
    ]
    (repo / "data" / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (repo / "data" / "test.jsonl").write_text(
        json.dumps({"uid": "b1", "text": "a cat", "img": "x", "edit": 0})
    )
    return repo


def test_an_hf_source_reads_a_prompt_collection_with_a_column_mapping(tmp_path):
    repo = _prompt_dataset(tmp_path)
    columns = {"prompt": "text", "id": "uid", "image": "img", "needs_input_image": "edit"}
    report = read_posts(f"hf:{repo}", hf_columns=columns)
    ids = [p.id for p in report.posts]
    assert ids == [f"collection:hf/{repo}/b1", f"collection:hf/{repo}/a1", f"collection:hf/{repo}/a3"]
    fox, watercolor = report.posts[1], report.posts[2]
    assert (fox.platform, fox.text, fox.root_id) == ("collection", "a red fox in the snow, ukiyo-e", fox.id)
    assert [m.url for m in fox.media] == ["https://example.org/fox.png"]
    assert [m.path for m in watercolor.media] == [str(tmp_path / "example.png")]
    assert (fox.raw["needs_input_image"], watercolor.raw["needs_input_image"]) == (False, True)
    assert fox.raw["split"] == "train" and fox.raw["source"] == f"hf:{repo}"
    assert [(p.location, p.level) for p in report.problems] == [("test/0", "note"), ("train/1", "error")]
    assert report.problems[1].reason == "no prompt in column 'text' (got '   '); skipped"
    assert (report.files[0].format, report.files[0].posts, report.files[0].errors) == ("hf", 3, 1)


def test_an_hf_source_that_cannot_be_read_is_one_named_problem(tmp_path):
    repo = _prompt_dataset(tmp_path)
    report = read_posts([f"hf:{tmp_path / 'missing'}", f"hf:{repo}"], hf_columns={"prompt": "caption"})
    assert report.posts == []
    first, *others = report.errors
    assert first.location is None and first.reason.startswith(
        f"cannot load the dataset '{tmp_path / 'missing'}'"
    )
    assert [e.reason.split(" (")[0] for e in others] == [
        "split 'test': no column 'caption'",
        "split 'train': no column 'caption'",
    ]


def test_hf_columns_are_checked_before_the_build(tmp_path):
    from echo_builder.errors import ConfigError
    from echo_builder.sources.hf import parse_hf_columns, parse_hf_source

    assert parse_hf_columns("prompt=text, id=uid") == {"prompt": "text", "id": "uid"}
    for bad, message in [
        ("prompt", "not FIELD=COLUMN"),
        ("colour=x", "unknown field 'colour'"),
        ("id=a,id=b", "twice"),
    ]:
        with pytest.raises(ConfigError, match=message):
            parse_hf_columns(bad)
    assert parse_hf_source("hf:org/prompts:v2") == ("org/prompts", "v2")
    assert parse_hf_source("hf:org/prompts") == ("org/prompts", None)
    result, report = _build(tmp_path, f"hf:{_prompt_dataset(tmp_path)}", "--hf-columns", "prompt=text,id=uid")
    assert result.exit_code == 0, result.output
    assert report["stages"][0]["out"] == 3 and report["stages"][1]["curated"] == 3


# ------------------------------------------------------------------------- streamed reads equal whole reads
def _as_list_file(path: Path) -> Path:
    """The records of a JSON Lines file as one top-level JSON list (the streamed-list path)."""
    items = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    listed = path.with_name(path.stem + "_list.json")
    listed.write_text(json.dumps(items, ensure_ascii=False))
    return listed


@pytest.mark.parametrize(
    ("fmt", "bad"), [("reddit", {"body": ["x"]}), ("jsonl", {"text": 7}), ("x_api", {"text": 7})]
)
def test_a_streamed_read_equals_the_whole_read_in_every_file_format(fmt, bad, tmp_path, monkeypatch):
    from tests.test_sources_hardening import write_source

    path = write_source(fmt, tmp_path, bad, count=6, at=2)
    inputs = [path] + ([_as_list_file(path)] if path.suffix == ".ndjson" or path.suffix == ".jsonl" else [])
    for given in inputs:
        whole = read_posts(given)
        monkeypatch.setattr(loading_module, "WHOLE_BYTES", 16)
        monkeypatch.setattr(loading_module, "_CHUNK", 5)
        streamed = read_posts(given)
        monkeypatch.undo()
        assert len(whole.posts) == 5 and len(whole.errors) == 1, (given.name, whole.problems)
        assert [p.model_dump() for p in streamed.posts] == [p.model_dump() for p in whole.posts], given.name
        assert [(p.location, p.reason) for p in streamed.problems] == [
            (p.location, p.reason) for p in whole.problems
        ], given.name
