"""``threads``: rebuild the reply trees around the kept posts (ECHO Flow 1, "threads").

For each kept post: its ancestor chain up to the root, plus its replies and the root's (the conversation people
answered); newly found posts are expanded recursively, bounded by depth (reply levels below a kept post or the
root) and size (posts per tree). Kept posts that share a
root form one tree. The same post often appears in several exports: posts are de-duplicated by URL (the first
record wins) and their children merged. Real data is messy, and none of this crashes:

- a missing parent (deleted or not collected): the oldest reachable post becomes the tree's root and the missing id
  is recorded in ``Tree.missing_ids``;
- a reply cycle in corrupt data: the edge that would close the cycle is ignored;
- a post replying to itself: treated as having no parent;
- self-threads (the author continuing in replies) are ordinary replies and keep their order by creation time.

Children are ordered by creation time, then id, so the output is deterministic.
"""

from __future__ import annotations

import re
from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone

from echo_builder.records import Post, Tree
from echo_builder.stages.registry import StageContext, StageDefinition, StageOutput, declare_stage

__all__ = ["ThreadsResult", "build_trees", "canonical_url"]

_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
_X_STATUS = re.compile(
    r"^https?://(?:www\.|mobile\.)?(?:x|twitter)\.com/[^/]+/status(?:es)?/(\d+)", re.IGNORECASE
)


def canonical_url(url: str | None) -> str | None:
    """A URL key for de-duplication: X/Twitter status links reduce to the status id; others lose the query,
    fragment and trailing slash and are lower-cased in scheme and host."""
    if not url:
        return None
    match = _X_STATUS.match(url)
    if match:
        return f"x-status:{match.group(1)}"
    base = url.split("#", 1)[0].split("?", 1)[0].rstrip("/")
    scheme, sep, rest = base.partition("://")
    host, slash, path = rest.partition("/")
    return f"{scheme.lower()}{sep}{host.lower()}{slash}{path}"


@dataclass
class ThreadsResult:
    """Trees (ordered by root creation time, then root id) and counters for the report."""

    trees: list[Tree]
    duplicates_merged: int = 0
    cycles_broken: int = 0
    self_replies: int = 0
    missing_parents: int = 0
    truncated_trees: int = 0
    notes: list[str] = field(default_factory=list)


def _order_key(post: Post) -> tuple[datetime, str]:
    return (post.created_at or _EPOCH, post.id)


def build_trees(
    kept: Iterable[Post], all_posts: Sequence[Post], *, max_depth: int = 8, max_size: int = 500
) -> ThreadsResult:
    """Reply trees around ``kept`` using every collected post in ``all_posts`` (kept ones included or not).

    Args:
        kept: posts that passed relevance; they seed the trees.
        all_posts: the whole collection, where ancestors and replies are looked up.
        max_depth: reply levels expanded below each kept post (ancestors are always followed to the root).
        max_size: most posts in one tree; expansion stops there and the tree is counted as truncated.

    Raises:
        ValueError: ``max_depth`` < 0 or ``max_size`` < 1.
    """
    if max_depth < 0 or max_size < 1:
        raise ValueError(f"max_depth must be >= 0 and max_size >= 1, got {max_depth}, {max_size}")
    result = ThreadsResult(trees=[])
    kept = list(kept)
    # -- de-duplicate by id, then by URL; remember which ids were folded into which canonical id -------------------
    by_id: dict[str, Post] = {}
    alias: dict[str, str] = {}
    by_url: dict[str, str] = {}
    for post in [*kept, *all_posts]:
        if post.id in by_id or post.id in alias:
            continue
        # collection cases cite their source post's URL, and two cases may cite the same post: a case is its own
        # record, so only social posts are de-duplicated by URL
        key = canonical_url(post.url) if post.platform != "collection" else None
        if key is not None and key in by_url:
            alias[post.id] = by_url[key]
            result.duplicates_merged += 1
            continue
        by_id[post.id] = post
        if key is not None:
            by_url[key] = post.id

    def resolve(post_id: str | None) -> str | None:
        return alias.get(post_id, post_id) if post_id is not None else None

    parent: dict[str, str | None] = {}
    children: dict[str, list[str]] = {}
    for post in by_id.values():
        p = resolve(post.reply_to_id)
        if p == post.id:
            result.self_replies += 1
            p = None
        parent[post.id] = p
        if p is not None and p in by_id:
            children.setdefault(p, []).append(post.id)
    for kids in children.values():
        kids.sort(key=lambda pid: _order_key(by_id[pid]))

    # -- find each kept post's root, breaking cycles ------------------------------------------------------------------
    # Every post walked is remembered with its answer, so a reply chain is walked once however many of its posts
    # are kept (linear in the chain, not quadratic; a 100,000-post chain takes well under a second).
    root_cache: dict[str, tuple[str, str | None]] = {}

    def root_of(post_id: str) -> tuple[str, str | None]:
        """(root id, the missing parent id above it or None)."""
        path = [post_id]
        on_path = {post_id}
        current = post_id
        while True:
            if current in root_cache:
                answer = root_cache[current]
                break
            p = parent.get(current)
            if p is None:
                answer = (current, None)
                break
            if p not in by_id:
                answer = (current, p)
                break
            if p in on_path:  # a cycle: cut the edge from ``current`` to its parent
                result.cycles_broken += 1
                parent[current] = None
                children[p] = [c for c in children.get(p, []) if c != current]
                answer = (current, None)
                break
            path.append(p)
            on_path.add(p)
            current = p
        for pid in path:
            root_cache[pid] = answer
        return answer

    seeds_by_root: dict[str, dict[str, None]] = {}  # insertion-ordered sets
    missing_by_root: dict[str, set[str]] = {}
    for post in kept:
        pid = resolve(post.id)
        if pid not in by_id:
            continue
        root, missing = root_of(pid)
        seeds_by_root.setdefault(root, {}).setdefault(pid, None)
        if missing is not None:
            missing_by_root.setdefault(root, set()).add(missing)

    # -- grow each tree: ancestors of every seed, then replies breadth-first within the bounds -----------------------
    for root, seed_set in seeds_by_root.items():
        seeds = list(seed_set)
        members: dict[str, None] = {}
        for seed in seeds:
            # members are closed under "parent of" here, so the walk stops at the first post already in: each
            # ancestor is visited once per tree, and the insertion order (root first) is as a full walk gives
            chain: list[str] = []
            in_chain: set[str] = set()
            current: str | None = seed
            while (
                current is not None
                and current in by_id
                and current not in in_chain
                and current not in members
            ):
                chain.append(current)
                in_chain.add(current)
                current = parent.get(current)
            for pid in reversed(chain):
                members.setdefault(pid, None)
        queue = deque((seed, 0) for seed in seeds)
        # the root's whole conversation is what people reply to; expand from the root as well as from the seeds
        queue.appendleft((root, 0))
        truncated = False
        expanded: dict[str, int] = {}  # post -> smallest depth it was expanded at
        while queue:
            pid, depth = queue.popleft()
            if depth >= max_depth or expanded.get(pid, max_depth) <= depth:
                continue
            expanded[pid] = depth
            for child in children.get(pid, []):
                if child not in members:
                    if len(members) >= max_size:
                        truncated = True
                        break
                    members[child] = None
                queue.append((child, depth + 1))
        if truncated:
            result.truncated_trees += 1
        posts = sorted((by_id[pid] for pid in members), key=lambda p: (p.id != root, *_order_key(p)))
        edges = {
            pid: tuple(c for c in children.get(pid, []) if c in members)
            for pid in members
            if any(c in members for c in children.get(pid, []))
        }
        missing = sorted(missing_by_root.get(root, set()))
        result.missing_parents += len(missing)
        result.trees.append(
            Tree(
                root_id=root,
                posts=tuple(posts),
                children=edges,
                missing_ids=tuple(missing),
                seed_ids=tuple(sorted(seeds)),
            )
        )
    result.trees.sort(key=lambda t: _order_key(t.post(t.root_id)))
    return result


THREADS_VERSION = "threads-v1"


def run_threads_stage(context: StageContext) -> StageOutput:
    """Expand each selected post into its reply tree (from every collected post) -> ``context.trees``."""
    config = context.config
    roots = context.selected
    threads = build_trees(roots, context.posts, max_depth=config.max_depth, max_size=config.max_tree_size)
    context.trees = threads.trees
    in_trees = sum(len(t.posts) for t in threads.trees)
    return StageOutput(
        {
            "in": len(roots),
            "out": len(threads.trees),
            "failures": 0,
            "posts_in_trees": in_trees,
            "added_by_expansion": in_trees - len(roots),
            "duplicates_merged": threads.duplicates_merged,
            "cycles_broken": threads.cycles_broken,
            "self_replies": threads.self_replies,
            "missing_parents": threads.missing_parents,
            "truncated_trees": threads.truncated_trees,
        },
        files={"threads.jsonl": threads.trees},
    )


STAGE = declare_stage(
    StageDefinition(
        name="threads",
        version=THREADS_VERSION,
        run=run_threads_stage,
        after="relevance",
        reads=("selected", "posts"),
        writes=("trees",),
        report_fields=(
            "posts_in_trees",
            "added_by_expansion",
            "duplicates_merged",
            "cycles_broken",
            "self_replies",
            "missing_parents",
            "truncated_trees",
        ),
        description="rebuild each kept post's reply tree (ancestors, self-threads, replies), bounded",
    )
)
