"""How the ``evaluate`` modules under ``echo_builder/metrics/`` hold their image inputs without changing a pixel.

``evaluate`` stores every batch in an Arrow table before ``_compute`` sees it. A ``datasets.Image()`` feature
re-encodes a PIL image in its own format (a JPEG decoded by ``load_dataset`` was saved as JPEG again, moving
levels by up to 60), drops alpha and truncates 16-bit arrays. The modules therefore declare their images as
``datasets.Value("binary")`` and :class:`LosslessImageInputs` turns each input into bytes first:

* encoded bytes and files (paths, ``{"bytes", "path"}`` dicts) are kept byte for byte, so the module decodes them
  exactly as the scoring function would;
* PIL images and numpy arrays are decoded to 8-bit RGB by :func:`echo_builder.imaging.load_rgb` (the conversion the
  scoring functions apply anyway) and stored as PNG, which is lossless;
* an input that cannot be decoded is stored as a marker holding the reason, and :func:`restore` gives it back as an
  :class:`echo_builder.imaging.Unreadable`, so the sample is NaN with the reason the image itself produces.

``references`` may hold one image per prediction or a list of images per prediction (several inputs of an edit).
"""

from __future__ import annotations

import io
import os
import stat
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from echo_builder.errors import ImageError
from echo_builder.imaging import Unreadable, load_rgb

__all__ = ["LosslessImageInputs", "reference_list", "restore", "restore_lists", "store"]

_MARK = b"\x00echo-bench: unreadable image\x00"
_LABEL = "\x00image\x00"  # a placeholder name, cut from the reason (the scoring function adds its own)


def _unreadable(image: Any) -> bytes:
    try:
        load_rgb(image, name=_LABEL)
    except ImageError as exc:
        reason = str(exc).removeprefix(f"{_LABEL}: ")
    else:  # pragma: no cover - only called after a failure
        reason = "cannot read image"
    return _MARK + reason.encode("utf-8", "replace")


def store(image: Any) -> bytes | None:
    """One image as the bytes an ``evaluate`` module stores (see the module docstring); ``None`` stays ``None``.

    Never raises for a bad image: its failure is stored and reported by :func:`restore`.
    """
    if image is None:
        return None
    if isinstance(image, (bytes, bytearray, memoryview)):
        return bytes(image)
    if isinstance(image, dict) and image.get("bytes") is not None:
        return bytes(image["bytes"])
    if isinstance(image, dict) and image.get("path"):
        image = image["path"]
    if isinstance(image, (str, os.PathLike)):
        try:
            if stat.S_ISREG(os.stat(image).st_mode):
                return Path(image).read_bytes()
        except (OSError, ValueError):
            pass
        return _unreadable(image)
    try:
        rgb = load_rgb(image, name=_LABEL)
    except ImageError:
        return _unreadable(image)
    buf = io.BytesIO()
    rgb.save(buf, format="PNG", compress_level=1)
    return buf.getvalue()


def reference_list(reference: Any) -> list[Any]:
    """A prediction's references as a list: ``None`` -> ``[]``, one image -> ``[image]``, a list/tuple as is."""
    if reference is None:
        return []
    if isinstance(reference, (list, tuple)):
        return list(reference)
    return [reference]


def restore(data: bytes | None) -> bytes | Unreadable | None:
    """Stored bytes back to what the scoring functions take: the bytes, or :class:`Unreadable` with the reason."""
    if data is not None and data.startswith(_MARK):
        return Unreadable(data[len(_MARK) :].decode("utf-8", "replace"))
    return data


def restore_lists(column: Sequence[Sequence[bytes | None] | None]) -> list[list[Any]]:
    """:func:`restore` over a column of reference lists."""
    return [[restore(d) for d in (refs or ())] for refs in column]


class LosslessImageInputs:
    """Mixin for an ``evaluate.Metric`` whose ``predictions`` are images and whose ``references`` (if any) are
    images per prediction: inputs are stored with :func:`store` before ``evaluate`` writes them (declare
    ``predictions`` as ``datasets.Value("binary")`` and ``references`` as ``datasets.Sequence(datasets.Value(
    "binary"))``), and ``_compute`` reads them back with :func:`restore` / :func:`restore_lists`."""

    def add_batch(self, *, predictions: Any = None, references: Any = None, **kwargs: Any) -> Any:
        """Add a batch of predictions (images) and references (an image or a list of images each), unchanged.\n"""
        if predictions is not None:
            predictions = [store(p) for p in predictions]
        if references is not None:
            references = [[store(r) for r in reference_list(ref)] for ref in references]
        return super().add_batch(predictions=predictions, references=references, **kwargs)  # type: ignore[misc]

    def add(self, *, prediction: Any = None, reference: Any = None, **kwargs: Any) -> Any:
        """Add one prediction (an image) and its reference (an image or a list of images), unchanged.\n"""
        if prediction is not None:
            prediction = store(prediction)
        if reference is not None:
            reference = [store(r) for r in reference_list(reference)]
        return super().add(prediction=prediction, reference=reference, **kwargs)  # type: ignore[misc]
