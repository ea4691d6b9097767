"""``echo_builder.imaging``: the one guarded decoder, and every Pillow mode and numpy dtype to 8-bit RGB by rule.

Expectations are computed by hand from the rules in the module docstring (issue 13 item 3, issue 14 item 3).
"""

from __future__ import annotations

import io
import os
import struct
import zlib
from pathlib import Path

import numpy as np
import pytest
from PIL import Image, PngImagePlugin

from echo_builder.errors import ImageError
from echo_builder.imaging import Unreadable, load_rgb, open_image

HOSTILE = Path(__file__).resolve().parent / "data" / "hostile" / "images"


def _pixel(image) -> tuple[int, ...]:
    return load_rgb(image).getpixel((0, 0))


def _srgb(linear: float) -> float:
    """sRGB encoding of a linear value in [0, 1], in 8-bit levels."""
    v = 12.92 * linear if linear <= 0.0031308 else 1.055 * linear ** (1 / 2.4) - 0.055
    return 255 * v


def _lab_grey(l_level: int) -> float:
    """sRGB level of the neutral CIE L* given as Pillow's 8-bit L (L* = level / 255 * 100)."""
    l_star = l_level / 255 * 100
    y = ((l_star + 16) / 116) ** 3 if l_star > 8 else l_star / 903.3
    return _srgb(y)


def _palette(transparent: bool) -> Image.Image:
    img = Image.new("P", (1, 1), 0)
    img.putpalette([10, 200, 30] + [0] * 765)
    if transparent:
        img.info["transparency"] = 0
    return img


# (id, image, expected RGB, tolerance in levels)
MODES = [
    ("1_white", Image.new("1", (1, 1), 1), (255, 255, 255), 0),
    ("1_black", Image.new("1", (1, 1), 0), (0, 0, 0), 0),
    ("L", Image.new("L", (1, 1), 77), (77, 77, 77), 0),
    # 77 at alpha 128 over white: 77 * 128/255 + 255 * 127/255 = 165.65
    ("LA", Image.new("LA", (1, 1), (77, 128)), (165.65,) * 3, 1),
    ("P", _palette(False), (10, 200, 30), 0),
    ("P_transparency", _palette(True), (255, 255, 255), 0),
    ("PA_clear", Image.new("PA", (1, 1), (0, 0)), (255, 255, 255), 0),
    ("RGB", Image.new("RGB", (1, 1), (10, 20, 30)), (10, 20, 30), 0),
    ("RGBA_opaque", Image.new("RGBA", (1, 1), (10, 20, 30, 255)), (10, 20, 30), 0),
    ("RGBA_clear", Image.new("RGBA", (1, 1), (10, 20, 30, 0)), (255, 255, 255), 0),
    # (200, 100, 0) at alpha 51 (20 %): 0.2 * c + 0.8 * 255
    ("RGBA_20pct", Image.new("RGBA", (1, 1), (200, 100, 0, 51)), (244.0, 224.0, 204.0), 1),
    ("I_100", Image.new("I", (1, 1), 100), (100, 100, 100), 0),  # 0-255 scale: not 100 / 256
    ("I_1000", Image.new("I", (1, 1), 1000), (255, 255, 255), 0),  # clipped
    ("I_negative", Image.new("I", (1, 1), -5), (0, 0, 0), 0),
    ("I;16", Image.new("I;16", (1, 1), 40000), (156, 156, 156), 0),  # 40000 >> 8
    ("I;16_max", Image.new("I;16", (1, 1), 65535), (255, 255, 255), 0),
    ("F_unit", Image.new("F", (1, 1), 0.5), (128, 128, 128), 0),  # 0-1 scale: 127.5 rounds half to even
    ("F_levels", Image.new("F", (1, 1), 100.4), (100, 100, 100), 0),  # 0-255 scale (a value over 1)
    ("CMYK_red", Image.new("CMYK", (1, 1), (0, 255, 255, 0)), (255, 0, 0), 0),
    ("CMYK_black", Image.new("CMYK", (1, 1), (0, 0, 0, 255)), (0, 0, 0), 0),
    ("YCbCr_grey", Image.new("YCbCr", (1, 1), (128, 128, 128)), (128, 128, 128), 0),
    # JFIF: R = Y + 1.402 (Cr - 128) = 254.05; G = Y - 0.344136 (Cb - 128) - 0.714136 (Cr - 128) = 0.10;
    # B = Y + 1.772 (Cb - 128) = -0.20 -> 0
    ("YCbCr_red", Image.new("YCbCr", (1, 1), (76, 85, 255)), (254.05, 0.10, 0.0), 1),
    ("LAB_grey", Image.new("LAB", (1, 1), (128, 128, 128)), (_lab_grey(128),) * 3, 1.5),
    ("LAB_white", Image.new("LAB", (1, 1), (255, 128, 128)), (255.0,) * 3, 1.5),
    ("HSV_red", Image.new("HSV", (1, 1), (0, 255, 255)), (255, 0, 0), 0),
    ("HSV_green", Image.new("HSV", (1, 1), (85, 255, 255)), (0, 255, 0), 0),
]


@pytest.mark.parametrize(
    ("image", "expected", "tolerance"), [m[1:] for m in MODES], ids=[m[0] for m in MODES]
)
def test_every_pillow_mode_to_rgb8_by_rule(image, expected, tolerance):
    rgb = load_rgb(image)
    assert rgb.mode == "RGB" and rgb.size == image.size
    got = rgb.getpixel((0, 0))
    assert all(abs(g - e) <= tolerance for g, e in zip(got, expected, strict=True)), (got, expected)


DTYPES = [
    ("uint8", np.full((2, 2, 3), (10, 20, 30), np.uint8), (10, 20, 30)),
    ("uint8_grey", np.full((2, 2), 77, np.uint8), (77, 77, 77)),
    ("uint16", np.full((2, 2, 3), (256, 40000, 65535), np.uint16), (1, 156, 255)),
    ("int32", np.full((2, 2, 3), (100, 300, -4), np.int32), (100, 255, 0)),
    ("int64_grey", np.full((2, 2), 100, np.int64), (100, 100, 100)),
    ("float_unit", np.full((2, 2, 3), (0.0, 0.5, 1.0)), (0, 128, 255)),
    ("float_levels", np.full((2, 2, 3), (0.0, 100.4, 300.0), np.float32), (0, 100, 255)),
    ("bool", np.array([[True, False]]), (255, 255, 255)),
    ("uint8_la", np.full((2, 2, 2), (77, 0), np.uint8), (255, 255, 255)),
    ("uint8_rgba", np.full((2, 2, 4), (10, 20, 30, 255), np.uint8), (10, 20, 30)),
    ("uint16_rgba", np.full((2, 2, 4), (40000, 40000, 40000, 65535), np.uint16), (156, 156, 156)),
    ("uint8_hw1", np.full((2, 2, 1), 9, np.uint8), (9, 9, 9)),
]


@pytest.mark.parametrize(("array", "expected"), [d[1:] for d in DTYPES], ids=[d[0] for d in DTYPES])
def test_every_numpy_dtype_to_rgb8_by_rule(array, expected):
    assert _pixel(array) == expected


def test_mode_I_grey_is_not_near_black_for_color_shift():
    from echo_builder.scoring.color import color_shift

    grey_i = Image.fromarray(np.full((8, 8), 100, np.int32))
    assert grey_i.mode == "I"
    result = color_shift([[Image.new("RGB", (8, 8), (100, 100, 100))]], [grey_i])
    assert result.values[0] == 0.0 and result.nan_reasons == [None]


def _chunk(kind: bytes, data: bytes) -> bytes:
    return (
        struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)
    )


def _png_with(kind: bytes, body: bytes) -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", (4, 4), (1, 2, 3)).save(buf, format="PNG")
    png = buf.getvalue()
    return png[:33] + _chunk(kind, body) + png[33:]  # right after IHDR


BOMB = zlib.compress(b"A" * (PngImagePlugin.MAX_TEXT_CHUNK * 2), 9)
BAD_INPUTS = [
    ("zTXt_bomb", _png_with(b"zTXt", b"k\0\0" + BOMB), "Decompressed data too large"),
    ("iCCP_bomb", _png_with(b"iCCP", b"p\0\0" + BOMB), "Decompressed data too large"),
    ("iTXt_bomb", _png_with(b"iTXt", b"k\0\1\0\0\0" + BOMB), "Decompressed data too large"),
    ("empty", b"", "empty, 0 bytes"),
    ("text", b"hello, not an image", "not an image format Pillow can identify"),
    ("truncated_jpeg", (HOSTILE / "jpeg_named.png").read_bytes()[:200], "cannot decode image"),
    ("bmp_bad_header", (HOSTILE / "images_bmp_bad_header.bmp").read_bytes(), "cannot decode image"),
    ("header_bomb", (HOSTILE / "header_bomb.png").read_bytes(), "decompression-bomb guard"),
    ("nan_array", np.full((2, 2), np.nan), "NaN or infinite"),
    ("bad_shape", np.zeros((3, 4, 5), np.uint8), "got shape (3, 4, 5)"),
    ("empty_array", np.zeros((0, 4, 3), np.uint8), "no pixels"),
    ("object_array", np.array([["a"]], dtype=object), "not images"),
    ("unsupported_type", 3.5, "unsupported image input of type float"),
    ("unreadable_marker", Unreadable("known bad"), "known bad"),
]


@pytest.mark.parametrize(("data", "fragment"), [b[1:] for b in BAD_INPUTS], ids=[b[0] for b in BAD_INPUTS])
def test_every_decode_failure_is_one_image_error_naming_the_image(data, fragment):
    with pytest.raises(ImageError) as caught:
        load_rgb(data, name="sample 7 output")
    message = str(caught.value)
    assert message.startswith("sample 7 output: ") and fragment in message, message
    assert "0x" not in message  # no object address (reproducible records)


def test_paths_that_are_not_regular_files_are_refused_without_blocking(tmp_path):
    fifo = tmp_path / "pipe.png"
    os.mkfifo(fifo)  # opening it for reading would block until a writer comes
    for path, fragment in [
        (fifo, "not a regular file"),
        (tmp_path, "not a regular file"),
        (tmp_path / "missing.png", "cannot read image file"),
    ]:
        with pytest.raises(ImageError, match=fragment):
            open_image(path)


def test_a_lazily_opened_image_that_fails_late_is_an_image_error():
    from echo_builder.scoring.color import channel_histograms

    buf = io.BytesIO()
    Image.new("RGB", (64, 64), (1, 2, 3)).save(buf, format="PNG")
    lazy = Image.open(io.BytesIO(buf.getvalue()[:-40]))  # header fine, pixel data cut
    with pytest.raises(ImageError, match="cannot decode image"):
        channel_histograms(lazy, name="output")


def test_exif_orientation_is_applied_and_format_kept():
    img = Image.new("RGB", (4, 2), (9, 9, 9))
    exif = img.getexif()
    exif[0x0112] = 6  # rotate 90 degrees clockwise to display
    buf = io.BytesIO()
    img.save(buf, format="JPEG", exif=exif.tobytes())
    opened = open_image(buf.getvalue())
    assert opened.size == (2, 4) and opened.format == "JPEG"
    assert load_rgb(buf.getvalue()).size == (2, 4)


# ------------------------------------------------------------------ every entry point's decoder is the guarded one
ZTXT_BOMB = BAD_INPUTS[0][1]


def _space_playground(data: bytes, as_output: bool) -> None:
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "spaces_app"))
    try:
        from echo_space.playground import score_pair
    finally:
        sys.path.pop(0)
    good = Image.new("RGB", (8, 8), (9, 9, 9))
    score_pair(good, data, face_backend=None) if as_output else score_pair(data, good, face_backend=None)


ENTRY_POINTS = [
    "image_part",
    "ImagePart.to_pil",
    "prepare_for_judge",
    "generate.png_bytes",
    "color_shift",
    "space_output",
    "space_input",
]


def _call(entry: str) -> None:
    from echo_builder.backends.base import ImagePart, image_part
    from echo_builder.generate.base import png_bytes
    from echo_builder.judge.images import prepare_for_judge
    from echo_builder.scoring.color import color_shift

    calls = {
        "image_part": lambda: image_part(ZTXT_BOMB),
        "ImagePart.to_pil": ImagePart(data=ZTXT_BOMB, mime_type="image/png", sha256="0" * 64).to_pil,
        "prepare_for_judge": lambda: prepare_for_judge(ZTXT_BOMB, name="output"),
        "generate.png_bytes": lambda: png_bytes(ZTXT_BOMB),
        "color_shift": lambda: color_shift([[ZTXT_BOMB]], [Image.new("RGB", (4, 4))]),
        "space_output": lambda: _space_playground(ZTXT_BOMB, True),
        "space_input": lambda: _space_playground(ZTXT_BOMB, False),
    }
    calls[entry]()


@pytest.mark.parametrize("entry", ENTRY_POINTS)
def test_entry_points_decode_through_the_guard(entry):
    """A PNG whose zTXt chunk inflates past Pillow's limit is an ImageError at every entry point, never the raw
    ValueError (the callers record ImageError per sample; see tests/data/hostile/cases.d/images.yaml)."""
    with pytest.raises(ImageError, match="Decompressed data too large"):
        _call(entry)


def test_generate_resume_check_and_space_benchmark_view_do_not_crash(tmp_path):
    import sys

    from echo_builder.generate.run import _output_ok

    path = tmp_path / "s1.png"
    path.write_bytes(ZTXT_BOMB)
    assert _output_ok(path, {"bytes": len(ZTXT_BOMB)}) is False  # redone on resume, not a crash
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "spaces_app"))
    try:
        from echo_space.benchmark import _open_image
    finally:
        sys.path.pop(0)
    assert _open_image({"bytes": ZTXT_BOMB, "path": None}) is None  # not shown, logged
    assert _open_image({"bytes": b"", "path": None}) is None
