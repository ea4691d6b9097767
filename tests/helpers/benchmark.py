"""Small hub-shaped benchmark folders and model-output folders built inside tests."""

from __future__ import annotations

import io
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from PIL import Image


def png_bytes(image: Image.Image) -> bytes:
    buf = io.BytesIO()
    image.save(buf, format="PNG")
    return buf.getvalue()


def make_benchmark(folder: Path, config: str, samples: Sequence[Mapping[str, Any]]) -> Path:
    """Write ``<folder>/<config>/test-00000-of-00001.parquet`` with ``id``, ``prompt`` and ``input_images``.

    Each sample gives ``id``, ``prompt`` and optionally ``inputs`` (PIL images or encoded bytes).
    """
    import pyarrow as pa
    import pyarrow.parquet as pq

    image_type = pa.struct([("bytes", pa.binary()), ("path", pa.string())])
    rows = {
        "id": [s["id"] for s in samples],
        "prompt": [s["prompt"] for s in samples],
        "input_images": [
            [
                {"bytes": img if isinstance(img, bytes) else png_bytes(img), "path": None}
                for img in s.get("inputs", ())
            ]
            for s in samples
        ],
    }
    schema = pa.schema([("id", pa.string()), ("prompt", pa.string()), ("input_images", pa.list_(image_type))])
    (folder / config).mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table(rows, schema=schema), folder / config / "test-00000-of-00001.parquet")
    return folder


def make_outputs(folder: Path, outputs: Mapping[str, Mapping[str, Image.Image | bytes]]) -> Path:
    """Write ``<folder>/<model>/<sample_id>.png`` for every image given."""
    for model, images in outputs.items():
        (folder / model).mkdir(parents=True, exist_ok=True)
        for sample_id, img in images.items():
            data = img if isinstance(img, bytes) else png_bytes(img)
            (folder / model / f"{sample_id}.png").write_bytes(data)
    return folder
