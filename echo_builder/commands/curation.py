"""``echo-bench build`` and ``echo-bench publish``: curation into a Hub-ready dataset."""

from __future__ import annotations

import sys
from typing import Any

import click

from echo_builder.commands.options import MAX_CONCURRENCY, Number, call_limit_options, parse_options
from echo_builder.secrets import protect_logging, redact, register_secret

__all__ = ["build", "publish"]


@click.command()
@click.argument("sources", nargs=-1, required=True, type=click.Path(exists=True))
@click.option(
    "--out", "out_dir", required=True, type=click.Path(file_okay=False), help="Build folder to write."
)
@click.option(
    "--backend",
    default="rules",
    show_default=True,
    help="rules (no model) or an LLM spec such as openai:gpt-4o for relevance and extraction.",
)
@click.option("--base-url", help="Server URL for an openai: backend.")
@click.option(
    "-o", "--option", "options", multiple=True, metavar="KEY=VALUE", help="Backend option; repeatable."
)
@click.option("--target-model", help="The image model the benchmark is about, e.g. 'GPT-4o'.")
@click.option(
    "--launch-date", help="The target model's launch date (YYYY-MM-DD), for time-windowed keywords."
)
@click.option(
    "--keywords",
    "keywords_file",
    type=click.Path(exists=True, dir_okay=False),
    help="Keyword list (JSON, or text: one term per line, optional TAB/| window in days).",
)
@click.option(
    "--format",
    "source_format",
    type=click.Choice(["x_api", "x_graphql", "reddit", "bluesky", "collection", "jsonl"]),
    help="Force a source format instead of auto-detection.",
)
@click.option(
    "--threshold",
    default=4,
    show_default=True,
    type=Number(int, 1, 5),
    help="Keep posts whose relevance score (1-5, by the LLM or the rules baseline) is at least this.",
)
@click.option(
    "--concurrency",
    default=8,
    show_default=True,
    type=Number(int, 1, MAX_CONCURRENCY),
    help=f"Model calls in flight, 1-{MAX_CONCURRENCY}.",
)
@call_limit_options
@click.option(
    "--cache", "cache_dir", type=click.Path(file_okay=False), help="Call cache folder (default OUT/cache)."
)
@click.option(
    "--resume", is_flag=True, help="Continue a build in OUT; completed model calls are not repeated."
)
@click.option("--offline", is_flag=True, help="Download no image: use only those already in the media store.")
@click.option(
    "--allow-private-media",
    is_flag=True,
    help="Let the media stage fetch from private and loopback addresses (local mirrors, tests).",
)
@click.option(
    "--pseudonymize/--no-pseudonymize",
    default=True,
    show_default=True,
    help="Replace social-media handles in the dataset's text and author fields.",
)
@click.option(
    "--license", "license_id", default="cc-by-4.0", show_default=True, help="Dataset license for the card."
)
def build(
    sources: tuple[str, ...],
    out_dir: str,
    backend: str,
    base_url: str | None,
    options: tuple[str, ...],
    target_model: str | None,
    launch_date: str | None,
    keywords_file: str | None,
    source_format: str | None,
    threshold: int,
    concurrency: int,
    timeout_s: float,
    max_attempts: int,
    cache_dir: str | None,
    resume: bool,
    offline: bool,
    allow_private_media: bool,
    pseudonymize: bool,
    license_id: str,
) -> None:
    """Curate posts from SOURCES (export files or folders) into benchmark samples.

    Stages: collect, query, relevance, threads, extract, media, roles, templates, screenshots, tier,
    applicability. Writes OUT/stages/*.jsonl, OUT/report.json and the dataset itself: OUT/<config>/*.parquet
    with OUT/README.md, readable with datasets.load_dataset(OUT, "text_to_image") and ready for `publish`.
    """
    from echo_builder.pipeline import BuildConfig
    from echo_builder.pipeline import build as run_build

    opts = parse_options(options)
    if base_url:
        opts["base_url"] = base_url
    config = BuildConfig(
        sources=list(sources),
        out_dir=out_dir,
        backend=backend,
        backend_options=opts,
        target_model=target_model,
        launch_date=launch_date,
        keywords_file=keywords_file,
        source_format=source_format,
        relevance_threshold=threshold,
        concurrency=concurrency,
        timeout_s=timeout_s,
        max_attempts=max_attempts,
        cache_dir=cache_dir,
        resume=resume,
        offline=offline,
        allow_private_media=allow_private_media,
        pseudonymize=pseudonymize,
        license=license_id,
    )
    header_shown = False

    def show(entry: dict[str, Any]) -> None:
        nonlocal header_shown
        if not header_shown:  # printed with the first finished stage, so a failed start prints only the error
            click.echo(f"{'stage':<22} {'in':>8} {'out':>8} {'failures':>8}")
            header_shown = True
        click.echo(f"{entry['name']:<22} {entry['in']:>8} {entry['out']:>8} {entry['failures']:>8}")

    result = run_build(config, on_stage=show)
    stages = {entry["name"]: entry for entry in result.report["stages"]}
    configs = stages["applicability"]["configs"]
    click.echo(
        f"\nsamples: {stages['extract']['out']} extracted; configs: "
        + ", ".join(f"{name} {n}" for name, n in configs.items())
        + f", dropped {stages['applicability']['dropped']}; report: {result.out_dir / 'report.json'}"
    )
    if offline:
        from echo_builder.stages.media import OFFLINE_MISS

        missed = sum(OFFLINE_MISS in error for sample in result.samples for error in sample.media_errors)
        if missed:
            click.echo(
                f"note: {missed} image(s) were not in the media store and --offline downloads nothing; those "
                f"samples lack their images (see {result.out_dir / 'stages' / 'failures.jsonl'}). Copy an "
                f"earlier build's media/ folder into {result.out_dir}, or build without --offline.",
                err=True,
            )
    dead = [
        n for n in ("relevance", "extract") if stages[n]["in"] and stages[n]["failures"] == stages[n]["in"]
    ]
    if dead:
        click.echo(
            f"error: every model call of {' and '.join(dead)} failed; see {result.out_dir / 'stages' / 'failures.jsonl'}",
            err=True,
        )
        sys.exit(1)


@click.command()
@click.argument("directory", type=click.Path(exists=True, file_okay=False))
@click.option("--repo-id", required=True, help="Hub dataset repository, owner/name.")
@click.option("--private", is_flag=True, help="Create the repository as private.")
@click.option("--token", envvar="HF_TOKEN", help="Hub token (default: $HF_TOKEN or the saved login).")
@click.option(
    "--pseudonymize/--no-pseudonymize",
    default=True,
    show_default=True,
    help="Refuse to upload a dataset whose handles were not pseudonymized at build time.",
)
def publish(directory: str, repo_id: str, private: bool, token: str | None, pseudonymize: bool) -> None:
    """Upload a built dataset folder (every config's Parquet and the card) to the Hub in one commit."""
    from echo_dataset.errors import EchoDatasetError
    from echo_dataset.publish import publish as run_publish

    register_secret(token)  # a --token given on the command line is hidden like $HF_TOKEN
    protect_logging()
    try:
        result = run_publish(directory, repo_id, token=token, private=private, pseudonymize=pseudonymize)
    except EchoDatasetError as exc:
        raise click.ClickException(redact(str(exc))) from None
    click.echo(f"published {directory} to https://huggingface.co/datasets/{repo_id} ({result})")
