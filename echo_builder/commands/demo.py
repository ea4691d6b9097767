"""``echo-bench demo``: the whole loop on bundled example posts, offline (see :mod:`echo_builder.demo`)."""

from __future__ import annotations

import click

from echo_builder.commands.options import EchoCommand

__all__ = ["demo"]


@click.command(cls=EchoCommand)
@click.option(
    "--out",
    "out_dir",
    required=True,
    type=click.Path(file_okay=False),
    help="Folder to write (absent or empty): posts/ (the bundled export), benchmark/, outputs/, metrics/, "
    "summary.json, and .echo-bench.json (marks it as a demo folder).",
)
@click.option(
    "--overwrite",
    is_flag=True,
    help="Replace a previous demo in OUT (only in a demo folder, only the demo's own entries; other files are "
    "kept).",
)
@click.option(
    "--dino-weights",
    help="Also compute structure distance with these DINO weights (a local file, or random:<seed> for a smoke "
    "test; needs pip install 'echo-bench[dino]').",
)
@click.option("--progress/--no-progress", default=True, show_default=True, help="Progress bar on stderr.")
def demo(out_dir: str, overwrite: bool, dino_weights: str | None, progress: bool) -> None:
    """Run ECHO end to end on bundled example posts, offline and without an API key.

    Builds a benchmark from an X API v2 export of threads about a fictional image model (Lumen-2) with the
    offline rules backend, places three fictional models' outputs for its prompts, computes the metrics that
    run offline (color shift; face identity when dlib is installed; structure distance with --dino-weights),
    and prints the summary and the exact commands of a judge run. Takes seconds.

    \b
    Example:
      echo-bench demo --out demo
      python -c 'import datasets; print(datasets.load_dataset("demo/benchmark", "image_to_image"))'
    """
    from echo_builder.demo import format_summary, run_demo

    summary = run_demo(out_dir, dino_weights=dino_weights, progress=progress, overwrite=overwrite)
    click.echo(format_summary(summary))
