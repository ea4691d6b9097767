"""text_accuracy: required strings from every quote style, the normalisation, Sellers' alignment against a brute-force
reference, NaN reasons, and the real PP-OCRv4 weights of rapidocr_onnxruntime on Pillow-rendered text and on a real
GPT-4o poster with Chinese text (shared data)."""

from __future__ import annotations

import io
import math
import shutil
import subprocess
import sys
import threading
import unicodedata
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from PIL import Image, ImageDraw, ImageFont

from echo_builder.errors import ConfigError, ImageError, MissingDependencyError
from echo_builder.scoring.base import METRIC_SPECS
from echo_builder.scoring.text_accuracy import (
    NO_REQUIRED_TEXT,
    NO_TEXT_FIELD,
    NOT_APPLICABLE,
    OUTPUT_MISSING,
    Alignment,
    best_alignment,
    normalise,
    required_strings,
    string_accuracy,
    text_accuracy,
)
from tests.helpers.properties import examples

LATIN_FONT = Path("/usr/share/fonts/truetype/dejavu/DejaVuSans-Bold.ttf")
POSTER_CASE = Path("prompt_collections/awesome-gpt4o-images/cases/3")


# ------------------------------------------------------------------------------------------- a second reference
def levenshtein(a: str, b: str) -> int:
    """Plain full-matrix Levenshtein distance, written independently of the module."""
    rows = [[i + j if i * j == 0 else 0 for j in range(len(b) + 1)] for i in range(len(a) + 1)]
    for i in range(1, len(a) + 1):
        for j in range(1, len(b) + 1):
            rows[i][j] = min(
                rows[i - 1][j] + 1, rows[i][j - 1] + 1, rows[i - 1][j - 1] + (a[i - 1] != b[j - 1])
            )
    return rows[-1][-1]


def brute_best(required: str, text: str) -> int:
    """Smallest distance between ``required`` and any substring of ``text``, by trying every substring."""
    return min(
        levenshtein(required, text[i:j]) for i in range(len(text) + 1) for j in range(i, len(text) + 1)
    )


def sellers(required: str, text: str) -> tuple[int, int, int]:
    """Sellers' dynamic programme cell by cell in plain Python, with the module's tie rules (earliest end, then the
    latest start): the reference for the vectorised version's start and end."""
    m, n = len(required), len(text)
    dist, start = [0] * (n + 1), list(range(n + 1))
    for i in range(1, m + 1):
        new_dist, new_start = [i] + [0] * n, [0] * (n + 1)
        for j in range(1, n + 1):
            best, origin = dist[j - 1] + (required[i - 1] != text[j - 1]), start[j - 1]
            for value, source in ((dist[j] + 1, start[j]), (new_dist[j - 1] + 1, new_start[j - 1])):
                if value < best or (value == best and source > origin):
                    best, origin = value, source
            new_dist[j], new_start[j] = best, origin
        dist, start = new_dist, new_start
    if m == 0:
        return 0, 0, 0
    end = min(range(n + 1), key=lambda j: (dist[j], j))
    return dist[end], start[end], end


# ------------------------------------------------------------------------------------------- required strings
@pytest.mark.parametrize(
    ("prompt", "expected"),
    [
        ('a receipt that says "TOTAL $127.54"', ["TOTAL $127.54"]),
        ("a sign reading \u201cOPEN 24/7\u201d", ["OPEN 24/7"]),
        ("a mug with \u2018Best Dad\u2019 on it", ["Best Dad"]),
        ("ein Schild \u201eAchtung\u201c", ["Achtung"]),
        ("une affiche \u00abBonjour\u00bb", ["Bonjour"]),
        ("\u62db\u724c\u4e0a\u5199\u7740\u300c\u8425\u4e1a\u4e2d\u300d", ["\u8425\u4e1a\u4e2d"]),
        ("\u6807\u9898\u300e\u6df1\u591c\u98df\u5802\u300f", ["\u6df1\u591c\u98df\u5802"]),
        ("\u4e66\u540d\u300a\u4e09\u4f53\u300b\u7684\u5c01\u9762", ["\u4e09\u4f53"]),
        ("full-width \uff02ABC\uff02 quotes", ["ABC"]),
        ("a poster with 'HELLO' in red", ["HELLO"]),
        ("the words 'Don't panic' on a towel", ["Don't panic"]),
        ("'90s style poster with 'HELLO'", ["HELLO"]),
        ('two lines: "LINE ONE" and "line two"', ["LINE ONE", "line two"]),
    ],
)
def test_required_strings_every_quote_style(prompt, expected):
    assert required_strings(prompt) == expected


@pytest.mark.parametrize(
    "prompt",
    [
        "a cat on a sofa, golden hour",
        "the girls' dresses and the boys' shoes, it's sunny, don't add text",
        'an unclosed "quote that never ends',
        'empty quotes "  " and \u201c\u201d',
    ],
)
def test_required_strings_none(prompt):
    assert required_strings(prompt) == []


def test_required_strings_nested_markup_and_repeats():
    # nested: the outer span holds the inner one (a real GPT-4o prompt, case 3 of the shared collection)
    assert required_strings(
        "\u2018\u6709\u610f\u5411\u70b9\u53f3\u4e0b\u201c\u6211\u60f3\u8981\u201d\u2019"
    ) == ["\u6709\u610f\u5411\u70b9\u53f3\u4e0b\u201c\u6211\u60f3\u8981\u201d"]
    # an HTML attribute value is not text to render; a repeated string counts once (case 34's shape)
    prompt = '<h1><span style="color:red">\u300cAB\u300d</span></h1> - \u300cAB\u300d \u300cCD\u300d "ab"'
    assert required_strings(prompt) == ["AB", "CD"]


def test_required_strings_refuses_a_non_string():
    with pytest.raises(ConfigError, match="must be a string, got int"):
        required_strings(3)  # type: ignore[arg-type]


# -------------------------------------------------------------------------------------------- normalisation
def test_normalise_rule():
    assert (
        normalise("\uff34\uff2f\uff34\uff21\uff2c\u3000\uff04\uff11\uff12\uff17") == "total$127"
    )  # full-width
    assert normalise("Stra\u00dfe") == normalise("STRASSE") == "strasse"  # case folding, not lower()
    assert normalise("Joe\u2019s \u201cDiner\u201d \u2014 24\u201347") == 'joe\'s"diner"-24-47'
    assert normalise(" a\tb\nc\u00a0d ") == "abcd"  # every whitespace character removed
    assert normalise("\ufb01ne") == "fine"  # NFKC splits the ligature
    assert normalise("O\u200bP\u00adE\x00N\x07") == "open"  # zero-width space, soft hyphen, NUL, bell


@settings(max_examples=examples(200), deadline=None)
@given(st.text(max_size=40))
def test_normalise_idempotent_and_spaceless(text):
    once = normalise(text)
    assert normalise(once) == once
    assert not any(ch.isspace() or unicodedata.category(ch) in ("Cc", "Cf") for ch in once)


@settings(max_examples=examples(200), deadline=None)
@given(st.text(alphabet=st.characters(min_codepoint=0x21, max_codepoint=0x7E), max_size=30))
def test_normalise_full_width_and_case_invariant(text):
    full_width = "".join(chr(ord(ch) + 0xFEE0) for ch in text)  # U+FF01..U+FF5E mirror ASCII 0x21..0x7E
    assert normalise(full_width) == normalise(text) == normalise(text.swapcase())


# ------------------------------------------------------------------------------------------------ alignment
def test_best_alignment_values():
    assert best_alignment("total$127.54", "xxtotal$127.54yy") == Alignment(0, 2, 14)
    assert best_alignment("abc", "") == Alignment(3, 0, 0)
    assert best_alignment("", "abc") == Alignment(0, 0, 0)
    assert best_alignment("total$127.54", "total$721.45").distance == brute_best(
        "total$127.54", "total$721.45"
    )
    score, alignment, required, text = string_accuracy("TOTAL $127.54", "Receipt\nTOTAL $172.45")
    assert (required, text) == ("total$127.54", "receipttotal$172.45")
    assert alignment.distance == 3 and score == pytest.approx(1 - 3 / 12)
    assert text[alignment.start : alignment.end] == "total$172.4"


@settings(max_examples=examples(300), deadline=None)
@given(st.text(alphabet="abc$1.", max_size=6), st.text(alphabet="abc$1.", max_size=9))
def test_best_alignment_matches_brute_force(required, text):
    alignment = best_alignment(required, text)
    assert alignment.distance == brute_best(required, text)
    assert (alignment.distance, alignment.start, alignment.end) == sellers(required, text)
    # the reported substring really achieves the distance
    assert levenshtein(required, text[alignment.start : alignment.end]) == alignment.distance
    assert 0 <= alignment.start <= alignment.end <= len(text)
    assert alignment.distance <= len(required)


@settings(max_examples=examples(100), deadline=None)
@given(st.text(max_size=25), st.text(max_size=60))
def test_best_alignment_matches_plain_dynamic_programme_on_any_text(required, text):
    """Any Unicode (astral characters, combining marks, CJK): the vectorised rows equal the plain Python DP."""
    alignment = best_alignment(required, text)
    assert (alignment.distance, alignment.start, alignment.end) == sellers(required, text)


def test_lone_surrogates_and_astral_characters():
    """Text decoded from broken JSON can hold a lone surrogate; it is a character like any other, not a crash."""
    assert best_alignment("a\ud800b", "xxa\ud800bxx") == Alignment(0, 2, 5)
    assert required_strings('a "\ud83d" sign and "\U0001f600 ok"') == ["\ud83d", "\U0001f600 ok"]
    score, *_ = string_accuracy("\U0001f600ok", "\U0001f600 OK")
    assert score == 1.0


def test_best_alignment_long_inputs_are_fast_enough():
    """A long prompt against a long OCR text stays well inside a run's budget (vectorised rows, no Python loop
    per cell): 2,000 required characters against 20,000 of text, exact distance by construction."""
    import random

    rng = random.Random(21)
    text = "".join(rng.choice("abcdefghij0123456789") for _ in range(20_000))
    required = text[7_000:9_000]
    alignment = best_alignment(required, "".join(text))
    assert alignment == Alignment(0, 7_000, 9_000)


@settings(max_examples=examples(200), deadline=None)
@given(st.text(min_size=1, max_size=12), st.text(max_size=12), st.text(max_size=12))
def test_exact_rendering_inside_other_text_scores_one(required, before, after):
    score, *_ = string_accuracy(required, before + required + after)
    assert score == 1.0 or not normalise(
        required
    )  # a required string of whitespace only has nothing to check


@settings(max_examples=examples(200), deadline=None)
@given(st.text(min_size=1, max_size=15), st.text(max_size=30))
def test_string_accuracy_in_unit_range(required, text):
    score, *_ = string_accuracy(required, text)
    assert np.isnan(score) or 0.0 <= score <= 1.0


# ------------------------------------------------------------------------------- NaN reasons and arguments
def test_spec_declared():
    spec = METRIC_SPECS["text_accuracy"]
    assert spec.higher_is_better and (spec.low, spec.high) == (0.0, 1.0)
    assert "ECHO" in spec.source and "CER" in spec.source


class _NoCall:
    """Only to prove that a sample needing no OCR never reaches the engine."""

    backend_id = "never"

    def read(self, image, *, name=None):
        raise AssertionError("OCR was called for a sample that needs none")


def test_nan_reasons_without_ocr():
    result = text_accuracy(
        ["a cat on a sofa", 'a sign "OPEN"', 'a sign "OPEN"', None],
        [np.zeros((4, 4, 3), np.uint8), None, np.zeros((4, 4, 3), np.uint8), None],
        applicable=[None, None, False, None],
        ocr=_NoCall(),
    )
    assert np.isnan(result.values).all()
    assert result.nan_reasons == [NO_REQUIRED_TEXT, OUTPUT_MISSING, NOT_APPLICABLE, NO_REQUIRED_TEXT]
    assert result.extras["required"] == [[], ["OPEN"], [], []]
    assert result.extras["ocr_text"] == [None] * 4


def test_no_quoted_text_needs_no_ocr_package(monkeypatch):
    """A run where no sample asks for text never loads the engine, so it works without the ocr extra."""
    monkeypatch.setitem(sys.modules, "rapidocr_onnxruntime", None)
    monkeypatch.setattr("echo_builder.ocr._DEFAULT", None)
    result = text_accuracy(["a cat"], [np.zeros((4, 4, 3), np.uint8)])
    assert result.nan_reasons == [NO_REQUIRED_TEXT] and result.extras["backend"] is None


def test_missing_extra_is_a_one_line_install_hint(monkeypatch):
    monkeypatch.setitem(sys.modules, "rapidocr_onnxruntime", None)
    monkeypatch.setattr("echo_builder.ocr._DEFAULT", None)
    with pytest.raises(MissingDependencyError, match=r"pip install 'echo-bench\[ocr\]'") as info:
        text_accuracy(['a sign "OPEN"'], [np.zeros((4, 4, 3), np.uint8)])
    assert info.value.extra == "ocr"


def test_text_field_values_replace_the_quotes():
    result = text_accuracy(
        ['"ignored"', "no quotes", "x", "y"],
        [None] * 4,
        text_field_values=["OPEN", ["A", "B"], "", None],
        ocr=_NoCall(),
    )
    assert result.extras["required"] == [["OPEN"], ["A", "B"], [], []]
    assert result.nan_reasons == [OUTPUT_MISSING, OUTPUT_MISSING, NO_TEXT_FIELD, NO_TEXT_FIELD]


def test_bad_records_are_one_nan_each():
    """A prompt or text field value of the wrong type is that sample's NaN with the reason; the others go on."""
    result = text_accuracy(
        [b'"a"', float("nan"), 'a sign "OPEN"', None],
        [None] * 4,
        ocr=_NoCall(),
    )
    assert result.nan_reasons == [
        "invalid prompt: expected a string, got bytes",
        NO_REQUIRED_TEXT,
        OUTPUT_MISSING,
        NO_REQUIRED_TEXT,
    ]
    result = text_accuracy(
        ["x"] * 5,
        [None] * 5,
        text_field_values=[3, ["a", 3], float("nan"), ["OPEN", "open ", None], np.array(["A", "B"])],
        ocr=_NoCall(),
    )
    assert result.nan_reasons == [
        "invalid text field value: expected a string or a list of strings, got int",
        "invalid text field value: expected a string or a list of strings, got a list holding int",
        NO_TEXT_FIELD,
        OUTPUT_MISSING,
        OUTPUT_MISSING,
    ]
    assert result.extras["required"][3:] == [["OPEN"], ["A", "B"]]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"prompts": ["a"], "outputs": []}, "1 prompts and 0 outputs"),
        ({"prompts": ["a"], "outputs": [None], "text_field_values": []}, "one entry per sample: got 0 for 1"),
        ({"prompts": ["a"], "outputs": [None], "on_image_error": "skip"}, "on_image_error must be"),
        ({"prompts": ["a"], "outputs": [None], "applicable": [True, True]}, "one flag per sample"),
    ],
)
def test_bad_arguments(kwargs, message):
    with pytest.raises(ConfigError, match=message):
        text_accuracy(**kwargs, ocr=_NoCall())


def test_importing_pulls_no_model_package():
    """The core stays light: importing the metric, the OCR wrapper and the NSFW checker loads no model package."""
    code = (
        "import sys, echo_builder.scoring, echo_builder.scoring.text_accuracy, echo_builder.ocr, "
        "echo_builder.safety\n"
        "heavy = ('rapidocr_onnxruntime', 'nudenet', 'cv2', 'onnxruntime')\n"
        "print(','.join(m for m in heavy if m in sys.modules))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
    )
    assert done.stdout.strip() == ""


# --------------------------------------------------------------------------------------- real OCR weights
def render(text: str, size=(640, 240), font: Path = LATIN_FONT, font_size=56) -> Image.Image:
    """``text`` (may hold newlines) in black on an off-white canvas, as a receipt or label would show it."""
    image = Image.new("RGB", size, (250, 248, 240))
    ImageDraw.Draw(image).multiline_text(
        (30, 40), text, font=ImageFont.truetype(str(font), font_size), fill=(20, 20, 20), spacing=24
    )
    return image


@pytest.fixture(scope="module")
def engine():
    pytest.importorskip("rapidocr_onnxruntime", reason="the ocr extra is not installed")
    if not LATIN_FONT.is_file():
        pytest.skip(f"no DejaVu Sans Bold at {LATIN_FONT} to render test text")
    from echo_builder.ocr import default_engine

    return default_engine()


@pytest.mark.slow
def test_real_ocr_receipt_totals(engine):
    """The right total scores >= 0.9; a wrong total and a misspelling score clearly lower although the OCR reads
    each rendering correctly (the score drop is the rendering's, not the reader's)."""
    rendered = ["TOTAL $127.54", "TOTAL $721.45", "TOATL $12.54", "Thank you!"]
    result = text_accuracy(
        ['A receipt with "TOTAL $127.54" at the bottom'] * 4, [render(t) for t in rendered]
    )
    right, wrong_total, misspelled, no_total = result.values
    for text, ocr_text in zip(rendered, result.extras["ocr_text"], strict=True):
        assert normalise(ocr_text) == normalise(text)
    assert right == 1.0
    # by hand: 127.54 -> 721.45 is 3 edits of 12 characters; TOATL (2 edits) and a lost 7 (1 edit) are 3 too
    assert wrong_total == misspelled == pytest.approx(1 - 3 / 12)
    assert no_total == pytest.approx(1 - brute_best("total$127.54", "thankyou!") / 12) and no_total <= 0.2
    # the recorded per-string details agree with the value
    match = result.extras["matches"][1][0]
    assert match["required"] == "TOTAL $127.54" and match["normalised"] == "total$127.54"
    assert match["score"] == pytest.approx(1 - match["distance"] / 12) == pytest.approx(wrong_total)
    backend = result.extras["backend"]
    assert backend.startswith("rapidocr_onnxruntime-") and "ch_PP-OCRv4_det_infer@" in backend
    assert "ch_PP-OCRv4_rec_infer@" in backend and "ch_ppocr_mobile_v2.0_cls_infer@" in backend


@pytest.mark.slow
def test_real_ocr_two_lines_and_no_text(engine):
    label = render("BEST BEFORE\n12/2026", size=(560, 300))
    blank = Image.new("RGB", (320, 200), (250, 248, 240))
    result = text_accuracy(
        ['a jar label with two lines: "BEST BEFORE" and "12/2026"', 'a sign "OPEN"'],
        [label, blank],
        ocr=engine,
    )
    assert result.values[0] == 1.0
    assert [(m["matched"], m["score"]) for m in result.extras["matches"][0]] == [
        ("bestbefore", 1.0),
        ("12/2026", 1.0),
    ]
    # no text in the image: the required text is missing, a 0, not NaN
    assert result.values[1] == 0.0 and result.extras["ocr_text"][1] == ""


@pytest.mark.slow
def test_real_ocr_bad_output_loses_nothing(engine, tmp_path):
    """One unreadable output is NaN with its reason; the samples around it are still scored."""
    truncated = tmp_path / "truncated.png"
    buffer = io.BytesIO()
    render("OPEN").save(buffer, format="PNG")
    truncated.write_bytes(buffer.getvalue()[:200])
    good = render("OPEN")
    result = text_accuracy(['a sign "OPEN"'] * 3, [good, truncated, good], ocr=engine)
    assert result.values[0] == result.values[2] == 1.0
    assert np.isnan(result.values[1]) and result.nan_reasons[1].startswith(
        "unreadable image: sample 1 output"
    )
    with pytest.raises(ImageError, match="sample 1 output"):
        text_accuracy(['a sign "OPEN"'] * 2, [good, truncated], ocr=engine, on_image_error="raise")


@pytest.mark.parametrize(
    ("size", "expected", "scale"),
    [
        ((1024, 1536), (1024, 1536), 1.0),  # a usual output reaches the engine untouched
        ((2000, 250), (2000, 250), 1.0),  # aspect 8: untouched
        ((1999, 1), (1999, 250), 1.0),  # a thin strip is padded to aspect 8, not upscaled by the engine
        ((1, 1999), (250, 1999), 1.0),
        ((4000, 1000), (2000, 500), 0.5),  # scaled down to the engine's 2,000 px
        ((200_000, 1), (2000, 250), 0.01),  # scaled (to 1 px, never 0) then padded
        ((5, 3), (5, 3), 1.0),
    ],
)
def test_fit_for_engine_bounds_what_the_engine_gets(size, expected, scale):
    """Regression: the engine upscaled thin strips until they asked for 11 GiB (1 x 1,999 px) or took 20 s."""
    from echo_builder.ocr import MAX_ASPECT, MAX_SIDE, fit_for_engine

    image = Image.new("RGB", size, (10, 20, 30))
    fitted, factor = fit_for_engine(image)
    assert fitted.size == expected and factor == pytest.approx(scale)
    assert max(fitted.size) <= MAX_SIDE and max(fitted.size) <= MAX_ASPECT * min(fitted.size)
    if expected == size:
        assert fitted is image
    else:  # the original's pixels sit at the top left, the padding (if any) is white
        assert fitted.getpixel((0, 0)) == (10, 20, 30)
        scaled = (max(1, round(size[0] * scale)), max(1, round(size[1] * scale)))
        if fitted.size != scaled:
            assert fitted.getpixel((fitted.width - 1, fitted.height - 1)) == (255, 255, 255)


@pytest.mark.slow
def test_real_ocr_large_and_thin_images(engine):
    """A 4,000 px wide image is read after scaling, its boxes in the original's pixels; a 1 x 1,999 px strip and
    a 20 x 16,000 px banner are read (no text: 0, not NaN) without the engine's huge upscaling."""
    wide = Image.new("RGB", (4000, 1000), (250, 248, 240))
    ImageDraw.Draw(wide).text(
        (2400, 400), "OPEN", font=ImageFont.truetype(str(LATIN_FONT), 160), fill=(20, 20, 20)
    )
    reading = engine.read(wide)
    assert normalise(reading.text) == "open"
    xs = [x for x, _ in reading.lines[0].box]
    ys = [y for _, y in reading.lines[0].box]
    assert 2300 <= min(xs) <= max(xs) <= 3000
    assert 350 <= min(ys) <= max(ys) <= 650
    strips = [np.full((1, 1999, 3), 255, np.uint8), np.full((20, 16000, 3), 255, np.uint8)]
    result = text_accuracy(['a sign "OPEN"'] * 2, strips, ocr=engine)
    assert result.values.tolist() == [0.0, 0.0] and result.extras["ocr_text"] == ["", ""]


@pytest.mark.slow
def test_default_engine_is_one_per_process_and_thread_safe(engine):
    from echo_builder.ocr import default_engine

    image = render("OPEN 24/7")
    expected = engine.read(image).text
    engines, texts = [], []

    def work():
        engines.append(default_engine())
        texts.append(engines[-1].read(image).text)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert all(e is engine for e in engines) and len(engines) == 4
    assert texts == [expected] * 4 and normalise(expected) == "open24/7"


def _cjk_font() -> Path | None:
    """A font with Chinese glyphs from fontconfig, or None."""
    if shutil.which("fc-list") is None:
        return None
    listing = subprocess.run(
        ["fc-list", ":lang=zh", "file"], capture_output=True, text=True, timeout=30, check=False
    ).stdout
    for line in listing.splitlines():
        path = Path(line.split(":")[0].strip())
        if path.suffix.lower() in (".ttf", ".otf", ".ttc") and path.is_file():
            return path
    return None


@pytest.mark.slow
def test_real_ocr_chinese_english_label(engine):
    font = _cjk_font()
    if font is None:
        pytest.skip(
            "no font with Chinese glyphs on this machine (fc-list :lang=zh is empty) to render the label"
        )
    label = render("\u4eca\u65e5\u7279\u4ef7 SALE\n\u5408\u8ba1 \u00a5128.00", size=(640, 300), font=font)
    result = text_accuracy(
        [
            "\u6807\u7b7e\u4e0a\u5199\u300c\u4eca\u65e5\u7279\u4ef7 SALE\u300d\u548c\u300c\u5408\u8ba1 \u00a5128.00\u300d"
        ],
        [label],
        ocr=engine,
    )
    assert result.values[0] >= 0.9


@pytest.mark.slow
@pytest.mark.shared_data
def test_real_gpt4o_poster_with_chinese_text(engine, shared_data):
    """A real GPT-4o poster (shared prompt collection, case 3) whose prompt quotes five Chinese strings in ‘..’
    with a nested “..”: three are rendered exactly, one with 、 for ，, and the nested quote marks are not drawn."""
    import yaml

    case = shared_data / POSTER_CASE
    prompt = yaml.safe_load((case / "case.yml").read_text(encoding="utf-8"))["prompt"]
    result = text_accuracy([prompt], [case / "example_vintage_poster.png"], ocr=engine)
    scores = {m["required"]: m["score"] for m in result.extras["matches"][0]}
    assert len(scores) == 5
    assert scores["\u60ca\u7206\u4ef79.9/\u5f20"] == 1.0  # drawn as two OCR lines, "惊爆价9.9" and "/张"
    assert scores["\u6bcf\u5f20\u63d0\u4ea43\u6b21\u4fee\u6539"] == 1.0
    assert scores["AI\u76f4\u51fa\u6548\u679c\uff0c\u65e0\u9700\u4fee\u6539"] == pytest.approx(
        1 - 1 / 11
    )  # 、 for ，
    assert 0.85 <= result.values[0] < 1.0


# ------------------------------------------------------------------------------------ through the metric registry
@pytest.mark.slow
def test_metrics_cli_scores_text_accuracy_with_the_ocr_details(engine, tmp_path):
    """`echo-bench metrics --metric text_accuracy`: the registry's factory reads each output with the real OCR; the
    value, the NaN reasons and the row's detail (required strings, OCR text, best match) agree with the rule."""
    import json

    import pandas as pd
    from click.testing import CliRunner

    from echo_builder.cli import cli
    from tests.helpers.benchmark import make_benchmark, make_outputs

    bench = make_benchmark(
        tmp_path / "bench",
        "text_to_image",
        [
            {"id": "receipt", "prompt": 'A receipt with "TOTAL $127.54" at the bottom'},
            {"id": "cat", "prompt": "a cat asleep on a sofa"},
            {"id": "sign", "prompt": 'a shop sign that says "OPEN"'},
        ],
    )
    outputs = make_outputs(
        tmp_path / "outputs",
        {"m": {"receipt": render("TOTAL $721.45"), "cat": render("meow"), "sign": b"not an image"}},
    )
    result = CliRunner().invoke(
        cli,
        [
            "metrics",
            "--benchmark",
            str(bench),
            "--config",
            "text_to_image",
            "--outputs",
            str(outputs),
            "--metric",
            "text_accuracy",
            "--format",
            "csv",
            "--out",
            str(tmp_path / "scores"),
        ],
    )
    assert result.exit_code == 0, result.output
    rows = pd.read_csv(tmp_path / "scores" / "metrics.csv").set_index("sample_id")
    assert rows.loc["receipt", "value"] == pytest.approx(1 - 3 / 12)
    assert rows.loc["cat", "nan_reason"] == NO_REQUIRED_TEXT
    assert rows.loc["sign", "nan_reason"].startswith("unreadable image: sample 2 output")
    detail = json.loads(rows.loc["receipt", "detail"])
    assert detail["required"] == ["TOTAL $127.54"] and normalise(detail["ocr_text"]) == "total$721.45"
    assert detail["matches"] == [
        {"required": "TOTAL $127.54", "matched": "total$721.4", "distance": 3, "cer": 0.25}
    ]
    summary = json.loads((tmp_path / "scores" / "summary.json").read_text())["summary"]
    (row,) = summary
    assert row["metric"] == "text_accuracy" and row["higher_is_better"] is True
    assert row["n"] == 1 and row["n_nan"] == 2 and row["backend"].startswith("rapidocr_onnxruntime-")


@pytest.mark.slow
def test_space_playground_shows_text_accuracy_for_a_quoting_prompt(engine):
    from tests.conftest import REPO_ROOT

    sys.path.insert(0, str(REPO_ROOT / "spaces_app"))
    try:
        from echo_space.playground import score_pair
    finally:
        sys.path.remove(str(REPO_ROOT / "spaces_app"))
    table = score_pair(
        None, render("TOTAL $127.54"), 'a receipt, "TOTAL $127.54"', face_backend=None
    ).table.set_index("metric")
    assert table.loc["text_accuracy", "value"] == 1.0 and table.loc["text_accuracy", "better"] == "higher"
    unquoted = score_pair(None, render("TOTAL"), "a receipt", face_backend=None).table.set_index("metric")
    assert pd_isna(unquoted.loc["text_accuracy", "value"])
    assert unquoted.loc["text_accuracy", "note"] == NO_REQUIRED_TEXT


def pd_isna(value) -> bool:
    return value is None or (isinstance(value, float) and value != value)


# ------------------------------------------------------------------- echo-bench metrics --text-field COLUMN
def _text_field_benchmark(tmp_path: Path) -> tuple[Path, Path]:
    """A text_to_image config with a ``sign_text`` column (a string, a list, an empty value) and one model's
    Pillow-rendered outputs."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pa.table(
        {
            "id": ["shop", "label", "none", "quoted"],
            "prompt": ["a shop sign", "a jar label", "a sign", 'a sign "CLOSED"'],
            "sign_text": [["OPEN 24/7"], ["BEST BEFORE", "12/2026"], [], ["OPEN"]],
        }
    )
    (tmp_path / "bench" / "text_to_image").mkdir(parents=True)
    pq.write_table(table, tmp_path / "bench" / "text_to_image" / "test-00000-of-00001.parquet")
    model = tmp_path / "outputs" / "m"
    model.mkdir(parents=True)
    render("OPEN 24/7").save(model / "shop.png")
    render("BEST BEFORE\n12/2027", size=(560, 300)).save(model / "label.png")
    render("OPEN").save(model / "none.png")
    render("OPEN").save(model / "quoted.png")
    return tmp_path / "bench", tmp_path / "outputs"


@pytest.mark.slow
def test_metrics_cli_text_field_column(engine, tmp_path):
    """``--text-field COLUMN`` takes the required strings from a dataset column instead of the quotes, end to end
    through the CLI with the real OCR weights."""
    import json

    import pandas as pd
    from click.testing import CliRunner

    from echo_builder.cli import cli

    bench, outputs = _text_field_benchmark(tmp_path)
    base = ["metrics", "--benchmark", str(bench), "--config", "text_to_image", "--outputs", str(outputs)]
    result = CliRunner().invoke(
        cli, [*base, "--metric", "text_accuracy", "--text-field", "sign_text", "--out", str(tmp_path / "res")]
    )
    assert result.exit_code == 0, result.output
    rows = pd.read_parquet(tmp_path / "res" / "metrics.parquet").set_index("sample_id")
    assert rows.loc["shop", "value"] == 1.0
    # "BEST BEFORE" exact, "12/2026" read as 12/2027: 1 edit of 7 characters; the mean of the two strings
    assert rows.loc["label", "value"] == pytest.approx((1.0 + (1 - 1 / 7)) / 2)
    assert math.isnan(rows.loc["none", "value"]) and rows.loc["none", "nan_reason"] == NO_TEXT_FIELD
    # the column wins over the prompt's quotes: "OPEN" is required, not "CLOSED"
    assert rows.loc["quoted", "value"] == 1.0
    assert json.loads(rows.loc["quoted", "detail"])["required"] == ["OPEN"]
    # without --text-field the prompt's quotes are the required text again
    again = CliRunner().invoke(cli, [*base, "--metric", "text_accuracy", "--out", str(tmp_path / "res2")])
    assert again.exit_code == 0, again.output
    plain = pd.read_parquet(tmp_path / "res2" / "metrics.parquet").set_index("sample_id")
    assert plain.loc["quoted", "value"] < 0.5 and plain.loc["shop", "nan_reason"] == NO_REQUIRED_TEXT


def test_metrics_cli_text_field_unknown_column_writes_nothing(tmp_path):
    from click.testing import CliRunner

    from echo_builder.cli import cli
    from tests.helpers.benchmark import make_benchmark

    bench = make_benchmark(tmp_path / "bench", "text_to_image", [{"id": "a", "prompt": 'a sign "OPEN"'}])
    (tmp_path / "outputs" / "m").mkdir(parents=True)
    Image.new("RGB", (16, 16)).save(tmp_path / "outputs" / "m" / "a.png")
    out = tmp_path / "res"
    result = CliRunner().invoke(
        cli,
        [
            "metrics",
            *("--benchmark", str(bench), "--config", "text_to_image"),
            *("--outputs", str(tmp_path / "outputs"), "--out", str(out)),
            *("--metric", "text_accuracy", "--text-field", "sign_txt"),
        ],
    )
    assert result.exit_code == 1
    assert "--text-field 'sign_txt' (text_accuracy)" in result.output
    assert "its columns: id, input_images, prompt" in result.output
    assert not out.exists()
    other = CliRunner().invoke(
        cli,
        [
            "metrics",
            *("--benchmark", str(bench), "--config", "text_to_image"),
            *("--outputs", str(tmp_path / "outputs"), "--out", str(out)),
            *("--metric", "color_shift", "--text-field", "prompt"),
        ],
    )
    assert other.exit_code == 1 and "--text-field applies to the metric text_accuracy" in other.output
    assert not out.exists()
    helped = CliRunner().invoke(cli, ["metrics", "--help"])
    assert "--text-field COLUMN" in helped.output
