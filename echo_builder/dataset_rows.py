"""Typed adapter from :class:`echo_builder.records.Sample` to :mod:`echo_dataset` rows and configs.

The mapping itself lives in :mod:`echo_dataset.rows` (it works on the JSON form of a sample, so that the
``EchoBench`` builder can read a build folder without importing ``echo_builder``); this module gives it typed
entry points and groups samples per config for :func:`echo_dataset.writer.write_hub_folder`.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

from echo_builder.records import Sample
from echo_dataset import CONFIG_NAMES
from echo_dataset.rows import route_sample_dict, row_from_sample_dict

__all__ = ["route", "rows_by_config", "sample_to_row"]


def route(sample: Sample) -> str | None:
    """The config of ``sample`` (``image_to_image``, ``text_to_image``, ``analysis``) or ``None`` when dropped.

    Tier Benchmark (or, untiered, quality Benchmark) with input images -> ``image_to_image``, without ->
    ``text_to_image``; Analysis / Manual Review -> ``analysis``; Trash / Discard -> ``None``. A sample that needs
    input images but has none goes to ``analysis`` with review "input image".
    """
    return route_sample_dict(sample.model_dump(mode="json"))


def sample_to_row(sample: Sample, *, media_root: str | Path | None = None) -> dict[str, Any]:
    """The dataset row of ``sample``: image columns hold ``MediaRef.path`` (relative to ``media_root``, where
    the writer finds the files; ``None`` when not downloaded) and the URL twins hold ``MediaRef.url``.

    ``media_root`` is accepted for symmetry with the writer and checked to exist when given; paths stay relative
    so rows do not depend on where the media store lives.
    """
    if media_root is not None and not Path(media_root).is_dir():
        raise FileNotFoundError(f"media root {str(media_root)!r} is not a folder")
    return row_from_sample_dict(sample.model_dump(mode="json"))


def rows_by_config(
    samples: Iterable[Sample], *, media_root: str | Path | None = None
) -> tuple[dict[str, list[dict[str, Any]]], int]:
    """Rows grouped per config, and the number of samples dropped (Trash / Discard)."""
    grouped: dict[str, list[dict[str, Any]]] = {c: [] for c in CONFIG_NAMES}
    dropped = 0
    for sample in samples:
        config = route(sample)
        if config is None:
            dropped += 1
        else:
            grouped[config].append(sample_to_row(sample, media_root=media_root))
    return grouped, dropped
