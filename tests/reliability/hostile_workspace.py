"""The hostile corpus's workspace: where a case's inputs go, the only folder a run may write, the snapshot that
proves nothing else changed, and the helpers every flow uses (driven by ``test_hostile.py``)."""

from __future__ import annotations

import hashlib
import io
import json
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from click.testing import CliRunner
from PIL import Image

from echo_builder.cli import cli

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
