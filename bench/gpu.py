"""Benchmark: the GPU paths, batched: DINO structure distance and a local VLM judge (transformers backend).

Run from the repository root on a machine with a CUDA GPU:

    python -m bench.gpu [--only structure,judge] [--images 256] [--judge-items 64] [--out DIR]

1. ``structure``: ``DinoStructure`` (ViT-S/16, seeded random weights: the same cost as the real ones) over
   1024x1536 JPEGs: images/s at batch 1, 16 and 64, decoding in the calling thread or in 8 threads
   (``num_workers``), against the same machine's CPU at batch 16; CUDA peak memory per batch size.
2. ``judge``: ECHO's single-answer grading (``Judge.asingle``) through the ``transformers:`` backend with a
   random-weight model of Qwen2-VL-2B's dimensions in bfloat16: items/s and generated tokens/s at batch 1, 8
   and 32, every reply capped at ``--max-tokens`` (random weights never stop early, so every item decodes the
   full budget, and carries no ``[[N]]``, so each item also gets ECHO's one re-ask: two generations per item,
   the worst case). Prompt tokens are counted as sent: the test tokenizer has few merges, so
   the text part is several times longer than the real tokenizer would make it.

Prints a Markdown table and writes it, with the raw numbers as JSON, to ``--out`` (default: ``bench/out``).
``python -m bench.gpu --append FILE.json`` appends a saved result to bench/RESULTS.md (used after copying the
result back from the GPU machine).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import tempfile
import time
from pathlib import Path
from typing import Any

HEADING = "## GPU paths (`python -m bench.gpu`)"


def _sync() -> None:
    import torch

    if torch.cuda.is_available():
        torch.cuda.synchronize()


def bench_structure(args: argparse.Namespace, folder: Path) -> tuple[list[tuple[str, str]], dict[str, Any]]:
    import torch

    from bench.metrics import make_jpegs
    from echo_builder.scoring.structure import DinoStructure

    inputs, outputs, origin = make_jpegs(folder, (args.images + 1) // 2)
    paths = [str(p) for p in (inputs + outputs)[: args.images]]
    rows: list[tuple[str, str]] = []
    raw: dict[str, Any] = {"images": len(paths), "origin": origin}
    # Pillow decoding (in 0 or 8 threads), then torchvision's nvJPEG decoder on the GPU (issue: >= 1,000 images/s)
    settings = (("pillow", 0, (1, 16, 64)), ("pillow", 8, (1, 16, 64)), ("torchvision", 8, (16, 64, 256)))
    for decode, workers, batch_sizes in settings:
        scorer = DinoStructure("random:0", device="cuda", batch_size=16, num_workers=workers, decode=decode)
        scorer.self_similarity(paths[:16])  # warm-up: kernel selection, not timed
        for batch_size in batch_sizes:
            scorer.batch_size = batch_size
            torch.cuda.reset_peak_memory_stats()
            base = torch.cuda.memory_allocated()
            _sync()
            start = time.perf_counter()
            scorer.self_similarity(paths)
            _sync()
            seconds = time.perf_counter() - start
            peak = (torch.cuda.max_memory_allocated() - base) / 2**20
            rate = len(paths) / seconds
            raw[f"cuda_{decode}_b{batch_size}_w{workers}"] = {"images_per_s": rate, "peak_extra_mib": peak}
            rows.append(
                (
                    f"structure_distance images/s, CUDA, batch {batch_size}, {decode} decoding, "
                    f"{workers} reader threads",
                    f"{rate:.1f} (peak +{peak:.0f} MiB)",
                )
            )
    cpu = DinoStructure("random:0", device="cpu", batch_size=16)
    few = paths[:32]
    cpu.self_similarity(few[:16])
    start = time.perf_counter()
    cpu.self_similarity(few)
    cpu_rate = len(few) / (time.perf_counter() - start)
    raw["cpu_b16"] = {"images_per_s": cpu_rate, "threads": torch.get_num_threads()}
    best = max(v["images_per_s"] for k, v in raw.items() if k.startswith("cuda_"))
    rows.append(
        (
            f"structure_distance images/s, CPU ({torch.get_num_threads()} threads), batch 16",
            f"{cpu_rate:.1f} (best CUDA setting: {best / cpu_rate:.1f}x)",
        )
    )
    return rows, raw


def bench_judge(args: argparse.Namespace, folder: Path) -> tuple[list[tuple[str, str]], dict[str, Any]]:
    import torch

    from bench.metrics import make_jpegs
    from echo_builder.backends.base import GenerationParams
    from echo_builder.backends.caller import ModelCaller
    from echo_builder.backends.transformers_backend import TransformersBackend
    from echo_builder.judge.judging import Judge, JudgeItem
    from tests.helpers.tiny_vlm import build_tiny_qwen2_vl

    started = time.perf_counter()
    model_dir = build_tiny_qwen2_vl(
        folder / "qwen2-vl-2b-shape", shape="2b", device="cuda", dtype=torch.bfloat16
    )
    build_s = time.perf_counter() - started
    n = args.judge_items
    # Distinct images per item: identical requests would be sent once (the caller de-duplicates by content).
    # Half text-to-image (output only), half image-to-image (input + output), as in a mixed benchmark.
    inputs, outputs, _ = make_jpegs(folder, n)
    items = [
        JudgeItem(
            sample_id=f"s{i}",
            prompt="Make the sky a deep sunset orange but keep the people exactly as they are.",
            inputs=(str(inputs[i]),) if i % 2 else (),
            model="m",
            output=str(outputs[i]),
        )
        for i in range(n)
    ]
    params = GenerationParams(temperature=0.0, max_tokens=args.max_tokens)
    rows: list[tuple[str, str]] = []
    raw: dict[str, Any] = {"build_s": build_s, "items": n, "max_tokens": args.max_tokens}
    for batch_size in (1, 8, 32):
        backend = TransformersBackend(str(model_dir), dtype="bfloat16", batch_size=batch_size)
        caller = ModelCaller(backend, concurrency=batch_size, timeout_s=3600)
        judge = Judge(caller, params=params)
        # warm-up (model load, kernel selection) on a prompt of its own, not timed
        warm = JudgeItem("warm", "A red bicycle.", (), "m", str(outputs[0]))
        asyncio.run(judge.asingle([warm] * 2))
        timed = items[
            : {1: args.judge_items // 8, 8: args.judge_items // 2}.get(batch_size, args.judge_items)
        ]
        torch.cuda.reset_peak_memory_stats()
        before = (caller.stats.attempts, caller.stats.input_tokens, caller.stats.output_tokens)
        _sync()
        start = time.perf_counter()
        verdicts = asyncio.run(judge.asingle(timed))
        _sync()
        seconds = time.perf_counter() - start
        generations = caller.stats.attempts - before[0]
        in_tokens = caller.stats.input_tokens - before[1]
        out_tokens = caller.stats.output_tokens - before[2]
        peak = torch.cuda.max_memory_allocated() / 2**30
        raw[f"b{batch_size}"] = {
            "items": len(timed),
            "seconds": seconds,
            "items_per_s": len(timed) / seconds,
            "output_tokens_per_s": out_tokens / seconds,
            "generations": generations,
            "generations_per_s": generations / seconds,
            "mean_input_tokens": in_tokens / max(generations, 1),
            "peak_gib": peak,
            "statuses": sorted({v.status for v in verdicts}),
        }
        rows.append(
            (
                f"judge items/s, batch {batch_size} ({len(timed)} items)",
                f"{len(timed) / seconds:.2f} items/s ({generations / seconds:.2f} generations/s), "
                f"{out_tokens / seconds:.0f} generated tokens/s, "
                f"{generations} generations of {in_tokens / max(generations, 1):.0f} prompt tokens, peak {peak:.1f} GiB",
            )
        )
        del judge, caller, backend
        torch.cuda.empty_cache()
    one = raw["b1"]["items_per_s"]
    rows.append(("judge speed-up, batch 32 over batch 1", f"{raw['b32']['items_per_s'] / one:.1f}x"))
    return rows, raw


def _sd15_shaped_pipeline(folder: Path) -> Path:
    """A random-weight Stable Diffusion 1.5-shaped pipeline in float16 (UNet 860M, CLIP ViT-L/14 text encoder,
    the SD VAE; the test tokenizer), saved to ``folder``: the cost of a real SD 1.5 call, none of its pictures."""
    import torch
    from diffusers import AutoencoderKL, DDIMScheduler, StableDiffusionPipeline, UNet2DConditionModel
    from transformers import CLIPTextConfig, CLIPTextModel, CLIPTokenizer

    from tests.helpers.tiny_diffusers import write_clip_tokenizer_files

    vocab_size = write_clip_tokenizer_files(folder / "_tok")
    tokenizer = CLIPTokenizer.from_pretrained(folder / "_tok", model_max_length=77)
    torch.manual_seed(0)
    with torch.device("cuda"):
        unet = UNet2DConditionModel(sample_size=64, cross_attention_dim=768, attention_head_dim=8)
        vae = AutoencoderKL(
            block_out_channels=(128, 256, 512, 512),
            down_block_types=("DownEncoderBlock2D",) * 4,
            up_block_types=("UpDecoderBlock2D",) * 4,
            latent_channels=4,
            layers_per_block=2,
            sample_size=512,
        )
        text_encoder = CLIPTextModel(
            CLIPTextConfig(
                vocab_size=vocab_size,
                hidden_size=768,
                intermediate_size=3072,
                num_hidden_layers=12,
                num_attention_heads=12,
                max_position_embeddings=77,
                bos_token_id=tokenizer.bos_token_id,
                eos_token_id=tokenizer.eos_token_id,
                pad_token_id=tokenizer.pad_token_id,
            )
        )
    scheduler = DDIMScheduler(
        beta_schedule="scaled_linear", beta_start=0.00085, beta_end=0.012, clip_sample=False
    )
    pipe = StableDiffusionPipeline(
        vae=vae,
        text_encoder=text_encoder,
        tokenizer=tokenizer,
        unet=unet,
        scheduler=scheduler,
        safety_checker=None,
        feature_extractor=None,
        requires_safety_checker=False,
    ).to(torch.float16)
    pipe.save_pretrained(folder / "sd15-shape")
    return folder / "sd15-shape"


def bench_generate(args: argparse.Namespace, folder: Path) -> tuple[list[tuple[str, str]], dict[str, Any]]:
    import torch

    from bench.generate import generation_rate
    from echo_builder.generate.run import run_generation
    from tests.helpers.benchmark import make_benchmark

    started = time.perf_counter()
    model_dir = _sd15_shaped_pipeline(folder)
    raw: dict[str, Any] = {"build_s": time.perf_counter() - started, "steps": args.steps}
    n = args.gen_samples
    samples = [
        {"id": f"s{i:03d}", "prompt": f"a watercolor lighthouse at dusk, number {i}"} for i in range(n)
    ]
    bench_dir = make_benchmark(folder / "bench", "text_to_image", samples)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    options = {"steps": args.steps, "height": args.gen_size, "width": args.gen_size, "device": device}
    options["dtype"] = "float16" if device == "cuda" else "float32"
    rows: list[tuple[str, str]] = []
    # warm-up run (CUDA context, kernel selection) on two samples, not timed
    run_generation(
        bench_dir,
        "text_to_image",
        f"diffusers:{model_dir}",
        "warm",
        folder / "warm",
        limit=2,
        options={**options, "batch_size": 2},
        progress=False,
    )
    for batch_size in (1, 4, 8):
        out = folder / f"out-b{batch_size}"
        started = time.perf_counter()
        result = run_generation(
            bench_dir,
            "text_to_image",
            f"diffusers:{model_dir}",
            f"sd15-b{batch_size}",
            out,
            options={**options, "batch_size": batch_size},
            progress=False,
        )
        wall = time.perf_counter() - started
        rate, _ = generation_rate(out / f"sd15-b{batch_size}")
        summary = result.summary
        inside = summary.get("model_s") or 0.0
        outside = max((summary.get("generate_s") or 0.0) - inside, 0.0)
        raw[f"b{batch_size}"] = {
            "images_per_s": rate,
            "wall_s": wall,
            "peak_gib": torch.cuda.max_memory_allocated() / 2**30,
            "orchestration_share": outside / inside if inside else None,
            "summary": summary,
        }
        share = f", orchestration {100 * outside / inside:.1f}% of pipeline time" if inside else ""
        rows.append(
            (
                f"generate images/s, SD 1.5 shape, {args.gen_size} px, {args.steps} steps, batch {batch_size} ({n} samples)",
                f"{rate:.2f}{share}",
            )
        )
        torch.cuda.empty_cache()
    rows.append(
        (
            "generate speed-up, batch 8 over batch 1",
            f"{raw['b8']['images_per_s'] / raw['b1']['images_per_s']:.1f}x",
        )
    )
    return rows, raw


SECTIONS = {"structure": bench_structure, "judge": bench_judge, "generate": bench_generate}


def _table(rows: list[tuple[str, str]]) -> list[str]:
    return ["| measurement | result |", "| --- | --- |", *(f"| {a} | {b} |" for a, b in rows)]


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--only", default=",".join(SECTIONS), help="comma-separated sections")
    parser.add_argument("--images", type=int, default=256, help="JPEGs for structure_distance")
    parser.add_argument("--judge-items", type=int, default=64)
    parser.add_argument("--max-tokens", type=int, default=128, help="generated tokens per judge reply")
    parser.add_argument("--gen-samples", type=int, default=16, help="text-to-image samples per batch size")
    parser.add_argument("--steps", type=int, default=20, help="denoising steps per image")
    parser.add_argument("--gen-size", type=int, default=512, help="generated image side in pixels")
    parser.add_argument("--out", type=Path, default=Path("bench/out"))
    parser.add_argument("--append", type=Path, help="append a saved gpu.json to bench/RESULTS.md and exit")
    args = parser.parse_args()

    if args.append:
        from bench.results import append_section

        saved = json.loads(args.append.read_text(encoding="utf-8"))
        append_section(HEADING, saved["intro"], saved["table"])
        return

    import platform

    import torch

    if not torch.cuda.is_available():
        parser.error("no CUDA device: this benchmark measures the GPU paths")
    rows: list[tuple[str, str]] = []
    raw: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.only.split(","):
            part_rows, part_raw = SECTIONS[name](args, Path(tmp))
            rows += part_rows
            raw[name] = part_raw
            print("\n".join(_table(part_rows)), flush=True)
            args.out.mkdir(parents=True, exist_ok=True)  # saved after each section: a time-out keeps the rest
            (args.out / f"gpu-{name}.json").write_text(
                json.dumps({"table": _table(part_rows), "raw": part_raw})
            )
    import transformers

    intro = (
        f"On one {torch.cuda.get_device_name()} (torch {torch.__version__}, transformers {transformers.__version__}, "
        f"Python {platform.python_version()}), random weights of the real architectures: structure_distance over "
        f"{args.images} JPEGs of 1024x1536; judge single-answer grading with a Qwen2-VL-2B-shaped model in "
        f"bfloat16, {args.judge_items} items (half with an input image), {args.max_tokens} generated tokens per reply; random replies never parse, so every item also costs the one "
        "re-ask (two generations per item: the worst case); `echo-bench generate` (run_generation) with a Stable "
        f"Diffusion 1.5-shaped random pipeline in float16, {args.gen_size} px, {args.steps} steps, "
        f"{args.gen_samples} prompts per batch size. "
        "Command: `python -m bench.gpu`."
    )
    table = _table(rows)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "gpu.json").write_text(
        json.dumps({"intro": intro, "table": table, "raw": raw}, indent=2), encoding="utf-8"
    )
    print(intro)
    print("\n".join(table))


if __name__ == "__main__":
    main()
