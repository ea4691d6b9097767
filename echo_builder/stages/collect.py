"""``collect``: read the posts of every source (export files or folders) into one list (ECHO Flow 1, "collect").

The first stage of every build. The source format of each file is detected (or forced with ``--format``, see
:func:`echo_builder.sources.read_posts`); a file or record that cannot be read is a recorded problem of that file
or record only (``stages/collect_problems.jsonl``), never the end of the build. A build whose sources yield no post
at all stops with :class:`~echo_builder.stages.registry.NoPostsError`, naming the sources and the first problems.
"""

from __future__ import annotations

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


def _describe(problem: dict[str, Any]) -> str:
    where = str(problem.get("file")) + (f" ({problem['location']})" if problem.get("location") else "")
    return f"{where}: {problem.get('reason')}"


def run_collect_stage(context: StageContext) -> StageOutput:
    """Read ``config.sources`` into ``context.posts`` and ``context.problems``."""
    from echo_builder.sources import read_posts

    config = context.config
    collected = read_posts(list(config.sources), format=config.source_format)
    posts = list(collected.posts)
    problems = [dict(vars(p)) for p in collected.problems]
    errors = [p for p in problems if p.get("level", "error") == "error"]
    if not posts:
        detail = "; ".join(_describe(p) for p in errors[:3]) or "no file in a supported format"
        skipped = list(getattr(collected, "skipped_files", []))
        if skipped:
            detail += f" (skipped: {', '.join(map(str, skipped[:5]))})"
        raise NoPostsError(f"no post could be read from {', '.join(map(str, config.sources))}: {detail}")
    context.posts, context.problems = posts, problems
    return StageOutput(
        {
            "in": len(config.sources),
            "out": len(posts),
            "failures": len(errors),
            "notes": len(problems) - len(errors),
            "duplicates": getattr(collected, "duplicates", 0),
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
        report_fields=("notes", "duplicates"),
        description="read the posts of every source file or folder (format auto-detected)",
    )
)
