"""Benchmark: the dataset writer and loader.

Run from the repository root:  python -m bench.dataset [--samples 10000]

Writes ``--samples`` image-to-image rows, each embedding one 1024x768 JPEG input and one output from a pool of 64
distinct images (real-looking gradients with noise, about the size of web images), with ``write_hub_folder``;
reports rows/s, peak memory (max RSS of this process), and the Parquet size against the raw image bytes. Then loads
the config with ``datasets.load_dataset`` (offline) and decodes every image: rows/s.
"""

from __future__ import annotations

import argparse
import io
import os
import resource
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
from PIL import Image


def make_pool(folder: Path, n: int = 64) -> list[tuple[str, int]]:
    """``n`` JPEGs in a content-addressed layout; returns (relative path, size in bytes)."""
    rng = np.random.default_rng(0)
    out = []
    y, x = np.mgrid[0:768, 0:1024]
    for i in range(n):
        base = np.stack([(x * (i + 1)) % 256, (y * 2 + i * 7) % 256, ((x + y) // 4 + i * 13) % 256], axis=-1)
        noisy = np.clip(base + rng.normal(0, 12, base.shape), 0, 255).astype(np.uint8)
        buf = io.BytesIO()
        Image.fromarray(noisy).save(buf, format="JPEG", quality=85)
        name = f"{i:02x}/{i:064x}.jpg"
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_bytes(buf.getvalue())
        out.append((name, len(buf.getvalue())))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--samples", type=int, default=10_000)
    args = parser.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    with tempfile.TemporaryDirectory() as tmp:
        os.environ["HF_HOME"] = str(Path(tmp) / "hf")
        import datasets

        from echo_dataset.writer import write_hub_folder

        media = Path(tmp) / "media"
        pool = make_pool(media)
        rows, raw_bytes = [], 0
        created = datetime(2025, 3, 27, tzinfo=timezone.utc).isoformat()
        for i in range(args.samples):
            inp, out = pool[i % len(pool)], pool[(i * 7 + 3) % len(pool)]
            raw_bytes += inp[1] + out[1]
            rows.append(
                {
                    "id": f"echo-{i:016x}",
                    "prompt": f"edit number {i}: put it in a green field",
                    "created_at": created,
                    "input_images": [inp[0]],
                    "input_image_urls": [f"https://e.com/{i}/in.jpg"],
                    "output_images": [out[0]],
                    "output_image_urls": [f"https://e.com/{i}/out.jpg"],
                    "quality": "Benchmark",
                    "tier": "Benchmark",
                    "platform": "x",
                }
            )
        folder = Path(tmp) / "hub"
        start = time.perf_counter()
        write_hub_folder(
            {"image_to_image": rows},
            folder,
            media_root=media,
            pseudonymize=False,
            card_context={"target_model": "bench", "backend": "rules"},
        )
        write_s = time.perf_counter() - start
        rss_gb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6
        parquet = sum(p.stat().st_size for p in folder.rglob("*.parquet"))
        start = time.perf_counter()
        ds = datasets.load_dataset(str(folder), "image_to_image")["test"]
        n = 0
        for row in ds:
            row["input_images"][0].load()
            row["output_images"][0].load()
            n += 1
        load_s = time.perf_counter() - start
    print("| measure | value |\n|---|---|")
    print(
        f"| rows written ({args.samples:,}, 2 embedded 1024x768 JPEGs each) | {args.samples / write_s:,.0f} rows/s ({write_s:.1f} s) |"
    )
    print(f"| peak memory (max RSS, whole process) | {rss_gb:.2f} GB |")
    print(
        f"| Parquet size vs raw image bytes | {parquet / 1e6:,.0f} MB vs {raw_bytes / 1e6:,.0f} MB ({parquet / raw_bytes:.3f}x) |"
    )
    print(f"| load_dataset + decode both images | {n / load_s:,.0f} rows/s ({load_s:.1f} s) |")


if __name__ == "__main__":
    main()
