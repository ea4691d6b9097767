"""Curation stages (ECHO Flow 1): query, relevance, threads, extract; media and the VLM stages come next.

Each stage is one module with a versioned prompt template, a pydantic schema for the model's answer, and a rules
implementation registered with :func:`echo_builder.backends.rules.register_rule` so it runs with no model. The
module declares the stage with :func:`echo_builder.stages.registry.declare_stage`; the registry finds every module
of this package itself (less :data:`echo_builder.stages.registry.HELPER_MODULES`), so a new stage is one new module
and its tests, with no edit here.
"""
