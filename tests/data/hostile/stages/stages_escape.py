"""A plugin stage that declares a stage file outside OUT/stages."""

from echo_builder.stages.registry import StageDefinition, StageOutput


def run(context):
    return StageOutput({"in": 0, "out": 0, "failures": 0}, files={"../../pwned.jsonl": [{"x": 1}]})


ESCAPE = StageDefinition("escape", "v1", run, after="tier", files=("../../pwned.jsonl",))
