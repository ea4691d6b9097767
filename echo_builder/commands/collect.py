"""``echo-bench collect x|bluesky|reddit``: keyword searches into the export files ``build`` reads."""

from __future__ import annotations

import shutil
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

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
            help="Send the API requests to this URL instead of the platform's host (a proxy or a test server).",
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


def _run(platform: Any, kw: dict[str, Any]) -> None:
    from echo_builder.collect.core import Collector, parse_bound, plan_jobs
    from echo_builder.secrets import protect_logging
    from echo_builder.stages.query import load_keywords, parse_launch_date

    protect_logging()
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
    progress = kw["progress"] if kw["progress"] is not None else sys.stderr.isatty()
    collector = Collector(
        platform,
        jobs,
        kw["out_dir"],
        max_posts=kw["max_posts"],
        max_requests=kw["max_requests"],
        max_wait_s=kw["max_wait_s"],
        max_attempts=kw["max_attempts"],
        progress=progress,
    )
    out = Path(kw["out_dir"])
    created = not out.exists()
    try:
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
def collect_x(archive: bool, keep_retweets: bool, **kw: Any) -> None:
    """X API v2 search (tweepy) with a bearer token from X_BEARER_TOKEN. X bills every post read: cap the spend
    with --max-posts (docs/collect.md has the cost model)."""
    from echo_builder.collect.x import XSearch

    _run(XSearch(archive=archive, keep_retweets=keep_retweets, base_url=kw["base_url"]), kw)


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

    _run(BlueskySearch(base_url=kw["base_url"], sort=sort), kw)


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
        list(subreddits), base_url=kw["base_url"], comments=comments, comment_sort=comment_sort
    )
    _run(platform, kw)
