"""LLM/VLM backends behind one interface, created from spec strings such as ``openai:gpt-4o``.

The registry :data:`BACKENDS` (an :class:`echo_builder.registry.Registry` of kind ``"backend"``) maps a backend
name to the class implementing it. Each built-in backend is one module of this package with a
:class:`~echo_builder.backends.base.Backend` subclass decorated with ``@register_backend(order=N)``; the registry
finds those modules itself (``pkgutil`` over this folder, less :data:`HELPER_MODULES`) and imports them when it
is first read, so a new backend is one new module, with no edit here. Those modules import their heavy
dependencies (``openai``, ``torch``, ``transformers``) inside the class's methods, never at module level, so
``import echo_builder`` and ``echo-bench backends list`` pull in none of them. A separate package adds a backend
through the ``echo_bench.backends`` entry-point group (``name = "module:Class"``), see ``docs/extending.md``. A
plugin that fails to load is reported (``echo-bench plugins``), never fatal.

Spec strings:

- ``openai:<model>``: any OpenAI-compatible chat-completions server (OpenAI, vLLM, SGLang, TGI, Ollama,
  OpenRouter, Gemini's compatible endpoint). Base URL from ``base_url=`` or ``ECHO_OPENAI_BASE_URL`` /
  ``OPENAI_BASE_URL``; key from ``ECHO_OPENAI_API_KEY`` / ``OPENAI_API_KEY``.
- ``transformers:<hub id or local path>``: a local vision-language model (``AutoModelForImageTextToText``).
- ``rules``: the offline, deterministic curation baseline.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from echo_builder.backends.base import (
    Backend,
    CandidateScores,
    GenerationParams,
    ImagePart,
    Message,
    Reply,
    TextPart,
    TokenLogprob,
    Usage,
    image_part,
    run_sync,
    user_message,
)
from echo_builder.errors import ConfigError
from echo_builder.registry import BUILT_IN, Registry, spec_class_adopter, spec_class_decorator

#: Backend options that set a :class:`GenerationParams` field for every call of a run (``-o temperature=0.7``).
#: Accepted by every model backend, validated like the field, applied by the caller before the cache lookup (so
#: they are part of the cache key), and recorded in ``run.json`` and the build report.
GENERATION_OPTIONS = ("temperature", "top_p", "max_tokens", "seed")
#: Options :func:`create_backend` takes for every model backend before its options model sees the rest.
MODEL_BACKEND_OPTIONS = (*GENERATION_OPTIONS, "box_format")

__all__ = [
    "BACKENDS",
    "GENERATION_OPTIONS",
    "HELPER_MODULES",
    "MODEL_BACKEND_OPTIONS",
    "Backend",
    "BackendInfo",
    "CandidateScores",
    "GenerationParams",
    "ImagePart",
    "Message",
    "Reply",
    "TextPart",
    "TokenLogprob",
    "Usage",
    "check_spec",
    "create_backend",
    "image_part",
    "list_backends",
    "parse_spec",
    "register_backend",
    "run_sync",
    "user_message",
]


@dataclass(frozen=True)
class BackendInfo:
    """What ``echo-bench backends list`` shows for one registered backend."""

    name: str
    target: str  # import path "module:Class"
    description: str
    extra: str | None  # pip extra that provides its dependencies, if any
    needs_target: bool
    origin: str = BUILT_IN  # "built-in" or the plugin's distribution ("echo-mybackend 0.1")


_adopt = spec_class_adopter(Backend, "echo_builder.backends.Backend", "backend")


#: The modules of this package that declare no backend (discovery does not import them).
HELPER_MODULES = ("base", "batch", "bounded_http", "boxes", "caller", "replicas", "spend")

#: Every backend: the built-ins (one module of this package each, decorated with ``@register_backend(order=N)``,
#: found by :func:`~echo_builder.registry.discover_modules`), classes registered at run time, and plugins
#: (entry-point group ``echo_bench.backends``). Entries carry ``needs_target`` in their fields.
BACKENDS: Registry[type[Backend]] = Registry(
    "backend", adopt=_adopt, package="echo_builder.backends", helpers=HELPER_MODULES
)


_register_backend = spec_class_decorator(BACKENDS, Backend, "backend")


def register_backend(
    cls: type[Backend] | None = None, *, order: float | None = None, extra: str | None = None
) -> Any:
    """Class decorator, bare or with arguments: register ``cls`` under ``cls.name``.

    Args:
        order: a built-in's position in the registry (``openai`` 10, ``transformers`` 20, ``rules`` 30);
            listings sort backends by name, so it only needs to be unique.
        extra: the pip extra that provides the backend's dependencies (``"judge-local"``), shown by
            ``echo-bench backends list`` and in the error when they are missing.

    Raises:
        ConfigError: ``cls`` is not a :class:`Backend` subclass or has no ``name``, the name is taken by another
            class, or another built-in has the same ``order``.
    """
    return _register_backend(cls, order=order, extra=extra)


def _unknown_hint(name: str) -> str:
    """`` (plugin 'x' ... not loaded: why)`` when a plugin of that name failed to load, else ``""``."""
    broken = [p for p in BACKENDS.problems() if p.name == name]
    return f" ({broken[0]})" if broken else ""


def parse_spec(spec: str) -> tuple[str, str]:
    """Split ``"name:target"`` into ``(name, target)``; ``"rules"`` gives ``("rules", "")``.

    Raises :class:`ConfigError` for an empty spec or an unknown backend name.
    """
    name, _, target = spec.strip().partition(":")
    if not name:
        raise ConfigError(
            f"empty backend spec {spec!r}; expected e.g. 'openai:gpt-4o' or 'transformers:<path>'"
        )
    if name not in BACKENDS:
        # "gpt-4o" alone is a model, not a backend: say what a spec looks like
        what = f"backend {name!r} in spec {spec!r}" if ":" in spec else f"backend spec {spec!r}"
        raise ConfigError(
            f"unknown {what}: use <backend>:<target>, e.g. openai:gpt-4o or transformers:<hub id or local path>; "
            f"backends: {', '.join(sorted(BACKENDS.names()))}{_unknown_hint(name)}"
        )
    return name, target


def check_spec(spec: str) -> tuple[str, str]:
    """:func:`parse_spec` plus the target check, without creating the backend (commands call it before they
    start, so a wrong spec is refused before anything is read or written).

    Raises :class:`ConfigError` for an empty spec, an unknown backend name, or a backend that needs a target
    (``openai``, ``transformers``) given none.
    """
    name, target = parse_spec(spec)
    if BACKENDS.entry(name).get_field("needs_target", True) and not target:
        raise ConfigError(f"backend {name!r} needs a target after ':' (e.g. '{name}:<model>'), got {spec!r}")
    return name, target


def create_backend(spec: str, **options: Any) -> Backend:
    """Create a backend from a spec string and backend-specific options.

    Args:
        spec: ``"<name>:<target>"``, e.g. ``"openai:gpt-4o"``, ``"transformers:/models/qwen2.5-vl"``, ``"rules"``.
        **options: validated by the backend's own config model; unknown keys raise :class:`ConfigError`.
            ``box_format`` (``pixels``, ``norm1000`` or ``norm1000_yx``) is taken by every backend: how the model
            writes boxes (default by model family, see :mod:`echo_builder.backends.boxes`).

    Raises:
        ConfigError: unknown backend, missing target, or invalid options.
        MissingDependencyError: the backend's optional extra is not installed.
    """
    name, target = check_spec(spec)
    urls = options.pop("base_urls", None)
    if urls is not None:
        return _replicated(spec, urls, options)
    needs_target = bool(BACKENDS.entry(name).get_field("needs_target", True))
    box_format = options.pop("box_format", None)  # every backend's option; see echo_builder.backends.boxes
    if box_format is not None:
        from echo_builder.backends.boxes import resolve_box_format

        box_format = resolve_box_format(str(box_format), target)
    overrides: dict[str, Any] = {}
    # a model backend takes generation options; the rules baseline generates no text and takes no options
    if needs_target:
        generation = {k: options.pop(k) for k in GENERATION_OPTIONS if k in options}
        overrides = _generation_overrides(spec, generation) if generation else {}
    backend = BACKENDS.construct(name, target, **options)
    backend.box_format_option = box_format
    backend.generation_overrides = overrides
    return backend


def _replicated(spec: str, urls: Any, options: dict[str, Any]) -> Backend:
    """``spec`` served by one backend per URL of ``urls`` (``base_urls``), as one
    :class:`~echo_builder.backends.replicas.ReplicatedBackend` (a single URL: a plain backend on it)."""
    from echo_builder.backends.replicas import ReplicatedBackend

    if isinstance(urls, str) or not isinstance(urls, (list, tuple)) or not urls:
        raise ConfigError(f"base_urls of {spec} must be a list of server URLs, got {urls!r}")
    if "base_url" in options:
        raise ConfigError(f"give {spec} either base_url or base_urls, not both")
    if len(urls) == 1:
        return create_backend(spec, base_url=urls[0], **options)
    replicas = [create_backend(spec, base_url=url, **dict(options)) for url in urls]
    wrapped = ReplicatedBackend(replicas, [str(u) for u in urls])
    wrapped.box_format_option = replicas[0].box_format_option
    wrapped.generation_overrides = replicas[0].generation_overrides
    return wrapped


def _generation_overrides(spec: str, values: dict[str, Any]) -> dict[str, Any]:
    """``values`` validated as :class:`GenerationParams` fields (ranges, finite numbers), as JSON-compatible values."""
    from pydantic import ValidationError

    try:
        params = GenerationParams(**values)
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
        raise ConfigError(
            f"invalid generation option for {spec}: {problems} (temperature in [0, 2], top_p in (0, 1], "
            "max_tokens in [1, 1000000], seed a whole number >= 0)"
        ) from None
    return params.model_dump(mode="json", include=set(values))


def list_backends() -> list[BackendInfo]:
    """Every registered backend (built-ins and plugins), sorted by name; importing the built-in modules imports
    none of their heavy dependencies."""
    return [
        BackendInfo(
            e.name, e.target, e.description, e.extra, bool(e.get_field("needs_target", True)), e.origin
        )
        for e in sorted(BACKENDS.entries(), key=lambda e: e.name)
    ]
