"""Shared images of the face-identity tests (scikit-image's bundled photos); a pytest plugin loaded by
tests/conftest.py. The tests that use them skip when scikit-image is absent."""

from __future__ import annotations

import io

import numpy as np
import pytest


@pytest.fixture(scope="module")
def astronaut() -> np.ndarray:
    return pytest.importorskip("skimage.data").astronaut()


@pytest.fixture(scope="module")
def coffee() -> np.ndarray:
    return pytest.importorskip("skimage.data").coffee()


@pytest.fixture(scope="module")
def same_person_variants(astronaut) -> dict[str, np.ndarray]:
    """Edits of the astronaut photo that keep the person: hue shift, horizontal flip, half size."""
    from PIL import Image
    from skimage.color import hsv2rgb, rgb2hsv

    hsv = rgb2hsv(astronaut)
    hsv[..., 0] = (hsv[..., 0] + 0.15) % 1.0
    return {
        "hue_shift": np.clip(np.rint(hsv2rgb(hsv) * 255), 0, 255).astype(np.uint8),
        "flip": np.ascontiguousarray(astronaut[:, ::-1]),
        "downscale": np.asarray(Image.fromarray(astronaut).resize((256, 256), Image.BILINEAR)),
    }


def png_bytes(array: np.ndarray) -> bytes:
    from PIL import Image

    buffer = io.BytesIO()
    Image.fromarray(array).save(buffer, format="PNG")
    return buffer.getvalue()
