"""``echo-bench collect x|bluesky|reddit``: keyword searches into the export files ``build`` reads."""

from __future__ import annotations

import shutil
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from echo_builder.collect.core import DEFAULT_QUERY_POSTS, DEFAULT_QUERY_REQUESTS, MAX_STALE_PAGES
from echo_builder.commands.options import EchoGroup, Number, run_config_option

__all__ = ["collect"]


def _common(func: Callable[..., Any]) -> Callable[..., Any]:
    options = [
        click.option(
            "--query-file",
            "query_file",
            required=True,
            type=click.Path(exists=True, dir_okay=False),
            help="Keyword list, as build's --keywords (JSON: terms or objects with the keys term (required), "
            "window_days, before_days; or text: one term per line, optional TAB/| window in days). One search per "
            "keyword, over its window around --launch-date.",
        ),
        click.option(
            "--launch-date", help="The target model's launch date (YYYY-MM-DD); needed by windowed keywords."
        ),
        click.option("--since", help="Search no earlier than this (YYYY-MM-DD or ISO 8601 time, UTC)."),
        click.option("--until", help="Search no later than this (YYYY-MM-DD or ISO 8601 time, UTC)."),
        click.option(
            "--out",
            "out_dir",
            required=True,
            type=click.Path(file_okay=False),
            help="Collection folder: posts/*.jsonl (the input of build), collect.json, and the checkpoint "
            ".collect/state.json. Run the same command again to continue an interrupted collection.",
        ),
        click.option(
            "--max-posts",
            type=Number(int, 1, None),
            help="Stop after reading this many posts in all (X bills each post read). A later run with a larger "
            "value continues.",
        ),
        click.option(
            "--max-requests", type=Number(int, 1, None), help="Stop after this many search requests in all."
        ),
        click.option(
            "--max-posts-per-query",
            default=DEFAULT_QUERY_POSTS,
            show_default=True,
            type=Number(int, 1, None),
            help="Each query (a keyword search, a comment tree) stops after reading this many posts; raise it "
            "explicitly for a larger collection (a later run with a larger value continues).",
        ),
        click.option(
            "--max-requests-per-query",
            default=DEFAULT_QUERY_REQUESTS,
            show_default=True,
            type=Number(int, 1, None),
            help="Each query stops after this many pages (a server that keeps handing out cursors ends here). A "
            f"query also stops after {MAX_STALE_PAGES} pages in a row with no new post.",
        ),
        click.option(
            "--request-deadline",
            "deadline_s",
            default=120.0,
            show_default=True,
            type=Number(float, 1, 3600),
            help="Seconds one request may take in all (redirects, headers and body; a server dripping bytes is "
            "cut off there).",
        ),
        click.option(
            "--max-wait",
            "max_wait_s",
            default=900.0,
            show_default=True,
            type=Number(float, 0, None),
            help="Seconds this run may wait for rate limits, in all; past it the run stops (rerun later).",
        ),
        click.option(
            "--max-attempts",
            default=4,
            show_default=True,
            type=Number(int, 1, 20),
            help="Attempts per page for server errors and unreadable answers.",
        ),
        click.option(
            "--base-url",
            help="Send the API requests to this URL instead of the platform's host (a proxy or a test server). "
            "Only its host and port may be a non-public address; link-local and cloud-metadata addresses never.",
        ),
        click.option(
            "--progress/--no-progress",
            default=None,
            help="Progress bar on stderr (default: when a terminal).",
        ),
    ]
    for option in reversed(options):
        func = option(func)
    return run_config_option(func)


def _plan(platform: Any, kw: dict[str, Any]) -> list[Any]:
    from echo_builder.collect.core import parse_bound, plan_jobs
    from echo_builder.stages.query import load_keywords, parse_launch_date

    keywords = load_keywords(kw["query_file"])
    jobs, notes = plan_jobs(
        keywords,
        platform,
        launch=parse_launch_date(kw["launch_date"]),
        since=parse_bound(kw["since"], "--since"),
        until=parse_bound(kw["until"], "--until"),
    )
    for note in notes:
        click.echo(f"note: {note}", err=True)
    return jobs


def _run(platform: Any, kw: dict[str, Any], *, max_cost: float | None = None) -> None:
    from echo_builder.collect.core import Collector
    from echo_builder.collect.estimate import estimate_collection
    from echo_builder.outlock import exclusive_output
    from echo_builder.secrets import protect_logging

    protect_logging()
    jobs = _plan(platform, kw)
    estimate = estimate_collection(
        platform.name, len(jobs), max_posts=kw["max_posts"], max_posts_per_query=kw["max_posts_per_query"]
    )
    if estimate.price is not None:  # X bills every post read: say what this run may cost before it starts
        click.echo(f"note: {estimate.describe()}", err=True)
        if max_cost is not None and estimate.cost_usd is not None and estimate.cost_usd > max_cost:
            from echo_builder.errors import ConfigError

            raise ConfigError(
                f"this collection may cost up to {estimate.shown_cost()}, over --max-cost ${max_cost:,.2f}; lower "
                "--max-posts or --max-posts-per-query, narrow the windows, or raise --max-cost (nothing was requested)"
            )
    progress = kw["progress"] if kw["progress"] is not None else sys.stderr.isatty()
    collector = Collector(
        platform,
        jobs,
        kw["out_dir"],
        max_posts=kw["max_posts"],
        max_requests=kw["max_requests"],
        max_posts_per_query=kw["max_posts_per_query"],
        max_requests_per_query=kw["max_requests_per_query"],
        max_wait_s=kw["max_wait_s"],
        max_attempts=kw["max_attempts"],
        progress=progress,
    )
    out = Path(kw["out_dir"])
    created = not out.exists()
    try:
        with exclusive_output(out, "collect"):
            result = collector.run()
    except BaseException:
        # stopped before anything was collected (e.g. a missing credential): leave no empty folder behind
        if created and out.is_dir() and not any(out.rglob("*.jsonl")):
            shutil.rmtree(out, ignore_errors=True)
        raise
    summary = result.summary
    click.echo(
        f"{summary['platform']}: {summary['posts']} posts from {len(jobs)} queries in {summary['requests']} "
        f"requests ({result.requests_this_run} this run), {summary['rate_limit_waits']['count']} rate-limit "
        f"waits; summary: {kw['out_dir']}/collect.json"
    )
    if result.budget_reached:
        click.echo(
            "note: the --max-posts/--max-requests budget is reached; run again with a larger one to continue",
            err=True,
        )
    elif result.query_budgets:
        click.echo(
            f"note: {result.query_budgets} of {len(summary['queries'])} queries stopped at --max-posts-per-query/"
            "--max-requests-per-query; run again with a larger one to read further",
            err=True,
        )
    launch = f" --launch-date {kw['launch_date']}" if kw["launch_date"] else ""
    click.echo(
        f"next: echo-bench build {kw['out_dir']}/posts --keywords {kw['query_file']}{launch} --out BUILD_DIR"
    )
    if result.errors:
        for error in result.errors:
            click.echo(f"error: {error}", err=True)
        sys.exit(1)


@click.group(cls=EchoGroup)
def collect() -> None:
    """Search X, Bluesky or Reddit for the keywords of a query file into export files that `build` reads.

    Credentials come from the environment (X_BEARER_TOKEN; BLUESKY_HANDLE and BLUESKY_APP_PASSWORD;
    REDDIT_CLIENT_ID, REDDIT_CLIENT_SECRET, REDDIT_USER_AGENT) and are never written. Needs the collect extra:
    pip install -e ".[collect]". See docs/collect.md for credentials, costs and rate limits.
    """


@collect.command("x")
@_common
@click.option(
    "--archive",
    is_flag=True,
    help="Full-archive search (/2/tweets/search/all; Pro or Enterprise access) instead of the last 7 days.",
)
@click.option(
    "--keep-retweets", is_flag=True, help="Do not add -is:retweet (retweets are billed but build skips them)."
)
@click.option(
    "--max-cost",
    type=Number(float, 0, None),
    help="Refuse to start when the posts this run may read (queries x --max-posts-per-query, capped by "
    "--max-posts) would cost more than this many US dollars at the price of prices.yaml ($0.005 a post).",
)
def collect_x(archive: bool, keep_retweets: bool, max_cost: float | None, **kw: Any) -> None:
    """X API v2 search (tweepy) with a bearer token from X_BEARER_TOKEN. X bills every post read: the run prints
    the most it may read and cost before it starts (`estimate collect`), --max-cost refuses a run past a limit, and
    --max-posts caps the spend (docs/collect.md has the cost model)."""
    from echo_builder.collect.x import XSearch

    platform = XSearch(
        archive=archive, keep_retweets=keep_retweets, base_url=kw["base_url"], deadline_s=kw["deadline_s"]
    )
    _run(platform, kw, max_cost=max_cost)


@collect.command("bluesky")
@_common
@click.option(
    "--sort",
    type=click.Choice(["latest", "top"]),
    default="latest",
    show_default=True,
    help="searchPosts order: latest (every match, newest first) or top.",
)
def collect_bluesky(sort: str, **kw: Any) -> None:
    """Bluesky app.bsky.feed.searchPosts (atproto), signed in with BLUESKY_HANDLE and BLUESKY_APP_PASSWORD."""
    from echo_builder.collect.bluesky import BlueskySearch

    _run(BlueskySearch(base_url=kw["base_url"], sort=sort, deadline_s=kw["deadline_s"]), kw)


@collect.command("reddit")
@_common
@click.option(
    "--subreddit",
    "subreddits",
    multiple=True,
    default=("all",),
    show_default=True,
    metavar="NAME",
    help="Subreddit to search (repeatable; several are searched together). Default: all of Reddit.",
)
@click.option(
    "--comments",
    is_flag=True,
    help="After the searches, read the comment tree of every submission found, 'more' stubs expanded "
    "(morechildren): one request per submission plus one per 'more' stub (up to 100 hidden comments each).",
)
@click.option(
    "--comment-sort",
    type=click.Choice(["confidence", "top", "new", "old", "controversial", "qa"]),
    default="confidence",
    show_default=True,
    help="Comment order of the trees (confidence is Reddit's 'best').",
)
def collect_reddit(subreddits: tuple[str, ...], comments: bool, comment_sort: str, **kw: Any) -> None:
    """Reddit search (PRAW) with a script app: REDDIT_CLIENT_ID, REDDIT_CLIENT_SECRET, REDDIT_USER_AGENT
    (and optionally REDDIT_USERNAME, REDDIT_PASSWORD)."""
    from echo_builder.collect.reddit import RedditSearch

    platform = RedditSearch(
        list(subreddits),
        base_url=kw["base_url"],
        comments=comments,
        comment_sort=comment_sort,
        deadline_s=kw["deadline_s"],
    )
    _run(platform, kw)
