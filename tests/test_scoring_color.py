"""color_shift: hand-computed values, an independent np.histogram reference on real images, NaN reasons, modes."""

from __future__ import annotations

import io

import numpy as np
import pytest
from PIL import Image
from skimage import data

from echo_builder.errors import ConfigError, ImageError
from echo_builder.scoring.base import METRIC_SPECS
from echo_builder.scoring.color import (
    KEEP_HIGH,
    KEEP_LOW,
    NO_INPUT_IMAGES,
    OUTPUT_MISSING,
    channel_histograms,
    color_shift,
    mean_rgb,
    pooled_color_shift,
)


def flat(rgb, h=8, w=12) -> np.ndarray:
    return np.broadcast_to(np.asarray(rgb, np.uint8), (h, w, 3)).copy()


def reference_means(pixels: np.ndarray, keep=(5, 250)) -> np.ndarray:
    """Plain per-channel mean over the kept levels, written independently of the module (np.histogram)."""
    pixels = np.asarray(pixels).reshape(-1, 3)
    means = []
    for c in range(3):
        counts, _ = np.histogram(pixels[:, c], bins=256, range=(0, 256))
        levels = np.arange(256)
        keep_mask = (levels >= keep[0]) & (levels <= keep[1])
        means.append((counts[keep_mask] * levels[keep_mask]).sum() / counts[keep_mask].sum())
    return np.array(means)


def test_declared_direction_and_range():
    spec = METRIC_SPECS["color_shift"]
    assert spec.higher_is_better is False
    assert spec.low == 0.0 and spec.high == pytest.approx(245 * np.sqrt(3))
    assert (KEEP_LOW, KEEP_HIGH) == (5, 250)


def test_image_against_itself_is_zero():
    photo = data.astronaut()
    result = color_shift([photo, [photo, photo]], [photo, Image.fromarray(photo)])
    assert result.values.tolist() == [0.0, 0.0]
    assert result.nan_reasons == [None, None]
    assert np.array_equal(result.extras["deltas"], np.zeros((2, 3)))


def test_flat_images_give_the_exact_euclidean_distance():
    # deltas (3, -4, 12): |d| = 13 exactly
    result = color_shift([flat((10, 200, 128))], [flat((13, 196, 140), h=5, w=7)])
    assert result.values[0] == 13.0
    assert result.extras["deltas"][0].tolist() == [3.0, -4.0, 12.0]
    assert result.extras["input_means"][0].tolist() == [10.0, 200.0, 128.0]
    assert result.extras["output_means"][0].tolist() == [13.0, 196.0, 140.0]


def test_kept_levels_are_5_to_250_inclusive():
    hist = np.zeros((3, 256), np.int64)
    hist[:, 4] = 1000  # dropped: near-black
    hist[:, 251] = 1000  # dropped: near-white
    hist[0, [5, 250]] = 1  # both ends kept
    hist[1, 5] = 3
    hist[2, 250] = 2
    assert mean_rgb(hist).tolist() == [127.5, 5.0, 250.0]
    # a stack of histograms gives a stack of means
    assert mean_rgb(np.stack([hist, hist])).shape == (2, 3)


def test_channel_histograms_are_exact_counts():
    rng = np.random.default_rng(0)
    pixels = rng.integers(0, 256, (37, 53, 3), dtype=np.uint8)
    hist = channel_histograms(pixels)
    assert hist.dtype == np.int64 and hist.shape == (3, 256)
    for c in range(3):
        assert np.array_equal(hist[c], np.bincount(pixels[..., c].ravel(), minlength=256))
        assert np.array_equal(hist[c], np.histogram(pixels[..., c], bins=256, range=(0, 256))[0])


@pytest.mark.shared_data
def test_yellow_tint_matches_an_independent_numpy_computation(shared_data):
    folder = shared_data / "image_pairs" / "yellow_tint"
    after, before = folder / "gpt4o_after.webp", folder / "gpt4o_before.webp"
    in_pixels = np.asarray(Image.open(after).convert("RGB"))
    out_pixels = np.asarray(Image.open(before).convert("RGB"))
    # the data README's facts (plain means over all pixels) hold for what we decode
    np.testing.assert_allclose(out_pixels.reshape(-1, 3).mean(0), [116.0, 85.7, 49.2], atol=0.1)
    np.testing.assert_allclose(in_pixels.reshape(-1, 3).mean(0), [111.7, 113.4, 80.5], atol=0.1)

    result = color_shift([after], [before])
    ref_in, ref_out = reference_means(in_pixels), reference_means(out_pixels)
    np.testing.assert_allclose(result.extras["input_means"][0], ref_in, atol=1e-9)
    np.testing.assert_allclose(result.extras["output_means"][0], ref_out, atol=1e-9)
    assert result.values[0] == pytest.approx(np.linalg.norm(ref_out - ref_in), abs=1e-6)
    assert result.values[0] == pytest.approx(40.966, abs=1e-3)
    d_red, d_green, d_blue = result.extras["deltas"][0]
    assert d_blue < -25 and d_green < -20 and abs(d_red) < 5  # the yellow cast: blue (and green) drop

    # the Python-slice reading hist[5:250] (250 excluded) would give 40.85: pinned so a change is deliberate
    exclusive = np.linalg.norm(reference_means(out_pixels, (5, 249)) - reference_means(in_pixels, (5, 249)))
    assert exclusive == pytest.approx(40.853, abs=1e-3)

    # swapping input and output flips the deltas, keeps the magnitude; an image against itself is 0
    swapped = color_shift([before], [after])
    np.testing.assert_allclose(swapped.extras["deltas"][0], -result.extras["deltas"][0], atol=1e-12)
    assert color_shift([before], [before]).values[0] == 0.0


def test_pooled_mode_equals_a_hand_computation_over_all_pixels():
    photo, camera = data.astronaut(), data.camera()
    coffee = data.coffee()
    inputs = [photo, [camera, flat((3, 120, 252), h=20, w=30)], coffee, flat((50, 60, 70))]
    outputs = [photo[::2, ::2] // 2 + 40, coffee, None, flat((200, 10, 100), h=3, w=3)]
    pooled = pooled_color_shift(inputs, outputs)

    def rgb(a):
        a = np.asarray(a)
        return np.dstack([a] * 3) if a.ndim == 2 else a

    # the third sample has no output: its input is left out of the input side too
    in_pixels = np.concatenate(
        [rgb(x).reshape(-1, 3) for x in (photo, camera, flat((3, 120, 252), h=20, w=30), flat((50, 60, 70)))]
    )
    out_pixels = np.concatenate([rgb(x).reshape(-1, 3) for x in outputs if x is not None])
    ref_in, ref_out = reference_means(in_pixels), reference_means(out_pixels)
    np.testing.assert_allclose(pooled.input_means, ref_in, atol=1e-9)
    np.testing.assert_allclose(pooled.output_means, ref_out, atol=1e-9)
    np.testing.assert_allclose(pooled.deltas, ref_out - ref_in, atol=1e-9)
    assert pooled.magnitude == pytest.approx(np.linalg.norm(ref_out - ref_in), abs=1e-9)
    assert (pooled.n_images, pooled.n_input_images, pooled.n_missing_outputs, pooled.n_no_input) == (
        3,
        4,
        1,
        0,
    )
    assert pooled.reason is None
    # pooling weighs pixels, not samples: it is not the mean of the per-sample values
    per_sample = color_shift(inputs, outputs)
    assert abs(per_sample.mean() - pooled.magnitude) > 1.0


def test_pooled_mode_reproduces_the_papers_arithmetic():
    # flat images at the paper's pooled means (rounded to levels) give the distance of those levels
    inputs = [flat((130, 122, 113))]
    outputs = [flat((121, 108, 91))]
    pooled = pooled_color_shift(inputs, outputs)
    assert pooled.magnitude == pytest.approx(np.sqrt(9**2 + 14**2 + 22**2))
    # the paper's rounded means themselves give its 27.75
    paper = np.linalg.norm(np.subtract([121.31, 107.79, 91.08], [130.20, 122.15, 113.10]))
    assert paper == pytest.approx(27.75, abs=0.005)


def test_pooled_mode_with_nothing_to_pool_is_nan_with_a_reason():
    pooled = pooled_color_shift([None, flat((1, 2, 3))], [flat((9, 9, 9)), None])
    assert np.isnan(pooled.magnitude)
    assert "no sample" in pooled.reason and pooled.n_missing_outputs == 1 and pooled.n_no_input == 1


@pytest.mark.parametrize(
    ("inputs", "outputs", "reason"),
    [
        ([np.zeros((6, 6, 3), np.uint8)], [flat((100, 100, 100))], "input has no pixel"),
        ([flat((100, 100, 100))], [np.full((6, 6, 3), 255, np.uint8)], "output has no pixel"),
        ([flat((100, 100, 100))], [flat((128, 2, 253))], "channel(s) G, B"),
        ([flat((100, 100, 100))], [None], OUTPUT_MISSING),
        ([None], [flat((100, 100, 100))], NO_INPUT_IMAGES),
        ([[]], [flat((100, 100, 100))], NO_INPUT_IMAGES),
        ([None], [None], NO_INPUT_IMAGES),  # not applicable comes before missing
    ],
)
def test_undefined_cases_are_nan_with_a_reason_never_zero(inputs, outputs, reason):
    result = color_shift(inputs, outputs)
    assert np.isnan(result.values[0])
    assert reason in result.nan_reasons[0]
    assert np.isnan(result.mean())


def test_nan_samples_do_not_disturb_the_others():
    good_in, good_out = flat((10, 200, 128)), flat((13, 196, 140))
    result = color_shift([good_in, good_in, np.zeros((4, 4, 3), np.uint8)], [good_out, None, good_out])
    assert result.values[0] == 13.0 and np.isnan(result.values[1:]).all()
    assert result.nan_reasons[0] is None and result.mean() == 13.0
    assert np.isnan(result.extras["deltas"][1]).all()


def test_several_inputs_pool_their_histograms():
    # 100 pixels at 100 and 300 pixels at 200: pooled mean 175 per channel, so an output at 175 is no shift
    small, large = flat((100, 100, 100), h=10, w=10), flat((200, 200, 200), h=10, w=30)
    result = color_shift([[small, large], (large, small)], [flat((175, 175, 175)), flat((100, 100, 100))])
    assert result.values[0] == 0.0
    assert result.extras["input_means"][1].tolist() == [175.0] * 3
    assert result.values[1] == pytest.approx(75 * np.sqrt(3))
    # None entries inside a list of inputs are skipped
    assert color_shift([[None, small]], [small]).values[0] == 0.0


def _encode(img: Image.Image, fmt: str) -> bytes:
    buffer = io.BytesIO()
    img.save(buffer, format=fmt)
    return buffer.getvalue()


def test_odd_modes_decode_to_8bit_rgb():
    photo = data.astronaut()
    rgb = Image.fromarray(photo)
    base = color_shift([photo], [photo]).extras["input_means"][0]
    np.testing.assert_allclose(base, reference_means(photo), atol=1e-9)

    # opaque RGBA is the same image
    rgba = rgb.convert("RGBA")
    assert color_shift([rgba], [photo]).values[0] == 0.0
    # transparency composites on white: half transparent on half photo -> compare with the hand composite
    half = np.array(rgba)
    half[:, :256, 3] = 0
    composite = photo.copy()
    composite[:, :256] = 255
    assert color_shift([Image.fromarray(half)], [composite]).values[0] == 0.0

    # palette: same as its own RGB conversion
    palette = rgb.quantize(64)
    np.testing.assert_allclose(
        color_shift([palette], [photo]).extras["input_means"][0],
        reference_means(np.asarray(palette.convert("RGB"))),
        atol=1e-9,
    )
    # grey: the three channel means are equal
    grey = data.camera()
    means = color_shift([Image.fromarray(grey)], [grey]).extras["input_means"][0]
    assert means[0] == means[1] == means[2] == pytest.approx(reference_means(np.dstack([grey] * 3))[0])
    # CMYK (as a JPEG file) and 16-bit grey (as a PNG file)
    cmyk = _encode(rgb.convert("CMYK"), "JPEG")
    np.testing.assert_allclose(
        color_shift([cmyk], [photo]).extras["input_means"][0],
        reference_means(np.asarray(Image.open(io.BytesIO(cmyk)).convert("RGB"))),
        atol=1e-9,
    )
    grey16 = Image.fromarray(grey.astype(np.uint16) * 256 + 77)  # 16-bit levels map back to the 8-bit ones
    assert grey16.mode.startswith("I;16")
    assert color_shift([_encode(grey16, "PNG")], [grey]).values[0] == 0.0


def test_bad_arguments_raise_clear_errors():
    with pytest.raises(ConfigError, match="2 inputs and 1 outputs"):
        color_shift([flat((1, 1, 1)), flat((1, 1, 1))], [flat((1, 1, 1))])
    with pytest.raises(ConfigError, match="pair up"):
        pooled_color_shift([flat((1, 1, 1))], [])
    with pytest.raises(ImageError, match="sample 0 input 0: cannot decode"):
        color_shift([b"not an image"], [flat((1, 1, 1))])
    with pytest.raises(ConfigError, match="on_image_error"):
        color_shift([flat((1, 1, 1))], [flat((1, 1, 1))], on_image_error="skip")


def test_unreadable_images_can_become_nan_with_the_error_as_reason():
    good_in, good_out = flat((10, 200, 128)), flat((13, 196, 140))
    inputs, outputs = [good_in, [good_in, b"junk"], good_in], [good_out, good_out, b"junk"]
    result = color_shift(inputs, outputs, on_image_error="nan", progress=True)
    assert result.values[0] == 13.0 and np.isnan(result.values[1:]).all()
    assert result.nan_reasons[1].startswith("unreadable image: sample 1 input 1: cannot decode")
    assert result.nan_reasons[2].startswith("unreadable image: sample 2 output: cannot decode")
    pooled = pooled_color_shift(inputs, outputs, on_image_error="nan", progress=True)
    assert pooled.magnitude == 13.0 and (pooled.n_images, pooled.n_unreadable) == (1, 2)
    with pytest.raises(ImageError):
        pooled_color_shift(inputs, outputs)


def test_a_lazily_opened_truncated_rgb_image_is_an_image_error():
    # decoded RGB PIL images skip load_rgb (histograms ignore orientation); a lazy, truncated one still fails clearly
    jpeg = _encode(Image.fromarray(data.astronaut()), "JPEG")
    lazy = Image.open(io.BytesIO(jpeg[: len(jpeg) // 2]))
    assert lazy.mode == "RGB"
    with pytest.raises(ImageError, match="cannot decode"):
        color_shift([lazy], [flat((1, 1, 1))])
    # a complete lazily opened image gives the same counts as the decoded array
    assert np.array_equal(
        channel_histograms(Image.open(io.BytesIO(jpeg))),
        channel_histograms(np.asarray(Image.open(io.BytesIO(jpeg)).convert("RGB"))),
    )
