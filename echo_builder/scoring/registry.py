"""The metric registry: every community-driven metric declared once, with everything the package needs to run it.

A metric is one :class:`MetricDefinition` (name, :class:`~echo_builder.scoring.base.MetricSpec`, applicability
flag, what it needs, its options, its factory, its pip extra and its ``evaluate`` module folder) added to
:data:`METRICS` by :func:`declare_metric` in the module that implements it (``echo_builder/scoring/color.py``
declares ``color_shift``, and so on). ``echo-bench metrics`` (its ``--metric`` choices, its options and
``--help``), :func:`echo_builder.scoring.run.run_metrics`, the Space's metric playground, the build's
applicability counts and :func:`echo_builder.metrics.path` all read :data:`METRICS`.

A third-party package adds a metric through the ``echo_bench.metrics`` entry point, pointing at a
:class:`MetricDefinition`::

    [project.entry-points."echo_bench.metrics"]
    brightness_shift = "echo_brightness:METRIC"

The definition is validated when the registry is first read (:func:`adopt_metric`); an invalid one is reported
(``echo_builder.registry.plugin_problems``) and left out, never fatal. See ``docs/extending.md``.
"""

from __future__ import annotations

import importlib
import keyword
import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from echo_builder.errors import ConfigError
from echo_builder.registry import Entry, Registry
from echo_builder.scoring.base import MetricResult, MetricSpec

__all__ = [
    "METRICS",
    "OPTION_TYPES",
    "RESERVED_OPTIONS",
    "MetricDefinition",
    "MetricFactory",
    "MetricOption",
    "adopt_metric",
    "applicability_flags",
    "declare_metric",
    "metric_definition",
    "metric_definitions",
]

#: ``factory(inputs, outputs, prompts, options) -> MetricResult``: ``inputs`` n lists of input images (possibly
#: empty), ``outputs`` n output images (paths, PIL images, arrays, bytes), ``prompts`` n strings, ``options`` the
#: run's options (every declared option by name, with its default when not given, plus ``judges``,
#: ``judge_options``, ``cache_dir`` and ``judge_prompt`` for metrics that need a judge). Returns one value per
#: sample, NaN with a reason where the metric does not apply or failed. Optionally ``extras["details"]``: n
#: JSON-ready values (or ``None``), each stored as that sample's ``detail`` (JSON text) in the metrics table.
MetricFactory = Callable[[list[list[Any]], list[Any], list[str], Mapping[str, Any]], MetricResult]

#: Types a metric option may declare: how the CLI parses it. A ``"column"`` option names a column of the benchmark
#: config (``echo-bench metrics --text-field rendered_text``); the factory then receives that column's values, one
#: per sample it scores, in the order of ``outputs`` (a list; ``None`` when the option is not given).
OPTION_TYPES = ("str", "int", "float", "bool", "path", "choice", "column")

#: Option names ``echo-bench metrics`` uses itself (a metric may not declare them).
RESERVED_OPTIONS = frozenset(
    {
        "benchmark",
        "config",
        "config_name",
        "outputs",
        "metric",
        "metric_names",
        "out",
        "out_dir",
        "judge",
        "judges",
        "judge_options",
        "base_url",
        "option",
        "options",
        "judge_prompt",
        "format",
        "table_format",
        "cache_dir",
        "max_cost",
        "prices",
        "budget",
        "help",
    }
)

_NAME = re.compile(r"^[a-z][a-z0-9_]{0,63}$")


@dataclass(frozen=True)
class MetricOption:
    """One option of a metric: ``echo-bench metrics --<name with dashes>`` and ``options[name]`` in the factory.

    Attributes:
        name: a lowercase identifier (``dino_weights``); the CLI option is ``--dino-weights``.
        type: one of :data:`OPTION_TYPES` (``"choice"`` needs ``choices``; ``"bool"`` is a flag; ``"column"``
            takes a benchmark column's name and gives the factory that column's per-sample values).
        default: the value when the option is not given (``None``: not given).
        help: one line for ``--help``.
        choices: the allowed values of a ``"choice"`` option.
    """

    name: str
    type: str = "str"
    default: Any = None
    help: str = ""
    choices: tuple[str, ...] = ()

    @property
    def cli_name(self) -> str:
        return "--" + self.name.replace("_", "-")


@dataclass(frozen=True)
class MetricDefinition:
    """Everything the package needs to know about one metric.

    Attributes:
        name: what users type (``color_shift``): lowercase letters, digits and ``_``, starting with a letter.
        spec: direction, range, unit and source (``spec.name`` equals ``name``).
        factory: ``(inputs, outputs, prompts, options) -> MetricResult`` (:data:`MetricFactory`), or its import
            path ``"package.module:function"`` (imported on first use, so declaring a metric imports nothing heavy).
        applicability_flag: the benchmark column saying whether the metric applies to a sample (``False``: NaN,
            "not applicable"; ``None`` or absent: computed), or ``None`` when no flag governs it.
        needs_inputs: the metric compares the output with the sample's input images (samples without any are NaN,
            "not applicable: the sample has no input images").
        needs_judge: the metric asks a VLM judge (``echo-bench metrics --judge SPEC``); without one it does not run.
        options: the metric's own options (:class:`MetricOption`), exposed by ``echo-bench metrics``.
        extra: the pip extra its dependencies come from (``pip install -e ".[extra]"``), ``None`` for the core.
        module: the folder of its ``evaluate`` module (``<folder>/<name>.py``, a card ``README.md``, ``app.py``,
            ``requirements.txt``); ``None`` for a built-in: ``echo_builder/metrics/<name>/``.
        description: one line for listings and ``--help``.
    """

    name: str
    spec: MetricSpec
    factory: MetricFactory | str
    applicability_flag: str | None = None
    needs_inputs: bool = True
    needs_judge: bool = False
    options: tuple[MetricOption, ...] = ()
    extra: str | None = None
    module: str | None = None
    description: str = ""
    _cache: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    def load_factory(self, origin: str = "built-in") -> MetricFactory:
        """The factory, importing it when declared by path.

        Args:
            origin: the registry entry's origin (``"built-in"`` or a plugin's ``"distribution version"``), so a
                missing extra names the right package to install.

        Raises:
            MissingDependencyError: a built-in's module needs an optional extra of echo-bench that is not
                installed (the message has the ``pip install`` line).
            ConfigError: a plugin's module needs its own extra (the message names the plugin's package), or the
                import path names nothing callable.
        """
        if callable(self.factory):
            return self.factory
        if "factory" not in self._cache:
            from echo_builder.errors import MissingDependencyError

            module_name, _, attribute = self.factory.partition(":")
            try:
                obj: Any = importlib.import_module(module_name)
            except ImportError as exc:
                missing = str(getattr(exc, "name", "") or "")
                if self.extra and missing and not missing.startswith(module_name):
                    if origin != "built-in":
                        package = origin.split(" ")[0]
                        raise ConfigError(
                            f"the metric {self.name!r} from {origin} needs the optional package {missing!r}, which "
                            f"is not installed. Install it with: pip install '{package}[{self.extra}]'"
                        ) from exc
                    raise MissingDependencyError(missing, self.extra, f"the metric {self.name!r}") from exc
                raise
            for part in attribute.split(".") if attribute else ():
                obj = getattr(obj, part, None)
            if not callable(obj):
                raise ConfigError(f"metric {self.name!r}: factory {self.factory!r} is not a callable")
            self._cache["factory"] = obj
        return self._cache["factory"]

    def option_defaults(self) -> dict[str, Any]:
        """``{option name: default}`` of the declared options."""
        return {option.name: option.default for option in self.options}

    @property
    def higher_is_better(self) -> bool:
        return self.spec.higher_is_better


def _problem(definition: Any, text: str) -> ConfigError:
    name = getattr(definition, "name", "?")
    return ConfigError(f"metric {name!r}: {text}")


def validate_metric(definition: Any, *, builtin: bool = False) -> MetricDefinition:
    """Check a definition before it is registered; returns it.

    Raises:
        ConfigError: naming the field that is wrong (not a :class:`MetricDefinition`, a bad name, a spec whose
            name, direction or range is inconsistent, a factory that is neither callable nor ``"module:attr"``, a
            bad option, an option name another metric or ``echo-bench metrics`` already uses, a module folder
            without ``<name>.py``).
    """
    if not isinstance(definition, MetricDefinition):
        raise ConfigError(
            f"expected an echo_builder.scoring.registry.MetricDefinition, got {type(definition).__name__}"
        )
    d = definition
    if not isinstance(d.name, str) or not _NAME.match(d.name) or keyword.iskeyword(d.name):
        raise _problem(d, "name must be lowercase letters, digits and '_', starting with a letter (<= 64)")
    if not isinstance(d.spec, MetricSpec):
        raise _problem(d, f"spec must be a MetricSpec, got {type(d.spec).__name__}")
    if d.spec.name != d.name:
        raise _problem(d, f"spec.name is {d.spec.name!r}; it must equal the metric's name")
    if not isinstance(d.spec.higher_is_better, bool):
        raise _problem(d, "spec.higher_is_better must be True or False")
    try:
        low, high = float(d.spec.low), float(d.spec.high)
    except (TypeError, ValueError):
        raise _problem(d, "spec.low and spec.high must be numbers") from None
    if math.isnan(low) or math.isnan(high) or low > high:
        raise _problem(d, f"spec range [{d.spec.low}, {d.spec.high}] is not a range (low <= high, no NaN)")
    if not isinstance(d.spec.unit, str) or not isinstance(d.spec.source, str):
        raise _problem(d, "spec.unit and spec.source must be text")
    if isinstance(d.factory, str):
        module_name, sep, attribute = d.factory.partition(":")
        if not sep or not module_name or not attribute:
            raise _problem(d, f"factory {d.factory!r} must be a callable or 'package.module:function'")
    elif not callable(d.factory):
        raise _problem(d, "factory must be a callable (inputs, outputs, prompts, options) -> MetricResult")
    if d.applicability_flag is not None and (
        not isinstance(d.applicability_flag, str) or not _NAME.match(d.applicability_flag)
    ):
        raise _problem(d, f"applicability_flag {d.applicability_flag!r} must be None or a column name")
    for attribute in ("needs_inputs", "needs_judge"):
        if not isinstance(getattr(d, attribute), bool):
            raise _problem(d, f"{attribute} must be True or False")
    if d.extra is not None and not isinstance(d.extra, str):
        raise _problem(d, "extra must be None or the name of a pip extra")
    if not isinstance(d.options, tuple):
        raise _problem(d, "options must be a tuple of MetricOption")
    taken = {o.name: m.name for m in _registered() if m.name != d.name for o in m.options}
    seen: set[str] = set()
    for option in d.options:
        if not isinstance(option, MetricOption):
            raise _problem(d, f"option {option!r} is not a MetricOption")
        if not isinstance(option.name, str) or not _NAME.match(option.name):
            raise _problem(d, f"option name {option.name!r} must be lowercase letters, digits and '_'")
        if option.name in RESERVED_OPTIONS:
            raise _problem(
                d, f"option {option.name!r} is used by echo-bench metrics itself; choose another name"
            )
        if option.name in taken:
            raise _problem(
                d, f"option {option.name!r} is already an option of the metric {taken[option.name]!r}"
            )
        if option.name in seen:
            raise _problem(d, f"option {option.name!r} is declared twice")
        seen.add(option.name)
        if option.type not in OPTION_TYPES:
            raise _problem(
                d, f"option {option.name!r}: type {option.type!r} is not one of {', '.join(OPTION_TYPES)}"
            )
        if option.type == "choice" and (
            not option.choices or not all(isinstance(c, str) for c in option.choices)
        ):
            raise _problem(d, f"option {option.name!r}: a choice option needs its choices (text)")
        if option.type == "choice" and option.default is not None and option.default not in option.choices:
            raise _problem(d, f"option {option.name!r}: default {option.default!r} is not one of its choices")
    if d.module is not None:
        folder = Path(str(d.module))
        if not builtin and (folder.name != d.name or not (folder / f"{d.name}.py").is_file()):
            raise _problem(
                d,
                f"module {str(d.module)!r} must be a folder named {d.name!r} holding {d.name}.py (an evaluate module)",
            )
    return d


def _registered() -> list[MetricDefinition]:
    """Definitions registered so far (no plugin loading: safe to call while plugins load)."""
    return [obj for obj in METRICS._objects.values() if isinstance(obj, MetricDefinition)]


def _entry(
    definition: MetricDefinition, target: str, origin: str, order: float | None = None
) -> Entry[MetricDefinition]:
    return Entry(
        definition.name,
        target,
        definition.description or definition.spec.unit,
        definition.extra,
        origin,
        {
            "spec": definition.spec,
            "applicability_flag": definition.applicability_flag,
            "needs_inputs": definition.needs_inputs,
            "needs_judge": definition.needs_judge,
        },
        order=order,
    )


def adopt_metric(name: str, loaded: Any, origin: str) -> tuple[Entry[MetricDefinition], MetricDefinition]:
    """The registry's ``adopt`` for the ``echo_bench.metrics`` entry point: ``loaded`` must be a
    :class:`MetricDefinition` (or a function of no arguments returning one) named ``name``.

    Raises:
        ConfigError: it is not a valid definition (see :func:`validate_metric`) or is named otherwise.
    """
    if not isinstance(loaded, MetricDefinition) and callable(loaded) and not isinstance(loaded, type):
        loaded = loaded()
    definition = validate_metric(loaded)
    if definition.name != name:
        raise ConfigError(f"the entry point is named {name!r} but declares the metric {definition.name!r}")
    return _entry(definition, "", origin), definition


def declare_metric(
    definition: MetricDefinition, *, target: str, order: float | None = None
) -> MetricDefinition:
    """Register a built-in metric (called by the module that implements it); returns the definition.

    Args:
        target: where the definition lives, ``"echo_builder.scoring.color:COLOR_SHIFT_METRIC"`` (a re-import of
            that module replaces the object instead of clashing).
        order: the metric's position among the built-ins, lower first: the default order of
            ``echo-bench metrics`` and of its rows and columns, the Space's playground and the docs tables
            (:attr:`echo_builder.registry.Entry.order`). Every built-in declares one (``color_shift`` is 10,
            ``structure_distance`` 20, ...; a new metric takes the next free number, or one in between to sit
            there).

    Raises:
        ConfigError: the definition is invalid, the name is taken by another metric or the order by another
            built-in.
    """
    validate_metric(definition, builtin=True)
    existing = METRICS._entries.get(definition.name)
    if existing is not None and existing.target == target:
        METRICS._objects[definition.name] = definition
        return definition
    METRICS.add(_entry(definition, target, "built-in", order), definition)
    return definition


#: The modules of ``echo_builder.scoring`` that declare no metric (discovery does not import them).
HELPER_MODULES = ("base", "faces_auraface", "faces_dlib", "module_inputs", "registry", "run")

#: Every metric: one built-in per module of ``echo_builder.scoring`` that calls :func:`declare_metric` (found by
#: :func:`~echo_builder.registry.discover_modules`, no import list to edit), ordered by their ``order``; then the
#: plugins of the ``echo_bench.metrics`` entry-point group, by name.
METRICS: Registry[MetricDefinition] = Registry(
    "metric", adopt=adopt_metric, package="echo_builder.scoring", helpers=HELPER_MODULES
)


def metric_definition(name: str) -> MetricDefinition:
    """The definition of ``name``; :class:`ConfigError` naming the registered metrics otherwise."""
    return METRICS.get(name)


def metric_definitions() -> list[MetricDefinition]:
    """Every registered metric (built-ins by their declared `order`, then plugins by name)."""
    return [METRICS.get(name) for name in METRICS.names()]


def applicability_flags(definitions: Sequence[MetricDefinition] | None = None) -> tuple[str, ...]:
    """The distinct applicability flags of the metrics, in metric order (the benchmark's flag columns)."""
    flags: list[str] = []
    for definition in metric_definitions() if definitions is None else definitions:
        if definition.applicability_flag and definition.applicability_flag not in flags:
            flags.append(definition.applicability_flag)
    return tuple(flags)
