"""Option parsing shared by the subcommands.

Numeric options use :class:`Number` (click's ``FloatRange`` / ``IntRange`` semantics): nan, inf and values out of
the accepted range are refused while the command line is parsed, as one ``error: --OPTION: ...`` line naming the
option and the accepted range (exit 1), before anything is read or written.

Every command is declared with ``cls=EchoCommand`` (a group with ``cls=EchoGroup``, whose subcommands then are
``EchoCommand``): an option that takes one value, given twice, is a usage error naming it
(:func:`refuse_repeated_options`); tests/test_cli_checks.py checks every command of the tree.
"""

from __future__ import annotations

import json
import math
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import click

from echo_builder.errors import ConfigError

__all__ = [
    "MAX_CONCURRENCY",
    "MAX_LIMIT",
    "MAX_N_BOOT",
    "MAX_RUN_CONFIG_BYTES",
    "MAX_SEED",
    "MAX_TIMEOUT_S",
    "VOTES_FILE_HELP",
    "ByteSize",
    "EchoCommand",
    "EchoGroup",
    "Number",
    "RegistryChoice",
    "RegistryHelpOption",
    "backend_options",
    "batch_options",
    "call_limit_options",
    "parse_options",
    "read_run_config",
    "refuse_repeated_options",
    "registry_names",
    "run_config_option",
    "run_config_record",
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


def refuse_repeated_options(command: click.Command, ctx: click.Context, args: Sequence[str]) -> None:
    """Refuse a single-value option (or flag) given more than once in ``args``: click keeps the last silently.

    Options declared ``multiple=True`` (``--judge``, ``-o KEY=VALUE``, judge's replica ``--base-url``) and counters
    (``-v``) may repeat; every other option may appear once. Values from ``--run-config`` are defaults, not
    arguments, so a key of the file and the same option on the command line is no repeat (the command line wins).
    With ``--help`` among the arguments nothing is refused (the help is shown), and shell completion
    (``ctx.resilient_parsing``) is never interrupted.

    Raises:
        click.UsageError: ``option --out is given 2 times, but takes one value; give it once`` (shown by the CLI as
            one ``error:`` line, exit 2).
    """
    if ctx.resilient_parsing:
        return
    try:
        # a dry run of click's own parser (which consumes its list: a copy), so that spellings, ``--opt=value``,
        # short-option clusters and ``--`` are read exactly as the real parse reads them
        _, _, order = command.make_parser(ctx).parse_args(args=list(args))
    except click.UsageError:
        return  # an unknown option, a missing value...: the real parse reports it
    help_option = command.get_help_option(ctx)
    if help_option is not None and help_option in order:
        return
    for param, times in Counter(order).items():
        if not isinstance(param, click.Option) or param.multiple or param.count or times < 2:
            continue
        spelling = "/".join([*param.opts, *param.secondary_opts])
        what = "is a flag" if param.is_flag else "takes one value"
        raise click.UsageError(f"option {spelling} is given {times} times, but {what}; give it once", ctx=ctx)


class EchoCommand(click.Command):
    """Every ``echo-bench`` command: a repeated single-value option is a usage error
    (:func:`refuse_repeated_options`) instead of click's silent "the last one wins"."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        refuse_repeated_options(self, ctx, args)
        return super().parse_args(ctx, args)


class EchoGroup(click.Group):
    """Every ``echo-bench`` command group: its own options are checked like :class:`EchoCommand`'s, and the
    commands and groups declared under it are :class:`EchoCommand` and :class:`EchoGroup`."""

    command_class = EchoCommand
    group_class = type  # subgroups are of this group's class

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        refuse_repeated_options(self, ctx, args)
        return super().parse_args(ctx, args)


#: How a pairwise votes file is written (read by :func:`echo_builder.stats.load_votes`), for the help of every option
#: that reads one (``leaderboard --votes``, ``--human``).
VOTES_FILE_HELP = "a JSON list, JSON Lines or CSV; winner: model_a, model_b, tie or 'tie (bothbad)'"


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


class ByteSize(click.ParamType):
    """A positive size in bytes, written as ``datasets``' ``max_shard_size`` is: an integer, optionally with a
    unit (``500MB``, ``1GB``, ``2GiB``; parsed by ``datasets.utils.py_utils.convert_file_size_to_int``).
    Anything else, zero or negative raises :class:`click.ClickException` (one ``error:`` line naming the option).
    """

    name = "size"

    def get_metavar(self, param: click.Parameter, ctx: click.Context | None = None) -> str:
        return "SIZE"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> int:
        from datasets.utils.py_utils import convert_file_size_to_int

        try:
            size = convert_file_size_to_int(value if isinstance(value, int) else str(value).strip())
        except (TypeError, ValueError, OverflowError):
            size = 0
        if isinstance(size, bool) or not isinstance(size, int) or size <= 0:
            name = max(param.opts, key=len) if param is not None and param.opts else "value"
            raise click.ClickException(
                f"{name}: {str(value)!r} is not accepted; give a positive size such as 500MB, 1GB or 2GiB"
            )
        return size


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


def backend_options(
    specs: tuple[str, ...], base_url: str | Sequence[str] | None, options: tuple[str, ...]
) -> dict[str, Any]:
    """The same options for every ``openai:`` judge (base URL) and every judge (``-o KEY=VALUE``).

    Several base URLs are replicas of one model: they become ``base_urls``, which spreads each judge's calls over
    them (:class:`~echo_builder.backends.replicas.ReplicatedBackend`)."""
    shared = parse_options(options)
    urls = [base_url] if isinstance(base_url, str) else [u for u in (base_url or ()) if u]
    out = {}
    for spec in specs:
        opts = dict(shared)
        if urls and spec.startswith("openai:"):
            if len(urls) == 1:
                opts["base_url"] = urls[0]
            else:
                opts["base_urls"] = list(urls)
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


def batch_options(function: F) -> F:
    """``--batch`` (flag), ``--batch-retry`` (``online``, ``batch`` or ``none``) and ``--batch-poll`` (``batch_poll_s``,
    seconds before the first status check): the OpenAI Batch API mode of :mod:`echo_builder.backends.batch`."""
    function = click.option(
        "--batch-poll",
        "batch_poll_s",
        default=30.0,
        show_default=True,
        type=Number(float, 1, 3600, unit="seconds"),
        help="--batch: seconds (1-3600) before the first status check of a batch, doubled after each check up to "
        "10 minutes (or this value when larger).",
    )(function)
    function = click.option(
        "--batch-retry",
        type=click.Choice(["online", "batch", "none"]),
        default="online",
        show_default=True,
        help="--batch: calls a batch answered with 429/5xx or left unanswered (expired, cancelled) are sent again "
        "online, in one follow-up batch, or not at all (recorded failures).",
    )(function)
    return click.option(
        "--batch",
        "batch",
        is_flag=True,
        help="Send the model calls the cache cannot answer through the OpenAI Batch API (openai: backends only; "
        "about half the price, answered within 24 h). Batch ids are checkpointed in OUT/batches: a killed run "
        "picks up the batch in flight instead of submitting it again. See docs/backends.md.",
    )(function)


def cost_options(function: F) -> F:
    """``--max-cost`` (``max_cost``, US dollars) and ``--prices`` (a price file) of commands that call models."""
    function = click.option(
        "--prices",
        "prices_file",
        type=click.Path(exists=True, dir_okay=False),
        help="Price file (YAML, shaped like echo_builder/prices.yaml: USD per 1M input/output tokens per model, "
        "with a date and source) whose entries replace or add to the shipped list prices.",
    )(function)
    return click.option(
        "--max-cost",
        "max_cost",
        type=Number(float, 0, 1e9, low_open=True, unit="US dollars"),
        metavar="USD",
        help="Stop before the model calls of this run would cost more than USD (estimated per call before it "
        "is sent, settled with the reported tokens). Everything done is kept: rerun with a higher --max-cost "
        "to continue. Cache hits are free. Needs a price for the model (shipped, or from --prices).",
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


#: Largest ``--run-config`` file read (bytes): a run config is a few lines.
MAX_RUN_CONFIG_BYTES = 1 << 20
#: ``ctx.meta`` key under which :func:`run_config_option` keeps what it read (see :func:`run_config_record`).
RUN_CONFIG_META = "echo_bench.run_config"
_SKIPPED_KEYS = frozenset({"help", "run-config"})


def run_config_option(function: F) -> F:
    """``--run-config FILE``: the command's options from a YAML (or JSON) file, so a run is reproducible from one
    file checked into a repository.

    The file is a mapping whose keys are the command's long option names without the dashes (``out``,
    ``judge``, ``max-attempts``; ``max_attempts`` is the same key) or the name of a positional argument
    (``sources`` of ``build``), and whose values are written as on the command line: a string or a number, ``true``
    or ``false`` for a flag (``no-pseudonymize: true`` or ``pseudonymize: false``), a list for a repeatable option
    or a positional argument that takes several values, and for ``option`` (``-o KEY=VALUE``) a list of
    ``KEY=VALUE`` strings or a mapping. Options given on the command line win over the file. The file is read, and
    every value checked as the command line checks it, before anything else happens; a problem is one
    :class:`~echo_builder.errors.ConfigError` naming the file and the key (unknown key, a key given twice, a value of
    the wrong type or refused by the option, a file that is missing, not UTF-8, not YAML, not a mapping, or larger
    than :data:`MAX_RUN_CONFIG_BYTES`).
    """
    return click.option(
        "--run-config",
        metavar="FILE",
        is_eager=True,
        expose_value=False,
        callback=_apply_run_config,
        help="YAML file of this command's options (keys: long option names, e.g. out, max-attempts; lists for "
        "repeatable options); options on the command line win. See docs/run-config.md.",
    )(function)


def _apply_run_config(ctx: click.Context, param: click.Parameter, value: str | None) -> None:
    if value is None or ctx.resilient_parsing:
        return
    values, record = read_run_config(value, ctx.command, ctx)
    ctx.default_map = {**(ctx.default_map or {}), **values}
    ctx.meta[RUN_CONFIG_META] = record


def run_config_record(ctx: click.Context | None = None) -> dict[str, Any] | None:
    """What ``--run-config`` gave the running command, for its run metadata (``None`` without one):
    ``{"file": path, "sha256": hex digest, "values": {key: value}, "overridden": [keys also given on the command
    line, whose command-line value was used]}``."""
    ctx = ctx or click.get_current_context(silent=True)
    if ctx is None or RUN_CONFIG_META not in ctx.meta:
        return None
    record = dict(ctx.meta[RUN_CONFIG_META])
    record["overridden"] = sorted(
        key
        for key, name in record.pop("params").items()
        if ctx.get_parameter_source(name) not in (None, click.core.ParameterSource.DEFAULT_MAP)
    )
    return record


def _run_config_keys(command: click.Command) -> dict[str, tuple[click.Parameter, bool]]:
    """``{key: (parameter, inverted)}``: each long option name (a flag's ``--no-...`` form inverted) and each
    positional argument's name, with dashes. Read through ``get_params``, so that a command whose options come
    from a registry (``metrics``: ``--metric`` and each metric's options) has them before it is first parsed."""
    keys: dict[str, tuple[click.Parameter, bool]] = {}
    for p in command.get_params(click.Context(command)):
        if isinstance(p, click.Argument):
            keys[(p.name or "").replace("_", "-")] = (p, False)
            continue
        for opt in p.opts:
            if opt.startswith("--"):
                keys[opt[2:]] = (p, False)
        for opt in p.secondary_opts:
            if opt.startswith("--"):
                keys[opt[2:]] = (p, True)
    return {k: v for k, v in keys.items() if k not in _SKIPPED_KEYS}


def read_run_config(
    path: str, command: click.Command, ctx: click.Context | None = None
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Read a ``--run-config`` file for ``command``: ``(default_map, record)``.

    ``default_map`` maps parameter names (click's, e.g. ``out_dir``) to command-line-shaped values, each already
    checked by the option's own type; ``record`` is ``{"file", "sha256", "values", "params"}``.

    Raises:
        ConfigError: ``--run-config FILE: ...`` naming the key or the line (see :func:`run_config_option`).
    """
    import hashlib

    from echo_builder.input_files import read_small_file
    from echo_dataset.safe_yaml import kind_of, load_yaml, shown_key

    where = f"--run-config {path}"
    raw = read_small_file(path, MAX_RUN_CONFIG_BYTES, where)
    try:
        text = raw.decode("utf-8").removeprefix("\ufeff")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{where}: not UTF-8 text (byte {exc.start}); save the file as UTF-8") from None
    # safe, bounded (alias bombs, nesting, recursion), a key given twice refused; the error never quotes the file
    data = load_yaml(text, where, unique_keys=True, error=ConfigError)
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(
            f"{where}: expected a mapping of option names to values (out: runs/x), got {kind_of(data)}"
        )
    keys = _run_config_keys(command)
    name = command.name or "command"
    values: dict[str, Any] = {}
    shown: dict[str, Any] = {}
    params: dict[str, str] = {}
    for position, (key, value) in enumerate(data.items(), start=1):
        # a key is shown only when it looks like a name: a file that is no run config never has a line printed
        described = f"key {shown_key(key) or f'{position} of the file'}"
        if not isinstance(key, str) or not key:
            raise ConfigError(f"{where}: {described} is not an option name")
        normal = key.replace("_", "-").removeprefix("--")
        if normal not in keys:
            raise ConfigError(
                f"{where}: unknown {described} for `echo-bench {name}`; known keys: "
                + ", ".join(sorted(keys))
            )
        param, inverted = keys[normal]
        assert param.name is not None
        if param.name in params.values():
            other = next(k for k, n in params.items() if n == param.name)
            raise ConfigError(f"{where}: keys {other!r} and {key!r} set the same option; keep one")

        converted = _run_config_value(where, key, param, inverted, value)
        try:
            param.type_cast_value(ctx or click.Context(command), converted)
        except click.ClickException as exc:
            raise ConfigError(f"{where}: key {key!r}: {' '.join(exc.format_message().split())}") from None
        except (ValueError, TypeError, OSError) as exc:  # e.g. a path the operating system cannot take
            raise ConfigError(f"{where}: key {key!r}: not accepted ({exc})") from None
        values[param.name] = converted
        shown[normal] = list(converted) if isinstance(converted, tuple) else converted
        params[normal] = param.name
    record = {"file": str(path), "sha256": hashlib.sha256(raw).hexdigest(), "values": shown, "params": params}
    return values, record


def _run_config_value(where: str, key: str, param: click.Parameter, inverted: bool, value: Any) -> Any:
    """One run-config value as the command line would give it (a tuple for a repeatable option), shape-checked."""
    import datetime

    def wrong(expected: str, item: Any) -> ConfigError:
        # a container is named by its type only: its repr can be huge (a YAML alias bomb expands on printing)
        shown = "" if isinstance(item, (list, dict)) else " " + _clip(repr(item))
        return ConfigError(f"{where}: key {key!r}: expected {expected}, got {type(item).__name__}{shown}")

    def scalar(item: Any) -> Any:
        if isinstance(item, bool):
            raise wrong("a string or a number, not true/false", item)
        if isinstance(item, (datetime.date, datetime.datetime)):  # YAML reads 2025-06-10 as a date
            return item.isoformat()
        if isinstance(item, float) and not math.isfinite(item):
            raise wrong("a finite number", item)
        if isinstance(item, str) and "\0" in item:  # no command line can hold one; paths cannot either
            raise wrong("text without a NUL character", item)
        if isinstance(item, str) or (isinstance(item, (int, float)) and isinstance(param.type, Number)):
            return item
        if isinstance(item, (int, float)):
            return str(item)
        raise wrong("a string or a number", item)

    if isinstance(param, click.Option) and param.is_flag and not param.multiple:
        if not isinstance(value, bool):
            raise wrong("true or false", value)
        return (not value) if inverted else value
    if param.multiple or param.nargs == -1:
        items = value
        if isinstance(value, dict) and param.metavar == "KEY=VALUE":
            items = [f"{k}={v if isinstance(v, str) else json.dumps(v)}" for k, v in value.items()]
        elif not isinstance(value, list):
            items = [value]
        return tuple(scalar(item) for item in items)
    if isinstance(value, (list, dict)):
        raise wrong("one value (the option is not repeatable)", value)
    return scalar(value)


def _clip(text: str, limit: int = 80) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


def nsfw_options(check_help: str, option_help: str) -> Callable[[F], F]:
    """``--nsfw-check`` (``nudenet`` or a VLM spec), ``--nsfw-threshold`` and ``--nsfw-option KEY=VALUE``
    (``nsfw_options``) of the commands that screen images (:mod:`echo_builder.safety`); the help of the first and
    last says what this command does with them."""

    def decorate(function: F) -> F:
        function = click.option(
            "--nsfw-option", "nsfw_options", multiple=True, metavar="KEY=VALUE", help=option_help
        )(function)
        function = click.option(
            "--nsfw-threshold",
            type=Number(float, 0.0, 1.0),
            help="Score at or above which a detection flags an image (default: nudenet 0.6, a VLM's confidence "
            "0.5).",
        )(function)
        return click.option("--nsfw-check", "nsfw_check", metavar="nudenet|SPEC", help=check_help)(function)

    return decorate
