"""Byte-identity of build outputs: a fresh demo build and a rules build on the shared data against golden listings.

The listings in ``tests/data/golden/`` hold the sha256 of every file the build writes, recorded with the code from
before the pipeline iterated declared stages (issue 15): the refactor, and any later change, must not change one
byte of a build's output unless the golden listing is regenerated on purpose (``ECHO_REGEN_GOLDEN=1``) and the
change is explained in the commit.

Normalised, because they legitimately differ between two runs of the same code:

- the pseudonym salt is random per build: the tests fix it (``secrets.token_hex`` of the pseudonym module), so the
  salt file and every pseudonymised parquet row are reproducible;
- absolute paths of the output folder and of the shared data are replaced by ``<OUT>`` and ``<DATA>`` in text
  files (build.json, report.json, summary.json, media/index.jsonl);
- ``wall_time_s`` values (``run_stats.json``, the demo's ``summary.json``) are set to 0, keys kept;
- ``media/index.jsonl`` lines are sorted (images are stored concurrently, in completion order);
- a parquet file's bytes name the writing pyarrow version: when the installed pyarrow is not the one that recorded
  the listing, a parquet file is compared by its content (schema with its metadata, and every row) instead.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from click.testing import CliRunner

GOLDEN = Path(__file__).parent / "data" / "golden"
FIXED_SALT_BYTE = "5a"
REGEN = os.environ.get("ECHO_REGEN_GOLDEN") == "1"


def _fixed_salt(monkeypatch: pytest.MonkeyPatch) -> None:
    from echo_dataset import pseudonym

    monkeypatch.setattr(pseudonym, "secrets", SimpleNamespace(token_hex=lambda n: FIXED_SALT_BYTE * n))


def _zero_wall_times(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: (_zeroed(v) if k == "wall_time_s" else _zero_wall_times(v)) for k, v in value.items()}
    if isinstance(value, list):
        return [_zero_wall_times(v) for v in value]
    return value


def _zeroed(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _zeroed(v) for k, v in value.items()}
    return 0 if isinstance(value, (int, float)) else value


def _normalised(path: Path, rel: str, replacements: list[tuple[str, str]]) -> bytes:
    data = path.read_bytes()
    if path.suffix in {".parquet", ".png", ".jpg", ".jpeg", ".webp", ".gif", ".sqlite"}:
        return data
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return data
    for old, new in replacements:
        text = text.replace(old, new)
    if rel.endswith("index.jsonl") and "media" in rel:
        text = "".join(sorted(text.splitlines(keepends=True)))
    if path.suffix == ".json" and "wall_time_s" in text:
        parsed = json.loads(text)
        text = json.dumps(_zero_wall_times(parsed), indent=2, ensure_ascii=False, sort_keys=True) + "\n"
    return text.encode("utf-8")


def _parquet_content(path: Path) -> str:
    """sha256 of a parquet file's schema (with its metadata) and rows, independent of the writer's version."""
    import pyarrow.parquet as pq

    table = pq.read_table(path)
    digest = hashlib.sha256()
    digest.update(str(table.schema).encode())
    for key, value in sorted((table.schema.metadata or {}).items()):
        digest.update(key + b"=" + value)

    def default(value: Any) -> Any:
        if isinstance(value, bytes):
            return hashlib.sha256(value).hexdigest()
        return str(value)

    for row in table.to_pylist():
        digest.update(json.dumps(row, sort_keys=True, default=default).encode())
    return digest.hexdigest()


def listing(root: Path, replacements: list[tuple[str, str]]) -> dict[str, Any]:
    """Every file below ``root`` (hidden ones too) -> sha256 of its normalised bytes; parquet content hashes."""
    import pyarrow

    files: dict[str, str] = {}
    parquet: dict[str, str] = {}
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        rel = path.relative_to(root).as_posix()
        files[rel] = hashlib.sha256(_normalised(path, rel, replacements)).hexdigest()
        if path.suffix == ".parquet":
            parquet[rel] = _parquet_content(path)
    return {"pyarrow": pyarrow.__version__, "files": files, "parquet_content": parquet}


def _compare(name: str, got: dict[str, Any]) -> None:
    golden_file = GOLDEN / f"{name}.json"
    if REGEN:
        GOLDEN.mkdir(parents=True, exist_ok=True)
        golden_file.write_text(json.dumps(got, indent=2, sort_keys=True) + "\n", encoding="utf-8")
        pytest.skip(f"regenerated {golden_file}")
    want = json.loads(golden_file.read_text(encoding="utf-8"))
    assert sorted(got["files"]) == sorted(want["files"]), "the build writes other files than before"
    same_writer = got["pyarrow"] == want["pyarrow"]
    differing = []
    for rel, sha in want["files"].items():
        if rel.endswith(".parquet") and not same_writer:
            if got["parquet_content"][rel] != want["parquet_content"][rel]:
                differing.append(rel)
        elif got["files"][rel] != sha:
            differing.append(rel)
    assert differing == [], f"files differ from the golden listing {golden_file.name}: {differing}"


def test_demo_build_is_byte_identical_to_the_golden_listing(tmp_path, monkeypatch):
    from echo_builder.demo import run_demo

    _fixed_salt(monkeypatch)
    out = tmp_path / "demo"
    run_demo(out, progress=False)
    got = listing(out, [(str(out), "<OUT>")])
    # what the listing covers: the dataset, the stage files, the report and the metrics
    assert "benchmark/report.json" in got["files"] and "benchmark/stages/applicability.jsonl" in got["files"]
    assert len(got["files"]) == 63
    _compare("demo_build", got)


def test_rules_build_on_shared_data_is_byte_identical_to_the_golden_listing(
    shared_data, tmp_path, monkeypatch
):
    from echo_builder.cli import cli

    _fixed_salt(monkeypatch)
    out = tmp_path / "build"
    result = CliRunner().invoke(
        cli,
        [
            "build",
            str(shared_data / "prompt_collections" / "awesome-gpt4o-images"),
            str(shared_data / "x_graphql"),
            "--backend",
            "rules",
            "--target-model",
            "GPT-4o",
            "--out",
            str(out),
        ],
        catch_exceptions=False,
    )
    assert result.exit_code == 0, result.output
    # the shared data's folder as the build may write it: as given, normalised (abspath) or resolved (symlinks)
    data_forms = sorted({str(shared_data), os.path.abspath(shared_data), str(shared_data.resolve())}, key=len)
    got = listing(out, [(str(out), "<OUT>")] + [(form, "<DATA>") for form in reversed(data_forms)])
    assert len(got["files"]) == 30
    assert re.fullmatch(r"[0-9a-f]{64}", got["files"]["report.json"])
    _compare("shared_rules_build", got)
