"""``echo-bench estimate judge|build``: price a judge run or a build before it starts (no call is sent)."""

from __future__ import annotations

import click

from echo_builder.commands.options import MAX_LIMIT, EchoGroup, Number, RegistryChoice

__all__ = ["estimate"]

_PRICES_HELP = "Price file (YAML, shaped like echo_builder/prices.yaml) whose entries replace or add to the shipped list prices."
_CACHE_HELP = (
    "A call cache with history (e.g. an earlier run's RUN/cache or build's OUT/cache): its mean tokens per call "
    "of each stage replace the defaults. Read only."
)


@click.group(cls=EchoGroup)
def estimate() -> None:
    """Price a planned judge run or build: calls x typical tokens per call x list prices, per stage.

    Typical tokens come from a call cache's history (--cache) when it has calls of the stage, otherwise from
    documented defaults (echo_builder/estimate.py). Nothing is called and nothing is written.
    """


@estimate.command("judge")
@click.option("--benchmark", required=True, help="Hub-shaped benchmark folder (or Hub dataset id).")
@click.option("--config", "config_name", required=True, help="Config to judge: image_to_image, ...")
@click.option(
    "--outputs", required=True, type=click.Path(file_okay=False), help="Folder <model>/<sample_id>.png."
)
@click.option(
    "--judge", "judges", required=True, multiple=True, metavar="SPEC", help="Judge spec; repeatable."
)
@click.option(
    "--mode",
    type=click.Choice(["single", "pairwise", "probability"]),
    default="single",
    show_default=True,
    help="The judge's --mode: single and probability send one call per output, pairwise two per pair of models.",
)
@click.option("--limit", type=Number(int, 1, MAX_LIMIT), help="Only the first N samples.")
@click.option("--judge-prompt", type=click.Path(exists=True, dir_okay=False), help="Judge prompt file.")
@click.option("--cache", "cache_dir", type=click.Path(file_okay=False), help=_CACHE_HELP)
@click.option("--prices", "prices_file", type=click.Path(exists=True, dir_okay=False), help=_PRICES_HELP)
def estimate_judge_command(
    benchmark: str,
    config_name: str,
    outputs: str,
    judges: tuple[str, ...],
    mode: str,
    limit: int | None,
    judge_prompt: str | None,
    cache_dir: str | None,
    prices_file: str | None,
) -> None:
    """Price `echo-bench judge` from its --benchmark, --config, --outputs, --judge, --mode, --limit and
    --judge-prompt: one row per judge, at online (not Batch API) list prices.

    Leave out judge's --out and its run options (--criteria, --batch, --base-url, --max-cost, ...): they are not
    options of this command.
    """
    from echo_builder.estimate import estimate_judge, format_estimate
    from echo_builder.prices import load_prices

    prices = load_prices(prices_file)
    rows = estimate_judge(
        benchmark,
        config_name,
        outputs,
        judges,
        prices,
        mode=mode,
        limit=limit,
        cache_dir=cache_dir,
        judge_prompt=judge_prompt,
    )
    click.echo(format_estimate(rows, prices))


@estimate.command("build")
@click.argument("sources", nargs=-1, required=True, type=click.Path(exists=True))
@click.option("--backend", required=True, help="The LLM spec the build would use, e.g. openai:gpt-4o.")
@click.option("--target-model", help="The image model the benchmark is about, e.g. 'GPT-4o'.")
@click.option("--launch-date", help="The target model's launch date (YYYY-MM-DD).")
@click.option(
    "--keywords",
    "keywords_file",
    type=click.Path(exists=True, dir_okay=False),
    help="Keyword list, as build's --keywords (JSON: terms or objects with the keys term (required), window_days, "
    "before_days; or text: one term per line, optional TAB/| window in days).",
)
@click.option(
    "--format",
    "source_format",
    type=RegistryChoice("source"),
    help="Force a source format instead of auto-detection, as build (plugin formats included).",
)
@click.option("--cache", "cache_dir", type=click.Path(file_okay=False), help=_CACHE_HELP)
@click.option("--prices", "prices_file", type=click.Path(exists=True, dir_okay=False), help=_PRICES_HELP)
def estimate_build_command(
    sources: tuple[str, ...],
    backend: str,
    target_model: str | None,
    launch_date: str | None,
    keywords_file: str | None,
    source_format: str | None,
    cache_dir: str | None,
    prices_file: str | None,
) -> None:
    """Price `echo-bench build` of SOURCES: the posts to rate are counted exactly (collect and query run, in
    memory); later stages take their calls per rated post from --cache's history, else one each (a ceiling).

    Prices the model stages every build runs (relevance to applicability, and installed plugin stages) at online
    list prices; the optional ones a build adds with --expand, --nsfw-check SPEC or --feedback-verdicts are not
    counted, nor is the Batch API discount.
    """
    from echo_builder.estimate import estimate_build, format_estimate
    from echo_builder.pipeline import BuildConfig
    from echo_builder.prices import load_prices

    prices = load_prices(prices_file)
    config = BuildConfig(
        sources=list(sources),
        out_dir=".",  # never written: only collect and query run, in memory
        backend=backend,
        target_model=target_model,
        launch_date=launch_date,
        keywords_file=keywords_file,
        source_format=source_format,
        progress=False,
    )
    rows = estimate_build(config, prices, cache_dir=cache_dir)
    if not rows:
        click.echo("the rules backend makes no model call: 0 USD")
        return
    click.echo(format_estimate(rows, prices))


@estimate.command("collect")
@click.argument("platform", type=click.Choice(["x", "bluesky", "reddit"]))
@click.option(
    "--query-file",
    required=True,
    type=click.Path(exists=True, dir_okay=False),
    help="The keyword list collect would read (as collect's --query-file).",
)
@click.option(
    "--launch-date", help="The target model's launch date (YYYY-MM-DD); needed by windowed keywords."
)
@click.option("--since", help="Search no earlier than this (YYYY-MM-DD or ISO 8601 time, UTC).")
@click.option("--until", help="Search no later than this (YYYY-MM-DD or ISO 8601 time, UTC).")
@click.option("--max-posts", type=Number(int, 1, None), help="collect's --max-posts (all queries together).")
@click.option(
    "--max-posts-per-query",
    default=None,
    type=Number(int, 1, None),
    help="collect's --max-posts-per-query (default: collect's default).",
)
@click.option("--prices", "prices_file", type=click.Path(exists=True, dir_okay=False), help=_PRICES_HELP)
@click.option("--json", "as_json", is_flag=True, help="Print the estimate as JSON.")
def estimate_collect_command(
    platform: str,
    query_file: str,
    launch_date: str | None,
    since: str | None,
    until: str | None,
    max_posts: int | None,
    max_posts_per_query: int | None,
    prices_file: str | None,
    as_json: bool,
) -> None:
    """The most posts `echo-bench collect PLATFORM` would read with these options, and on X their price (X bills
    every post read; Bluesky and Reddit do not). Nothing is requested: the queries are planned as collect plans
    them, each bounded by --max-posts-per-query and all by --max-posts."""
    import json

    from echo_builder.collect.core import DEFAULT_QUERY_POSTS, parse_bound, plan_jobs
    from echo_builder.collect.estimate import estimate_collection
    from echo_builder.stages.query import load_keywords, parse_launch_date

    class _Queries:  # plan_jobs needs only the platform's query syntax: an exact phrase on all three
        def query_for(self, term: str) -> str:
            return '"' + term.replace('"', " ").strip() + '"'

    jobs, notes = plan_jobs(
        load_keywords(query_file),
        _Queries(),  # type: ignore[arg-type]
        launch=parse_launch_date(launch_date),
        since=parse_bound(since, "--since"),
        until=parse_bound(until, "--until"),
    )
    for note in notes:
        click.echo(f"note: {note}", err=True)
    per_query = max_posts_per_query or DEFAULT_QUERY_POSTS
    found = estimate_collection(
        platform, len(jobs), max_posts=max_posts, max_posts_per_query=per_query, prices=prices_file
    )
    click.echo(json.dumps(found.to_dict(), indent=2) if as_json else found.describe())
