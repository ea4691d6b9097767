"""The metric registry: built-in declarations, plugin metrics (in memory and through a fake installed
distribution), broken plugins reported not fatal, and every reader of the registry (CLI, run, playground, modules,
docs, publish-metrics)."""

from __future__ import annotations

import json
import math
import re
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner
from PIL import Image

from echo_builder import metrics as metric_modules
from echo_builder.cli import cli
from echo_builder.errors import ConfigError
from echo_builder.registry import Entry, plugin_problems
from echo_builder.scoring.base import METRIC_SPECS, MetricResult, MetricSpec
from echo_builder.scoring.registry import (
    METRICS,
    MetricDefinition,
    MetricOption,
    applicability_flags,
    declare_metric,
    validate_metric,
)
from tests.conftest import REPO_ROOT
from tests.helpers.benchmark import make_benchmark, make_outputs

BUILT_INS = ("color_shift", "structure_distance", "face_identity", "text_rendering", "text_accuracy")
EXTENDING = REPO_ROOT / "docs" / "extending.md"


# ----------------------------------------------------------------------------------------- built-in contents


def test_built_in_metrics_are_declared_in_order_with_their_specs():
    assert METRICS.names()[: len(BUILT_INS)] == list(BUILT_INS)
    for name in BUILT_INS:
        definition = METRICS.get(name)
        assert definition.spec == METRIC_SPECS[name] and METRICS.entry(name).builtin
    flags = {name: METRICS.get(name).applicability_flag for name in BUILT_INS}
    assert flags == {
        "color_shift": "no_color_shift",
        "structure_distance": "structure",
        "face_identity": "face_identity",
        "text_rendering": "text_rendering",
        "text_accuracy": "text_rendering",  # the OCR check of ECHO's text metric shares its flag
    }
    assert [n for n in BUILT_INS if METRICS.get(n).needs_inputs] == list(BUILT_INS[:3])
    assert [n for n in BUILT_INS if METRICS.get(n).needs_judge] == ["text_rendering"]
    assert {n: METRICS.get(n).extra for n in BUILT_INS} == {
        "color_shift": None,
        "structure_distance": "dino",
        "face_identity": "faces",
        "text_rendering": None,
        "text_accuracy": "ocr",
    }
    assert [o.name for o in METRICS.get("structure_distance").options] == [
        "dino_weights",
        "structure_reduction",
        "structure_decode",
    ]
    assert METRICS.get("face_identity").option_defaults() == {"face_backend": "dlib", "face_model_dir": None}
    assert applicability_flags() == ("no_color_shift", "structure", "face_identity", "text_rendering")


def test_old_names_are_live_views_of_the_registry():
    from echo_builder.scoring.run import _NEEDS_INPUTS, APPLICABILITY_FLAG, METRIC_NAMES

    assert tuple(METRIC_NAMES) == BUILT_INS and METRIC_NAMES == BUILT_INS
    assert dict(APPLICABILITY_FLAG) == {
        "color_shift": "no_color_shift",
        "structure_distance": "structure",
        "face_identity": "face_identity",
        "text_rendering": "text_rendering",
        "text_accuracy": "text_rendering",
    }
    assert set(_NEEDS_INPUTS) == {"color_shift", "structure_distance", "face_identity"}


def test_the_docs_table_of_metrics_matches_the_registry():
    text = (REPO_ROOT / "docs" / "metrics.md").read_text(encoding="utf-8")
    rows = {m.group(1): m.group(0) for m in re.finditer(r"^\| `(\w+)` \|.*$", text, re.M)}
    for name in BUILT_INS:
        spec = METRICS.get(name).spec
        assert name in rows, f"docs/metrics.md has no row for {name}"
        assert ("higher is better" if spec.higher_is_better else "lower is better") in rows[name]
        assert f"echo_builder/metrics/{name}/README.md" in rows[name]


def test_every_built_in_metric_has_its_evaluate_module_in_the_package():
    for name in BUILT_INS:
        folder = Path(metric_modules.path(name))
        assert folder.parent == metric_modules.MODULES_DIR and (folder / f"{name}.py").is_file()
    assert {"echo_judge", "win_rate"} <= set(metric_modules.names())
    for bad in ("nope", "../color_shift", "", "color_shift/..", "."):
        with pytest.raises(ConfigError, match="color_shift"):
            metric_modules.path(bad)


# --------------------------------------------------------------------------------------------- validation


def _spec(name: str = "probe_metric", **changes: Any) -> MetricSpec:
    fields = dict(name=name, higher_is_better=False, low=0.0, high=1.0, unit="u", source="s")
    fields.update(changes)
    return MetricSpec(**fields)


def _constant(value: float = 1.0):
    def factory(inputs, outputs, prompts, options):
        return MetricResult(np.full(len(outputs), value), [None] * len(outputs))

    return factory


def _definition(name: str = "probe_metric", **changes: Any) -> MetricDefinition:
    fields: dict[str, Any] = dict(name=name, spec=_spec(name), factory=_constant())
    fields.update(changes)
    return MetricDefinition(**fields)


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"name": "Bad-Name"}, "name must be"),
        ({"name": "import", "spec": _spec("import")}, "name must be"),
        ({"spec": _spec("other")}, "spec.name is 'other'"),
        ({"spec": _spec(low=2.0, high=1.0)}, "is not a range"),
        ({"spec": _spec(low=math.nan)}, "is not a range"),
        ({"spec": _spec(higher_is_better="yes")}, "higher_is_better"),
        ({"spec": "lower"}, "spec must be a MetricSpec"),
        ({"factory": "no_colon"}, "factory 'no_colon'"),
        ({"factory": 3}, "factory must be a callable"),
        ({"applicability_flag": "Has Space"}, "applicability_flag"),
        ({"needs_inputs": "yes"}, "needs_inputs"),
        ({"options": [MetricOption("x")]}, "tuple of MetricOption"),
        ({"options": ("x",)}, "is not a MetricOption"),
        ({"options": (MetricOption("out"),)}, "used by echo-bench metrics"),
        ({"options": (MetricOption("judge"),)}, "used by echo-bench metrics"),
        (
            {"options": (MetricOption("dino_weights"),)},
            "already an option of the metric 'structure_distance'",
        ),
        ({"options": (MetricOption("a"), MetricOption("a"))}, "declared twice"),
        ({"options": (MetricOption("a", "complex"),)}, "type 'complex'"),
        ({"options": (MetricOption("a", "choice"),)}, "needs its choices"),
        ({"options": (MetricOption("a", "choice", "z", choices=("x", "y")),)}, "default 'z'"),
        ({"module": "/nonexistent/probe_metric"}, "must be a folder named 'probe_metric'"),
    ],
)
def test_invalid_definitions_are_refused_naming_the_field(changes, message):
    with pytest.raises(ConfigError, match=re.escape(message)):
        validate_metric(_definition(**changes))


def test_a_definition_must_be_a_metric_definition():
    with pytest.raises(
        ConfigError, match=re.escape("expected an echo_builder.scoring.registry.MetricDefinition, got dict")
    ):
        validate_metric({"name": "x"})


def test_a_second_metric_under_a_taken_name_is_refused():
    with pytest.raises(ConfigError, match="already registered"):
        declare_metric(_definition("color_shift", spec=METRICS.get("color_shift").spec), target="elsewhere:X")


# ------------------------------------------------------------------------------- the documented plugin


def _doc_files(section: str) -> dict[str, str]:
    """``{path: content}`` of the files docs/extending.md shows in ``section`` ('File `path`:' + a code block)."""
    text = EXTENDING.read_text(encoding="utf-8")
    start = text.index(f"## {section}\n")
    end = text.find("\n## ", start + 4)
    body = text[start : end if end != -1 else len(text)]
    return {
        m.group(1): m.group(2)
        for m in re.finditer(r"^File `([^`]+)`[^\n]*\n+```\w*\n(.*?)^```", body, re.M | re.S)
    }


def _write_plugin(root: Path) -> Path:
    files = {p: c for p, c in _doc_files("A metric").items() if not p.startswith("echo_builder/")}
    assert set(files) == {
        "pyproject.toml",
        "echo_brightness/__init__.py",
        "echo_brightness/brightness_shift/brightness_shift.py",
        "echo_brightness/brightness_shift/README.md",
        "echo_brightness/brightness_shift/app.py",
        "echo_brightness/brightness_shift/requirements.txt",
    }
    for rel, content in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(content, encoding="utf-8")
    return root


@pytest.fixture
def fresh_registry():
    """Forget plugins (and plugin modules) before and after the test."""
    METRICS.reload_plugins()
    yield METRICS
    for name in [
        n for n in list(sys.modules) if n.split(".")[0] in ("echo_brightness", "echo_broken_metric")
    ]:
        del sys.modules[name]
    METRICS.reload_plugins()


def _dist_info(site: Path, dist: str, entry_points: str) -> None:
    info = site / f"{dist.replace('-', '_')}-0.1.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: 0.1\n", encoding="utf-8")
    (info / "entry_points.txt").write_text(entry_points, encoding="utf-8")


@pytest.fixture
def installed_plugin(tmp_path, monkeypatch, fresh_registry):
    """The documented echo-brightness package, 'installed' as a distribution on sys.path (entry_points.txt)."""
    site = _write_plugin(tmp_path / "site")
    _dist_info(site, "echo-brightness", "[echo_bench.metrics]\nbrightness_shift = echo_brightness:METRIC\n")
    monkeypatch.syspath_prepend(str(site))
    METRICS.reload_plugins()
    return site


GREY = (100, 100, 100)


def _bench(tmp_path: Path) -> tuple[Path, Path]:
    bench = make_benchmark(
        tmp_path / "bench",
        "image_to_image",
        [
            {"id": "a", "prompt": "brighter", "inputs": [Image.new("RGB", (8, 8), GREY)]},
            {"id": "b", "prompt": "no input"},
            {"id": "c", "prompt": "unreadable", "inputs": [Image.new("RGB", (8, 8), GREY)]},
        ],
    )
    outputs = make_outputs(
        tmp_path / "outputs",
        {
            "m": {
                "a": Image.new("RGB", (8, 8), (120, 120, 120)),
                "b": Image.new("RGB", (8, 8), GREY),
                "c": b"junk",
            }
        },
    )
    return bench, outputs


def test_an_installed_plugin_metric_reaches_every_reader(installed_plugin, tmp_path):
    entry = METRICS.entry("brightness_shift")
    assert entry.origin == "echo-brightness 0.1" and not entry.builtin
    assert METRICS.names()[: len(BUILT_INS)] == list(BUILT_INS) and "brightness_shift" in METRICS.names()
    assert not [p for p in plugin_problems() if p.name == "brightness_shift"]

    runner = CliRunner()
    help_text = runner.invoke(cli, ["metrics", "--help"]).output
    assert "brightness_shift" in help_text and "from echo-brightness 0.1" in help_text

    bench, outputs = _bench(tmp_path)
    args = ["--benchmark", str(bench), "--config", "image_to_image", "--outputs", str(outputs)]
    result = runner.invoke(
        cli,
        ["metrics", *args, "--metric", "brightness_shift", "--format", "csv", "--out", str(tmp_path / "r")],
    )
    assert result.exit_code == 0, result.output
    rows = pd.read_csv(tmp_path / "r" / "metrics.csv").set_index("sample_id")
    assert rows.loc["a", "value"] == pytest.approx(20.0, abs=1e-9)
    assert rows.loc["b", "nan_reason"] == "not applicable: the sample has no input images"
    assert rows.loc["c", "nan_reason"].startswith("unreadable image: sample 1 output: cannot decode image")
    summary = json.loads((tmp_path / "r" / "summary.json").read_text())["summary"]
    assert summary[0]["metric"] == "brightness_shift" and summary[0]["higher_is_better"] is False

    # the default run (no --metric) includes it beside the built-ins that can run here
    result = runner.invoke(cli, ["metrics", *args, "--format", "csv", "--out", str(tmp_path / "all")])
    assert result.exit_code == 0, result.output
    assert "brightness_shift" in set(pd.read_csv(tmp_path / "all" / "metrics.csv")["metric"])

    # the evaluate module loads through echo_builder.metrics.path and agrees with the CLI
    import evaluate

    folder = metric_modules.path("brightness_shift")
    assert Path(folder) == installed_plugin / "echo_brightness" / "brightness_shift"
    module = evaluate.load(folder)
    out = module.compute(
        predictions=[Image.new("RGB", (8, 8), (120, 120, 120))], references=[[Image.new("RGB", (8, 8), GREY)]]
    )
    assert out["brightness_shift"] == pytest.approx(20.0, abs=1e-9)
    assert "brightness_shift" in metric_modules.names()


def test_a_plugin_metric_appears_in_the_space_playground(installed_plugin):
    sys.path.insert(0, str(REPO_ROOT / "spaces_app"))
    try:
        from echo_space.playground import score_pair
    finally:
        sys.path.remove(str(REPO_ROOT / "spaces_app"))
    result = score_pair(
        Image.new("RGB", (8, 8), GREY), Image.new("RGB", (8, 8), (90, 90, 90)), face_backend=None
    )
    table = result.table.set_index("metric")
    assert list(table.index) == [*BUILT_INS, "brightness_shift"]
    assert table.loc["brightness_shift", "value"] == pytest.approx(10.0, abs=1e-6)  # darker by 10 levels
    assert (
        table.loc["brightness_shift", "better"] == "lower"
        and table.loc["brightness_shift", "range"] == "[0, 255]"
    )
    no_input = score_pair(None, Image.new("RGB", (8, 8), GREY), face_backend=None).table.set_index("metric")
    assert pd.isna(no_input.loc["brightness_shift", "value"])
    assert no_input.loc["brightness_shift", "note"] == "not applicable: the sample has no input images"


def test_in_memory_registration_runs_from_the_cli(fresh_registry, tmp_path):
    """A definition added in the running process (no distribution): choices, options and the run read it."""
    seen: list[dict[str, Any]] = []

    def factory(inputs, outputs, prompts, options):
        seen.append(dict(options))
        return MetricResult(np.full(len(outputs), float(options["scale"])), [None] * len(outputs))

    definition = _definition(
        "probe_metric",
        factory=factory,
        applicability_flag="structure",
        needs_inputs=False,
        options=(MetricOption("scale", "float", 2.0, "probe_metric: the constant."),),
    )
    METRICS.add(Entry("probe_metric", "", "probe", None, "in-memory test"), validate_metric(definition))
    bench = make_benchmark(
        tmp_path / "bench", "image_to_image", [{"id": "a", "prompt": "p"}, {"id": "b", "prompt": "q"}]
    )
    outputs = make_outputs(
        tmp_path / "outputs", {"m": {"a": Image.new("RGB", (4, 4)), "b": Image.new("RGB", (4, 4))}}
    )
    runner = CliRunner()
    assert "--scale FLOAT" in runner.invoke(cli, ["metrics", "--help"]).output
    args = ["metrics", "--benchmark", str(bench), "--config", "image_to_image", "--outputs", str(outputs)]
    result = runner.invoke(
        cli,
        [
            *args,
            "--metric",
            "probe_metric",
            "--scale",
            "3.5",
            "--format",
            "csv",
            "--out",
            str(tmp_path / "r"),
        ],
    )
    assert result.exit_code == 0, result.output
    assert list(pd.read_csv(tmp_path / "r" / "metrics.csv")["value"]) == [3.5, 3.5]
    assert seen[-1]["scale"] == 3.5 and "judges" in seen[-1]
    # a registered metric's option is a --run-config key like the built-in ones; the command line wins
    run_config = tmp_path / "run.yaml"
    run_config.write_text(
        f"benchmark: {bench}\nconfig: image_to_image\noutputs: {outputs}\nmetric: [probe_metric]\n"
        f"scale: 4.25\nformat: csv\nout: {tmp_path / 'f'}\n",
        encoding="utf-8",
    )
    from_file = runner.invoke(cli, ["metrics", "--run-config", str(run_config)])
    assert from_file.exit_code == 0, from_file.output
    assert list(pd.read_csv(tmp_path / "f" / "metrics.csv")["value"]) == [4.25, 4.25]
    overridden = runner.invoke(
        cli, ["metrics", "--run-config", str(run_config), "--scale", "1.5", "--out", str(tmp_path / "g")]
    )
    assert overridden.exit_code == 0, overridden.output
    assert list(pd.read_csv(tmp_path / "g" / "metrics.csv")["value"]) == [1.5, 1.5]


# ----------------------------------------------------------------------------------------- broken plugins


BROKEN = """\
from echo_builder.scoring.base import MetricResult, MetricSpec
from echo_builder.scoring.registry import MetricDefinition

def _f(inputs, outputs, prompts, options):
    raise RuntimeError("plugin bug")

def _wrong_length(inputs, outputs, prompts, options):
    return MetricResult([1.0], [None])

def _spec(name):
    return MetricSpec(name=name, higher_is_better=True, low=0.0, high=1.0, unit="u", source="s")

MISNAMED_SPEC = MetricDefinition(name="misnamed_spec", spec=_spec("other"), factory=_f)
NOT_A_DEFINITION = {"name": "not_a_definition"}
CLASH = MetricDefinition(name="color_shift", spec=_spec("color_shift"), factory=_f)
OPTION_CLASH = MetricDefinition(name="option_clash", spec=_spec("option_clash"), factory=_f,
    options=(__import__("echo_builder.scoring.registry", fromlist=["MetricOption"]).MetricOption("face_backend"),))
RAISES = MetricDefinition(name="raises", spec=_spec("raises"), factory=_f, needs_inputs=False)
WRONG_LENGTH = MetricDefinition(name="wrong_length", spec=_spec("wrong_length"), factory=_wrong_length, needs_inputs=False)
"""


@pytest.fixture
def broken_plugins(tmp_path, monkeypatch, fresh_registry):
    site = _write_plugin(tmp_path / "site")
    (site / "echo_broken_metric.py").write_text(BROKEN, encoding="utf-8")
    _dist_info(site, "echo-brightness", "[echo_bench.metrics]\nbrightness_shift = echo_brightness:METRIC\n")
    _dist_info(
        site,
        "echo-broken",
        "[echo_bench.metrics]\n"
        "missing_module = echo_no_such_module:METRIC\n"
        "misnamed_spec = echo_broken_metric:MISNAMED_SPEC\n"
        "not_a_definition = echo_broken_metric:NOT_A_DEFINITION\n"
        "color_shift = echo_broken_metric:CLASH\n"
        "option_clash = echo_broken_metric:OPTION_CLASH\n"
        "renamed = echo_broken_metric:RAISES\n"
        "raises = echo_broken_metric:RAISES\n"
        "wrong_length = echo_broken_metric:WRONG_LENGTH\n",
    )
    monkeypatch.syspath_prepend(str(site))
    METRICS.reload_plugins()
    return site


def test_broken_plugins_are_reported_and_the_rest_works(broken_plugins, tmp_path, caplog):
    problems = {p.name: p for p in METRICS.problems()}
    assert set(problems) == {
        "missing_module",
        "misnamed_spec",
        "not_a_definition",
        "color_shift",
        "option_clash",
        "renamed",
    }
    assert "ModuleNotFoundError" in problems["missing_module"].reason
    assert "spec.name is 'other'" in problems["misnamed_spec"].reason
    assert "got dict" in problems["not_a_definition"].reason
    assert "taken by echo-bench's built-in metric" in problems["color_shift"].reason
    assert "already an option of the metric 'face_identity'" in problems["option_clash"].reason
    assert "declares the metric 'raises'" in problems["renamed"].reason
    assert all(p.distribution == "echo-broken 0.1" for p in problems.values())
    # the good plugin and the built-ins are all there; the built-in color_shift is untouched
    assert {"brightness_shift", "raises", "wrong_length"} <= set(METRICS.names())
    assert (
        METRICS.entry("color_shift").builtin
        and METRICS.get("color_shift").spec == METRIC_SPECS["color_shift"]
    )

    runner = CliRunner()
    help_result = runner.invoke(cli, ["metrics", "--help"])
    assert help_result.exit_code == 0 and "brightness_shift" in help_result.output
    bench, outputs = _bench(tmp_path)
    args = [
        "metrics",
        "--benchmark",
        str(bench),
        "--config",
        "image_to_image",
        "--outputs",
        str(outputs),
        "--format",
        "csv",
    ]
    # a plugin that raises, or returns the wrong number of values: one error line naming it, when asked for
    for name, message in (
        ("raises", "RuntimeError: plugin bug"),
        ("wrong_length", "returned 1 values for 3 samples"),
    ):
        result = runner.invoke(cli, [*args, "--metric", name, "--out", str(tmp_path / name)])
        assert result.exit_code == 1
        assert result.output.startswith(f"error: metric {name!r}") and message in result.output
        assert "Traceback" not in result.output
    # asked for beside others: the others are computed and written first, nothing of the failed one is kept
    mixed = tmp_path / "mixed"
    result = runner.invoke(
        cli,
        [
            *args,
            "--metric",
            "color_shift",
            "--metric",
            "raises",
            "--metric",
            "brightness_shift",
            "--out",
            str(mixed),
        ],
    )
    assert result.exit_code == 1
    assert result.output.startswith("error: metric 'raises'") and "RuntimeError: plugin bug" in result.output
    assert f"the other metrics' results are written to {mixed}" in result.output
    written = pd.read_csv(mixed / "metrics.csv")
    assert set(written["metric"]) == {"color_shift", "brightness_shift"} and len(written) == 6
    assert (
        "RuntimeError: plugin bug"
        in json.loads((mixed / "summary.json").read_text())["unavailable"]["raises"]
    )
    # in a default run they are "not computed" and every other metric still runs
    result = runner.invoke(cli, [*args, "--out", str(tmp_path / "all")])
    assert result.exit_code == 0, result.output
    assert "not computed: raises: metric 'raises'" in result.output
    assert {"color_shift", "brightness_shift"} <= set(pd.read_csv(tmp_path / "all" / "metrics.csv")["metric"])


# --------------------------------------------------------------------------------------- publish-metrics


class FakeApi:
    def __init__(self, fail: set[str] = frozenset()):
        self.repos: list[tuple[tuple, dict]] = []
        self.uploads: dict[str, dict[str, bytes]] = {}
        self.fail = fail

    def create_repo(self, *args, **kwargs):
        self.repos.append((args, kwargs))

    def upload_folder(self, *, folder_path, repo_id, repo_type, commit_message, **kwargs):
        if repo_id.split("/")[1] in self.fail:
            raise ConnectionRefusedError("connection refused")
        assert repo_type == "space"
        self.uploads[repo_id] = {p.name: p.read_bytes() for p in Path(folder_path).iterdir()}


#: A requirement line a Space can install (echo-bench is not on PyPI): a direct reference at a release tag.
PINNED = "echo-bench @ git+https://github.com/OWNER/echo-bench@v0.1.0"


def test_publish_metrics_pushes_each_module_as_a_space_in_evaluates_layout():
    from echo_builder.metrics.publish import publish_metrics

    api = FakeApi()
    results = publish_metrics("my-org", ["color_shift", "win_rate"], api=api, private=True, package=PINNED)
    assert [(r.repo_id, r.error) for r in results] == [
        ("my-org/color_shift", None),
        ("my-org/win_rate", None),
    ]
    assert api.repos == [
        (
            ("my-org/color_shift",),
            {"repo_type": "space", "space_sdk": "gradio", "exist_ok": True, "private": True},
        ),
        (
            ("my-org/win_rate",),
            {"repo_type": "space", "space_sdk": "gradio", "exist_ok": True, "private": True},
        ),
    ]
    files = api.uploads["my-org/color_shift"]
    assert set(files) == {"color_shift.py", "README.md", "app.py", "requirements.txt"}
    folder = Path(metric_modules.path("color_shift"))
    assert files["color_shift.py"] == (folder / "color_shift.py").read_bytes()
    requirements = files["requirements.txt"].decode().splitlines()
    assert requirements[0] == PINNED and "echo-bench" not in requirements[1:]
    card = files["README.md"].decode()
    assert (
        card.startswith("---\n")
        and "sdk: gradio" in card
        and "app_file: app.py" in card
        and "- evaluate" in card
    )


def test_publish_metrics_package_line_dry_run_and_failures(monkeypatch):
    from echo_builder.metrics.publish import publish_metrics, space_files

    files = space_files("color_shift", package="echo-bench @ git+https://example.org/echo-bench.git")
    lines = files["requirements.txt"].decode().splitlines()
    assert lines[0] == "echo-bench @ git+https://example.org/echo-bench.git" and "echo-bench" not in lines[1:]
    api = FakeApi()
    dry = publish_metrics("org", ["color_shift"], api=api, dry_run=True)
    assert dry[0].dry_run and dry[0].files == ["color_shift.py", "README.md", "app.py", "requirements.txt"]
    assert api.repos == [] and api.uploads == {}
    # one Space the Hub refuses does not stop the others
    api = FakeApi(fail={"color_shift"})
    results = publish_metrics("org", ["color_shift", "win_rate"], api=api, package=PINNED)
    assert "connection refused" in results[0].error and results[1].error is None
    assert list(api.uploads) == ["org/win_rate"]
    # bad org, unknown module: refused before anything is created
    api = FakeApi()
    for org, names, message in (
        ("bad org", [], "--org 'bad org'"),
        ("org", ["nope"], "no evaluate module named 'nope'"),
    ):
        with pytest.raises(ConfigError, match=re.escape(message)):
            publish_metrics(org, names, api=api)
    assert api.repos == []


@pytest.mark.parametrize(
    "name", sorted(p.name for p in metric_modules.MODULES_DIR.iterdir() if (p / f"{p.name}.py").is_file())
)
def test_publish_metrics_refuses_to_upload_a_space_that_installs_echo_bench_by_name(name):
    from echo_builder.metrics.publish import bare_package_lines, publish_metrics, space_files

    # every built-in module names echo-bench bare: a Space would look it up on PyPI, where it is not
    assert bare_package_lines(space_files(name)["requirements.txt"])
    assert bare_package_lines(space_files(name, package=PINNED)["requirements.txt"]) == []
    api = FakeApi()
    with pytest.raises(ConfigError, match=r"install echo-bench by name.*--package.*nothing was uploaded"):
        publish_metrics("org", [name], api=api)
    assert api.repos == [] and api.uploads == {}
    # stating the name on purpose (a private index) is the user's call
    publish_metrics("org", [name], api=api, package="echo-bench==0.1.0")
    assert api.uploads[f"org/{name}"]["requirements.txt"].decode().splitlines()[0] == "echo-bench==0.1.0"


def test_bare_package_lines_tells_a_name_from_a_direct_reference():
    from echo_builder.metrics.publish import bare_package_lines

    text = (
        b"echo-bench\necho_bench[faces]>=0.1 ; python_version>='3.10'\nEcho.Bench==0.1  # pinned\n"
        b"echo-bench @ git+https://example.org/e.git@v1\necho-bench-extras\nevaluate>=0.4\n"
    )
    assert bare_package_lines(text) == [
        "echo-bench",
        "echo_bench[faces]>=0.1 ; python_version>='3.10'",
        "Echo.Bench==0.1  # pinned",
    ]


def test_publish_metrics_cli_without_a_token_uploads_nothing(monkeypatch, tmp_path):
    monkeypatch.delenv("HF_TOKEN", raising=False)
    monkeypatch.setattr("huggingface_hub.get_token", lambda: None)
    result = CliRunner().invoke(cli, ["publish-metrics", "--org", "org", "--metric", "color_shift"])
    assert result.exit_code == 1 and result.output.startswith("error: publishing needs a Hugging Face token")
    result = CliRunner().invoke(cli, ["publish-metrics", "--org", "org", "--dry-run"])
    assert result.exit_code == 0
    assert "would publish color_shift to https://huggingface.co/spaces/org/color_shift" in result.output
    assert "note: an upload needs --package" in result.output


def test_publish_metrics_publishes_a_plugin_module(installed_plugin):
    from echo_builder.metrics.publish import publish_metrics

    api = FakeApi()
    publish_metrics("org", ["brightness_shift"], api=api, package=PINNED)
    files = api.uploads["org/brightness_shift"]
    assert set(files) == {"brightness_shift.py", "README.md", "app.py", "requirements.txt"}


# ------------------------------------------------------------------------------------ the built-in example


def test_the_documented_built_in_metric_declares_and_computes(fresh_registry, tmp_path, monkeypatch):
    (source,) = [c for p, c in _doc_files("A metric").items() if p.startswith("echo_builder/")]
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "contrast_example.py").write_text(source, encoding="utf-8")
    monkeypatch.syspath_prepend(str(package))
    try:
        import contrast_example

        assert METRICS.get("contrast_shift") is contrast_example.CONTRAST_SHIFT_METRIC
        flat, noisy = Image.new("RGB", (4, 4), GREY), Image.fromarray(np.array([[0, 255] * 2] * 4, np.uint8))
        result = contrast_example.contrast_shift([[flat], []], [noisy, flat], ["", ""], {"absolute": False})
        assert result.values[0] == pytest.approx(127.5, abs=1e-9) and result.nan_reasons[1].startswith(
            "not applicable"
        )
        assert "--absolute" in CliRunner().invoke(cli, ["metrics", "--help"]).output
    finally:
        METRICS.remove("contrast_shift")
        sys.modules.pop("contrast_example", None)


# ----------------------------------------------------------------------------------------------- the demo


def test_the_demo_runs_plugin_metrics_and_survives_a_failing_one(broken_plugins, tmp_path):
    from echo_builder.demo import run_demo

    summary = run_demo(str(tmp_path / "demo"))
    i2i = summary.metrics["image_to_image"]
    assert {"color_shift", "brightness_shift"} <= set(i2i["lumen-2"])
    assert i2i["lumen-2"]["brightness_shift"]["higher_is_better"] is False
    assert "RuntimeError: plugin bug" in summary.skipped_metrics["raises"]
    assert "returned 1 values" in summary.skipped_metrics["wrong_length"]


# ---------------------------------------------------------------------------------- applicability flags


def test_built_in_flags_are_the_datasets_flag_columns_everywhere():
    from datasets import Value

    from echo_builder.records import ApplicabilityFlags
    from echo_builder.stages.tier import rules_applicability  # noqa: F401  (the stage that sets them)
    from echo_dataset.features import APPLICABILITY_FLAGS, echo_features

    assert tuple(ApplicabilityFlags.model_fields) == APPLICABILITY_FLAGS
    assert set(applicability_flags()) == set(APPLICABILITY_FLAGS)
    features = echo_features()
    assert all(features[flag] == Value("bool") for flag in APPLICABILITY_FLAGS)


def test_a_plugin_metrics_flag_is_read_from_the_benchmark_column_of_that_name(fresh_registry, tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    METRICS.add(
        Entry("flagged_probe", "", "probe", None, "in-memory test"),
        validate_metric(_definition("flagged_probe", applicability_flag="bright_ok", needs_inputs=False)),
    )
    bench = make_benchmark(
        tmp_path / "bench", "image_to_image", [{"id": s, "prompt": "p"} for s in ("yes", "no", "unknown")]
    )
    (shard,) = (bench / "image_to_image").glob("*.parquet")
    table = pq.read_table(shard)
    pq.write_table(table.append_column("bright_ok", pa.array([True, False, None], pa.bool_())), shard)
    outputs = make_outputs(
        tmp_path / "outputs", {"m": {s: Image.new("RGB", (4, 4)) for s in ("yes", "no", "unknown")}}
    )
    from echo_builder.scoring.run import run_metrics

    result = run_metrics(
        bench, "image_to_image", outputs, tmp_path / "r", metrics=["flagged_probe"], table_format="csv"
    )
    by_id = {row["sample_id"]: row for row in result.rows}
    assert by_id["yes"]["value"] == 1.0 and by_id["unknown"]["value"] == 1.0
    assert math.isnan(by_id["no"]["value"])
    assert by_id["no"]["nan_reason"] == "not applicable: the sample's bright_ok flag is false"


def test_listing_the_metrics_imports_no_heavy_dependency():
    import subprocess

    code = (
        "import sys, echo_builder.metrics as m\n"
        "from echo_builder.scoring.registry import metric_definitions\n"
        "names = [d.name for d in metric_definitions()] + m.names()\n"
        "heavy = [x for x in ('torch', 'timm', 'transformers', 'openai', 'dlib', 'onnxruntime', 'evaluate') "
        "if x in sys.modules]\n"
        "print(','.join(heavy))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
    )
    assert done.stdout.strip() == ""


def _string_factory(inputs, outputs, prompts, options):
    return MetricResult(np.full(len(outputs), 4.0), [None] * len(outputs))


def test_a_factory_declared_by_import_path_is_imported_on_first_use(tmp_path, monkeypatch):
    definition = validate_metric(_definition(factory="tests.test_metric_registry:_string_factory"))
    assert definition.load_factory() is _string_factory
    assert list(definition.load_factory()([[]], ["x"], [""], {}).values) == [4.0]
    with pytest.raises(ConfigError, match="is not a callable"):
        validate_metric(_definition(factory="tests.test_metric_registry:GREY")).load_factory()
    # a missing optional package: the pip line names echo-bench's extra for a built-in, the plugin's own otherwise
    (tmp_path / "needs_extra.py").write_text("import echo_no_such_dependency\n\ndef f(*a):\n    pass\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    needy = validate_metric(_definition(factory="needs_extra:f", extra="fancy"))
    from echo_builder.errors import MissingDependencyError

    with pytest.raises(MissingDependencyError, match=re.escape("pip install 'echo-bench[fancy]'")):
        needy.load_factory()
    sys.modules.pop("needs_extra", None)
    with pytest.raises(ConfigError, match=re.escape("pip install 'echo-brightness[fancy]'")):
        needy.load_factory("echo-brightness 0.1")
    sys.modules.pop("needs_extra", None)
