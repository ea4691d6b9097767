"""``rules``: the offline, deterministic baseline for the curation stages.

It answers no free-form conversation. Each curation stage registers a rules implementation (keyword and pattern
scoring, pattern-based prompt extraction, structure-based tiering) with :func:`register_rule`; a pipeline run with
``--backend rules`` calls :meth:`RulesBackend.apply` instead of a model. The dataset card states when a split was
curated this way, because the baseline is a real but weaker curator than an LLM/VLM.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from echo_builder.backends import register_backend
from echo_builder.backends.base import Backend, GenerationParams, Message, Reply
from echo_builder.errors import ConfigError, PermanentBackendError

__all__ = ["RulesBackend", "register_rule", "registered_rules"]

_RULES: dict[str, Callable[..., Any]] = {}


def register_rule(stage: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Decorator registering ``fn`` as the rules implementation of ``stage``; a second one for a stage is an error."""

    def decorate(fn: Callable[..., Any]) -> Callable[..., Any]:
        existing = _RULES.get(stage)
        # the same function imported twice (e.g. by a doctest collector) is a re-registration, not a clash
        if existing is not None and _qualified(existing) != _qualified(fn):
            raise ConfigError(
                f"a rules implementation for stage {stage!r} is already registered ({_qualified(existing)})"
            )
        _RULES[stage] = fn
        return fn

    return decorate


def _qualified(fn: Callable[..., Any]) -> str:
    return f"{getattr(fn, '__module__', '?')}.{getattr(fn, '__qualname__', repr(fn))}"


def registered_rules() -> dict[str, Callable[..., Any]]:
    """Stage name -> rules implementation, for every stage registered so far."""
    return dict(_RULES)


@register_backend(order=30)
class RulesBackend(Backend):
    """Runs the registered rules implementation of a stage; accepts no options."""

    name = "rules"
    description = "offline deterministic baseline for the curation stages (no model)"
    needs_target = False
    answers_prompts = False

    def __init__(self, target: str = "", **options: Any) -> None:
        if options:
            raise ConfigError(f"the rules backend takes no options, got {sorted(options)}")
        super().__init__(target)

    @property
    def model_snapshot(self) -> str:
        from echo_builder import __version__

        return f"rules@{__version__}"

    def apply(self, stage: str, *args: Any, **kwargs: Any) -> Any:
        """Run the rules implementation of ``stage``. Raises :class:`ConfigError` when the stage has none."""
        try:
            fn = _RULES[stage]
        except KeyError:
            known = ", ".join(sorted(_RULES)) or "none yet"
            raise ConfigError(
                f"the rules backend has no implementation for stage {stage!r} (has: {known})"
            ) from None
        return fn(*args, **kwargs)

    async def agenerate(self, messages: Sequence[Message], params: GenerationParams) -> Reply:
        raise PermanentBackendError(
            "the rules backend does not answer free-form prompts; stages call RulesBackend.apply(stage, ...)",
            backend_id=self.backend_id,
        )
