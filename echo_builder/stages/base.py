"""What every curation stage declares: its name, prompt template and version, and the answer schema.

Stages are declarative (PRACTICES.md 8): a :class:`PromptTemplate` carries a version that goes into the cache
key, so editing a prompt and bumping its version is a clean cache miss. Each LLM stage has a ``rules``
implementation registered with :func:`echo_builder.backends.rules.register_rule`, so the whole pipeline runs with
no model at all (``--backend rules``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from echo_builder.backends.base import GenerationParams, Message, TextPart
from echo_builder.backends.caller import CallRequest

if TYPE_CHECKING:
    from echo_builder.stages.registry import StageContext, StageOutput

__all__ = ["PromptTemplate", "StageFailure", "sample_stage"]


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


def sample_stage(context: StageContext, name: str, run: Any) -> StageOutput:
    """Run a stage that maps samples to samples (roles, templates, screenshots) and shape its output.

    ``run(samples, caller=, store_root=, progress=)`` returns an object with ``samples``, ``failures``, ``notes``
    and optionally ``info`` (extra report fields such as the screenshots stage's ``box_format``). The samples
    replace ``context.samples``, the failures join ``context.failures``, and the stage file is ``NAME.jsonl``.
    """
    from echo_builder.stages.registry import StageOutput

    samples = context.samples
    done = run(samples, caller=context.caller, store_root=context.store_root, progress=context.progress(name))
    context.failures.extend(done.failures)
    context.samples = done.samples
    return StageOutput(
        {
            "in": len(samples),
            "out": len(done.samples),
            "failures": len(done.failures),
            "notes": done.notes,
            **getattr(done, "info", {}),
        },
        files={f"{name}.jsonl": done.samples},
    )
