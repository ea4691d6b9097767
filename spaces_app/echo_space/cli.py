"""``python app.py``: the Space's command line (every option also reads an environment variable for Spaces)."""

from __future__ import annotations

from pathlib import Path

import click

from echo_builder.commands.options import MAX_N_BOOT, Number
from echo_space.settings import ENV_VARS

__all__ = ["main"]


@click.command(context_settings={"help_option_names": ["-h", "--help"], "show_default": True})
@click.option(
    "--benchmark",
    envvar=ENV_VARS["benchmark"],
    show_envvar=True,
    required=True,
    help="Hub-shaped benchmark folder (<folder>/<config>/test-*.parquet + README.md) or Hub dataset id.",
)
@click.option(
    "--run",
    "runs",
    multiple=True,
    envvar=ENV_VARS["runs"],
    show_envvar=True,
    help="Judge run for the Leaderboard tab: a run folder (echo-bench judge --out RUN), a verdicts.parquet file "
    "or a Hub dataset id of verdict rows. Repeat for several; the env variable takes them space-separated.",
)
@click.option(
    "--outputs",
    envvar=ENV_VARS["outputs"],
    show_envvar=True,
    type=click.Path(exists=True, file_okay=False),
    help="Model outputs <outputs>/<model>/<sample_id>.<ext> to show beside each sample.",
)
@click.option(
    "--dino-weights",
    envvar=ENV_VARS["dino_weights"],
    show_envvar=True,
    type=click.Path(exists=True, dir_okay=False),
    help="DINO ViT-S/16 weights (timm/vit_small_patch16_224.dino model.safetensors) for structure distance; "
    "without them the playground shows why it is unavailable.",
)
@click.option(
    "--face-backend",
    envvar=ENV_VARS["face_backend"],
    show_envvar=True,
    default="dlib",
    help="Face backend for face identity (dlib, auraface), or 'none'.",
)
@click.option(
    "--judge",
    "judges",
    multiple=True,
    envvar=ENV_VARS["judges"],
    show_envvar=True,
    help="VLM judge spec for text rendering in the playground (openai:<model>, transformers:<path>); repeatable.",
)
@click.option(
    "--base-url",
    envvar="ECHO_OPENAI_BASE_URL",
    show_envvar=True,
    help="Base URL of the openai: judges' server.",
)
@click.option(
    "--analysis",
    envvar=ENV_VARS["analysis"],
    show_envvar=True,
    type=click.Path(exists=True, file_okay=False),
    help="echo-bench analyze --out folder: an Analysis tab shows its report, plots and failure categories.",
)
@click.option(
    "--n-boot",
    default=1000,
    type=Number(int, 1, MAX_N_BOOT),
    help="Bootstrap replicates of the intervals.",
)
@click.option(
    "--host",
    envvar="GRADIO_SERVER_NAME",
    show_envvar=True,
    default="127.0.0.1",
    help="Interface to listen on.",
)
@click.option(
    "--port",
    envvar="GRADIO_SERVER_PORT",
    show_envvar=True,
    default=7860,
    type=Number(int, 1, 65535),
    help="TCP port.",
)
def main(
    benchmark, runs, outputs, dino_weights, face_backend, judges, base_url, analysis, n_boot, host, port
):
    """Serve the ECHO Space: browse the benchmark, rank a judge run, try the metrics on your own images.

    \b
    Examples:
      python spaces_app/app.py --benchmark demo/benchmark --outputs demo/outputs --run demo/runs/image_to_image
      ECHO_BENCHMARK=your-org/echo-bench python spaces_app/app.py
      python spaces_app/app.py --benchmark builds/lumen --analysis runs/lumen-analysis
      gradio spaces_app/app.py -- --benchmark demo/benchmark     (reloads on edits)
    """
    from echo_builder.commands.options import backend_options
    from echo_dataset.loading import BenchmarkNotFoundError
    from echo_space import SpaceSettings, build_demo, launch

    settings = SpaceSettings(
        benchmark=benchmark,
        runs=tuple(runs),
        outputs=outputs,
        dino_weights=dino_weights,
        face_backend=None if face_backend.lower() in ("none", "off", "") else face_backend,
        judges=tuple(judges),
        judge_options=backend_options(tuple(judges), base_url, ()),
        n_boot=n_boot,
        analysis=analysis,
    )
    if analysis and not (Path(analysis) / "analysis.json").is_file():
        raise click.BadParameter(
            f"{analysis} holds no analysis.json; give the folder of echo-bench analyze --out",
            param_hint="--analysis",
        )
    try:
        demo = build_demo(settings)
    except BenchmarkNotFoundError as exc:
        raise click.BadParameter(str(exc), param_hint="--benchmark") from None
    launch(demo, host=host, port=port)
    return demo
