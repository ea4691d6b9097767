"""A plugin stage that raises while running (after threads)."""

from echo_builder.stages.registry import StageDefinition


def run(context):
    raise KeyError("missing_field")


STAGE = StageDefinition("crash", "v1", run, after="threads", reads=("trees",), skippable=True)
