"""NSFW screening of images with NudeNet's detector, whose weights ship in the ``nudenet`` wheel (the ``nsfw`` extra).

ECHO's dataset rows carry ``has_nsfw`` (null unless a safety checker was configured). :class:`NudeNetChecker`
is such a checker that runs offline on CPU: NudeNet 3.4's 320 px ONNX detector (``320n.onnx``, a YOLOv8-style
body-part detector, about 12 MB, inside the installed package) finds 18 classes of body parts, exposed or
covered, plus faces and feet. An image is **flagged** when at least one detection of a class in
:data:`NSFW_CLASSES` scores at or above the threshold:

- ``FEMALE_GENITALIA_EXPOSED``, ``MALE_GENITALIA_EXPOSED``, ``FEMALE_BREAST_EXPOSED``, ``BUTTOCKS_EXPOSED``,
  ``ANUS_EXPOSED``.

Not counted: every ``*_COVERED`` class, ``MALE_BREAST_EXPOSED`` (a bare male chest), ``BELLY_EXPOSED``,
``ARMPITS_EXPOSED``, ``FEET_EXPOSED`` and the faces: swimwear, sportswear and portraits are not NSFW.

The detector has false positives on safe images (a hand read as genitalia, a poster's figure as bare buttocks),
which is why the default threshold is 0.6 (:data:`DEFAULT_THRESHOLD` says how it was chosen); a flag is a reason
to look, not a verdict.

Every raw detection the model returns (NudeNet keeps those scoring >= 0.2, after non-maximum suppression) is
kept in :attr:`SafetyResult.detections`, so a reader can re-screen with another threshold without re-running.

Images are decoded by echo-bench's guarded decoder (:func:`echo_builder.imaging.load_rgb`: EXIF orientation,
transparency composited on white, decompression-bomb guard) and handed to the detector as a BGR array, the same
pixels NudeNet's own ``detect(path)`` reads with OpenCV for an ordinary RGB file. An image whose longer side is
over :data:`MAX_SIDE` (2,048 px) is scaled down to it first (boxes are given back in the decoded image's pixels).
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from echo_builder.errors import ConfigError, ImageError, MissingDependencyError

__all__ = [
    "DEFAULT_THRESHOLD",
    "MAX_SIDE",
    "NSFW_CLASSES",
    "NUDENET_CLASSES",
    "NudeNetChecker",
    "SafetyResult",
]

#: The classes NudeNet 3.4's detector reports (its label order).
NUDENET_CLASSES: tuple[str, ...] = (
    "FEMALE_GENITALIA_COVERED",
    "FACE_FEMALE",
    "BUTTOCKS_EXPOSED",
    "FEMALE_BREAST_EXPOSED",
    "FEMALE_GENITALIA_EXPOSED",
    "MALE_BREAST_EXPOSED",
    "ANUS_EXPOSED",
    "FEET_EXPOSED",
    "BELLY_COVERED",
    "FEET_COVERED",
    "ARMPITS_COVERED",
    "ARMPITS_EXPOSED",
    "FACE_MALE",
    "BELLY_EXPOSED",
    "MALE_GENITALIA_EXPOSED",
    "ANUS_COVERED",
    "FEMALE_BREAST_COVERED",
    "BUTTOCKS_COVERED",
)

#: The classes whose detection at or above the threshold flags an image (see the module docstring).
NSFW_CLASSES: frozenset[str] = frozenset(
    {
        "FEMALE_GENITALIA_EXPOSED",
        "MALE_GENITALIA_EXPOSED",
        "FEMALE_BREAST_EXPOSED",
        "BUTTOCKS_EXPOSED",
        "ANUS_EXPOSED",
    }
)

#: Default score threshold: a detection needs at least this confidence to flag an image. Measured on the 21 safe
#: images at hand (the demo's 9, the shared image pairs' 6, the shared prompt collection's 6), NudeNet's highest
#: NSFW-class scores are 0.539 (MALE_GENITALIA_EXPOSED on a hand making a peace sign, yellow_tint
#: ``gpt4o_before.webp``), 0.455 (BUTTOCKS_EXPOSED on the demo's ``mars_poster.png``) and 0.358: at NudeNet's
#: usual 0.5 a safe portrait would be flagged, at 0.6 none is. Lower it for a stricter screen.
DEFAULT_THRESHOLD = 0.6

_PURPOSE = "NSFW screening with NudeNet"

#: Images with a longer side over this many pixels are scaled down to it before detection (the model sees 320 px;
#: NudeNet's own padding to a square of the longer side would otherwise allocate width x width x 3 bytes).
MAX_SIDE = 2048


@dataclass(frozen=True)
class SafetyResult:
    """The screening of one image.

    Attributes:
        flagged: True when a detection of a class in ``nsfw_classes`` scores ``>= threshold``.
        detections: every raw detection, as NudeNet reports it: ``{"class": str, "score": float in [0, 1],
            "box": [x, y, width, height]}`` (ints, pixels of the decoded image).
        detector_id: the detector and weights (see :attr:`NudeNetChecker.detector_id`).
        threshold: the score threshold used.
        nsfw_classes: the classes that count (sorted).
    """

    flagged: bool
    detections: list[dict[str, Any]]
    detector_id: str
    threshold: float
    nsfw_classes: tuple[str, ...] = field(default_factory=lambda: tuple(sorted(NSFW_CLASSES)))

    @property
    def flagging(self) -> list[dict[str, Any]]:
        """The detections that flag the image (NSFW class, score >= threshold)."""
        return [
            d for d in self.detections if d["class"] in self.nsfw_classes and d["score"] >= self.threshold
        ]


def _import_nudenet() -> Any:
    try:
        import nudenet
    except ImportError as exc:
        raise MissingDependencyError(exc.name or "nudenet", "nsfw", _PURPOSE) from None
    return nudenet


class NudeNetChecker:
    """NudeNet's shipped 320 px detector as an NSFW checker; see the module docstring.

    The model loads on the first :meth:`check` (about 0.3 s), once, under a lock; :meth:`check` is thread-safe.

    Args:
        threshold: minimum detection score in [0, 1] that flags an image (default :data:`DEFAULT_THRESHOLD`, 0.6).
        nsfw_classes: the NudeNet classes that count (default :data:`NSFW_CLASSES`); each must be one of
            :data:`NUDENET_CLASSES`.

    Raises:
        ConfigError: a threshold outside [0, 1] or an unknown class.
        MissingDependencyError: (on first use) ``nudenet`` is not installed (``pip install 'echo-bench[nsfw]'``).
    """

    def __init__(
        self, threshold: float = DEFAULT_THRESHOLD, nsfw_classes: Iterable[str] = NSFW_CLASSES
    ) -> None:
        if (
            isinstance(threshold, bool)
            or not isinstance(threshold, (int, float))
            or not 0.0 <= threshold <= 1.0
        ):
            raise ConfigError(f"the NSFW threshold must be a number in [0, 1], got {threshold!r}")
        if isinstance(nsfw_classes, str):
            raise ConfigError("nsfw_classes must be a collection of class names, not one string")
        classes = tuple(sorted(set(nsfw_classes)))
        unknown = [c for c in classes if c not in NUDENET_CLASSES]
        if unknown or not classes:
            raise ConfigError(
                f"unknown NudeNet class(es) {unknown} (known: {', '.join(NUDENET_CLASSES)})"
                if unknown
                else "nsfw_classes is empty: nothing could ever be flagged"
            )
        self.threshold = float(threshold)
        self.nsfw_classes = classes
        self._detector: Any = None
        self._detector_id: str | None = None
        self._lock = threading.Lock()

    def _load(self) -> Any:
        if self._detector is None:
            with self._lock:
                if self._detector is None:
                    module = _import_nudenet()
                    from importlib.metadata import version

                    weights = Path(module.__file__).resolve().parent / "320n.onnx"
                    digest = (
                        hashlib.sha256(weights.read_bytes()).hexdigest()[:12] if weights.is_file() else "?"
                    )
                    self._detector_id = f"nudenet-{version('nudenet')}:{weights.stem}@{digest}"
                    self._detector = module.NudeDetector()
        return self._detector

    @property
    def detector_id(self) -> str:
        """``"nudenet-<version>:320n@<first 12 hex digits of the weights' SHA-256>"`` (loads the model)."""
        self._load()
        assert self._detector_id is not None
        return self._detector_id

    def check(self, image: Any, *, name: str | None = None) -> SafetyResult:
        """Screen one image.

        Args:
            image: anything :func:`echo_builder.imaging.load_rgb` accepts (path, encoded bytes, PIL image, uint8
                array, ``{"bytes", "path"}`` dict).
            name: how error messages name the image.

        Returns:
            :class:`SafetyResult` with every raw detection.

        Raises:
            ImageError: the image cannot be decoded, or the detector fails on it (the reason is kept).
            MissingDependencyError: ``nudenet`` is not installed.
        """
        import numpy as np
        from PIL import Image

        from echo_builder.imaging import load_rgb

        detector = self._load()
        decoded = load_rgb(image, name=name)
        scale = 1.0
        if max(decoded.size) > MAX_SIDE:
            # NudeNet pads an image to a square of its longer side before shrinking it to 320 px: a 1 x 200,000 px
            # strip would ask for 120 GB. Scaled down first, the model sees (almost) the same 320 px input.
            scale = MAX_SIDE / max(decoded.size)
            size = (max(1, round(decoded.width * scale)), max(1, round(decoded.height * scale)))
            decoded = decoded.resize(size, Image.Resampling.BILINEAR, reducing_gap=3.0)
        bgr = np.ascontiguousarray(np.asarray(decoded)[:, :, ::-1])
        try:
            raw = detector.detect(bgr)
        except Exception as exc:  # OpenCV / onnxruntime failures become one per-image error
            raise ImageError(
                f"{name or type(image).__name__}: NSFW detection failed ({type(exc).__name__}: {exc})"
            ) from None
        detections = [
            {
                "class": str(d["class"]),
                "score": float(d["score"]),
                "box": [int(v) if scale == 1.0 else round(float(v) / scale) for v in d["box"]],
            }
            for d in raw
        ]
        flagged = any(d["class"] in self.nsfw_classes and d["score"] >= self.threshold for d in detections)
        return SafetyResult(
            flagged=flagged,
            detections=detections,
            detector_id=self.detector_id,
            threshold=self.threshold,
            nsfw_classes=self.nsfw_classes,
        )
