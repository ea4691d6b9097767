"""Decoding images from anything users hand us into 8-bit RGB, with clear errors.

Accepted: file paths, encoded bytes, ``PIL.Image.Image``, numpy arrays (H x W x 3 uint8 RGB, or H x W grey), and
``{"bytes", "path"}`` dicts as ``datasets.Image(decode=False)`` stores them. EXIF orientation is applied,
transparency is composited on white, palette, 16-bit, CMYK and grey images become 8-bit RGB. Images over
:data:`MAX_PIXELS` are refused as decompression bombs. Every failure raises :class:`~echo_builder.errors.ImageError`
naming the image.
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

from echo_builder.errors import ImageError

__all__ = ["MAX_PIXELS", "load_rgb"]

MAX_PIXELS = 16_384 * 16_384  # larger is treated as a decompression bomb


def load_rgb(image: Any, *, name: str | None = None) -> Any:
    """Decode ``image`` to an 8-bit RGB ``PIL.Image.Image`` (see the module docstring for accepted inputs).

    Raises :class:`ImageError` for unreadable, truncated, oversized or unsupported inputs.
    """
    import numpy as np
    from PIL import Image, ImageOps, UnidentifiedImageError

    label = name or (str(image) if isinstance(image, (str, Path)) else type(image).__name__)
    if isinstance(image, dict):
        image = image.get("bytes") or image.get("path")
        if image is None:
            raise ImageError(f"{label}: image record has neither bytes nor path")
    if isinstance(image, np.ndarray):
        if (
            image.dtype != np.uint8
            or image.ndim not in (2, 3)
            or (image.ndim == 3 and image.shape[2] not in (3, 4))
        ):
            raise ImageError(
                f"{label}: arrays must be uint8 H x W, H x W x 3 or H x W x 4, got {image.dtype} {image.shape}"
            )
        image = Image.fromarray(image)
    try:
        if isinstance(image, Image.Image):
            img = image
        elif isinstance(image, (bytes, bytearray)):
            img = Image.open(io.BytesIO(image))
        else:
            img = Image.open(Path(image))
        if img.width * img.height > MAX_PIXELS:
            raise ImageError(
                f"{label}: {img.width}x{img.height} pixels is over the {MAX_PIXELS:,} pixel limit"
            )
        img.load()
        img = ImageOps.exif_transpose(img)
    except UnidentifiedImageError:
        # Pillow's message names the file object (``<_io.BytesIO object at 0x...>``), which differs between runs
        # and would make stage outputs and media_errors non-reproducible
        raise ImageError(f"{label}: cannot decode image (not an image format Pillow can identify)") from None
    except (OSError, Image.DecompressionBombError, SyntaxError) as exc:
        raise ImageError(f"{label}: cannot decode image ({exc})") from None
    if img.mode in ("RGBA", "LA", "PA") or (img.mode == "P" and "transparency" in img.info):
        rgba = img.convert("RGBA")
        background = Image.new("RGB", rgba.size, (255, 255, 255))
        background.paste(rgba, mask=rgba.getchannel("A"))
        return background
    if img.mode in ("I;16", "I;16B", "I;16L", "I"):
        # 16-bit grey: scale to 8 bits instead of clipping (PIL's default convert clips at 255)
        return img.point(lambda v: v / 256).convert("L").convert("RGB")
    return img.convert("RGB")
