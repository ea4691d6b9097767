"""Records: lossless JSON round-trip, namespaced ids, validation of inconsistent records, deterministic ids."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from echo_builder.errors import RecordError
from echo_builder.ids import make_post_id, sample_id, split_post_id
from echo_builder.records import (
    ApplicabilityFlags,
    BoundingBox,
    Feedback,
    MediaRef,
    Post,
    Sample,
    Tree,
    Verdict,
)
from tests.helpers.properties import examples

SHA = "ab" * 32


def _post(native: str, **kw) -> Post:
    return Post(id=f"x:{native}", platform="x", text=kw.pop("text", f"post {native}"), **kw)


def _full_records():
    media = MediaRef(
        url="https://pbs.twimg.com/media/a.jpg",
        media_id="3_1",
        type="photo",
        alt_text="a cat",
        width=1024,
        height=768,
        sha256=SHA,
        path="ab/abab.jpg",
    )
    root = _post(
        "1",
        url="https://x.com/u/status/1",
        author_id="u1",
        author="user_1",
        created_at=datetime(2025, 3, 26, 18, 0, tzinfo=timezone.utc),
        media=(media,),
        engagement={"likes": 10, "reposts": 2},
        lang="en",
        raw={"nested": [1, 2.5, None, "é"]},
    )
    reply = _post("2", reply_to_id="x:1", root_id="x:1", quoted_id="x:9", text="Prompt: a cat in 🎩")
    tree = Tree(
        root_id="x:1",
        posts=(root, reply),
        children={"x:1": ("x:2",)},
        missing_ids=("x:0",),
        seed_ids=("x:2",),
    )
    sample = Sample(
        id=sample_id(["x:1", "x:2"]),
        prompt="a cat in a hat",
        prompt_modified=True,
        prompt_fill_blank=False,
        post_urls=("https://x.com/u/status/2", "https://x.com/u/status/1"),
        source_post_ids=("x:2", "x:1"),
        quality="Benchmark",
        tier="Manual Review",
        review="input image",
        community_feedback=(Feedback(post_url="https://x.com/u/status/3", feedback="too yellow"),),
        input_images=(media,),
        output_images=(MediaRef(url="https://e.com/o.png"),),
        is_screenshot=True,
        input_bboxes=(BoundingBox(x1=0, y1=0.5, x2=10, y2=20, role="output"),),
        applicability=ApplicabilityFlags(face_identity=True, structure=None, no_color_shift=False),
        platform="x",
        created_at=datetime(2025, 3, 27, 1, 2, 3, tzinfo=timezone(timedelta(hours=2))),
        has_nsfw=None,
        tree_id="x:1",
    )
    verdicts = [
        Verdict(
            sample_id=sample.id,
            judge="openai:gpt-4o",
            judge_snapshot="gpt-4o-2024-08-06",
            model="m1",
            rating=7,
            raw_text="... [[7]]",
            prompt_version="1",
            input_tokens=900,
            output_tokens=120,
            latency_s=2.5,
        ),
        Verdict(
            sample_id=sample.id,
            judge="openai:gpt-4o",
            mode="pairwise",
            model_a="m1",
            model_b="m2",
            order="BA",
            winner="tie",
            raw_text="[[C]]",
        ),
        Verdict(
            sample_id=sample.id,
            judge="transformers:q",
            mode="probability",
            model="m1",
            rating=6.4,
            confidence=0.71,
        ),
        Verdict(
            sample_id=sample.id,
            judge="openai:gpt-4o",
            model="m2",
            status="parse_failure",
            raw_text="I think 7",
            error="no [[N]] rating",
        ),
    ]
    return [media, root, reply, tree, sample, *verdicts]


@pytest.mark.parametrize("record", _full_records(), ids=lambda r: type(r).__name__)
def test_json_round_trip_is_lossless(record):
    again = type(record).model_validate_json(record.model_dump_json())
    assert again == record
    assert again.model_dump_json() == record.model_dump_json()


def test_timestamps_become_utc():
    naive = _post("5", created_at=datetime(2025, 3, 26, 12, 0))
    shifted = _post("5", created_at=datetime(2025, 3, 26, 14, 0, tzinfo=timezone(timedelta(hours=2))))
    assert naive.created_at == shifted.created_at == datetime(2025, 3, 26, 12, 0, tzinfo=timezone.utc)
    assert naive.created_at.utcoffset() == timedelta(0) and shifted.created_at.tzinfo == timezone.utc


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"id": "1904", "platform": "x"}, "not namespaced"),
        ({"id": "reddit:t3_a", "platform": "x"}, "not namespaced with platform 'x'"),
        ({"id": "x:1", "platform": "x", "reply_to_id": "bluesky:at://p"}, "reply_to_id"),
        ({"id": "myspace:1", "platform": "myspace"}, "unknown platform"),
        ({"id": "x:1", "platform": "x", "engagement": {"likes": -1}}, ">= 0"),
        ({"id": "x:1", "platform": "x", "colour": "red"}, "Extra inputs are not permitted"),
    ],
)
def test_invalid_posts_are_rejected(fields, message):
    with pytest.raises(ValidationError, match=message):
        Post(**fields)


def test_records_are_frozen():
    post = _post("1")
    with pytest.raises(ValidationError):
        post.text = "changed"


def test_tree_consistency():
    a, b = _post("1"), _post("2", reply_to_id="x:1")
    with pytest.raises(ValidationError, match="more than once"):
        Tree(root_id="x:1", posts=(a, a))
    with pytest.raises(ValidationError, match="root"):
        Tree(root_id="x:3", posts=(a, b))
    with pytest.raises(ValidationError, match="not in the tree"):
        Tree(root_id="x:1", posts=(a, b), children={"x:1": ("x:7",)})
    tree = Tree(root_id="x:1", posts=(a, b), children={"x:1": ("x:2",)})
    assert tree.post("x:2") == b
    with pytest.raises(KeyError):
        tree.post("x:9")


def test_verdict_failures_never_carry_scores():
    with pytest.raises(ValidationError, match="never scores"):
        Verdict(sample_id="s", judge="j", model="m", status="error", rating=5)
    with pytest.raises(ValidationError, match="needs a rating or a winner"):
        Verdict(sample_id="s", judge="j", model="m")
    with pytest.raises(ValidationError, match="model_a and model_b"):
        Verdict(sample_id="s", judge="j", mode="pairwise", model_a="m", winner="A")
    with pytest.raises(ValidationError, match="x1 < x2"):
        BoundingBox(x1=5, y1=0, x2=5, y2=3)


def test_post_ids_are_namespaced():
    assert make_post_id("x", 1904123) == "x:1904123"
    assert split_post_id("bluesky:at://did:plc:abc/app.bsky.feed.post/3k") == (
        "bluesky",
        "at://did:plc:abc/app.bsky.feed.post/3k",
    )
    for bad in ("1904", ":12", "x:", "tiktok:1"):
        with pytest.raises(RecordError):
            split_post_id(bad)
    with pytest.raises(RecordError, match="empty native id"):
        make_post_id("x", "  ")


def test_sample_id_is_deterministic_and_order_free():
    ids = ["x:3", "x:1", "x:2"]
    sid = sample_id(ids)
    assert sid == sample_id(reversed(ids)) == sample_id([*ids, "x:1"])
    assert sid.startswith("echo-") and len(sid) == 21
    assert sample_id(ids, salt="1") != sid
    assert sample_id(["x:1", "x:2"]) != sid
    with pytest.raises(RecordError):
        sample_id([])


_text = st.text(st.characters(blacklist_categories=("Cs",)), max_size=40)


@settings(max_examples=examples(60), deadline=None)
@given(
    native=st.from_regex(r"[0-9]{1,19}", fullmatch=True),
    text=_text,
    likes=st.integers(0, 10**9),
    when=st.none() | st.datetimes(timezones=st.just(timezone.utc)),
    raw=st.recursive(
        st.none() | st.booleans() | st.integers(-(2**53), 2**53) | _text,
        lambda c: st.lists(c, max_size=3) | st.dictionaries(_text, c, max_size=3),
        max_leaves=8,
    ),
)
def test_post_round_trip_property(native, text, likes, when, raw):
    post = _post(native, text=text, engagement={"likes": likes}, created_at=when, raw=raw)
    assert Post.model_validate_json(post.model_dump_json()) == post
