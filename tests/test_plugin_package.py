"""Issue 15's acceptance check: one throwaway plugin package, really pip-installed, adds a metric, a source format,
a backend, a generator and a curation stage without a line of echo-bench changing.

The package is assembled from the examples of ``docs/extending.md`` (the ``brightness_shift`` metric with its
``evaluate`` module, the ``mastodon`` source, the ``flat`` generator, the ``prompt_words`` stage) plus a small
``canned`` backend (the documented llama.cpp backend needs llama-cpp-python). ``pip install --no-deps --target``
builds it with setuptools and writes its ``entry_points.txt`` as for any user; every check then runs
``echo-bench`` in a fresh process with that folder on ``PYTHONPATH``, as a user's shell would:

- ``echo-bench plugins`` lists all five entries with the distribution as their origin, no problems;
- ``build`` auto-detects the mastodon export, runs the plugin stage between extract and media and reports it;
- ``backends ping canned:...`` answers through the same caller as a run;
- ``generate --model flat:...`` writes images, and ``metrics --metric brightness_shift`` scores them (its option
  shows in ``metrics --help``), with the value the BT.601 definition gives;
- the metric's ``evaluate`` module loads from ``echo_builder.metrics.path`` and agrees; the Space playground
  shows the metric.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
from PIL import Image

from tests.conftest import REPO_ROOT
from tests.helpers.benchmark import make_benchmark

pytestmark = pytest.mark.slow

EXTENDING = REPO_ROOT / "docs" / "extending.md"
GREY = (100, 100, 100)
#: |BT.601 luma of pure red - that of the grey input|: what brightness_shift must report for flat:red outputs.
RED_MINUS_GREY = abs(0.299 * 255 - 100.0)

CANNED_BACKEND = '''
"""canned:<text>: answers every prompt with <text> (a test backend)."""

from echo_builder.backends import Backend, Reply


class CannedBackend(Backend):
    name = "canned"
    description = "answers every prompt with the text after the colon"
    needs_target = True

    async def agenerate(self, messages, params):
        return Reply(text=self.target, backend_id=self.backend_id, model_snapshot="canned-1")
'''

ENTRY_POINTS = """
[project.entry-points."echo_bench.sources"]
mastodon = "echo_brightness.mastodon_source:MastodonSource"

[project.entry-points."echo_bench.backends"]
canned = "echo_brightness.canned:CannedBackend"

[project.entry-points."echo_bench.generators"]
flat = "echo_brightness.flat:FlatGenerator"

[project.entry-points."echo_bench.stages"]
prompt_words = "echo_brightness.prompt_words:STAGE"
"""

STATUSES = [
    {
        "uri": f"https://social.example/users/ana/statuses/{i}",
        "url": f"https://social.example/@ana/{i}",
        "account": {"acct": "ana"},
        "created_at": "2025-06-12T10:00:00Z",
        "content": text,
        "media_attachments": [{"url": f"https://social.example/media/{i}.png", "type": "image"}]
        if i < 2
        else [],
    }
    for i, text in enumerate(
        [
            'Lumen-2 generated this image. Prompt: "a red fox in fresh snow at dawn, photo" and it nailed the fur',
            'Lumen-2 image test. Prompt: "a lighthouse on a cliff in a storm, oil painting" came out great',
            "had coffee this morning",
        ]
    )
]


def _doc_block(section: str, start: str) -> str:
    """The ```python block of docs/extending.md's ``section`` whose first line starts with ``start``."""
    text = EXTENDING.read_text(encoding="utf-8")
    body = text[text.index(f"## {section}\n") :]
    body = body[: body.find("\n## ", 4)] if "\n## " in body[4:] else body
    blocks = re.findall(r"^```python\n(.*?)^```", body, re.M | re.S)
    (block,) = [b for b in blocks if b.startswith(start)]
    return block


def _doc_files(section: str) -> dict[str, str]:
    text = EXTENDING.read_text(encoding="utf-8")
    start = text.index(f"## {section}\n")
    body = text[start : text.find("\n## ", start + 4)]
    return {
        m.group(1): m.group(2)
        for m in re.finditer(r"^File `([^`]+)`[^\n]*\n+```\w*\n(.*?)^```", body, re.M | re.S)
    }


def _write_package(root: Path) -> Path:
    files = {p: c for p, c in _doc_files("A metric").items() if not p.startswith("echo_builder/")}
    files["pyproject.toml"] += ENTRY_POINTS
    files["echo_brightness/mastodon_source.py"] = _doc_block("A source format", '"""Mastodon')
    files["echo_brightness/flat.py"] = _doc_block("A generator", '"""flat:')
    files["echo_brightness/prompt_words.py"] = _doc_block("A curation stage", "# echo_prompt_words.py")
    files["echo_brightness/canned.py"] = CANNED_BACKEND
    for rel, content in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(content, encoding="utf-8")
    return root


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    """The package pip-installed (no index, no build isolation: offline) into a folder of its own."""
    tmp = tmp_path_factory.mktemp("plugin_package")
    package = _write_package(tmp / "echo-brightness")
    target = tmp / "site"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--quiet",
            "--no-deps",
            "--no-index",
            "--no-build-isolation",
            "--target",
            str(target),
            str(package),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PIP_NO_INPUT": "1", "PIP_DISABLE_PIP_VERSION_CHECK": "1"},
        cwd=tmp,
    )
    assert done.returncode == 0, done.stderr
    (info,) = target.glob("echo_brightness-0.1.0.dist-info")
    assert "prompt_words = echo_brightness.prompt_words:STAGE" in (info / "entry_points.txt").read_text()
    return target


def _env(site: Path) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), str(REPO_ROOT)])}


def _echo_bench(site: Path, *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "echo_builder.cli", *args],
        capture_output=True,
        text=True,
        env=_env(site),
        cwd=cwd,
        timeout=300,
    )


def _python(site: Path, code: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=_env(site), cwd=cwd, timeout=300
    )


def test_plugins_lists_every_kind_from_the_installed_package(site, tmp_path):
    listed = _echo_bench(site, "plugins", "--format", "json", cwd=tmp_path)
    assert listed.returncode == 0, listed.stderr
    data = json.loads(listed.stdout)
    mine = {
        (entry["kind"], entry["name"]): entry
        for entry in data["entries"]
        if entry["origin"] == "echo-brightness 0.1.0"
    }
    assert set(mine) == {
        ("metric", "brightness_shift"),
        ("source", "mastodon"),
        ("backend", "canned"),
        ("generator", "flat"),
        ("stage", "prompt_words"),
    }
    metric = mine["metric", "brightness_shift"]
    assert metric["target"] == "echo_brightness:METRIC"
    assert metric["fields"]["spec"]["higher_is_better"] is False and metric["fields"]["spec"]["low"] == 0.0
    assert mine["backend", "canned"]["target"] == "echo_brightness.canned:CannedBackend"
    assert data["problems"] == []
    assert "WARNING" not in listed.stderr


def test_build_detects_the_plugin_source_and_runs_the_plugin_stage(site, tmp_path):
    export = tmp_path / "toots.json"
    export.write_text(json.dumps(STATUSES), encoding="utf-8")
    out = tmp_path / "build"
    done = _echo_bench(
        site,
        "build",
        str(export),
        "--backend",
        "rules",
        "--target-model",
        "Lumen-2",
        "--launch-date",
        "2025-06-10",
        "--offline",
        "--out",
        str(out),
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr
    collected = [json.loads(line) for line in (out / "stages" / "collect.jsonl").read_text().splitlines()]
    assert [p["id"] for p in collected] == [f"web:{s['uri']}" for s in STATUSES]
    assert collected[0]["text"] == STATUSES[0]["content"] and collected[0]["author"] == "ana"

    report = json.loads((out / "report.json").read_text())
    names = [stage["name"] for stage in report["stages"]]
    assert names.index("prompt_words") == names.index("extract") + 1
    entry = next(stage for stage in report["stages"] if stage["name"] == "prompt_words")
    extract = next(stage for stage in report["stages"] if stage["name"] == "extract")
    rows = [json.loads(line) for line in (out / "stages" / "prompt_words.jsonl").read_text().splitlines()]
    assert entry["in"] == entry["out"] == extract["out"] == len(rows) >= 1
    assert entry["longest_prompt_words"] == max((r["words"] for r in rows), default=0)
    assert report["versions"]["plugin_stages"] == {
        "prompt_words": {"version": "prompt-words-v1", "origin": "echo-brightness 0.1.0"}
    }

    skipped = _echo_bench(
        site,
        "build",
        str(export),
        "--backend",
        "rules",
        "--target-model",
        "Lumen-2",
        "--offline",
        "--skip-stage",
        "prompt_words",
        "--out",
        str(tmp_path / "skipped"),
        cwd=tmp_path,
    )
    assert skipped.returncode == 0, skipped.stderr
    skipped_report = json.loads((tmp_path / "skipped" / "report.json").read_text())
    assert "prompt_words" not in [stage["name"] for stage in skipped_report["stages"]]


def test_the_plugin_backend_answers_a_ping(site, tmp_path):
    ping = _echo_bench(site, "backends", "ping", "canned:hello there", cwd=tmp_path)
    assert ping.returncode == 0, ping.stderr
    assert "reply:     'hello there'" in ping.stdout and "snapshot:  canned-1" in ping.stdout
    listed = _echo_bench(site, "backends", "list", cwd=tmp_path)
    row = next(line for line in listed.stdout.splitlines() if line.startswith("canned"))
    assert row.split()[1:3] == ["echo-brightness", "0.1.0"]


def test_plugin_generator_outputs_scored_by_the_plugin_metric(site, tmp_path):
    bench = make_benchmark(
        tmp_path / "bench",
        "image_to_image",
        [
            {"id": "a", "prompt": "make it red", "inputs": [Image.new("RGB", (16, 16), GREY)]},
            {"id": "b", "prompt": "a poster with no input"},
        ],
    )
    outputs = tmp_path / "outputs"
    made = _echo_bench(
        site,
        "generate",
        "--benchmark",
        str(bench),
        "--config",
        "image_to_image",
        "--model",
        "flat:red",
        "--name",
        "flat-red",
        "--out",
        str(outputs),
        "-o",
        "size=32",
        cwd=tmp_path,
    )
    assert made.returncode == 0, made.stderr
    with Image.open(outputs / "flat-red" / "a.png") as image:
        assert image.size == (32, 32) and image.getpixel((0, 0)) == (255, 0, 0)

    helped = _echo_bench(site, "metrics", "--help", cwd=tmp_path)
    assert "brightness_shift" in helped.stdout and "echo-brightness 0.1.0" in helped.stdout

    scored = _echo_bench(
        site,
        "metrics",
        "--benchmark",
        str(bench),
        "--config",
        "image_to_image",
        "--outputs",
        str(outputs),
        "--metric",
        "brightness_shift",
        "--format",
        "csv",
        "--out",
        str(tmp_path / "scores"),
        cwd=tmp_path,
    )
    assert scored.returncode == 0, scored.stderr
    rows = pd.read_csv(tmp_path / "scores" / "metrics.csv").set_index("sample_id")
    assert rows.loc["a", "value"] == pytest.approx(RED_MINUS_GREY, abs=1e-9)
    assert rows.loc["b", "nan_reason"] == "not applicable: the sample has no input images"


def test_the_evaluate_module_and_the_space_playground_see_the_plugin_metric(site, tmp_path):
    code = f"""
import json, sys
import evaluate
from PIL import Image
import echo_builder.metrics
folder = echo_builder.metrics.path("brightness_shift")
module = evaluate.load(folder)
result = module.compute(predictions=[Image.new("RGB", (8, 8), (255, 0, 0))], references=[[Image.new("RGB", (8, 8), {GREY})]])
sys.path.insert(0, {str(REPO_ROOT / "spaces_app")!r})
from echo_space.playground import score_pair
table = score_pair(Image.new("RGB", (8, 8), {GREY}), Image.new("RGB", (8, 8), (90, 90, 90)), face_backend=None).table
row = table.set_index("metric").loc["brightness_shift"]
print(json.dumps({{"folder": folder, "value": result["brightness_shift"], "space": float(row["value"]),
                  "better": row["better"]}}))
"""
    done = _python(site, code, tmp_path)
    assert done.returncode == 0, done.stderr
    got = json.loads(done.stdout.splitlines()[-1])
    assert Path(got["folder"]) == site / "echo_brightness" / "brightness_shift"
    assert got["value"] == pytest.approx(RED_MINUS_GREY, abs=1e-9)
    assert got["space"] == pytest.approx(10.0, abs=1e-6) and got["better"] == "lower"
