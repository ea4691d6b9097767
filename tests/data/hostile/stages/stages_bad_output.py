"""Plugin stages whose output the pipeline cannot use: a NaN in the report, samples that are not samples."""

from echo_builder.stages.registry import StageDefinition, StageOutput


def nan_report(context):
    return StageOutput({"in": 1, "out": 1, "failures": 0, "ratio": float("nan")})


def strings_as_samples(context):
    context.samples = ["not a sample", *context.samples]
    return StageOutput({"in": 1, "out": 1, "failures": 0})


NAN_REPORT = StageDefinition("nan_report", "v1", nan_report, after="extract", skippable=True)
BAD_SAMPLES = StageDefinition("bad_samples", "v1", strings_as_samples, after="extract", skippable=True)
