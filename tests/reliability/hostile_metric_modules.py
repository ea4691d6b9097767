"""Hostile-corpus flow of the metric modules: a plugin metric's ``evaluate`` module folder given to
``echo-bench publish-metrics`` (cases in ``tests/data/hostile/cases.d/metric_modules.yaml``)."""

from __future__ import annotations

from typing import Any

import numpy as np

from tests.reliability.hostile_workspace import Observed, Workspace, _cli, _read_record

_NAME = "hostile_probe"


def _probe(inputs: Any, outputs: Any, prompts: Any, options: Any) -> Any:
    from echo_builder.scoring.base import MetricResult

    return MetricResult(np.zeros(len(outputs)), [None] * len(outputs))


def flow_publish_metrics_module(case: dict[str, Any], ws: Workspace) -> Observed:
    """A plugin metric ``hostile_probe`` (registered in memory) whose module folder has ``file`` as its card
    ``README.md``, every other file of evaluate's layout except those in ``input.missing``; ``echo-bench
    publish-metrics --org org --metric hostile_probe --dry-run`` checks it."""
    from echo_builder.registry import Entry
    from echo_builder.scoring.base import MetricSpec
    from echo_builder.scoring.registry import METRICS, MetricDefinition, validate_metric

    folder = ws.inputs / _NAME
    folder.mkdir()
    files = {
        f"{_NAME}.py": b"import evaluate\n",
        "README.md": ws.source(case["file"]).read_bytes(),
        "app.py": b"import gradio\n",
        "requirements.txt": b"echo-bench\n",
    }
    for name, content in files.items():
        if name not in (case.get("input") or {}).get("missing", ()):
            (folder / name).write_bytes(content)
    spec = MetricSpec(_NAME, False, 0.0, 1.0, "unit", "hostile corpus")
    definition = validate_metric(MetricDefinition(_NAME, spec, _probe, module=str(folder)))
    METRICS.add(Entry(_NAME, "", "hostile probe", None, "hostile corpus"), definition)
    try:
        ws.begin()
        result = _cli("publish-metrics", "--org", "org", "--metric", _NAME, "--dry-run")
    finally:
        METRICS.remove(_NAME)
    return Observed(result.exit_code, result.output, result.exception, {}, _read_record(ws))
