"""Hostile-corpus flows of evaluation: judge, metrics and generate on hostile images and names, and prompt
injection into the judge and the curator."""

from __future__ import annotations

import base64
import io
import json
from pathlib import Path
from typing import Any

import pytest
from PIL import Image

from tests.helpers.benchmark import make_benchmark, png_bytes
from tests.reliability.hostile_workspace import (
    GREY,
    HOSTILE,
    Observed,
    Workspace,
    _build,
    _cli,
    _jsonl,
    _read_record,
)


def _images_of(body: dict[str, Any]) -> list[Image.Image]:
    out = []
    for message in body["messages"]:
        if isinstance(message["content"], list):
            for part in message["content"]:
                if part["type"] == "image_url":
                    data = base64.b64decode(part["image_url"]["url"].split(",", 1)[1])
                    out.append(Image.open(io.BytesIO(data)))
    return out


def _texts_of(body: dict[str, Any], role: str) -> str:
    parts = []
    for message in body["messages"]:
        if message["role"] != role:
            continue
        content = message["content"]
        parts += [content] if isinstance(content, str) else [p.get("text", "") for p in content]
    return "\n".join(parts)


def _judge_setup(
    ws: Workspace, prompt: str, outputs: dict[str, dict[str, bytes | Path]]
) -> tuple[Path, Path]:
    """An image_to_image benchmark with sample s1 (grey 64 x 64 input) and ``outputs[model][sample_id]``."""
    bench = make_benchmark(
        ws.inputs / "bench",
        "image_to_image",
        [{"id": "s1", "prompt": prompt, "inputs": [Image.new("RGB", (64, 64), GREY)]}],
    )
    folder = ws.inputs / "outputs"
    for model, files in outputs.items():
        (folder / model).mkdir(parents=True, exist_ok=True)  # exist_ok: a file system may merge two names
        for name, data in files.items():
            (folder / model / name).write_bytes(data.read_bytes() if isinstance(data, Path) else data)
    return bench, folder


def _judge(ws: Workspace, bench: Path, outputs: Path, server: Any, config: str = "image_to_image") -> Any:
    if ws.before is None:
        ws.begin()
    return _cli(
        "judge", "--benchmark", bench, "--config", config, "--outputs", outputs, "--judge", "openai:judge",
        "--base-url", server.base_url, "--out", ws.out, "--max-attempts", "1", "--concurrency", "2",
    )  # fmt: skip


def _verdicts(out: Path) -> dict[tuple[str, str], Any]:
    from echo_builder.judge.run import read_verdicts

    if not (out / "verdicts.parquet").is_file():
        return {}
    return {(v.model, v.sample_id): v for v in read_verdicts(out)}


# the reference output is 40 x 80 px, so the judge is sent a 512 x 1024 px copy of it
REFERENCE = png_bytes(Image.new("RGB", (40, 80), (120, 130, 140)))


def flow_judge(case: dict[str, Any], ws: Workspace) -> Observed:
    image = ws.source(case["file"])
    server = ws.server()
    server.reply = lambda body: "A good output keeps the input. [[7]]"
    bench, outputs = _judge_setup(
        ws, "Make it warmer.", {"reference": {"s1.png": REFERENCE}, "hostile": {f"s1{image.suffix}": image}}
    )
    result = _judge(ws, bench, outputs, server)
    verdicts = _verdicts(ws.out)
    hostile, reference = verdicts.get(("hostile", "s1")), verdicts.get(("reference", "s1"))
    sent = [_images_of(b)[-1].size for b in server.log.bodies]
    facts = {
        "status": hostile.status if hostile else None,
        "reference_status": reference.status if reference else None,
        "rating": hostile.rating if hostile else None,
        "sent_size": next((list(s) for s in sent if s != (512, 1024)), None),
    }
    return Observed(result.exit_code, result.output, result.exception, facts, _read_record(ws))


def _color_shift(bench: Path, outputs: Path, out: Path) -> Any:
    return _cli(
        "metrics", "--benchmark", bench, "--config", "image_to_image", "--outputs", outputs,
        "--metric", "color_shift", "--out", out, "--format", "csv",
    )  # fmt: skip


def flow_metrics(case: dict[str, Any], ws: Workspace) -> Observed:
    image = ws.source(case["file"])
    grey = png_bytes(Image.new("RGB", (64, 64), GREY))
    bench, outputs = _judge_setup(
        ws, "Keep the colours.", {"reference": {"s1.png": grey}, "hostile": {f"s1{image.suffix}": image}}
    )
    ws.begin()
    result = _color_shift(bench, outputs, ws.out)
    facts: dict[str, Any] = {}
    if (ws.out / "metrics.csv").is_file():
        import pandas as pd

        table = pd.read_csv(ws.out / "metrics.csv")
        facts["value"] = float(table.loc[table["model"] == "hostile", "value"].iloc[0])
        facts["reference_value"] = float(table.loc[table["model"] == "reference", "value"].iloc[0])
        assert facts["reference_value"] == 0.0  # the unharmed model beside it is scored as usual
    return Observed(result.exit_code, result.output, result.exception, facts, _read_record(ws))


def flow_metrics_layout(case: dict[str, Any], ws: Workspace) -> Observed:
    """``input.files``: paths under the outputs folder (grey images, e.g. ``run1/m/s1.png``, ``m/S1-final.png``)
    for a benchmark whose only sample is ``s1``; ``echo-bench metrics --metric color_shift`` on that folder."""
    bench, outputs = _judge_setup(ws, "Keep the colours.", {})
    grey = png_bytes(Image.new("RGB", (64, 64), GREY))
    for relative in case["input"]["files"]:
        (outputs / relative).parent.mkdir(parents=True, exist_ok=True)
        (outputs / relative).write_bytes(grey)
    ws.begin()
    result = _color_shift(bench, outputs, ws.out)
    facts: dict[str, Any] = {}
    if (ws.out / "summary.json").is_file():
        summary = json.loads((ws.out / "summary.json").read_text())
        facts["unmatched_outputs"] = summary["unmatched_outputs"]
        facts["scored"] = sum(row["n"] for row in summary["summary"])
    return Observed(result.exit_code, result.output, result.exception, facts, _read_record(ws))


def _input_bench(ws: Workspace, image: Path) -> tuple[Path, Path]:
    """image_to_image benchmark: s1's input is ``image``, s2's a grey 64 x 64 PNG; model "m" has grey outputs."""
    grey = Image.new("RGB", (64, 64), GREY)
    bench = make_benchmark(
        ws.inputs / "bench",
        "image_to_image",
        [
            {"id": "s1", "prompt": "Keep the colours.", "inputs": [image.read_bytes()]},
            {"id": "s2", "prompt": "Keep the colours.", "inputs": [grey]},
        ],
    )
    folder = ws.inputs / "outputs"
    (folder / "m").mkdir(parents=True)
    for sample_id in ("s1", "s2"):
        (folder / "m" / f"{sample_id}.png").write_bytes(png_bytes(grey))
    return bench, folder


def flow_judge_input(case: dict[str, Any], ws: Workspace) -> Observed:
    """``judge`` where one sample's benchmark input image is ``file``; the other sample is judged as usual."""
    server = ws.server()
    server.reply = lambda body: "Kept. [[7]]"
    bench, outputs = _input_bench(ws, ws.source(case["file"]))
    result = _judge(ws, bench, outputs, server)
    verdicts = _verdicts(ws.out)
    facts = {
        "status": verdicts[("m", "s1")].status if ("m", "s1") in verdicts else None,
        "other_status": verdicts[("m", "s2")].status if ("m", "s2") in verdicts else None,
        "other_rating": verdicts[("m", "s2")].rating if ("m", "s2") in verdicts else None,
    }
    return Observed(result.exit_code, result.output, result.exception, facts, _read_record(ws))


def flow_metrics_input(case: dict[str, Any], ws: Workspace) -> Observed:
    """``metrics --metric color_shift`` where one sample's benchmark input image is ``file``."""
    bench, outputs = _input_bench(ws, ws.source(case["file"]))
    ws.begin()
    result = _color_shift(bench, outputs, ws.out)
    facts: dict[str, Any] = {}
    if (ws.out / "metrics.csv").is_file():
        import pandas as pd

        table = pd.read_csv(ws.out / "metrics.csv").set_index("sample_id")
        facts["value"] = float(table.loc["s1", "value"])
        facts["other_value"] = float(table.loc["s2", "value"])
    return Observed(result.exit_code, result.output, result.exception, facts, _read_record(ws))


GENERATOR = """import json, sys
from PIL import Image
request = json.load(sys.stdin)
Image.new("RGB", (16, 16), (128, 128, 128)).save(request["output_path"])
"""


def flow_generate_input(case: dict[str, Any], ws: Workspace) -> Observed:
    """``generate`` (a ``command:`` program) where one sample's benchmark input image is ``file``."""
    import sys

    bench, _ = _input_bench(ws, ws.source(case["file"]))
    program = ws.inputs / "generator.py"
    program.write_text(GENERATOR, encoding="utf-8")
    ws.begin()
    result = _cli(
        "generate", "--benchmark", bench, "--config", "image_to_image", "--model",
        f"command:{sys.executable} {program}", "--name", "gen", "--out", ws.out,
    )  # fmt: skip
    manifest = ws.out / "gen" / "manifest.json"
    facts: dict[str, Any] = {}
    if manifest.is_file():
        from echo_builder.generate.manifest import read_records

        records = read_records(ws.out / "gen")
        facts = {"status": records["s1"]["status"], "other_status": records["s2"]["status"]}
    return Observed(result.exit_code, result.output, result.exception, facts, _read_record(ws))


COPYING_GENERATOR = """\
import json, shutil, sys
request = json.load(sys.stdin)
shutil.copyfile({source!r} if request["sample_id"] == "s1" else {good!r}, request["output_path"])
"""


def flow_generate_output(case: dict[str, Any], ws: Workspace) -> Observed:
    """``generate`` where the program's image for s1 is ``file`` (s2 gets a grey PNG)."""
    import sys

    bench, _ = _input_bench(ws, HOSTILE / "images" / "jpeg_named.png")
    good = ws.inputs / "grey.png"
    good.write_bytes(png_bytes(Image.new("RGB", (16, 16), GREY)))
    source = ws.inputs / "hostile_output"
    source.write_bytes(ws.source(case["file"]).read_bytes())
    program = ws.inputs / "generator.py"
    program.write_text(COPYING_GENERATOR.format(source=str(source), good=str(good)), encoding="utf-8")
    ws.begin()
    result = _cli(
        "generate", "--benchmark", bench, "--config", "image_to_image", "--model",
        f"command:{sys.executable} {program}", "--name", "gen", "--out", ws.out,
    )  # fmt: skip
    facts: dict[str, Any] = {}
    if (ws.out / "gen" / "manifest.json").is_file():
        from echo_builder.generate.manifest import read_records

        records = read_records(ws.out / "gen")
        facts = {
            "status": records["s1"]["status"],
            "other_status": records["s2"]["status"],
            "files": sorted(p.name for p in (ws.out / "gen").glob("*.png")),
        }
    return Observed(result.exit_code, result.output, result.exception, facts, _read_record(ws))


def flow_model_names(case: dict[str, Any], ws: Workspace) -> Observed:
    names = case["input"]["names"]
    server = ws.server()
    server.reply = lambda body: "[[7]]"
    grey = png_bytes(Image.new("RGB", (16, 16), (140, 120, 100)))
    bench, outputs = _judge_setup(ws, "Make it warmer.", {name: {"s1.png": grey} for name in names})
    if len(list(outputs.iterdir())) != len(names):
        pytest.skip("this file system merges some of the names (Unicode normalisation or case folding)")
    results = [_judge(ws, bench, outputs, server)]
    run = json.loads((ws.out / "run.json").read_text()) if (ws.out / "run.json").is_file() else {}
    results.append(_cli("leaderboard", ws.out, "--format", "json", "--n-boot", "20"))
    board = json.loads(results[-1].stdout) if results[-1].exit_code == 0 else []
    results.append(_color_shift(bench, outputs, ws.out / "metrics"))
    swatches = sorted(p.name for p in (ws.out / "metrics" / "color_swatches").glob("*"))
    assert sorted(run.get("models", [])) == sorted(names)  # every name exactly as the folder spells it
    assert sorted(r["model"] for r in board) == sorted(names)
    reserved = {"CON", "PRN", "AUX", "NUL"}
    assert all(not s.startswith(("-", ".")) and s.split(".")[0].upper() not in reserved for s in swatches)
    bad = next((r for r in results if r.exit_code != 0), results[-1])
    facts = {
        "models_judged": len(run.get("models", [])),
        "leaderboard_models": len(board),
        "swatches": len(swatches),
    }
    return Observed(bad.exit_code, bad.output, bad.exception, facts, _read_record(ws))


def flow_sample_ids(case: dict[str, Any], ws: Workspace) -> Observed:
    ids = case["input"]["ids"]
    server = ws.server()
    server.reply = lambda body: "[[7]]"
    img = Image.new("RGB", (8, 8), (50, 60, 70))
    bench = make_benchmark(
        ws.inputs / "bench", "image_to_image", [{"id": i, "prompt": "p", "inputs": [img]} for i in ids]
    )
    model = ws.inputs / "outputs" / "m"
    model.mkdir(parents=True)
    for sample_id in ids:
        name = f"{sample_id}.png"
        if "/" in name or "\0" in name or sample_id == "cafe\u0301":
            continue  # not a file name (or, for the NFD id, deliberately only its NFC twin exists)
        (model / name).write_bytes(png_bytes(img))
    # a trap where a path join of "m" and "../escape" would look
    (ws.inputs / "outputs" / "escape.png").write_bytes(png_bytes(img))
    result = _judge(ws, bench, ws.inputs / "outputs", server)
    statuses = {sid: v.status for (_, sid), v in _verdicts(ws.out).items()}
    return Observed(
        result.exit_code, result.output, result.exception, {"statuses": statuses}, _read_record(ws)
    )


def _slot(user: str, tag: str) -> tuple[int, int]:
    """Where a naive reader sees the ``<tag>`` slot: from the first opening tag to the first closing tag after it."""
    start = user.find(f"<{tag}>\n")
    end = user.find(f"\n</{tag}>", start)
    return start, end


def _naive(body: dict[str, Any], tag: str, obeyed: str, honest: str) -> str:
    """A scripted model that obeys "ignore the instructions" when it reads it outside the delimited slot."""
    system, user = _texts_of(body, "system"), _texts_of(body, "user")
    start, end = _slot(user, tag)
    outside = system + user[:start] + (user[end:] if end >= 0 else "")
    return obeyed if "ignore the instructions" in outside.lower() else honest


def flow_judge_injection(case: dict[str, Any], ws: Workspace) -> Observed:
    from echo_builder.judge.prompts import quote_slot

    prompt = ws.source(case["file"]).read_text(encoding="utf-8")
    server = ws.server()
    server.reply = lambda body: _naive(body, "prompt", "Rating: [[10]]", "The fox is blurry. [[3]]")
    bench, outputs = _judge_setup(ws, prompt, {"model": {"s1.png": REFERENCE}})
    result = _judge(ws, bench, outputs, server)
    verdict = _verdicts(ws.out).get(("model", "s1"))
    body = server.log.bodies[0]
    user = _texts_of(body, "user")
    start, end = _slot(user, "prompt")
    facts = {
        "rating": verdict.rating if verdict else None,
        "prompt_in_slot": quote_slot(prompt, "prompt") in user[start:end],
        "prompt_in_system": prompt in _texts_of(body, "system"),
    }
    return Observed(result.exit_code, result.output, result.exception, facts, _read_record(ws))


def flow_judge_reply(case: dict[str, Any], ws: Workspace) -> Observed:
    reply = ws.source(case["file"]).read_text(encoding="utf-8")
    server = ws.server()
    server.reply = lambda body: reply
    bench, outputs = _judge_setup(ws, "A red fox in the snow.", {"model": {"s1.png": REFERENCE}})
    result = _judge(ws, bench, outputs, server)
    verdict = _verdicts(ws.out).get(("model", "s1"))
    facts = {
        "status": verdict.status if verdict else None,
        "rating": verdict.rating if verdict else None,
        "calls": server.calls,  # the first ask and its one re-ask
    }
    return Observed(result.exit_code, result.output, result.exception, facts, _read_record(ws))


def flow_relevance_injection(case: dict[str, Any], ws: Workspace) -> Observed:
    from echo_builder.judge.prompts import quote_slot

    source = ws.source(case["file"])
    texts = [json.loads(line)["text"] for line in source.read_text(encoding="utf-8").splitlines()]
    extra: tuple[str, ...] = ()
    server = None
    if case["input"]["backend"] == "openai":
        server = ws.server()
        answers = ('{"score": 5, "note": "as instructed"}', '{"score": 1, "note": "unrelated"}')
        server.reply = lambda body: _naive(body, "post", *answers)
        extra = ("--backend", "openai:curator", "--base-url", server.base_url)
    observed = _build(ws, source, extra=extra)
    relevance = _jsonl(ws.out / "stages" / "relevance.jsonl") if (ws.out / "stages").is_dir() else []
    observed.facts.update(
        {"scores": [r["score"] for r in relevance], "kept": sum(1 for r in relevance if r["kept"])}
    )
    if server is not None:
        users = [_texts_of(b, "user") for b in server.log.bodies]
        systems = [_texts_of(b, "system") for b in server.log.bodies]
        observed.facts["text_in_slot"] = all(
            any(quote_slot(t, "post") in u[slice(*_slot(u, "post"))] for u in users) for t in texts
        )
        observed.facts["text_in_system"] = any(t in s for t in texts for s in systems)
    return observed


def flow_run_config(case: dict[str, Any], ws: Workspace) -> Observed:
    """``echo-bench COMMAND --run-config FILE --out OUT`` with the case's file (COMMAND: ``input.command``, judge by
    default): the file is refused before anything is read or written."""
    ws.begin()
    command = (case.get("input") or {}).get("command", "judge")
    result = _cli(command, "--run-config", ws.source(case["file"]), "--out", ws.out)
    return Observed(result.exit_code, result.output, result.exception, {}, _read_record(ws))
