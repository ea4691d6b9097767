"""Preparing images for a judge, as ECHO did: shorter side 512 px, JPEG quality 85 (arXiv 2510.15021, Sec. 4).

Decoding (any mode, EXIF orientation, transparency on white, bomb guard) is :func:`echo_builder.imaging.load_rgb`.
"""

from __future__ import annotations

import io
import os
import threading
from collections import OrderedDict
from typing import Any

from echo_builder.backends.base import ImagePart, image_part
from echo_builder.imaging import load_rgb

__all__ = ["JUDGE_JPEG_QUALITY", "JUDGE_MAX_LONG_SIDE", "JUDGE_SHORT_SIDE", "prepare_for_judge"]

JUDGE_SHORT_SIDE = 512
JUDGE_JPEG_QUALITY = 85
#: longest side (px) an image is scaled to: a 1 x 20,000 px image would otherwise become 512 x 10,240,000 px (15 GB)
JUDGE_MAX_LONG_SIDE = 4096
#: memory budget (bytes of JPEG) for the prepared images of files; the least recently used go first
FILE_MEMO_BYTES = 256 * 2**20
_file_memo: OrderedDict[tuple[Any, ...], ImagePart] = OrderedDict()
_file_memo_size = 0
_file_memo_lock = threading.Lock()


def prepare_for_judge(
    image: Any,
    *,
    short_side: int = JUDGE_SHORT_SIDE,
    quality: int = JUDGE_JPEG_QUALITY,
    name: str | None = None,
    resample: str = "lanczos",
) -> ImagePart:
    """Resize so the shorter side is ``short_side`` px (aspect kept, ``resample`` filter: Lanczos by default, or
    ``bicubic``, ``bilinear``, ``nearest``, ``box``, ``hamming``) and encode as JPEG ``quality`` (1-95).

    An image more elongated than ``JUDGE_MAX_LONG_SIDE / short_side`` (8:1) is scaled so that its longer side is
    :data:`JUDGE_MAX_LONG_SIDE` px instead (its shorter side then ends below ``short_side``, at least 1 px).
    Raises :class:`~echo_builder.errors.ImageError` when the image cannot be decoded.

    A file (path) is prepared once per process: the build's VLM stages send the same store images several times
    (roles, tier, applicability...), so the result is memoized by path, modification time and size, up to
    :data:`FILE_MEMO_BYTES` of JPEG (least recently used first out).
    """
    key = _file_key(image, short_side, quality, resample)
    if key is not None:
        with _file_memo_lock:
            part = _file_memo.get(key)
            if part is not None:
                _file_memo.move_to_end(key)
                return part
    part = _prepare(image, short_side, quality, name, resample)
    if key is not None:
        _remember(key, part)
    return part


def _file_key(image: Any, short_side: int, quality: int, resample: str) -> tuple[Any, ...] | None:
    if not isinstance(image, (str, os.PathLike)):
        return None
    try:
        stat = os.stat(image)
    except OSError:
        return None  # not readable: preparing it raises the proper error
    return (os.path.abspath(image), stat.st_mtime_ns, stat.st_size, short_side, quality, resample)


def _remember(key: tuple[Any, ...], part: ImagePart) -> None:
    global _file_memo_size
    with _file_memo_lock:
        if key in _file_memo:
            return
        _file_memo[key] = part
        _file_memo_size += len(part.data)
        while _file_memo_size > FILE_MEMO_BYTES and _file_memo:
            _, old = _file_memo.popitem(last=False)
            _file_memo_size -= len(old.data)


def _prepare(image: Any, short_side: int, quality: int, name: str | None, resample: str) -> ImagePart:
    from PIL import Image

    try:
        method = getattr(Image.Resampling, resample.upper())
    except AttributeError:
        raise ValueError(f"unknown resampling filter {resample!r}") from None

    img = load_rgb(image, name=name)
    scale = min(short_side / min(img.size), max(JUDGE_MAX_LONG_SIDE, short_side) / max(img.size))
    size = (max(1, round(img.width * scale)), max(1, round(img.height * scale)))
    if size != img.size:
        img = img.resize(size, method)
    buf = io.BytesIO()
    img.save(buf, format="JPEG", quality=quality)
    return image_part(buf.getvalue(), mime_type="image/jpeg")
