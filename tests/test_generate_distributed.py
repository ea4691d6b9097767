"""``accelerate launch --num_processes 2`` on CPU makes the same files (same pixels) and one merged manifest as a
single process, for a tiny random Stable Diffusion pipeline built in the test."""

from __future__ import annotations

import json

import pytest

from echo_builder.generate import derive_seed
from echo_builder.generate.run import run_generation
from tests.helpers.benchmark import make_benchmark
from tests.helpers.launch import accelerate_launch

pytest.importorskip("diffusers")
pytest.importorskip("accelerate")
torch = pytest.importorskip("torch")

SAMPLES = [{"id": f"s{i}", "prompt": f"sample {i} of a tiny benchmark"} for i in range(5)]


@pytest.mark.slow
def test_two_processes_make_the_same_files_and_one_manifest(tmp_path):
    from tests.helpers.tiny_diffusers import build_tiny_sd_pipeline

    model = build_tiny_sd_pipeline(tmp_path / "tiny-sd")
    bench = make_benchmark(tmp_path / "bench", "text_to_image", SAMPLES)
    options = {"steps": 2, "batch_size": 2}
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # as each launched process runs (OMP_NUM_THREADS=1): the same arithmetic
    try:
        single = run_generation(
            bench, "text_to_image", f"diffusers:{model}", "tiny", tmp_path / "one", seed=3, options=options
        )
    finally:
        torch.set_num_threads(threads)
    assert single.summary["statuses"] == {"ok": 5}

    args = ["--benchmark", str(bench), "--config", "text_to_image", "--model", f"diffusers:{model}"]
    args += [
        "--name",
        "tiny",
        "--out",
        str(tmp_path / "two"),
        "--seed",
        "3",
        "-o",
        "steps=2",
        "-o",
        "batch_size=2",
    ]
    done = accelerate_launch(["echo_builder.cli", "generate", *args], processes=2)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.count("5 generated now (ok=5)") == 1  # one report, from the main process

    one, two = tmp_path / "one" / "tiny", tmp_path / "two" / "tiny"
    assert sorted(p.name for p in two.iterdir()) == sorted(p.name for p in one.iterdir())  # no shards left
    for sample in SAMPLES:
        name = f"{sample['id']}.png"
        assert (two / name).read_bytes() == (one / name).read_bytes(), f"{name} differs"
    manifest = json.loads((two / "manifest.json").read_text())
    assert manifest["counts"] == {"ok": 5} and manifest["runs"][-1]["num_processes"] == 2
    records = manifest["samples"]
    # batches of 2 dealt to 2 processes: [s0 s1][s2 s3] to rank 0, [s4] to rank 1
    assert {sid: r["rank"] for sid, r in records.items()} == {"s0": 0, "s1": 0, "s2": 0, "s3": 0, "s4": 1}
    assert all(records[s["id"]]["seed"] == derive_seed(3, s["id"]) for s in SAMPLES)
    reference = json.loads((one / "manifest.json").read_text())["samples"]
    assert {k: r["sha256"] for k, r in records.items()} == {k: r["sha256"] for k, r in reference.items()}
