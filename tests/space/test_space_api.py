"""The Space driven through its API (``gradio_client`` over HTTP on 127.0.0.1) on the demo data.

Every expected value is computed independently of the Space: sample lists and fields from the Parquet files with
pyarrow, search results with a regular expression, the leaderboard with ``leaderboard_from_run`` on the same run,
and the metrics with ``echo_builder.scoring`` on the same image pair.
"""

from __future__ import annotations

import io
import os
import subprocess
import sys
import time
import urllib.request

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest
from PIL import Image

from tests.space.conftest import N_BOOT, SPACE_DIR, free_port, sample_ids_in_prompt_or_feedback

pytestmark = [
    pytest.mark.slow,
    # gradio's own use of pandas options (not this package's)
    pytest.mark.filterwarnings("ignore:'future.no_silent_downcasting' is deprecated"),
    pytest.mark.filterwarnings("ignore:The copy keyword is deprecated"),
]


@pytest.fixture(scope="module")
def client(space, tmp_path_factory):
    from gradio_client import Client

    return Client(space.local_url, verbose=False, download_files=str(tmp_path_factory.mktemp("client-files")))


def _rows(demo_dir, config: str) -> list[dict]:
    return pq.read_table(demo_dir / "benchmark" / config / "test-00000-of-00001.parquet").to_pylist()


def _table(value: dict) -> list[dict]:
    """A Dataframe value from the client (``headers`` and ``data``) as a list of row dicts."""
    return [dict(zip(value["headers"], row, strict=True)) for row in value["data"]]


def _decoded(entry) -> np.ndarray:
    return np.asarray(Image.open(io.BytesIO(entry["bytes"])).convert("RGB"))


# ------------------------------------------------------------------------------------------------- Benchmark tab


@pytest.mark.parametrize("config", ["image_to_image", "text_to_image", "analysis"])
def test_every_sample_of_a_config_is_listed(client, demo_dir, config):
    rows = _rows(demo_dir, config)
    count, table, dropdown = client.predict(config, "", [], api_name="/filter_samples")
    listed = _table(table)
    assert [r["id"] for r in listed] == [r["id"] for r in rows]
    assert count.startswith(f"**{len(rows)}** of {len(rows)} samples")
    assert [value for _, value in dropdown["choices"]] == [r["id"] for r in rows]
    assert dropdown["value"] == rows[0]["id"]
    # the menu's labels: the id and the start of the prompt
    for (label, _), row in zip(dropdown["choices"], rows, strict=True):
        assert label.startswith(f"{row['id']} · {row['prompt'][:20]}")
    for shown, row in zip(listed, rows, strict=True):
        assert shown["inputs"] == len(row["input_image_urls"]) and shown["outputs"] == len(
            row["output_image_urls"]
        )
        assert shown["feedback"] == len(row["community_feedback"])
        assert row["prompt"].startswith(shown["prompt"].rstrip("…"))


def test_search_and_flag_filters_pick_the_right_samples(client, demo_dir):
    rows = _rows(demo_dir, "image_to_image")
    expected = sample_ids_in_prompt_or_feedback(rows, "yellow")
    assert 0 < len(expected) < len(rows)  # the demo has both kinds: the filter must really choose
    _, table, _ = client.predict("image_to_image", "YELLOW", [], api_name="/filter_samples")
    assert [r["id"] for r in _table(table)] == expected

    both = [i for i in expected if i in sample_ids_in_prompt_or_feedback(rows, "sky")]
    _, table, _ = client.predict("image_to_image", "yellow sky", [], api_name="/filter_samples")
    assert [r["id"] for r in _table(table)] == both and len(both) == 1

    faces = [r["id"] for r in rows if r["face_identity"] is True]
    assert 0 < len(faces) < len(rows)
    count, table, _ = client.predict("image_to_image", "", ["face_identity"], api_name="/filter_samples")
    assert [r["id"] for r in _table(table)] == faces and count.startswith(f"**{len(faces)}** of {len(rows)}")

    count, table, dropdown = client.predict("image_to_image", "no-such-word", [], api_name="/filter_samples")
    assert _table(table) == [] and count.startswith("**0** of") and dropdown["value"] is None


def test_a_sample_shows_prompt_feedback_flags_links_and_images(client, demo_dir):
    from echo_builder.judge.run import discover_outputs

    outputs = discover_outputs(demo_dir / "outputs")
    for row in _rows(demo_dir, "image_to_image"):
        prompt, details, inputs, community, models, feedback, flags, links = client.predict(
            "image_to_image", row["id"], api_name="/show_sample"
        )
        assert prompt == row["prompt"] and row["id"] in details and "platform: x" in details
        assert [(f["post_url"], f["feedback"]) for f in _table(feedback)] == [
            (f["post_url"], f["feedback"]) for f in row["community_feedback"]
        ]
        names = {True: "yes", False: "no", None: "unknown"}
        assert {f["flag"]: f["applies"] for f in _table(flags)} == {
            name: names[row[name]]
            for name in ("no_color_shift", "structure", "face_identity", "text_rendering")
        }
        for url in [*row["source_post_urls"], *row["input_image_urls"], *row["output_image_urls"]]:
            assert f"<{url}>" in links
        # the images shown are the dataset's own, pixel for pixel (PNG, below the display size limit)
        for shown, stored in ((inputs, row["input_images"]), (community, row["output_images"])):
            assert len(shown) == len(stored) > 0
            for item, entry in zip(shown, stored, strict=True):
                assert os.path.isfile(item["image"])
                assert np.array_equal(np.asarray(Image.open(item["image"]).convert("RGB")), _decoded(entry))
        # one output per model that has this sample, captioned with the model, the file's own bytes
        assert [m["caption"] for m in models] == [m for m, files in outputs.items() if row["id"] in files]
        for item in models:
            with (
                open(item["image"], "rb") as shown,
                open(outputs[item["caption"]][row["id"]], "rb") as original,
            ):
                assert shown.read() == original.read()


def test_an_unknown_sample_is_a_clear_error(client):
    from gradio_client.exceptions import AppError

    with pytest.raises(AppError, match="no sample 'nope' in config 'image_to_image'"):
        client.predict("image_to_image", "nope", api_name="/show_sample")


# ----------------------------------------------------------------------------------------------- Leaderboard tab


@pytest.mark.parametrize(
    ("run", "missing"),
    [("image_to_image", "loss"), ("image_to_image", "skip"), ("verdicts-dataset", "loss")],
)
def test_leaderboard_matches_leaderboard_from_run(client, demo_dir, run, missing):
    from echo_builder.judge.leaderboard import leaderboard_from_run

    # the dataset folder holds the same verdicts as the run folder
    run_dir = demo_dir / "runs" / "image_to_image"
    expected = leaderboard_from_run(run_dir, missing=missing, n_boot=N_BOOT, seed=0).table
    summary, table, plots, failures, _ = client.predict(run, missing, api_name="/leaderboard")
    shown = _table(table)
    assert [r["model"] for r in shown] == list(expected["model"])
    assert [r["rank"] for r in shown] == list(range(1, len(expected) + 1))
    for got, (_, want) in zip(shown, expected.iterrows(), strict=True):
        for column in ("win_rate", "ci_low", "ci_high"):
            assert got[column] == pytest.approx(want[column], abs=5e-4)
        for column in ("bt_rating", "bt_ci_low", "bt_ci_high"):
            assert got[column] == pytest.approx(want[column], abs=0.05)
        for column in ("n_comparisons", "wins", "ties", "losses", "n_failures", "n_missing"):
            assert got[column] == want[column]
    assert "judges `openai:judge-a`, `openai:judge-b`" in summary and "mode `single`" in summary
    assert f"({N_BOOT} replicates)" in summary
    captions = [p["caption"] for p in plots]
    assert captions[:3] == [
        "Win rate with 95% bootstrap interval over prompts",
        "Bradley-Terry rating (Elo scale) with 95% interval",
        "Head to head: row model's win rate against the column model",
    ]
    for plot in plots:
        with Image.open(plot["image"]) as image:
            assert image.format == "PNG" and min(image.size) > 100
    # single-answer run: failures per model and judge are listed, and they add up to the table's n_failures
    per_model: dict[str, int] = {}
    for r in _table(failures["value"]):  # an update: the table and whether it is visible
        per_model[r["model"]] = per_model.get(r["model"], 0) + r["judge_failures"]
    assert per_model == {r["model"]: r["n_failures"] for r in shown}


def test_failures_and_missing_outputs_are_counted(client):
    """judge-b does not rate lumen-2's sunset edit: one failure beside lumen-2, counted, not scored; pixelforge-1
    lacks one output: it loses those comparisons by default, and they are left out with "skip"."""
    _, table, *_ = client.predict("image_to_image", "loss", api_name="/leaderboard")
    loss = {r["model"]: r for r in _table(table)}
    assert {m: r["n_failures"] for m, r in loss.items()} == {"lumen-2": 1, "nova-edit": 0, "pixelforge-1": 0}
    assert {m: r["n_missing"] for m, r in loss.items()} == {"lumen-2": 0, "nova-edit": 0, "pixelforge-1": 1}
    _, table, *_ = client.predict("image_to_image", "skip", api_name="/leaderboard")
    skip = {r["model"]: r for r in _table(table)}
    # 3 prompts x 2 opponents = 6 comparisons each; skipping drops pixelforge-1's 2 on the missing prompt
    assert loss["pixelforge-1"]["n_comparisons"] == 6 and skip["pixelforge-1"]["n_comparisons"] == 4


@pytest.mark.parametrize("missing", ["loss", "skip"])
def test_validity_card_beside_the_leaderboard(client, demo_dir, missing):
    """/validity_card: the card echo-bench leaderboard writes, computed on the same run; judge-b's one parse failure
    on lumen-2 (of 3 judged outputs) is its failure rate, and what is not measured is said so."""
    from echo_builder.judge.leaderboard import leaderboard_from_run
    from echo_builder.judge.results import read_run_meta
    from echo_builder.judge.validity import validity_markdown, validity_report
    from echo_builder.judge.verdicts_file import read_verdicts

    run_dir = demo_dir / "runs" / "image_to_image"
    board = leaderboard_from_run(run_dir, missing=missing, n_boot=N_BOOT, seed=0)
    expected = validity_markdown(
        validity_report(read_verdicts(run_dir), board, run_meta=read_run_meta(run_dir))
    )
    card = client.predict("image_to_image", missing, api_name="/validity_card")
    assert card.strip() == expected.strip()  # (Gradio drops the final newline)
    assert "| lumen-2 | openai:judge-b | 3 | 3 | 0 | 1 | 0 | 0 | 0.333 | 0.000 |" in card
    assert "| pixelforge-1 | openai:judge-a | 3 | 2 | 1 | 0 | 0 | 0 | 0.000 | 0.000 |" in card
    assert f"a missing output: `{missing}`" in card
    assert "## Anchor drift" in card and card.count("Not measured:") == 3


def test_paper_win_rates_beside_the_run(client):
    """/paper_win_rates: ECHO's published image-to-image win rates under the run, labelled from the paper; the
    demo's fictional models are not in the paper, so every paper model is listed on its own row."""
    heading, table = client.predict("image_to_image", api_name="/paper_win_rates")
    assert "from the paper" in heading and "image_to_image" in heading
    rows = _table(table)
    paper = {r["paper_model"]: r["paper_win_rate"] for r in rows if r["paper_model"]}
    assert paper["4o Image Gen"] == 0.81 and paper["Anole"] == 0.07 and len(paper) == 8
    assert {r["model"] for r in rows if r["model"]} == {"lumen-2", "nova-edit", "pixelforge-1"}


# ------------------------------------------------------------------------------------------- Metric playground


@pytest.fixture(scope="module")
def pair(demo_dir, tmp_path_factory):
    """The portrait sample's input (from the dataset) and lumen-2's yellow-cast output, as files."""
    row = next(r for r in _rows(demo_dir, "image_to_image") if "woman" in r["prompt"])
    folder = tmp_path_factory.mktemp("pair")
    source = folder / "input.png"
    source.write_bytes(row["input_images"][0]["bytes"])
    return source, demo_dir / "outputs" / "lumen-2" / f"{row['id']}.png", row["prompt"]


def test_playground_color_shift_and_reasons(client, pair):
    from gradio_client import handle_file

    from echo_builder.scoring.color import color_shift

    source, output, prompt = pair
    table, swatch, text = client.predict(
        handle_file(str(source)), handle_file(str(output)), prompt, api_name="/score_pair"
    )
    rows = {r["metric"]: r for r in _table(table)}
    assert list(rows) == [
        "color_shift",
        "structure_distance",
        "face_identity",
        "text_rendering",
        "text_accuracy",
    ]
    expected = color_shift([[source]], [output])
    assert rows["color_shift"]["value"] == pytest.approx(expected.values[0], abs=1e-6)
    assert expected.values[0] > 20  # lumen-2's yellow cast: a large shift, mostly a blue drop
    db = expected.extras["deltas"][0][2]
    assert f"B {db:+.2f}" in rows["color_shift"]["note"] and db < -20
    assert rows["color_shift"]["better"] == "lower" and rows["face_identity"]["better"] == "higher"
    assert f"{expected.values[0]:.2f} levels" in text
    # the swatch: input mean color left, output mean color right, rounded to 8-bit levels
    image = np.asarray(Image.open(swatch).convert("RGB"))
    h, w, _ = image.shape
    assert tuple(image[h // 2, w // 4]) == tuple(round(c) for c in expected.extras["input_means"][0])
    assert tuple(image[h // 2, 3 * w // 4]) == tuple(round(c) for c in expected.extras["output_means"][0])
    # no DINO weights and no judge in this Space: NaN (empty) with the reason, never 0
    assert (
        rows["structure_distance"]["value"] is None and "--dino-weights" in rows["structure_distance"]["note"]
    )
    assert rows["text_rendering"]["value"] is None and "needs a VLM judge" in rows["text_rendering"]["note"]


def test_playground_face_identity_is_the_scoring_function(client, pair):
    pytest.importorskip("dlib")
    from gradio_client import handle_file

    from echo_builder.scoring.faces import face_identity

    source, output, _ = pair
    table, _, _ = client.predict(
        handle_file(str(source)), handle_file(str(output)), "", api_name="/score_pair"
    )
    row = next(r for r in _table(table) if r["metric"] == "face_identity")
    expected = face_identity([[source]], [output], backend="dlib")
    assert expected.nan_reasons[0] is None  # the demo's portrait has a face on both sides
    assert row["value"] == pytest.approx(expected.values[0], abs=1e-6)
    assert expected.extras["backend"] in row["note"] and "1 face(s) in the input" in row["note"]


def test_playground_without_input_and_with_a_broken_file(client, pair, tmp_path):
    from gradio_client import handle_file
    from gradio_client.exceptions import AppError

    from echo_builder.scoring.base import NO_INPUT_IMAGES

    _, output, _ = pair
    table, swatch, text = client.predict(None, handle_file(str(output)), "", api_name="/score_pair")
    rows = {r["metric"]: r for r in _table(table)}
    for name in ("color_shift", "structure_distance", "face_identity"):
        assert rows[name]["value"] is None and rows[name]["note"] == NO_INPUT_IMAGES
    assert swatch is None and "NaN" in text
    broken = tmp_path / "broken.png"
    broken.write_bytes(b"\x89PNG\r\n\x1a\n not really")
    with pytest.raises(AppError):
        client.predict(handle_file(str(broken)), handle_file(str(output)), "", api_name="/score_pair")


def test_playground_text_rendering_with_a_judge(echo_space, demo_dir, pair, openai_server):
    """With --judge, text rendering asks the judge (a loopback fake) and rescales its [[N]] to [0, 1]."""
    EchoSpace, SpaceSettings = echo_space.EchoSpace, echo_space.SpaceSettings

    openai_server.reply = lambda body: "The sign text is right. [[8]]"
    source, output, prompt = pair
    space = EchoSpace(
        SpaceSettings(
            benchmark=str(demo_dir / "benchmark"),
            judges=("openai:reader",),
            judge_options={"openai:reader": {"base_url": openai_server.base_url}},
            face_backend=None,
        )
    )
    table, _, _ = space.score_pair(str(source), str(output), prompt)
    row = table.set_index("metric").loc["text_rendering"]
    assert row["value"] == pytest.approx((8 - 1) / 9, abs=1e-6) and "openai:reader: 8" in row["note"]
    assert openai_server.calls == 1
    faces = table.set_index("metric").loc["face_identity"]
    assert pd.isna(faces["value"]) and "no face backend" in faces["note"]
    table, _, _ = space.score_pair(str(source), str(output), "   ")
    assert table.set_index("metric").loc["text_rendering", "note"].startswith("not applicable")


# ---------------------------------------------------------------------------------------------------- About tab


def test_about_tab_shows_the_card_and_the_citation(space, demo_dir):
    import json

    from echo_builder.citation import ECHO_BIBTEX
    from echo_builder.scoring import METRIC_SPECS

    with urllib.request.urlopen(f"{space.local_url}config", timeout=30) as response:
        config = json.load(response)
    props = {c["props"].get("elem_id"): c["props"] for c in config["components"] if c["props"].get("elem_id")}
    intro, details = props["echo-about"]["value"], props["echo-about-card"]["value"]
    card = (demo_dir / "benchmark" / "README.md").read_text(encoding="utf-8")
    assert intro.startswith("## What ECHO is") and "arXiv 2510.15021" in intro
    assert "Lumen-2" in card and "Lumen-2" in details  # the card's own text (its target model) is shown
    assert "\npretty_name: " in card and "pretty_name: " not in details  # ... without its YAML front matter
    # how the data was made: the card's sections, nested under the tab's own headings
    assert "\n## Curation run\n" in card and "\n#### Curation run\n" in details
    # one citation, the package's: the card's own citation section is left out
    assert ECHO_BIBTEX.strip() in details and details.count("```bibtex") == 1
    metrics = _table(props["echo-about-metrics"]["value"])
    assert {m["metric"]: m["better"] for m in metrics} == {
        name: "higher" if spec.higher_is_better else "lower" for name, spec in METRIC_SPECS.items()
    }


# ----------------------------------------------------------------------------------------- starting the Space


def test_app_py_starts_the_space(demo_dir, tmp_path):
    """``python spaces_app/app.py --benchmark ... --port N`` serves the page on 127.0.0.1."""
    port = free_port()
    env = {**os.environ, "GRADIO_TEMP_DIR": str(tmp_path), "GRADIO_ANALYTICS_ENABLED": "False"}
    command = [
        sys.executable,
        str(SPACE_DIR / "app.py"),
        "--benchmark",
        str(demo_dir / "benchmark"),
        "--port",
        str(port),
    ]
    process = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=5) as response:
                    assert response.status == 200 and b"ECHO benchmark" in response.read()
                break
            except OSError:
                assert process.poll() is None, process.stdout.read().decode()
                assert time.monotonic() < deadline, "the Space did not start within 120 s"
                time.sleep(0.5)
    finally:
        process.terminate()
        process.wait(timeout=30)


def test_the_command_line_without_a_benchmark_says_how_to_give_one(echo_space, tmp_path, monkeypatch):
    from click.testing import CliRunner
    from echo_space.cli import main

    monkeypatch.delenv("ECHO_BENCHMARK", raising=False)
    result = CliRunner().invoke(main, [])
    assert result.exit_code == 2 and "--benchmark" in result.output
    result = CliRunner().invoke(main, ["--benchmark", str(tmp_path / "absent")])
    assert result.exit_code == 2 and "does not exist" in result.output and "Hub dataset id" in result.output
    help_text = CliRunner().invoke(main, ["--help"]).output
    for option in ("--benchmark", "--run", "--outputs", "--dino-weights", "--host", "--port"):
        assert option in help_text


def test_space_card_and_requirements(echo_space):
    """The Space's README carries the Hub's YAML, for the Gradio major installed; requirements install the package."""
    import gradio
    import yaml
    from packaging.requirements import Requirement

    text = (SPACE_DIR / "README.md").read_text(encoding="utf-8")
    meta = yaml.safe_load(text.split("---\n")[1])
    for key in (
        "title",
        "emoji",
        "colorFrom",
        "colorTo",
        "sdk",
        "sdk_version",
        "app_file",
        "pinned",
        "license",
    ):
        assert key in meta, key
    assert (
        meta["sdk"] == "gradio"
        and meta["license"] == "apache-2.0"
        and (SPACE_DIR / meta["app_file"]).is_file()
    )
    assert str(meta["sdk_version"]).split(".")[0] == gradio.__version__.split(".")[0]
    lines = (SPACE_DIR / "requirements.txt").read_text().splitlines()
    requirements = {r.name: r for r in (Requirement(x) for x in lines if x.strip() and not x.startswith("#"))}
    assert (
        "space" in requirements["echo-bench"].extras
        and gradio.__version__ in requirements["gradio"].specifier
    )


def test_settings_from_the_environment(echo_space):
    SpaceSettings = echo_space.SpaceSettings

    settings = SpaceSettings.from_env(
        {"ECHO_BENCHMARK": "org/echo", "ECHO_RUN": "runs/a org/verdicts", "ECHO_FACE_BACKEND": "none"}
    )
    assert settings.benchmark == "org/echo" and settings.runs == ("runs/a", "org/verdicts")
    assert settings.face_backend is None and settings.dino_weights is None and settings.judges == ()
    with pytest.raises(ValueError, match="ECHO_BENCHMARK"):
        SpaceSettings.from_env({})
    with pytest.raises(ValueError, match="n_boot"):
        SpaceSettings("org/echo", n_boot=0)
