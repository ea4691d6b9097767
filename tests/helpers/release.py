"""A small folder in the exact schema and layout of the authors' ECHO release, built inside tests.

``make_release(tmp)`` writes ``tmp/release/<config>/test-00000-of-00001.parquet`` with ``datasets`` (string
tokens in the image columns, feedback and boxes as strings in JSON / Python repr / prose / empty form),
``tmp/download/data/images_to_image/<id>/input_images/input_<k>.png`` in the download script's layout, and
``tmp/assignments/*.json`` metric-assignment files. Synthetic prompts and images only.
"""

from __future__ import annotations

import json
from pathlib import Path

from PIL import Image

# 22-character ids, as the release's shortuuids
I_RED = "Kx7pQ2mZ9rT4vW1yB3nC5d"  # media-id token, local copy, JSON feedback
I_BLUE = "Lm8qR3nA0sU5xX2zC4oD6e"  # URL token, local copy, Python-repr feedback
I_SHOT = "Mn9rS4oB1tV6yY3aD5pE7f"  # screenshot with a box, empty feedback, no assignment
I_MISSING = "Np0sT5pC2uW7zZ4bE6qF8g"  # media-id token without a local copy, prose feedback
T_MEDIA = "Pq1tU6qD3vX8aA5cF7rG9h"
T_URL = "Qr2uV7rE4wY9bB6dG8sH0i"
A_ONE = "Rs3vW8sF5xZ0cC7eH9tI1j"
RED, BLUE, GREEN, GREY = (200, 30, 30), (30, 40, 200), (20, 180, 40), (128, 128, 128)
SHOT_BOX = [20, 10, 120, 90]  # pixels of the 200 x 100 screenshot; its crop is [30, 20, 110, 80] (80 x 60)
MEDIA_IDS = {I_RED: "GnRedInput01", I_SHOT: "GnShotInput1", I_MISSING: "GnMissing001"}
BLUE_URL = "https://images.example.org/u/blue.png"


def screenshot() -> Image.Image:
    image = Image.new("RGB", (200, 100), GREY)
    image.paste(Image.new("RGB", (100, 80), GREEN), (20, 10))
    return image


def make_release(tmp: Path) -> dict[str, Path]:
    import datasets

    release, download, assignments = tmp / "release", tmp / "download", tmp / "assignments"
    strings = datasets.Sequence(datasets.Value("string"))
    common = {
        "id": datasets.Value("string"),
        "prompt": datasets.Value("string"),
        "prompt_modified": datasets.Value("bool"),
        "prompt_fill_blank": datasets.Value("bool"),
        "input_images": strings,
        "output_images": strings,
        "community_feedback": datasets.Value("string"),
        "has_nsfw": datasets.Value("bool"),
    }
    t2i = {
        "id": [T_MEDIA, T_URL],
        "prompt": ["a poster that says HELLO", "a cat on the moon"],
        "prompt_modified": [False, True],
        "prompt_fill_blank": [False, False],
        "input_images": [[], []],
        "output_images": [["GnTextOut001"], ["https://images.example.org/u/cat.png"]],
        "community_feedback": [
            json.dumps([{"post_url": "https://x.com/a/status/1", "feedback": "typo"}]),
            "nice",
        ],
        "has_nsfw": [False, False],
    }
    i2i = {
        "id": [I_RED, I_BLUE, I_SHOT, I_MISSING],
        "prompt": [
            "make it warmer",
            "keep the colours, add a hat",
            "edit the photo in the chat",
            "same face please",
        ],
        "prompt_modified": [False, False, False, False],
        "prompt_fill_blank": [False, False, False, False],
        "input_images": [[MEDIA_IDS[I_RED]], [BLUE_URL], [MEDIA_IDS[I_SHOT]], [MEDIA_IDS[I_MISSING]]],
        "output_images": [[], [], [], []],
        "community_feedback": [
            json.dumps([{"post_url": "https://x.com/b/status/2", "feedback": "it turned yellow"}]),
            repr([{"post_url": "https://x.com/c/status/3", "feedback": "colour drift"}]),
            "",
            "It changed her face",
        ],
        "has_nsfw": [False, False, False, False],
        "is_screenshot": [False, False, True, False],
        "input_bboxs": ["", "", json.dumps([SHOT_BOX]), "None"],
    }
    analysis = {
        "id": [A_ONE],
        "prompt": ["why does everything look yellow?"],
        "prompt_modified": [False],
        "quality": ["Analysis"],
        "community_feedback": [repr(["the yellow tint again"])],
    }
    i2i_features = {
        **common,
        "is_screenshot": datasets.Value("bool"),
        "input_bboxs": datasets.Value("string"),
    }
    a_features = {k: common[k] for k in ("id", "prompt", "prompt_modified", "community_feedback")}
    for config, data, features in (
        ("text_to_image", t2i, common),
        ("image_to_image", i2i, i2i_features),
        ("analysis", analysis, {**a_features, "quality": datasets.Value("string")}),
    ):
        (release / config).mkdir(parents=True, exist_ok=True)
        dataset = datasets.Dataset.from_dict(data, features=datasets.Features(features))
        dataset.to_parquet(str(release / config / "test-00000-of-00001.parquet"))
    for sample_id, image in (
        (I_RED, Image.new("RGB", (64, 48), RED)),
        (I_BLUE, Image.new("RGB", (48, 64), BLUE)),
        (I_SHOT, screenshot()),
    ):
        folder = download / "data" / "images_to_image" / sample_id / "input_images"
        folder.mkdir(parents=True, exist_ok=True)
        image.save(folder / "input_1.png")
    assignments.mkdir(parents=True, exist_ok=True)
    (assignments / "image_to_image.json").write_text(
        json.dumps(
            {
                "No Color Shift": [I_RED, I_MISSING],
                "Spatial Position Preservation": [I_RED, I_BLUE],
                "Face Identity Preservation": [I_MISSING],
            }
        )
    )
    (assignments / "text_to_image.json").write_text(json.dumps({"Text Rendering": [T_MEDIA]}))
    return {"release": release, "images": download, "assignments": assignments}
