"""How much the few remaining differences from ECHO's own code move the metrics, measured on real images.

Run from the repository root:  python -m bench.metric_differences [--dino-weights FILE]

ECHO's code decodes with ``Image.open(path).convert("RGB")`` and resizes for DINO the way torchvision's
``Resize`` does on a PIL image (Pillow's antialiased bilinear filter). This package differs in four places, each
chosen for a reason given in docs/metrics.md; this script measures each difference on the shared real images
(``../shared/data`` or ``$ECHO_SHARED_DATA``; scikit-image's astronaut for the face case):

1. alpha: a (partly) transparent pixel is composited on white here; ``convert("RGB")`` drops alpha and keeps whatever RGB
   the file stores under it (the two agree on opaque images);
2. several inputs: color shift pools the histograms of every input image of a sample here; ECHO's code compares
   the output with one input image (the first);
3. structure resize: bicubic (antialiased) here, bilinear (antialiased) in ECHO's code;
4. EXIF orientation: applied here (the image as viewers show it), ignored by ``convert("RGB")``.

Prints a Markdown table: the metric on each reading and the difference. Structure distance uses ``--dino-weights``
(a local ``vit_small_patch16_224.dino`` file) when given, else seeded random weights (the numbers then show that
a difference exists, not its size under DINO).
"""

from __future__ import annotations

import argparse
import io
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image

__all__ = ["echo_reading", "reference_differences"]


def _shared_data() -> Path | None:
    folder = Path(os.environ.get("ECHO_SHARED_DATA", Path(__file__).resolve().parents[2] / "shared" / "data"))
    return folder if folder.is_dir() else None


def echo_reading(data: bytes) -> np.ndarray:
    """uint8 (H, W, 3): ``data`` decoded as ECHO's code does (``convert("RGB")``: alpha dropped, EXIF ignored)."""
    with Image.open(io.BytesIO(data)) as img:
        return np.asarray(img.convert("RGB"))


def _png(image: Image.Image) -> bytes:
    buffer = io.BytesIO()
    image.save(buffer, format="PNG")
    return buffer.getvalue()


def _border_alpha(rgb: Image.Image, under: str) -> bytes:
    """``rgb`` as an RGBA PNG whose outer 15% on each side is transparent (a cut-out on a transparent background).

    ``under``: ``"kept"`` (fully transparent, the original colors stored under it), ``"black"`` (fully
    transparent, black stored under it, as many editors do) or ``"soft"`` (alpha fading from 1 to 0 over the
    border, colors kept: a soft vignette; antialiased edges are the small-scale case).
    """
    width, height = rgb.size
    x = np.minimum(np.arange(width), np.arange(width)[::-1]) / (0.15 * width)
    y = np.minimum(np.arange(height), np.arange(height)[::-1]) / (0.15 * height)
    ramp = np.clip(np.minimum(x[None, :], y[:, None]), 0, 1)
    alpha = ramp if under == "soft" else (ramp >= 1).astype(np.float64)
    pixels = np.asarray(rgb.convert("RGB"), dtype=np.float64)
    if under == "black":
        pixels = pixels * (alpha[..., None] > 0)
    rgba = np.dstack([pixels, alpha * 255]).round().astype(np.uint8)
    return _png(Image.fromarray(rgba, "RGBA"))


def _with_orientation(image: Image.Image) -> bytes:
    """A JPEG whose stored pixels are ``image`` turned 90 degrees, with EXIF orientation 6 ("rotate 90 CW to
    view"): viewers, and this package, show ``image`` upright."""
    exif = Image.Exif()
    exif[0x0112] = 6
    buffer = io.BytesIO()
    image.convert("RGB").transpose(Image.Transpose.ROTATE_90).save(
        buffer, format="JPEG", quality=95, exif=exif
    )
    return buffer.getvalue()


def _structure(weights: str) -> Callable[[list[Any], list[Any], Any], float]:
    """structure distance of one pair with the given resample filter (patched into the scorer for the call)."""
    import echo_builder.scoring.structure as structure

    def run(inputs: list[Any], output: Any, resample: Any) -> float:
        original = structure._resized

        def resized(image: Any, name: str | None = None) -> np.ndarray:
            rgb = structure.load_rgb(image, name=name)
            return np.asarray(rgb.resize((structure.IMAGE_SIZE, structure.IMAGE_SIZE), resample))

        structure._resized = resized
        try:
            return float(structure.structure_distance([inputs], [output], weights=weights).values[0])
        finally:
            structure._resized = original

    return run


def reference_differences(dino_weights: str | None = None) -> list[tuple[str, str, float, float]]:
    """Measure each difference: rows of (difference, case, value here, value with ECHO's reading).

    Raises:
        FileNotFoundError: the shared data folder is absent.
    """
    from echo_builder.scoring.color import color_shift

    data = _shared_data()
    if data is None:
        raise FileNotFoundError("the shared data folder is absent: set ECHO_SHARED_DATA")
    pairs = data / "image_pairs"
    after = (pairs / "yellow_tint" / "gpt4o_after.webp").read_bytes()
    before = (pairs / "yellow_tint" / "gpt4o_before.webp").read_bytes()
    edits = pairs / "genai_arena_edits"
    strawberries, oranges = (edits / "strawberries.jpg").read_bytes(), (edits / "oranges.jpg").read_bytes()
    duck, duck_hat = (edits / "duck.jpg").read_bytes(), (edits / "duck_hat.jpg").read_bytes()
    rows: list[tuple[str, str, float, float]] = []

    def color(inputs: list[Any], output: Any) -> float:
        return float(color_shift([inputs], [output]).values[0])

    # 1. alpha
    after_img = Image.open(io.BytesIO(after))
    for under, label in (
        ("kept", "transparent, colors kept under"),
        ("black", "transparent, black under"),
        ("soft", "alpha fading to 0"),
    ):
        cut = _border_alpha(after_img, under)
        rows.append(
            (
                "alpha: composited on white vs dropped",
                f"color shift, yellow_tint after vs itself with its outer 15% {label}",
                color([after], cut),
                color([echo_reading(after)], echo_reading(cut)),
            )
        )
    # 2. several inputs
    rows.append(
        (
            "several inputs: pooled vs first only",
            "color shift, inputs strawberries + duck, output oranges",
            color([strawberries, duck], oranges),
            color([strawberries], oranges),
        )
    )
    # 3. structure resize
    weights = dino_weights or "random:0"
    structure = _structure(weights)
    for name, (inp, out) in {
        "yellow_tint before vs after": (before, after),
        "strawberries vs oranges": (strawberries, oranges),
        "duck vs duck_hat": (duck, duck_hat),
    }.items():
        rows.append(
            (
                "structure resize: bicubic vs bilinear",
                f"structure distance ({'DINO' if dino_weights else 'random:0 weights'}), {name}",
                structure([inp], out, Image.Resampling.BICUBIC),
                structure([inp], out, Image.Resampling.BILINEAR),
            )
        )
    # 4. EXIF orientation
    duck_img = Image.open(io.BytesIO(duck))
    turned = _with_orientation(duck_img)
    rows.append(
        (
            "EXIF orientation: applied vs ignored",
            "color shift, duck vs the same photo stored turned with EXIF orientation 6",
            color([duck], turned),
            color([echo_reading(duck)], echo_reading(turned)),
        )
    )
    rows.append(
        (
            "EXIF orientation: applied vs ignored",
            f"structure distance ({'DINO' if dino_weights else 'random:0 weights'}), the same pair",
            structure([duck], turned, Image.Resampling.BICUBIC),
            structure([echo_reading(duck)], echo_reading(turned), Image.Resampling.BICUBIC),
        )
    )
    try:
        from skimage.data import astronaut

        from echo_builder.scoring.faces import face_identity

        face = Image.fromarray(astronaut())
        turned_face = _with_orientation(face)
        rows.append(
            (
                "EXIF orientation: applied vs ignored",
                "face identity (dlib), astronaut vs the same photo stored turned with EXIF orientation 6",
                float(face_identity([[face]], [turned_face]).values[0]),
                float(face_identity([[np.asarray(face)]], [echo_reading(turned_face)]).values[0]),
            )
        )
    except ImportError:  # scikit-image or dlib absent: that row is left out
        pass
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--dino-weights", help="local vit_small_patch16_224.dino weights (default: random:0)")
    args = parser.parse_args()
    print("| difference | case | here | ECHO's reading | difference |")
    print("|---|---|---|---|---|")
    for what, case, ours, theirs in reference_differences(args.dino_weights):
        print(f"| {what} | {case} | {ours:.4f} | {theirs:.4f} | {ours - theirs:+.4f} |")


if __name__ == "__main__":
    main()
