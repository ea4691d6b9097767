"""Image generators behind one interface, created from spec strings, and ``echo-bench generate``.

A generator turns a benchmark sample (prompt, optional input images, seed) into an image; see
:class:`~echo_builder.generate.base.Generator`. Built-in generators are registered by import path and imported
only when first created, so ``import echo_builder`` never pulls in ``diffusers`` or ``torch``. A new generator is
one file with a :class:`Generator` subclass decorated with :func:`register_generator`.

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

import importlib
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

__all__ = [
    "FAILURE_STATUSES",
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
    """One registered generator: its spec prefix, import path, one-line description and pip extra."""

    name: str
    target: str  # import path "module:Class"
    description: str
    extra: str | None
    needs_target: bool


_INFO: dict[str, GeneratorInfo] = {}
_CLASSES: dict[str, type[Generator]] = {}


def _builtin(name: str, target: str, description: str, extra: str | None) -> None:
    _INFO[name] = GeneratorInfo(name, target, description, extra, True)


_builtin(
    "diffusers",
    "echo_builder.generate.diffusers_backend:DiffusersGenerator",
    "any diffusers text-to-image or image-editing pipeline (hub id or local folder), batched, multi-GPU",
    "generate",
)
_builtin(
    "openai-images",
    "echo_builder.generate.openai_images:OpenAIImagesGenerator",
    "OpenAI-compatible image generation and edit endpoints (e.g. gpt-image-1)",
    None,
)
_builtin(
    "command",
    "echo_builder.generate.command:CommandGenerator",
    "your own program: one JSON request on stdin, a PNG written to output_path",
    None,
)


def register_generator(cls: type[Generator]) -> type[Generator]:
    """Class decorator: register ``cls`` under ``cls.name``. Raises :class:`ConfigError` on a name clash."""
    if not cls.name:
        raise ConfigError(f"{cls.__qualname__} has no `name`; set the class attribute before registering")
    target = f"{cls.__module__}:{cls.__qualname__}"
    existing = _INFO.get(cls.name)
    if existing is not None and existing.target != target:
        raise ConfigError(f"a generator named {cls.name!r} is already registered ({existing.target})")
    if existing is None:
        _INFO[cls.name] = GeneratorInfo(cls.name, target, cls.description, None, cls.needs_target)
    _CLASSES[cls.name] = cls
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
    if name not in _INFO:
        # "stabilityai/sd-turbo" alone is a model, not a generator: say what a spec looks like
        what = f"generator {name!r} in model spec {spec!r}" if ":" in spec else f"model spec {spec!r}"
        raise ConfigError(
            f"unknown {what}: use <generator>:<target>, e.g. diffusers:<hub id or local path>, "
            f"openai-images:gpt-image-1 or command:python my_model.py; generators: {', '.join(sorted(_INFO))}"
        )
    if _INFO[name].needs_target and not target.strip():
        raise ConfigError(
            f"generator {name!r} needs a target after ':' (e.g. '{name}:<model>'), got {spec!r}"
        )
    return name, target.strip()


def _resolve(name: str) -> type[Generator]:
    cls = _CLASSES.get(name)
    if cls is None:
        module_name, _, class_name = _INFO[name].target.partition(":")
        cls = _CLASSES[name] = getattr(importlib.import_module(module_name), class_name)
    return cls


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
    return _resolve(name)(target, **options)


def list_generators() -> list[GeneratorInfo]:
    """Every registered generator, sorted by name, without importing any of them."""
    return [info for _, info in sorted(_INFO.items())]
