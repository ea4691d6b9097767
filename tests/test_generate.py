"""``echo-bench generate`` with the ``diffusers:`` generator on a tiny random Stable Diffusion built in the test.

Checks: every benchmark row gets ``<sample_id>.png`` with the pixels a direct pipeline call makes for the sample's
seed; a rerun generates nothing; outputs feed ``metrics`` and ``judge`` unchanged; failures (missing or corrupt
inputs, NSFW blocks) are recorded and shown by ``judge`` / ``metrics`` / ``leaderboard`` as missing outputs with
the manifest's reason; resume after a crash; and clear errors that lose nothing for bad names, specs and folders.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner
from PIL import Image

from echo_builder.cli import cli
from echo_builder.errors import ConfigError
from echo_builder.generate import create_generator, derive_seed, list_generators
from echo_builder.generate.manifest import generation_failures, read_records
from echo_builder.generate.run import check_file_name, run_generation
from tests.helpers.benchmark import make_benchmark, png_bytes

pytest.importorskip("diffusers")
pytest.importorskip("torch")

T2I = [
    {"id": f"t{i}", "prompt": p} for i, p in enumerate(["a red cat", "the blue sea", "an old map", "night"])
]
RED, BLUE = (220, 30, 30), (20, 40, 210)


def i2i_rows() -> list[dict]:
    return [
        {"id": "e0", "prompt": "make it darker", "inputs": [Image.new("RGB", (32, 32), RED)]},
        {"id": "e1", "prompt": "add a moon", "inputs": [Image.new("RGB", (40, 32), BLUE)]},
        {"id": "e2", "prompt": "same size as e0", "inputs": [Image.new("RGB", (32, 32), BLUE)]},
    ]


@pytest.fixture(scope="module", autouse=True)
def _one_torch_thread():
    """Tiny models on a shared 2-core machine: one thread is 10x faster than two fighting over cores."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="module")
def tiny_sd(tmp_path_factory) -> Path:
    from tests.helpers.tiny_diffusers import build_tiny_sd_pipeline

    return build_tiny_sd_pipeline(tmp_path_factory.mktemp("tiny-sd"))


@pytest.fixture(scope="module")
def bench(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("bench")
    make_benchmark(folder, "text_to_image", T2I)
    make_benchmark(folder, "image_to_image", i2i_rows())
    return folder


def _generate(*args: str, code: int = 0):
    result = CliRunner().invoke(cli, ["generate", *args])
    assert result.exit_code == code, result.output
    return result


def _args(bench: Path, config: str, spec: str, out: Path, name: str = "tiny", *extra: str) -> list[str]:
    return [
        "--benchmark",
        str(bench),
        "--config",
        config,
        "--model",
        spec,
        "--name",
        name,
        "--out",
        str(out),
        *extra,
    ]


def _metrics(bench: Path, outputs: Path, dest: Path) -> pd.DataFrame:
    """``echo-bench metrics --metric color_shift`` on the image_to_image config; its rows."""
    args = ["--benchmark", str(bench), "--config", "image_to_image", "--outputs", str(outputs)]
    result = CliRunner().invoke(
        cli, ["metrics", *args, "--metric", "color_shift", "--out", str(dest), "--format", "csv"]
    )
    assert result.exit_code == 0, result.output
    return pd.read_csv(dest / "metrics.csv")


def _judge(bench: Path, outputs: Path, server, run: Path) -> pd.DataFrame:
    """``echo-bench judge`` of the image_to_image config with one judge on the loopback server; its verdicts."""
    args = [
        "--benchmark",
        str(bench),
        "--config",
        "image_to_image",
        "--outputs",
        str(outputs),
        "--out",
        str(run),
    ]
    result = CliRunner().invoke(cli, ["judge", *args, "--judge", "openai:j", "--base-url", server.base_url])
    assert result.exit_code == 0, result.output
    return pd.read_parquet(run / "verdicts.parquet")


def _pixels(path: Path) -> np.ndarray:
    with Image.open(path) as img:
        return np.asarray(img.convert("RGB"))


# -- names, seeds and the registry ---------------------------------------------------------------------------
def test_sample_seed_is_sha256_of_seed_and_id():
    # independent route to the same number: hex digits instead of bytes
    assert derive_seed(0, "echo-1") == int(hashlib.sha256(b"0:echo-1").hexdigest()[:8], 16)
    assert derive_seed(7, "t0") == int(hashlib.sha256(b"7:t0").hexdigest()[:8], 16)
    assert derive_seed(0, "t0") != derive_seed(1, "t0") != derive_seed(0, "t1")


@pytest.mark.parametrize(
    "bad", ["", ".", "..", "../x", "a/b", "/etc/passwd", "a\\b", "x\x00y", ".hidden", "a" * 201]
)
def test_unsafe_file_names_are_refused(bad):
    with pytest.raises(ConfigError, match="cannot be used as a file name"):
        check_file_name(bad, "model name")


def test_ordinary_names_are_accepted():
    for name in ("sd-1.5_turbo+v2", "GPT-Image 1", "echo-0123456789abcdef", "模型"):
        assert check_file_name(name, "model name") == name


def test_registry_names_and_errors():
    assert [g.name for g in list_generators()] == ["command", "diffusers", "openai-images"]
    form = (
        "use <generator>:<target>, e.g. diffusers:<hub id or local path>, openai-images:gpt-image-1 or "
        "command:python my_model.py; generators: command, diffusers, openai-images"
    )
    with pytest.raises(ConfigError) as info:
        create_generator("dalle:3")
    assert str(info.value) == f"unknown generator 'dalle' in model spec 'dalle:3': {form}"
    with pytest.raises(ConfigError) as info:
        create_generator("stabilityai/sd-turbo")  # a bare model id: the message shows the spec form
    assert str(info.value) == f"unknown model spec 'stabilityai/sd-turbo': {form}"
    with pytest.raises(ConfigError, match="needs a target"):
        create_generator("diffusers:")
    with pytest.raises(ConfigError, match="stepz"):
        create_generator("diffusers:/x", stepz=4)


# -- the diffusers path end to end ---------------------------------------------------------------------------
def test_every_row_generated_with_seeded_pixels_and_rerun_generates_nothing(tiny_sd, bench, tmp_path):
    import torch
    from diffusers import DiffusionPipeline

    out = tmp_path / "outputs"
    first = _generate(
        *_args(bench, "text_to_image", f"diffusers:{tiny_sd}", out), "-o", "steps=2", "-o", "batch_size=3"
    )
    assert "4 generated now (ok=4)" in first.output
    folder = out / "tiny"
    assert sorted(p.name for p in folder.iterdir()) == [
        "manifest.json",
        "t0.png",
        "t1.png",
        "t2.png",
        "t3.png",
    ]
    manifest = json.loads((folder / "manifest.json").read_text())
    assert manifest["counts"] == {"ok": 4}
    assert manifest["model_spec"] == f"diffusers:{tiny_sd}"
    assert manifest["parameters"]["steps"] == 2 and manifest["parameters"]["batch_size"] == 3
    assert manifest["generator"]["pipeline_class"] == "StableDiffusionPipeline"
    assert {"echo-bench", "diffusers", "torch"} <= set(manifest["versions"])

    # independent reference: the pipeline called directly, one sample at a time, with the documented seed
    pipe = DiffusionPipeline.from_pretrained(tiny_sd)
    pipe.set_progress_bar_config(disable=True)
    for row in T2I:
        record = manifest["samples"][row["id"]]
        assert record["status"] == "ok" and record["seed"] == derive_seed(0, row["id"])
        assert record["sha256"] == hashlib.sha256((folder / f"{row['id']}.png").read_bytes()).hexdigest()
        expected = pipe(
            row["prompt"], num_inference_steps=2, generator=torch.Generator("cpu").manual_seed(record["seed"])
        ).images[0]
        got = _pixels(folder / f"{row['id']}.png").astype(int)
        assert got.shape == (32, 32, 3)
        diff = np.abs(got - np.asarray(expected, dtype=int))
        if (
            row["id"] == "t3"
        ):  # alone in the second batch (3 + 1): the very same arithmetic as the direct call
            assert diff.max() == 0
        else:  # batched with two others: float rounding of a batch of 3 may move rare values by one level
            assert diff.max() <= 1 and (diff > 0).mean() < 0.01
    assert not np.array_equal(_pixels(folder / "t0.png"), _pixels(folder / "t1.png"))

    mtimes = {p.name: p.stat().st_mtime_ns for p in folder.glob("*.png")}
    again = _generate(
        *_args(bench, "text_to_image", f"diffusers:{tiny_sd}", out), "-o", "steps=2", "-o", "batch_size=3"
    )
    assert "4 already done, 0 generated now (nothing to do)" in again.output
    assert {p.name: p.stat().st_mtime_ns for p in folder.glob("*.png")} == mtimes
    assert len(json.loads((folder / "manifest.json").read_text())["runs"]) == 2


def test_image_to_image_uses_the_img2img_variant_and_feeds_metrics_and_judge(
    tiny_sd, bench, tmp_path, openai_server
):
    out = tmp_path / "outputs"
    _generate(
        *_args(bench, "image_to_image", f"diffusers:{tiny_sd}", out), "-o", "steps=2", "-o", "batch_size=2"
    )
    folder = out / "tiny"
    manifest = json.loads((folder / "manifest.json").read_text())
    assert manifest["generator"]["task_pipelines"] == {"image": "StableDiffusionImg2ImgPipeline"}
    for row in i2i_rows():  # image-to-image keeps the input's size
        assert Image.open(folder / f"{row['id']}.png").size == row["inputs"][0].size

    rows = _metrics(bench, out, tmp_path / "metrics")
    assert sorted(rows["sample_id"]) == ["e0", "e1", "e2"] and set(rows["model"]) == {"tiny"}
    assert rows["value"].notna().all()

    openai_server.reply = lambda body: "A fine image. [[7]]"
    verdicts = _judge(bench, out, openai_server, tmp_path / "run")
    assert sorted(verdicts["sample_id"]) == ["e0", "e1", "e2"]
    assert set(verdicts["status"]) == {"ok"} and set(verdicts["rating"]) == {7}


# -- failures are recorded and shown as missing outputs ------------------------------------------------------
def test_missing_and_corrupt_inputs_and_nsfw_show_as_missing_outputs(tiny_sd, tmp_path, openai_server):
    from tests.helpers.tiny_diffusers import build_tiny_sd_pipeline

    rows = [
        {"id": "ok1", "prompt": "fine", "inputs": [Image.new("RGB", (32, 32), RED)]},
        {"id": "corrupt", "prompt": "x", "inputs": [png_bytes(Image.new("RGB", (32, 32)))[:40]]},
        {"id": "nothing", "prompt": "x", "inputs": [Image.new("RGB", (32, 32)), b""]},
    ]
    bench = make_benchmark(tmp_path / "bench", "image_to_image", rows)
    out = tmp_path / "outputs"
    _generate(*_args(bench, "image_to_image", f"diffusers:{tiny_sd}", out), "-o", "steps=2")
    records = read_records(out / "tiny")
    assert {k: r["status"] for k, r in records.items()} == {
        "ok1": "ok",
        "corrupt": "missing_input",
        "nothing": "missing_input",
    }
    assert "input image 1 of 1: cannot decode image" in records["corrupt"]["message"]
    assert "input image 2 of 2 is missing" in records["nothing"]["message"]
    assert sorted(p.name for p in (out / "tiny").glob("*.png")) == ["ok1.png"]

    nsfw = build_tiny_sd_pipeline(tmp_path / "nsfw-sd", nsfw_checker=True)
    result = _generate(
        *_args(bench, "image_to_image", f"diffusers:{nsfw}", out, "flagged"), "-o", "steps=2", code=1
    )
    assert "every generation failed" in result.output
    assert {r["status"] for r in read_records(out / "flagged").values()} == {"nsfw", "missing_input"}
    assert not list((out / "flagged").glob("*.png"))
    assert (
        generation_failures(out / "flagged")["ok1"]
        == "generation nsfw: the pipeline's safety checker flagged the image"
    )

    openai_server.reply = lambda body: "[[6]]"
    run = tmp_path / "run"
    verdicts = _judge(bench, out, openai_server, run).set_index(["model", "sample_id"])
    assert verdicts.loc[("tiny", "ok1"), "status"] == "ok"
    assert verdicts.loc[("tiny", "corrupt"), "status"] == "missing_output"
    assert verdicts.loc[("tiny", "corrupt"), "error"].startswith(
        "generation missing_input: input image 1 of 1"
    )
    assert (
        verdicts.loc[("flagged", "ok1"), "error"]
        == "generation nsfw: the pipeline's safety checker flagged the image"
    )
    assert json.loads((run / "run.json").read_text())["missing_outputs"] == {"flagged": 3, "tiny": 2}
    board = CliRunner().invoke(cli, ["leaderboard", str(run), "--format", "json"])
    assert board.exit_code == 0, board.output
    missing = {row["model"]: row["n_missing"] for row in json.loads(board.stdout)}
    assert missing == {"flagged": 3, "tiny": 2}

    metrics = _metrics(bench, out, tmp_path / "m").set_index(["model", "sample_id"])
    assert metrics.loc[("flagged", "ok1"), "nan_reason"] == (
        "missing output: generation nsfw: the pipeline's safety checker flagged the image"
    )
    assert metrics.loc[("tiny", "nothing"), "nan_reason"].startswith(
        "missing output: generation missing_input: "
    )
    assert np.isfinite(metrics.loc[("tiny", "ok1"), "value"])


# -- resume after a crash ------------------------------------------------------------------------------------
def test_resume_after_a_crash_redoes_only_what_is_not_safely_done(tiny_sd, bench, tmp_path):
    out = tmp_path / "outputs"
    options = {"steps": 2}
    run_generation(bench, "text_to_image", f"diffusers:{tiny_sd}", "m", out, options=options, progress=False)
    folder = out / "m"
    reference = {p.name: p.read_bytes() for p in folder.glob("*.png")}
    manifest = json.loads((folder / "manifest.json").read_text())
    # the crash: the manifest was never merged (shards only, the last line cut mid-write), t1 is gone, t2 is half
    # written, and a temporary file is left over
    (folder / "manifest.json").unlink()
    lines = [json.dumps({"type": "run", "run": manifest["identity"], "rank": 0, "num_processes": 1})]
    lines += [
        json.dumps({"type": "sample", "sample_id": sid, **manifest["samples"][sid]})
        for sid in ("t0", "t1", "t2")
    ]
    (folder / "manifest.rank0.jsonl").write_text("\n".join(lines) + "\n" + lines[-1][:30])
    (folder / "t1.png").unlink()
    (folder / "t2.png").write_bytes(reference["t2.png"][:100])
    (folder / "t3.png").unlink()
    (folder / ".t3.png.tmp-999").write_bytes(b"partial")
    t0_mtime = (folder / "t0.png").stat().st_mtime_ns

    result = run_generation(
        bench, "text_to_image", f"diffusers:{tiny_sd}", "m", out, options=options, progress=False
    )
    assert result.summary["skipped"] == 1 and result.summary["attempted"] == 3  # t0 kept; t1, t2, t3 redone
    assert (folder / "t0.png").stat().st_mtime_ns == t0_mtime
    assert {p.name: p.read_bytes() for p in folder.glob("*.png")} == reference  # same seeds, same pixels
    assert sorted(p.name for p in folder.iterdir()) == [
        "manifest.json",
        "t0.png",
        "t1.png",
        "t2.png",
        "t3.png",
    ]
    assert json.loads((folder / "manifest.json").read_text())["counts"] == {"ok": 4}


def test_a_folder_of_another_run_is_refused_untouched(tiny_sd, bench, tmp_path):
    run_generation(
        bench,
        "text_to_image",
        f"diffusers:{tiny_sd}",
        "m",
        tmp_path,
        limit=2,
        options={"steps": 2},
        progress=False,
    )
    before = {p.name: p.read_bytes() for p in (tmp_path / "m").iterdir()}
    with pytest.raises(ConfigError, match=r"different run \(parameters: .*'steps': 2.*'steps': 3"):
        run_generation(
            bench,
            "text_to_image",
            f"diffusers:{tiny_sd}",
            "m",
            tmp_path,
            options={"steps": 3},
            progress=False,
        )
    with pytest.raises(ConfigError, match="seed: 0 before, 5 now"):
        run_generation(
            bench, "text_to_image", f"diffusers:{tiny_sd}", "m", tmp_path, seed=5, options={"steps": 2}
        )
    assert {p.name: p.read_bytes() for p in (tmp_path / "m").iterdir()} == before
    # batch size changes speed, not images: the same folder carries on
    result = run_generation(
        bench,
        "text_to_image",
        f"diffusers:{tiny_sd}",
        "m",
        tmp_path,
        options={"steps": 2, "batch_size": 2},
        progress=False,
    )
    assert (result.summary["skipped"], result.summary["attempted"]) == (2, 2)


# -- bad inputs: clear errors, nothing lost ------------------------------------------------------------------
def test_model_spec_that_does_not_exist(bench, tmp_path):
    out = tmp_path / "outputs"
    result = _generate(*_args(bench, "text_to_image", f"diffusers:{tmp_path / 'no-such-model'}", out), code=1)
    assert "no such folder" in result.output
    result = _generate(*_args(bench, "text_to_image", "diffusers:nobody/no-such-model", out), code=1)
    assert "cannot load diffusers pipeline 'nobody/no-such-model'" in result.output
    result = _generate(*_args(bench, "text_to_image", f"diffusers:{bench}", out), code=1)
    assert "not a diffusers pipeline folder (no model_index.json)" in result.output
    result = _generate(*_args(bench, "text_to_image", "imagen:4", out), code=1)
    assert "unknown generator 'imagen'" in result.output
    assert not out.exists()  # a model that cannot load leaves no empty model folder for judge to count


def test_output_folder_that_is_not_writable(tiny_sd, bench, tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("keep me")
    result = _generate(*_args(bench, "text_to_image", f"diffusers:{tiny_sd}", blocker / "outputs"), code=1)
    assert f"output folder '{blocker / 'outputs' / 'tiny'}' is not writable" in result.output
    assert blocker.read_text() == "keep me"
    if os.geteuid() == 0:
        return  # root writes through read-only permissions; the case above still covers the error path
    out = tmp_path / "outputs"
    run_generation(
        bench,
        "text_to_image",
        f"diffusers:{tiny_sd}",
        "m",
        out,
        limit=1,
        options={"steps": 1},
        progress=False,
    )
    before = {p.name: p.read_bytes() for p in (out / "m").iterdir()}
    (out / "m").chmod(0o555)
    try:
        result = _generate(
            *_args(bench, "text_to_image", f"diffusers:{tiny_sd}", out, "m"), "-o", "steps=1", code=1
        )
    finally:
        (out / "m").chmod(0o755)
    assert "is not writable" in result.output
    assert {p.name: p.read_bytes() for p in (out / "m").iterdir()} == before


def test_every_generation_failing_points_at_the_manifest_not_at_judge(tmp_path):
    bench = make_benchmark(
        tmp_path / "bench", "text_to_image", [{"id": "a", "prompt": "p"}, {"id": "b", "prompt": "q"}]
    )
    out = tmp_path / "outputs"
    # `true` exits 0 and writes no image: every sample fails
    result = _generate(*_args(bench, "text_to_image", "command:true", out), code=1)
    assert "next:" not in result.output
    assert result.stderr.splitlines()[-1] == (
        f"error: every generation failed; the per-sample errors are in {out / 'tiny' / 'manifest.json'}"
    )
    assert {r["status"] for r in read_records(out / "tiny").values()} == {"error"}


def test_unsafe_names_are_refused_and_unsafe_sample_ids_skipped_one_by_one(tmp_path, caplog):
    bench = make_benchmark(
        tmp_path / "bench", "text_to_image", [{"id": "ok", "prompt": "p"}, {"id": "../evil", "prompt": "p"}]
    )
    out = tmp_path / "outputs"
    result = _generate(*_args(bench, "text_to_image", "command:true", out, "../up"), code=1)
    assert "model name (--name) '../up' cannot be used as a file name" in result.output
    assert not out.exists() and not (tmp_path / "up").exists()
    # one bad id never stops the others (judge and metrics treat ids per sample too): it is skipped and named
    result = _generate(*_args(bench, "text_to_image", "command:true", out, "fine"), code=1)
    assert "sample id of row 1" in caplog.text and "'../evil'" in caplog.text and "skipped" in caplog.text
    assert set(read_records(out / "fine")) == {"ok"}  # attempted (`true` writes no image: an error record)
    assert not (tmp_path / "evil.png").exists() and not (out / "evil.png").exists()
