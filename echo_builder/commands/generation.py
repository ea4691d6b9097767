"""``echo-bench generate``: model outputs for a benchmark config, in the layout ``judge`` and ``metrics`` read."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import click

from echo_builder.commands.options import (
    MAX_LIMIT,
    MAX_SEED,
    EchoCommand,
    Number,
    RegistryHelpOption,
    nsfw_options,
    parse_options,
    run_config_option,
)
from echo_builder.outlock import locks_output

__all__ = ["generate"]

_SHOWN_FAILURES = 5


def _model_folder(arguments: dict[str, Any]) -> tuple[Path, Path]:
    """The folder a generate run writes, ``OUTPUTS/<name>``, and ``OUTPUTS`` (it must lie inside it): the lock is
    taken there, so that runs of different models into one ``OUTPUTS`` go on side by side. An unsafe name is
    refused before anything is created."""
    from echo_builder.generate.run import check_file_name

    outputs = Path(arguments["out_dir"])
    return outputs / check_file_name(arguments["name"], "model name (--name)"), outputs


@click.command(cls=EchoCommand)
@click.option("--benchmark", required=True, help="Hub-shaped benchmark folder (or Hub dataset id).")
@click.option("--config", "config_name", required=True, help="Config: text_to_image, image_to_image, ...")
@click.option(
    "--model",
    "model_spec",
    cls=RegistryHelpOption,
    registry_kind="generator",
    required=True,
    metavar="SPEC",
    help="Generator spec <generator>:<target>, generators: {names}. E.g. diffusers:<hub id or folder>, "
    "openai-images:<model> (e.g. gpt-image-1), or command:'<command line>' (your program reads a JSON request on "
    "stdin, writes a PNG).",
)
@click.option(
    "--name",
    required=True,
    help="Model name: the folder OUT/<name>/ and the name judge and leaderboard show.",
)
@click.option(
    "--out", "out_dir", required=True, type=click.Path(file_okay=False), help="Outputs folder (OUTPUTS)."
)
@click.option(
    "--seed",
    default=0,
    show_default=True,
    type=Number(int, 0, MAX_SEED),
    help="Base seed; each sample's seed derives from it and the sample id (same pixels with any process count).",
)
@click.option("--limit", type=Number(int, 1, MAX_LIMIT), help="Generate only for the first N samples.")
@click.option(
    "-o",
    "--option",
    "options",
    multiple=True,
    metavar="KEY=VALUE",
    help="Generator option; repeatable. For example diffusers: steps, dtype, batch_size, guidance_scale, height, "
    "width, strength; openai-images: size, quality, concurrency, max_attempts; command: timeout_s, concurrency, env. "
    "An unknown option is refused with the list of the generator's options (docs/generate.md).",
)
@click.option(
    "--base-url", help="Server URL for openai-images: (default: $ECHO_OPENAI_BASE_URL or $OPENAI_BASE_URL)."
)
@click.option(
    "--retry-refused",
    is_flag=True,
    help="Also retry samples recorded as refused or nsfw (errors are always retried).",
)
@nsfw_options(
    "Screen each generated image before it is written: 'nudenet' (offline detector; pip install "
    "'echo-bench[nsfw]') or a VLM spec such as openai:gpt-4o. A flagged image is withheld (status nsfw, the "
    "detections in the manifest), never silently dropped.",
    "Checker option; repeatable (nudenet: classes=A,B; a VLM: prompt_file=FILE and its backend's options).",
)
@run_config_option
@locks_output("generate", folder=_model_folder)
def generate(
    benchmark: str,
    config_name: str,
    model_spec: str,
    name: str,
    out_dir: str,
    seed: int,
    limit: int | None,
    options: tuple[str, ...],
    base_url: str | None,
    retry_refused: bool,
    nsfw_check: str | None,
    nsfw_threshold: float | None,
    nsfw_options: tuple[str, ...],
) -> None:
    """Generate one image per benchmark sample with a model: OUT/<name>/<sample_id>.png plus manifest.json.

    Samples already generated are skipped (rerun after a crash to resume); failures (refusals, NSFW blocks
    by the model or by --nsfw-check, errors, missing input images) are recorded per sample in the manifest and shown by judge and metrics as
    missing outputs. Several GPUs: accelerate launch --num_processes K -m echo_builder.cli generate ...
    Then: echo-bench judge --outputs OUT ... and echo-bench metrics --outputs OUT ...
    """
    from echo_builder.generate.manifest import MANIFEST_FILE
    from echo_builder.generate.run import run_generation

    opts = parse_options(options)
    if base_url:
        if not model_spec.startswith("openai-images:"):
            raise click.BadParameter(
                "--base-url applies to openai-images: models only", param_hint="--base-url"
            )
        opts["base_url"] = base_url
    result = run_generation(
        benchmark,
        config_name,
        model_spec,
        name,
        out_dir,
        seed=seed,
        limit=limit,
        options=opts,
        retry_refused=retry_refused,
        nsfw_check=nsfw_check,
        nsfw_threshold=nsfw_threshold,
        nsfw_options=parse_options(nsfw_options),
    )
    s = result.summary
    if not s:  # a non-main accelerate process: rank 0 reports
        return
    statuses = ", ".join(f"{k}={v}" for k, v in sorted(s["statuses"].items())) or "nothing to do"
    click.echo(
        f"{s['model']}: {s['n_samples']} samples, {s['skipped']} already done, {s['attempted']} generated now "
        f"({statuses}) in {s['wall_time_s']:.1f} s on {s['num_processes']} process(es)"
    )
    for sample_id, status, message in s["failures"][:_SHOWN_FAILURES]:
        click.echo(f"  {sample_id}: {status}: {message}", err=True)
    if len(s["failures"]) > _SHOWN_FAILURES:
        click.echo(f"  ... and {len(s['failures']) - _SHOWN_FAILURES} more in the manifest", err=True)
    if s["attempted"] and not s["statuses"].get("ok"):
        manifest = Path(s["model_dir"]) / MANIFEST_FILE
        click.echo(f"error: every generation failed; the per-sample errors are in {manifest}", err=True)
        sys.exit(1)
    click.echo(f"wrote {s['model_dir']} ({MANIFEST_FILE}); next: echo-bench judge --outputs {out_dir} ...")
