"""The one guarded way echo-bench decodes an image, and the rules that turn any image into 8-bit RGB.

Every entry point that reads pixels (the media stage, ``judge``, ``metrics``, ``generate``, the demo, the Space, the
``evaluate`` modules under ``echo_builder/metrics/``, dataset writing) decodes through :func:`open_image` / :func:`load_rgb`.
Whatever goes wrong while decoding (not an image, 0 bytes, truncated data, a PNG text or ICC chunk that inflates
past Pillow's limit, a decompression bomb, a corrupt header raising ``ValueError``, ``SyntaxError``,
``struct.error``, ``EOFError``...) becomes one :class:`~echo_builder.errors.ImageError` that names the image and
the reason, so each caller records it per sample and goes on.

Accepted inputs: file paths (regular files only: a FIFO or device is refused instead of blocking), encoded bytes,
``PIL.Image.Image``, numpy arrays, ``{"bytes", "path"}`` dicts as ``datasets.Image(decode=False)`` stores them, and
:class:`Unreadable` (an image already known to be unreadable; decoding it raises its reason).

Conversion to 8-bit RGB (:func:`to_rgb8`), the rules every metric and the judge see:

* EXIF orientation is applied (an EXIF block that cannot be parsed is ignored: the pixels are kept as stored).
* Transparency (modes RGBA, LA, PA, RGBa, and P or L/RGB with a ``transparency`` entry) is composited on white.
* Numeric samples by type: ``bool`` (and mode "1") False -> 0, True -> 255; ``uint8`` unchanged; ``uint16`` (and
  modes "I;16", "I;16B", "I;16L") 16-bit, its high byte kept (``v >> 8``, as Pillow and libpng reduce 16-bit RGB
  PNGs); every other integer type (and mode "I", 32-bit) already on the 0-255 scale, clipped to 0..255 (a flat grey
  100 stays 100); floats (and mode "F") on the 0-1 scale when every value lies in [0, 1], else on the 0-255 scale,
  then rounded to the nearest level (half to even) and clipped. NaN or infinite samples are refused.
* Arrays are H x W (grey), H x W x 1 (grey), H x W x 2 (grey + alpha), H x W x 3 (RGB) or H x W x 4 (RGBA).
* CMYK, YCbCr and HSV use Pillow's conversion; LAB (CIE L*a*b*, D50) goes through LittleCMS to sRGB.

Images over :data:`MAX_PIXELS` pixels are refused (decompression-bomb guard).
"""

from __future__ import annotations

import io
import os
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from echo_builder.errors import ImageError

__all__ = ["MAX_PIXELS", "Unreadable", "decode_error", "image_format", "load_rgb", "open_image", "to_rgb8"]

MAX_PIXELS = 16_384 * 16_384  # larger is treated as a decompression bomb

_ALPHA_MODES = ("RGBA", "LA", "PA", "RGBa", "La")


@dataclass(frozen=True)
class Unreadable:
    """An image already found unreadable (e.g. while an ``evaluate`` module stored its inputs).

    Decoding it with :func:`load_rgb` raises :class:`ImageError` with ``reason`` under the decoder's own name, so
    the NaN reason is the one the image itself would have produced.
    """

    reason: str


def _label(image: Any, name: str | None) -> str:
    if name:
        return name
    if isinstance(image, (str, os.PathLike)):
        return str(image)
    return type(image).__name__


def decode_error(label: str, exc: BaseException) -> ImageError:
    """The one wording of a decode failure; Pillow's messages are kept, its object addresses are not."""
    from PIL import Image, UnidentifiedImageError

    if isinstance(exc, UnidentifiedImageError):
        # Pillow's message names the file object (``<_io.BytesIO object at 0x...>``), which differs between runs
        return ImageError(f"{label}: cannot decode image (not an image format Pillow can identify)")
    if isinstance(exc, Image.DecompressionBombError):
        return ImageError(f"{label}: refused by the decompression-bomb guard ({exc})")
    if isinstance(exc, MemoryError):
        return ImageError(f"{label}: cannot decode image (out of memory while decoding)")
    text = str(exc).strip()
    if not isinstance(exc, (OSError, ValueError, SyntaxError)) or not text:
        text = f"{type(exc).__name__}: {text}" if text else type(exc).__name__
    return ImageError(f"{label}: cannot decode image ({text})")


def _source(image: Any, label: str) -> Any:
    """What ``Image.open`` reads: a ``BytesIO`` for bytes, a checked path for files."""
    if isinstance(image, memoryview):
        image = image.tobytes()
    if isinstance(image, (bytes, bytearray)):
        if not image:
            raise ImageError(f"{label}: cannot decode image (empty, 0 bytes)")
        return io.BytesIO(image)
    if isinstance(image, (str, os.PathLike)):
        path = Path(image)
        try:
            info = path.stat()
        except (OSError, ValueError) as exc:  # ValueError: a NUL in the path
            raise ImageError(f"{label}: cannot read image file ({exc})") from None
        if not stat.S_ISREG(info.st_mode):
            raise ImageError(f"{label}: not a regular file (a folder, FIFO or device is not an image)")
        if info.st_size == 0:
            raise ImageError(f"{label}: cannot decode image (empty, 0 bytes)")
        return path
    raise ImageError(
        f"{label}: unsupported image input of type {type(image).__name__} "
        "(give a path, encoded bytes, a PIL image or a numpy array)"
    )


def _check_size(width: int, height: int, label: str) -> None:
    if width * height > MAX_PIXELS:
        raise ImageError(
            f"{label}: {width}x{height} pixels is over the {MAX_PIXELS:,} pixel limit (decompression-bomb guard)"
        )
    if width <= 0 or height <= 0:
        raise ImageError(f"{label}: cannot decode image (it has no pixels: {width}x{height})")


def open_image(image: Any, *, name: str | None = None, verify: bool = False) -> Any:
    """Decode ``image`` fully and return a ``PIL.Image.Image`` in its own mode, EXIF orientation applied.

    Args:
        image: a path, encoded bytes, a ``PIL.Image.Image`` (loaded here if it was opened lazily), a
            ``{"bytes", "path"}`` dict or an :class:`Unreadable`. Arrays are not images yet: use :func:`load_rgb`.
        name: how errors name the image (default: the path, or the input's type).
        verify: for encoded input, also run Pillow's structural check first (chunk checksums; the media stage
            stores nothing that fails it).

    Returns:
        ``PIL.Image.Image``, first frame of an animation, at most :data:`MAX_PIXELS` pixels; its ``format`` is
        the decoder's (``"PNG"``, ``"JPEG"``..., ``None`` for an image made in memory) and ``n_frames`` (when
        present) the number of frames.

    Raises:
        ImageError: for every decode failure, with the reason.
    """
    from PIL import Image, ImageOps

    label = _label(image, name)
    if isinstance(image, Unreadable):
        raise ImageError(f"{label}: {image.reason}")
    if isinstance(image, dict):
        image = image.get("bytes") if image.get("bytes") is not None else image.get("path")
        if image is None:
            raise ImageError(f"{label}: image record has neither bytes nor path")
    try:
        if isinstance(image, Image.Image):
            img = image
        else:
            if verify:
                with Image.open(_source(image, label)) as probe:
                    _check_size(probe.width, probe.height, label)
                    probe.verify()
            img = Image.open(_source(image, label))
        _check_size(img.width, img.height, label)
        img.load()
    except ImageError:
        raise
    except (
        Exception
    ) as exc:  # every decoder failure (ValueError, struct.error, EOFError...) is one ImageError
        raise decode_error(label, exc) from None
    try:  # an EXIF block that cannot be parsed is ignored: the pixels are kept as stored
        orientation = img.getexif().get(0x0112, 1)
    except Exception:
        return img
    if orientation not in (2, 3, 4, 5, 6, 7, 8):
        return img  # no copy: the decoder's ``format`` and ``n_frames`` stay readable
    fmt, frames = img.format, getattr(img, "n_frames", 1)
    try:
        turned = ImageOps.exif_transpose(img)
    except Exception:
        return img
    turned.format, turned.n_frames = fmt, frames
    return turned


def image_format(data: bytes, *, name: str | None = None) -> str:
    """The format Pillow identifies in encoded ``data`` (``"PNG"``, ``"JPEG"``...), decoding it fully first.

    Raises:
        ImageError: ``data`` is not a decodable image (same rules as :func:`open_image`).
    """
    return open_image(data, name=name).format or ""


def _array_to_uint8(array: Any, label: str) -> Any:
    """Samples of any numeric dtype to uint8 by the rules of the module docstring."""
    import numpy as np

    a = np.asarray(array)
    if a.dtype == np.uint8:
        return a
    if a.dtype == np.bool_:
        return a.astype(np.uint8) * np.uint8(255)
    if a.dtype == np.uint16:
        return (a >> 8).astype(np.uint8)
    if np.issubdtype(a.dtype, np.integer):
        return np.clip(a, 0, 255).astype(np.uint8)
    if np.issubdtype(a.dtype, np.floating):
        if not np.isfinite(a).all():
            raise ImageError(f"{label}: the image has NaN or infinite samples")
        f = a.astype(np.float64)
        if a.size and f.min() >= 0.0 and f.max() <= 1.0:
            f = f * 255.0
        return np.clip(np.rint(f), 0, 255).astype(np.uint8)
    raise ImageError(
        f"{label}: arrays of dtype {a.dtype} are not images (use uint8, uint16, int, float or bool)"
    )


def _from_array(array: Any, label: str) -> Any:
    import numpy as np
    from PIL import Image

    a = np.asarray(array)
    if a.ndim == 3 and a.shape[2] == 1:
        a = a[:, :, 0]
    if not (a.ndim == 2 or (a.ndim == 3 and a.shape[2] in (2, 3, 4))):
        raise ImageError(
            f"{label}: arrays must be H x W, H x W x 1, H x W x 2, H x W x 3 or H x W x 4 (channels last), "
            f"got shape {a.shape}"
        )
    _check_size(a.shape[1], a.shape[0], label)
    a = np.ascontiguousarray(_array_to_uint8(a, label))
    image = Image.fromarray(a)  # uint8: H x W -> L, x 2 -> LA, x 3 -> RGB, x 4 -> RGBA
    assert image.mode == ("L" if a.ndim == 2 else {2: "LA", 3: "RGB", 4: "RGBA"}[a.shape[2]]), image.mode
    return image


def _on_white(img: Any) -> Any:
    from PIL import Image

    rgba = img.convert("RGBA")
    background = Image.new("RGB", rgba.size, (255, 255, 255))
    background.paste(rgba, mask=rgba.getchannel("A"))
    return background


def to_rgb8(img: Any, *, name: str | None = None) -> Any:
    """Convert a decoded ``PIL.Image.Image`` (any mode) or a numpy array to 8-bit RGB by the module's rules.

    Returns:
        ``PIL.Image.Image`` in mode ``"RGB"`` (uint8 per channel, same width and height).

    Raises:
        ImageError: an unsupported mode, dtype or shape, or NaN/infinite samples.
    """
    import numpy as np
    from PIL import Image, ImageCms

    label = _label(img, name)
    if isinstance(img, np.ndarray):
        img = _from_array(img, label)
    try:
        mode = img.mode
        if mode == "RGB":
            if "transparency" in img.info:
                return _on_white(img)
            return img
        if mode in ("I", "I;16", "I;16B", "I;16L", "I;16N", "F"):
            return _from_array(np.asarray(img), label).convert("RGB")
        if mode == "1":
            return img.convert("L").convert("RGB")
        if mode == "La":
            a = np.asarray(img).astype(np.float64)
            grey = np.where(a[..., 1] > 0, a[..., 0] * 255.0 / np.maximum(a[..., 1], 1), 0)
            la = np.stack([np.clip(np.rint(grey), 0, 255), a[..., 1]], axis=-1).astype(np.uint8)
            return _on_white(Image.fromarray(la, "LA"))
        if mode in _ALPHA_MODES or "transparency" in img.info:
            return _on_white(img)
        if mode == "LAB":
            transform = ImageCms.buildTransform(
                ImageCms.createProfile("LAB"), ImageCms.createProfile("sRGB"), "LAB", "RGB"
            )
            return ImageCms.applyTransform(img, transform)
        return img.convert("RGB")
    except ImageError:
        raise
    except Exception as exc:
        raise ImageError(
            f"{label}: cannot convert image of mode {getattr(img, 'mode', '?')} to RGB ({exc})"
        ) from None


def load_rgb(image: Any, *, name: str | None = None) -> Any:
    """Decode ``image`` (see the module docstring for accepted inputs) to an 8-bit RGB ``PIL.Image.Image``.

    Args:
        image: a path, encoded bytes, ``PIL.Image.Image``, numpy array, ``{"bytes", "path"}`` dict or
            :class:`Unreadable`.
        name: how errors name the image (e.g. ``"sample 3 output"``).

    Returns:
        ``PIL.Image.Image`` in mode ``"RGB"``: EXIF orientation applied, transparency on white, samples converted
        by the rules of the module docstring.

    Raises:
        ImageError: unreadable, truncated, empty, oversized or unsupported input, with the reason.
    """
    import numpy as np

    label = _label(image, name)
    if isinstance(image, np.ndarray):
        return to_rgb8(image, name=label)
    return to_rgb8(open_image(image, name=label), name=label)
