"""Plugin stages that take a built-in's name, run before the first stage, or after a stage that does not exist."""

from echo_builder.stages.registry import StageDefinition, StageOutput


def run(context):
    context.samples = []
    return StageOutput({"in": 0, "out": 0, "failures": 0})


EXTRACT = StageDefinition("extract", "v9", run, after="threads")
FIRST = StageDefinition("first", "v1", run, after=None)
ORPHAN = StageDefinition("orphan", "v1", run, after="nonexistent")
LOOP_A = StageDefinition("loop_a", "v1", run, after="loop_b")
LOOP_B = StageDefinition("loop_b", "v1", run, after="loop_a")
