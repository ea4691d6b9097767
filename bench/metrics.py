"""Benchmark: the community-driven metrics of ECHO Flow 3 on realistic image sizes.

Run from the repository root:  python -m bench.metrics [--pairs 24] [--repeats 3] [--images 32]
                                                      [--text-images 4] [--only color,structure,text,nsfw]
                                                      [--append]

A section whose optional extra is not installed is reported as skipped, with the install line.

Test images: 1024 x 1536 JPEGs (quality 90) written to a temp folder, from the shared ``yellow_tint`` pair when
``../shared/data`` (or ``$ECHO_SHARED_DATA``) is there, else from scikit-image's astronaut scaled up.

1. ``color_shift``: pairs/s end to end (decode both images + metric); the metric alone on decoded images against a
   plain per-channel ``np.histogram`` implementation (target: >= 3x faster) and against decoding (target: the
   metric costs <= 50% of the decode time). ``np.bincount`` per channel is shown as the middle ground.
2. ``structure_distance``: images/s on this machine's device with seeded random weights at batch 1 and 16
   (decode + resize + ViT forward), and the peak memory each batch size adds on top of the loaded model
   (CPU: peak RSS of a fresh subprocess; CUDA: ``torch.cuda.max_memory_allocated``).
3. ``text_accuracy`` (``--only text``, needs the ``ocr`` extra): PP-OCRv4 load time, then images/s end to end on
   ``--text-images`` 1024 x 1536 JPEGs (a photo with a five-line receipt card drawn on it), OCR alone, and the
   alignment alone; the mean score must be >= 0.9 (the receipt's text is rendered exactly).
4. ``nsfw`` (``--only nsfw``, needs the ``nsfw`` extra): NudeNet load time and images/s of
   :class:`~echo_builder.safety.NudeNetChecker` on the 1024 x 1536 JPEGs (all safe: none may be flagged).

Each timing is the best of ``--repeats`` runs (machines here are noisy). Prints a Markdown table; ``--append``
also appends it, with date and machine, to bench/RESULTS.md under "## Metrics (`python -m bench.metrics`)".
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import resource
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
from PIL import Image

from echo_builder.errors import MissingDependencyError
from echo_builder.imaging import load_rgb
from echo_builder.scoring.color import channel_histograms, color_shift, mean_rgb

RESULTS = Path(__file__).resolve().parent / "RESULTS.md"
HEADING = "## Metrics (`python -m bench.metrics`)"
REPO_ROOT = Path(__file__).resolve().parents[1]
SHARED_DATA = Path(os.environ.get("ECHO_SHARED_DATA", REPO_ROOT.parent / "shared" / "data"))
SIZE = (1024, 1536)  # width x height, as the shared yellow_tint images

Row = tuple[str, str, str]


def best_of(repeats: int, fn: Callable[[], object]) -> float:
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def make_jpegs(folder: Path, n_pairs: int) -> tuple[list[Path], list[Path], str]:
    """``n_pairs`` distinct (input, output) 1024x1536 JPEG pairs; the output carries a warm cast."""
    tint = SHARED_DATA / "image_pairs" / "yellow_tint"
    if (tint / "gpt4o_after.webp").is_file():
        base = np.asarray(load_rgb(tint / "gpt4o_after.webp").resize(SIZE, Image.Resampling.BICUBIC))
        origin = "the shared yellow_tint image re-encoded"
    else:
        from skimage import data

        base = np.asarray(Image.fromarray(data.astronaut()).resize(SIZE, Image.Resampling.BICUBIC))
        origin = "scikit-image's astronaut scaled up"
    cast = np.array([1.04, 0.9, 0.7])
    inputs, outputs = [], []
    for i in range(n_pairs):
        shifted = np.roll(base, 16 * i, axis=1)  # distinct content per pair, same statistics
        for name, pixels, bucket in (
            (f"in{i}.jpg", shifted, inputs),
            (f"out{i}.jpg", np.clip(shifted * cast, 0, 255).astype(np.uint8), outputs),
        ):
            Image.fromarray(pixels).save(folder / name, quality=90)
            bucket.append(folder / name)
    return inputs, outputs, origin


def _plain_means(image: Image.Image) -> np.ndarray:
    """The obvious implementation: one np.histogram per channel, then the kept-range mean."""
    pixels = np.asarray(image)
    levels = np.arange(5, 251)
    means = []
    for c in range(3):
        counts, _ = np.histogram(pixels[..., c], bins=256, range=(0, 256))
        kept = counts[5:251]
        means.append((kept * levels).sum() / kept.sum())
    return np.array(means)


def _bincount_means(image: Image.Image) -> np.ndarray:
    pixels = np.asarray(image)
    hist = np.stack([np.bincount(pixels[..., c].ravel(), minlength=256) for c in range(3)])
    return mean_rgb(hist)


def bench_color(
    args: argparse.Namespace, inputs: list[Path], outputs: list[Path]
) -> tuple[list[Row], list[str]]:
    inputs, outputs = inputs[: args.pairs], outputs[: args.pairs]
    n = len(inputs)
    decoded = [load_rgb(p) for p in inputs + outputs]
    t_decode = best_of(args.repeats, lambda: [load_rgb(p) for p in inputs + outputs])
    t_end_to_end = best_of(args.repeats, lambda: color_shift(inputs, outputs))
    t_ours = best_of(args.repeats, lambda: [mean_rgb(channel_histograms(img)) for img in decoded])
    t_bincount = best_of(args.repeats, lambda: [_bincount_means(img) for img in decoded])
    t_plain = best_of(args.repeats, lambda: [_plain_means(img) for img in decoded])
    # the three implementations agree (to float rounding) before their speeds are compared
    for img in decoded[:2]:
        ours = mean_rgb(channel_histograms(img))
        assert np.allclose(ours, _plain_means(img)) and np.allclose(ours, _bincount_means(img))
    speedup, share = t_plain / t_ours, t_ours / t_decode
    rows = [
        (
            f"color_shift end to end (decode 2 JPEGs + metric), {n} pairs",
            f"{n / t_end_to_end:.1f} pairs/s ({1e3 * t_end_to_end / n:.1f} ms/pair)",
            "",
        ),
        ("decoding alone (2 JPEGs)", f"{1e3 * t_decode / n:.1f} ms/pair", ""),
        ("metric alone: Pillow C histogram (used)", f"{1e3 * t_ours / n:.2f} ms/pair", ""),
        ("metric alone: np.bincount per channel", f"{1e3 * t_bincount / n:.2f} ms/pair", ""),
        ("metric alone: plain np.histogram per channel", f"{1e3 * t_plain / n:.2f} ms/pair", ""),
        (
            "speed-up over plain np.histogram",
            f"{speedup:.1f}x",
            f">= 3x: {'met' if speedup >= 3 else 'NOT met'}",
        ),
        (
            "metric time / decode time",
            f"{100 * share:.0f}%",
            f"<= 50%: {'met' if share <= 0.5 else 'NOT met'}",
        ),
    ]
    notes = [f"np.bincount alone is {t_plain / t_bincount:.1f}x the plain np.histogram version."]
    return rows, notes


def _status_kib(field: str) -> int | None:
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1])
    except OSError:
        pass
    return None


def _reset_peak_rss() -> int:
    """Reset the peak-RSS mark (Linux: ``5 > /proc/self/clear_refs``) and return the current RSS in bytes."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
        return 1024 * (_status_kib("VmRSS") or 0)
    except OSError:  # not Linux: fall back to the (never reset) high-water mark
        return 1024 * resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


def _peak_rss() -> int:
    hwm = _status_kib("VmHWM")
    return 1024 * (hwm if hwm is not None else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)


def _memory_worker(batch_size: int, paths: list[str]) -> dict:
    """Peak memory one pass at ``batch_size`` adds on top of the loaded model (run in a fresh process)."""
    import torch

    from echo_builder.scoring.structure import DinoStructure

    scorer = DinoStructure("random:0", batch_size=batch_size)
    cuda = scorer.device.type == "cuda"
    if cuda:
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    base_rss = _reset_peak_rss()  # after the model is loaded: what batches add on top of it
    scorer.self_similarity(paths)
    model_bytes = sum(p.numel() * p.element_size() for p in scorer._model.parameters())
    peak = torch.cuda.max_memory_allocated() - model_bytes if cuda else _peak_rss() - base_rss
    return {"peak_extra_mib": peak / 2**20}


def bench_structure(
    args: argparse.Namespace, inputs: list[Path], outputs: list[Path]
) -> tuple[list[Row], list[str]]:
    import torch

    from echo_builder.scoring.structure import DinoStructure, _resized

    paths = [str(p) for p in (inputs + outputs)[: args.images]]
    memory = {}
    for batch_size in (1, 16):
        done = subprocess.run(
            [sys.executable, "-m", "bench.metrics", "--memory-worker", str(batch_size)],
            input=json.dumps(paths),
            capture_output=True,
            text=True,
            check=True,
            cwd=REPO_ROOT,
        )
        memory[batch_size] = json.loads(done.stdout.strip().splitlines()[-1])["peak_extra_mib"]

    scorer = DinoStructure("random:0")
    cuda = scorer.device.type == "cuda"
    scorer.self_similarity(paths[:16])  # warm-up (one-time kernel setup), not timed

    def run(batch_size: int) -> None:
        scorer.batch_size = batch_size
        scorer.self_similarity(paths)
        if cuda:
            torch.cuda.synchronize()

    # batch sizes alternate within each repeat, so a busy moment on a shared machine hits both alike
    seconds = {1: float("inf"), 16: float("inf")}
    for _ in range(args.repeats):
        for batch_size in seconds:
            seconds[batch_size] = min(seconds[batch_size], best_of(1, lambda b=batch_size: run(b)))
    prep_ms = 1e3 * best_of(args.repeats, lambda: [_resized(p) for p in paths]) / len(paths)
    rate = {b: len(paths) / t for b, t in seconds.items()}
    where = f"{scorer.device}, {torch.get_num_threads()} torch threads, torch {torch.__version__}"
    rows = [
        (f"structure_distance images/s, batch 1 ({where})", f"{rate[1]:.1f} (1.0x)", ""),
        ("structure_distance images/s, batch 16", f"{rate[16]:.1f} ({rate[16] / rate[1]:.2f}x batch 1)", ""),
        (
            "of which decode + resize to 224x224 (one thread)",
            f"{prep_ms:.1f} ms/image ({prep_ms * rate[16] / 10:.0f}% of the batch-16 time)",
            "",
        ),
        ("peak memory added per batch, batch 1", f"{memory[1]:.0f} MiB", ""),
        ("peak memory added per batch, batch 16", f"{memory[16]:.0f} MiB", ""),
    ]
    notes = [
        f"structure_distance: {len(paths)} JPEGs of 1024x1536 through decode, bicubic resize to 224x224 and the "
        "ViT-S/16 forward; seeded random weights (same cost as the real ones); batch sizes timed alternately in "
        "one process. Memory: peak RSS over the RSS with the model loaded, one pass in a fresh process per "
        "batch size (CPU), or CUDA peak allocation minus the weights."
    ]
    return rows, notes


# --- Sections ---------------------------------------------------------------------------------------------------
# Each section is fn(args, inputs, outputs) -> (rows, notes), run in this order over the same temp JPEG pairs
# (at least max(--pairs, --images / 2) of them; a section takes the slice it needs).
# FACE IDENTITY: the face-identity benchmark (echo_builder/scoring/faces*.py) goes here as `bench_faces`,
# appended to SECTIONS and named "faces" in --only.
RECEIPT = ("CORNER CAFE", "2x Latte    $9.80", "1x Bagel    $3.20", "TOTAL $127.54", "THANK YOU")
RECEIPT_PROMPT = 'A photo with a receipt card that reads "CORNER CAFE" and "TOTAL $127.54"'


def make_text_images(folder: Path, photos: list[Path], n: int) -> list[Path]:
    """``n`` 1024x1536 JPEGs: a photo with a white receipt card of five text lines drawn on it (DejaVu Sans)."""
    from PIL import ImageDraw, ImageFont

    font_path = Path("/usr/share/fonts/truetype/dejavu/DejaVuSans-Bold.ttf")
    font = ImageFont.truetype(str(font_path), 44) if font_path.is_file() else ImageFont.load_default(44)
    paths = []
    for i in range(n):
        image = load_rgb(photos[i % len(photos)]).resize(SIZE)
        draw = ImageDraw.Draw(image)
        top = 200 + 40 * i
        draw.rectangle((140, top, 884, top + 520), fill=(250, 250, 245))
        draw.multiline_text((180, top + 40), "\n".join(RECEIPT), font=font, fill=(20, 20, 20), spacing=40)
        paths.append(folder / f"text{i}.jpg")
        image.save(paths[-1], quality=90)
    return paths


def bench_text(
    args: argparse.Namespace, inputs: list[Path], outputs: list[Path]
) -> tuple[list[Row], list[str]]:
    """text_accuracy with the real PP-OCRv4 weights: model load, then per image end to end, OCR alone, and the
    alignment alone (score of the OCR text against the required strings)."""
    from echo_builder.ocr import RapidOcrEngine
    from echo_builder.scoring.text_accuracy import required_strings, string_accuracy, text_accuracy

    with tempfile.TemporaryDirectory(prefix="echo-bench-text-") as tmp:
        images = make_text_images(Path(tmp), outputs, args.text_images)
        n = len(images)
        start = time.perf_counter()
        engine = RapidOcrEngine()
        t_load = time.perf_counter() - start
        result = text_accuracy([RECEIPT_PROMPT] * n, images, ocr=engine)  # warm-up; its values are checked
        t_end_to_end = best_of(args.repeats, lambda: text_accuracy([RECEIPT_PROMPT] * n, images, ocr=engine))
        decoded = [load_rgb(p) for p in images]
        t_ocr = best_of(args.repeats, lambda: [engine.read(img) for img in decoded])
        texts = result.extras["ocr_text"]
        required = required_strings(RECEIPT_PROMPT)
        t_align = best_of(args.repeats, lambda: [string_accuracy(r, t) for t in texts for r in required])
    rows = [
        ("text_accuracy: loading PP-OCRv4 (det + cls + rec, once per process)", f"{t_load:.2f} s", ""),
        (
            f"text_accuracy end to end (decode 1024x1536 JPEG + OCR + score), {n} images",
            f"{n / t_end_to_end:.2f} images/s ({t_end_to_end / n:.2f} s/image)",
            "",
        ),
        ("OCR alone on decoded images", f"{t_ocr / n:.2f} s/image", ""),
        ("alignment alone (2 required strings vs the OCR text)", f"{1e3 * t_align / n:.2f} ms/image", ""),
        (
            "mean text_accuracy on the rendered receipts",
            f"{result.mean():.3f}",
            f">= 0.9: {'met' if result.mean() >= 0.9 else 'NOT met'}",
        ),
    ]
    notes = [f"OCR engine: {engine.backend_id}; onnxruntime on {os.cpu_count()} CPU cores."]
    return rows, notes


def bench_nsfw(
    args: argparse.Namespace, inputs: list[Path], outputs: list[Path]
) -> tuple[list[Row], list[str]]:
    """NudeNetChecker with the shipped 320 px detector: model load and per-image screening (decode + detect)."""
    from echo_builder.safety import NudeNetChecker

    images = (inputs + outputs)[: args.images]
    checker = NudeNetChecker()
    start = time.perf_counter()
    detector_id = checker.detector_id  # loads the model
    t_load = time.perf_counter() - start
    flagged = sum(checker.check(p).flagged for p in images)
    t_check = best_of(args.repeats, lambda: [checker.check(p) for p in images])
    rows = [
        ("NSFW check: loading NudeNet 320n", f"{t_load:.2f} s", ""),
        (
            f"NSFW check per image (decode 1024x1536 JPEG + detect), {len(images)} images",
            f"{len(images) / t_check:.1f} images/s ({1e3 * t_check / len(images):.0f} ms/image)",
            f"flagged: {flagged} (safe images: 0 expected)",
        ),
    ]
    return rows, [f"NSFW detector: {detector_id}, threshold {checker.threshold}."]


SECTIONS: dict[str, Callable[[argparse.Namespace, list[Path], list[Path]], tuple[list[Row], list[str]]]] = {
    "color": bench_color,
    "structure": bench_structure,
    "text": bench_text,
    "nsfw": bench_nsfw,
}


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--pairs", type=int, default=24, help="input/output JPEG pairs for color_shift")
    parser.add_argument("--images", type=int, default=32, help="images for structure_distance")
    parser.add_argument("--text-images", type=int, default=4, help="1024x1536 images for text_accuracy")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--only", default=",".join(SECTIONS), help=f"comma-separated of {list(SECTIONS)}")
    parser.add_argument("--append", action="store_true", help="append the table to bench/RESULTS.md")
    parser.add_argument("--memory-worker", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.memory_worker:
        print(json.dumps(_memory_worker(args.memory_worker, json.loads(sys.stdin.read()))))
        return
    chosen = [name.strip() for name in args.only.split(",") if name.strip()]
    unknown = sorted(set(chosen) - set(SECTIONS))
    if unknown:
        parser.error(f"unknown section(s) {unknown}; choose from {list(SECTIONS)}")

    rows: list[Row] = []
    notes: list[str] = []
    with tempfile.TemporaryDirectory(prefix="echo-bench-metrics-") as tmp:
        n_pairs = max(args.pairs, (args.images + 1) // 2)
        inputs, outputs, origin = make_jpegs(Path(tmp), n_pairs)
        for name in chosen:
            try:
                section_rows, section_notes = SECTIONS[name](args, inputs, outputs)
            except MissingDependencyError as exc:
                section_rows, section_notes = [(f"{name}: skipped", "", str(exc))], []
            rows += section_rows
            notes += section_notes
    lines = ["| measure | value | target |", "|---|---|---|"]
    lines += [f"| {a} | {b} | {c} |" for a, b, c in rows]
    print("\n".join(lines))
    for note in notes:
        print(f"- {note}")
    if args.append:
        machine = (
            f"{os.cpu_count()} cores, {platform.machine()}, Python {platform.python_version()}, "
            f"numpy {np.__version__}, Pillow {Image.__version__}"
        )
        intro = (
            f"1024x1536 JPEG pairs (quality 90) made from {origin}; best of {args.repeats} runs; {machine}."
        )
        section = (
            f"\n{HEADING}, {dt.date.today().isoformat()}\n\n{textwrap.fill(intro, width=110)}\n\n"
            + "\n".join(lines)
            + "\n\nNotes:\n"
            + "\n".join(
                textwrap.fill(note, width=110, initial_indent="- ", subsequent_indent="  ") for note in notes
            )
            + "\n"
        )
        text = RESULTS.read_text(encoding="utf-8") if RESULTS.exists() else "# Benchmark results\n"
        RESULTS.write_text(text.rstrip("\n") + "\n" + section, encoding="utf-8")
        print(f"appended to {RESULTS}")


if __name__ == "__main__":
    main()
