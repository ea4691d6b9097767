"""``echo-bench analyze`` with the rules labeller: the demo build, a build of the shared data, the report."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from echo_builder.analysis.labelling import fold, normalise_label, rules_labels
from echo_builder.analysis.tasks import TASKS
from echo_builder.analysis.taxonomy import CATEGORIES
from echo_builder.cli import cli
from tests.helpers.analysis import assert_md_matches_json, independent_first_bigrams, md_row

YELLOW = "and it turned everything yellow, look at the sky and the grass"


def _cli(*args: str):
    return CliRunner().invoke(cli, [str(a) for a in args], catch_exceptions=False)


def _prompts(folder: Path, config: str) -> list[str]:
    rows = []
    for file in sorted((folder / config).glob("test-*.parquet")):
        rows.extend(pq.read_table(file, columns=["prompt"]).column("prompt").to_pylist())
    return [p for p in rows if p and p.strip()]


@pytest.fixture(scope="module")
def demo_build(tmp_path_factory) -> Path:
    from echo_builder.demo import run_demo

    out = tmp_path_factory.mktemp("analysis-demo") / "demo"
    run_demo(out, progress=False)
    return out / "benchmark"


@pytest.fixture(scope="module")
def demo_analysis(demo_build, tmp_path_factory) -> tuple[Path, dict]:
    out = tmp_path_factory.mktemp("analysis-out") / "analysis"
    result = _cli("analyze", demo_build, "--out", out, "--n-boot", "50")
    assert result.exit_code == 0, result.output
    return out, json.loads((out / "analysis.json").read_text())


def test_demo_yellow_feedback_is_color_drift_measured_by_color_shift(demo_analysis):
    out, doc = demo_analysis
    labels = [json.loads(line) for line in (out / "labels.jsonl").read_text().splitlines()]
    yellow = next(r for r in labels if r["labeller"] == "failure" and r["text"] == YELLOW)
    color = next(lab for lab in yellow["labels"] if lab["category"] == "color_drift")
    assert "yellow" in color["evidence"] and color["in_taxonomy"] is True
    row = next(r for r in doc["failures"]["categories"] if r["category"] == "color_drift")
    assert row["metric"] == "color_shift"
    # the demo's four yellow/washed-out complaints, each on another sample
    assert (row["items"], row["samples"]) == (4, 4)
    identity = next(r for r in doc["failures"]["categories"] if r["category"] == "identity_shift")
    assert (identity["metric"], identity["items"]) == ("face_identity", 1)


def test_a_complaint_without_a_metric_is_listed_as_such(demo_analysis):
    out, doc = demo_analysis
    row = next(r for r in doc["failures"]["categories"] if r["category"] == "missing_element")
    assert row["metric"] is None and row["items"] == 1  # "the rocket has no exhaust flame"
    markdown = (out / "analysis.md").read_text()
    assert md_row(markdown, "missing_element")[-1] == "no metric yet"
    assert md_row(markdown, "color_drift")[-1] == "`color_shift`"
    assert "Complaints no metric measures yet: anatomy_error, missing_element." in markdown


def test_every_number_in_the_report_is_the_json_number(demo_analysis):
    out, doc = demo_analysis
    assert_md_matches_json(out, doc)
    markdown = (out / "analysis.md").read_text()
    t2i = md_row(markdown, "build:text_to_image")
    stats = next(s for s in doc["diversity"]["sets"] if s["name"] == "build:text_to_image")
    assert t2i[1:4] == [
        str(stats["n_prompts"]),
        str(stats["unique_first_bigrams"]),
        repr(stats["at_sample_size"]["unique_first_bigrams"]["mean"]),
    ]
    assert md_row(markdown, "color_drift")[2:4] == ["4", "4"]


def test_unique_first_bigrams_equal_an_independent_count(demo_build, demo_analysis):
    _, doc = demo_analysis
    for config in ("text_to_image", "image_to_image"):
        stats = next(s for s in doc["diversity"]["sets"] if s["name"] == f"build:{config}")
        prompts = _prompts(demo_build, config)
        assert stats["n_prompts"] == len(prompts)
        assert stats["unique_first_bigrams"] == independent_first_bigrams(prompts)


def test_activity_counts_days_from_the_builds_launch_date(demo_build, demo_analysis):
    _, doc = demo_analysis
    act = doc["activity"]
    assert act["launch_date"] == "2025-06-10" and act["reference"] == "launch date"
    # demo posts: 11 June (2 samples), 12 June (2), 13 June (2)
    assert [(d["day"], d["samples"]) for d in act["days"]] == [(1, 2), (2, 2), (3, 2)]
    assert sum(d["samples"] for d in act["days"]) == sum(
        doc["input"]["configs"][c]["samples"] for c in doc["input"]["configs"]
    )


def test_plots_are_pngs(demo_analysis):
    out, doc = demo_analysis
    assert set(doc["plots"]) == {"failures", "tasks", "diversity", "activity"}
    for path in doc["plots"].values():
        assert (out / path).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_rerun_into_the_same_folder_gives_the_same_document(demo_build, demo_analysis, tmp_path):
    out, doc = demo_analysis
    again = _cli("analyze", demo_build, "--out", out, "--n-boot", "50")
    assert again.exit_code == 0, again.output
    assert json.loads((out / "analysis.json").read_text()) == doc


def test_open_labels_fold_onto_the_taxonomy_or_stay_open():
    assert fold("Yellow tint", CATEGORIES) == ("color_drift", True)
    assert fold("colour-drift", CATEGORIES) == ("color_drift", True)
    assert fold("Identity drift", CATEGORIES) == ("identity_shift", True)
    assert fold("misspelled words", CATEGORIES) == ("text_rendering_error", True)
    assert fold("Watermark added", CATEGORIES) == ("watermark", False)
    assert fold("  ", CATEGORIES) == ("", False)
    assert fold("None", CATEGORIES) == ("", False) and fold("No complaint.", CATEGORIES) == ("", False)
    assert fold("Receipt generation", TASKS) == ("document_generation", True)
    assert normalise_label("Colour-Drift!") == "colour drift"


def test_open_labels_differing_in_filler_words_or_plurals_are_one_category():
    """An LLM names one complaint several ways; the open taxonomy must not split it by wording."""
    names = ["Watermark added", "added watermarks", "watermark issue", "Unwanted watermark", "WATERMARKS"]
    assert {fold(n, CATEGORIES) for n in names} == {("watermark", False)}
    assert fold("Wrong aspect ratios", CATEGORIES) == ("aspect_ratio", False)
    assert fold("glass reflections", CATEGORIES) == ("glass_reflection", False)
    assert fold("bad", CATEGORIES) == ("bad", False)  # only filler: kept whole, not emptied
    assert fold("loss of gloss", CATEGORIES) == ("loss_gloss", False)  # -ss words are not plurals
    assert fold("Watermark added", CATEGORIES) != fold("Watermark removed", CATEGORIES)


def test_labels_in_other_scripts_are_folded_or_kept_open_never_dropped():
    """An LLM answering in the feedback's language: a Chinese or accented label was normalised to nothing (or
    to a mangled ASCII name) and the complaint silently became "no label"."""
    assert normalise_label("Dérive de couleur") == "dérive de couleur"
    assert fold("颜色偏黄", CATEGORIES) == ("color_drift", True)  # the lexicon's Chinese keyword
    assert fold("人脸变了", CATEGORIES) == ("identity_shift", True)
    assert fold("文字错误", CATEGORIES) == ("文字错误", False)  # kept as an open category
    assert fold("Dérive de couleur", CATEGORIES) == ("dérive_de_couleur", False)
    assert fold("虚拟试穿", TASKS) == ("virtual_try_on", True)
    assert fold("—", CATEGORIES) == ("", False)  # nothing but punctuation is no label


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("everything turned yellow", {"color_drift"}),
        ("it changed her face, that is not the same person anymore", {"identity_shift"}),
        ("the text is misspelled", {"text_rendering_error"}),
        ("six fingers again", {"anatomy_error"}),
        ("hands and faces are still hit and miss", {"anatomy_error"}),
        ("the hands look deformed", {"anatomy_error"}),
        ("she has distorted hands and fused fingers", {"anatomy_error"}),
        ("手指变形了", {"anatomy_error"}),
        ("the rocket has no exhaust flame", {"missing_element"}),
        ("the skin has that plastic look", {"style_mismatch"}),
        # prompts (posts of the analysis split) name hands, materials and "with no ..." without complaining:
        # texts of the shared prompt collection the lexicon used to label as complaints
        ("a plush doll gently held in two hands, fingers clearly visible", set()),
        ("角色的左手比心（手指上方有红色爱心元素）", set()),
        ("a large glowing logo, with no additional text or label", set()),
        ('"materials": "Glass, holographic plastic, glowing metal edges"', set()),
        ("great result, love it", set()),
    ],
)
def test_rules_lexicon(text, expected):
    assert {lab.category for lab in rules_labels(text, CATEGORIES)} == expected


def test_rules_task_labels_new_tasks():
    from echo_builder.analysis.labelling import rules_labels as labels

    assert [
        x.category
        for x in labels("a receipt from a coffee shop with a total of $12.40", TASKS, first_only=True)
    ] == ["document_generation"]
    assert [x.category for x in labels("put this jacket on me, virtual try-on", TASKS, first_only=True)] == [
        "virtual_try_on"
    ]
    assert labels("zzz", TASKS, first_only=True) == []


def test_shared_data_rules_build_with_reference_sets(shared_data, tmp_path):
    build = tmp_path / "build"
    result = _cli(
        "build",
        shared_data / "prompt_collections" / "awesome-gpt4o-images",
        shared_data / "x_graphql",
        "--backend",
        "rules",
        "--target-model",
        "GPT-4o",
        "--out",
        build,
    )
    assert result.exit_code == 0, result.output
    refs = shared_data / "reference_prompts"
    if not refs.is_dir():
        pytest.skip("reference_prompts not in the shared data")
    out = tmp_path / "analysis"
    result = _cli(
        "analyze",
        build,
        "--out",
        out,
        "--compare",
        refs / "drawbench.txt",
        "--compare",
        refs / "editeval_v1.txt",
        "--n-boot",
        "30",
    )
    assert result.exit_code == 0, result.output
    doc = json.loads((out / "analysis.json").read_text())
    assert_md_matches_json(out, doc)
    sets = {s["name"]: s for s in doc["diversity"]["sets"]}
    for name, file in (("drawbench", "drawbench.txt"), ("editeval_v1", "editeval_v1.txt")):
        prompts = [
            line.strip() for line in (refs / file).read_text(encoding="utf-8").splitlines() if line.strip()
        ]
        assert sets[name]["n_prompts"] == len(prompts)
        assert sets[name]["unique_first_bigrams"] == independent_first_bigrams(prompts)
    for config in ("text_to_image", "image_to_image"):
        prompts = _prompts(build, config)
        if prompts:
            assert sets[f"build:{config}"]["unique_first_bigrams"] == independent_first_bigrams(prompts)
    # the common size is the smallest set (EditEval's 50 prompts or a smaller build config)
    assert doc["diversity"]["sample_size"] == min(s["n_prompts"] for s in sets.values())
    for stats in sets.values():
        low, high = stats["at_sample_size"]["unique_first_bigrams"]["ci"]
        assert low <= stats["at_sample_size"]["unique_first_bigrams"]["mean"] <= high
        assert stats["at_sample_size"]["unique_first_bigrams"]["mean"] <= stats["unique_first_bigrams"]
    # the collection's 100 prompts all get a task or are counted unlabelled, never dropped
    tasks = doc["tasks"]
    assert (
        sum(t["items"] for t in tasks["tasks"]) + tasks["summary"]["unlabelled"] == tasks["summary"]["items"]
    )
    assert tasks["summary"]["items"] == sum(
        len(_prompts(build, c)) for c in ("text_to_image", "image_to_image", "analysis")
    )
    assert any(t["new_task"] for t in tasks["tasks"])


def test_plots_count_in_whole_numbers_and_leave_a_missing_perplexity_out(
    demo_analysis, tmp_path, monkeypatch
):
    """Counts and days get whole-number ticks (no "1.5 samples"); a set without a perplexity gets no bar, where
    a 0 would read as the most fluent set."""
    import math

    from echo_builder.analysis import report

    _, doc = demo_analysis
    doc = json.loads(json.dumps(doc))
    names = [s["name"] for s in doc["diversity"]["sets"]]
    doc["fluency"]["sets"] = [{"name": names[0], "perplexity": 12.5}]  # the other sets were not scored
    figures = {}
    monkeypatch.setattr(report, "_save", lambda fig, root, relative: figures.__setitem__(relative, fig))
    report.write_plots(doc, tmp_path)
    for key, axis in (("failures", "x"), ("tasks", "x"), ("activity", "x"), ("activity", "y")):
        ax = figures[report.PLOTS[key]].axes[0]
        ticks = ax.get_xticks() if axis == "x" else ax.get_yticks()
        assert len(ticks) >= 2 and all(float(t).is_integer() for t in ticks), (key, axis, ticks)
    # distinct-2 is drawn at the common size, as the docs say sets are to be compared (not the full-set value)
    distinct = figures[report.PLOTS["diversity"]].axes[1]
    expected = [s["at_sample_size"]["distinct_2"]["mean"] for s in doc["diversity"]["sets"]]
    assert [bar.get_height() for bar in distinct.patches] == expected
    assert "per " in distinct.get_title()
    perplexity = figures[report.PLOTS["diversity"]].axes[2]
    heights = [bar.get_height() for bar in perplexity.patches]
    assert heights[0] == 12.5 and all(math.isnan(h) for h in heights[1:]) and len(heights) == len(names)
