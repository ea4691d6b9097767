"""The one small interface every image generator implements: prompt + input images + seed -> image.

A generator receives :class:`GenerationRequest` objects (a benchmark sample's id and prompt, its input images
decoded to RGB, and the sample's seed) and returns one :class:`GenerationResult` per request: the image, or the
reason there is none (``refused``, ``nsfw``, ``error``). Per-sample failures are returned, never raised, so one
bad sample cannot stop a run; only a generator that cannot start at all (a model that does not exist, a missing
program) raises, from :meth:`Generator.load`.

Requests are handed over in batches of :attr:`Generator.batch_size` (images per pipeline call for local models,
requests in flight for remote APIs, programs running at once for commands). Orchestration (which samples, seeds,
files, manifest, resume, processes) lives in :mod:`echo_builder.generate.run`, so a generator stays a thin adapter.
"""

from __future__ import annotations

import hashlib
import io
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

from echo_builder.errors import ImageError

__all__ = [
    "FAILURE_STATUSES",
    "STATUSES",
    "GenerationRequest",
    "GenerationResult",
    "Generator",
    "Status",
    "derive_seed",
    "png_bytes",
]

Status = Literal["ok", "refused", "nsfw", "error", "missing_input"]
#: Every per-sample status a generation can end with.
STATUSES: tuple[str, ...] = ("ok", "refused", "nsfw", "error", "missing_input")
#: Statuses that leave the sample without an output image.
FAILURE_STATUSES: frozenset[str] = frozenset(STATUSES) - {"ok"}
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def derive_seed(seed: int, sample_id: str) -> int:
    """The seed of one sample: the first 4 bytes (big-endian) of SHA-256 over ``"<seed>:<sample_id>"``.

    Depends only on the run's base ``seed`` and the sample's id, so a sample gets the same seed (and a seeded
    model the same pixels) whatever the number of processes, the batch it lands in or the ``--limit``. Returns an
    int in ``[0, 2**32)``, which every common RNG (torch, numpy, random) accepts.

    >>> derive_seed(0, "echo-1") == derive_seed(0, "echo-1") != derive_seed(1, "echo-1")
    True
    """
    digest = hashlib.sha256(f"{int(seed)}:{sample_id}".encode()).digest()
    return int.from_bytes(digest[:4], "big")


def png_bytes(image: Any) -> bytes:
    """Encode a generator's output as PNG bytes.

    Args:
        image: a ``PIL.Image.Image`` (saved as PNG, RGB/RGBA/L kept, other modes converted to RGB), or encoded
            bytes (PNG returned unchanged after a full decode check; JPEG, WebP, ... decoded and re-encoded).

    Raises:
        ImageError: the bytes are not a decodable image.
    """
    from PIL import Image

    from echo_builder.imaging import load_rgb

    if isinstance(image, (bytes, bytearray, memoryview)):
        data = bytes(image)
        img = load_rgb(data, name="generated image")  # raises ImageError when it does not decode
        if data.startswith(PNG_SIGNATURE):
            return data
        image = img
    if not isinstance(image, Image.Image):
        raise ImageError(
            f"a generator returned {type(image).__name__}; expected a PIL image or encoded bytes"
        )
    if image.mode not in ("RGB", "RGBA", "L"):
        image = image.convert("RGB")
    buf = io.BytesIO()
    # An embedded colour profile is kept unless it is larger than a PNG reader accepts (Pillow refuses an iCCP
    # chunk that inflates past MAX_TEXT_CHUNK): the pixels are what every metric and judge reads.
    icc = image.info.get("icc_profile")
    keep = icc if isinstance(icc, bytes) and len(icc) < MAX_PNG_ICC_BYTES else None
    image.save(buf, format="PNG", icc_profile=keep)
    return buf.getvalue()


#: the largest colour profile written into an output PNG (bytes): half of Pillow's PNG text-chunk limit (1 MiB)
MAX_PNG_ICC_BYTES = 512 * 1024


@dataclass(frozen=True)
class GenerationRequest:
    """One image to make.

    Attributes:
        sample_id: the benchmark sample; the output becomes ``<sample_id>.png``.
        prompt: the sample's prompt (for image-to-image: the edit instruction).
        input_images: the sample's input images as 8-bit RGB ``PIL.Image.Image`` objects, in the sample's order;
            empty for text-to-image.
        seed: the sample's seed in ``[0, 2**32)`` (see :func:`derive_seed`).
    """

    sample_id: str
    prompt: str
    input_images: tuple[Any, ...] = ()
    seed: int = 0


@dataclass
class GenerationResult:
    """The outcome of one :class:`GenerationRequest`.

    Attributes:
        status: ``ok`` (``image`` is set), ``refused`` (the model or API declined, e.g. a content policy),
            ``nsfw`` (a safety checker blocked the image), ``error`` (anything else), ``missing_input`` (an input
            image was missing or corrupt; set by the orchestrator, no call made).
        image: a ``PIL.Image.Image`` or encoded image bytes when ``status == "ok"``, else ``None``.
        message: why there is no image (for failures), or a note; never contains an API key.
        seconds: wall time spent on this sample (a batch's time divided among its samples).
        details: backend facts worth keeping in the manifest (attempts, a revised prompt, ...), JSON-compatible.
    """

    status: Status
    image: Any | None = None
    message: str | None = None
    seconds: float = 0.0
    details: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.status not in STATUSES:
            raise ValueError(f"unknown generation status {self.status!r}; expected one of {STATUSES}")
        if (self.status == "ok") != (self.image is not None):
            raise ValueError(
                f"status {self.status!r} with image={'set' if self.image is not None else 'None'}"
            )


class Generator(ABC):
    """Base class of image generators; subclasses register with :func:`echo_builder.generate.register_generator`.

    Class attributes:
        name: the spec prefix (``diffusers`` in ``diffusers:<model>``).
        description: one line for ``--help`` and docs.
        needs_target: whether the spec needs a part after ``:``.
        runtime_options: option names left out of :meth:`output_parameters`.

    Subclasses validate their options in ``__init__`` (unknown keys are a :class:`~echo_builder.errors.ConfigError`)
    without loading anything heavy, load in :meth:`load`, and implement :meth:`generate_batch`.
    """

    name: ClassVar[str] = ""
    description: ClassVar[str] = ""
    needs_target: ClassVar[bool] = True
    #: Options that change how fast images come, not which images (batch size, concurrency, timeouts, device).
    runtime_options: ClassVar[frozenset[str]] = frozenset()

    def __init__(self, target: str, **options: Any) -> None:
        self.target = target

    @property
    def spec(self) -> str:
        """``<name>:<target>``, as given on the command line."""
        return f"{self.name}:{self.target}" if self.target else self.name

    @property
    def batch_size(self) -> int:
        """How many requests :meth:`generate_batch` should receive at once (>= 1)."""
        return 1

    def parameters(self) -> dict[str, Any]:
        """The resolved options, JSON-compatible and free of secrets, recorded in the manifest."""
        return {}

    def output_parameters(self) -> dict[str, Any]:
        """:meth:`parameters` that change the images; a resumed run must match the earlier run on these."""
        return {k: v for k, v in self.parameters().items() if k not in self.runtime_options}

    def info(self) -> dict[str, Any]:
        """Facts learned while loading (pipeline classes, model snapshot, device), recorded in the manifest."""
        return {}

    def load(self) -> None:  # noqa: B027 - optional hook, most remote generators have nothing to load
        """Load the model or check the program. Raises :class:`~echo_builder.errors.ConfigError` when the
        model or program does not exist or cannot start."""

    @abstractmethod
    def generate_batch(self, requests: Sequence[GenerationRequest]) -> list[GenerationResult]:
        """One :class:`GenerationResult` per request, in order. Per-sample failures are results, not raises."""

    def generate(self, request: GenerationRequest) -> GenerationResult:
        """:meth:`generate_batch` for one request."""
        return self.generate_batch([request])[0]

    def close(self) -> None:  # noqa: B027 - optional hook
        """Free the model or connections."""

    def __enter__(self) -> Generator:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
