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

:class:`VlmNsfwChecker` asks a vision-language model instead (any backend spec, ``openai:gpt-4o``,
``transformers:<path>``), with the versioned prompt ``echo_builder/prompt_files/nsfw-screen.yaml``;
:func:`create_checker` makes either from what ``--nsfw-check`` was given. Both follow :class:`NsfwChecker`, which
is all the ``safety`` build stage (:mod:`echo_builder.stages.safety`) and ``generate --nsfw-check`` need.
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from echo_builder.errors import ConfigError, EchoError, ImageError, MissingDependencyError

__all__ = [
    "DEFAULT_THRESHOLD",
    "MAX_SIDE",
    "NSFW_CLASSES",
    "NSFW_PROMPT_FILE",
    "NUDENET_CLASSES",
    "VLM_DEFAULT_THRESHOLD",
    "NsfwChecker",
    "NudeNetChecker",
    "SafetyResult",
    "VlmNsfwChecker",
    "create_checker",
    "load_nsfw_prompt",
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


class NsfwChecker(Protocol):
    """What screens images: :class:`NudeNetChecker`, :class:`VlmNsfwChecker`, or a scripted checker in tests.

    ``check`` raises :class:`~echo_builder.errors.EchoError` (an :class:`ImageError` for an image it cannot
    screen) for a failure confined to that image; the build stage records it and goes on.
    """

    threshold: float

    @property
    def detector_id(self) -> str: ...

    def check(self, image: Any, *, name: str | None = None) -> SafetyResult: ...


def _check_threshold(threshold: Any) -> float:
    if isinstance(threshold, bool) or not isinstance(threshold, (int, float)) or not 0.0 <= threshold <= 1.0:
        raise ConfigError(f"the NSFW threshold must be a number in [0, 1], got {threshold!r}")
    return float(threshold)


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
        threshold = _check_threshold(threshold)
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


# ------------------------------------------------------------------------------------------------ VLM screening

#: The versioned prompt a :class:`VlmNsfwChecker` sends (format ``echo-bench-nsfw-prompt/1``).
NSFW_PROMPT_FILE = Path(__file__).resolve().parent / "prompt_files" / "nsfw-screen.yaml"
_PROMPT_FORMAT = "echo-bench-nsfw-prompt/1"
#: A VLM's own confidence in its "nsfw" answer must reach this to flag (its answer "safe" never flags).
VLM_DEFAULT_THRESHOLD = 0.5
#: Longer side, in pixels, an image is scaled down to before it is sent to a VLM (screening needs no detail).
VLM_MAX_SIDE = 768


@dataclass(frozen=True)
class NsfwPrompt:
    """The VLM screening prompt: ``system`` and ``user`` texts, its ``version`` (part of every cache key) and the
    categories the answer may name."""

    name: str
    version: str
    system: str
    user: str
    categories: tuple[str, ...]


def load_nsfw_prompt(path: str | Path | None = None) -> NsfwPrompt:
    """Read a screening prompt file (default :data:`NSFW_PROMPT_FILE`).

    Raises:
        ConfigError: the file is missing, not YAML, not of format ``echo-bench-nsfw-prompt/1``, or lacks one of
            ``name``, ``version``, ``system``, ``user`` (strings) and ``categories`` (a list of strings).
    """
    from echo_builder.input_files import read_prompt_yaml

    where = Path(path) if path is not None else NSFW_PROMPT_FILE

    def bad_categories(data: dict[str, Any]) -> list[str]:
        found = data.get("categories")
        ok = isinstance(found, list) and found and all(isinstance(c, str) for c in found)
        return [] if ok else ["categories"]

    data = read_prompt_yaml(where, "NSFW prompt file", _PROMPT_FORMAT, more=bad_categories)
    categories = data["categories"]
    return NsfwPrompt(data["name"], data["version"], data["system"], data["user"], tuple(categories))


class VlmNsfwChecker:
    """NSFW screening by a vision-language model: one call per image with the prompt :data:`NSFW_PROMPT_FILE`.

    The model answers a JSON object ``{"nsfw": bool, "confidence": float in [0, 1], "categories": [str]}``; the
    image is flagged when ``nsfw`` is true and ``confidence >= threshold``. The answer is kept as the image's one
    detection: ``{"class": "NSFW" or "SAFE", "score": confidence, "box": None, "categories": [...]}`` (a VLM
    gives no box). Images are scaled down to :data:`VLM_MAX_SIDE` px (longer side) and sent as PNG. Calls go
    through :class:`~echo_builder.backends.caller.ModelCaller` (retries, timeout) and, once a cache is attached to
    :attr:`caller` (the build's ``safety`` stage attaches the build's), the call cache: a rerun repeats no
    completed call. A model that answers anything but that JSON (a refusal, prose) leaves the image unscreened
    (an error for that image), never "safe".

    Args:
        spec: a backend spec (``openai:gpt-4o``, ``transformers:<path>``); ``rules`` cannot see images.
        threshold: minimum confidence in [0, 1] of an ``nsfw`` answer that flags (default 0.5).
        options: the backend's options (``base_url``, ``temperature``, ...).
        prompt_file: another prompt file of the same format.
        timeout_s, max_attempts: per-call limits (see :class:`~echo_builder.backends.caller.RetryPolicy`).
        concurrency: calls in flight at once in :meth:`check_many` (1-1024).
        backend: an already created backend (tests); ``spec`` is then only its name.

    Raises:
        ConfigError: a bad spec, threshold, option or prompt file.
        MissingDependencyError: the backend's extra is not installed.
    """

    def __init__(
        self,
        spec: str,
        *,
        threshold: float = VLM_DEFAULT_THRESHOLD,
        options: Mapping[str, Any] | None = None,
        prompt_file: str | Path | None = None,
        timeout_s: float = 120.0,
        max_attempts: int = 6,
        concurrency: int = 8,
        backend: Any = None,
    ) -> None:
        from echo_builder.backends import check_spec, create_backend
        from echo_builder.backends.caller import ModelCaller, RetryPolicy

        if backend is None:
            name, _ = check_spec(spec)
            if name == "rules":
                raise ConfigError(
                    "the rules backend sees no image: give a VLM spec such as openai:gpt-4o, or nudenet"
                )
            backend = create_backend(spec, **dict(options or {}))
        self.threshold = _check_threshold(threshold)
        self.prompt = load_nsfw_prompt(prompt_file)
        self.caller = ModelCaller(
            backend,
            timeout_s=timeout_s,
            retry=RetryPolicy(max_attempts=max_attempts),
            concurrency=concurrency,
        )

    @property
    def detector_id(self) -> str:
        """``"vlm:<backend id>+<prompt version>"``, e.g. ``vlm:openai:gpt-4o+nsfw-screen-v1``."""
        return f"vlm:{self.caller.backend.backend_id}+{self.prompt.version}"

    def request(self, image: Any, *, name: str | None = None) -> Any:
        """The :class:`~echo_builder.backends.caller.CallRequest` that screens ``image`` (decoded and scaled)."""
        from PIL import Image

        from echo_builder.backends.base import GenerationParams, Message, TextPart, image_part
        from echo_builder.backends.caller import CallRequest
        from echo_builder.imaging import load_rgb

        decoded = load_rgb(image, name=name)
        if max(decoded.size) > VLM_MAX_SIDE:
            decoded = decoded.copy()
            decoded.thumbnail((VLM_MAX_SIDE, VLM_MAX_SIDE), Image.Resampling.LANCZOS)
        user = self.prompt.user.replace("{categories}", ", ".join(self.prompt.categories))
        messages = (
            Message("system", (TextPart(self.prompt.system),)),
            Message("user", (image_part(decoded), TextPart(user))),
        )
        return CallRequest(
            messages,
            GenerationParams(max_tokens=200, temperature=0.0),
            stage="safety",
            prompt_version=self.prompt.version,
        )

    def parse(self, text: str, *, name: str | None = None) -> SafetyResult:
        """The :class:`SafetyResult` of a reply text.

        Raises:
            StructuredOutputError: the reply holds no such JSON object (the raw text is kept in the error).
        """
        from pydantic import BaseModel, ConfigDict, Field

        from echo_builder.structured import parse_structured

        class _Answer(BaseModel):
            model_config = ConfigDict(extra="ignore")
            nsfw: bool
            confidence: float = Field(ge=0.0, le=1.0)
            categories: list[str] = Field(default_factory=list)

        answer = parse_structured(text, _Answer)
        detection = {
            "class": "NSFW" if answer.nsfw else "SAFE",
            "score": float(answer.confidence),
            "box": None,
            "categories": [c for c in answer.categories if c in self.prompt.categories],
        }
        return SafetyResult(
            flagged=answer.nsfw and answer.confidence >= self.threshold,
            detections=[detection],
            detector_id=self.detector_id,
            threshold=self.threshold,
            nsfw_classes=("NSFW",),
        )

    #: The build's ``safety`` stage attaches its call cache to :attr:`caller` (a resumed build repeats no call).
    uses_call_cache = True

    def check_many(
        self, images: list[Any], *, names: list[str] | None = None
    ) -> list[SafetyResult | EchoError]:
        """Screen several images, ``concurrency`` calls at a time: one :class:`SafetyResult` or the
        :class:`EchoError` of that image (see :meth:`check`) per image, in order."""
        names = names if names is not None else [f"image {i + 1}" for i in range(len(images))]
        outcomes: list[SafetyResult | EchoError | None] = [None] * len(images)
        requests, slots = [], []
        for i, (image, name) in enumerate(zip(images, names, strict=True)):
            try:
                requests.append(self.request(image, name=name))
                slots.append(i)
            except EchoError as exc:  # an image that does not decode is that image's error
                outcomes[i] = exc
        for i, result in zip(slots, self.caller.call_many(requests), strict=True):
            outcomes[i] = self._outcome(result, names[i])
        return outcomes  # type: ignore[return-value]

    def _outcome(self, result: Any, name: str) -> SafetyResult | EchoError:
        if not result.ok:
            return EchoError(f"{name}: the NSFW screening call failed: {result.error}")
        try:
            return self.parse(result.reply.text, name=name)
        except EchoError as exc:
            return exc

    def check(self, image: Any, *, name: str | None = None) -> SafetyResult:
        """Screen one image (one model call, answered from the cache when it has it).

        Raises:
            ImageError: the image does not decode.
            EchoError: the call failed after its retries (:class:`EchoError` naming the image), or the reply was
                not the JSON answer (:class:`~echo_builder.errors.StructuredOutputError`).
        """
        outcome = self._outcome(self.caller.call(self.request(image, name=name)), name or "image")
        if isinstance(outcome, EchoError):
            raise outcome
        return outcome


def create_checker(
    spec: Any, *, threshold: float | None = None, options: Mapping[str, Any] | None = None, **limits: Any
) -> NsfwChecker:
    """The checker ``--nsfw-check`` names.

    Args:
        spec: ``"nudenet"`` (:class:`NudeNetChecker`), a VLM backend spec (:class:`VlmNsfwChecker`), or an object
            that already is a :class:`NsfwChecker` (returned as it is; ``threshold`` and ``options`` must then be
            unset).
        threshold: the checker's threshold; ``None``: its default (:data:`DEFAULT_THRESHOLD`,
            :data:`VLM_DEFAULT_THRESHOLD`).
        options: NudeNet: ``classes`` (comma-separated NudeNet classes that flag, default :data:`NSFW_CLASSES`);
            a VLM: ``prompt_file`` (another prompt file of format ``echo-bench-nsfw-prompt/1``) and its backend's
            options.
        **limits: ``timeout_s``, ``max_attempts`` and ``concurrency`` of a VLM's calls.

    Raises:
        ConfigError: an unknown spec, a bad threshold or an unknown option.
        MissingDependencyError: ``nudenet`` (the ``nsfw`` extra) or the backend's extra is not installed.
    """
    options = dict(options or {})
    if not isinstance(spec, str):
        if not callable(getattr(spec, "check", None)) or not hasattr(spec, "threshold"):
            raise ConfigError(
                f"nsfw_check must be 'nudenet', a VLM spec or a checker, got {type(spec).__name__}"
            )
        if threshold is not None or options:
            raise ConfigError("a checker object carries its own threshold and options")
        return spec
    if spec.strip() == "nudenet":
        unknown = sorted(set(options) - {"classes"})
        if unknown:
            raise ConfigError(f"unknown nudenet option(s) {unknown}; nudenet takes: classes")
        classes: Any = options.get("classes", NSFW_CLASSES)
        if isinstance(classes, str):
            classes = [c.strip() for c in classes.split(",") if c.strip()]
        _import_nudenet()  # a missing extra fails now, before a build writes anything
        return NudeNetChecker(DEFAULT_THRESHOLD if threshold is None else threshold, classes)
    from echo_builder.backends import check_spec

    try:
        check_spec(spec)
    except ConfigError as exc:
        raise ConfigError(
            f"--nsfw-check {spec!r} is neither 'nudenet' nor a VLM backend spec: {exc}"
        ) from exc
    prompt_file = options.pop("prompt_file", None)
    return VlmNsfwChecker(
        spec,
        threshold=VLM_DEFAULT_THRESHOLD if threshold is None else threshold,
        options=options,
        prompt_file=prompt_file,
        **limits,
    )
