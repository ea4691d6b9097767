"""The Space's Analysis tab: an ``echo-bench analyze`` folder's report, plots and failure table."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from tests.space.conftest import _require_gradio


@pytest.fixture(scope="module")
def analysis(tmp_path_factory):
    from echo_builder.cli import cli
    from echo_builder.demo import run_demo

    root = tmp_path_factory.mktemp("space-analysis")
    run_demo(root / "demo", progress=False)
    result = CliRunner().invoke(
        cli, ["analyze", str(root / "demo" / "benchmark"), "--out", str(root / "a"), "--n-boot", "20"]
    )
    assert result.exit_code == 0, result.output
    return root / "a"


def test_analysis_view_shows_the_report_plots_and_failures(analysis):
    _require_gradio()
    from echo_space.analysis import analysis_view

    report, plots, table = analysis_view(analysis)
    doc = json.loads((analysis / "analysis.json").read_text())
    assert "## Failures observed by users" in report and "![" not in report
    assert sorted(caption for _, caption in plots) == sorted(doc["plots"])
    color = table[table["category"] == "color_drift"].iloc[0]
    assert (color["metric"], color["texts"]) == ("color_shift", 4)
    assert table[table["category"] == "missing_element"].iloc[0]["metric"] == "no metric yet"


def test_the_tab_is_added_only_when_an_analysis_is_named(analysis):
    _require_gradio()
    import gradio as gr
    from echo_space.analysis import add_analysis_tab

    with gr.Blocks() as demo, gr.Tabs():
        assert add_analysis_tab(None) is False
        assert add_analysis_tab(str(analysis)) is True
    labels = [getattr(block, "label", None) for block in demo.blocks.values()]
    assert "Analysis" in labels


def test_the_analysis_folder_is_a_space_setting_an_option_and_an_env_variable(analysis, tmp_path):
    """The tab was reachable only through an undocumented variable read inside the UI; now ``--analysis`` /
    ``ECHO_ANALYSIS`` as every other setting, and a folder that is not an analysis is refused by name."""
    _require_gradio()
    from click.testing import CliRunner
    from echo_space import SpaceSettings
    from echo_space.cli import main

    settings = SpaceSettings.from_env({"ECHO_BENCHMARK": "org/echo", "ECHO_ANALYSIS": f" {analysis} "})
    assert settings.analysis == str(analysis)
    assert SpaceSettings.from_env({"ECHO_BENCHMARK": "org/echo"}).analysis is None
    help_text = CliRunner().invoke(main, ["--help"]).output
    assert "--analysis" in help_text and "ECHO_ANALYSIS" in help_text
    empty = tmp_path / "not-an-analysis"
    empty.mkdir()
    result = CliRunner().invoke(main, ["--benchmark", "org/echo", "--analysis", str(empty)])
    assert result.exit_code == 2 and "holds no analysis.json" in result.output


def test_the_tab_is_built_from_the_settings(analysis, demo_dir):
    _require_gradio()
    from echo_space import SpaceSettings, build_demo

    def tabs(**extra):
        demo = build_demo(SpaceSettings(benchmark=str(demo_dir / "benchmark"), n_boot=20, **extra))
        return [getattr(block, "label", None) for block in demo.blocks.values()]

    assert "Analysis" in tabs(analysis=str(analysis))
    assert "Analysis" not in tabs()


def test_only_the_analysis_own_plots_are_read(analysis, tmp_path):
    _require_gradio()
    import shutil

    from echo_space.analysis import analysis_view

    copy = tmp_path / "copy"
    shutil.copytree(analysis, copy)
    outside = tmp_path / "outside.png"
    shutil.copy(copy / "plots" / "activity.png", outside)
    doc = json.loads((copy / "analysis.json").read_text())
    doc["plots"]["activity"] = str(outside)  # an edited document pointing outside the folder
    doc["plots"]["tasks"] = "../outside.png"
    (copy / "analysis.json").write_text(json.dumps(doc))
    _, plots, _ = analysis_view(copy)
    assert sorted(caption for _, caption in plots) == ["diversity", "failures"]
    with pytest.raises(FileNotFoundError, match=r"no analysis\.json"):
        analysis_view(tmp_path)
