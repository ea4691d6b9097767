"""``echo-bench plugins``: every registered metric, source format, backend, generator and stage, and the plugins
that could not be loaded."""

from __future__ import annotations

import json
from typing import Any

import click

from echo_builder.commands.options import EchoCommand

__all__ = ["plugins"]


def _plain(value: Any) -> Any:
    """``value`` as JSON: scalars, lists and dicts as they are, a dataclass (a metric's spec, its options) as the
    mapping of its fields, anything else as its text. A non-finite float is its text (JSON has no NaN)."""
    import dataclasses
    import math

    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {
            f.name: _plain(getattr(value, f.name))
            for f in dataclasses.fields(value)
            if not f.name.startswith("_")
        }
    if isinstance(value, (list, tuple, frozenset, set)):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    return str(value)


def _rows(kinds: tuple[str, ...]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(entries, problems) of the chosen kinds (all when empty) as JSON-ready dicts, in registry order (stages
    in run order)."""
    from echo_builder.registry import ENTRY_POINT_GROUPS, all_registries

    entries: list[dict[str, Any]] = []
    problems: list[dict[str, Any]] = []
    for kind, registry in all_registries().items():
        if kinds and kind not in kinds:
            continue
        position: dict[str, int] = {}
        if kind == "stage":
            from echo_builder.stages.registry import stage_order

            # ordering first: it rejects the plugin stages that cannot run (an unknown ``after``, ...), which
            # are then listed only under problems, not as entries too
            position = {definition.name: i for i, definition in enumerate(stage_order(optional=True))}
        listed = registry.entries()
        if kind == "stage":  # in the order build runs them, not the order their modules were found
            listed = sorted(listed, key=lambda e: position.get(e.name, len(position)))
        for entry in listed:
            entries.append(
                {
                    "kind": kind,
                    "name": entry.name,
                    "origin": entry.origin,
                    "extra": entry.extra,
                    "description": " ".join(entry.description.split()),  # one line, whatever a plugin wrote
                    "target": entry.target,
                    "fields": {k: _plain(v) for k, v in entry.fields.items()},
                }
            )
        for problem in registry.problems():
            problems.append(
                {
                    "kind": kind,
                    "group": ENTRY_POINT_GROUPS[kind],
                    "name": problem.name,
                    "value": problem.value,
                    "distribution": problem.distribution,
                    "reason": problem.reason,
                }
            )
    return entries, problems


@click.command(cls=EchoCommand)
@click.option("--format", "fmt", type=click.Choice(["table", "json"]), default="table", show_default=True)
@click.option(
    "--kind",
    "kinds",
    multiple=True,
    type=click.Choice(["metric", "source", "backend", "generator", "stage"]),
    help="Only this kind; repeatable (default: every kind).",
)
def plugins(fmt: str, kinds: tuple[str, ...]) -> None:
    """List every registered extension (built-in or from an installed plugin) and the plugins that failed.

    Columns: kind, name, origin ("built-in" or the plugin's distribution and version), the pip extra a built-in
    needs (pip install -e ".[EXTRA]"; "core" when none) and a description. Plugins are packages that declare
    entry points in the groups echo_bench.metrics, echo_bench.sources, echo_bench.backends,
    echo_bench.generators and echo_bench.stages (docs/extending.md). A plugin that fails to import, is of the wrong
    type or takes a built-in's name is listed under "problems" and left out; the command still exits 0.
    """
    entries, problems = _rows(kinds)
    if fmt == "json":
        click.echo(json.dumps({"entries": entries, "problems": problems}, indent=2, ensure_ascii=False))
        return
    header = ("kind", "name", "origin", "install", "description")
    rows = [(e["kind"], e["name"], e["origin"], e["extra"] or "core", e["description"]) for e in entries]
    widths = [max([len(header[i]), *(len(r[i]) for r in rows)]) for i in range(4)]
    for row in (header, *rows):
        click.echo("  ".join(f"{row[i]:<{widths[i]}}" for i in range(4)) + "  " + row[4])
    if problems:
        click.echo(f"\nproblems ({len(problems)} plugin{'s' if len(problems) != 1 else ''} not loaded):")
        for p in problems:
            where = f" from {p['distribution']}" if p["distribution"] else ""
            click.echo(f"  {p['group']}: {p['name']} = {p['value']}{where}: {p['reason']}")
    else:
        click.echo("\nno plugin problems")
