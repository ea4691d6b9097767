"""Option parsing shared by the subcommands."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any, TypeVar

import click

__all__ = ["backend_options", "call_limit_options", "parse_options"]

F = TypeVar("F", bound=Callable[..., Any])


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


def call_limit_options(function: F) -> F:
    """``--timeout`` (``timeout_s``, seconds per attempt) and ``--max-attempts`` of model calls, with the
    :class:`~echo_builder.backends.caller.ModelCaller` defaults."""
    function = click.option(
        "--max-attempts",
        default=6,
        show_default=True,
        type=click.IntRange(1, 100),
        help="Attempts per model call (429/5xx/timeouts back off) before it is a recorded failure.",
    )(function)
    return click.option(
        "--timeout",
        "timeout_s",
        default=120.0,
        show_default=True,
        type=click.FloatRange(min=0, min_open=True),
        help="Seconds per model-call attempt.",
    )(function)
