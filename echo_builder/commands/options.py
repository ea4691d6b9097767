"""Option parsing shared by the subcommands.

Numeric options use :class:`Number` (click's ``FloatRange`` / ``IntRange`` semantics): nan, inf and values out of
the accepted range are refused while the command line is parsed, as one ``error: --OPTION: ...`` line naming the
option and the accepted range (exit 1), before anything is read or written.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from typing import Any, TypeVar

import click

from echo_builder.errors import ConfigError

__all__ = [
    "MAX_CONCURRENCY",
    "MAX_LIMIT",
    "MAX_N_BOOT",
    "MAX_SEED",
    "MAX_TIMEOUT_S",
    "Number",
    "RegistryChoice",
    "RegistryHelpOption",
    "backend_options",
    "call_limit_options",
    "parse_options",
    "registry_names",
]

F = TypeVar("F", bound=Callable[..., Any])
#: Longest accepted ``--timeout`` in seconds (one day): longer is a typo and overflows the event loop's clock.
MAX_TIMEOUT_S = 86_400.0
#: Most model calls in flight (batch size of a local model) a run accepts.
MAX_CONCURRENCY = 1024
#: Largest ``--limit`` (samples) accepted.
MAX_LIMIT = 10**9
#: Largest ``--n-boot`` (bootstrap replicates) accepted: each replicate refits the model table.
MAX_N_BOOT = 1_000_000
#: Largest seed accepted (numpy's and torch's generators take any value in ``[0, 2**32)``).
MAX_SEED = 2**32 - 1


class Number(click.ParamType):
    """A finite int or float in ``[low, high]`` (an end is excluded with ``low_open`` / ``high_open``).

    A value that is not a number, is nan or inf, or lies outside the range raises :class:`click.ClickException`
    (shown by the CLI as one ``error:`` line naming the option and the range, exit 1).

    Args:
        kind: ``int`` or ``float``.
        low, high: the range ends (``None``: unbounded on that side).
        unit: what the number counts (``seconds``), shown in the error.
    """

    def __init__(
        self,
        kind: type,
        low: float | None = None,
        high: float | None = None,
        *,
        low_open: bool = False,
        high_open: bool = False,
        unit: str = "",
    ) -> None:
        self.kind, self.low, self.high = kind, low, high
        self.low_open, self.high_open, self.unit = low_open, high_open, unit
        self.name = "integer" if kind is int else "float"

    def accepted(self) -> str:
        """The accepted values in words, e.g. ``a whole number in [1, 1024]``."""
        what = "a whole number" if self.kind is int else "a finite number"
        if self.low is None and self.high is None:
            span = ""
        elif self.high is None:
            span = f" {'>' if self.low_open else '>='} {_show(self.low)}"
        elif self.low is None:
            span = f" {'<' if self.high_open else '<='} {_show(self.high)}"
        else:
            span = f" in {'(' if self.low_open else '['}{_show(self.low)}, {_show(self.high)}{')' if self.high_open else ']'}"
        return what + span + (f" ({self.unit})" if self.unit else "")

    def get_metavar(self, param: click.Parameter, ctx: click.Context | None = None) -> str:
        return "INTEGER" if self.kind is int else "FLOAT"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if isinstance(value, self.kind) and not isinstance(value, bool):
            number = value
        else:
            try:
                number = self.kind(str(value).strip())
            except (TypeError, ValueError, OverflowError):
                number = None
        ok = number is not None and math.isfinite(number)
        if ok and self.low is not None:
            ok = number > self.low if self.low_open else number >= self.low
        if ok and self.high is not None:
            ok = number < self.high if self.high_open else number <= self.high
        if not ok:
            name = max(param.opts, key=len) if param is not None and param.opts else "value"
            raise click.ClickException(f"{name}: {str(value)!r} is not accepted; give {self.accepted()}")
        return number


def _show(value: float | None) -> str:
    return str(int(value)) if value is not None and float(value).is_integer() else f"{value:g}"


class _NonFinite:
    """Stands for a ``NaN`` / ``Infinity`` / ``-Infinity`` JSON constant while an option value is parsed."""


def _has_non_finite(value: Any) -> bool:
    if isinstance(value, _NonFinite):
        return True
    if isinstance(value, dict):
        return any(_has_non_finite(v) for v in value.values())
    if isinstance(value, list):
        return any(_has_non_finite(v) for v in value)
    return False


def parse_options(pairs: tuple[str, ...]) -> dict[str, Any]:
    """``("timeout_s=30", "base_url=http://x/v1")`` -> dict; values are JSON when they parse, else strings.

    Raises:
        click.BadParameter: a pair without ``=``.
        ConfigError: a value spelling nan or inf as JSON (``NaN``, ``Infinity``): no option accepts them.
    """
    options: dict[str, Any] = {}
    for pair in pairs:
        key, sep, raw = pair.partition("=")
        if not sep or not key:
            raise click.BadParameter(f"expected KEY=VALUE, got {pair!r}", param_hint="--option")
        try:
            value = json.loads(raw, parse_constant=lambda name: _NonFinite())
        except json.JSONDecodeError:
            value = raw
        options[key] = value
        if _has_non_finite(value):
            raise ConfigError(
                f"-o {pair}: {key} must be a finite number (nan and inf are not accepted)"
            ) from None
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
        type=Number(int, 1, 100),
        help="Attempts per model call (429/5xx/timeouts back off) before it is a recorded failure.",
    )(function)
    return click.option(
        "--timeout",
        "timeout_s",
        default=120.0,
        show_default=True,
        type=Number(float, 0, MAX_TIMEOUT_S, low_open=True, unit="seconds"),
        help=f"Seconds per model-call attempt, in (0, {MAX_TIMEOUT_S:g}].",
    )(function)


def registry_names(kind: str) -> list[str]:
    """The names registered for ``kind`` (``"source"``, ``"backend"``, ``"generator"``, ...), plugins included,
    in declaration order (built-ins first); ``[]`` for a kind this version does not have."""
    from echo_builder.registry import all_registries

    registry = all_registries().get(kind)
    return registry.names() if registry is not None else []


class RegistryChoice(click.ParamType):
    """One of the names registered for a kind (plugins included), read from the registry when an argument is
    checked or ``--help`` is shown, never when the CLI is imported.

    An unknown name is refused while the command line is parsed, before anything is read or written: one
    ``error:`` line naming the option, the value and the registered names (exit 1, like :class:`Number`).
    """

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self.name = kind

    def get_metavar(self, param: click.Parameter, ctx: click.Context | None = None) -> str:
        return "[" + "|".join(registry_names(self.kind)) + "]"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        names = registry_names(self.kind)
        if isinstance(value, str) and value in names:
            return value
        from echo_builder.registry import all_registries

        what = "source format" if self.kind == "source" else self.kind
        option = max(param.opts, key=len) if param is not None and param.opts else "value"
        registry = all_registries().get(self.kind)
        broken = [p for p in (registry.problems() if registry is not None else []) if p.name == value]
        why = f"; {broken[0]}" if broken else " (plugins: echo-bench plugins)"
        raise click.ClickException(
            f"{option}: {str(value)!r} is not a registered {what}; choose from {', '.join(names)}{why}"
        )

    def shell_complete(self, ctx: click.Context, param: click.Parameter, incomplete: str) -> list[Any]:
        from click.shell_completion import CompletionItem

        return [CompletionItem(n) for n in registry_names(self.kind) if n.startswith(incomplete)]


class RegistryHelpOption(click.Option):
    """A ``click.Option`` whose help text names the registered entries of a kind, read only when ``--help`` is
    shown: ``help`` may hold ``{names}``, replaced by the registered names (plugins included)."""

    def __init__(self, *args: Any, registry_kind: str, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.registry_kind = registry_kind

    def get_help_record(self, ctx: click.Context) -> tuple[str, str] | None:
        template = self.help or ""
        try:
            self.help = template.replace("{names}", ", ".join(registry_names(self.registry_kind)))
            return super().get_help_record(ctx)
        finally:
            self.help = template
