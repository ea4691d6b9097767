"""``expand`` (optional, ``build --expand x|bluesky|reddit``): fetch the conversations of the kept posts from the
platform before ``threads`` links them (ECHO Flow 1: "for every kept post the whole conversation is fetched").

Runs after ``relevance`` (on the kept posts) and before ``threads``, only in a build whose
:class:`~echo_builder.pipeline.BuildConfig` sets ``expand``; a build without it writes exactly what it wrote before
this stage existed. For each platform named, :class:`echo_builder.collect.expand.Expander` fetches the missing
ancestors and the replies of the kept posts of that platform, then of the posts found, bounded by
``expand_depth`` (rounds), ``expand_max_tree`` (posts added per conversation) and ``expand_max_requests`` (pages per
platform, cached ones included). Files:

- ``OUT/expand/pages.jsonl``: the page cache (a rerun makes no request; a killed run continues where it stopped);
- ``OUT/expand/<platform>.jsonl``: the fetched pages in the platform's export shape, read by the same reader as
  exports (``x_api``, ``bluesky``, ``reddit``); the posts not already read join ``context.posts``;
- ``OUT/stages/expand.jsonl``: one row per added post, ``{"id", "platform", "round", "request"}``: the posts that
  came from expansion, apart from those linked within the exports.

``report.json`` gets a top-level ``expansion`` entry (``requests``, ``posts_added``, ``trees_touched``,
``truncated_by_budget``, ``truncated_by_depth``, ``truncated_by_size``, ``errors``, per platform under
``platforms``); the ``threads`` entry's ``added_by_expansion`` keeps its meaning (posts linked into trees from the
files, expansion's included). Requests made by this run (0 in a rerun) go to ``run_stats.json``.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from echo_builder.errors import ConfigError
from echo_builder.stages.registry import StageContext, StageDefinition, StageOutput, declare_stage

if TYPE_CHECKING:
    from echo_builder.pipeline import BuildConfig

__all__ = ["EXPAND_VERSION", "EXPANSION_FIELDS", "expansion_settings", "prepare_expand", "run_expand_stage"]

EXPAND_VERSION = "expand-v1"
EXPAND_DIR = "expand"
#: ``expand_options`` that change what is fetched (recorded in ``build.json``); the others (``base_url``,
#: ``sleep``, ``max_wait_s``, ...) change only how.
_RECORDED_OPTIONS = ("archive",)
#: The fields of the stage's report entry, copied to ``report.json``'s top-level ``expansion``.
EXPANSION_FIELDS = (
    "requests",
    "posts_added",
    "trees_touched",
    "truncated_by_budget",
    "truncated_by_depth",
    "truncated_by_size",
    "errors",
    "platforms",
)


def _platforms(config: BuildConfig) -> list[str]:
    from echo_builder.collect.expand import EXPAND_PLATFORMS

    value = config.expand
    names = [value] if isinstance(value, str) else list(value or ())
    out: list[str] = []
    for name in names:
        for part in str(name).split(","):
            part = part.strip().lower()
            if part not in EXPAND_PLATFORMS:
                raise ConfigError(f"--expand takes {', '.join(EXPAND_PLATFORMS)} (or several), got {part!r}")
            if part not in out:
                out.append(part)
    return out


def expansion_settings(config: BuildConfig) -> dict[str, Any]:
    """What ``build.json`` records of the expansion (a resumed build must expand the same way)."""
    options = config.expand_options or {}
    return {
        "platforms": _platforms(config),
        "depth": config.expand_depth,
        "max_tree": config.expand_max_tree,
        "max_requests": config.expand_max_requests,
        **{k: options[k] for k in _RECORDED_OPTIONS if k in options},
    }


def prepare_expand(config: BuildConfig) -> list[str]:
    """Check the expansion options before anything is written; the platforms to expand, in order.

    Raises :class:`ConfigError` for an unknown platform or bounds below 1 (requests below 0)."""
    platforms = _platforms(config)
    if not platforms:
        raise ConfigError("--expand needs a platform: x, bluesky or reddit")
    if config.expand_depth < 1 or config.expand_max_tree < 1:
        raise ConfigError(
            f"--expand-depth and --expand-max-tree must be >= 1, got {config.expand_depth}, {config.expand_max_tree}"
        )
    if config.expand_max_requests is not None and config.expand_max_requests < 0:
        raise ConfigError(f"--expand-max-requests must be >= 0, got {config.expand_max_requests}")
    return platforms


def _parser(reader: str, platform: str) -> Any:
    from echo_builder.sources import get_source
    from echo_builder.sources.base import Document, FileContext

    adapter = get_source(reader)
    ctx = FileContext(f"{platform} expansion", Path(f"{platform}.jsonl"), keep_raw=False)

    def parse(body: Any) -> list[Any]:
        from echo_builder.records import Post

        items = adapter.parse_documents([Document("page", body)], ctx)
        return [item for item in items if isinstance(item, Post)]

    return parse


def run_expand_stage(context: StageContext) -> StageOutput:
    """Expand the kept posts' conversations on each platform of ``config.expand`` (see the module docstring)."""
    from echo_builder.collect.expand import (
        EXPAND_PLATFORMS,
        Expander,
        ExpansionCache,
        expansion_client,
        write_pages,
    )
    from echo_builder.sources import read_posts
    from echo_dataset.safe_io import check_inside, ensure_dir

    config = context.config
    platforms = context.prepared.get("expand") or prepare_expand(config)
    options = dict(config.expand_options or {})
    folder = context.out / EXPAND_DIR
    check_inside(context.out, folder)
    ensure_dir(context.out, folder)
    cache = ExpansionCache(folder / "pages.jsonl")
    known_ids = {p.id for p in context.posts}
    added_posts: list[Any] = []
    rows: list[dict[str, Any]] = []
    per_platform: dict[str, dict[str, Any]] = {}
    this_run: dict[str, int] = {}
    errors: list[str] = []
    seeds_total = 0
    waits = {
        k: options[k]
        for k in ("max_wait_s", "max_attempts", "max_rate_limited", "sleep", "clock")
        if k in options
    }
    for platform in platforms:
        seeds = [p for p in context.selected if p.platform == platform]
        seeds_total += len(seeds)
        reader = EXPAND_PLATFORMS[platform]
        expander = Expander(
            expansion_client(platform, options, config.expand_depth),
            cache,
            parse=_parser(reader, platform),
            depth=config.expand_depth,
            max_tree=config.expand_max_tree,
            max_requests=config.expand_max_requests,
            **waits,
        )
        done = expander.run(seeds, [p for p in context.posts if p.platform == platform])
        this_run[platform] = done.requests_this_run
        export = folder / f"{platform}.jsonl"
        write_pages(context.out, export, done.pages)
        posts = list(read_posts([export], format=reader).posts) if done.pages else []
        new = [p for p in posts if p.id not in known_ids]
        known_ids.update(p.id for p in new)
        added_posts.extend(new)
        for post in new:
            round_no, request = done.added.get(post.id, (None, None))
            rows.append({"id": post.id, "platform": platform, "round": round_no, "request": request})
        errors.extend(done.errors)
        per_platform[platform] = {
            "seeds": len(seeds),
            "requests": done.requests,
            "posts_added": len(new),
            "trees_touched": done.trees_touched,
            "truncated_by_budget": done.truncated_by_budget,
            "truncated_by_depth": done.truncated_by_depth,
            "truncated_by_size": done.truncated_by_size,
            "errors": done.errors,
        }
    context.posts = [*context.posts, *added_posts]
    summary = {
        key: sum(entry[key] for entry in per_platform.values())
        for key in (
            "requests",
            "posts_added",
            "trees_touched",
            "truncated_by_budget",
            "truncated_by_depth",
            "truncated_by_size",
        )
    }
    summary["errors"] = errors
    summary["platforms"] = per_platform
    context.run_stats["expansion"] = {"requests_this_run": this_run}
    return StageOutput(
        {"in": seeds_total, "out": len(added_posts), "failures": len(errors), **summary},
        files={"expand.jsonl": rows},
    )


STAGE = declare_stage(
    StageDefinition(
        name="expand",
        version=EXPAND_VERSION,
        run=run_expand_stage,
        after="relevance",
        reads=("selected", "posts"),
        writes=("posts",),
        report_fields=EXPANSION_FIELDS,
        prepare=prepare_expand,
        when=lambda config: bool(getattr(config, "expand", None)),
        extra="collect",
        description="fetch the kept posts' missing ancestors and replies from the platform (--expand), bounded",
    )
)
