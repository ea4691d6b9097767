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
