"""Preparing images for a judge, as ECHO did: shorter side 512 px, JPEG quality 85 (arXiv 2510.15021, Sec. 4).

Any mode PIL can read is accepted: EXIF orientation is applied, transparency is composited on white, palette,
16-bit and CMYK images are converted to 8-bit RGB. A file that cannot be decoded raises
:class:`~echo_builder.errors.ImageError` naming the file.
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

from echo_builder.backends.base import ImagePart, image_part
from echo_builder.errors import ImageError

__all__ = ["JUDGE_JPEG_QUALITY", "JUDGE_SHORT_SIDE", "load_rgb", "prepare_for_judge"]

JUDGE_SHORT_SIDE = 512
JUDGE_JPEG_QUALITY = 85
MAX_PIXELS = 16_384 * 16_384  # larger is treated as a decompression bomb


def load_rgb(image: Any, *, name: str | None = None) -> Any:
    """Decode ``image`` (path, bytes, PIL image, or a ``{"bytes", "path"}`` dict as datasets stores images) to an
    8-bit RGB ``PIL.Image.Image``. Raises :class:`ImageError` for unreadable, truncated or oversized images."""
    from PIL import Image, ImageOps, UnidentifiedImageError

    label = name or (str(image) if isinstance(image, (str, Path)) else type(image).__name__)
    if isinstance(image, dict):
        image = image.get("bytes") or image.get("path")
        if image is None:
            raise ImageError(f"{label}: image record has neither bytes nor path")
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
    except (UnidentifiedImageError, OSError, Image.DecompressionBombError, SyntaxError) as exc:
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


def prepare_for_judge(
    image: Any,
    *,
    short_side: int = JUDGE_SHORT_SIDE,
    quality: int = JUDGE_JPEG_QUALITY,
    name: str | None = None,
) -> ImagePart:
    """Resize so the shorter side is ``short_side`` px (aspect kept, Lanczos) and encode as JPEG ``quality``."""
    from PIL import Image

    img = load_rgb(image, name=name)
    scale = short_side / min(img.size)
    size = (max(1, round(img.width * scale)), max(1, round(img.height * scale)))
    if size != img.size:
        img = img.resize(size, Image.Resampling.LANCZOS)
    buf = io.BytesIO()
    img.save(buf, format="JPEG", quality=quality)
    return image_part(buf.getvalue(), mime_type="image/jpeg")
