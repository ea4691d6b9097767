"""Image generators behind one interface, created from spec strings, and ``echo-bench generate``.

A generator turns a benchmark sample (prompt, optional input images, seed) into an image; see
:class:`~echo_builder.generate.base.Generator`. Each built-in generator is one module of this package with a
:class:`Generator` subclass decorated with ``@register_generator(order=N)``; the registry finds those modules
itself (``pkgutil`` over this folder, less :data:`HELPER_MODULES`) and imports them when it is first read, so a new
generator is one new module, with no edit here. Those modules import ``diffusers``, ``torch`` and ``openai`` inside
the class's methods, never at module level, so ``import echo_builder`` and listing the generators pull in none of
them. A separate package adds one through the ``echo_bench.generators`` entry-point group
(``name = "module:Class"``, see ``docs/extending.md``). The registry is :data:`GENERATORS` (an
:class:`echo_builder.registry.Registry` of kind ``"generator"``); a plugin that fails to load is reported
(``echo-bench plugins``), never fatal.

Spec strings:

- ``diffusers:<hub id or local path>``: any diffusers text-to-image or image-editing pipeline; text-to-image for
  samples without input images, the pipeline's image-to-image / edit variant for samples with them.
- ``openai-images:<model>``: OpenAI-compatible ``/v1/images/generations`` and ``/v1/images/edits`` (gpt-image-1).
- ``command:<command line>``: a program that reads one JSON request on stdin and writes a PNG (the protocol is in
  :mod:`echo_builder.generate.command`).

:func:`~echo_builder.generate.run.run_generation` runs one over a benchmark config into
``OUTPUTS/<model name>/<sample_id>.png`` plus ``manifest.json``, the layout ``judge`` and ``metrics`` read.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from echo_builder.errors import ConfigError
from echo_builder.generate.base import (
    FAILURE_STATUSES,
    STATUSES,
    GenerationRequest,
    GenerationResult,
    Generator,
    derive_seed,
)
from echo_builder.registry import BUILT_IN, Registry, spec_class_adopter, spec_class_decorator

__all__ = [
    "FAILURE_STATUSES",
    "GENERATORS",
    "HELPER_MODULES",
    "STATUSES",
    "GenerationRequest",
    "GenerationResult",
    "Generator",
    "GeneratorInfo",
    "create_generator",
    "derive_seed",
    "list_generators",
    "parse_generator_spec",
    "register_generator",
]


@dataclass(frozen=True)
class GeneratorInfo:
    """One registered generator: its spec prefix, import path, one-line description, pip extra and origin."""

    name: str
    target: str  # import path "module:Class"
    description: str
    extra: str | None
    needs_target: bool
    origin: str = BUILT_IN  # "built-in" or the plugin's distribution ("echo-mygen 0.1")


_adopt = spec_class_adopter(Generator, "echo_builder.generate.Generator", "generator")


#: The modules of this package that declare no generator (discovery does not import them).
HELPER_MODULES = ("base", "distributed", "manifest", "run")

#: Every generator: the built-ins (one module of this package each, decorated with
#: ``@register_generator(order=N)``, found by :func:`~echo_builder.registry.discover_modules`), classes registered
#: at run time, and plugins (entry-point group ``echo_bench.generators``). Entries carry ``needs_target``.
GENERATORS: Registry[type[Generator]] = Registry(
    "generator", adopt=_adopt, package="echo_builder.generate", helpers=HELPER_MODULES
)


_register_generator = spec_class_decorator(GENERATORS, Generator, "generator")


def register_generator(
    cls: type[Generator] | None = None, *, order: float | None = None, extra: str | None = None
) -> Any:
    """Class decorator, bare or with arguments: register ``cls`` under ``cls.name``.

    Args:
        order: a built-in's position in the registry (``diffusers`` 10, ``openai-images`` 20, ``command`` 30);
            listings sort generators by name, so it only needs to be unique.
        extra: the pip extra that provides the generator's dependencies (``"generate"``), shown by listings and
            in the error when they are missing.

    Raises:
        ConfigError: ``cls`` is not a :class:`Generator` subclass or has no ``name``, the name is taken by
            another class, or another built-in has the same ``order``.
    """
    return _register_generator(cls, order=order, extra=extra)


def parse_generator_spec(spec: str) -> tuple[str, str]:
    """Split ``"name:target"`` into ``(name, target)`` at the first ``:``.

    Raises :class:`ConfigError` for an empty spec, an unknown generator name or a missing target.
    """
    name, _, target = spec.strip().partition(":")
    if not name:
        raise ConfigError(
            f"empty model spec {spec!r}; expected e.g. 'diffusers:<path>' or 'openai-images:<model>'"
        )
    if name not in GENERATORS:
        # "stabilityai/sd-turbo" alone is a model, not a generator: say what a spec looks like
        what = f"generator {name!r} in model spec {spec!r}" if ":" in spec else f"model spec {spec!r}"
        broken = [p for p in GENERATORS.problems() if p.name == name]
        raise ConfigError(
            f"unknown {what}: use <generator>:<target>, e.g. diffusers:<hub id or local path>, "
            f"openai-images:gpt-image-1 or command:python my_model.py; generators: "
            f"{', '.join(sorted(GENERATORS.names()))}" + (f" ({broken[0]})" if broken else "")
        )
    if GENERATORS.entry(name).get_field("needs_target", True) and not target.strip():
        raise ConfigError(
            f"generator {name!r} needs a target after ':' (e.g. '{name}:<model>'), got {spec!r}"
        )
    return name, target.strip()


def create_generator(spec: str, **options: Any) -> Generator:
    """Create (but do not load) a generator from a spec string and its options.

    Args:
        spec: ``"<name>:<target>"``, e.g. ``"diffusers:/models/sdxl-turbo"``, ``"openai-images:gpt-image-1"``,
            ``"command:python gen.py --steps 4"``.
        **options: validated by the generator's own config model; unknown keys raise :class:`ConfigError`.

    Raises:
        ConfigError: unknown generator, missing target, or invalid options.
        MissingDependencyError: the generator's optional extra is not installed.
    """
    name, target = parse_generator_spec(spec)
    return GENERATORS.construct(name, target, **options)


def list_generators() -> list[GeneratorInfo]:
    """Every registered generator (built-ins and plugins), sorted by name; importing the built-in modules
    imports none of their heavy dependencies."""
    return [
        GeneratorInfo(
            e.name, e.target, e.description, e.extra, bool(e.get_field("needs_target", True)), e.origin
        )
        for e in sorted(GENERATORS.entries(), key=lambda e: e.name)
    ]
