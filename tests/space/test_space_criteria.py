"""The Space's Leaderboard tab shows OpenING's four tie treatments (FDT from the judge's leans) and, for a
per-criterion run, one win rate per criterion."""

from __future__ import annotations

import math

from echo_builder.judge.verdicts_file import VERDICTS_FILE, write_verdicts
from echo_builder.records import Verdict


def _pairwise(sample: str, order: str, winner: str, lean: str | None) -> Verdict:
    return Verdict(
        sample_id=sample,
        judge="openai:j",
        mode="pairwise",
        model_a="green",
        model_b="red",
        order=order,
        winner=winner,
        tie_lean=lean,
        prompt_version="echo-pairwise-v2",
    )


def test_space_table_shows_all_four_tie_treatments(tmp_path, echo_space):
    from echo_space.leaderboard import RunSource

    # s0-s2: ties leaning to green (both orders); s3: green wins
    verdicts = [_pairwise(f"s{k}", o, "tie", "A") for k in range(3) for o in ("AB", "BA")]
    verdicts += [_pairwise("s3", o, "A", None) for o in ("AB", "BA")]
    write_verdicts(verdicts, tmp_path / "run" / VERDICTS_FILE)
    view = RunSource(tmp_path / "run", n_boot=20, work_dir=tmp_path / "work").view()
    green = view.table.set_index("model").loc["green"]
    assert (green["tie_fdt"], green["tie_half"], green["tie_zero"], green["tie_dropped"]) == (
        1.0,
        0.625,
        0.25,
        1.0,
    )
    assert "tie_fdt" in view.summary and "forced decision" in view.summary


def test_space_table_shows_a_win_rate_per_criterion(tmp_path, echo_space):
    from echo_space.leaderboard import RunSource

    scores = {"green": (9, 2, 5), "red": (3, 8, 5)}  # prompt_following, realism, text
    verdicts = [
        Verdict(
            sample_id=f"s{k}",
            judge="openai:j",
            model=model,
            criterion=criterion,
            rating=float(value + (k if model == "green" else 0)) if criterion != "text" else 5.0,
            prompt_version="echo-criteria-v1",
        )
        for k in range(4)
        for model, values in scores.items()
        for criterion, value in zip(("prompt_following", "realism", "text"), values, strict=True)
    ]
    write_verdicts(verdicts, tmp_path / "run" / VERDICTS_FILE)
    view = RunSource(tmp_path / "run", n_boot=20, work_dir=tmp_path / "work").view()
    table = view.table.set_index("model")
    assert list(view.table.columns[-3:]) == ["win_rate_prompt_following", "win_rate_realism", "win_rate_text"]
    assert table.loc["green", "win_rate_prompt_following"] == 1.0
    # realism: green 2+k vs red 8 -> never wins; text always ties
    assert table.loc["green", "win_rate_realism"] == 0.0 and table.loc["red", "win_rate_text"] == 0.5
    assert math.isnan(table.loc["green", "tie_fdt"])  # single-answer run: no forced decisions
    assert "Per-criterion run" in view.summary
    assert any(
        path.endswith("tradeoff.png") and "criteria x criteria" in caption for path, caption in view.plots
    )
