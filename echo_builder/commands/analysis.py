"""``echo-bench analyze``: ECHO's analysis half on a build or benchmark (failures, tasks, diversity, activity)."""

from __future__ import annotations

import sys
from datetime import date
from typing import Any

import click

from echo_builder.commands.options import (
    MAX_CONCURRENCY,
    MAX_N_BOOT,
    MAX_SEED,
    EchoCommand,
    Number,
    batch_options,
    call_limit_options,
    parse_options,
)
from echo_builder.outlock import locks_output

__all__ = ["analyze"]


def _launch_date(ctx: click.Context, param: click.Parameter, value: str | None) -> date | None:
    if value is None:
        return None
    try:
        return date.fromisoformat(value)
    except ValueError:
        raise click.ClickException(f"--launch-date: {value!r} is not a date; use YYYY-MM-DD") from None


@click.command(cls=EchoCommand)
@click.argument("source", metavar="BUILD_OR_BENCHMARK")
@click.option("--out", "out_dir", required=True, type=click.Path(file_okay=False), help="Folder to write.")
@click.option(
    "--backend",
    default="rules",
    show_default=True,
    metavar="SPEC",
    help="Labeller: rules (keyword lexicons) or an LLM such as openai:gpt-4o.",
)
@click.option(
    "--base-url",
    help="Server URL for an openai: labeller; give it once (replicas, several --base-url, are a judge option).",
)
@click.option(
    "-o",
    "--option",
    "options",
    multiple=True,
    metavar="KEY=VALUE",
    help="Labeller backend option; repeatable.",
)
@click.option(
    "--concurrency",
    default=8,
    show_default=True,
    type=Number(int, 1, MAX_CONCURRENCY),
    help=f"Labeller calls in flight, 1-{MAX_CONCURRENCY}.",
)
@call_limit_options
@click.option(
    "--lm",
    metavar="MODEL",
    help="Causal LM for perplexity: transformers:<hub id or folder> (e.g. EleutherAI/pythia-160m); omitted: no "
    "perplexity.",
)
@click.option(
    "--lm-option",
    "lm_options",
    multiple=True,
    metavar="KEY=VALUE",
    help="LM option: batch_size, max_length, dtype, revision; repeatable.",
)
@click.option(
    "--compare",
    multiple=True,
    metavar="PROMPTS_FILE",
    help="Reference prompt set (.txt one prompt a line, .csv/.tsv/.parquet); repeatable.",
)
@click.option("--compare-column", help="Prompt column of CSV/TSV/Parquet reference files.")
@click.option(
    "--launch-date",
    callback=_launch_date,
    metavar="YYYY-MM-DD",
    help="Day 0 of the timeline (default: the build's).",
)
@click.option("--target-model", help="Model the posts are about (default: the build's).")
@click.option(
    "--sample-size",
    type=Number(int, 1, 10**9),
    help="Common size for comparing diversity (default: the smallest prompt set); sets smaller than it show n/a "
    "at the common size.",
)
@click.option(
    "--n-boot",
    default=1000,
    show_default=True,
    type=Number(int, 1, MAX_N_BOOT),
    help="Subsets / bootstrap replicates for the intervals.",
)
@click.option("--seed", default=0, show_default=True, type=Number(int, 0, MAX_SEED), help="Random seed.")
@click.option(
    "--examples", default=3, show_default=True, type=Number(int, 0, 100), help="Example quotes per category."
)
@batch_options
@locks_output("analyze")
def analyze(
    source: str,
    out_dir: str,
    backend: str,
    base_url: str | None,
    options: tuple[str, ...],
    concurrency: int,
    timeout_s: float,
    max_attempts: int,
    lm: str | None,
    lm_options: tuple[str, ...],
    compare: tuple[str, ...],
    compare_column: str | None,
    launch_date: date | None,
    target_model: str | None,
    sample_size: int | None,
    n_boot: int,
    seed: int,
    examples: int,
    batch: bool = False,
    batch_retry: str = "online",
    batch_poll_s: float = 30.0,
) -> None:
    """What the community complains about, which tasks it tries, how diverse and fluent its prompts are, and
    when it posts (ECHO Figs. 3-5), for a build or benchmark folder.

    Writes OUT/analysis.json, OUT/analysis.md, OUT/plots/*.png and OUT/labels.jsonl (every label with its
    evidence); an LLM labeller's calls are cached in OUT/cache, so a rerun repeats none.
    """
    from echo_builder.analysis.run import run_analysis
    from echo_builder.errors import ConfigError

    backend_options: dict[str, Any] = parse_options(options)
    if base_url:
        if not backend.startswith("openai:"):
            raise ConfigError("--base-url applies to an openai: labeller only")
        backend_options["base_url"] = base_url
    lm_settings = parse_options(lm_options)
    unknown = sorted(set(lm_settings) - {"batch_size", "max_length", "dtype", "revision"})
    if unknown:
        raise ConfigError(
            f"--lm-option: unknown key(s) {', '.join(unknown)}; known: batch_size, max_length, dtype, revision"
        )
    if lm_settings and lm is None:
        raise ConfigError("--lm-option needs --lm")
    for key in ("batch_size", "max_length"):
        value = lm_settings.get(key)
        if value is not None and (
            isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 10**6
        ):
            raise ConfigError(f"--lm-option {key} must be a whole number in [1, 1000000], got {value!r}")
    result = run_analysis(
        source,
        out_dir,
        backend=backend,
        backend_options=backend_options,
        concurrency=concurrency,
        timeout_s=timeout_s,
        max_attempts=max_attempts,
        lm=lm,
        lm_options=lm_settings,
        compare=compare,
        compare_column=compare_column,
        launch_date=launch_date,
        target_model=target_model,
        sample_size=sample_size,
        n_boot=n_boot,
        seed=seed,
        examples=examples,
        batch=batch,
        batch_retry=batch_retry,
        batch_poll_s=batch_poll_s,
    )
    doc = result.document
    failures = doc["failures"]
    click.echo(
        f"Feedback texts labelled: {failures['summary']['items']} ({failures['summary']['failures']} labeller "
        f"failures, kept unlabelled)"
    )
    for row in failures["categories"][:10]:
        metric = row["metric"] or "no metric yet"
        click.echo(f"  {row['category'][:30]:<30} {row['items']:>6}  {metric}")
    click.echo(
        f"Prompts with a task: {sum(r['items'] for r in doc['tasks']['tasks'])} of {doc['tasks']['summary']['items']}"
    )
    for row in doc["diversity"]["sets"]:
        click.echo(
            f"  {row['name'][:30]:<30} {row['n_prompts']:>6} prompts, {row['unique_first_bigrams']} unique first bigrams"
        )
    for problem in doc["input"]["problems"][:5]:
        click.echo(f"note: {problem}", err=True)
    click.echo(f"wrote {result.out_dir / 'analysis.md'}")
    dead = [
        name
        for name, part in (("taxonomy", failures), ("tasks", doc["tasks"]))
        if part["summary"]["items"] and part["summary"]["failures"] == part["summary"]["items"]
    ]
    if dead:  # the report is written, but nothing in it was labelled: a script must notice
        click.echo(
            f"error: every labeller call of {' and '.join(dead)} failed (the texts are counted unlabelled); see "
            f"failed_items in {result.out_dir / 'analysis.json'}",
            err=True,
        )
        sys.exit(1)
