"""Reply-chain depth costs linear work (issue 13 item 12: a 30,000-post chain took 512 s, 10,000 kept posts of one
chain did not finish in 600 s).

Work is measured deterministically, not by the clock: the number of Python lines executed inside the package
(``sys.settrace`` line events in ``echo_builder/``) for a chain of N and of 2N posts. Linear work doubles (ratio 2;
the test allows up to 2.6 for fixed costs that do not scale); quadratic work quadruples, cubic work octuples. Line
events do not see work done inside one C call (a membership test on a list, say), so the full 100,000-post chains
are also timed, in ``python -m bench.chains``.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

import echo_builder
from echo_builder.pipeline import BuildConfig, build
from echo_builder.records import Post, Tree
from echo_builder.stages.extract import MAX_RENDER_INDENT, render_tree
from echo_builder.stages.threads import build_trees
from tests.helpers.chains import chain_posts, write_chain

PACKAGE = str(Path(echo_builder.__file__).parent)


def package_lines(fn) -> int:
    """Line events executed in the package's own files while ``fn()`` runs."""
    count = 0

    def local(frame, event, arg):
        nonlocal count
        if event == "line":
            count += 1
        return local

    def tracer(frame, event, arg):
        return local if frame.f_code.co_filename.startswith(PACKAGE) else None

    sys.settrace(tracer)
    try:
        fn()
    finally:
        sys.settrace(None)
    return count


def _build(tmp_path: Path, n: int, kept: str) -> None:
    folder = tmp_path / f"{kept}-{n}"
    folder.mkdir()
    source = write_chain(folder / "chain.jsonl", n, kept=kept)
    build(
        BuildConfig(
            sources=[source],
            out_dir=folder / "out",
            target_model="Lumen-2",
            launch_date="2025-06-10",
            offline=True,
            progress=False,
        )
    )


@pytest.mark.parametrize("kept", ["all", "last"])
def test_build_work_grows_linearly_with_chain_depth(tmp_path, kept):
    _build(tmp_path, 50, kept)  # imports and first-use caches happen outside the measurement
    small = package_lines(lambda: _build(tmp_path, 1500, kept))
    large = package_lines(lambda: _build(tmp_path, 3000, kept))
    assert 1.6 < large / small < 2.6, (small, large)


def test_threads_work_is_linear_for_a_chain_of_kept_posts():
    def posts(n):
        return [Post.model_validate(p) for p in chain_posts(n, kept="all")]

    small, large = posts(2000), posts(4000)
    lines_small = package_lines(lambda: build_trees(small, small, max_depth=8, max_size=500))
    lines_large = package_lines(lambda: build_trees(large, large, max_depth=8, max_size=500))
    assert 1.8 < lines_large / lines_small < 2.3, (lines_small, lines_large)
    tree = build_trees(large, large).trees[0]
    assert len(tree.posts) == 4000 and tree.root_id == "x:1" and len(tree.seed_ids) == 4000


def test_render_tree_of_a_deep_chain_needs_no_recursion_and_stays_linear():
    posts = tuple(Post.model_validate(p) for p in chain_posts(5000, kept="last"))
    tree = Tree(root_id="x:1", posts=posts, children={f"x:{i}": (f"x:{i + 1}",) for i in range(1, 5000)})
    text = render_tree(tree)  # 5,000 levels: recursion would pass Python's default limit of 1,000
    lines = text.splitlines()
    assert len(lines) == 2 * 5000
    assert lines[0].startswith("[1] https://x.com/u0/status/1 ")
    assert lines[-2] == "  " * MAX_RENDER_INDENT + "[5000] https://x.com/u1/status/5000 (u1, 0 image(s))"
    assert max(len(line) - len(line.lstrip(" ")) for line in lines) == 2 * MAX_RENDER_INDENT + 4
