"""Hostile-corpus flows of ``echo-bench analyze`` (cases in ``tests/data/hostile/cases.d/analysis.yaml``).

- ``analyze_compare``: a small benchmark analysed with the case's file as a ``--compare`` reference prompt set
  (``input.args``: extra options);
- ``analyze_rows``: a text-to-image benchmark whose rows are ``input.rows`` (``id``, ``prompt``, ``created_at``,
  ``feedback``: any JSON values, nulls included), analysed with the rules labeller.
"""

from __future__ import annotations

import json
from typing import Any

from tests.reliability.hostile_workspace import Observed, Workspace, _cli, _read_record

GOOD_PROMPTS = ("a red car on a street", "a cat in a hat", "a poster of Mars that reads VISIT")


def _write_rows(folder: Any, rows: list[dict[str, Any]]) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    feedback_type = pa.list_(pa.struct([("post_url", pa.string()), ("feedback", pa.string())]))
    table = pa.table(
        {
            "id": pa.array([r.get("id") for r in rows], pa.string()),
            "prompt": pa.array([r.get("prompt") for r in rows], pa.string()),
            "created_at": pa.array([r.get("created_at") for r in rows], pa.string()),
            "community_feedback": pa.array(
                [
                    None
                    if r.get("feedback") is None
                    else [{"post_url": "u", "feedback": f} for f in r["feedback"]]
                    for r in rows
                ],
                feedback_type,
            ),
        }
    )
    (folder / "text_to_image").mkdir(parents=True)
    pq.write_table(table, folder / "text_to_image" / "test-00000-of-00001.parquet")


def _facts(ws: Workspace) -> dict[str, Any]:
    path = ws.out / "analysis.json"
    if not path.is_file():
        return {}
    doc = json.loads(path.read_text(encoding="utf-8"))
    markdown = (ws.out / "analysis.md").read_text(encoding="utf-8")
    sets = {s["name"]: s for s in doc["diversity"]["sets"]}
    facts: dict[str, Any] = {
        "samples": sum(c["samples"] for c in doc["input"]["configs"].values()),
        "problems": len(doc["input"]["problems"]),
        "undated": sum(doc["activity"]["undated"].values()),
        "days_listed": len(doc["activity"]["days"]),
        "feedback_items": doc["failures"]["summary"]["items"],
        "failure_categories": sorted(r["category"] for r in doc["failures"]["categories"]),
        "report_has_html": "<script" in markdown.lower(),
        "report_table_rows": sum(1 for line in markdown.splitlines() if line.startswith("|")),
    }
    if "reference" in sets:
        facts["reference_prompts"] = sets["reference"]["n_prompts"]
        facts["reference_first_bigrams"] = sets["reference"]["unique_first_bigrams"]
    return facts


def flow_analyze_compare(case: dict[str, Any], ws: Workspace) -> Observed:
    """``analyze`` on a 3-prompt benchmark with the case's file, copied as ``reference<suffix>``, as --compare."""
    source = ws.source(case["file"])
    _write_rows(ws.inputs / "bench", [{"id": f"s{i}", "prompt": p} for i, p in enumerate(GOOD_PROMPTS)])
    reference = ws.inputs / ("reference" + source.suffix)
    reference.write_bytes(source.read_bytes())
    ws.begin()
    args = (case.get("input") or {}).get("args", [])
    result = _cli(
        "analyze", ws.inputs / "bench", "--out", ws.out, "--compare", reference, "--n-boot", "20", *args
    )
    return Observed(result.exit_code, result.output, result.exception, _facts(ws), _read_record(ws))


def flow_analyze_rows(case: dict[str, Any], ws: Workspace) -> Observed:
    """``analyze`` (rules) on a benchmark whose rows are ``input.rows``, with ``input.args`` as extra options."""
    _write_rows(ws.inputs / "bench", case["input"]["rows"])
    ws.begin()
    args = case["input"].get("args", [])
    result = _cli("analyze", ws.inputs / "bench", "--out", ws.out, "--n-boot", "20", *args)
    return Observed(result.exit_code, result.output, result.exception, _facts(ws), _read_record(ws))
