"""Image generators behind one interface, created from spec strings, and ``echo-bench generate``.

A generator turns a benchmark sample (prompt, optional input images, seed) into an image; see
:class:`~echo_builder.generate.base.Generator`. Built-in generators are registered by import path and imported
only when first created, so ``import echo_builder`` never pulls in ``diffusers`` or ``torch``. A new generator is
one file with a :class:`Generator` subclass decorated with :func:`register_generator`; a separate package adds one
through the ``echo_bench.generators`` entry-point group (``name = "module:Class"``, see ``docs/extending.md``). The
registry is :data:`GENERATORS` (an :class:`echo_builder.registry.Registry` of kind ``"generator"``); a plugin
that fails to load is reported (``echo-bench plugins``), never fatal.

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
from echo_builder.registry import BUILT_IN, Registry, spec_class_adopter

__all__ = [
    "FAILURE_STATUSES",
    "GENERATORS",
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


#: Every generator: the built-ins below, classes decorated with :func:`register_generator`, and plugins
#: (entry-point group ``echo_bench.generators``). Entries carry ``needs_target`` in their fields.
GENERATORS: Registry[type[Generator]] = Registry("generator", adopt=_adopt)

# The built-ins, declared by import path: diffusers' module imports torch and diffusers when first used, and
# listing the generators must import none of them.
GENERATORS.declare(
    "diffusers",
    "echo_builder.generate.diffusers_backend:DiffusersGenerator",
    description="any diffusers text-to-image or image-editing pipeline (hub id or local folder), batched, multi-GPU",
    extra="generate",
    needs_target=True,
)
GENERATORS.declare(
    "openai-images",
    "echo_builder.generate.openai_images:OpenAIImagesGenerator",
    description="OpenAI-compatible image generation and edit endpoints (e.g. gpt-image-1)",
    needs_target=True,
)
GENERATORS.declare(
    "command",
    "echo_builder.generate.command:CommandGenerator",
    description="your own program: one JSON request on stdin, a PNG written to output_path",
    needs_target=True,
)


def register_generator(cls: type[Generator]) -> type[Generator]:
    """Class decorator: register ``cls`` under ``cls.name``. Raises :class:`ConfigError` on a name clash."""
    if not isinstance(cls, type) or not issubclass(cls, Generator):
        raise ConfigError(f"register_generator takes a Generator subclass, got {cls!r}")
    if not cls.name:
        raise ConfigError(f"{cls.__qualname__} has no `name`; set the class attribute before registering")
    GENERATORS.register(cls, needs_target=bool(cls.needs_target))
    return cls


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
    """Every registered generator (built-ins and plugins), sorted by name, without importing a built-in."""
    return [
        GeneratorInfo(
            e.name, e.target, e.description, e.extra, bool(e.get_field("needs_target", True)), e.origin
        )
        for e in sorted(GENERATORS.entries(), key=lambda e: e.name)
    ]
