"""Benchmark: the dataset writer and loader.

Run from the repository root:  python -m bench.dataset [--samples 10000]

Writes ``--samples`` image-to-image rows, each embedding one 1024x768 JPEG input and one output from a pool of 64
distinct images (real-looking gradients with noise, about the size of web images), with ``write_hub_folder``;
reports rows/s, peak memory (max RSS of this process), and the Parquet size against the raw image bytes. Then loads
the config with ``datasets.load_dataset`` (offline) and decodes every image: rows/s.

``python -m bench.dataset --big [--samples 30000] [--max-shard-size 100MB]``: the analysis split's scale (ECHO kept
29k analysis rows with images). Writes the rows as shards of bounded size, then, each in a fresh process so that
its peak memory (max RSS) is its own: ``load_dataset`` of the config and a pass decoding every image, and
``echo_dataset.loading.iter_config`` over every row. Reports shards, sizes and peak memory against the Parquet size.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import resource
import subprocess
import sys
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


def _rows(pool: list[tuple[str, int]], samples: int) -> tuple[list[dict], int]:
    rows, raw_bytes = [], 0
    created = datetime(2025, 3, 27, tzinfo=timezone.utc).isoformat()
    for i in range(samples):
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
    return rows, raw_bytes


def _anon_rss() -> int:
    """This process's anonymous resident memory in bytes (Linux ``RssAnon``): its own allocations, without the
    pages of memory-mapped files (``datasets`` maps its Arrow cache; those pages are the kernel's to drop)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("RssAnon:"):
            return int(line.split()[1]) * 1024
    return 0


def _child(phase: str, folder: str, config: str) -> None:
    """One read phase in this (fresh) process; prints JSON with rows, seconds, this process's peak RSS and its
    peak anonymous RSS (sampled every 50 rows)."""
    start = time.perf_counter()
    n, anon = 0, _anon_rss()
    if phase == "load_dataset":
        import datasets

        for row in datasets.load_dataset(folder, config, split="test"):
            for column in ("input_images", "output_images"):
                for image in row[column]:
                    image.load()
            n += 1
            if n % 50 == 0:
                anon = max(anon, _anon_rss())
    else:
        from echo_dataset.loading import iter_config

        for row in iter_config(folder, config):
            n += len(row["input_images"]) > 0
            if n % 50 == 0:
                anon = max(anon, _anon_rss())
    seconds = time.perf_counter() - start
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    print(json.dumps({"rows": n, "s": seconds, "rss": rss, "anon": max(anon, _anon_rss())}))


def big(samples: int, max_shard_size: str) -> None:
    from datasets.utils.py_utils import convert_file_size_to_int

    from echo_dataset.writer import write_hub_folder

    with tempfile.TemporaryDirectory() as tmp:
        env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_HOME": str(Path(tmp) / "hf")}
        media = Path(tmp) / "media"
        pool = make_pool(media)
        rows, raw_bytes = _rows(pool, samples)
        folder = Path(tmp) / "hub"
        start = time.perf_counter()
        write_hub_folder(
            {"analysis": rows},
            folder,
            media_root=media,
            pseudonymize=False,
            card_context={"target_model": "bench", "backend": "rules"},
            max_shard_bytes=convert_file_size_to_int(max_shard_size),
        )
        write_s = time.perf_counter() - start
        write_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
        shards = sorted((folder / "analysis").glob("*.parquet"))
        sizes = [p.stat().st_size for p in shards]
        del rows
        phases = {}
        for phase in ("load_dataset", "iter_config"):
            out = subprocess.run(
                [sys.executable, "-m", "bench.dataset", "--child", phase, str(folder)],
                env=env,
                capture_output=True,
                text=True,
                check=True,
            )
            phases[phase] = json.loads(out.stdout.strip().splitlines()[-1])
    gb = 1e9
    print(f"| measure ({samples:,} analysis rows, 2 embedded 1024x768 JPEGs each) | value |\n|---|---|")
    print(f"| Parquet written | {sum(sizes) / gb:.2f} GB in {len(shards)} shards (largest {max(sizes) / 1e6:,.0f} MB; "
          f"limit {max_shard_size}) from {raw_bytes / gb:.2f} GB of image bytes |")  # fmt: skip
    print(f"| write | {samples / write_s:,.0f} rows/s ({write_s:.0f} s); peak RSS {write_rss / gb:.2f} GB |")
    for phase, label in (
        ("load_dataset", "load_dataset + decode every image"),
        ("iter_config", "iter_config"),
    ):
        r = phases[phase]
        print(f"| {label} (fresh process) | {r['rows'] / r['s']:,.0f} rows/s ({r['s']:.0f} s); peak RSS "
              f"{r['rss'] / gb:.2f} GB, of which anonymous {r['anon'] / gb:.2f} GB "
              f"({r['anon'] / sum(sizes):.2f}x the Parquet size) |")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--samples", type=int, default=None, help="rows (default 10,000; 30,000 with --big)")
    parser.add_argument("--big", action="store_true", help="the analysis split's scale, written as shards")
    parser.add_argument("--max-shard-size", default="100MB")
    parser.add_argument("--child", nargs=2, metavar=("PHASE", "FOLDER"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        _child(args.child[0], args.child[1], "analysis")
        return
    if args.big:
        big(args.samples or 30_000, args.max_shard_size)
        return
    args.samples = args.samples or 10_000
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    with tempfile.TemporaryDirectory() as tmp:
        os.environ["HF_HOME"] = str(Path(tmp) / "hf")
        import datasets

        from echo_dataset.writer import write_hub_folder

        media = Path(tmp) / "media"
        pool = make_pool(media)
        rows, raw_bytes = _rows(pool, args.samples)
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
