"""``collect``: read the posts of every source (export files or folders) into one list (ECHO Flow 1, "collect").

The first stage of every build. The source format of each file is detected (or forced with ``--format``, see
:func:`echo_builder.sources.read_posts`); a file or record that cannot be read is a recorded problem of that file
or record only (``stages/collect_problems.jsonl``), never the end of the build. A build whose sources yield no post
at all stops with :class:`~echo_builder.stages.registry.NoPostsError`, naming the sources and the first problems.

Sources are streamed (compressed dumps decompressed on the fly), but a plain build keeps every post it reads: the
threads stage needs whole conversations. ``config.prefilter`` (``build --prefilter``) reads only the posts matching
the query's keywords and the threads around them (:mod:`echo_builder.sources.prefilter`), so a dump far larger than
memory can be built from; a plain build that reads over :data:`LARGE_BUILD_POSTS` posts warns and points at it.
The report lists each source file with errors (``files_with_errors``: file, error count, first reason; with
``files``, the number of inputs read) and the files of given folders that were not read (``skipped_files``), each
only when there is one.
"""

from __future__ import annotations

import warnings
from typing import Any

from echo_builder.stages.registry import (
    NoPostsError,
    StageContext,
    StageDefinition,
    StageOutput,
    declare_stage,
)

__all__ = ["STAGE"]

COLLECT_VERSION = "collect-v1"

#: a plain build reading more posts than this warns that ``--prefilter`` would bound its memory
LARGE_BUILD_POSTS = 1_000_000


def _describe(problem: dict[str, Any]) -> str:
    where = str(problem.get("file")) + (f" ({problem['location']})" if problem.get("location") else "")
    return f"{where}: {problem.get('reason')}"


def run_collect_stage(context: StageContext) -> StageOutput:
    """Read ``config.sources`` into ``context.posts`` and ``context.problems`` (only the keyword matches and their
    threads with ``config.prefilter``)."""
    from echo_builder.sources import read_posts

    config = context.config
    extra: dict[str, Any] = {}
    hf_columns = dict(getattr(config, "hf_columns", None) or {})
    keywords, launch = context.prepared.get("query", ([], None))
    if getattr(config, "prefilter", False) and keywords:
        from echo_builder.sources.prefilter import prefilter_posts

        collected, stats = prefilter_posts(
            list(config.sources), keywords, launch, format=config.source_format, hf_columns=hf_columns
        )
        extra["prefilter"] = {
            "matched": stats.matched,
            "thread_keys": stats.thread_keys,
            "kept": stats.kept,
        }
    else:
        if getattr(config, "prefilter", False):
            warnings.warn(
                "--prefilter needs keywords (--keywords or --target-model); every post is read",
                stacklevel=2,
            )
        collected = read_posts(list(config.sources), format=config.source_format, hf_columns=hf_columns)
        if len(collected.posts) > LARGE_BUILD_POSTS:
            warnings.warn(
                f"the sources hold {len(collected.posts):,} posts, all kept in memory; build --prefilter reads "
                "only the posts matching the keywords and their threads",
                stacklevel=2,
            )
    posts = list(collected.posts)
    problems = [dict(vars(p)) for p in collected.problems]
    errors = [p for p in problems if p.get("level", "error") == "error"]
    skipped = [str(s) for s in getattr(collected, "skipped_files", [])]
    if not posts:
        detail = "; ".join(_describe(p) for p in errors[:3]) or "no file in a supported format"
        if skipped:
            detail += f" (skipped: {', '.join(skipped[:5])})"
        raise NoPostsError(f"no post could be read from {', '.join(map(str, config.sources))}: {detail}")
    first: dict[str, str] = {}
    for problem in errors:
        first.setdefault(str(problem.get("file")), _describe(problem))
    bad_files = [
        {"file": f.path, "errors": f.errors, "first": first.get(f.path, "")}
        for f in getattr(collected, "files", [])
        if f.errors
    ]
    context.posts, context.problems = posts, problems
    return StageOutput(
        {
            "in": len(config.sources),
            "out": len(posts),
            "failures": len(errors),
            "notes": len(problems) - len(errors),
            "duplicates": getattr(collected, "duplicates", 0),
            # present only when there is something to say: a clean build's report is as before
            **({"files": len(collected.files), "files_with_errors": bad_files} if bad_files else {}),
            **({"skipped_files": skipped} if skipped else {}),
            **extra,
        },
        files={"collect.jsonl": posts, "collect_problems.jsonl": problems},
    )


STAGE = declare_stage(
    StageDefinition(
        name="collect",
        version=COLLECT_VERSION,
        run=run_collect_stage,
        after=None,
        writes=("posts", "problems"),
        files=("collect.jsonl", "collect_problems.jsonl"),
        report_fields=("notes", "duplicates", "files", "files_with_errors", "skipped_files", "prefilter"),
        description="read the posts of every source file or folder (format auto-detected)",
    )
)
