"""Preparing images for a judge, as ECHO did: shorter side 512 px, JPEG quality 85 (arXiv 2510.15021, Sec. 4).

Decoding (any mode, EXIF orientation, transparency on white, bomb guard) is :func:`echo_builder.imaging.load_rgb`.
"""

from __future__ import annotations

import io
from typing import Any

from echo_builder.backends.base import ImagePart, image_part
from echo_builder.imaging import load_rgb

__all__ = ["JUDGE_JPEG_QUALITY", "JUDGE_SHORT_SIDE", "prepare_for_judge"]

JUDGE_SHORT_SIDE = 512
JUDGE_JPEG_QUALITY = 85


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
