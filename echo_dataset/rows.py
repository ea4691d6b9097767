"""Dataset rows from samples in their JSON form, and ECHO's routing of samples to configs.

A *row* is a dict with exactly the columns of :data:`echo_dataset.features.COLUMNS`, except that image columns
hold paths relative to a media root (``None`` where the image was never downloaded); the writer turns them into
embedded ``{"bytes", "path"}`` images. Working on the JSON form of ``echo_builder.records.Sample`` (what the
build writes to ``OUT/stages/*.jsonl``) keeps this package free of ``echo_builder``; ``echo_builder.dataset_rows``
is the typed adapter.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime, timezone
from typing import Any

from echo_dataset.errors import RowError
from echo_dataset.features import APPLICABILITY_FLAGS
from echo_dataset.release import feedback_items

__all__ = ["INPUT_IMAGE_REVIEW", "route_sample_dict", "row_from_sample_dict"]

#: ``review`` of a sample that needs its user's input image(s) but has none.
INPUT_IMAGE_REVIEW = "input image"

_FLAGS = APPLICABILITY_FLAGS
_LABEL_OF_QUALITY = {"Benchmark": "Benchmark", "Analysis": "Analysis", "Trash": "Discard"}
_TIERS = ("Benchmark", "Analysis", "Manual Review", "Discard")


def _missing_inputs(sample: Mapping[str, Any]) -> bool:
    return bool(sample.get("needs_input_images")) and not sample.get("input_images")


def route_sample_dict(sample: Mapping[str, Any]) -> str | None:
    """The config of a sample (JSON form): ``image_to_image``, ``text_to_image``, ``analysis`` or ``None``.

    ECHO's routing: the final ``tier`` (or, before tiering, the extract ``quality``) Benchmark goes to
    ``image_to_image`` when the sample has input images and to ``text_to_image`` otherwise; Analysis (tier or
    quality) and Manual Review go to ``analysis``; Trash and Discard are dropped (``None``; the writer's caller
    counts them). A Benchmark sample that needs input images but has none goes to ``analysis`` (review: input
    image).
    """
    label = _label(sample)
    if label == "Discard":
        return None
    if label in ("Analysis", "Manual Review") or _missing_inputs(sample):
        return "analysis"
    return "image_to_image" if sample.get("input_images") else "text_to_image"


def _label(sample: Mapping[str, Any]) -> str:
    """The sample's final tier, or before tiering the tier its extract quality stands for."""
    tier = sample.get("tier")
    label = tier if tier is not None else _LABEL_OF_QUALITY.get(sample.get("quality", "Analysis"))
    if label not in _TIERS:
        raise RowError(
            f"sample {sample.get('id')!r}: tier {tier!r} / quality {sample.get('quality')!r} is not one of "
            f"{', '.join(_TIERS)} / Benchmark, Analysis, Trash"
        )
    return label


def _iso_utc(value: Any) -> str | None:
    if value is None or value == "":
        return None
    if isinstance(value, str):
        try:
            value = datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            raise RowError(f"created_at {value!r} is not an ISO 8601 time") from None
    if not isinstance(value, datetime):
        raise RowError(f"created_at must be a datetime or ISO 8601 string, got {type(value).__name__}")
    if value.tzinfo is None:  # naive times are UTC by convention, as in echo_builder.records
        value = value.replace(tzinfo=timezone.utc)
    return value.astimezone(timezone.utc).isoformat().replace("+00:00", "Z")


def _field(obj: Any, name: str) -> Any:
    return obj.get(name) if isinstance(obj, Mapping) else getattr(obj, name, None)


def _feedback_list(value: Any) -> Any:
    """Feedback items: a text cell (the authors' release stores JSON, Python repr or prose) is read with
    :func:`echo_dataset.release.feedback_items`, never split into characters."""
    return feedback_items(value) if isinstance(value, str) else value or ()


def row_from_sample_dict(sample: Mapping[str, Any]) -> dict[str, Any]:
    """The dataset row of a sample in JSON form (``Sample.model_dump(mode="json")`` or a stage JSONL line).

    Image columns get each ``MediaRef.path`` (relative to the media root, ``None`` when not downloaded) and the
    URL twins each ``MediaRef.url`` (falling back to the media id), position by position.
    """
    if not sample.get("id"):
        raise RowError(f"a sample without an id cannot become a row: {dict(sample)!r:.200}")
    flags = sample.get("applicability") or {}
    review = sample.get("review")
    if review is None and _missing_inputs(sample) and _label(sample) in ("Benchmark", "Manual Review"):
        review = INPUT_IMAGE_REVIEW
    row: dict[str, Any] = {
        "id": str(sample["id"]),
        "prompt": sample.get("prompt") or "",
        "prompt_modified": bool(sample.get("prompt_modified", False)),
        "prompt_fill_blank": bool(sample.get("prompt_fill_blank", False)),
    }
    for column, twin in (("input_images", "input_image_urls"), ("output_images", "output_image_urls")):
        refs = list(sample.get(column) or ())
        row[column] = [_field(r, "path") for r in refs]
        row[twin] = [_field(r, "url") or _field(r, "media_id") for r in refs]
    row.update(
        {
            "is_screenshot": bool(sample.get("is_screenshot", False)),
            "input_bboxes": [
                {k: _field(b, k) for k in ("x1", "y1", "x2", "y2")} | {"role": _field(b, "role") or "input"}
                for b in sample.get("input_bboxes") or ()
            ],
            "community_feedback": [
                {"post_url": _field(f, "post_url"), "feedback": _field(f, "feedback")}
                for f in _feedback_list(sample.get("community_feedback"))
            ],
            "quality": sample.get("quality"),
            "tier": sample.get("tier"),
            "review": review,
            **{flag: _field(flags, flag) for flag in _FLAGS},
            "source_post_urls": list(sample.get("post_urls") or sample.get("source_post_urls") or ()),
            "platform": sample.get("platform"),
            "created_at": _iso_utc(sample.get("created_at")),
            "has_nsfw": sample.get("has_nsfw"),
            "needs_input_images": bool(sample.get("needs_input_images", False)),
            "media_errors": list(sample.get("media_errors") or ()),
        }
    )
    return row
