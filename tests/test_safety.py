"""NudeNetChecker with the real weights shipped in the nudenet wheel: the demo and shared images are safe (raw
detections recorded), the guarded decoder feeds the detector the pixels NudeNet reads itself, a scripted detection
over the threshold flags, and arguments and missing extras fail clearly."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from echo_builder.errors import ConfigError, ImageError, MissingDependencyError
from echo_builder.safety import DEFAULT_THRESHOLD, NSFW_CLASSES, NUDENET_CLASSES, NudeNetChecker, SafetyResult

DEMO_MEDIA = Path(__file__).resolve().parents[1] / "echo_builder" / "examples" / "demo" / "media"
SHARED_IMAGES = (
    "image_pairs/yellow_tint",
    "image_pairs/genai_arena_edits",
    "prompt_collections/awesome-gpt4o-images/cases",  # six GPT-4o images: a poster, a fake tweet, a card...
)


@pytest.fixture(scope="module")
def checker():
    pytest.importorskip("nudenet", reason="the nsfw extra is not installed")
    return NudeNetChecker()


def _assert_safe(result: SafetyResult, checker: NudeNetChecker) -> None:
    assert result.flagged is False and result.flagging == []
    assert result.threshold == DEFAULT_THRESHOLD and result.detector_id == checker.detector_id
    for detection in result.detections:  # raw detections, recorded whatever their class
        assert detection["class"] in NUDENET_CLASSES and 0.2 <= detection["score"] <= 1.0
        assert len(detection["box"]) == 4 and all(isinstance(v, int) for v in detection["box"])


@pytest.mark.slow
def test_demo_images_are_safe(checker):
    paths = sorted(DEMO_MEDIA.glob("*.*"))
    assert len(paths) >= 9
    results = {path.name: checker.check(path) for path in paths}
    for result in results.values():
        _assert_safe(result, checker)
    assert checker.detector_id.startswith("nudenet-") and ":320n@" in checker.detector_id


@pytest.mark.slow
@pytest.mark.shared_data
def test_shared_images_are_safe(checker, shared_data):
    paths = [p for folder in SHARED_IMAGES for p in sorted((shared_data / folder).rglob("*")) if p.is_file()]
    paths = [p for p in paths if p.suffix.lower() in (".webp", ".jpg", ".jpeg", ".png")]
    assert len(paths) >= 12
    results = [checker.check(path) for path in paths]
    for result in results:
        _assert_safe(result, checker)
    # the yellow_tint pair shows a woman's face: the detector sees it, records it, and it does not flag
    tint = [r for p, r in zip(paths, results, strict=True) if "yellow_tint" in str(p)]
    assert any(d["class"] == "FACE_FEMALE" for r in tint for d in r.detections)


@pytest.mark.slow
def test_guarded_decoder_gives_nudenet_its_own_pixels(checker):
    """For an ordinary RGB PNG, the detections equal NudeNet's own ``detect(path)`` (OpenCV decoding)."""
    path = DEMO_MEDIA / "living_room_sunset.png"
    ours = checker.check(path).detections
    reference = checker._load().detect(str(path))
    assert [(d["class"], round(d["score"], 5), d["box"]) for d in ours] == [
        (d["class"], round(float(d["score"]), 5), [int(v) for v in d["box"]]) for d in reference
    ]


@pytest.mark.slow
@pytest.mark.parametrize(
    ("scripted", "flagged"),
    [
        ([{"class": "FEMALE_BREAST_EXPOSED", "score": 0.91, "box": [1, 2, 3, 4]}], True),
        (
            [{"class": "BUTTOCKS_EXPOSED", "score": DEFAULT_THRESHOLD, "box": [0, 0, 5, 5]}],
            True,
        ),  # >= threshold
        ([{"class": "FEMALE_BREAST_EXPOSED", "score": 0.59, "box": [1, 2, 3, 4]}], False),
        ([{"class": "FACE_FEMALE", "score": 0.99, "box": [1, 2, 3, 4]}], False),
        ([{"class": "MALE_BREAST_EXPOSED", "score": 0.95, "box": [1, 2, 3, 4]}], False),
        ([], False),
    ],
)
def test_scripted_detection_over_threshold_flags(checker, monkeypatch, scripted, flagged):
    detector = checker._load()
    seen = []

    def scripted_detect(image):
        seen.append(image.shape)
        return scripted

    monkeypatch.setattr(detector, "detect", scripted_detect)
    result = checker.check(np.full((40, 30, 3), 200, np.uint8))
    assert seen == [(40, 30, 3)]  # the decoded image reached the detector
    assert result.flagged is flagged
    assert result.detections == scripted
    assert result.flagging == (scripted if flagged else [])


def test_large_and_thin_images_reach_the_detector_bounded():
    """Regression: NudeNet pads an image to a square of its longer side, so a valid 1 x 200,000 px strip asked
    for 120 GB. The detector now gets at most 2,048 px a side; its boxes come back in the original's pixels."""
    from echo_builder.safety import MAX_SIDE

    seen = []

    class Scripted:
        def detect(self, image):
            seen.append(image.shape)
            return [{"class": "FACE_MALE", "score": 0.9, "box": [100, 10, 50, 20]}]

    checker = NudeNetChecker()
    checker._detector, checker._detector_id = Scripted(), "scripted"
    strip = checker.check(np.full((1, 200_000, 3), 255, np.uint8))
    wide = checker.check(np.full((1000, 4096, 3), 255, np.uint8))
    assert seen == [(1, MAX_SIDE, 3), (500, MAX_SIDE, 3)]
    assert wide.detections[0]["box"] == [200, 20, 100, 40]  # scale 0.5 undone
    assert strip.flagged is False and wide.flagged is False
    small = checker.check(np.full((300, 200, 3), 255, np.uint8))  # a usual image is untouched
    assert seen[-1] == (300, 200, 3) and small.detections[0]["box"] == [100, 10, 50, 20]


def test_threshold_and_classes_are_configurable(monkeypatch):
    checker = NudeNetChecker(threshold=0.9, nsfw_classes=["FEET_EXPOSED"])
    assert checker.nsfw_classes == ("FEET_EXPOSED",) and checker.threshold == 0.9

    class Scripted:
        def detect(self, image):
            return [{"class": "FEET_EXPOSED", "score": 0.95, "box": [0, 0, 1, 1]}]

    checker._detector, checker._detector_id = Scripted(), "scripted"
    result = checker.check(np.zeros((8, 8, 3), np.uint8))
    assert result.flagged and result.detector_id == "scripted" and result.nsfw_classes == ("FEET_EXPOSED",)


def test_nsfw_classes_are_nudenet_classes():
    assert set(NUDENET_CLASSES) >= NSFW_CLASSES
    nudenet = pytest.importorskip("nudenet.nudenet", reason="the nsfw extra is not installed")
    assert tuple(vars(nudenet)["__labels"]) == NUDENET_CLASSES  # the package's own label order


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"threshold": 1.5}, "must be a number in \\[0, 1\\], got 1.5"),
        ({"threshold": -0.1}, "got -0.1"),
        ({"threshold": "0.5"}, "got '0.5'"),
        ({"threshold": True}, "got True"),
        ({"nsfw_classes": ["NUDE"]}, "unknown NudeNet class\\(es\\) \\['NUDE'\\]"),
        ({"nsfw_classes": "FEMALE_BREAST_EXPOSED"}, "not one string"),
        ({"nsfw_classes": []}, "nothing could ever be flagged"),
    ],
)
def test_bad_settings(kwargs, message):
    with pytest.raises(ConfigError, match=message):
        NudeNetChecker(**kwargs)


def test_missing_extra_is_a_one_line_install_hint(monkeypatch):
    monkeypatch.setitem(sys.modules, "nudenet", None)
    checker = NudeNetChecker()  # creating it loads nothing
    with pytest.raises(MissingDependencyError, match=r"pip install 'echo-bench\[nsfw\]'") as info:
        checker.check(np.zeros((8, 8, 3), np.uint8))
    assert info.value.extra == "nsfw"


@pytest.mark.slow
def test_unreadable_image_is_an_image_error(checker, tmp_path):
    broken = tmp_path / "broken.png"
    broken.write_bytes(b"\x89PNG\r\n\x1a\n" + b"\0" * 20)
    with pytest.raises(ImageError, match="output 3"):
        checker.check(broken, name="output 3")
    # an RGBA image with transparency and a grey image decode through the same rules and screen fine
    rgba = Image.new("RGBA", (64, 48), (0, 0, 0, 0))
    grey = Image.new("L", (64, 48), 128)
    assert checker.check(rgba).flagged is False and checker.check(grey).flagged is False


@pytest.mark.slow
@pytest.mark.shared_data
def test_peace_sign_false_positive_stays_under_the_default_threshold(checker, shared_data):
    """Regression: NudeNet scores the peace-sign hand of a safe portrait as MALE_GENITALIA_EXPOSED at about 0.54;
    the default threshold (0.6) leaves it unflagged, NudeNet's usual 0.5 would flag it."""
    path = shared_data / "image_pairs" / "yellow_tint" / "gpt4o_before.webp"
    result = checker.check(path)
    hand = [d for d in result.detections if d["class"] == "MALE_GENITALIA_EXPOSED"]
    assert len(hand) == 1 and 0.45 < hand[0]["score"] < DEFAULT_THRESHOLD == 0.6
    assert result.flagged is False
    strict = NudeNetChecker(threshold=0.45)
    strict._detector, strict._detector_id = checker._load(), checker.detector_id
    assert strict.check(path).flagged is True
