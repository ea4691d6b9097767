"""Hostile-corpus flows of issue 29 (``cases.d/yaml_plugins_release.yaml``): YAML files read by every reader
through the one safe loader, plugin code that never returns, and a release row of 100,000 image tokens."""

from __future__ import annotations

import json
import os
from typing import Any

from tests.reliability.hostile_curation import _collection, flow_release
from tests.reliability.hostile_evaluation import REFERENCE, _judge_setup
from tests.reliability.hostile_workspace import HOSTILE, Observed, Workspace, _cli, _read_record

#: every corpus YAML file of this area holds this word in its content: an error must never show it
SECRET = "SECRET"


def _facts(result: Any) -> dict[str, Any]:
    output = result.output
    return {
        "exit_code": result.exit_code,
        "one_line": output.startswith("error: ") and output.count("\n") == 1,
        "content_shown": SECRET in output,
    }


def flow_yaml_file(case: dict[str, Any], ws: Workspace) -> Observed:
    """The case's YAML file given to the reader ``input.reader``: ``judge_prompt`` (``judge --judge-prompt``),
    ``run_config`` (``judge --run-config``) or ``prices`` (``judge --prices``), on a one-sample judge setup whose
    server is never reached. Facts: ``exit_code``, ``one_line`` (one ``error:`` line), ``content_shown`` (the
    word SECRET, which every file of this area holds, in the output), ``calls``."""
    reader = case["input"]["reader"]
    file = ws.source(case["file"])
    server = ws.server()
    bench, outputs = _judge_setup(ws, "Make it warmer.", {"reference": {"s1.png": REFERENCE}})
    ws.begin()
    if reader == "run_config":
        result = _cli("judge", "--run-config", file, "--out", ws.out)
    else:
        option = {"judge_prompt": "--judge-prompt", "prices": "--prices"}[reader]
        result = _cli(
            "judge", "--benchmark", bench, "--config", "image_to_image", "--outputs", outputs, "--judge",
            "openai:judge", "--base-url", server.base_url, "--out", ws.out, option, file,
        )  # fmt: skip
    facts = {**_facts(result), "calls": server.calls}
    return Observed(result.exit_code, result.output, result.exception, facts, _read_record(ws))


def flow_plugin_deadline(case: dict[str, Any], ws: Workspace) -> Observed:
    """The case's file installed as a plugin module (a fake distribution ``echo-hostile``; ``input.group`` and
    ``input.entry_points`` as in its ``entry_points.txt``) under deadlines of 1 s (``ECHO_PLUGIN_TIMEOUT_S`` and
    ``ECHO_PLUGIN_IMPORT_TIMEOUT_S``), then ``input.run``:

    - ``metrics``: ``metrics --metric color_shift --metric NAME`` (``input.metric``) on a one-sample setup;
    - ``plugins``: ``plugins --format json``, then ``metrics --metric color_shift``;
    - ``build_export``: ``build`` of a folder with ``slow.json`` (``input.export``) and one JSONL post;
    - ``build``: ``build`` of the corpus's good collection case.

    Facts: ``exit_code`` (of the last command), ``error`` (its ``error:`` line or ``None``), ``metrics`` (the metrics
    written), ``posts`` (read by a build). Records (``where``): ``output``, ``plugin_problems``, or a file of OUT."""
    from echo_builder.registry import plugin_problems
    from tests.helpers.fake_plugins import FakeSite

    spec = case["input"]
    source = ws.source(case["file"])
    site = FakeSite(ws.inputs / "site")
    saved = {name: os.environ.get(name) for name in ("ECHO_PLUGIN_TIMEOUT_S", "ECHO_PLUGIN_IMPORT_TIMEOUT_S")}
    os.environ.update({name: "1" for name in saved})
    facts: dict[str, Any] = {}
    try:
        site.install(
            "echo-hostile",
            {spec["group"]: dict(spec["entry_points"])},
            {source.name.removesuffix(".py"): source.read_text(encoding="utf-8")},
        )
        run = spec["run"]
        outputs_text = ""
        if run in ("metrics", "plugins"):
            bench, outputs = _judge_setup(ws, "Make it warmer.", {"reference": {"s1.png": REFERENCE}})
            args = ["metrics", "--benchmark", bench, "--config", "image_to_image", "--outputs", outputs]
            ws.begin()
            if run == "plugins":
                listed = _cli("plugins", "--format", "json")
                outputs_text = listed.output
                facts["plugins_exit_code"] = listed.exit_code
                result = _cli(*args, "--metric", "color_shift", "--out", ws.out)
            else:
                result = _cli(*args, "--metric", "color_shift", "--metric", spec["metric"], "--out", ws.out)
            table = ws.out / "metrics.parquet"
            if table.is_file():
                import pandas as pd

                facts["metrics"] = sorted(set(pd.read_parquet(table)["metric"]))
        else:
            if run == "build_export":
                folder = ws.inputs / "exports"
                folder.mkdir()
                (folder / "slow.json").write_text(
                    json.dumps({"slow_export": spec["export"]}), encoding="utf-8"
                )
                post = {"id": "x:1", "platform": "x", "text": "GPT-4o made this! prompt: a red fox"}
                (folder / "own.jsonl").write_text(json.dumps(post) + "\n", encoding="utf-8")
            else:
                folder = _collection(ws, [HOSTILE / "collection" / "good"])
            ws.begin()
            result = _cli("build", folder, "--out", ws.out, "--target-model", "GPT-4o", "--offline")
            if (ws.out / "report.json").is_file():
                stages = json.loads((ws.out / "report.json").read_text(encoding="utf-8"))["stages"]
                facts["posts"] = next(s["out"] for s in stages if s["name"] == "collect")
        problems = "\n".join(str(p) for p in plugin_problems())
    finally:
        site.close()
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
    errors = [line for line in result.output.splitlines() if line.startswith("error:")]
    facts.update({"exit_code": result.exit_code, "error": errors[0] if errors else None})
    record = _read_record(ws)

    def where(name: str) -> str:
        if name == "output":
            return outputs_text + result.output
        if name == "plugin_problems":
            return problems
        return record(name)

    return Observed(result.exit_code, result.output, result.exception, facts, where)


def flow_release_tokens(case: dict[str, Any], ws: Workspace) -> Observed:
    """``import echo2025`` (the ``release`` flow) of one image_to_image row with ``input.tokens`` media-id tokens,
    the first ``input.local`` of them with local copies (``input_images/input_<k>.png``). Facts as ``release``,
    plus ``errors`` (the row's ``media_errors`` count)."""
    from PIL import Image

    spec = case["input"]
    sample_id = "TokRowQQQQQQQQQQQQQQQQ"
    tokens = [f"GnTok{k:07d}" for k in range(1, spec["tokens"] + 1)]
    release_case = {"input": {"rows": [{"id": sample_id, "prompt": "p", "input_images": tokens}]}}
    folder = ws.inputs / "images" / "images_to_image" / sample_id / "input_images"
    folder.mkdir(parents=True)
    for k in range(1, spec.get("local", 0) + 1):
        Image.new("RGB", (8, 8), (10 * k, 20, 30)).save(folder / f"input_{k}.png")
    observed = flow_release(release_case, ws)
    table = ws.out / "image_to_image"
    if table.is_dir():
        import pyarrow.parquet as pq

        (row,) = pq.read_table(table, columns=["media_errors"]).to_pylist()
        observed.facts["errors"] = len(row["media_errors"])
    return observed
