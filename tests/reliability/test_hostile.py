"""The hostile-input corpus (``tests/data/hostile/cases.yaml`` and ``cases.d/*.yaml``) driven through the real entry points.

One parametrized test per case: the case's input goes through its flow (mostly the ``echo-bench`` CLI through
click's runner, against the loopback VLM where a model is needed), the outcome is checked against the manifest (a
clear error, a recorded failure, or a correct result with its facts), and nothing may be written outside the
case's output folder: the test's temporary tree (inputs included), its parent folder, the working directory and
the marker file a YAML tag would have created are compared before and after.
"""

from __future__ import annotations

import base64
import hashlib
import io
import json
import math
import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner
from PIL import Image

from echo_builder.cli import cli
from tests.helpers.benchmark import make_benchmark, png_bytes

HOSTILE = Path(__file__).resolve().parents[1] / "data" / "hostile"
# cases.yaml plus one file per hardening area in cases.d/ (same fields), so areas grow without touching each other
CASES = [
    case
    for manifest in [HOSTILE / "cases.yaml", *sorted((HOSTILE / "cases.d").glob("*.yaml"))]
    for case in yaml.safe_load(manifest.read_text(encoding="utf-8"))["cases"]
]
PWNED = Path(
    "/tmp/echo-bench-pwned"
)  # what the !!python/object/apply case would create under an unsafe loader
GREY = (128, 128, 128)


# ------------------------------------------------------------------------------------------------ the workspace
@dataclass
class Workspace:
    """``root/in`` holds the case's inputs, ``root/out`` is the only folder a run may write, ``root/cwd`` is the
    working directory during the run (a relative path escaping would land there)."""

    root: Path
    generated: Callable[[str], Path]
    server: Callable[[], Any]
    inputs: Path = field(init=False)
    out: Path = field(init=False)
    before: dict[str, Any] | None = None

    def __post_init__(self) -> None:
        self.inputs = self.root / "in"
        self.out = self.root / "out"
        self.inputs.mkdir()
        (self.root / "cwd").mkdir()

    def begin(self) -> None:
        """Inputs are in place: take the snapshot that the end of the run is compared with."""
        self.before = _snapshot(self)

    def source(self, name: str) -> Path:
        """A corpus file: committed (under tests/data/hostile) or ``generated/<name>`` (made on first use)."""
        if name.startswith("generated/"):
            return self.generated(name.removeprefix("generated/"))
        return HOSTILE / name


@dataclass
class Observed:
    exit_code: int | None
    output: str
    exception: BaseException | None
    facts: dict[str, Any]
    record: Callable[[str], str]


def _snapshot(ws: Workspace) -> dict[str, Any]:
    """Every path under the test's folder but the output folder (files with their content hash), the parent's
    entries, and the marker file of the YAML-tag case."""
    entries: dict[str, str] = {}
    for path in sorted(ws.root.rglob("*")):
        if path == ws.out or path.is_relative_to(ws.out):
            continue
        if path.is_symlink():
            entries[path.relative_to(ws.root).as_posix()] = f"link:{os.readlink(path)}"
        elif path.is_dir():
            entries[path.relative_to(ws.root).as_posix()] = "dir"
        else:
            entries[path.relative_to(ws.root).as_posix()] = hashlib.sha256(path.read_bytes()).hexdigest()
    return {"tree": entries, "parent": sorted(os.listdir(ws.root.parent)), "pwned": PWNED.exists()}


def _cli(*args: str) -> Any:
    return CliRunner().invoke(cli, [str(a) for a in args])


def _read_record(ws: Workspace) -> Callable[[str], str]:
    def read(where: str) -> str:
        path = ws.out / where
        if path.suffix == ".parquet":  # as JSON text, image bytes shown by their length
            import pyarrow.parquet as pq

            rows = pq.read_table(path).to_pylist()
            return json.dumps(rows, ensure_ascii=False, default=lambda b: f"<{len(b)} bytes>")
        return path.read_text(encoding="utf-8")

    return read


def _dataset_rows(out: Path) -> list[dict[str, Any]]:
    import pyarrow.parquet as pq

    return [row for f in sorted(out.glob("*/test-*.parquet")) for row in pq.read_table(f).to_pylist()]


def _embedded(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [
        img for r in rows for col in ("input_images", "output_images") for img in r[col] if img is not None
    ]


def _jsonl(path: Path) -> list[dict[str, Any]]:
    # split on newlines only: JSON text may hold U+2028 and other characters str.splitlines() breaks at
    return [json.loads(line) for line in path.read_text(encoding="utf-8").split("\n") if line.strip()]


def _build_facts(out: Path) -> dict[str, Any]:
    if not (out / "report.json").is_file():
        return {}
    stages = {s["name"]: s for s in json.loads((out / "report.json").read_text())["stages"]}
    rows = _dataset_rows(out)
    media = _jsonl(out / "stages" / "media.jsonl")
    refs = [r for s in media for r in (*s["input_images"], *s["output_images"])]
    facts = {
        "posts": stages["collect"]["out"],
        "samples": stages["extract"]["out"],
        "self_replies": stages["threads"]["self_replies"],
        "cycles_broken": stages["threads"]["cycles_broken"],
        "embedded_images": len(_embedded(rows)),
        "media_paths_kept": sum(1 for r in refs if r["path"] is not None and r["sha256"] is None),
        "dataset_prompts": sorted(r["prompt"] for r in rows),
    }
    stored = [r for r in refs if r["sha256"]]
    if stored:
        facts["stored_ext"] = stored[0]["path"].rsplit(".", 1)[-1]
    images = _embedded(rows)
    if images:
        facts["image_size"] = list(Image.open(io.BytesIO(images[0]["bytes"])).size)
    return facts


def _build(ws: Workspace, *sources: Path, extra: tuple[str, ...] = ()) -> Observed:
    ws.begin()
    result = _cli("build", *sources, "--out", ws.out, "--target-model", "GPT-4o", "--offline", *extra)
    return Observed(result.exit_code, result.output, result.exception, _build_facts(ws.out), _read_record(ws))


# ------------------------------------------------------------------------------------------------------ flows
def flow_build(case: dict[str, Any], ws: Workspace) -> Observed:
    return _build(ws, ws.source(case["file"]))


def flow_sources(case: dict[str, Any], ws: Workspace) -> Observed:
    from echo_builder.sources import read_posts

    ws.begin()
    report = read_posts([ws.source(case["file"])], keep_raw=False)
    facts = {
        "posts": len(report.posts),
        "text_length": len(report.posts[0].text) if report.posts else None,
        "problems": len(report.problems),
    }
    text = "\n".join(str(p) for p in report.problems)
    return Observed(0, "", None, facts, lambda where: text)


def _collection(ws: Workspace, cases: list[Path]) -> Path:
    folder = ws.inputs / "hostile-collection"
    for n, case in enumerate(cases, start=1):
        shutil.copytree(case, folder / "cases" / str(n))
    return folder


def flow_collection(case: dict[str, Any], ws: Workspace) -> Observed:
    folder = _collection(ws, [HOSTILE / "collection" / "good", ws.source(case["file"])])
    link = (case.get("input") or {}).get("symlink")
    if link:  # a valid image outside the collection, reached through a link inside a case folder
        outside = ws.inputs / "outside.png"
        outside.write_bytes(png_bytes(Image.new("RGB", (8, 8), (10, 200, 10))))
        (folder / "cases" / "2" / link).symlink_to(outside)
    return _build(ws, folder)


def flow_special_source(case: dict[str, Any], ws: Workspace) -> Observed:
    """``build`` on a source that is not a regular file, given beside the good export ``file``: ``input.kind`` is
    ``fifo`` (a named pipe), ``dev_zero``, ``dev_zero_link`` (a link to it), ``fifo_in_folder`` (a folder holding
    the good export and a pipe named ``.json``) or ``oversize`` (``file`` read under a 300-byte size cap beside a
    small good file). Pipes and links live in a folder of their own outside the snapshot (reading a pipe to hash
    it would block the check itself)."""
    import tempfile

    from echo_builder.sources import reader

    kind = case["input"]["kind"]
    good = ws.source(case["file"])
    with tempfile.TemporaryDirectory(prefix="echo-special-") as special:
        place = Path(special)
        cap = reader.MAX_FILE_BYTES
        if kind == "fifo":
            os.mkfifo(place / "pipe.ndjson")
            sources = [place / "pipe.ndjson", good]
        elif kind == "dev_zero":
            sources = [Path("/dev/zero"), good]
        elif kind == "dev_zero_link":
            (place / "zero.json").symlink_to("/dev/zero")
            sources = [place / "zero.json", good]
        elif kind == "fifo_in_folder":
            shutil.copy(good, place / good.name)
            os.mkfifo(place / "pipe.json")
            sources = [place]
        else:
            assert kind == "oversize", kind
            small = place / "small.jsonl"
            small.write_text(
                '{"id": "x:7", "platform": "x", "text": "Tried GPT-4o, a small file"}\n', encoding="utf-8"
            )
            sources = [good, small]
            reader.MAX_FILE_BYTES = 300
        try:
            return _build(ws, *sources)
        finally:
            reader.MAX_FILE_BYTES = cap


def flow_media(case: dict[str, Any], ws: Workspace) -> Observed:
    image = ws.source(case["file"])
    folder = _collection(ws, [HOSTILE / "collection" / "good"])
    shutil.copyfile(image, folder / "cases" / "1" / f"example{image.suffix}")
    with open(folder / "cases" / "1" / "case.yml", "a", encoding="utf-8") as f:
        f.write(f"image: example{image.suffix}\n")
    return _build(ws, folder)


def flow_media_url(case: dict[str, Any], ws: Workspace) -> Observed:
    """A JSON Lines export of two posts: one whose image URL is ``input.url`` (or a loopback URL answering 302
    with ``input.redirect`` as its Location), one with a good image on the same loopback server. Built without
    --offline with ``--media-allow`` ``input.allow`` (default 127.0.0.1), then again with --resume; ``{server}``
    in a URL is the server's base URL."""
    from tests.helpers.media_server import MediaServer, Reply

    spec = case["input"]
    with MediaServer() as server:
        base = server.url("")
        image = png_bytes(Image.new("RGB", (16, 12), (200, 40, 40)))
        good = server.route("/good.png", Reply(body=image))
        server.route("/space%20and%C3%A9.png", Reply(body=image))  # a path that must be percent-encoded
        if "redirect" in spec:
            headers = {"Location": spec["redirect"].replace("{server}", base)}
            hostile = server.route("/hop.png", Reply(302, content_type=None, headers=headers))
        else:
            hostile = spec["url"].replace("{server}", base)
        posts = ws.inputs / "posts.jsonl"
        with open(posts, "w", encoding="utf-8") as f:
            for n, (url, subject) in enumerate(
                [(hostile, "a glass whale"), (good, "a paper lantern")], start=1
            ):
                status = f"19800000000000000{n}"
                post = {
                    "id": f"x:{status}", "platform": "x", "url": f"https://x.com/someone/status/{status}",
                    "author": "someone", "created_at": "2025-04-04T10:00:00Z", "root_id": f"x:{status}",
                    "text": f"GPT-4o image generation. Prompt: {subject} in a library",
                    "media": [{"type": "photo", "url": url}],
                }  # fmt: skip
                f.write(json.dumps(post) + "\n")
        entries = [e.replace("{port}", str(server.port)) for e in spec.get("allow", ["127.0.0.1"])]
        allow = [arg for entry in entries for arg in ("--media-allow", entry)]
        ws.begin()
        args = ("build", posts, "--out", ws.out, "--target-model", "GPT-4o", *allow)
        first = _cli(*args)
        again = _cli(*args, "--resume") if first.exit_code == 0 else first
    facts = {"resume_exit_code": again.exit_code, "good_image_hits": server.hits["/good.png"]}
    exception = first.exception if first.exception is not None else again.exception
    output = first.output + ("" if again is first else again.output)
    return Observed(first.exit_code, output, exception, {**_build_facts(ws.out), **facts}, _read_record(ws))


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


def flow_dataset(case: dict[str, Any], ws: Workspace) -> Observed:
    from echo_dataset.writer import write_hub_folder

    media_root = ws.inputs / "media"
    media_root.mkdir()
    (media_root / "ok.png").write_bytes(png_bytes(Image.new("RGB", (4, 4), (1, 2, 3))))
    # a valid image right outside the media root, so a path climbing out of it would find something to embed
    (ws.inputs / "outside.png").write_bytes(png_bytes(Image.new("RGB", (4, 4), (9, 9, 9))))
    ws.begin()
    rows = [
        {"id": "good", "prompt": "p", "output_images": ["ok.png"], "output_image_urls": ["https://a/ok.png"]},
        {
            "id": "hostile",
            "prompt": "p",
            "output_images": [case["input"]["path"]],
            "output_image_urls": [None],
        },
    ]
    write_hub_folder(
        {"text_to_image": rows}, ws.out, media_root=media_root, card_context={}, pseudonymize=False
    )
    by_id = {r["id"]: r for r in _dataset_rows(ws.out)}
    assert by_id["good"]["output_images"][0]["bytes"] == (media_root / "ok.png").read_bytes()
    facts = {"embedded_images": len(_embedded([by_id["hostile"]]))}
    return Observed(0, "", None, facts, _read_record(ws))


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


def _leaked_identifiers(source: Path, out: Path) -> list[str]:
    """The input's account identifiers (authors' handles and ids, every DID in the file and its method-specific
    part) found in any file ``publish`` would upload from ``out``."""
    import re

    import pyarrow.parquet as pq

    from echo_builder.sources import read_posts
    from echo_dataset.publish import upload_patterns

    found = {v.lstrip("@") for p in read_posts([source]).posts for v in (p.author, p.author_id) if v}
    raw = source.read_text(encoding="utf-8", errors="replace").replace("%3A", ":")
    for did in re.findall(r"did:[a-z0-9]+:[A-Za-z0-9._-]+", raw):
        found |= {did, did.split(":", 2)[2]}
    texts = []
    for name in upload_patterns(out):
        path = out / name
        if path.suffix == ".parquet":
            texts.append(
                json.dumps(pq.read_table(path).drop_columns(["input_images", "output_images"]).to_pylist())
            )
        else:
            texts.append(path.read_text(encoding="utf-8"))
    text = "\n".join(texts)
    return sorted(
        i
        for i in found
        if len(i) >= 3 and re.search(rf"(?<![A-Za-z0-9]){re.escape(i)}(?![A-Za-z0-9])", text, re.I)
    )


def flow_privacy(case: dict[str, Any], ws: Workspace) -> Observed:
    """``build`` (as flow build), with ``input.salt`` (text), ``input.salt_hex`` (bytes) or ``input.salt_folder``
    given as ``--salt-file``; facts ``dataset_rows`` and ``leaked_identifiers`` (see :func:`_leaked_identifiers`)."""
    data = case.get("input") or {}
    extra: tuple[str, ...] = ()
    if {"salt", "salt_hex", "salt_folder"} & set(data):
        salt = ws.inputs / "salt.txt"
        if "salt" in data:
            salt.write_text(data["salt"], encoding="utf-8")
        elif "salt_hex" in data:
            salt.write_bytes(bytes.fromhex(data["salt_hex"]))
        else:
            salt.mkdir()
        extra = ("--salt-file", str(salt))
    source = ws.source(case["file"])
    observed = _build(ws, source, extra=extra)
    if (ws.out / "README.md").is_file():
        observed.facts["dataset_rows"] = len(_dataset_rows(ws.out))
        observed.facts["leaked_identifiers"] = _leaked_identifiers(source, ws.out)
    return observed


def flow_screenshot_reply(case: dict[str, Any], ws: Workspace) -> Observed:
    """The screenshots stage on a 1170 x 2532 phone screenshot (or ``input.screenshot``, a corpus file), the VLM
    (``input.spec``, optional ``input.box_format``) answering with FILE; the stage's samples, notes and failures
    are written to ``OUT/screenshots.json``."""
    from PIL import ImageDraw

    from echo_builder.backends import create_backend
    from echo_builder.backends.caller import ModelCaller, RetryPolicy
    from echo_builder.cache import CallCache
    from echo_builder.records import MediaRef, Sample
    from echo_builder.stages.templates_screenshots import run_screenshots

    options = case.get("input") or {}
    reply = ws.source(case["file"]).read_text(encoding="utf-8")
    store = ws.out / "media"
    if options.get("screenshot"):
        data = ws.source(options["screenshot"]).read_bytes()
    else:
        shot = Image.new("RGB", (1170, 2532), "white")
        ImageDraw.Draw(shot).rectangle((60, 1380, 1110, 2430), fill=(200, 40, 40))
        data = png_bytes(shot)
    sha = hashlib.sha256(data).hexdigest()
    (store / sha[:2]).mkdir(parents=True)
    (store / sha[:2] / f"{sha}.png").write_bytes(data)
    sample = Sample(
        id="echo-0000000000000001",
        prompt="",
        output_images=(MediaRef(url="https://e.com/s.png", sha256=sha, path=f"{sha[:2]}/{sha}.png"),),
        quality="Benchmark",
        is_screenshot=True,
    )
    server = ws.server()
    server.reply = lambda body: reply
    extra = {"box_format": options["box_format"]} if options.get("box_format") else {}
    backend = create_backend(options.get("spec", "openai:vlm"), base_url=server.base_url, **extra)
    caller = ModelCaller(backend, cache=CallCache(ws.out / "cache"), retry=RetryPolicy(max_attempts=1))
    ws.begin()
    result = run_screenshots([sample], caller=caller, store_root=store)
    [out] = result.samples
    record = {
        "samples": [out.model_dump(mode="json")],
        "notes": result.notes,
        "failures": [vars(f) for f in result.failures],
        "info": result.info,
    }
    (ws.out / "screenshots.json").write_text(json.dumps(record, indent=1), encoding="utf-8")
    facts = {
        "boxes": [[b.role, b.x1, b.y1, b.x2, b.y2] for b in out.input_bboxes],
        "prompt": out.prompt,
        "dropped": sum("dropped" in n for n in result.notes),
        "failures": len(result.failures),
        "box_format": result.info.get("box_format"),
    }
    return Observed(None, "", None, facts, _read_record(ws))


def flow_backend(case: dict[str, Any], ws: Workspace) -> Observed:
    """Model-backend cases (cases.d/backends.yaml): a command line ``input.args`` on a one-sample judge setup, with
    ``{BENCH}``, ``{OUTPUTS}``, ``{INPUTS}``, ``{OUT}``, ``{BASE_URL}`` and ``{KEY}`` filled in, against the
    loopback VLM answering ``input.reply`` (``{KEY}`` in it: the server echoes the key) or failing every request
    with ``input.fault``. Facts: ``calls`` the server got, ``key_in_files``/``key_in_output`` (the key anywhere
    under the output folder, decoded parquet and SQLite included / in the command's output and the logs)."""
    import logging
    import sqlite3

    from tests.helpers.openai_server import FaultPlan

    spec = case["input"]
    key = spec.get("key", "sk-hostile-backend-KEY-0123456789")
    server = ws.server()
    server.reply = lambda body: spec.get("reply", "[[7]]").replace("{KEY}", key)
    if spec.get("fault"):
        server.faults = FaultPlan(always=lambda body: True, always_kind=spec["fault"])
    if spec.get("server_key"):
        server.api_key = spec["server_key"]
    bench, outputs = _judge_setup(ws, "Make it warmer.", {"reference": {"s1.png": REFERENCE}})
    host_port = server.base_url.split("//", 1)[1].split("/", 1)[0]
    base_url = (
        spec.get("base_url", "http://{HOSTPORT}/v1").replace("{HOSTPORT}", host_port).replace("{KEY}", key)
    )
    fill = {
        "{BENCH}": bench,
        "{OUTPUTS}": outputs,
        "{INPUTS}": ws.inputs,
        "{OUT}": ws.out,
        "{BASE_URL}": base_url,
    }
    if "file" in case:
        fill["{FILE}"] = ws.source(case["file"])
    if "keywords" in spec:
        fill["{KEYWORDS}"] = ws.inputs / "keywords.txt"
        fill["{KEYWORDS}"].write_text(spec["keywords"], encoding="utf-8")
    args = [str(fill.get(a, a)).replace("{KEY}", key) for a in spec["args"]]
    records: list[logging.LogRecord] = []
    handler = logging.Handler(logging.DEBUG)
    handler.emit = records.append  # type: ignore[method-assign]
    root = logging.getLogger()
    previous = root.level
    root.addHandler(handler)
    root.setLevel(logging.DEBUG)
    ws.begin()
    try:
        result = _cli(*args)
    finally:
        root.removeHandler(handler)
        root.setLevel(previous)
    logged = result.output + "\n".join(r.getMessage() for r in records)
    written = []
    for path in (p for p in ws.out.rglob("*") if p.is_file()) if ws.out.exists() else ():
        written.append(path.read_bytes().decode("utf-8", "replace"))
        if path.suffix == ".parquet":
            written.append(_read_record(ws)(path.relative_to(ws.out).as_posix()))
        if path.name == "calls.sqlite":
            with sqlite3.connect(path) as conn:
                written.extend(str(row) for row in conn.execute("SELECT * FROM calls"))
    facts = {
        "calls": server.calls,
        "key_in_files": key in "\n".join(written),
        "key_in_output": key in logged,
    }
    if (ws.out / "report.json").is_file():  # a build: posts past the keyword query
        stages = {st["name"]: st for st in json.loads((ws.out / "report.json").read_text())["stages"]}
        facts["queried"] = stages["query"]["out"]
    return Observed(result.exit_code, result.output, result.exception, facts, _read_record(ws))


FLOWS: dict[str, Callable[[dict[str, Any], Workspace], Observed]] = {
    name.removeprefix("flow_"): fn for name, fn in globals().items() if name.startswith("flow_")
}


# ------------------------------------------------------------------------------------------------------ the test
@pytest.fixture(scope="module")
def generated(tmp_path_factory) -> Callable[[str], Path]:
    """Large and bomb cases, written once per module on first use by the corpus's own script."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("make_corpus", HOSTILE / "make_corpus.py")
    assert spec is not None and spec.loader is not None
    make_corpus = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(make_corpus)
    folder = tmp_path_factory.mktemp("hostile-generated")

    def get(name: str) -> Path:
        if not (folder / name).exists():
            make_corpus.write_large(folder, [name])
        return folder / name

    return get


def _same(expected: Any, measured: Any, tolerance: float) -> bool:
    if isinstance(expected, float) and isinstance(measured, float):
        if math.isnan(expected):
            return math.isnan(measured)
        return abs(expected - measured) <= tolerance
    return expected == measured


# a regression to a quadratic or cubic regex hangs inside C code, where the default signal timeout cannot interrupt
# it; the thread method ends the run with a stack dump instead of letting CI hang
@pytest.mark.timeout(120, method="thread")
@pytest.mark.parametrize("case", CASES, ids=[c["id"] for c in CASES])
def test_hostile_case(case, tmp_path, generated, request, monkeypatch):
    ws = Workspace(tmp_path, generated, lambda: request.getfixturevalue("openai_server"))
    if "file" in case:
        assert ws.source(case["file"]).exists(), f"corpus file {case['file']} is missing"
    monkeypatch.chdir(ws.root / "cwd")
    observed = FLOWS[case["flow"]](case, ws)
    assert ws.before is not None, "the flow did not take its snapshot"
    assert _snapshot(ws) == ws.before, "something was written outside the output folder"

    expect = case["expect"]
    output = observed.output
    assert "Traceback" not in output, output
    if expect["outcome"] == "error":
        assert observed.exit_code == 1, output
        assert isinstance(observed.exception, SystemExit), repr(observed.exception)
        assert output.startswith("error: ") and output.count("\n") == 1, output  # one clear line
        for fragment in expect["contains"]:
            assert fragment in output, f"{fragment!r} not in {output!r}"
        assert not (ws.out / "stages").exists() and not list(ws.out.glob("*/*.parquet"))  # nothing half-made
        return
    # a run that goes on: no exception other than the CLI's own exit
    assert observed.exception is None or isinstance(observed.exception, SystemExit), repr(observed.exception)
    if expect["outcome"] == "recorded_failure":
        record = observed.record(expect["where"])
        for fragment in expect["contains"]:
            assert fragment in record, f"{fragment!r} not recorded in {expect['where']}"
    else:
        assert expect["outcome"] == "correct", expect
    tolerance = float(expect.get("tolerance", 0.0))
    facts = {"exit_code": observed.exit_code, **observed.facts}
    for key, value in (expect.get("facts") or {}).items():
        assert key in facts, f"fact {key!r} was not measured; measured: {sorted(facts)}"
        assert _same(value, facts[key], tolerance), f"{key}: expected {value!r}, measured {facts[key]!r}"


def test_every_corpus_file_has_a_case():
    """The manifest and the folder agree: every committed input is exercised, every case names an existing input."""
    named = {c["file"].split("/")[0] + "/" + c["file"].split("/")[1] for c in CASES if "file" in c}
    on_disk = {
        p.relative_to(HOSTILE).as_posix()
        for sub in ("sources", "images", "injection")
        for p in (HOSTILE / sub).iterdir()
    } | {f"collection/{p.name}" for p in (HOSTILE / "collection").iterdir()}
    assert on_disk <= named | {"collection/good"}, sorted(on_disk - named)
    assert len({c["id"] for c in CASES}) == len(CASES)
    assert sum(p.stat().st_size for p in HOSTILE.rglob("*") if p.is_file()) < 1_000_000
