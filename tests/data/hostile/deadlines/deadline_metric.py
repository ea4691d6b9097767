"""A plugin metric whose computation never returns (it waits on an event nobody sets)."""

import threading

import numpy as np

from echo_builder.scoring.base import MetricResult, MetricSpec
from echo_builder.scoring.registry import MetricDefinition


def forever(inputs, outputs, prompts, options):
    threading.Event().wait()
    return MetricResult(np.zeros(len(outputs)), [None] * len(outputs))


METRIC = MetricDefinition(
    name="hangs_forever",
    spec=MetricSpec(
        name="hangs_forever", higher_is_better=False, low=0.0, high=1.0, unit="none", source="hostile"
    ),
    factory=forever,
    needs_inputs=False,
    description="never returns",
)
