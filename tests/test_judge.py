"""Judge protocols: parsing rules, image preparation, single/pairwise/probability judging with scripted judges."""

from __future__ import annotations

import base64
import io

import pytest
from PIL import Image

from echo_builder.backends import create_backend
from echo_builder.backends.caller import ModelCaller, RetryPolicy
from echo_builder.cache import CallCache
from echo_builder.errors import ImageError
from echo_builder.imaging import load_rgb
from echo_builder.judge import Judge, JudgeItem, parse_preference, parse_rating, trig_score
from echo_builder.judge.images import prepare_for_judge
from tests.helpers.openai_server import Scripted

FAST = RetryPolicy(max_attempts=3, initial_backoff_s=0.001, max_backoff_s=0.01)
GREEN, RED, BLUE = (20, 200, 20), (200, 20, 20), (20, 20, 200)


# -- parsing -----------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("text", "rating", "status"),
    [
        ("Rating: [[5]] ... Final: [[8]]", 8, "ok"),  # the last rating counts (reference code took the first)
        ("The output is fine. [[ 7 ]]", 7, "ok"),
        ("[[10]]", 10, "ok"),
        ("[[1]]", 1, "ok"),
        ("Rating: [[7.5]]", None, "parse_failure"),
        ("Rating: [[11]]", None, "parse_failure"),
        ("Rating: [[0]]", None, "parse_failure"),
        ("[[8]] then finally [[eight]]", None, "parse_failure"),
        ("I would give it an 8 out of 10.", None, "parse_failure"),
        ("I'm sorry, but I can't evaluate this image.", None, "refusal"),
        ("", None, "refusal"),
    ],
)
def test_rating_parsing(text, rating, status):
    parsed = parse_rating(text)
    assert (parsed.rating, parsed.status) == (rating, status)
    assert (parsed.reason is None) == (status == "ok")


def test_content_filter_is_a_refusal_and_preferences_parse():
    assert parse_rating("partial text", "content_filter").status == "refusal"
    assert parse_preference("A is sharper... [[B]] no wait [[A]]").winner == "A"
    assert parse_preference("[[C]]").winner == "tie"
    assert parse_preference("[[D]]").status == "parse_failure"
    assert parse_preference("Both are equally good.").status == "parse_failure"


def test_trig_score():
    score, confidence = trig_score({"Good": 0.7, "Medium": 0.2, "Bad": 0.1})
    assert confidence == 0.7 and score == pytest.approx((0.7 + 0.1) * 0.7)


# -- images ------------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("mode", "size", "fill"),
    [
        ("RGB", (1024, 768), (10, 20, 30)),
        ("RGBA", (300, 900), (10, 20, 30, 0)),
        ("L", (2048, 512), 128),
        ("CMYK", (600, 600), (0, 0, 0, 0)),
        ("P", (700, 500), 3),
        ("I;16", (800, 600), 65535),
    ],
)
def test_prepare_for_judge_resizes_shorter_side_to_512_as_jpeg(mode, size, fill):
    part = prepare_for_judge(Image.new(mode, size, fill))
    assert part.mime_type == "image/jpeg"
    out = Image.open(io.BytesIO(part.data))
    assert out.mode == "RGB" and min(out.size) == 512
    assert out.size[0] / out.size[1] == pytest.approx(size[0] / size[1], rel=0.01)
    if mode == "RGBA":  # fully transparent pixels become white, not black
        assert out.getpixel((10, 10)) == pytest.approx((255, 255, 255), abs=2)
    if mode == "I;16":  # 16-bit white stays white instead of being clipped oddly
        assert out.getpixel((10, 10)) == pytest.approx((255, 255, 255), abs=2)


def test_unreadable_images_are_clear_errors(tmp_path):
    bad = tmp_path / "broken.png"
    bad.write_bytes(b"\x89PNG\r\n\x1a\n" + b"garbage" * 10)
    with pytest.raises(ImageError, match=r"broken\.png: cannot decode image"):
        load_rgb(bad)
    with pytest.raises(ImageError, match="cannot decode"):
        load_rgb(b"")
    with pytest.raises(ImageError, match="neither bytes nor path"):
        load_rgb({"bytes": None, "path": None})


# -- scripted judges ---------------------------------------------------------------------------------------------------
def _images(body) -> list[Image.Image]:
    out = []
    for message in body["messages"]:
        if isinstance(message["content"], list):
            for part in message["content"]:
                if part["type"] == "image_url":
                    data = base64.b64decode(part["image_url"]["url"].split(",", 1)[1])
                    out.append(Image.open(io.BytesIO(data)).convert("RGB"))
    return out


def _dominant(img: Image.Image) -> str:
    r, g, b = img.resize((1, 1)).getpixel((0, 0))
    return max((("green", g), ("red", r), ("blue", b)), key=lambda kv: kv[1])[0]


def color_rater(body):
    """Rates the last image: green 8, blue 5, red 2, with a provisional rating first (the last one counts)."""
    color = _dominant(_images(body)[-1])
    score = {"green": 8, "blue": 5, "red": 2}[color]
    return (
        f"A good output would follow the prompt. Provisional [[3]]. The output is {color}. Final: [[{score}]]"
    )


def _judge(server, tmp_path, name="judge", **kw):
    backend = create_backend(f"openai:{name}", base_url=server.base_url)
    return Judge(ModelCaller(backend, cache=CallCache(tmp_path / "cache"), retry=FAST, **kw))


def _item(sample, model, color, inputs=()):
    return JudgeItem(
        sample,
        f"prompt of {sample}",
        tuple(inputs),
        model,
        Image.new("RGB", (64, 48), color) if color else None,
    )


def test_single_grading_with_failures_and_missing_outputs(openai_server, tmp_path):
    def reply(body):
        text = body["messages"][1]["content"][-1]["text"]
        if "prompt of s-refuse" in text:
            return "I'm sorry, I cannot help with that."
        if "prompt of s-garbled" in text:
            return "It is a nice image, maybe 7/10." if len(body["messages"]) == 2 else "Still no rating."
        if "prompt of s-fixed" in text and len(body["messages"]) == 2:
            return "Looks fine."
        return color_rater(body)

    openai_server.reply = reply
    judge = _judge(openai_server, tmp_path)
    inputs = [Image.new("RGB", (640, 480), BLUE)]
    items = [
        _item("s1", "good", GREEN, inputs),
        _item("s1", "bad", RED, inputs),
        _item("s2", "good", None),
        _item("s-refuse", "good", GREEN),
        _item("s-garbled", "good", GREEN),
        _item("s-fixed", "bad", BLUE),
    ]
    verdicts = judge.single(items)
    got = [(v.sample_id, v.model, v.status, v.rating) for v in verdicts]
    assert got == [
        ("s1", "good", "ok", 8.0),
        ("s1", "bad", "ok", 2.0),
        ("s2", "good", "missing_output", None),
        ("s-refuse", "good", "refusal", None),
        ("s-garbled", "good", "parse_failure", None),
        ("s-fixed", "bad", "ok", 5.0),  # re-asked once, then rated
    ]
    assert verdicts[4].raw_text == "Still no rating." and "no [[N]]" in verdicts[4].error
    assert verdicts[0].judge == "openai:judge" and verdicts[0].prompt_version == "echo-single-v1"
    assert verdicts[0].judge_snapshot == "fake-vlm-2026-01-01@fp_test"
    # the judge saw the input first, then the output, each at 512 px on the shorter side
    first = next(b for b in openai_server.log.bodies if "prompt of s1" in str(b))
    shown = _images(first)
    assert [im.size for im in shown] == [(683, 512), (683, 512)]
    assert [_dominant(im) for im in shown] in (["blue", "green"], ["blue", "red"])
    assert "first 1 image(s) are the user's input" in first["messages"][1]["content"][-1]["text"]
    calls = openai_server.calls
    assert judge.single(items) == verdicts and openai_server.calls == calls  # rerun: all from the cache


def test_pairwise_both_orders_and_position_bias(openai_server, tmp_path):
    def reply(body):
        if body["model"] == "biased":
            return "Both are fine, but the first is better. [[A]]"
        a, b = _images(body)[-2:]
        rank = {"green": 2, "blue": 1, "red": 0}
        ra, rb = rank[_dominant(a)], rank[_dominant(b)]
        return "[[A]]" if ra > rb else "[[B]]" if rb > ra else "[[C]]"

    openai_server.reply = reply
    pairs = [
        (_item("s1", "good", GREEN), _item("s1", "bad", RED)),
        (_item("s2", "bad", RED), _item("s2", "good", GREEN)),
        (_item("s3", "good", GREEN), _item("s3", "bad", None)),
    ]
    fair = _judge(openai_server, tmp_path, "fair").pairwise(pairs)
    assert [(v.sample_id, v.model_a, v.model_b, v.order, v.status, v.winner) for v in fair] == [
        ("s1", "good", "bad", "AB", "ok", "A"),
        ("s1", "good", "bad", "BA", "ok", "A"),
        ("s2", "bad", "good", "AB", "ok", "B"),
        ("s2", "bad", "good", "BA", "ok", "B"),
        ("s3", "good", "bad", "AB", "missing_output", None),
        ("s3", "good", "bad", "BA", "missing_output", None),
    ]
    biased = _judge(openai_server, tmp_path, "biased").pairwise(pairs[:2])
    # always "A": in BA order that names model_b, so the two orders always disagree
    assert [v.winner for v in biased] == ["A", "B", "A", "B"]


def test_probability_scoring(openai_server, tmp_path):
    probs = {str(d): p for d, p in zip(range(1, 10), [0, 0, 0, 0, 0.1, 0.2, 0.4, 0.2, 0.1], strict=True) if p}
    openai_server.reply = lambda body: Scripted("7", next_token_probs=probs)
    verdicts = _judge(openai_server, tmp_path).probability([_item("s1", "m", GREEN), _item("s2", "m", None)])
    assert verdicts[0].status == "ok" and verdicts[0].mode == "probability"
    assert verdicts[0].rating == pytest.approx(5 * 0.1 + 6 * 0.2 + 7 * 0.4 + 8 * 0.2 + 9 * 0.1)
    assert verdicts[0].confidence == pytest.approx(0.4)
    assert verdicts[1].status == "missing_output"
    openai_server.logprobs_supported = False
    failed = _judge(openai_server, tmp_path / "b").probability([_item("s3", "m", GREEN)])
    assert failed[0].status == "error" and "log-probabilities" in failed[0].error and failed[0].rating is None


def test_api_errors_become_error_verdicts(openai_server, tmp_path):
    from tests.helpers.openai_server import FaultPlan

    openai_server.faults = FaultPlan(always=lambda body: True, always_kind="500")
    verdicts = _judge(openai_server, tmp_path).single([_item("s1", "m", GREEN)])
    assert verdicts[0].status == "error" and "gave up after 3 attempt(s)" in verdicts[0].error
    assert verdicts[0].rating is None
