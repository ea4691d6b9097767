"""Offline OCR with the PP-OCRv4 weights that ``rapidocr_onnxruntime`` ships in its wheel (the ``ocr`` extra).

The engine reads every text line of an image: PP-OCRv4 detection (DB text detector), the PP-OCR mobile v2.0
angle classifier (0 or 180 degrees) and PP-OCRv4 recognition (Chinese and English characters, digits,
punctuation), run on CPU through onnxruntime. No download: the three ONNX files (about 16 MB) are inside the
installed package, so it works offline and the same weights give the same reading everywhere.

Images are decoded by echo-bench's guarded decoder (:func:`echo_builder.imaging.load_rgb`: EXIF orientation,
transparency on white, decompression-bomb guard), then handed to the engine as a BGR array, the layout the engine
uses for image files. An image whose longer side is over 2,000 px is scaled down to 2,000 px (the engine's
``max_side_len``), and a very thin one is padded with white to an aspect ratio of at most 8, before the engine
sees it (:func:`fit_for_engine`: the engine's own upscaling of thin strips would ask for gigabytes); boxes are
given in the decoded image's pixels.

:func:`default_engine` builds one engine per process, lazily and under a lock; :meth:`RapidOcrEngine.read` is
thread-safe (calls are serialised: onnxruntime already uses every core inside one call).
"""

from __future__ import annotations

import hashlib
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from echo_builder.errors import ImageError, MissingDependencyError

__all__ = [
    "MAX_ASPECT",
    "MAX_SIDE",
    "OcrLine",
    "OcrReading",
    "RapidOcrEngine",
    "default_engine",
    "fit_for_engine",
]

_PURPOSE = "OCR (text_accuracy) with rapidocr_onnxruntime's PP-OCRv4 weights"


@dataclass(frozen=True)
class OcrLine:
    """One text line the engine read.

    Attributes:
        text: the recognised characters, as the recogniser wrote them (no normalisation).
        score: recognition confidence in [0, 1] (lines under the engine's ``text_score``, 0.5, are dropped).
        box: four ``[x, y]`` corners in pixels of the decoded image, clockwise from top-left (floats).
    """

    text: str
    score: float
    box: list[list[float]]


@dataclass(frozen=True)
class OcrReading:
    """Everything the engine read in one image.

    Attributes:
        lines: the text lines in reading order (top to bottom, then left to right within a row, the engine's
            order).
        backend_id: the engine and weights that produced it (see :attr:`RapidOcrEngine.backend_id`).
    """

    lines: list[OcrLine] = field(default_factory=list)
    backend_id: str = ""

    @property
    def text(self) -> str:
        """The lines joined with ``"\\n"`` (``""`` when no text was found)."""
        return "\n".join(line.text for line in self.lines)


def _import_rapidocr() -> Any:
    try:
        import rapidocr_onnxruntime
    except ImportError as exc:
        raise MissingDependencyError(exc.name or "rapidocr_onnxruntime", "ocr", _PURPOSE) from None
    return rapidocr_onnxruntime


def _file_digest(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()[:12]


class RapidOcrEngine:
    """PP-OCRv4 through ``rapidocr_onnxruntime`` with the weights shipped in its wheel; see the module docstring.

    Creating one loads the three ONNX models (about 1 s on CPU). Prefer :func:`default_engine`, which keeps one
    per process.

    Raises:
        MissingDependencyError: ``rapidocr_onnxruntime`` is not installed (``pip install 'echo-bench[ocr]'``).
    """

    def __init__(self) -> None:
        module = _import_rapidocr()
        from importlib.metadata import version

        self._engine = module.RapidOCR()
        self._lock = threading.Lock()
        package_dir = Path(module.__file__).resolve().parent
        config = module.main.read_yaml(str(module.main.DEFAULT_CFG_PATH))
        parts = []
        for stage in ("Det", "Cls", "Rec"):
            path = package_dir / str(config[stage]["model_path"])
            parts.append(f"{path.stem}@{_file_digest(path)}" if path.is_file() else path.stem)
        self._backend_id = (
            f"rapidocr_onnxruntime-{version('rapidocr_onnxruntime')}:"
            + "+".join(parts)
            + f"+text_score={self._engine.text_score}"
        )

    @property
    def backend_id(self) -> str:
        """The package version, each model file's name and the first 12 hex digits of its SHA-256, and the
        recognition-confidence cut-off, e.g. ``"rapidocr_onnxruntime-1.4.4:ch_PP-OCRv4_det_infer@...+
        ch_ppocr_mobile_v2.0_cls_infer@...+ch_PP-OCRv4_rec_infer@...+text_score=0.5"``."""
        return self._backend_id

    def read(self, image: Any, *, name: str | None = None) -> OcrReading:
        """Read all text lines of ``image``.

        Args:
            image: anything :func:`echo_builder.imaging.load_rgb` accepts (path, encoded bytes, PIL image, uint8
                array, ``{"bytes", "path"}`` dict).
            name: how error messages name the image (e.g. ``"sample 3 output"``).

        Returns:
            :class:`OcrReading` (no lines when the image holds no legible text).

        Raises:
            ImageError: the image cannot be decoded, or the engine fails on it (the reason is kept).
        """
        import numpy as np

        from echo_builder.imaging import load_rgb

        decoded = load_rgb(image, name=name)
        fitted, scale = fit_for_engine(decoded)
        bgr = np.ascontiguousarray(np.asarray(fitted)[:, :, ::-1])
        label = name or type(image).__name__
        try:
            with self._lock:
                result, _elapsed = self._engine(bgr)
        except Exception as exc:  # the engine's own failures (cv2, onnxruntime) become one per-image error
            detail = f"{type(exc).__name__}: {exc}" if str(exc).strip() else type(exc).__name__
            raise ImageError(
                f"{label}: OCR failed on the {decoded.width}x{decoded.height} image ({detail})"
            ) from None
        lines = [
            OcrLine(
                text=str(text),
                score=float(score),
                # back to the decoded image's pixels; the padding is at the bottom and right, so no offset
                box=[
                    [min(float(x) / scale, decoded.width), min(float(y) / scale, decoded.height)]
                    for x, y in np.asarray(box).tolist()
                ],
            )
            for box, text, score in (result or [])
        ]
        return OcrReading(lines=lines, backend_id=self._backend_id)


#: The engine's own ``max_side_len``: larger images are scaled down to this longer side before reading.
MAX_SIDE = 2000
#: The most elongated image handed to the engine (longer side / shorter side); see :func:`fit_for_engine`.
MAX_ASPECT = 8


def fit_for_engine(image: Any) -> tuple[Any, float]:
    """The decoded RGB ``image`` made safe for the engine, and the scale applied to it.

    The engine upscales a thin image until its shorter side reaches 30 px and then 736 px, so a 1 x 1,999 px
    strip asks for an 11 GiB array and a 10 x 1,999 px one takes 20 s. So, before reading: an image whose longer
    side is over :data:`MAX_SIDE` is scaled down to it (Pillow, bilinear, with reducing gap; the engine would
    scale it to that size anyway), then a side shorter than ``longer / MAX_ASPECT`` is padded with white at the
    bottom or right. An image of at most 2,000 px and aspect ratio at most 8 reaches the engine unchanged.

    Args:
        image: ``PIL.Image.Image`` in mode RGB (from :func:`echo_builder.imaging.load_rgb`).

    Returns:
        (the image to read, ``scale``): a pixel ``(x, y)`` of the returned image is ``(x / scale, y / scale)``
        in ``image`` (``scale`` <= 1; padding lies beyond the original's right and bottom edges).
    """
    from PIL import Image

    width, height = image.size
    scale = 1.0
    if max(width, height) > MAX_SIDE:
        scale = MAX_SIDE / max(width, height)
        size = (max(1, round(width * scale)), max(1, round(height * scale)))
        image = image.resize(size, Image.Resampling.BILINEAR, reducing_gap=3.0)
        width, height = image.size
    least = -(-max(width, height) // MAX_ASPECT)  # ceil
    if min(width, height) < least:
        canvas = Image.new("RGB", (max(width, least), max(height, least)), (255, 255, 255))
        canvas.paste(image, (0, 0))
        image = canvas
    return image, scale


_DEFAULT: RapidOcrEngine | None = None
_DEFAULT_LOCK = threading.Lock()


def default_engine() -> RapidOcrEngine:
    """The process's one :class:`RapidOcrEngine`, created on first use (thread-safe).

    Raises:
        MissingDependencyError: ``rapidocr_onnxruntime`` is not installed (``pip install 'echo-bench[ocr]'``).
    """
    global _DEFAULT
    if _DEFAULT is None:
        with _DEFAULT_LOCK:
            if _DEFAULT is None:
                _DEFAULT = RapidOcrEngine()
    return _DEFAULT
