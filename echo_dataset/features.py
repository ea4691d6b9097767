"""Explicit ``datasets.Features`` of ECHO's three configs, and what each column means.

All three configs (``image_to_image``, ``text_to_image``, ``analysis``) share one schema, so a row can move
between configs (a re-tiering) without a schema change and every consumer reads the same columns; a
``text_to_image`` row simply has empty ``input_images``.

Column decisions:

- Images are ``List(Image())`` with a URL twin ``*_image_urls`` of the same length: position ``i`` of both
  describes the same image. An image that was never downloaded (or whose file is gone) is ``None`` in the image
  list while its URL stays, so nothing the community posted is lost.
- ``created_at`` is an ISO 8601 UTC string (``2025-03-27T12:34:56Z``), not an Arrow timestamp: it reads the same
  through ``datasets``, ``pyarrow`` and JSON, and ECHO's consumers compare it as text.
- Applicability flags and ``has_nsfw`` are nullable booleans: ``None`` means unknown (the classifier failed or did
  not run), never "not applicable".
"""

from __future__ import annotations

import datasets
from datasets import Features, Image, List, Value

from echo_dataset import CONFIG_NAMES
from echo_dataset.errors import RowError

__all__ = [
    "APPLICABILITY_FLAGS",
    "COLUMNS",
    "COLUMN_DOCS",
    "IMAGE_COLUMNS",
    "URL_TWINS",
    "echo_features",
    "features_for",
]

#: The applicability-flag columns (nullable booleans), in schema order. The metrics that read them are declared in
#: ``echo_builder``'s metric registry (each metric's ``applicability_flag``); this package only stores them.
APPLICABILITY_FLAGS = ("face_identity", "structure", "no_color_shift", "text_rendering")

#: Every column, in schema order, with its meaning (rendered into the dataset card).
COLUMN_DOCS: dict[str, str] = {
    "id": "Stable sample id, deterministic from the source post ids.",
    "prompt": "The user's prompt, verbatim where possible.",
    "prompt_modified": "True when the prompt was stitched from several posts or its placeholders were filled.",
    "prompt_fill_blank": "True when the prompt is a fill-in-the-blank template ([x], <x>, {x}).",
    "input_images": "Images given to the model (image-to-image); None where the image could not be downloaded.",
    "output_images": "The community's outputs of the target model; None where the image could not be downloaded.",
    "input_image_urls": "Source URL of each input image, same order as input_images; always kept.",
    "output_image_urls": "Source URL of each output image, same order as output_images; always kept.",
    "is_screenshot": "True when the images come from a conversation screenshot.",
    "input_bboxes": "Boxes {x1, y1, x2, y2, role} found in a screenshot, in the screenshot's pixel frame.",
    "community_feedback": "What replies said about the output: [{post_url, feedback}].",
    "quality": "The extract stage's label: Benchmark, Analysis or Trash.",
    "tier": "Final label after the image stages: Benchmark, Analysis, Manual Review or Discard (None if not tiered).",
    "review": "For Manual Review (always set there), what to review: prompt, input image or output image.",
    "face_identity": "Face identity preservation applies (True / False / None = unknown).",
    "structure": "Structure (spatial position) preservation applies (True / False / None = unknown).",
    "no_color_shift": "No colour shift is expected, image-to-image (True / False / None = unknown).",
    "text_rendering": "Text rendering applies, text-to-image (True / False / None = unknown).",
    "source_post_urls": "Source post URLs ordered by importance; the first holds the task.",
    "platform": "Platform of the source posts (x, reddit, bluesky, ...).",
    "created_at": "Creation time of the first source post, ISO 8601 UTC string (2025-03-27T12:34:56Z).",
    "has_nsfw": "Safety-checker verdict; None unless a safety checker was configured.",
    "needs_input_images": "The task needs the user's own input image(s), whether or not they were found.",
    "media_errors": "One '<url or media id>: <reason>' per image that could not be fetched, decoded or found.",
}

IMAGE_COLUMNS = ("input_images", "output_images")
#: image column -> its URL twin
URL_TWINS = {"input_images": "input_image_urls", "output_images": "output_image_urls"}


def echo_features() -> Features:
    """The ``Features`` every ECHO config uses (a fresh object on each call)."""
    string, boolean, f32 = Value("string"), Value("bool"), Value("float32")
    return Features(
        {
            "id": string,
            "prompt": string,
            "prompt_modified": boolean,
            "prompt_fill_blank": boolean,
            "input_images": List(Image()),
            "output_images": List(Image()),
            "input_image_urls": List(string),
            "output_image_urls": List(string),
            "is_screenshot": boolean,
            "input_bboxes": List({"x1": f32, "y1": f32, "x2": f32, "y2": f32, "role": string}),
            "community_feedback": List({"post_url": string, "feedback": string}),
            "quality": string,
            "tier": string,
            "review": string,
            "face_identity": boolean,
            "structure": boolean,
            "no_color_shift": boolean,
            "text_rendering": boolean,
            "source_post_urls": List(string),
            "platform": string,
            "created_at": string,
            "has_nsfw": boolean,
            "needs_input_images": boolean,
            "media_errors": List(string),
        }
    )


COLUMNS = tuple(echo_features())


def features_for(config: str) -> datasets.Features:
    """The ``Features`` of ``config`` (one of :data:`echo_dataset.CONFIG_NAMES`)."""
    if config not in CONFIG_NAMES:
        raise RowError(f"unknown config {config!r}; ECHO's configs are {', '.join(CONFIG_NAMES)}")
    return echo_features()
