"""No module of ``echo_builder.judge`` imports another in a cycle, counting imports inside functions too.

A cycle hidden in function bodies (``judge/run.py`` importing ``missing_models`` from ``judge/leaderboard.py``, which
imported ``read_verdicts`` from ``judge/run.py``) works until someone moves an import to the top of a file; the
shared pieces live in ``judge/verdicts_file.py`` now. The imports are read with :mod:`ast`, nothing is imported.
"""

from __future__ import annotations

import ast
from pathlib import Path

import echo_builder.judge

JUDGE = Path(echo_builder.judge.__file__).parent


def _module_name(package: str, path: Path, root: Path) -> str:
    rel = path.relative_to(root).with_suffix("")
    parts = [package, *rel.parts]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_graph(root: Path, package: str) -> dict[str, set[str]]:
    """``{module: modules of the package it imports}``, every ``import`` statement anywhere in the file."""
    modules = {_module_name(package, p, root): p for p in sorted(root.rglob("*.py"))}
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for name, path in modules.items():
        is_package = path.name == "__init__.py"
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.level:  # relative: from the module's own package upwards
                    base = name.split(".") if is_package else name.split(".")[:-1]
                    base = base[: len(base) - (node.level - 1)]
                    origin = ".".join(base + ([node.module] if node.module else []))
                else:
                    origin = node.module or ""
                targets = [f"{origin}.{alias.name}" for alias in node.names]
            for target in targets:
                # `from pkg import sub` names the submodule when there is one, else the package itself
                while target and target not in modules:
                    target = target.rpartition(".")[0]
                if target and target != name and target.startswith(package):
                    graph[name].add(target)
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle as ``[a, b, ..., a]``, or ``None`` (depth-first search, three colours)."""
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return [*stack[stack.index(nxt) :], nxt]
            if nxt not in state and (found := visit(nxt)):
                return found
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (found := visit(node)):
            return found
    return None


def test_no_import_cycle_among_judge_modules() -> None:
    graph = import_graph(JUDGE, "echo_builder.judge")
    assert find_cycle(graph) is None
    assert {"echo_builder.judge.run", "echo_builder.judge.leaderboard"} <= set(graph)


def test_run_and_leaderboard_share_the_verdicts_module() -> None:
    graph = import_graph(JUDGE, "echo_builder.judge")
    assert "echo_builder.judge.leaderboard" not in graph["echo_builder.judge.run"]
    assert "echo_builder.judge.run" not in graph["echo_builder.judge.leaderboard"]
    assert "echo_builder.judge.verdicts_file" in graph["echo_builder.judge.run"]
    assert "echo_builder.judge.verdicts_file" in graph["echo_builder.judge.leaderboard"]


def test_the_old_names_stay_importable() -> None:
    from echo_builder.judge import leaderboard, run, verdicts_file

    assert run.read_verdicts is verdicts_file.read_verdicts
    assert run.write_verdicts is verdicts_file.write_verdicts
    assert leaderboard.missing_models is verdicts_file.missing_models
    assert (run.VERDICTS_FILE, run.RUN_FILE) == ("verdicts.parquet", "run.json")


def test_the_checker_finds_a_cycle_inside_functions(tmp_path: Path) -> None:
    """The detector itself: a cycle made of function-level and relative imports is found."""
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("def f():\n    from pkg.b import g\n    return g\n")
    (pkg / "b.py").write_text("def g():\n    from . import c\n    return c\n")
    (pkg / "c.py").write_text("import pkg.a\n")
    (pkg / "d.py").write_text("from pkg.a import f\n")
    graph = import_graph(pkg, "pkg")
    assert graph["pkg.a"] == {"pkg.b"} and graph["pkg.b"] == {"pkg.c"} and graph["pkg.d"] == {"pkg.a"}
    assert find_cycle(graph) == ["pkg.a", "pkg.b", "pkg.c", "pkg.a"]
    (pkg / "c.py").write_text("")
    assert find_cycle(import_graph(pkg, "pkg")) is None


def _on_a_cycle(graph: dict[str, set[str]], start: str) -> list[str] | None:
    """A path ``[start, ..., start]`` through ``graph``, or ``None`` when ``start`` is on no cycle."""
    parents: dict[str, str] = {}
    frontier = sorted(graph.get(start, ()))
    for node in frontier:
        parents.setdefault(node, start)
    seen = set(frontier)
    while frontier:
        node = frontier.pop(0)
        if node == start:
            path = [start]
            while path[-1] != start or len(path) == 1:
                path.append(parents[path[-1]])
            return list(reversed(path))
        for nxt in sorted(graph.get(node, ())):
            if nxt not in seen:
                seen.add(nxt)
                parents[nxt] = node
                frontier.append(nxt)
    return None


def test_no_judge_module_is_on_an_import_cycle_through_other_packages() -> None:
    """``judge/run.py`` -> ``scoring`` -> ``judge/leaderboard.py`` -> ``judge/run.py`` would be the same circle as
    before, only longer: every module of ``echo_builder`` counts, imports inside functions too."""
    root = JUDGE.parent
    graph = import_graph(root, "echo_builder")
    cycles = {m: _on_a_cycle(graph, m) for m in sorted(graph) if m.startswith("echo_builder.judge")}
    assert {m: c for m, c in cycles.items() if c is not None} == {}
    # the checker sees cross-package edges (scoring's run reads the judge's output discovery)
    assert "echo_builder.judge.run" in graph["echo_builder.scoring.run"]


def test_the_cycle_search_finds_a_long_circle() -> None:
    graph = {"j.run": {"s.run", "x"}, "s.run": {"j.board"}, "j.board": {"j.run"}, "x": set(), "y": {"j.run"}}
    assert _on_a_cycle(graph, "j.run") == ["j.run", "s.run", "j.board", "j.run"]
    assert _on_a_cycle(graph, "y") is None and _on_a_cycle(graph, "x") is None
