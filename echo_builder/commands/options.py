"""Option parsing shared by the subcommands."""

from __future__ import annotations

import json
from typing import Any

import click

__all__ = ["backend_options", "parse_options"]


def parse_options(pairs: tuple[str, ...]) -> dict[str, Any]:
    """``("timeout_s=30", "base_url=http://x/v1")`` -> dict; values are JSON when they parse, else strings."""
    options: dict[str, Any] = {}
    for pair in pairs:
        key, sep, raw = pair.partition("=")
        if not sep or not key:
            raise click.BadParameter(f"expected KEY=VALUE, got {pair!r}", param_hint="--option")
        try:
            options[key] = json.loads(raw)
        except json.JSONDecodeError:
            options[key] = raw
    return options


def backend_options(specs: tuple[str, ...], base_url: str | None, options: tuple[str, ...]) -> dict[str, Any]:
    """The same options for every ``openai:`` judge (base URL) and every judge (``-o KEY=VALUE``)."""
    shared = parse_options(options)
    out = {}
    for spec in specs:
        opts = dict(shared)
        if base_url and spec.startswith("openai:"):
            opts["base_url"] = base_url
        out[spec] = opts
    return out
