"""structure_distance with seeded random DINO ViT-S/16 weights, against a plain numpy ViT forward.

No network: the weights are timm's own initialisation under a fixed seed ("random:0"), built through the same
code path as the real ones; a saved copy loads through the ``weights=path`` route users take.
"""

from __future__ import annotations

import io
import os
import re
import subprocess
import sys

import numpy as np
import pytest
from PIL import Image
from scipy.special import erf
from skimage import data, transform

from echo_builder.errors import ConfigError, ImageError, MissingDependencyError
from echo_builder.scoring.base import METRIC_SPECS

torch = pytest.importorskip("torch")
pytest.importorskip("timm")

from echo_builder.scoring.color import NO_INPUT_IMAGES, OUTPUT_MISSING  # noqa: E402
from echo_builder.scoring.structure import DinoStructure, structure_distance  # noqa: E402

MEAN = np.array([0.485, 0.456, 0.406])
STD = np.array([0.229, 0.224, 0.225])


@pytest.fixture(scope="module")
def scorer() -> DinoStructure:
    return DinoStructure("random:0", device="cpu", batch_size=16)


@pytest.fixture(scope="module")
def photo() -> np.ndarray:
    return data.astronaut()


def translate(image: np.ndarray, dx: int) -> np.ndarray:
    """Shift right by ``dx`` pixels, filling the uncovered strip with mid grey."""
    out = np.full_like(image, 128)
    out[:, dx:] = image[:, : image.shape[1] - dx]
    return out


def rotate(image: np.ndarray, degrees: float) -> np.ndarray:
    return (transform.rotate(image, degrees, mode="edge") * 255).round().astype(np.uint8)


# --- an independent reference: the ViT-S/16 forward written out in float64 numpy from the state dict ---------


def _layer_norm(x, weight, bias, eps=1e-6):
    mu = x.mean(-1, keepdims=True)
    var = ((x - mu) ** 2).mean(-1, keepdims=True)
    return (x - mu) / np.sqrt(var + eps) * weight + bias


def _gelu(x):
    return 0.5 * x * (1.0 + erf(x / np.sqrt(2.0)))


def numpy_keys(state: dict, image: np.ndarray) -> np.ndarray:
    """Last-block keys (197, 384) of an RGB uint8 image: resize, normalise, patchify, 11 blocks, norm1, W_k."""
    pixels = np.asarray(Image.fromarray(image).resize((224, 224), Image.Resampling.BICUBIC), np.float64)
    x = (pixels / 255.0 - MEAN) / STD  # (224, 224, 3)
    # a 16x16 stride-16 convolution is a matmul on (channel, row, column)-ordered patches
    patches = x.reshape(14, 16, 14, 16, 3).transpose(0, 2, 4, 1, 3).reshape(196, 3 * 16 * 16)
    tokens = patches @ state["patch_embed.proj.weight"].reshape(384, -1).T + state["patch_embed.proj.bias"]
    x = np.concatenate([state["cls_token"][0], tokens]) + state["pos_embed"][0]
    heads, dim = 6, 384
    for b in range(11):
        p = f"blocks.{b}."
        h = _layer_norm(x, state[p + "norm1.weight"], state[p + "norm1.bias"])
        qkv = h @ state[p + "attn.qkv.weight"].T + state[p + "attn.qkv.bias"]
        q, k, v = (
            qkv[:, i * dim : (i + 1) * dim].reshape(197, heads, 64).transpose(1, 0, 2) for i in range(3)
        )
        logits = q @ k.transpose(0, 2, 1) / np.sqrt(64)
        attn = np.exp(logits - logits.max(-1, keepdims=True))
        attn /= attn.sum(-1, keepdims=True)
        o = (attn @ v).transpose(1, 0, 2).reshape(197, dim)
        x = x + o @ state[p + "attn.proj.weight"].T + state[p + "attn.proj.bias"]
        h = _layer_norm(x, state[p + "norm2.weight"], state[p + "norm2.bias"])
        h = _gelu(h @ state[p + "mlp.fc1.weight"].T + state[p + "mlp.fc1.bias"])
        x = x + h @ state[p + "mlp.fc2.weight"].T + state[p + "mlp.fc2.bias"]
    h = _layer_norm(x, state["blocks.11.norm1.weight"], state["blocks.11.norm1.bias"])
    return (
        h @ state["blocks.11.attn.qkv.weight"][dim : 2 * dim].T
        + state["blocks.11.attn.qkv.bias"][dim : 2 * dim]
    )


def numpy_distance(keys_in: np.ndarray, keys_out: np.ndarray) -> float:
    """Splice's structure loss from two (197, 384) key matrices: mean squared difference of cosine matrices."""

    def sim(keys):
        unit = keys / np.linalg.norm(keys, axis=1, keepdims=True)
        return unit @ unit.T

    return float(np.mean((sim(keys_out) - sim(keys_in)) ** 2))


@pytest.fixture(scope="module")
def numpy_state(scorer) -> dict:
    state = {k: v.detach().double().numpy() for k, v in scorer._model.state_dict().items()}
    # the reference above assumes plain pre-norm blocks: no layer scale, no pre-norm, no extra tokens
    assert not any(".ls1." in k or k.startswith("norm_pre.") or k == "reg_token" for k in state)
    assert state["pos_embed"].shape == (1, 197, 384)
    return state


# --- tests --------------------------------------------------------------------------------------------------


def test_declared_direction_and_range():
    spec = METRIC_SPECS["structure_distance"]
    assert spec.higher_is_better is False and (spec.low, spec.high) == (0.0, 4.0)


def test_importing_the_module_pulls_no_torch_or_timm():
    code = (
        "import sys, echo_builder.scoring.structure, echo_builder.scoring.color\n"
        "print(','.join(m for m in ('torch', 'timm', 'accelerate') if m in sys.modules))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == ""


def test_image_against_itself_is_zero(scorer, photo):
    result = scorer.distance([photo, Image.fromarray(photo)], [photo.copy(), photo])
    np.testing.assert_allclose(result.values, 0.0, atol=1e-7)
    assert result.nan_reasons == [None, None]


@pytest.mark.slow
def test_keys_and_distances_match_a_plain_numpy_forward(scorer, numpy_state, photo):
    coffee = data.coffee()  # 400 x 600: resized without keeping the aspect ratio, like the module
    images = [photo, rotate(photo, 10), coffee]
    reference = [numpy_keys(numpy_state, image) for image in images]  # float64, about 0.3 s each on 2 cores
    keys = scorer.keys(images)
    assert keys.shape == (3, 197, 384) and keys.dtype == np.float32
    np.testing.assert_allclose(keys, np.stack(reference), rtol=1e-4, atol=1e-4)

    pairs = [(0, 1), (2, 0), (1, 2)]  # (input, output) indices
    result = scorer.distance([images[i] for i, _ in pairs], [images[o] for _, o in pairs])
    expected = [numpy_distance(reference[i], reference[o]) for i, o in pairs]
    np.testing.assert_allclose(result.values, expected, rtol=0, atol=1e-5)
    assert all(v > 1e-3 for v in expected)  # the comparison is not between zeros


def test_self_similarity_is_a_cosine_matrix(scorer, photo):
    sim = scorer.self_similarity([photo])[0]
    assert sim.shape == (197, 197)
    np.testing.assert_allclose(np.diag(sim), 1.0, atol=1e-5)
    np.testing.assert_allclose(sim, sim.T, atol=1e-6)
    assert sim.min() >= -1.0 - 1e-6 and sim.max() <= 1.0 + 1e-6


def test_distance_grows_with_the_shift_and_the_rotation(scorer, photo):
    shifts = [0, 8, 24, 64]
    by_shift = scorer.distance([photo] * 4, [translate(photo, s) for s in shifts]).values
    assert by_shift[0] == pytest.approx(0.0, abs=1e-7)
    assert np.all(np.diff(by_shift) > 0), by_shift

    camera = data.camera()  # grey: a different photo and mode
    angles = [0, 5, 15, 45]
    by_angle = scorer.distance([camera] * 4, [rotate(camera, a) for a in angles]).values
    assert np.all(np.diff(by_angle) > 0), by_angle


@pytest.mark.slow
def test_a_batch_of_16_equals_16_single_calls(scorer, photo):
    rng = np.random.default_rng(0)
    outputs = [translate(photo, int(s)) for s in rng.integers(0, 80, 16)]
    batched = scorer.distance([photo] * 16, outputs, batch_size=16)
    singles = [scorer.distance([photo], [out], batch_size=1).values[0] for out in outputs]
    np.testing.assert_allclose(batched.values, singles, rtol=0, atol=1e-5)
    # an odd batch size that splits samples across forward passes, with decoding in worker threads, agrees
    threaded = DinoStructure("random:0", device="cpu", batch_size=5, num_workers=2)
    np.testing.assert_allclose(threaded.distance([photo] * 16, outputs).values, singles, rtol=0, atol=1e-5)


def _encode(img: Image.Image, fmt: str) -> bytes:
    buffer = io.BytesIO()
    img.save(buffer, format=fmt)
    return buffer.getvalue()


def test_inputs_of_any_size_and_mode(scorer, photo, tmp_path):
    grey = data.camera()
    rgb = Image.fromarray(photo)
    path = tmp_path / "photo.png"
    rgb.save(path)
    inputs = [
        grey,  # 2-D array
        Image.fromarray(grey).convert("RGB"),
        rgb.convert("RGBA"),  # opaque: same pixels
        str(path),
        {"bytes": _encode(rgb, "PNG"), "path": None},
        Image.fromarray(grey.astype(np.uint16) * 256),  # 16-bit grey
        _encode(rgb.convert("CMYK"), "JPEG"),
        rgb.quantize(256),
    ]
    outputs = [
        Image.fromarray(grey).convert("RGB"),
        grey,
        photo,
        photo,
        path,
        grey,
        _encode(rgb.convert("CMYK"), "JPEG"),
        rgb.resize((300, 200)),  # another size and aspect ratio
    ]
    result = scorer.distance(inputs, outputs)
    np.testing.assert_allclose(result.values[:7], 0.0, atol=1e-7)
    assert 0 < result.values[7] < 0.05  # palette and squashing change little
    assert result.nan_reasons == [None] * 8


def test_reductions_over_several_inputs(scorer, photo):
    near, far = translate(photo, 8), translate(photo, 64)
    single = scorer.distance([near, far], [photo, photo]).values
    assert single[0] < single[1]
    several = [[near, far], (far, near)]
    by = {r: scorer.distance(several, [photo, photo], reduction=r) for r in ("max", "min", "first")}
    np.testing.assert_allclose(by["max"].values, [single[1], single[1]], atol=1e-6)
    np.testing.assert_allclose(by["min"].values, [single[0], single[0]], atol=1e-6)
    np.testing.assert_allclose(by["first"].values, [single[0], single[1]], atol=1e-6)
    np.testing.assert_allclose(by["max"].extras["per_input"][1], [single[1], single[0]], atol=1e-6)
    assert len(by["first"].extras["per_input"][0]) == 1  # only the first input is scored
    assert scorer.distance(several, [photo, photo]).extras["reduction"] == "max"  # the default
    with pytest.raises(ConfigError, match="reduction must be one of"):
        scorer.distance([photo], [photo], reduction="mean")


def test_missing_output_and_no_input_are_nan_with_a_reason(scorer, photo):
    result = scorer.distance([photo, photo, None, [], [None]], [None, photo, photo, photo, photo])
    assert np.isnan(result.values[[0, 2, 3, 4]]).all()
    assert result.values[1] == pytest.approx(0.0, abs=1e-7)
    assert result.nan_reasons == [OUTPUT_MISSING, None, NO_INPUT_IMAGES, NO_INPUT_IMAGES, NO_INPUT_IMAGES]
    assert result.extras["per_input"][0] == []


def test_unreadable_images_raise_or_become_nan_with_the_error_as_reason(scorer, photo):
    near = translate(photo, 8)
    inputs, outputs = [photo, [photo, b"junk"], photo, photo], [near, near, b"junk", near]
    with pytest.raises(ImageError, match="sample 1 input 1: cannot decode"):
        scorer.distance(inputs, outputs)
    result = scorer.distance(inputs, outputs, on_image_error="nan", batch_size=3, progress=True)
    assert result.nan_reasons[1].startswith("unreadable image: sample 1 input 1: cannot decode")
    assert result.nan_reasons[2].startswith("unreadable image: sample 2 output: cannot decode")
    assert result.nan_reasons[0] is None and result.nan_reasons[3] is None
    assert result.values[0] == pytest.approx(result.values[3], abs=1e-7) and result.values[0] > 0
    with pytest.raises(ConfigError, match="on_image_error"):
        scorer.distance(inputs, outputs, on_image_error="skip")


def test_missing_weights_offline_give_a_clear_error():
    with pytest.raises(ConfigError, match=re.escape("--dino-weights /path/to/model.safetensors")) as info:
        DinoStructure(None, device="cpu")
    assert "Hugging Face Hub" in str(info.value)
    with pytest.raises(ConfigError, match="no such file"):
        DinoStructure("/nonexistent/model.safetensors")
    with pytest.raises(ConfigError, match="random:<integer seed>"):
        DinoStructure("random:abc")
    with pytest.raises(ConfigError, match="batch_size"):
        DinoStructure("random:0", batch_size=0)
    with pytest.raises(ConfigError, match="num_workers"):
        DinoStructure("random:0", num_workers=-1)


def test_a_corrupt_or_foreign_weights_file_is_a_config_error(tmp_path):
    from safetensors.torch import save_file

    bad = tmp_path / "corrupt.safetensors"
    bad.write_bytes(b"not a safetensors file")
    with pytest.raises(ConfigError, match="do not load"):
        DinoStructure(str(bad), device="cpu")
    foreign = tmp_path / "foreign.safetensors"
    save_file({"x": torch.zeros(3)}, str(foreign))
    with pytest.raises(ConfigError, match="do not load"):
        DinoStructure(str(foreign), device="cpu")


@pytest.mark.parametrize("suffix", ["safetensors", "pth"])
def test_weights_from_a_local_file_give_the_same_values(scorer, photo, tmp_path, suffix):
    state = scorer._model.state_dict()
    path = tmp_path / f"dino_vits16.{suffix}"
    if suffix == "safetensors":
        from safetensors.torch import save_file

        save_file({k: v.contiguous() for k, v in state.items()}, str(path))
    else:
        torch.save(state, path)
    pairs = ([photo, photo], [translate(photo, 16), rotate(photo, 20)])
    expected = scorer.distance(*pairs).values
    loaded = structure_distance(*pairs, weights=str(path), device="cpu")
    np.testing.assert_allclose(loaded.values, expected, rtol=0, atol=1e-7)
    assert loaded.extras["weights"] == str(path.resolve())


def test_random_weights_are_seeded_and_leave_the_global_rng_alone(scorer, photo):
    before = torch.random.get_rng_state()
    other = DinoStructure("random:0", device="cpu")
    assert torch.equal(before, torch.random.get_rng_state())
    for name, tensor in scorer._model.state_dict().items():
        assert torch.equal(tensor, other._model.state_dict()[name]), name
    different = DinoStructure("random:1", device="cpu")
    assert not torch.equal(different._model.pos_embed, scorer._model.pos_embed)


def test_the_convenience_function_caches_one_model_per_weights_and_device(photo):
    from echo_builder.scoring import structure

    structure._cached.cache_clear()
    first = structure_distance([photo], [translate(photo, 8)], weights="random:0")
    second = structure_distance([photo], [translate(photo, 8)], weights="random:0", batch_size=1)
    assert structure._cached.cache_info().misses == 1 and structure._cached.cache_info().hits == 1
    assert first.values[0] == pytest.approx(second.values[0], abs=1e-7)
    assert first.extras["device"] == str(structure._default_device())  # accelerate's device
    with pytest.raises(ConfigError, match="batch_size"):
        structure_distance([photo], [photo], weights="random:0", batch_size=0)


def test_length_mismatch_is_an_error(scorer, photo):
    with pytest.raises(ConfigError, match="2 inputs and 1 outputs"):
        scorer.distance([photo, photo], [photo])


def test_missing_timm_gives_the_install_hint(monkeypatch):
    monkeypatch.setitem(sys.modules, "timm", None)  # makes `import timm` raise ImportError
    with pytest.raises(MissingDependencyError, match=r"pip install 'echo-bench\[dino\]'"):
        DinoStructure("random:0")


@pytest.mark.shared_data
def test_real_images_of_different_sizes_and_formats(scorer, shared_data):
    edits = shared_data / "image_pairs" / "genai_arena_edits"
    tint = shared_data / "image_pairs" / "yellow_tint"
    inputs = [edits / "strawberries.jpg", edits / "duck.jpg", tint / "gpt4o_after.webp"]
    outputs = [edits / "oranges.jpg", edits / "duck_hat.jpg", tint / "gpt4o_after.webp"]
    result = scorer.distance(inputs, outputs)
    assert result.nan_reasons == [None] * 3
    assert np.all(result.values[:2] > 1e-3) and result.values[2] == pytest.approx(0.0, abs=1e-7)


@pytest.mark.shared_data
@pytest.mark.skipif(
    not os.environ.get("ECHO_DINO_WEIGHTS"),
    reason="set ECHO_DINO_WEIGHTS to a local vit_small_patch16_224.dino weights file to run",
)
def test_real_dino_weights_see_a_color_cast_as_unchanged_structure(shared_data):
    # only the trained model ignores color: random weights mix channels and react to a cast
    tint = shared_data / "image_pairs" / "yellow_tint"
    after = tint / "gpt4o_after.webp"
    shifted = translate(np.asarray(Image.open(after).convert("RGB")), 96)
    result = structure_distance(
        [after, after], [tint / "gpt4o_before.webp", shifted], weights=os.environ["ECHO_DINO_WEIGHTS"]
    )
    assert result.values[0] < result.values[1] / 3, result.values


# --- the torchvision decode path (nvJPEG on CUDA; exercised here on the CPU with the same code) ---------------


@pytest.fixture(scope="module")
def tv_scorer() -> DinoStructure:
    return DinoStructure("random:0", device="cpu", batch_size=16, decode="torchvision", num_workers=2)


def _jpeg(array: np.ndarray, **save: object) -> bytes:
    return _encode_with(Image.fromarray(array), "JPEG", quality=92, **save)


def _encode_with(img: Image.Image, fmt: str, **save: object) -> bytes:
    buffer = io.BytesIO()
    img.save(buffer, format=fmt, **save)
    return buffer.getvalue()


def test_torchvision_decoding_agrees_with_pillow(scorer, tv_scorer, photo, tmp_path):
    pytest.importorskip("torchvision.io")
    rng = np.random.default_rng(1)
    inputs, outputs = [], []
    for k, shift in enumerate(rng.integers(0, 60, 6)):
        base = photo if k % 2 else np.asarray(Image.fromarray(photo).resize((1024, 768)))
        path = tmp_path / f"in{k}.jpg"
        path.write_bytes(_jpeg(base))
        inputs.append(str(path) if k % 3 else {"bytes": path.read_bytes(), "path": None})
        outputs.append(_jpeg(translate(base, int(shift))))
    inputs.append(_jpeg(data.camera()))  # a grey JPEG
    outputs.append(_jpeg(translate(np.stack([data.camera()] * 3, -1), 12)))
    pillow = scorer.distance(inputs, outputs)
    tv = tv_scorer.distance(inputs, outputs)
    assert tv.nan_reasons == [None] * 7 and pillow.nan_reasons == [None] * 7
    # torch's antialiased bicubic follows Pillow's filter to a few 8-bit levels, not bit for bit
    np.testing.assert_allclose(tv.values, pillow.values, rtol=0.05, atol=2e-4)
    assert np.all(tv.values[pillow.values > 1e-3] > 1e-3)
    assert tv.extras["backend"].endswith("+decode=torchvision")
    assert "decode" not in pillow.extras["backend"]
    # the decoded pixels themselves: within a few levels of Pillow's resize of the same JPEG
    encoded = outputs[0]
    ours = tv_scorer._decode_jpegs([encoded])[0].numpy().astype(int)
    reference = np.asarray(
        Image.open(io.BytesIO(encoded)).convert("RGB").resize((224, 224), Image.Resampling.BICUBIC)
    ).astype(int)
    assert ours.shape == (224, 224, 3)
    assert np.abs(ours - reference).mean() < 1.5 and np.abs(ours - reference).max() <= 40


def test_torchvision_path_hands_everything_else_to_pillow(scorer, tv_scorer, photo):
    rgb = Image.fromarray(photo)
    cmyk = _encode_with(rgb.convert("CMYK"), "JPEG")
    exif = Image.Exif()
    exif[0x0112] = 6  # rotated: Pillow applies it, so the torchvision path must not take this one
    rotated = _encode_with(rgb, "JPEG", exif=exif.tobytes())
    png = _encode_with(rgb, "PNG")
    truncated = _jpeg(photo)[:2000]
    inputs = [cmyk, rotated, png, photo, photo]
    outputs = [cmyk, rotated, png, truncated, b"\xff\xd8\xffjunk"]
    tv = tv_scorer.distance(inputs, outputs, on_image_error="nan")
    pillow = scorer.distance(inputs, outputs, on_image_error="nan")
    np.testing.assert_allclose(tv.values[:3], 0.0, atol=1e-7)
    assert tv.nan_reasons[:3] == [None] * 3
    # broken JPEGs get Pillow's reasons, the same as without torchvision
    assert tv.nan_reasons[3:] == pillow.nan_reasons[3:]
    assert all(reason.startswith("unreadable image: sample") for reason in tv.nan_reasons[3:])


def test_decode_option_is_checked_and_auto_follows_the_device():
    assert DinoStructure("random:0", device="cpu").decode == "pillow"
    with pytest.raises(ConfigError, match="decode must be one of"):
        DinoStructure("random:0", device="cpu", decode="nvjpeg")
