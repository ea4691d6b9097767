"""A plugin curation stage whose run never returns."""

import threading

from echo_builder.stages.registry import StageDefinition, StageOutput


def run(context):
    threading.Event().wait()
    return StageOutput({"in": 0, "out": 0, "failures": 0})


STAGE = StageDefinition(
    name="hangs_forever",
    version="hangs-1",
    run=run,
    after="threads",
    reads=(),
    writes=(),
    files=(),
    report_fields=(),
    skippable=True,
    description="never returns",
)
