"""Plugin code that never returns is abandoned at its deadline and recorded like any other plugin failure (issue 29).

Each fake plugin waits on a ``threading.Event`` nobody sets (it really never returns): a metric's factory, a
module's import, a source format's detection and reading, a stage's run. With the deadline at about a second
(``--plugin-timeout`` / ``--plugin-import-timeout`` or ``ECHO_PLUGIN_TIMEOUT_S``), the command finishes, records
the failure where that plugin's failures go, and does the rest of its work. Only "it finished" is timed (generous
pytest timeouts); everything else asserted is what was recorded.
"""

from __future__ import annotations

import json
import threading

import pandas as pd
import pytest
from click.testing import CliRunner
from PIL import Image

from echo_builder.cli import cli
from echo_builder.plugin_deadline import (
    PluginTimeoutError,
    call_with_deadline,
    iterate_with_deadline,
    parse_timeout,
)
from echo_builder.registry import plugin_problems
from tests.helpers.benchmark import make_benchmark, make_outputs
from tests.helpers.fake_plugins import FakeSite

HANGING_METRIC = """
import threading

import numpy as np

from echo_builder.scoring.base import MetricResult, MetricSpec
from echo_builder.scoring.registry import MetricDefinition


def forever(inputs, outputs, prompts, options):
    threading.Event().wait()  # never set: this call never returns
    return MetricResult(np.zeros(len(outputs)), [None] * len(outputs))


METRIC = MetricDefinition(
    name="sleepy_metric",
    spec=MetricSpec(name="sleepy_metric", higher_is_better=False, low=0.0, high=1.0, unit="none", source="test"),
    factory=forever,
    needs_inputs=False,
    description="never returns",
)
"""

HANGING_IMPORT = """
import threading

threading.Event().wait()  # the import itself never returns
METRIC = None
"""

SOURCES = """
import threading

from echo_builder.records import Post
from echo_builder.sources import SourceAdapter


class SlowReader(SourceAdapter):
    '''Reads {"slow_export": [...]} and hangs on the record "hang".'''

    name = "slow_reader"

    def sniff(self, value):
        return isinstance(value, dict) and "slow_export" in value

    def parse_document(self, document, ctx):
        for i, text in enumerate(document.value["slow_export"]):
            if text == "hang":
                threading.Event().wait()
            yield Post(id=f"web:{i}", platform="web", text=text)


class StuckSniffer(SourceAdapter):
    '''Its detection never returns, whatever it is asked.'''

    name = "stuck_sniffer"

    def sniff(self, value):
        threading.Event().wait()

    def parse_document(self, document, ctx):
        yield from ()
"""

STAGE = """
import threading

from echo_builder.stages.registry import StageDefinition, StageOutput


def run(context):
    threading.Event().wait()
    return StageOutput({"in": 0, "out": 0, "failures": 0})


STAGE = StageDefinition(
    name="sleepy_stage", version="sleepy-1", run=run, after="threads", reads=(), writes=(), files=(),
    report_fields=(), skippable=True, description="never returns",
)
"""


@pytest.fixture
def site(tmp_path):
    site = FakeSite(tmp_path / "site")
    yield site
    site.close()


def _bench(tmp_path):
    bench = make_benchmark(
        tmp_path / "bench",
        "image_to_image",
        [
            {"id": s, "prompt": "make it blue", "inputs": [Image.new("RGB", (32, 32), (128, 128, 128))]}
            for s in "ab"
        ],
    )
    outputs = make_outputs(
        tmp_path / "outputs", {"m1": {s: Image.new("RGB", (32, 32), (200, 90, 40)) for s in "ab"}}
    )
    return bench, outputs


# ------------------------------------------------------------------------------------------------- the helper
def test_the_deadline_helper_returns_raises_and_abandons():
    assert call_with_deadline(lambda a, b=0: a + b, 2, b=3, what="adding", seconds=5) == 5
    with pytest.raises(ZeroDivisionError):
        call_with_deadline(lambda: 1 / 0, what="dividing", seconds=5)
    with pytest.raises(SystemExit):  # a plugin's sys.exit() comes back to the caller, who decides
        call_with_deadline(lambda: exit(3), what="exiting", seconds=5)
    never = threading.Event()
    with pytest.raises(PluginTimeoutError, match=r"waiting did not return within 0\.2 s .*abandoned"):
        call_with_deadline(never.wait, what="waiting", seconds=0.2)
    assert list(iterate_with_deadline(lambda: iter([1, 2, 3]), what="counting", seconds=5)) == [1, 2, 3]

    def stalls():
        yield 1
        never.wait()
        yield 2

    got = []
    with pytest.raises(PluginTimeoutError):
        for item in iterate_with_deadline(stalls, what="stalling", seconds=0.2):
            got.append(item)
    assert got == [1]
    abandoned = [t for t in threading.enumerate() if t.name.startswith("plugin: ")]
    assert abandoned and all(t.daemon for t in abandoned)  # the process can still exit
    assert parse_timeout("0", "X") is None and parse_timeout("2.5", "X") == 2.5
    for bad in ("soon", "-1", "nan"):
        with pytest.raises(Exception, match="expected seconds"):
            parse_timeout(bad, "X")


# ---------------------------------------------------------------------------------------------------- metrics
@pytest.mark.timeout(120)
def test_a_plugin_metric_that_never_returns_is_abandoned_and_the_others_are_written(site, tmp_path):
    site.install(
        "sleepyplug",
        {"echo_bench.metrics": {"sleepy_metric": "sleepy_metric:METRIC"}},
        {"sleepy_metric": HANGING_METRIC},
    )
    bench, outputs = _bench(tmp_path)
    out = tmp_path / "m"
    args = ["metrics", "--benchmark", str(bench), "--config", "image_to_image", "--outputs", str(outputs)]
    args += ["--metric", "color_shift", "--metric", "sleepy_metric", "--out", str(out)]
    result = CliRunner().invoke(cli, ["--plugin-timeout", "1", *args])
    assert result.exit_code == 1, result.output
    (line,) = result.output.strip().splitlines()
    assert line.startswith(
        "error: metric 'sleepy_metric' (sleepyplug 0.1) failed: it did not return within 1 s"
    )
    assert "ECHO_PLUGIN_TIMEOUT_S or --plugin-timeout" in line
    table = pd.read_parquet(out / "metrics.parquet")
    assert set(table["metric"]) == {"color_shift"} and len(table) == 2  # the other metric, written whole
    summary = json.loads((out / "summary.json").read_text())
    assert "did not return within 1 s" in summary["unavailable"]["sleepy_metric"]


@pytest.mark.timeout(120)
def test_the_environment_sets_the_deadline_and_the_option_is_checked(site, tmp_path, monkeypatch):
    site.install(
        "sleepyplug",
        {"echo_bench.metrics": {"sleepy_metric": "sleepy_metric:METRIC"}},
        {"sleepy_metric": HANGING_METRIC},
    )
    bench, outputs = _bench(tmp_path)
    monkeypatch.setenv("ECHO_PLUGIN_TIMEOUT_S", "0.5")
    args = ["metrics", "--benchmark", str(bench), "--config", "image_to_image", "--outputs", str(outputs)]
    result = CliRunner().invoke(cli, [*args, "--metric", "sleepy_metric", "--out", str(tmp_path / "m")])
    assert result.exit_code == 1 and "did not return within 0.5 s" in result.output, result.output
    refused = CliRunner().invoke(cli, ["--plugin-timeout", "soon", "plugins"])
    assert refused.exit_code != 0 and "--plugin-timeout: expected seconds" in refused.output


# ----------------------------------------------------------------------------------------------------- import
@pytest.mark.timeout(120)
def test_a_plugin_whose_import_never_returns_is_left_out_and_every_command_still_works(site, tmp_path):
    site.install(
        "hangimport",
        {"echo_bench.metrics": {"hang_import": "hang_import:METRIC"}},
        {"hang_import": HANGING_IMPORT},
    )
    result = CliRunner().invoke(cli, ["--plugin-import-timeout", "1", "plugins", "--format", "json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.output[result.output.index("{") :])
    (problem,) = [p for p in data["problems"] if p["name"] == "hang_import"]
    assert problem["value"] == "hang_import:METRIC"
    assert problem["reason"].startswith("import (hang_import:METRIC) did not return within 1 s")
    assert "color_shift" in [e["name"] for e in data["entries"] if e["kind"] == "metric"]
    # the registry was read once: a later command in the same process does not wait again
    bench, outputs = _bench(tmp_path)
    args = ["metrics", "--benchmark", str(bench), "--config", "image_to_image", "--outputs", str(outputs)]
    metrics = CliRunner().invoke(cli, [*args, "--metric", "color_shift", "--out", str(tmp_path / "m")])
    assert metrics.exit_code == 0, metrics.output
    assert [p.name for p in plugin_problems()] == ["hang_import"]


# ---------------------------------------------------------------------------------------------------- sources
@pytest.mark.timeout(120)
def test_a_plugin_source_that_hangs_on_a_record_keeps_the_records_before_and_the_other_files(
    site, tmp_path, monkeypatch
):
    from echo_builder.sources import read_posts

    site.install(
        "slowsources",
        {
            "echo_bench.sources": {
                "slow_reader": "slow_sources:SlowReader",
                "stuck_sniffer": "slow_sources:StuckSniffer",
            }
        },
        {"slow_sources": SOURCES},
    )
    monkeypatch.setenv("ECHO_PLUGIN_TIMEOUT_S", "1")
    folder = tmp_path / "exports"
    folder.mkdir()
    (folder / "a_slow.json").write_text(json.dumps({"slow_export": ["a fox", "hang", "never read"]}))
    (folder / "b_own.jsonl").write_text(json.dumps({"id": "x:1", "platform": "x", "text": "a hare"}) + "\n")
    (folder / "c_slow.json").write_text(json.dumps({"slow_export": ["an owl"]}))
    report = read_posts(folder)
    # the record before the hang is kept, the built-in format's file is read, and the hanging detection of the
    # other plugin claims nothing
    assert sorted(p.id for p in report.posts) == ["web:0", "x:1"]
    stopped = [p for p in report.problems if "did not return within 1 s" in p.reason]
    assert [p.file.rsplit("/", 1)[-1] for p in stopped] == ["a_slow.json", "c_slow.json"]
    assert stopped[0].reason.startswith("reading stopped: the source format 'slow_reader' did not return")
    # abandoned: asked no more, so no second wait, and the problem says so
    assert "unknown format" in stopped[1].reason
    assert "(not asked: the source format 'slow_reader' did not return within 1 s" in stopped[1].reason


# ----------------------------------------------------------------------------------------------------- stages
@pytest.mark.timeout(120)
def test_a_plugin_stage_that_never_returns_stops_the_build_naming_it(site, tmp_path):
    from tests.test_pipeline import _posts_file

    site.install(
        "sleepystage", {"echo_bench.stages": {"sleepy_stage": "sleepy_stage:STAGE"}}, {"sleepy_stage": STAGE}
    )
    posts = tmp_path / "posts.jsonl"
    _posts_file(posts)
    args = ["build", str(posts), "--offline", "--target-model", "GPT-4o"]
    result = CliRunner().invoke(cli, ["--plugin-timeout", "1", *args, "--out", str(tmp_path / "b")])
    assert result.exit_code == 1, result.output
    (line,) = result.output.strip().splitlines()[-1:]
    assert "the plugin stage 'sleepy_stage' (sleepystage 0.1) did not return within 1 s" in line
    assert line.endswith("build without it with --skip-stage sleepy_stage")
    # the stages before it are kept, and the same build without the stage completes
    assert (tmp_path / "b" / "stages" / "threads.jsonl").is_file()
    again = CliRunner().invoke(cli, [*args, "--out", str(tmp_path / "b2"), "--skip-stage", "sleepy_stage"])
    assert again.exit_code == 0, again.output
