"""``echo-bench analyze``: inputs, options and the output folder (errors are one line, before anything is written)."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from echo_builder.analysis.activity import activity, parse_time
from echo_builder.analysis.diversity import distinct_n, diversity, first_bigram, unique_first_bigrams
from echo_builder.analysis.inputs import read_prompt_file
from echo_builder.cli import cli
from tests.helpers.analysis import assert_md_matches_json
from tests.helpers.benchmark import make_benchmark

PROMPTS = ["Change the sky to red", "change THE car", "Add a hat", "A", "add a hat!"]


def _run(*args):
    return CliRunner().invoke(cli, [str(a) for a in args])


@pytest.fixture
def bench(tmp_path):
    return make_benchmark(
        tmp_path / "bench", "image_to_image", [{"id": f"s{i}", "prompt": p} for i, p in enumerate(PROMPTS)]
    )


def _one_error_line(result, *fragments):
    assert result.exit_code == 1, result.output
    assert result.output.startswith("error: ") and result.output.count("\n") == 1, result.output
    for fragment in fragments:
        assert fragment in result.output, result.output


def test_first_bigrams_and_distinct_n_by_hand():
    assert first_bigram("Change the sky") == ("change", "the") and first_bigram("A") is None
    # (change, the) twice, (add, a) twice, "A" has none
    assert unique_first_bigrams(PROMPTS) == 2
    # unigrams: change the sky to red change the car add a hat a add a hat -> 15 tokens, 9 types
    assert distinct_n(PROMPTS, 1) == pytest.approx(9 / 15)
    # bigrams: 4 + 2 + 2 + 0 + 2 = 10, types: change the, the sky, sky to, to red, the car, add a, a hat -> 7
    assert distinct_n(PROMPTS, 2) == pytest.approx(7 / 10)
    assert distinct_n(["A"], 2) is None


def test_subset_statistics_intervals_contain_their_means():
    prompts = [f"prompt number {i % 7} about thing {i}" for i in range(40)]
    stats = diversity(prompts, sample_size=10, n_boot=100, seed=1)
    assert stats["unique_first_bigrams"] == 1 and stats["n_prompts"] == 40
    for name in ("unique_first_bigrams", "distinct_1", "distinct_2"):
        at = stats["at_sample_size"][name]
        assert at["ci"][0] <= at["mean"] <= at["ci"][1]
    assert stats["mean_words_ci"][0] <= stats["mean_words"] <= stats["mean_words_ci"][1]
    assert diversity(prompts, sample_size=10, n_boot=100, seed=1) == stats  # seeded
    with pytest.raises(Exception, match="sample size"):
        diversity(prompts, sample_size=41)


def test_intervals_contain_their_means_when_the_subset_values_are_lumpy():
    # 199 prompts start "change the", one starts "add a": a pair of prompts holds 2 first bigrams in ~1% of the
    # subsets, so both percentiles are 1.0 while the mean is above 1 (it was reported outside [1.0, 1.0])
    prompts = [f"change the cat {i}" for i in range(199)] + ["add a dog"]
    stats = diversity(prompts, sample_size=2, n_boot=1000, seed=0)
    at = stats["at_sample_size"]["unique_first_bigrams"]
    assert 1.0 < at["mean"] < 1.05
    assert at["ci"] == [1.0, at["mean"]]
    for name in ("distinct_1", "distinct_2"):
        low, high = stats["at_sample_size"][name]["ci"]
        assert low <= stats["at_sample_size"][name]["mean"] <= high
    # one long prompt among many short ones: the bootstrap mean's interval holds the full-set mean
    lumpy = diversity(["a b"] * 300 + ["w " * 500], n_boot=200, seed=0)
    assert lumpy["mean_words_ci"][0] <= lumpy["mean_words"] <= lumpy["mean_words_ci"][1]


def test_a_sample_size_above_a_small_set_compares_the_others(bench, tmp_path):
    """docs/analysis.md advises --sample-size when one set is tiny; it used to be refused as soon as any set was
    smaller. The small set now keeps its full-set values with n/a at the common size."""
    reference = tmp_path / "ref.txt"
    reference.write_text("\n".join(f"{w} the {i}" for i, w in enumerate(["add", "make", "turn"] * 4)))
    out = tmp_path / "out"
    result = _run(
        "analyze", bench, "--out", out, "--compare", reference, "--sample-size", "8", "--n-boot", "20"
    )
    assert result.exit_code == 0, result.output
    doc = json.loads((out / "analysis.json").read_text())
    sets = {s["name"]: s for s in doc["diversity"]["sets"]}
    assert doc["diversity"]["sample_size"] == 8
    small = sets["build:image_to_image"]  # the bench's 5 prompts
    assert small["n_prompts"] == 5 and small["unique_first_bigrams"] == 2 and small["sample_size"] is None
    assert small["at_sample_size"]["unique_first_bigrams"] == {"mean": None, "ci": [None, None]}
    ref = sets["ref"]
    assert ref["sample_size"] == 8 and ref["at_sample_size"]["unique_first_bigrams"]["mean"] == 3.0
    markdown = (out / "analysis.md").read_text()
    assert "without a value at it (n/a): build:image_to_image." in markdown
    assert_md_matches_json(out, doc)


def test_activity_days_relative_to_launch():
    from datetime import date

    rows = [
        ("a", "2025-06-10T00:00:00Z"),
        ("a", "2025-06-09T23:59:59+00:00"),
        ("b", "2025-06-12T12:00:00"),
        ("a", None),
        ("b", "soon"),
    ]
    act = activity(rows, date(2025, 6, 10))
    assert [(d["day"], d["samples"]) for d in act["days"]] == [(-1, 1), (0, 1), (1, 0), (2, 1)]
    assert act["undated"] == {"a": 1, "b": 1} and act["peak_day"] == -1
    assert parse_time("2025-06-10T02:00:00+02:00").hour == 0
    # what the source adapters read: X's legacy format and Unix seconds (a hand-made or imported benchmark)
    legacy = activity(
        [("a", "Wed Jun 11 19:22:10 +0000 2025"), ("a", 1749513600), ("a", "1749513599")], date(2025, 6, 10)
    )
    assert [(d["day"], d["samples"]) for d in legacy["days"]] == [(-1, 1), (0, 1), (1, 1)] and not legacy[
        "undated"
    ]
    assert parse_time(True) is None and parse_time("  ") is None and parse_time(float("nan")) is None
    first = activity(rows, None)
    assert first["reference"] == "first post" and first["origin"] == "2025-06-09"


def test_reference_files(tmp_path):
    txt = tmp_path / "set.txt"
    txt.write_text("\ufeffa cat\r\n\r\n  a dog  \n", encoding="utf-8")
    assert read_prompt_file(txt) == ["a cat", "a dog"]
    csv = tmp_path / "set.csv"
    csv.write_text('prompt,category\n"a cat, sitting",animals\na dog,animals\n', encoding="utf-8")
    assert read_prompt_file(csv) == ["a cat, sitting", "a dog"]
    import pandas as pd

    pq_file = tmp_path / "set.parquet"
    pd.DataFrame({"instruction": ["make it red", None, "add a hat"], "n": [1, 2, 3]}).to_parquet(pq_file)
    assert read_prompt_file(pq_file, "instruction") == ["make it red", "add a hat"]
    with pytest.raises(Exception, match="--compare-column"):
        read_prompt_file(pq_file)
    gz = tmp_path / "set.txt.gz"
    gz.write_bytes(b"x")
    with pytest.raises(Exception, match="unknown format"):
        read_prompt_file(gz)


def test_shared_reference_prompts_are_read_whole(shared_data):
    folder = shared_data / "reference_prompts"
    if not folder.is_dir():
        pytest.skip("reference_prompts not in the shared data")
    prompts = read_prompt_file(folder / "i2ebench_original.txt")
    lines = [
        line
        for line in (folder / "i2ebench_original.txt").read_text(encoding="utf-8").split("\n")
        if line.strip()
    ]
    assert len(prompts) == len(lines) == 2218
    assert unique_first_bigrams(prompts) < unique_first_bigrams(read_prompt_file(folder / "partiprompts.txt"))


def test_missing_benchmark_is_one_error_line(tmp_path):
    _one_error_line(_run("analyze", tmp_path / "nope", "--out", tmp_path / "out"), "nope")
    assert not (tmp_path / "out").exists()


def test_folder_without_configs_is_one_error_line(tmp_path):
    (tmp_path / "bench" / "images").mkdir(parents=True)
    _one_error_line(
        _run("analyze", tmp_path / "bench", "--out", tmp_path / "out"), "holds no benchmark config", "images"
    )
    assert not (tmp_path / "out").exists()


def test_foreign_output_folder_is_refused_and_untouched(bench, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    _one_error_line(_run("analyze", bench, "--out", out), "not empty")
    assert sorted(p.name for p in out.iterdir()) == ["notes.txt"]


def test_another_commands_output_folder_is_refused(bench, tmp_path):
    from echo_dataset.safe_io import mark_output

    out = tmp_path / "out"
    mark_output(out, "judge")
    _one_error_line(_run("analyze", bench, "--out", out), "judge")


@pytest.mark.parametrize(
    ("args", "fragments"),
    [
        (["--backend", "nosuch:model"], ["nosuch"]),
        (["--backend", "rules", "-o", "temperature=0"], ["rules backend takes no options"]),
        (["--base-url", "http://127.0.0.1:1/v1"], ["--base-url applies to an openai: labeller only"]),
        (
            ["--sample-size", "99"],
            ["--sample-size 99", "larger than every prompt set (the largest has 5 prompts)"],
        ),
        (["--n-boot", "0"], ["--n-boot"]),
        (["--lm-option", "batch_size=4"], ["--lm-option needs --lm"]),
        (["--lm", "x", "--lm-option", "colour=red"], ["unknown key(s) colour"]),
        (["--compare", "missing.txt"], ["missing.txt", "no such file"]),
        (["--compare", "."], ["is a folder"]),
    ],
)
def test_bad_options_fail_before_anything_is_written(bench, tmp_path, args, fragments):
    out = tmp_path / "out"
    _one_error_line(_run("analyze", bench, "--out", out, *args), *fragments)
    assert not out.exists()


def test_two_reference_sets_with_one_name_are_refused(bench, tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    (tmp_path / "a" / "set.txt").write_text("a cat\n")
    (tmp_path / "b" / "set.txt").write_text("a dog\n")
    result = _run(
        "analyze",
        bench,
        "--out",
        tmp_path / "out",
        "--compare",
        tmp_path / "a" / "set.txt",
        "--compare",
        tmp_path / "b" / "set.txt",
    )
    _one_error_line(result, "already called 'set'")


def test_benchmark_without_a_launch_date_counts_from_the_first_post(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    (tmp_path / "bench" / "text_to_image").mkdir(parents=True)
    table = pa.table(
        {
            "id": ["a", "b"],
            "prompt": ["a cat", "a dog"],
            "created_at": ["2025-01-02T05:00:00Z", "2025-01-04T01:00:00Z"],
        }
    )
    pq.write_table(table, tmp_path / "bench" / "text_to_image" / "test-00000-of-00001.parquet")
    result = _run("analyze", tmp_path / "bench", "--out", tmp_path / "out", "--n-boot", "10")
    assert result.exit_code == 0, result.output
    doc = json.loads((tmp_path / "out" / "analysis.json").read_text())
    assert doc["activity"]["reference"] == "first post"
    assert [(d["day"], d["samples"]) for d in doc["activity"]["days"]] == [(0, 1), (1, 0), (2, 1)]
    assert doc["failures"]["categories"] == [] and doc["failures"]["summary"]["items"] == 0


def test_feedback_as_one_string_or_a_number_and_repeated_ids(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    from echo_builder.analysis.inputs import read_benchmark

    folder = tmp_path / "bench"
    (folder / "text_to_image").mkdir(parents=True)
    table = pa.table(
        {
            "id": ["a", "a", "b"],
            "prompt": ["a cat", "a dog", "a cow"],
            "community_feedback": ["everything turned yellow", "", "x"],
        }
    )
    pq.write_table(table, folder / "text_to_image" / "test-00000-of-00001.parquet")
    (folder / "analysis").mkdir()
    pq.write_table(
        pa.table({"id": ["c"], "prompt": ["a post"], "community_feedback": [7]}),
        folder / "analysis" / "test-00000-of-00001.parquet",
    )
    bench = read_benchmark(folder)
    # one string is one feedback text (not one text per character); a number is no feedback, and said so
    assert [s.feedback for s in bench.samples] == [("everything turned yellow",), (), ("x",), ()]
    assert any("sample id 'a' is repeated" in p for p in bench.problems)
    assert any("community_feedback is int, not a list" in p for p in bench.problems)
    out = tmp_path / "out"
    assert _run("analyze", folder, "--out", out, "--n-boot", "10").exit_code == 0
    doc = json.loads((out / "analysis.json").read_text())
    assert doc["input"]["n_problems"] == len(bench.problems) == 2
    assert "Input problems: 2 " in (out / "analysis.md").read_text()
    assert_md_matches_json(out, doc)


def test_example_quotes_carry_no_account_of_a_real_user(tmp_path):
    """A benchmark that was not pseudonymised (an import, a hand-made folder): handles, post and profile URLs
    are masked in the report's examples, in analysis.md and in analysis.json alike."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    folder = tmp_path / "bench"
    (folder / "image_to_image").mkdir(parents=True)
    feedback = [
        "@RealPerson it turned everything yellow, see https://x.com/RealPerson/status/19",
        "the face changed, compare bsky.app/profile/real.bsky.social and u/someone_else's try",
        "thanks @user_1a2b3c4d, still yellow",  # a build's pseudonym stays as it is
    ]
    pq.write_table(
        pa.table(
            {
                "id": ["s1", "s2", "s3"],
                "prompt": ["make the photo warmer @RealPerson", "restyle her portrait", "add a hat"],
                "community_feedback": [[f] for f in feedback],
            }
        ),
        folder / "image_to_image" / "test-00000-of-00001.parquet",
    )
    out = tmp_path / "out"
    assert _run("analyze", folder, "--out", out, "--n-boot", "10").exit_code == 0
    report = (out / "analysis.md").read_text()
    document = (out / "analysis.json").read_text()
    for text in (report, document):
        for account in ("RealPerson", "real.bsky.social", "someone_else"):
            assert account not in text
    doc = json.loads(document)
    color = next(c for c in doc["failures"]["categories"] if c["category"] == "color_drift")
    assert [e["text"] for e in color["examples"]] == [
        "@user it turned everything yellow, see https://x.com/user/status/19",
        "thanks @user_1a2b3c4d, still yellow",
    ]
    assert "https://x.com/user/status/19" in report
    assert "thanks @user_1a2b3c4d, still yellow" in report


# -- the output folder: links, read-only folders, a full disk (as every writing command) -----------------------
from tests.reliability.test_outdir import read_only  # noqa: E402, F401  (the fixture)


@pytest.mark.parametrize("planted", ["analysis.md", "plots", "labels.jsonl"])
def test_a_link_planted_in_an_earlier_analysis_is_refused_and_its_target_untouched(bench, tmp_path, planted):
    out = tmp_path / "out"
    assert _run("analyze", bench, "--out", out, "--n-boot", "10").exit_code == 0
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "keep.txt").write_text("mine")
    target = outside if planted == "plots" else outside / "keep.txt"
    victim = out / planted
    if victim.is_dir():
        import shutil

        shutil.rmtree(victim)
    else:
        victim.unlink()
    victim.symlink_to(target, target_is_directory=target.is_dir())
    _one_error_line(_run("analyze", bench, "--out", out, "--n-boot", "10"), "symbolic link")
    assert (
        sorted(p.name for p in outside.iterdir()) == ["keep.txt"]
        and (outside / "keep.txt").read_text() == "mine"
    )


def test_a_read_only_output_folder_is_one_error_line(bench, tmp_path, read_only):  # noqa: F811
    out = tmp_path / "ro"
    out.mkdir()
    read_only(out)
    _one_error_line(_run("analyze", bench, "--out", out), str(out), "Read-only file system")
    assert list(out.iterdir()) == []


def test_a_failure_while_making_the_report_keeps_the_previous_pair(bench, tmp_path, monkeypatch):
    import errno

    out = tmp_path / "out"
    assert _run("analyze", bench, "--out", out, "--n-boot", "10").exit_code == 0
    before = {name: (out / name).read_bytes() for name in ("analysis.json", "analysis.md")}
    from echo_builder.analysis import run as run_module

    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device", str(out / "analysis.md"))

    monkeypatch.setattr(run_module, "render_markdown", full)
    _one_error_line(_run("analyze", bench, "--out", out, "--n-boot", "11"), "No space left on device")
    # the earlier report and its JSON, still a matching pair; no temporary file left behind
    assert {name: (out / name).read_bytes() for name in before} == before
    assert not list(out.rglob(".*.tmp-*"))
