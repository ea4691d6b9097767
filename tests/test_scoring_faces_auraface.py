"""face_identity's AuraFace backend with tiny ONNX stand-ins built here (the real weights cannot be downloaded):
SCRFD decoding, NMS, the similarity alignment, loading from a folder, and the channel order the networks receive."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from echo_builder.errors import ConfigError
from echo_builder.scoring.faces import (
    face_identity,
)
from echo_builder.scoring.faces_auraface import (
    ARCFACE_TEMPLATE,
    align_face,
    decode_scrfd,
    estimate_similarity,
    nms,
)

skimage_data = pytest.importorskip("skimage.data")

# ----------------------------------------------------------------------------------------------- tiny ONNX models

DET_HW = (128, 128)
STRIDES = (8, 16, 32)
# (stride, row, col, anchor, base score, score follows the input, (left, top, right, bottom) in stride units)
FAKE_FACES = [
    (8, 4, 3, 0, 0.6, True, (2.0, 2.0, 2.0, 3.0)),  # A: centre (24, 32) -> box (8, 16, 40, 56)
    (8, 4, 3, 1, 0.55, True, (2.0, 2.0, 2.125, 3.0)),  # A again, box (8, 16, 41, 56): NMS drops it
    (16, 2, 5, 1, 0.6, True, (1.5, 1.5, 1.5, 2.0)),  # B: centre (80, 32) -> box (56, 8, 104, 64)
    (32, 3, 3, 0, 0.3, False, (1.0, 1.0, 1.0, 1.0)),  # below the 0.5 threshold: dropped
]
BOX_A, BOX_B = (8.0, 16.0, 40.0, 56.0), (56.0, 8.0, 104.0, 64.0)


def _template_in(box) -> np.ndarray:
    x1, y1, x2, y2 = box
    return np.stack(
        [x1 + ARCFACE_TEMPLATE[:, 0] / 112 * (x2 - x1), y1 + ARCFACE_TEMPLATE[:, 1] / 112 * (y2 - y1)], 1
    )


def _scrfd_arrays() -> tuple[list[np.ndarray], list[np.ndarray], list[np.ndarray], list[np.ndarray]]:
    """Per stride: base scores (n, 1), input-dependence mask (n, 1), distances (n, 4), keypoint offsets (n, 10)."""
    base, mask, dist, kps = [], [], [], []
    for stride in STRIDES:
        n = (DET_HW[0] // stride) * (DET_HW[1] // stride) * 2
        base.append(np.zeros((n, 1), np.float32))
        mask.append(np.zeros((n, 1), np.float32))
        dist.append(np.zeros((n, 4), np.float32))
        kps.append(np.zeros((n, 10), np.float32))
    for stride, row, col, anchor, score, follows, ltrb in FAKE_FACES:
        s = STRIDES.index(stride)
        idx = (row * (DET_HW[1] // stride) + col) * 2 + anchor
        centre = np.array([col * stride, row * stride], np.float64)
        box = (centre[0] - ltrb[0] * stride, centre[1] - ltrb[1] * stride)
        box += (centre[0] + ltrb[2] * stride, centre[1] + ltrb[3] * stride)
        base[s][idx] = score
        mask[s][idx] = 1.0 if follows else 0.0
        dist[s][idx] = ltrb
        kps[s][idx] = ((_template_in(box) - centre) / stride).reshape(-1)
    return base, mask, dist, kps


def _save(graph, path: Path) -> Path:
    onnx = pytest.importorskip("onnx")  # dev dependency: builds the tiny models
    from onnx import helper

    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.save(model, str(path))
    return path


def build_fake_scrfd(path: Path, *, with_keypoints: bool = True) -> Path:
    """SCRFD's 9 outputs for a fixed 1 x 3 x 128 x 128 input; score = base + mask * mean(channel 0) / 2."""
    pytest.importorskip("onnx")
    from onnx import TensorProto, helper, numpy_helper

    base, mask, dist, kps = _scrfd_arrays()
    inits = [numpy_helper.from_array(np.array([0], np.int64), "zero_index")]
    nodes = [
        helper.make_node("Gather", ["input.1", "zero_index"], ["channel0"], axis=1),
        helper.make_node("ReduceMean", ["channel0"], ["mean0"], keepdims=0),
        helper.make_node("Mul", ["mean0", "half"], ["g"]),
    ]
    inits.append(numpy_helper.from_array(np.array(0.5, np.float32), "half"))
    outputs = []
    groups = [("score", base), ("bbox", dist)] + ([("kps", kps)] if with_keypoints else [])
    for kind, arrays in groups:
        for stride, array in zip(STRIDES, arrays, strict=True):
            name = f"{kind}_{stride}"
            inits.append(numpy_helper.from_array(array, f"{name}_const"))
            if kind == "score":
                inits.append(numpy_helper.from_array(mask[STRIDES.index(stride)], f"{name}_mask"))
                nodes += [
                    helper.make_node("Mul", [f"{name}_mask", "g"], [f"{name}_delta"]),
                    helper.make_node("Add", [f"{name}_const", f"{name}_delta"], [name]),
                ]
            else:
                nodes.append(helper.make_node("Identity", [f"{name}_const"], [name]))
            outputs.append(helper.make_tensor_value_info(name, TensorProto.FLOAT, list(array.shape)))
    graph = helper.make_graph(
        nodes,
        "fake_scrfd",
        [helper.make_tensor_value_info("input.1", TensorProto.FLOAT, [1, 3, *DET_HW])],
        outputs,
        initializer=inits,
    )
    return _save(graph, path)


def build_fake_recognizer(path: Path, *, probe: bool = False) -> Path:
    """N x 3 x 112 x 112 -> 16 x 16 average pooling, flattened (147-d); ``probe``: per-channel means (3-d)."""
    pytest.importorskip("onnx")
    from onnx import TensorProto, helper

    if probe:
        nodes = [helper.make_node("GlobalAveragePool", ["input.1"], ["pooled"])]
        dim = 3
    else:
        nodes = [
            helper.make_node("AveragePool", ["input.1"], ["pooled"], kernel_shape=[16, 16], strides=[16, 16])
        ]
        dim = 3 * 7 * 7
    nodes.append(helper.make_node("Flatten", ["pooled"], ["683"], axis=1))
    graph = helper.make_graph(
        nodes,
        "fake_recognizer",
        [helper.make_tensor_value_info("input.1", TensorProto.FLOAT, ["N", 3, 112, 112])],
        [helper.make_tensor_value_info("683", TensorProto.FLOAT, ["N", dim])],
    )
    return _save(graph, path)


@pytest.fixture(scope="session")
def aura_dir(tmp_path_factory) -> Path:
    """A folder laid out like fal/AuraFace-v1 (same file names), holding the tiny models plus a probe."""
    pytest.importorskip("onnxruntime")
    folder = tmp_path_factory.mktemp("auraface")
    build_fake_scrfd(folder / "scrfd_10g_bnkps.onnx")
    build_fake_recognizer(folder / "glintr100.onnx")
    build_fake_recognizer(folder / "probe.onnx", probe=True)
    build_fake_scrfd(folder / "no_kps.onnx", with_keypoints=False)
    return folder


def _aura(aura_dir: Path, **options):
    from echo_builder.scoring.faces_auraface import AuraFaceBackend

    # the fake detector finds the same fixed faces in any input: tiling (tests/test_scoring_faces_canvas.py) is off
    options.setdefault("tile", False)
    return AuraFaceBackend(model_dir=aura_dir, providers=("CPUExecutionProvider",), **options)


FULL_ID = (
    "auraface:glintr100+scrfd_10g_bnkps+RGB+det=640x640+det_threshold=0.5+nms=0.4+whole"
    "+det_norm=127.5/128+rec_norm=127.5/127.5"
)


# ----------------------------------------------------------------------------------------------- auraface backend


def test_decode_scrfd_hand_computed_boxes_and_keypoints():
    # a 32 x 32 input: strides 8, 16, 32 give 4x4, 2x2, 1x1 cells, 2 anchors each
    scores = [np.zeros((32, 1)), np.zeros((8, 1)), np.zeros((2, 1))]
    boxes = [np.zeros((32, 4)), np.zeros((8, 4)), np.zeros((2, 4))]
    kps = [np.zeros((32, 10)), np.zeros((8, 10)), np.zeros((2, 10))]
    scores[0][(2 * 4 + 1) * 2 + 1] = 0.9  # stride 8, row 2, col 1, anchor 1: centre (8, 16)
    boxes[0][(2 * 4 + 1) * 2 + 1] = (0.5, 1.0, 1.5, 2.0)  # -> (8-4, 16-8, 8+12, 16+16)
    kps[0][(2 * 4 + 1) * 2 + 1] = (1, 0, 0, 1, -1, 0, 0, -1, 0.5, 0.5)
    scores[1][(1 * 2 + 0) * 2 + 0] = 0.7  # stride 16, row 1, col 0, anchor 0: centre (0, 16)
    boxes[1][(1 * 2 + 0) * 2 + 0] = (0.0, 0.25, 1.0, 0.5)  # -> (0, 12, 16, 24)
    scores[2][1] = 0.49  # under the threshold
    out_boxes, out_scores, out_kps = decode_scrfd(scores + boxes + kps, input_hw=(32, 32), threshold=0.5)
    np.testing.assert_allclose(out_boxes, [[4, 8, 20, 32], [0, 12, 16, 24]])
    np.testing.assert_allclose(out_scores, [0.9, 0.7])
    np.testing.assert_allclose(out_kps[0], [[16, 16], [8, 24], [0, 16], [8, 8], [12, 20]])
    np.testing.assert_allclose(out_kps[1], [[0, 16]] * 5)
    _, _, no_kps = decode_scrfd(scores + boxes, input_hw=(32, 32), threshold=0.5)
    assert no_kps is None
    with pytest.raises(ConfigError, match="needs 32 rows"):
        decode_scrfd([scores[1], scores[1], scores[2], *boxes], input_hw=(32, 32), threshold=0.5)


def test_nms_keeps_the_best_of_overlapping_boxes():
    boxes = np.array([[0, 0, 10, 10], [1, 0, 11, 10], [20, 20, 30, 30], [0, 0, 10, 10]], float)
    scores = np.array([0.8, 0.9, 0.5, 0.1])
    # IoU(box1, box0) = 90 / 110 = 0.82 > 0.4: box0 and box3 go; box2 stands alone
    assert nms(boxes, scores, 0.4).tolist() == [1, 2]
    assert nms(boxes, scores, 0.9).tolist() == [1, 0, 2]  # 0.82 <= 0.9 keeps box0; box3 duplicates box0
    assert nms(np.zeros((0, 4)), np.zeros(0), 0.4).tolist() == []


def test_alignment_maps_the_template_onto_itself():
    np.testing.assert_allclose(estimate_similarity(ARCFACE_TEMPLATE, ARCFACE_TEMPLATE), np.eye(3), atol=1e-12)


def _skimage_similarity(src: np.ndarray, dst: np.ndarray):
    from skimage.transform import SimilarityTransform

    if hasattr(SimilarityTransform, "from_estimate"):  # scikit-image >= 0.26
        return SimilarityTransform.from_estimate(src, dst)
    tform = SimilarityTransform()
    assert tform.estimate(src, dst)
    return tform


def test_estimate_similarity_matches_skimage():
    rng = np.random.default_rng(1)
    for _ in range(5):
        src = rng.uniform(0, 500, size=(5, 2))
        dst = ARCFACE_TEMPLATE + rng.normal(scale=2.0, size=(5, 2))
        reference = _skimage_similarity(src, dst)
        np.testing.assert_allclose(estimate_similarity(src, dst), reference.params, atol=1e-9)


def test_align_face_puts_landmarks_on_the_template_and_matches_skimage_warp():
    from skimage.transform import warp

    # place the template rotated by 25 degrees, scaled 1.8x and moved, and mark each point with a bright dot
    angle, scale, shift = np.deg2rad(25), 1.8, np.array([140.0, 60.0])
    rot = np.array([[np.cos(angle), -np.sin(angle)], [np.sin(angle), np.cos(angle)]])
    landmarks = ARCFACE_TEMPLATE @ (scale * rot).T + shift
    image = np.full((400, 400, 3), 20, np.uint8)
    for x, y in np.rint(landmarks).astype(int):
        image[y - 2 : y + 3, x - 2 : x + 3] = (250, 10, 10)
    crop = align_face(image, landmarks)
    assert crop.shape == (112, 112, 3) and crop.dtype == np.uint8
    for x, y in np.rint(ARCFACE_TEMPLATE).astype(int):
        assert crop[y, x, 0] > 150, (x, y)
    tform = _skimage_similarity(landmarks, ARCFACE_TEMPLATE)
    reference = warp(image.astype(float), tform.inverse, output_shape=(112, 112), order=1, cval=0.0)
    assert np.abs(crop.astype(float) - reference).max() <= 1.0
    # outside the image the crop is black, as with OpenCV's constant border
    far = align_face(image, ARCFACE_TEMPLATE - 300)
    assert far.max() == 0
    # a face at the image's corner: the part outside is black, the rest still matches the reference
    corner = landmarks - shift + np.array([-40.0, -30.0])
    tform = _skimage_similarity(corner, ARCFACE_TEMPLATE)
    reference = warp(image.astype(float), tform.inverse, output_shape=(112, 112), order=1, cval=0.0)
    partial = align_face(image, corner)
    assert partial.max() > 0 and (partial == 0).any()
    assert np.abs(partial.astype(float) - reference).max() <= 1.0


def test_auraface_loads_tiny_models_from_a_local_folder(aura_dir, astronaut):
    backend = _aura(aura_dir)
    assert backend.backend_id == FULL_ID
    assert backend.network_channel_order == "RGB"
    white = np.full((128, 256, 3), 255, np.uint8)  # letterboxed into the 128 x 128 input at scale 0.5
    boxes, scores, kps = backend.detect(white)
    np.testing.assert_allclose(boxes, [np.array(BOX_A) * 2, np.array(BOX_B) * 2], atol=1e-4)
    np.testing.assert_allclose(scores, [0.6, 0.6], atol=1e-6)  # white = right half black: mean(channel 0) = 0
    np.testing.assert_allclose(kps[0], _template_in(BOX_A) * 2, atol=1e-4)
    faces = backend.faces(astronaut)
    assert len(faces) == 2 and faces[0].embedding.shape == (147,)
    assert faces[0].box == pytest.approx(np.array(BOX_A) * 4)  # 512 px into 128: scale 0.25


def test_auraface_face_identity_through_the_registry(aura_dir, astronaut, coffee):
    black = np.zeros((64, 64, 3), np.uint8)  # mean(channel 0) = -1: the fake detector finds no face
    result = face_identity(
        [[astronaut], [astronaut], [astronaut], [black], [astronaut]],
        [astronaut, coffee, black, astronaut, None],
        backend="auraface",
        model_dir=aura_dir,
        providers=("CPUExecutionProvider",),
        tile=False,
        progress=True,
    )
    assert result.extras["backend"] == FULL_ID
    assert result.extras["same_person_rule"] == "cosine >= 0.5"
    assert result.values[0] == pytest.approx(1.0, abs=1e-6)
    assert result.extras["best_pair"][0] in [(0, 0, 0), (0, 1, 1)]
    assert -1.0 <= result.values[1] < 0.999
    assert result.values[2] == 0.0 and "no face detected" in result.extras["notes"][2]
    assert result.nan_reasons[3:] == ["not applicable: no face in the input images", "output image missing"]
    assert result.extras["n_input_faces"] == [2, 2, 2, 0, 2]
    assert result.extras["n_output_faces"] == [2, 2, 0, None, None]
    assert "min_euclidean_distance" not in result.extras


def test_auraface_networks_receive_rgb_planes_by_default(aura_dir):
    """Regression for the reference code's defect (the face model saw swapped channels).

    The probe recogniser returns the mean of each input plane: on a pure red image plane 0 is red ((255 - 127.5)
    / 127.5 = 1) under the default RGB order, as insightface feeds its networks after ``swapRB=True``; with
    ``channel_order="BGR"`` red moves to plane 2. The fake detector scores faces by the mean of plane 0, so it
    finds the red image's faces only when plane 0 is red.
    """
    red = np.zeros((256, 256, 3), np.uint8)
    red[..., 0] = 255
    box = [(64, 64, 192, 192)]  # inside the image: the aligned crop has no black border
    rgb = _aura(aura_dir, recognizer_file="probe.onnx")
    np.testing.assert_allclose(rgb.faces(red, boxes=box)[0].embedding, [1, -1, -1], atol=1e-6)
    assert len(rgb.faces(red)) == 2
    bgr = _aura(aura_dir, recognizer_file="probe.onnx", channel_order="BGR")
    assert "+BGR+" in bgr.backend_id
    np.testing.assert_allclose(bgr.faces(red, boxes=box)[0].embedding, [-1, -1, 1], atol=1e-6)
    assert bgr.faces(red) == []


def test_auraface_given_square_box_is_the_aligned_crop(aura_dir, astronaut):
    backend = _aura(aura_dir, recognizer_file="probe.onnx")
    crop = np.ascontiguousarray(astronaut[100:212, 150:262])  # 112 x 112
    (face,) = backend.faces(crop, boxes=[(0, 0, 112, 112)])
    expected = (crop.reshape(-1, 3).mean(0) - 127.5) / 127.5
    np.testing.assert_allclose(face.embedding, expected, atol=2e-3)


def test_auraface_missing_files_say_how_to_get_them(tmp_path, monkeypatch):
    from echo_builder.scoring.faces_auraface import AuraFaceBackend

    image = np.zeros((8, 8, 3), np.uint8)
    with pytest.raises(ConfigError) as info:
        AuraFaceBackend(model_dir=tmp_path).faces(image)
    message = str(info.value)
    assert "scrfd_10g_bnkps.onnx, glintr100.onnx" in message
    assert "huggingface-cli download fal/AuraFace-v1" in message and "model_dir=DIR" in message
    monkeypatch.delenv("ECHO_AURAFACE_DIR", raising=False)  # no folder: the Hub, offline in tests
    with pytest.raises(
        ConfigError, match=r"could not be fetched from the Hub repo 'fal/AuraFace-v1'.*model_dir=DIR"
    ):
        AuraFaceBackend().faces(image)


def test_auraface_env_var_names_the_folder(aura_dir, monkeypatch):
    from echo_builder.scoring.faces_auraface import AuraFaceBackend

    monkeypatch.setenv("ECHO_AURAFACE_DIR", str(aura_dir))
    assert AuraFaceBackend().model_dir() == aura_dir


def test_auraface_detector_without_keypoints_is_refused(aura_dir):
    with pytest.raises(ConfigError, match="6 outputs; an SCRFD detector with keypoints has 9"):
        _aura(aura_dir, detector_file="no_kps.onnx").faces(np.zeros((8, 8, 3), np.uint8))
