"""Plugins that fail in ways the main plugin tests do not cover are reported, never fatal (issue 15).

A fake installed distribution (``badplugin-0.3.dist-info`` + its package, as ``pip install`` leaves them) declares:
a metric whose module calls ``sys.exit()`` while being imported, and a stage that runs ``after`` a stage that
does not exist. ``echo-bench plugins`` must still list everything else and exit 0, and report each broken plugin
once, under its entry point's own ``module:attribute``.
"""

from __future__ import annotations

import json
import sys
import textwrap
from types import MappingProxyType

import pytest
from click.testing import CliRunner

from echo_builder import registry
from echo_builder.cli import cli

EXITS = "import sys\nsys.exit(3)\n"

STAGES = """
from echo_builder.stages.registry import StageDefinition, StageOutput


def run(context):
    return StageOutput({"in": 0, "out": 0, "failures": 0})


ORPHAN = StageDefinition(
    name="orphan", version="orphan-1", run=run, after="no_such_stage", reads=(), writes=(), files=(),
    report_fields=(), skippable=True, description="runs after nothing",
)
"""

BUGGY = '''
from echo_builder.backends import Backend
from echo_builder.records import Post
from echo_builder.sources import SourceAdapter


class JunkSource(SourceAdapter):
    """Yields a string among its posts (a bug)."""

    name = "junkyield"

    def sniff(self, value):
        return isinstance(value, dict) and "junk_export" in value

    def parse_document(self, document, ctx):
        yield Post(id="web:1", platform="web", text="a fox")
        yield "not a post"
        yield Post(id="web:2", platform="web", text="a hare")


class StringBackend(Backend):
    """Answers a plain string instead of a Reply (a bug)."""

    name = "stringy"
    needs_target = True

    async def agenerate(self, messages, params):
        return "plain text"
'''

ENTRY_POINTS = """
[echo_bench.metrics]
exits_on_import = badplugin.exits:METRIC

[echo_bench.stages]
orphan = badplugin.stages:ORPHAN

[echo_bench.sources]
junkyield = badplugin.buggy:JunkSource

[echo_bench.backends]
stringy = badplugin.buggy:StringBackend
"""


@pytest.fixture
def bad_site(tmp_path, monkeypatch):
    site = tmp_path / "site"
    dist = site / "badplugin-0.3.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: badplugin\nVersion: 0.3\n", encoding="utf-8")
    (dist / "entry_points.txt").write_text(ENTRY_POINTS, encoding="utf-8")
    package = site / "badplugin"
    package.mkdir()
    (package / "__init__.py").write_text("", encoding="utf-8")
    (package / "exits.py").write_text(EXITS, encoding="utf-8")
    (package / "stages.py").write_text(textwrap.dedent(STAGES), encoding="utf-8")
    (package / "buggy.py").write_text(textwrap.dedent(BUGGY), encoding="utf-8")
    monkeypatch.syspath_prepend(str(site))
    registry.reload_plugins()
    yield site
    monkeypatch.undo()
    for name in [m for m in sys.modules if m == "badplugin" or m.startswith("badplugin.")]:
        del sys.modules[name]
    registry.reload_plugins()


def _problems() -> dict[str, registry.PluginProblem]:
    from echo_builder.stages.registry import stage_order

    stage_order()  # the stage checks that need every stage (``after``) run when the order is first computed
    return {p.name: p for p in registry.plugin_problems()}


def test_a_plugin_that_exits_while_imported_is_a_problem_not_an_exit(bad_site):
    from echo_builder.scoring.registry import metric_definitions

    problems = _problems()
    assert problems["exits_on_import"].reason == "SystemExit: 3"
    assert problems["exits_on_import"].distribution == "badplugin 0.3"
    assert "exits_on_import" not in [d.name for d in metric_definitions()]
    assert "color_shift" in [d.name for d in metric_definitions()]  # the rest keeps working


def test_a_stage_rejected_for_its_after_is_listed_only_as_a_problem_under_its_entry_point(bad_site):
    result = CliRunner().invoke(cli, ["plugins", "--format", "json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.output[result.output.index("{") :])
    assert "orphan" not in [e["name"] for e in data["entries"] if e["kind"] == "stage"]
    (orphan,) = [p for p in data["problems"] if p["name"] == "orphan"]
    assert orphan["value"] == "badplugin.stages:ORPHAN"  # the entry point, not the stage's run function
    assert orphan["reason"].startswith("after='no_such_stage' is not a registered stage")
    (exits,) = [p for p in data["problems"] if p["name"] == "exits_on_import"]
    assert exits["value"] == "badplugin.exits:METRIC" and exits["reason"] == "SystemExit: 3"
    assert len(data["problems"]) == 2


RAISING_STAGE = """
from echo_builder.stages.registry import StageDefinition


def run(context):
    raise RuntimeError("stage bug")


STAGE = StageDefinition(
    name="raiser", version="raiser-1", run=run, after="threads", reads=(), writes=(), files=(),
    report_fields=(), skippable=True, description="always raises",
)
"""


@pytest.fixture
def raising_stage_site(tmp_path, monkeypatch):
    site = tmp_path / "site"
    dist = site / "raiser-0.1.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: raiser\nVersion: 0.1\n", encoding="utf-8")
    (dist / "entry_points.txt").write_text(
        "[echo_bench.stages]\nraiser = raiser_stage:STAGE\n", encoding="utf-8"
    )
    (site / "raiser_stage.py").write_text(textwrap.dedent(RAISING_STAGE), encoding="utf-8")
    monkeypatch.syspath_prepend(str(site))
    registry.reload_plugins()
    yield site
    monkeypatch.undo()
    sys.modules.pop("raiser_stage", None)
    registry.reload_plugins()


def test_the_demo_runs_without_a_plugin_stage_that_raises_and_says_so(raising_stage_site, tmp_path):
    from echo_builder.demo import run_demo
    from echo_builder.pipeline import BuildConfig, build
    from echo_builder.stages.registry import StageError

    # a build stops at the plugin stage, naming it (the documented behaviour of build) ...
    (tmp_path / "posts").mkdir()
    (tmp_path / "posts" / "p.jsonl").write_text(
        json.dumps({"id": "x:1", "platform": "x", "text": "Lumen-2: a red fox in the snow"}) + "\n",
        encoding="utf-8",
    )
    with pytest.raises(StageError, match="plugin stage 'raiser'") as caught:
        build(
            BuildConfig(
                sources=[tmp_path / "posts"],
                out_dir=tmp_path / "b",
                backend="rules",
                target_model="Lumen-2",
                progress=False,
            )
        )
    assert caught.value.stage == "raiser"
    # ... while the demo, a showcase of the package, leaves the broken plugin stage out and says so
    summary = run_demo(tmp_path / "demo", progress=False)
    assert summary.configs == {"text_to_image": 2, "image_to_image": 3, "analysis": 1}
    assert [s["name"] for s in summary.stages if s["name"] == "raiser"] == []
    (note,) = [n for n in summary.notes if "raiser" in n]
    assert "RuntimeError: stage bug" in note and note.endswith("(the demo ran without it)")
    report = json.loads((tmp_path / "demo" / "benchmark" / "report.json").read_text(encoding="utf-8"))
    assert "raiser" not in [s["name"] for s in report["stages"]]


def test_a_generator_result_of_the_wrong_type_is_that_samples_error(tmp_path):
    """A plugin generator returning something else than GenerationResult for one request: that sample is an
    error in the manifest, the batch's good results are kept, and the run ends normally (no traceback)."""
    from PIL import Image

    from echo_builder.generate import GENERATORS, GenerationResult, Generator
    from echo_builder.generate.manifest import read_records
    from echo_builder.generate.run import run_generation
    from echo_builder.registry import Entry
    from tests.helpers.benchmark import make_benchmark

    class HalfBroken(Generator):
        name = "halfbroken"
        needs_target = False

        @property
        def batch_size(self) -> int:
            return 2

        def generate_batch(self, requests):
            return [
                GenerationResult("ok", Image.new("RGB", (8, 8), "red"))
                if r.prompt == "good"
                else "not a result"
                for r in requests
            ]

    GENERATORS.add(
        Entry("halfbroken", "", "test", None, "in-memory test", MappingProxyType({"needs_target": False})),
        HalfBroken,
    )
    try:
        bench = make_benchmark(
            tmp_path / "bench", "text_to_image", [{"id": "a", "prompt": "good"}, {"id": "b", "prompt": "bad"}]
        )
        run_generation(bench, "text_to_image", "halfbroken", "hb", tmp_path / "out", progress=False)
    finally:
        GENERATORS.remove("halfbroken")
    records = read_records(tmp_path / "out" / "hb")
    assert records["a"]["status"] == "ok" and (tmp_path / "out" / "hb" / "a.png").is_file()
    assert records["b"]["status"] == "error"
    assert records["b"]["message"] == "halfbroken returned str, not a GenerationResult"


def test_a_source_format_yielding_something_else_than_posts_loses_only_that_item(bad_site, tmp_path):
    from echo_builder.sources import read_posts

    export = tmp_path / "junk.json"
    export.write_text(json.dumps({"junk_export": True}), encoding="utf-8")
    report = read_posts(export)
    assert [p.id for p in report.posts] == ["web:1", "web:2"]
    (problem,) = [p for p in report.problems if p.level == "error"]
    assert (
        problem.reason
        == "the source format 'junkyield' produced str, not a Post or a RecordProblem; left out"
    )


def test_a_plugin_backend_answering_no_reply_is_a_failed_call(bad_site, tmp_path):
    result = CliRunner().invoke(cli, ["backends", "ping", "stringy:x"])
    assert result.exit_code != 0
    assert (
        "the plugin backend 'stringy' (badplugin 0.3) raised TypeError: agenerate returned str, not a Reply"
        in result.output
    )
