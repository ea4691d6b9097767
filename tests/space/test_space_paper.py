"""The Leaderboard tab shows ECHO's published win rates beside a user's run on the same config (issue 16, item 4),
through the Space's data functions (no server)."""

from __future__ import annotations

import json
import math

import pandas as pd
import pytest

from echo_builder.judge.published import (
    PAPER_LABEL,
    PUBLISHED_WIN_RATES,
    match_paper_model,
    paper_comparison,
    published_win_rates,
)
from echo_builder.judge.run import write_verdicts
from echo_builder.records import Verdict

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

#: the paper's table (I2I / T2I), typed in again from the issue as an independent check of the data module
PAPER = {
    "4o Image Gen": (0.81, 0.76),
    "Nano Banana": (0.66, 0.74),
    "Gemini 2.0 Flash": (0.53, 0.55),
    "Bagel-Think": (0.49, 0.46),
    "Bagel": (0.48, 0.41),
    "Flux Kontext": (0.45, 0.40),
    "LLM+Diffusion": (0.18, 0.60),
    "Anole": (0.07, 0.10),
}


def test_published_numbers_are_the_papers():
    assert {
        m: (PUBLISHED_WIN_RATES["image_to_image"][m], PUBLISHED_WIN_RATES["text_to_image"][m]) for m in PAPER
    } == (PAPER)
    t2i = published_win_rates("text_to_image")
    assert list(t2i["model"][:3]) == ["4o Image Gen", "Nano Banana", "LLM+Diffusion"]
    assert set(t2i["source"]) == {PAPER_LABEL} and "from the paper" in PAPER_LABEL
    assert published_win_rates("analysis").empty
    assert match_paper_model("nano-banana", "image_to_image") == "Nano Banana"
    assert match_paper_model("4O_IMAGE_GEN", "text_to_image") == "4o Image Gen"
    assert match_paper_model("bagel", "image_to_image") == "Bagel"  # not Bagel-Think
    assert match_paper_model("my-model", "image_to_image") is None


def _run(folder, config, ratings):
    """A judge run folder (verdicts + run.json) with one judge's ratings {(sample, model): rating}."""
    folder.mkdir(parents=True)
    verdicts = [Verdict(sample_id=s, judge="openai:j", model=m, rating=r) for (s, m), r in ratings.items()]
    write_verdicts(verdicts, folder / "verdicts.parquet")
    (folder / "run.json").write_text(json.dumps({"config": config, "benchmark": "b", "mode": "single"}))
    return folder


@pytest.fixture
def i2i_run(tmp_path):
    ratings = {}
    for i in range(4):
        ratings[(f"s{i}", "nano-banana")] = 8.0
        ratings[(f"s{i}", "my-model")] = 5.0 + (i % 2)
        ratings[(f"s{i}", "Anole")] = 2.0
    return _run(tmp_path / "run", "image_to_image", ratings)


def test_run_beside_the_paper_on_its_config(i2i_run, tmp_path, echo_space):
    from echo_space.leaderboard import PAPER_COLUMNS, RunSource

    view = RunSource(i2i_run, n_boot=50, work_dir=tmp_path / "w").view("loss")
    paper = view.paper
    assert tuple(paper.columns) == PAPER_COLUMNS and set(paper["paper_source"]) == {PAPER_LABEL}
    ours = paper[paper["model"] != ""].set_index("model")
    assert list(ours.index) == ["nano-banana", "my-model", "Anole"]  # the run's order, best first
    assert (
        ours.loc["nano-banana", "your_win_rate"] == 1.0 and ours.loc["nano-banana", "paper_win_rate"] == 0.66
    )
    assert ours.loc["Anole", "paper_model"] == "Anole" and ours.loc["Anole", "paper_win_rate"] == 0.07
    assert ours.loc["my-model", "your_win_rate"] == 0.5 and math.isnan(ours.loc["my-model", "paper_win_rate"])
    others = paper[paper["model"] == ""]
    assert list(others["paper_model"]) == [m for m in PAPER if m not in ("Nano Banana", "Anole")]
    assert others["your_win_rate"].isna().all()
    assert "from the paper" in view.summary and "image_to_image" in view.summary


def test_a_text_to_image_run_gets_the_text_to_image_numbers(tmp_path, echo_space):
    from echo_space.leaderboard import RunSource

    run = _run(tmp_path / "t2i", "text_to_image", {("s1", "LLM+Diffusion"): 7.0, ("s1", "Bagel"): 3.0})
    paper = RunSource(run, n_boot=50, work_dir=tmp_path / "w").view("loss").paper.set_index("paper_model")
    assert (
        paper.loc["LLM+Diffusion", "paper_win_rate"] == 0.60 and paper.loc["Bagel", "paper_win_rate"] == 0.41
    )


def test_config_the_paper_did_not_rank_shows_no_paper_numbers(tmp_path, echo_space):
    from echo_space.leaderboard import RunSource

    run = _run(tmp_path / "a", "analysis", {("s1", "a"): 7.0, ("s1", "b"): 3.0})
    view = RunSource(run, n_boot=50, work_dir=tmp_path / "w").view("loss")
    assert view.paper.empty and "from the paper" not in view.summary
    assert paper_comparison(None, None).empty


def test_space_handler_shows_the_paper_beside_the_run_or_alone(i2i_run, demo_dir, tmp_path, echo_space):
    from echo_space.settings import SpaceSettings
    from echo_space.ui import EchoSpace

    space = EchoSpace(SpaceSettings(benchmark=str(demo_dir / "benchmark"), runs=(str(i2i_run),), n_boot=50))
    heading, table = space.paper_win_rates("run")
    assert "from the paper" in heading and "image_to_image" in heading
    assert table.set_index("paper_model").loc["Nano Banana", "your_win_rate"] == 1.0
    alone_heading, alone = EchoSpace(SpaceSettings(benchmark=str(demo_dir / "benchmark"))).paper_win_rates(
        None
    )
    assert "from the paper" in alone_heading
    assert len(alone) == 16 and set(alone["config"]) == {"image_to_image", "text_to_image"}
    pivot = alone.pivot(index="paper_model", columns="config", values="paper_win_rate")
    assert {m: (pivot.loc[m, "image_to_image"], pivot.loc[m, "text_to_image"]) for m in PAPER} == PAPER
    assert isinstance(alone, pd.DataFrame)
