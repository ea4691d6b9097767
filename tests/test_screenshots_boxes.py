"""Screenshot boxes in each grounding VLM's own convention (issue 14.8), on a real-size phone screenshot.

The scripted server plays the model: it decodes the image it was actually sent and answers with the known boxes
written in the convention of the model family named in the spec (Qwen2.5-VL: absolute pixels of the image it
saw; Qwen2-VL / Qwen3-VL: 0-1000 ``[x1, y1, x2, y2]``; Gemini: 0-1000 ``[ymin, xmin, ymax, xmax]``). The crops
must land on the known boxes of the original screenshot.
"""

from __future__ import annotations

import json

import pytest
from PIL import Image, ImageDraw

from echo_builder.backends import create_backend
from echo_builder.backends.boxes import default_box_format, resolve_box_format, to_original_frame
from echo_builder.backends.caller import ModelCaller, RetryPolicy
from echo_builder.cache import CallCache
from echo_builder.errors import ConfigError
from echo_builder.records import MediaRef, Sample
from echo_builder.stages.templates_screenshots import (
    CROP_MARGIN_PX,
    SCREENSHOT_MAX_LONG_SIDE,
    run_screenshots,
    screenshot_send_size,
)
from tests.test_judge import _images

PHONE = (1170, 2532)  # iPhone 12-15 screenshot, 3x density
PROMPT_BOX = (90, 260, 1080, 520)  # the user's prompt bubble
INPUT_BOX = (470, 620, 1080, 1230)  # the photo the user uploaded
OUTPUT_BOX = (60, 1380, 1110, 2430)  # the image the model generated
PROMPT = "Turn this photo into a watercolor painting"
INPUT_RGB, OUTPUT_RGB = (30, 160, 60), (200, 40, 40)


def _phone_screenshot() -> Image.Image:
    shot = Image.new("RGB", PHONE, (255, 255, 255))
    draw = ImageDraw.Draw(shot)
    draw.rectangle((0, 0, PHONE[0], 180), fill=(245, 245, 245))  # status and title bar
    draw.rounded_rectangle(PROMPT_BOX, radius=40, fill=(233, 233, 235))
    draw.text((PROMPT_BOX[0] + 40, PROMPT_BOX[1] + 40), PROMPT, fill=(0, 0, 0), font_size=44)
    draw.rectangle(INPUT_BOX, fill=INPUT_RGB)
    draw.rectangle(OUTPUT_BOX, fill=OUTPUT_RGB)
    return shot


def _store(tmp_path, image: Image.Image, name="a" * 64, **save) -> tuple:
    store = tmp_path / "store"
    (store / name[:2]).mkdir(parents=True, exist_ok=True)
    image.save(store / name[:2] / f"{name}.png", **save)
    return store, MediaRef(url=f"https://e.com/{name[:4]}.png", sha256=name, path=f"{name[:2]}/{name}.png")


def _sample(ref, sample_id="echo-0000000000000001") -> Sample:
    return Sample(id=sample_id, prompt="", output_images=(ref,), quality="Benchmark", is_screenshot=True)


def _as_model(box, fmt, sent_size, original=PHONE):
    """``box`` (original pixels) as a model of convention ``fmt`` writes it, having seen ``sent_size``."""
    x1, y1, x2, y2 = box
    if fmt == "pixels":
        sx, sy = sent_size[0] / original[0], sent_size[1] / original[1]
        return [round(x1 * sx), round(y1 * sy), round(x2 * sx), round(y2 * sy)]
    nx = [round(v * 1000 / original[0]) for v in (x1, x2)]
    ny = [round(v * 1000 / original[1]) for v in (y1, y2)]
    if fmt == "norm1000":
        return [nx[0], ny[0], nx[1], ny[1]]
    return [ny[0], nx[0], ny[1], nx[1]]


def _model_reply(fmt, key="bbox", seen=None, frame_scale=1.0):
    def reply(body):
        [image] = _images(body)
        if seen is not None:
            seen.append((image.size, body["messages"][1]["content"][-1]["text"]))
        frame = (round(image.size[0] * frame_scale), round(image.size[1] * frame_scale))
        return json.dumps(
            {
                "prompt": PROMPT,
                "boxes": [
                    {"role": "input", key: _as_model(INPUT_BOX, fmt, frame)},
                    {"role": "output", key: _as_model(OUTPUT_BOX, fmt, frame)},
                ],
            }
        )

    return reply


def _caller(server, tmp_path, spec="openai:vlm", **options):
    return ModelCaller(
        create_backend(spec, base_url=server.base_url, **options),
        cache=CallCache(tmp_path / "cache"),
        retry=RetryPolicy(max_attempts=1),
    )


def _assert_on_the_known_boxes(result, store, tol=3):
    [out] = result.samples
    assert out.prompt == PROMPT
    got = {b.role: (b.x1, b.y1, b.x2, b.y2) for b in out.input_bboxes}
    for role, known in (("input", INPUT_BOX), ("output", OUTPUT_BOX)):
        assert all(abs(a - b) <= tol for a, b in zip(got[role], known, strict=True)), (role, got[role], known)
    for ref, color, known in (
        (out.input_images[0], INPUT_RGB, INPUT_BOX),
        (out.output_images[0], OUTPUT_RGB, OUTPUT_BOX),
    ):
        crop = Image.open(store / ref.path).convert("RGB")
        width, height = known[2] - known[0] - 2 * CROP_MARGIN_PX, known[3] - known[1] - 2 * CROP_MARGIN_PX
        assert abs(crop.width - width) <= 2 * tol and abs(crop.height - height) <= 2 * tol
        # every corner of the crop is inside the drawn image: no white frame, no neighbouring UI
        for xy in ((0, 0), (crop.width - 1, 0), (0, crop.height - 1), (crop.width - 1, crop.height - 1)):
            assert crop.getpixel(xy) == color, (ref, xy)


@pytest.mark.parametrize(
    ("spec", "options", "fmt"),
    [
        ("openai:Qwen/Qwen2.5-VL-7B-Instruct", {}, "pixels"),
        ("openai:Qwen/Qwen2-VL-7B-Instruct", {}, "norm1000"),
        ("openai:qwen3-vl-8b-instruct", {}, "norm1000"),
        ("openai:gemini-2.5-flash", {}, "norm1000_yx"),
        ("openai:my-grounding-vlm", {"box_format": "norm1000_yx"}, "norm1000_yx"),
        (
            "openai:gemini-2.5-flash",
            {"box_format": "pixels"},
            "pixels",
        ),  # the option beats the family default
    ],
)
def test_crops_land_on_the_known_boxes_in_every_convention(openai_server, tmp_path, spec, options, fmt):
    store, ref = _store(tmp_path, _phone_screenshot())
    seen: list = []
    openai_server.reply = _model_reply(fmt, seen=seen)
    caller = _caller(openai_server, tmp_path, spec, **options)
    assert caller.backend.box_format == fmt
    result = run_screenshots([_sample(ref)], caller=caller, store_root=store)
    assert result.failures == [] and result.notes == []
    _assert_on_the_known_boxes(result, store)
    [(size, text)] = seen
    assert size == (
        1036,
        2240,
    )  # long side capped at 2240, sides multiples of 28: text stays legible, not 512 px
    assert min(size) >= 1000
    assert result.info["box_format"] == fmt  # recorded for the build report
    assert ("0-1000" in text) == (fmt != "pixels") and ("[ymin, xmin, ymax, xmax]" in text) == (
        fmt == "norm1000_yx"
    )
    if fmt == "pixels":
        assert "1036 x 2240" in text  # the frame the model saw, not the original 1170 x 2532


def test_the_models_own_keys_bbox_2d_and_box_2d_are_read(openai_server, tmp_path):
    store, ref = _store(tmp_path, _phone_screenshot())
    openai_server.reply = _model_reply("norm1000_yx", key="box_2d")
    result = run_screenshots(
        [_sample(ref)], caller=_caller(openai_server, tmp_path, "openai:gemini-2.0-flash"), store_root=store
    )
    _assert_on_the_known_boxes(result, store)
    openai_server.reply = _model_reply("pixels", key="bbox_2d")
    result = run_screenshots(
        [_sample(ref)],
        caller=_caller(openai_server, tmp_path / "b", "openai:qwen2.5-vl-72b-instruct"),
        store_root=store,
    )
    _assert_on_the_known_boxes(result, store)


def test_pixels_are_read_in_the_frame_the_model_saw(openai_server, tmp_path):
    """A backend whose model resizes the image itself (Qwen2.5-VL under a smaller max_pixels) reports that frame."""
    store, ref = _store(tmp_path, _phone_screenshot())
    openai_server.reply = _model_reply("pixels", frame_scale=0.5)  # the model saw half the sent size
    caller = _caller(openai_server, tmp_path, "openai:Qwen/Qwen2.5-VL-7B-Instruct")
    caller.backend.vision_frame = lambda w, h: (round(w * 0.5), round(h * 0.5))
    _assert_on_the_known_boxes(run_screenshots([_sample(ref)], caller=caller, store_root=store), store)


def test_exif_rotated_screenshot_is_cropped_in_the_frame_the_model_saw(openai_server, tmp_path):
    """A screenshot stored sideways with EXIF orientation 6: the model sees it upright, crops come from upright."""
    upright = _phone_screenshot()
    exif = Image.Exif()
    exif[0x0112] = 6  # rotate 90 degrees clockwise to display
    store, ref = _store(tmp_path, upright.transpose(Image.Transpose.ROTATE_90), exif=exif)
    openai_server.reply = _model_reply("norm1000")
    result = run_screenshots(
        [_sample(ref)], caller=_caller(openai_server, tmp_path, "openai:qwen2-vl"), store_root=store
    )
    _assert_on_the_known_boxes(result, store)


def test_unreadable_boxes_are_dropped_one_by_one(openai_server, tmp_path):
    store, ref = _store(tmp_path, _phone_screenshot())
    good = _as_model(OUTPUT_BOX, "norm1000", PHONE)
    bad = (
        '{"role": "output", "bbox": [1, 2, 3]}, {"role": "input", "bbox": ["a", 1, 2, 3]}, '
        '{"role": "logo", "bbox": [1, 2, 300, 400]}, "junk", {"role": "input", "bbox": [NaN, 0, 500, 500]}, '
        '{"role": "input", "bbox": [0, 0, 1, 1]}'
    )
    reply = f'{{"prompt": "{PROMPT}", "boxes": [{{"role": "output", "bbox": {json.dumps(good)}}}, {bad}]}}'
    openai_server.reply = lambda body: reply
    result = run_screenshots(
        [_sample(ref)], caller=_caller(openai_server, tmp_path, "openai:qwen2-vl"), store_root=store
    )
    [out] = result.samples
    assert out.prompt == PROMPT and [b.role for b in out.input_bboxes] == ["output"]
    assert Image.open(store / out.output_images[0].path).convert("RGB").getpixel((0, 0)) == OUTPUT_RGB
    assert sum("unreadable box" in n for n in result.notes) == 5
    assert sum("degenerate" in n for n in result.notes) == 1
    assert result.failures == []


def test_an_unreadable_screenshot_fails_only_its_sample(openai_server, tmp_path):
    store, ref = _store(tmp_path, _phone_screenshot())
    bad_name = "b" * 64
    (store / "bb").mkdir()
    (store / "bb" / f"{bad_name}.png").write_bytes(b"\x89PNG\r\n\x1a\n truncated")
    bad = MediaRef(url="https://e.com/b.png", sha256=bad_name, path=f"bb/{bad_name}.png")
    openai_server.reply = _model_reply("norm1000")
    samples = [_sample(bad, "echo-0000000000000002"), _sample(ref)]
    result = run_screenshots(
        samples, caller=_caller(openai_server, tmp_path, "openai:qwen2-vl"), store_root=store
    )
    assert [f.record_id for f in result.failures] == ["echo-0000000000000002"]
    assert "unreadable screenshot" in result.failures[0].reason
    assert result.samples[0] == samples[0]
    _assert_on_the_known_boxes(type(result)(samples=result.samples[1:]), store)
    assert len(openai_server.log.digests) == 1  # only the readable screenshot was sent


def test_screenshots_are_prepared_in_the_pool_while_calls_are_in_flight(openai_server, tmp_path, monkeypatch):
    """Each screenshot is read and encoded in the preparation pool (echo_builder.judge.overlap), not all before the
    first call; an unreadable one among them fails only its sample, listed first as before."""
    import threading

    from echo_builder.stages import templates_screenshots as stage

    store, ref = _store(tmp_path, _phone_screenshot())
    bad_name = "c" * 64
    (store / "cc").mkdir()
    (store / "cc" / f"{bad_name}.png").write_bytes(b"not an image")
    bad = MediaRef(url="https://e.com/c.png", sha256=bad_name, path=f"cc/{bad_name}.png")
    threads: set[str] = set()
    real = stage._screenshot_part

    def spy(image):
        threads.add(threading.current_thread().name)
        return real(image)

    monkeypatch.setattr(stage, "_screenshot_part", spy)
    openai_server.reply = _model_reply("norm1000")
    samples = [_sample(ref, f"echo-00000000000000{k:02d}") for k in range(3)]
    samples.insert(1, _sample(bad, "echo-0000000000000099"))
    result = run_screenshots(
        samples, caller=_caller(openai_server, tmp_path, "openai:qwen2-vl"), store_root=store
    )
    assert threads and all(name.startswith("judge-prep") for name in threads)
    assert [f.record_id for f in result.failures] == ["echo-0000000000000099"]
    assert result.samples[1] == samples[1]
    for done in (result.samples[0], result.samples[2], result.samples[3]):
        assert done.prompt == PROMPT and done.input_bboxes


def test_send_size_and_conversions():
    assert screenshot_send_size(*PHONE) == (1036, 2240)
    assert screenshot_send_size(2880, 1800) == (2240, 1400)
    assert screenshot_send_size(400, 800) == (392, 812)  # small screenshots are not enlarged beyond rounding
    assert screenshot_send_size(10, 3000) == (28, 2240)
    assert max(screenshot_send_size(5000, 5000)) <= SCREENSHOT_MAX_LONG_SIDE
    assert to_original_frame([100, 200, 300, 400], "norm1000", frame=(1, 1), original=(2000, 1000)) == (
        200.0,
        200.0,
        600.0,
        400.0,
    )
    assert to_original_frame([200, 100, 400, 300], "norm1000_yx", frame=(1, 1), original=(2000, 1000)) == (
        200.0,
        200.0,
        600.0,
        400.0,
    )
    assert to_original_frame([30, 40, 10, 20], "pixels", frame=(50, 100), original=(100, 200)) == (
        20,
        40,
        60,
        80,
    )
    with pytest.raises(ValueError, match="non-finite"):
        to_original_frame([float("inf"), 0, 1, 1], "pixels", frame=(1, 1), original=(1, 1))


def test_default_box_format_by_family(tmp_path):
    cases = {
        "Qwen/Qwen2.5-VL-72B-Instruct": "pixels",
        "qwen/qwen2.5-vl-32b-instruct": "pixels",
        "Qwen/Qwen2-VL-7B-Instruct": "norm1000",
        "Qwen/Qwen3-VL-235B-A22B-Instruct": "norm1000",
        "google/gemini-2.5-pro": "norm1000_yx",
        "gemini-2.0-flash": "norm1000_yx",
        "gpt-4o": "pixels",
    }
    assert {name: default_box_format(name) for name in cases} == cases
    folder = (
        tmp_path / "checkpoint-1200"
    )  # a local folder named after nothing: its config.json says the family
    folder.mkdir()
    (folder / "config.json").write_text('{"model_type": "qwen2_5_vl"}')
    assert default_box_format(str(folder)) == "pixels"
    (folder / "config.json").write_text('{"model_type": "qwen3_vl"}')
    assert default_box_format(str(folder)) == "norm1000"
    assert resolve_box_format("norm1000", "gemini") == "norm1000"
    with pytest.raises(
        ConfigError, match="box_format must be one of pixels, norm1000, norm1000_yx, got 'xyxy'"
    ):
        resolve_box_format("xyxy", "gpt-4o")
    with pytest.raises(ConfigError, match="box_format"):
        create_backend("openai:gpt-4o", base_url="http://127.0.0.1:9/v1", box_format="yxyx")


def test_transformers_backend_reports_its_processor_frame(tiny_vlm):
    pytest.importorskip("transformers")
    backend = create_backend(f"transformers:{tiny_vlm}")
    assert backend.box_format == "norm1000"  # the folder's config.json: model_type qwen2_vl
    # the tiny processor's budget is 784-3136 pixels in 28 px steps: a 1036 x 2240 screenshot is seen as 28 x 56
    assert backend.vision_frame(1036, 2240) == (28, 56)
