"""Hostile-corpus flows of curation: build from every source format, collections, special files, media URLs,
the dataset writer, privacy, screenshot boxes, backends and options, and the official-release import."""

from __future__ import annotations

import hashlib
import io
import json
import os
import shutil
from pathlib import Path
from typing import Any

from PIL import Image

from tests.helpers.benchmark import png_bytes
from tests.reliability.hostile_evaluation import REFERENCE, _judge_setup
from tests.reliability.hostile_workspace import (
    GREY,
    HOSTILE,
    Observed,
    Workspace,
    _build,
    _build_facts,
    _cli,
    _dataset_rows,
    _embedded,
    _read_record,
)


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

    from echo_builder.sources import loading

    kind = case["input"]["kind"]
    good = ws.source(case["file"])
    with tempfile.TemporaryDirectory(prefix="echo-special-") as special:
        place = Path(special)
        cap = loading.MAX_FILE_BYTES
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
            loading.MAX_FILE_BYTES = 300
        try:
            return _build(ws, *sources)
        finally:
            loading.MAX_FILE_BYTES = cap


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


def flow_release(case: dict[str, Any], ws: Workspace) -> Observed:
    """``echo-bench import echo2025`` of a release folder written from ``input``: ``rows`` (image_to_image rows,
    every cell a string or a list of strings, as in the authors' release), ``local`` (id -> colour of a local copy
    ``images/images_to_image/<id>/input_images/input_1.png``; ``"screenshot"`` draws a 200 x 100 one),
    a cell ``{repeat, times}`` is that text repeated; ``link_outside`` (ids whose local copy is a symlink to a file outside the images folder), ``assignments``
    (file text), ``out_is_source`` and ``options`` (extra CLI options)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    spec = case["input"]
    release, images = ws.inputs / "release", ws.inputs / "images"
    # a cell {repeat: TEXT, times: N} is TEXT repeated N times (deep nesting without a huge manifest)
    rows = [
        {k: v["repeat"] * v["times"] if isinstance(v, dict) else v for k, v in r.items()}
        for r in spec.get("rows", [])
    ]
    names = sorted({k for r in rows for k in r} | {"id"})
    lists = {"input_images", "output_images"}
    schema = pa.schema([(n, pa.list_(pa.string()) if n in lists else pa.string()) for n in names])
    (release / "image_to_image").mkdir(parents=True)
    table = pa.table({n: [r.get(n, [] if n in lists else None) for r in rows] for n in names}, schema=schema)
    pq.write_table(table, release / "image_to_image" / "test-00000-of-00001.parquet")
    for sample_id, colour in (spec.get("local") or {}).items():
        folder = images / "images_to_image" / sample_id / "input_images"
        folder.mkdir(parents=True, exist_ok=True)
        image = (
            Image.new("RGB", (200, 100), GREY)
            if colour == "screenshot"
            else Image.new("RGB", (32, 32), tuple(colour))
        )
        image.save(folder / "input_1.png")
    for sample_id in spec.get("link_outside", []):
        secret = ws.inputs / "secret.png"
        Image.new("RGB", (16, 16), (1, 2, 3)).save(secret)
        folder = images / "images_to_image" / sample_id / "input_images"
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "input_1.png").symlink_to(secret)
    images.mkdir(exist_ok=True)
    args = ["import", "echo2025", release, "--images", images, "--offline", *spec.get("options", [])]
    if "assignments" in spec:
        (ws.inputs / "assignments").mkdir()
        (ws.inputs / "assignments" / "a.json").write_text(spec["assignments"], encoding="utf-8")
        args += ["--assignments", ws.inputs / "assignments"]
    ws.begin()
    result = _cli(*args, "--out", release if spec.get("out_is_source") else ws.out)
    facts: dict[str, Any] = {}
    if (ws.out / "import.json").is_file():
        record = json.loads((ws.out / "import.json").read_text(encoding="utf-8"))
        written = _dataset_rows(ws.out)
        facts = {
            "rows": record["rows"].get("image_to_image", 0),
            "missing": sum(c.get("missing", 0) for c in record["images"].values()),
            "resolved": sum(c.get("resolved", 0) for c in record["images"].values()),
            "parse_problems": record["parse_problems"],
            "crops": record["crops"],
            "embedded_images": len(_embedded(written)),
            "feedback": {r["id"]: [f["feedback"] for f in r["community_feedback"]] for r in written},
        }
        shots = [r for r in written if r["is_screenshot"] and r["input_images"] and r["input_images"][0]]
        if shots:
            facts["crop_size"] = list(Image.open(io.BytesIO(shots[0]["input_images"][0]["bytes"])).size)
    return Observed(result.exit_code, result.output, result.exception, facts, _read_record(ws))


def flow_plugin_stage(case: dict[str, Any], ws: Workspace) -> Observed:
    """``build`` of the corpus's good collection case with FILE installed as a plugin module (a fake distribution
    ``echo-hostile``; ``input.entry_points``: entry-point name -> ``module:ATTR`` in group ``echo_bench.stages``,
    the module named after FILE's stem) and the extra options ``input.args``. Without FILE, only the options.
    Facts: ``stages`` (the report's stage names, ``None`` without a report) and ``error`` (the output's ``error:``
    line or ``None``); the ``where`` ``plugin_problems`` holds the reported problems of stage plugins."""
    from echo_builder.registry import plugin_problems
    from tests.helpers.fake_plugins import FakeSite

    spec = case.get("input") or {}
    site = FakeSite(ws.inputs / "site") if "file" in case else None
    try:
        if site is not None:
            source = ws.source(case["file"])
            site.install(
                "echo-hostile",
                {"echo_bench.stages": dict(spec.get("entry_points") or {})},
                {source.name.removesuffix(".py"): source.read_text(encoding="utf-8")},
            )
        folder = _collection(ws, [HOSTILE / "collection" / "good"])
        observed = _build(ws, folder, extra=tuple(spec.get("args") or ()))
        problems = "\n".join(str(p) for p in plugin_problems() if p.group == "echo_bench.stages")
    finally:
        if site is not None:
            site.close()
    report = ws.out / "report.json"
    errors = [line for line in observed.output.splitlines() if line.startswith("error:")]
    observed.facts.update(
        {
            "stages": [s["name"] for s in json.loads(report.read_text())["stages"]]
            if report.is_file()
            else None,
            "error": errors[0] if errors else None,
        }
    )
    record = observed.record
    observed.record = lambda where: problems if where == "plugin_problems" else record(where)  # type: ignore[method-assign]
    return observed
