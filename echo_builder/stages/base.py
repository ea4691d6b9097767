"""What every curation stage declares: its name, prompt template and version, and the answer schema.

Stages are declarative (PRACTICES.md 8): a :class:`PromptTemplate` carries a version that goes into the cache
key, so editing a prompt and bumping its version is a clean cache miss. Each LLM stage has a ``rules``
implementation registered with :func:`echo_builder.backends.rules.register_rule`, so the whole pipeline runs with
no model at all (``--backend rules``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from echo_builder.backends.base import GenerationParams, Message, TextPart
from echo_builder.backends.caller import CallRequest

__all__ = ["PromptTemplate", "StageFailure"]


@dataclass(frozen=True)
class PromptTemplate:
    """A stage's prompt: system text and a user text with ``str.format`` fields, plus its version."""

    stage: str
    version: str
    system: str
    user: str

    def request(self, params: GenerationParams | None = None, **fields: Any) -> CallRequest:
        """The cacheable call for these field values (greedy, 1,024 tokens unless ``params`` says otherwise)."""
        messages = (
            Message("system", (TextPart(self.system),)),
            Message("user", (TextPart(self.user.format(**fields)),)),
        )
        return CallRequest(
            messages,
            params or GenerationParams(max_tokens=1024),
            stage=self.stage,
            prompt_version=self.version,
        )


@dataclass(frozen=True)
class StageFailure:
    """A record a stage could not process: which one, and why (the model's raw text is kept when there is one)."""

    stage: str
    record_id: str
    reason: str
    raw_text: str = ""
