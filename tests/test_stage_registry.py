"""The curation stage registry: built-in declarations and their order, plugin stages through the
``echo_bench.stages`` entry point (a fake installed distribution on ``sys.path``), broken plugins reported and left
out, a failing plugin stage named in one error line, ``--skip-stage``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from echo_builder.cli import cli
from echo_builder.errors import ConfigError
from echo_builder.registry import plugin_problems
from echo_builder.stages.registry import (
    STAGES,
    StageContext,
    StageDefinition,
    StageOutput,
    builtin_order,
    stage_order,
)
from tests.helpers.fake_plugins import FakeSite
from tests.test_pipeline import _posts_file

BUILT_INS = (
    "collect",
    "query",
    "relevance",
    "threads",
    "extract",
    "media",
    "roles",
    "templates",
    "screenshots",
    "tier",
    "applicability",
)

# A plugin stage that counts the posts of each reply tree: it runs after threads and before extract.
WORD_COUNT = """
from echo_builder.stages.registry import StageDefinition, StageOutput


def run(context):
    rows = [{"root_id": t.root_id, "posts": len(t.posts)} for t in context.trees]
    context.extra["tree_sizes"] = rows
    return StageOutput(
        {"in": len(context.trees), "out": len(rows), "failures": 0, "largest_tree": max([r["posts"] for r in rows] or [0])},
        files={"tree_sizes.jsonl": rows},
    )


STAGE = StageDefinition(
    name="tree_sizes",
    version="tree-sizes-v1",
    run=run,
    after="threads",
    reads=("trees",),
    writes=("extra",),
    report_fields=("largest_tree",),
    skippable=True,
    description="posts per reply tree",
)
"""


@pytest.fixture
def plugins(tmp_path):
    site = FakeSite(tmp_path / "site")
    yield Installer(site)
    site.close()


class Installer:
    def __init__(self, site: FakeSite) -> None:
        self.site = site

    def install(self, dist: str, stages: dict[str, str], modules: dict[str, str]) -> None:
        self.site.install(dist, {"echo_bench.stages": stages}, modules)


def _build(tmp_path: Path, *extra: str, out: str = "out"):
    posts = tmp_path / "posts.jsonl"
    if not posts.exists():
        _posts_file(posts)
    return CliRunner().invoke(
        cli,
        ["build", str(posts), "--out", str(tmp_path / out), "--offline", "--target-model", "GPT-4o", *extra],
    )


# ------------------------------------------------------------------------------------------------- built-ins


def test_built_in_stages_are_declared_in_run_order():
    from echo_builder.pipeline import STAGE_ORDER

    assert tuple(d.name for d in builtin_order()) == BUILT_INS == STAGE_ORDER
    # the order comes from `after`, not from which module happened to be imported first
    always = [e.name for e in STAGES.entries() if e.builtin and not e.get_field("optional")]
    assert sorted(always) == sorted(BUILT_INS)
    # the optional built-in stages run only when a build's config enables them (safety: --nsfw-check, last;
    # expand: --expand, between relevance and threads)
    optional = [e.name for e in STAGES.entries() if e.builtin and e.get_field("optional")]
    assert sorted(optional) == ["expand", "safety"]
    with_optional = list(BUILT_INS)
    with_optional.insert(BUILT_INS.index("threads"), "expand")
    assert tuple(d.name for d in builtin_order(optional=True)) == (*with_optional, "safety")
    first = builtin_order()[0]
    assert first.name == "collect" and first.after is None
    for before, after in zip(builtin_order(), builtin_order()[1:], strict=False):
        assert after.after == before.name


def test_built_in_declarations_carry_versions_files_and_model_use():
    from echo_builder.stages.extract import EXTRACT_PROMPT
    from echo_builder.stages.relevance import RELEVANCE_PROMPT
    from echo_builder.stages.roles import ROLES_VERSION
    from echo_builder.stages.templates_screenshots import SCREENSHOTS_VERSION, TEMPLATES_VERSION
    from echo_builder.stages.tier import APPLICABILITY_VERSION, TIER_VERSION

    stages = {d.name: d for d in builtin_order()}
    model_stages = {name: d.version for name, d in stages.items() if d.calls_model}
    # exactly what report.json has recorded under versions.prompts since before the registry
    assert model_stages == {
        "relevance": RELEVANCE_PROMPT.version,
        "extract": EXTRACT_PROMPT.version,
        "roles": ROLES_VERSION,
        "templates": TEMPLATES_VERSION,
        "screenshots": SCREENSHOTS_VERSION,
        "tier": TIER_VERSION,
        "applicability": APPLICABILITY_VERSION,
    }
    assert stages["collect"].files == ("collect.jsonl", "collect_problems.jsonl")
    assert all(d.files == (f"{d.name}.jsonl",) for n, d in stages.items() if n != "collect")
    assert not any(d.skippable for d in stages.values())
    # each stage reads only what an earlier one wrote
    written = {"failures", "run_stats", "extra"}
    for definition in builtin_order():
        assert set(definition.reads) <= written, definition.name
        written |= set(definition.writes)
    entry = STAGES.entry("relevance")
    assert entry.builtin and entry.get_field("after") == "query" and entry.get_field("calls_model") is True


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"name": "Bad Name"}, "stage name must match"),
        ({"version": ""}, "version must be a non-empty string"),
        ({"run": "not callable"}, "run must be callable"),
        ({"reads": ("everything",)}, "not context fields"),
        ({"reads": "samples"}, "must be a tuple of strings"),
        ({"files": ("../escape.jsonl",)}, "must be a plain NAME.jsonl"),
        ({"files": ("samples.jsonl",)}, "must be a plain NAME.jsonl"),
        ({"report_fields": ("in",)}, "may not redeclare"),
    ],
)
def test_a_bad_declaration_is_refused_with_the_reason(fields, message):
    values = {"name": "probe", "version": "v1", "run": lambda context: None, "after": "threads", **fields}
    with pytest.raises(ConfigError, match=message):
        StageDefinition(**values)


def test_a_second_stage_with_a_built_in_name_is_refused():
    from echo_builder.stages.registry import declare_stage

    with pytest.raises(ConfigError, match="already registered"):
        declare_stage(StageDefinition("query", "v9", lambda context: None, after="collect"))
    assert STAGES.get("query").version == "query-v1"


# --------------------------------------------------------------------------------------------------- plugins


def test_a_plugin_stage_runs_in_build_and_appears_in_the_report(plugins, tmp_path):
    plain = _build(tmp_path, out="plain")
    assert plain.exit_code == 0, plain.output
    plugins.install(
        "echo-tree-sizes", {"tree_sizes": "echo_tree_sizes:STAGE"}, {"echo_tree_sizes": WORD_COUNT}
    )
    assert [d.name for d in stage_order()] == [*BUILT_INS[:4], "tree_sizes", *BUILT_INS[4:]]
    assert STAGES.entry("tree_sizes").origin == "echo-tree-sizes 0.1"

    result = _build(tmp_path)
    assert result.exit_code == 0, result.output
    out = tmp_path / "out"
    report = json.loads((out / "report.json").read_text())
    names = [s["name"] for s in report["stages"]]
    assert names == [*BUILT_INS[:4], "tree_sizes", *BUILT_INS[4:]]
    entry = report["stages"][4]
    threads = report["stages"][3]
    assert entry == {"name": "tree_sizes", "in": threads["out"], "out": threads["out"], "failures": 0,
                     "largest_tree": 2}  # fmt: skip
    assert report["versions"]["plugin_stages"] == {
        "tree_sizes": {"version": "tree-sizes-v1", "origin": "echo-tree-sizes 0.1"}
    }
    assert "tree_sizes" not in report["versions"]["prompts"]  # it calls no model
    rows = [json.loads(line) for line in (out / "stages" / "tree_sizes.jsonl").read_text().splitlines()]
    assert len(rows) == threads["out"] and sorted(r["posts"] for r in rows)[-1] == 2
    assert "tree_sizes" in json.loads((out / "run_stats.json").read_text())["wall_time_s"]
    assert json.loads((out / "build.json").read_text())["stages"] == names
    assert "tree_sizes" in result.output  # the progress table (on_stage) shows it too
    # the stages around it wrote what they write without it
    for name in ("threads.jsonl", "extract.jsonl", "applicability.jsonl", "samples.jsonl"):
        assert (out / "stages" / name).read_bytes() == (tmp_path / "plain" / "stages" / name).read_bytes()
    assert "stages" not in json.loads((tmp_path / "plain" / "build.json").read_text())


def test_a_plugin_stage_can_be_skipped_and_built_ins_cannot(plugins, tmp_path):
    plugins.install(
        "echo-tree-sizes", {"tree_sizes": "echo_tree_sizes:STAGE"}, {"echo_tree_sizes": WORD_COUNT}
    )
    result = _build(tmp_path, "--skip-stage", "tree_sizes")
    assert result.exit_code == 0, result.output
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    assert tuple(s["name"] for s in report["stages"]) == BUILT_INS
    assert "plugin_stages" not in report["versions"]
    assert not (tmp_path / "out" / "stages" / "tree_sizes.jsonl").exists()
    assert "stages" not in json.loads(
        (tmp_path / "out" / "build.json").read_text()
    )  # the built-ins, as usual

    for name, message in (
        ("relevance", "cannot be skipped"),
        ("no_such_stage", "unknown stage 'no_such_stage'"),
    ):
        refused = _build(tmp_path, "--skip-stage", name, out=f"refused-{name}")
        assert refused.exit_code == 1 and message in refused.output and "Traceback" not in refused.output
        assert not (tmp_path / f"refused-{name}").exists()  # checked before anything was written


def test_resuming_with_other_stages_is_refused(plugins, tmp_path):
    first = _build(tmp_path)
    assert first.exit_code == 0, first.output
    plugins.install(
        "echo-tree-sizes", {"tree_sizes": "echo_tree_sizes:STAGE"}, {"echo_tree_sizes": WORD_COUNT}
    )
    again = _build(tmp_path, "--resume")
    assert again.exit_code == 1 and "other settings (stages:" in again.output
    same = _build(tmp_path, "--resume", "--skip-stage", "tree_sizes")  # the stages it was built with
    assert same.exit_code == 0, same.output


BROKEN = {
    # entry point -> (module source, reason shown)
    "import_fails": ("raise RuntimeError('broken at import')", "RuntimeError: broken at import"),
    "not_a_stage": (
        "STAGE = {'name': 'not_a_stage'}",
        "expected an echo_builder.stages.registry.StageDefinition",
    ),
    "nowhere": (
        "from echo_builder.stages.registry import StageDefinition, StageOutput\n"
        "STAGE = StageDefinition('nowhere', 'v1', lambda c: None, after='no_such_stage')",
        "after='no_such_stage' is not a registered stage",
    ),
    "too_early": (
        "from echo_builder.stages.registry import StageDefinition, StageOutput\n"
        "STAGE = StageDefinition('too_early', 'v1', lambda c: None, after='query', reads=('samples',))",
        "it reads ['samples'], which no stage before it",
    ),
    "clash": (
        "from echo_builder.stages.registry import StageDefinition, StageOutput\n"
        "STAGE = StageDefinition('clash', 'v1', lambda c: None, after='tier', files=('extract.jsonl',))",
        "its stage file 'extract.jsonl' is written by the stage 'extract'",
    ),
    "first": (
        "from echo_builder.stages.registry import StageDefinition, StageOutput\n"
        "STAGE = StageDefinition('first', 'v1', lambda c: None, after=None)",
        "must say after which stage it runs",
    ),
    "query": (
        "from echo_builder.stages.registry import StageDefinition, StageOutput\n"
        "STAGE = StageDefinition('query', 'v1', lambda c: None, after='collect')",
        "the name is taken by echo-bench's built-in stage",
    ),
}


def test_broken_plugin_stages_are_reported_and_the_build_runs_without_them(plugins, tmp_path):
    modules = {f"echo_broken_{name}": source for name, (source, _) in BROKEN.items()}
    plugins.install(
        "echo-broken",
        {
            **{name: f"echo_broken_{name}:STAGE" for name in BROKEN},
            "missing_module": "echo_no_such_module:STAGE",
            "tree_sizes": "echo_tree_sizes:STAGE",  # a good one beside them still works
        },
        {**modules, "echo_tree_sizes": WORD_COUNT},
    )
    order = [d.name for d in stage_order()]
    assert order == [*BUILT_INS[:4], "tree_sizes", *BUILT_INS[4:]]
    problems = {p.name: p for p in plugin_problems() if p.group == "echo_bench.stages"}
    assert set(problems) == {*BROKEN, "missing_module"}
    for name, (_, reason) in BROKEN.items():
        assert reason in problems[name].reason, (name, problems[name])
        assert problems[name].distribution.startswith("echo-broken")
    assert "No module named 'echo_no_such_module'" in problems["missing_module"].reason
    assert STAGES.get("query").version == "query-v1"  # the built-in kept its name

    result = _build(tmp_path)
    assert result.exit_code == 0, result.output
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    assert [s["name"] for s in report["stages"]] == [*BUILT_INS[:4], "tree_sizes", *BUILT_INS[4:]]


FAILING = """
from echo_builder.stages.registry import StageDefinition, StageOutput


def boom(context):
    raise RuntimeError("the plugin's own bug")


def bad_report(context):
    return StageOutput({"in": len(context.samples), "out": "many", "failures": 0})


def undeclared_file(context):
    return StageOutput({"in": 0, "out": 0, "failures": 0}, files={"elsewhere.jsonl": []})


def not_output(context):
    return {"in": 0, "out": 0, "failures": 0}


def not_json(context):
    return StageOutput({"in": 0, "out": 0, "failures": 0, "ratio": float("nan")})


def stage(name, run):
    return StageDefinition(name, "v1", run, after="applicability", reads=("samples",), skippable=True)


BOOM = stage("boom", boom)
BAD_REPORT = stage("bad_report", bad_report)
UNDECLARED_FILE = stage("undeclared_file", undeclared_file)
NOT_OUTPUT = stage("not_output", not_output)
NOT_JSON = stage("not_json", not_json)
"""


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("boom", "the plugin stage 'boom' (echo-failing 0.1) failed: RuntimeError: the plugin's own bug; "
                 "build without it with --skip-stage boom"),
        ("bad_report", "returned an unusable StageOutput: its report needs integer ['out']"),
        ("undeclared_file", "it wrote stage files it does not declare: ['elsewhere.jsonl']"),
        ("not_output", "returned dict, not a StageOutput"),
        ("not_json", "returned a report whose field 'ratio' is not JSON (no NaN, infinity or objects): nan"),
    ],
)  # fmt: skip
def test_a_failing_plugin_stage_is_one_error_line_naming_it(plugins, tmp_path, name, message):
    plugins.install("echo-failing", {name: f"echo_failing:{name.upper()}"}, {"echo_failing": FAILING})
    result = _build(tmp_path)
    assert result.exit_code == 1
    errors = [line for line in result.output.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and message in errors[0], result.output
    assert "Traceback" not in result.output
    assert not (tmp_path / "out" / "report.json").exists()  # an unfinished build, continued by a rerun
    skipped = _build(tmp_path, "--skip-stage", name, out="without")
    assert skipped.exit_code == 0, skipped.output


def test_stage_context_progress_label_follows_the_config(tmp_path):
    from echo_builder.pipeline import BuildConfig

    quiet = StageContext(BuildConfig(sources=[], out_dir=tmp_path, progress=False), tmp_path)
    loud = StageContext(BuildConfig(sources=[], out_dir=tmp_path), tmp_path)
    assert (quiet.progress("relevance"), loud.progress("relevance")) == (None, "relevance")
    assert StageOutput({"in": 1, "out": 1, "failures": 0}).files == {}


# ------------------------------------------------------------------------------------------------------ docs
DOCS = Path(__file__).resolve().parents[1] / "docs"


def test_the_curation_docs_list_the_built_in_stages_in_run_order():
    text = (DOCS / "curation.md").read_text(encoding="utf-8")
    table = text.split("## Stages", 1)[1].split("\n\n| stage |", 1)[1].split("\n\n", 1)[0]
    rows = [line.split("|")[1].strip() for line in table.splitlines()[2:]]
    with_optional = list(BUILT_INS)
    with_optional.insert(BUILT_INS.index("threads"), "expand")
    assert tuple(rows) == (*with_optional, "safety") == tuple(d.name for d in builtin_order(optional=True))
    extending = (DOCS / "extending.md").read_text(encoding="utf-8")
    assert f"| `echo_bench.stages` | {', '.join(BUILT_INS)} |" in extending


def test_the_stage_in_extending_md_works_as_a_plugin(plugins, tmp_path):
    """The file a newcomer copies from docs/extending.md, installed with its own entry point, runs in build."""
    section = (DOCS / "extending.md").read_text(encoding="utf-8").split("## A curation stage", 1)[1]
    module = section.split("```python\n", 1)[1].split("```", 1)[0]
    toml = section.split("```toml\n", 1)[1].split("```", 1)[0]
    name, target = (part.strip().strip('"') for part in toml.splitlines()[-1].split("=", 1))
    assert (name, target) == ("prompt_words", "echo_prompt_words:STAGE")
    plugins.install("echo-prompt-words", {name: target}, {"echo_prompt_words": module})
    result = _build(tmp_path)
    assert result.exit_code == 0, result.output
    out = tmp_path / "out"
    report = json.loads((out / "report.json").read_text())
    names = [s["name"] for s in report["stages"]]
    assert names == [*BUILT_INS[:5], "prompt_words", *BUILT_INS[5:]]
    entry = report["stages"][5]
    samples = [json.loads(line) for line in (out / "stages" / "extract.jsonl").read_text().splitlines()]
    rows = [json.loads(line) for line in (out / "stages" / "prompt_words.jsonl").read_text().splitlines()]
    assert rows == [{"sample_id": s["id"], "words": len(s["prompt"].split())} for s in samples]
    assert entry == {
        "name": "prompt_words",
        "in": len(samples),
        "out": len(samples),
        "failures": 0,
        "longest_prompt_words": max(r["words"] for r in rows),
    }
    assert report["versions"]["plugin_stages"]["prompt_words"]["version"] == "prompt-words-v1"
