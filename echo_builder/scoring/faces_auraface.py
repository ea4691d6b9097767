"""The ``auraface`` face backend: SCRFD detector + AuraFace-v1 (ArcFace-style, 512-d) recogniser, ONNX on onnxruntime.

This is the model ECHO used (Flow 3; "same person" at cosine >= 0.5). The two ONNX files of ``fal/AuraFace-v1``
are read from a local folder (``model_dir=`` or ``$ECHO_AURAFACE_DIR``), or, when neither is set, fetched from the
Hub with ``huggingface_hub.snapshot_download`` (online only):

- ``scrfd_10g_bnkps.onnx``: SCRFD-10GF face detector with 5 keypoints (Guo et al., arXiv 2105.04714),
- ``glintr100.onnx``: the AuraFace recogniser (IResNet-100 body, ArcFace loss, arXiv 1801.07698).

Get them with ``huggingface-cli download fal/AuraFace-v1 scrfd_10g_bnkps.onnx glintr100.onnx --local-dir DIR`` and
pass ``model_dir=DIR``. Other file names: ``detector_file=`` / ``recognizer_file=``.

The pipeline is written here in numpy (no insightface, no OpenCV), following insightface's conventions:

1. Detection: the image is resized keeping its aspect ratio into the detector's input (its fixed input size, else
   ``det_size``, 640 x 640), pasted top-left on black, normalised as ``(x - 127.5) / 128`` and run. SCRFD returns,
   per stride (8, 16, 32; two anchors per cell), scores, box distances (left, top, right, bottom) and keypoint
   offsets in units of the stride, relative to the anchor centre ``(col * stride, row * stride)``
   (:func:`decode_scrfd`); boxes above ``det_threshold`` (0.5) go through greedy NMS at IoU 0.4 (:func:`nms`).
2. Alignment: a similarity transform (Umeyama 1991, least squares; :func:`estimate_similarity`) maps the 5
   keypoints onto ArcFace's 112 x 112 template (:data:`ARCFACE_TEMPLATE`); the crop is sampled bilinearly with a
   black border (:func:`align_face`).
3. Recognition: ``(x - 127.5) / 127.5``, NCHW float32, one batch per image; the 512-d output is the embedding.

Channel order: each network gets the order it was trained on. insightface's pipeline takes OpenCV (BGR) images and
swaps them to RGB before both networks (``cv2.dnn.blobFromImage(..., swapRB=True)`` in ``scrfd.py`` and
``arcface_onnx.py``), and arcface_torch trains and evaluates on RGB (``inference.py``: ``COLOR_BGR2RGB``), so the
tensors these ONNX networks were trained on are RGB; AuraFace's model card uses the same insightface pipeline.
The ECHO reference code's defect was handing an RGB image to that BGR-expecting API, so the networks saw BGR. Here
images are decoded once to RGB and the only conversion is in :meth:`AuraFaceBackend.to_blob`, controlled by
``channel_order`` (default ``"RGB"``; ``"BGR"`` for a model trained on BGR tensors).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any, ClassVar, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from echo_builder.errors import ConfigError, ImageError, MissingDependencyError
from echo_builder.scoring.faces import DetectedFace, FaceBackend, _model_dir_from, register_face_backend

__all__ = [
    "ARCFACE_TEMPLATE",
    "AURAFACE_REPO_ID",
    "AuraFaceBackend",
    "AuraFaceConfig",
    "align_face",
    "decode_scrfd",
    "estimate_similarity",
    "nms",
]

AURAFACE_REPO_ID = "fal/AuraFace-v1"
DETECTOR_FILE = "scrfd_10g_bnkps.onnx"
RECOGNIZER_FILE = "glintr100.onnx"
MODEL_DIR_ENV = "ECHO_AURAFACE_DIR"

#: ArcFace's 5-point alignment template for 112 x 112 crops, ``(x, y)`` pixels: the eye on the image's left, the
#: other eye, nose tip, mouth corner on the image's left, the other mouth corner (insightface ``arcface_dst``).
ARCFACE_TEMPLATE = np.array(
    [
        [38.2946, 51.6963],
        [73.5318, 51.5014],
        [56.0252, 71.7366],
        [41.5493, 92.3655],
        [70.7299, 92.2041],
    ],
    dtype=np.float64,
)

# SCRFD's output layouts by output count: (strides, anchors per cell, has keypoints)
_SCRFD_LAYOUTS: dict[int, tuple[tuple[int, ...], int, bool]] = {
    6: ((8, 16, 32), 2, False),
    9: ((8, 16, 32), 2, True),
    10: ((8, 16, 32, 64, 128), 1, False),
    15: ((8, 16, 32, 64, 128), 1, True),
}


class AuraFaceConfig(BaseModel):
    """Options of the ``auraface`` face backend (unknown keys are an error).

    Attributes:
        model_dir: folder with the ONNX files; default ``$ECHO_AURAFACE_DIR``, else a Hub download of ``repo_id``.
        repo_id, revision: the Hub model used when no folder is given (``fal/AuraFace-v1``).
        detector_file, recognizer_file: file names inside the folder.
        det_size: detector input ``(width, height)`` when the ONNX input size is dynamic (multiples of the
            largest stride).
        det_threshold: minimum SCRFD score (insightface's default 0.5).
        nms_threshold: IoU above which a lower-scoring box is suppressed (0.4).
        channel_order: the channel order both networks receive (see the module docstring); ``"RGB"``.
        detector_mean, detector_std: SCRFD input normalisation ``(x - mean) / std`` (127.5, 128).
        recognizer_mean, recognizer_std: recogniser input normalisation (127.5, 127.5; use 0 and 1 for converted
            MXNet models that normalise inside the graph).
        providers: onnxruntime execution providers; default CUDA when available, then CPU.
        tile: ``True`` (default): an image larger than the detector input is also searched at its own scale in
            overlapping tiles of the detector's input size (overlap a quarter of a tile), besides the whole image
            shrunk into the input, and the boxes of both are merged by NMS; so a small face is found whatever the
            canvas size (shrinking a 1600 x 1200 canvas into 640 x 640 makes a 34 px face 14 px, under SCRFD's
            reliable range). Memory stays bounded (one tile at a time). ``False``: the whole image only
            (insightface's behaviour).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    model_dir: Path | None = None
    repo_id: str = AURAFACE_REPO_ID
    revision: str | None = None
    detector_file: str = DETECTOR_FILE
    recognizer_file: str = RECOGNIZER_FILE
    det_size: tuple[int, int] = (640, 640)
    det_threshold: float = 0.5
    nms_threshold: float = Field(default=0.4, ge=0.0, le=1.0)
    channel_order: Literal["RGB", "BGR"] = "RGB"
    detector_mean: float = 127.5
    detector_std: float = Field(default=128.0, gt=0.0)
    recognizer_mean: float = 127.5
    recognizer_std: float = Field(default=127.5, gt=0.0)
    providers: tuple[str, ...] | None = None
    tile: bool = True


# ------------------------------------------------------------------------------------------ detection (SCRFD)


def decode_scrfd(
    outputs: Sequence[np.ndarray],
    *,
    input_hw: tuple[int, int],
    threshold: float,
    strides: Sequence[int] = (8, 16, 32),
    num_anchors: int = 2,
) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """Decode SCRFD's raw outputs into boxes, scores and keypoints in the detector input's pixel frame.

    Args:
        outputs: for each stride the scores ``(h*w*A,)`` or ``(h*w*A, 1)``, then for each stride the box distances
            ``(h*w*A, 4)`` (left, top, right, bottom), then optionally for each stride the keypoint offsets
            ``(h*w*A, 10)`` (five ``(dx, dy)``); distances and offsets in units of the stride; a leading batch
            axis of 1 is allowed. Rows run over cells in row-major order, anchors innermost (h = H // stride).
        input_hw: ``(H, W)`` of the detector input.
        threshold: keep rows with score >= threshold.
        strides, num_anchors: the feature-map strides and anchors per cell.

    Returns:
        ``boxes`` float64 (k, 4) ``(x1, y1, x2, y2)``, ``scores`` float64 (k,), ``keypoints`` float64 (k, 5, 2)
        or ``None`` without keypoint outputs; unsorted, before NMS. Anchor centre of cell (row, col):
        ``(col * stride, row * stride)``; box = centre -/+ distance * stride; keypoint = centre + offset * stride.

    Raises:
        ConfigError: the number or sizes of the outputs do not match the layout.
    """
    n = len(strides)
    if len(outputs) not in (2 * n, 3 * n):
        raise ConfigError(
            f"SCRFD with strides {tuple(strides)} gives {2 * n} or {3 * n} outputs, got {len(outputs)}"
        )
    has_kps = len(outputs) == 3 * n
    all_boxes, all_scores, all_kps = [], [], []
    for idx, stride in enumerate(strides):
        rows, cols = input_hw[0] // stride, input_hw[1] // stride
        count = rows * cols * num_anchors
        scores = np.asarray(outputs[idx], dtype=np.float64).reshape(-1)
        dist = np.asarray(outputs[idx + n], dtype=np.float64).reshape(-1, 4) * stride
        if scores.size != count or dist.shape[0] != count:
            raise ConfigError(
                f"SCRFD stride {stride} on a {input_hw[1]}x{input_hw[0]} input needs {count} rows, got "
                f"{scores.size} scores and {dist.shape[0]} boxes"
            )
        ys, xs = np.mgrid[:rows, :cols]
        centers = np.repeat(
            np.stack([xs, ys], axis=-1).reshape(-1, 2).astype(np.float64) * stride, num_anchors, 0
        )
        keep = scores >= threshold
        c = centers[keep]
        all_boxes.append(np.concatenate([c - dist[keep, :2], c + dist[keep, 2:]], axis=1))
        all_scores.append(scores[keep])
        if has_kps:
            offsets = np.asarray(outputs[idx + 2 * n], dtype=np.float64).reshape(count, -1, 2) * stride
            all_kps.append(c[:, None, :] + offsets[keep])
    boxes = np.concatenate(all_boxes, axis=0)
    scores = np.concatenate(all_scores, axis=0)
    kps = np.concatenate(all_kps, axis=0) if has_kps else None
    return boxes, scores, kps


def nms(boxes: np.ndarray, scores: np.ndarray, iou_threshold: float) -> np.ndarray:
    """Greedy non-maximum suppression.

    Args:
        boxes: (k, 4) ``(x1, y1, x2, y2)``; scores: (k,).
        iou_threshold: a box whose IoU with an already kept, higher-scoring box exceeds this is dropped.

    Returns:
        int64 indices of the kept boxes, highest score first (ties keep the earlier box). Areas are
        ``(x2 - x1) * (y2 - y1)`` (insightface adds 1 px per side; the difference is negligible for faces).
    """
    boxes = np.asarray(boxes, dtype=np.float64).reshape(-1, 4)
    scores = np.asarray(scores, dtype=np.float64).reshape(-1)
    areas = np.clip(boxes[:, 2] - boxes[:, 0], 0, None) * np.clip(boxes[:, 3] - boxes[:, 1], 0, None)
    order = np.argsort(-scores, kind="stable")
    keep: list[int] = []
    while order.size:
        i, rest = order[0], order[1:]
        keep.append(int(i))
        w = np.clip(
            np.minimum(boxes[i, 2], boxes[rest, 2]) - np.maximum(boxes[i, 0], boxes[rest, 0]), 0, None
        )
        h = np.clip(
            np.minimum(boxes[i, 3], boxes[rest, 3]) - np.maximum(boxes[i, 1], boxes[rest, 1]), 0, None
        )
        inter = w * h
        union = areas[i] + areas[rest] - inter
        iou = np.divide(inter, union, out=np.zeros_like(inter), where=union > 0)
        order = rest[iou <= iou_threshold]
    return np.asarray(keep, dtype=np.int64)


# ------------------------------------------------------------------------------------------ alignment


def estimate_similarity(src: np.ndarray, dst: np.ndarray) -> np.ndarray:
    """Least-squares similarity transform (rotation, uniform scale, translation) taking ``src`` points to ``dst``.

    Umeyama, "Least-squares estimation of transformation parameters between two point patterns", TPAMI 1991
    (the estimator of ``skimage.transform.SimilarityTransform`` that insightface's ``norm_crop`` calls).

    Args:
        src, dst: float arrays (n, 2) of ``(x, y)`` points, n >= 2, not all equal.

    Returns:
        float64 (3, 3) homogeneous matrix M with ``dst ~ (M @ [x, y, 1])[:2]``.

    Raises:
        ValueError: shapes differ or the source points are all equal.
    """
    src = np.asarray(src, dtype=np.float64)
    dst = np.asarray(dst, dtype=np.float64)
    if src.shape != dst.shape or src.ndim != 2 or src.shape[1] != 2 or src.shape[0] < 2:
        raise ValueError(f"need two (n, 2) point arrays with n >= 2, got {src.shape} and {dst.shape}")
    src_mean, dst_mean = src.mean(axis=0), dst.mean(axis=0)
    src_c, dst_c = src - src_mean, dst - dst_mean
    src_var = (src_c**2).sum() / len(src)
    if src_var <= 0:
        raise ValueError("source points are all equal; no similarity transform is defined")
    cov = dst_c.T @ src_c / len(src)
    u, s, vt = np.linalg.svd(cov)
    d = np.ones(2)
    if np.linalg.det(cov) < 0:
        d[1] = -1.0
    rotation = u @ np.diag(d) @ vt
    scale = float((s * d).sum() / src_var)
    matrix = np.eye(3)
    matrix[:2, :2] = scale * rotation
    matrix[:2, 2] = dst_mean - scale * rotation @ src_mean
    return matrix


def arcface_template(size: int = 112) -> np.ndarray:
    """:data:`ARCFACE_TEMPLATE` for a ``size`` x ``size`` crop (insightface's rule: scaled by size / 112 when size is
    a multiple of 112, else by size / 128 with 8 px of horizontal margin per 128)."""
    if size % 112 == 0:
        return ARCFACE_TEMPLATE * (size / 112.0)
    ratio = size / 128.0
    return (ARCFACE_TEMPLATE + np.array([8.0, 0.0])) * ratio


def _bilinear(image: np.ndarray, xs: np.ndarray, ys: np.ndarray) -> np.ndarray:
    """Sample ``image`` (H, W, C) at float ``(xs, ys)`` (pixel centres at integers) with a black border."""
    height, width = image.shape[:2]
    # only the region the samples touch is copied (a 4K photo would otherwise be converted whole)
    x_lo, x_hi = max(0, int(np.floor(xs.min())) - 1), min(width, int(np.ceil(xs.max())) + 2)
    y_lo, y_hi = max(0, int(np.floor(ys.min())) - 1), min(height, int(np.ceil(ys.max())) + 2)
    if x_lo >= x_hi or y_lo >= y_hi:
        return np.zeros((*xs.shape, image.shape[2]), dtype=np.float64)
    region = image[y_lo:y_hi, x_lo:x_hi]
    h, w = region.shape[:2]
    padded = np.zeros((h + 2, w + 2, image.shape[2]), dtype=np.float64)
    padded[1:-1, 1:-1] = region
    x, y = xs - x_lo + 1.0, ys - y_lo + 1.0
    x0, y0 = np.floor(x), np.floor(y)
    fx, fy = (x - x0)[..., None], (y - y0)[..., None]
    valid = (x0 >= 0) & (x0 <= w) & (y0 >= 0) & (y0 <= h)
    x0i = np.clip(x0, 0, w).astype(np.intp)
    y0i = np.clip(y0, 0, h).astype(np.intp)
    out = (
        padded[y0i, x0i] * (1 - fx) * (1 - fy)
        + padded[y0i, x0i + 1] * fx * (1 - fy)
        + padded[y0i + 1, x0i] * (1 - fx) * fy
        + padded[y0i + 1, x0i + 1] * fx * fy
    )
    out[~valid] = 0.0
    return out


def align_face(image: np.ndarray, landmarks: np.ndarray, size: int = 112) -> np.ndarray:
    """Warp the face with 5 ``landmarks`` onto ArcFace's template: a ``size`` x ``size`` crop.

    Args:
        image: uint8 (H, W, 3) (any channel order; it is kept).
        landmarks: (5, 2) ``(x, y)`` pixels in the template's point order (SCRFD's order).
        size: crop side (the recogniser's input, 112 for ArcFace models).

    Returns:
        uint8 (size, size, 3): bilinear samples (rounded), black outside the image, like OpenCV's ``warpAffine``
        with a constant border.
    """
    matrix = estimate_similarity(
        np.asarray(landmarks, dtype=np.float64).reshape(5, 2), arcface_template(size)
    )
    inverse = np.linalg.inv(matrix)
    ys, xs = np.mgrid[:size, :size].astype(np.float64)
    src_x = inverse[0, 0] * xs + inverse[0, 1] * ys + inverse[0, 2]
    src_y = inverse[1, 0] * xs + inverse[1, 1] * ys + inverse[1, 2]
    crop = _bilinear(np.asarray(image), src_x, src_y)
    return np.clip(np.rint(crop), 0, 255).astype(np.uint8)


# ------------------------------------------------------------------------------------------ backend


def _import_onnxruntime() -> Any:
    try:
        import onnxruntime
    except ImportError:
        raise MissingDependencyError("onnxruntime", "auraface", "The AuraFace face backend") from None
    return onnxruntime


_EDGE = 2.0  # px: a tile detection this close to an inner tile edge is taken as cut by the tile


def _starts(length: int, tile: int) -> list[int]:
    """Tile origins along one axis: every ``3/4 * tile`` px, the last tile ending at ``length``."""
    if length <= tile:
        return [0]
    step = max(1, tile - tile // 4)
    last = length - tile
    return [*range(0, last, step), last]


def _how_to_get(cfg: AuraFaceConfig) -> str:
    return (
        f"Download them with `huggingface-cli download {cfg.repo_id} {cfg.detector_file} {cfg.recognizer_file} "
        f"--local-dir DIR` (or `hf download ...`) and pass model_dir=DIR (or set ${MODEL_DIR_ENV}=DIR)."
    )


@register_face_backend
class AuraFaceBackend(FaceBackend):
    """SCRFD + AuraFace on onnxruntime; see the module docstring. Thread-safe (one lock per backend)."""

    name: ClassVar[str] = "auraface"
    Config: ClassVar[type[BaseModel]] = AuraFaceConfig
    threshold_rule: ClassVar[Literal["cosine", "euclidean"]] = "cosine"
    threshold: ClassVar[float] = 0.5
    extra: ClassVar[str] = "auraface"

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        self._sessions: dict[str, Any] | None = None

    @property
    def backend_id(self) -> str:
        """Every setting that changes a value: the two networks, the channel order, the detector input size,
        thresholds, tiling and the input normalisations, e.g. ``"auraface:glintr100+scrfd_10g_bnkps+RGB+det=640x640
        +det_threshold=0.5+nms=0.4+tiled+det_norm=127.5/128+rec_norm=127.5/127.5"`` (one line).

        ``det`` is the configured ``det_size``; a detector with a fixed input size uses its own."""
        cfg: AuraFaceConfig = self.config  # type: ignore[assignment]
        parts = [
            f"auraface:{Path(cfg.recognizer_file).stem}",
            Path(cfg.detector_file).stem,
            cfg.channel_order,
            f"det={cfg.det_size[0]}x{cfg.det_size[1]}",
            f"det_threshold={cfg.det_threshold:g}",
            f"nms={cfg.nms_threshold:g}",
            "tiled" if cfg.tile else "whole",
            f"det_norm={cfg.detector_mean:g}/{cfg.detector_std:g}",
            f"rec_norm={cfg.recognizer_mean:g}/{cfg.recognizer_std:g}",
        ]
        return "+".join(parts)

    @property
    def network_channel_order(self) -> Literal["RGB", "BGR"]:
        return self.config.channel_order  # type: ignore[attr-defined]

    def model_dir(self) -> Path:
        """The folder holding both ONNX files: ``model_dir``, ``$ECHO_AURAFACE_DIR``, or a Hub snapshot.

        Raises :class:`ConfigError`, saying how to get the files, when a file is missing or the download fails.
        """
        cfg: AuraFaceConfig = self.config  # type: ignore[assignment]
        files = [cfg.detector_file, cfg.recognizer_file]
        folder = _model_dir_from(cfg.model_dir, os.environ.get(MODEL_DIR_ENV))
        if folder is None:
            try:
                from huggingface_hub import snapshot_download

                folder = Path(snapshot_download(cfg.repo_id, revision=cfg.revision, allow_patterns=files))
            except Exception as exc:  # offline, unknown repo, no huggingface_hub: all end in the same advice
                raise ConfigError(
                    f"AuraFace model files {', '.join(files)} could not be fetched from the Hub repo {cfg.repo_id!r} "
                    f"({type(exc).__name__}: {exc}). {_how_to_get(cfg)}"
                ) from None
        missing = [file for file in files if not (folder / file).is_file()]
        if missing:
            raise ConfigError(
                f"AuraFace model files not found in {folder}: {', '.join(missing)}. {_how_to_get(cfg)}"
            )
        return folder

    def _load(self) -> dict[str, Any]:
        with self._lock:
            if self._sessions is not None:
                return self._sessions
            ort = _import_onnxruntime()
            cfg: AuraFaceConfig = self.config  # type: ignore[assignment]
            folder = self.model_dir()
            providers = list(cfg.providers) if cfg.providers else None
            if providers is None:
                available = ort.get_available_providers()
                providers = [p for p in ("CUDAExecutionProvider", "CPUExecutionProvider") if p in available]
            sessions: dict[str, Any] = {}
            for role, file in (("detector", cfg.detector_file), ("recognizer", cfg.recognizer_file)):
                try:
                    sessions[role] = ort.InferenceSession(str(folder / file), providers=providers)
                except Exception as exc:
                    raise ConfigError(f"cannot load the AuraFace {role} {folder / file}: {exc}") from None
            det = sessions["detector"]
            layout = _SCRFD_LAYOUTS.get(len(det.get_outputs()))
            if layout is None or not layout[2]:
                raise ConfigError(
                    f"{cfg.detector_file} has {len(det.get_outputs())} outputs; an SCRFD detector with keypoints has "
                    "9 (strides 8, 16, 32) or 15 (strides 8 to 128)"
                )
            shape = det.get_inputs()[0].shape
            if isinstance(shape[2], int) and isinstance(shape[3], int):
                det_hw = (shape[2], shape[3])
            else:
                det_hw = (cfg.det_size[1], cfg.det_size[0])
            if det_hw[0] % max(layout[0]) or det_hw[1] % max(layout[0]):
                raise ConfigError(
                    f"detector input {det_hw[1]}x{det_hw[0]} is not a multiple of {max(layout[0])}"
                )
            rec_shape = sessions["recognizer"].get_inputs()[0].shape
            rec_size = rec_shape[2] if isinstance(rec_shape[2], int) else 112
            self._sessions = dict(
                sessions,
                layout=layout,
                det_hw=det_hw,
                rec_size=rec_size,
                rec_batch=not isinstance(rec_shape[0], int) or rec_shape[0] != 1,
            )
            return self._sessions

    def to_blob(self, images: np.ndarray, mean: float, std: float) -> np.ndarray:
        """RGB uint8 (N, H, W, 3) to the networks' float32 NCHW tensor: the one place channels are reordered.

        ``channel_order`` decides the order of the 3 planes (RGB by default, see the module docstring); values
        become ``(x - mean) / std``.
        """
        ordered = images[..., ::-1] if self.network_channel_order == "BGR" else images
        blob = (ordered.astype(np.float32) - np.float32(mean)) / np.float32(std)
        return np.ascontiguousarray(blob.transpose(0, 3, 1, 2))

    def detect(self, rgb: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Run SCRFD on ``rgb`` (uint8 (H, W, 3)): boxes (k, 4), scores (k,), keypoints (k, 5, 2) in image pixels,
        after thresholding and NMS, highest score first.

        The whole image is shrunk (or enlarged) into the detector input; with ``tile`` (default) an image larger
        than that input is also searched at its own scale in overlapping input-sized tiles (see
        :class:`AuraFaceConfig`), and the boxes of all passes go through one NMS."""
        cfg: AuraFaceConfig = self.config  # type: ignore[assignment]
        in_h, in_w = self._load()["det_hw"]
        height, width = rgb.shape[:2]
        passes = [self._detect_once(rgb)]
        if cfg.tile and (height > in_h or width > in_w):
            for y0 in _starts(height, in_h):
                for x0 in _starts(width, in_w):
                    boxes, scores, kps = self._detect_once(rgb[y0 : y0 + in_h, x0 : x0 + in_w])
                    # a box touching a tile edge inside the image may be a cut face: the neighbouring tile
                    # (overlap a quarter tile) holds it whole, the whole-image pass holds the larger ones
                    cut = np.zeros(len(boxes), dtype=bool)
                    if x0 > 0:
                        cut |= boxes[:, 0] <= _EDGE
                    if y0 > 0:
                        cut |= boxes[:, 1] <= _EDGE
                    if x0 + in_w < width:
                        cut |= boxes[:, 2] >= in_w - _EDGE
                    if y0 + in_h < height:
                        cut |= boxes[:, 3] >= in_h - _EDGE
                    offset = np.array([x0, y0], dtype=np.float64)
                    passes.append((boxes[~cut] + np.tile(offset, 2), scores[~cut], kps[~cut] + offset))
        boxes = np.concatenate([p[0] for p in passes]).reshape(-1, 4)
        scores = np.concatenate([p[1] for p in passes]).reshape(-1)
        kps = np.concatenate([p[2] for p in passes]).reshape(-1, 5, 2)
        keep = nms(boxes, scores, cfg.nms_threshold)
        return boxes[keep], scores[keep], kps[keep]

    def _detect_once(self, rgb: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """SCRFD on ``rgb`` resized (aspect kept) into the detector input: boxes, scores, keypoints in ``rgb``'s
        pixels, thresholded, before NMS."""
        from PIL import Image

        cfg: AuraFaceConfig = self.config  # type: ignore[assignment]
        models = self._load()
        (in_h, in_w), (strides, anchors, _) = models["det_hw"], models["layout"]
        height, width = rgb.shape[:2]
        if height / width > in_h / in_w:
            new_h = in_h
            new_w = max(1, int(new_h * width / height))
        else:
            new_w = in_w
            new_h = max(1, int(new_w * height / width))
        scale = new_h / height
        canvas = np.zeros((in_h, in_w, 3), dtype=np.uint8)
        canvas[:new_h, :new_w] = np.asarray(
            Image.fromarray(np.ascontiguousarray(rgb)).resize((new_w, new_h), Image.BILINEAR)
        )
        blob = self.to_blob(canvas[None], cfg.detector_mean, cfg.detector_std)
        session = models["detector"]
        with self._lock:
            outputs = session.run(None, {session.get_inputs()[0].name: blob})
        boxes, scores, kps = decode_scrfd(
            outputs, input_hw=(in_h, in_w), threshold=cfg.det_threshold, strides=strides, num_anchors=anchors
        )
        assert kps is not None  # layouts without keypoints are refused on load
        return boxes / scale, scores, kps / scale

    def embed(self, crops: np.ndarray) -> np.ndarray:
        """Recogniser embeddings of aligned crops: uint8 (n, s, s, 3) RGB -> float32 (n, d), not normalised."""
        cfg: AuraFaceConfig = self.config  # type: ignore[assignment]
        models = self._load()
        session = models["recognizer"]
        name = session.get_inputs()[0].name
        blob = self.to_blob(crops, cfg.recognizer_mean, cfg.recognizer_std)
        with self._lock:
            if models["rec_batch"]:
                out = session.run(None, {name: blob})[0]
            else:
                out = np.concatenate(
                    [session.run(None, {name: blob[i : i + 1]})[0] for i in range(len(blob))]
                )
        return np.asarray(out, dtype=np.float32).reshape(len(crops), -1)

    def faces(self, rgb: np.ndarray, boxes: Sequence[Sequence[float]] | None = None) -> list[DetectedFace]:
        """Detect (or take ``boxes``), align and embed; see :meth:`FaceBackend.faces`.

        A given box is taken as an aligned face crop: its keypoints are the ArcFace template stretched to the box,
        so a square box is resized to the recogniser's input as it is (how pre-aligned 112 x 112 crops are
        embedded). Raises :class:`ImageError` unless ``rgb`` is uint8 (H, W, 3).
        """
        if not (
            isinstance(rgb, np.ndarray) and rgb.dtype == np.uint8 and rgb.ndim == 3 and rgb.shape[2] == 3
        ):
            raise ImageError(
                f"the AuraFace backend needs a uint8 (H, W, 3) RGB array, got "
                f"{getattr(rgb, 'dtype', type(rgb).__name__)} {getattr(rgb, 'shape', '')}"
            )
        size = self._load()["rec_size"]
        if boxes is None:
            found_boxes, scores, kps = self.detect(rgb)
        else:
            found_boxes = np.asarray(boxes, dtype=np.float64).reshape(-1, 4)
            scores = np.full(len(found_boxes), np.nan)
            unit = ARCFACE_TEMPLATE / 112.0  # (5, 2) in [0, 1]: the template stretched over each box
            origin, extent = found_boxes[:, None, :2], (found_boxes[:, 2:] - found_boxes[:, :2])[:, None, :]
            kps = origin + unit[None] * extent
        if len(found_boxes) == 0:
            return []
        crops = np.stack([align_face(rgb, k, size) for k in kps])
        embeddings = self.embed(crops)
        return [
            DetectedFace(box=tuple(float(v) for v in box), score=float(score), landmarks=k, embedding=emb)  # type: ignore[arg-type]
            for box, score, k, emb in zip(found_boxes, scores, kps, embeddings, strict=True)
        ]
