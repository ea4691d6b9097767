"""Held-out cases of issue 13's classes found by an attack on the hardened main, one test per class.

Each was a traceback, a hang or a write outside the output folder before its fix: the official-release import
writing through a link and over a foreign folder; names and texts that are not valid UTF-8 (a model folder, a
command-line argument, a ``\\ud83d`` escape in a keyword file or a votes file); deep JSON, FIFOs and devices given
as keyword, votes or assignment files; a server URL that cannot be used; a damaged call-cache row; an out-of-range
seed; an unfilled judge prompt template.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner
from PIL import Image

from echo_builder.cli import cli
from tests.helpers.benchmark import make_benchmark, make_outputs

REPO = Path(__file__).resolve().parents[1]


def _run(*args: str):
    return CliRunner().invoke(cli, list(args))


def _one_error(result, *fragments: str) -> str:
    assert result.exit_code in (1, 2), result.output
    lines = [line for line in result.output.strip().splitlines() if not line.startswith("note:")]
    assert len(lines) == 1 and lines[0].startswith("error: "), result.output
    for fragment in fragments:
        assert fragment in lines[0], lines[0]
    return lines[0]


# ------------------------------------------------------------------------------------- import echo2025 folders
@pytest.fixture(scope="module")
def release(tmp_path_factory) -> dict[str, Path]:
    from tests.helpers.release import make_release

    return make_release(tmp_path_factory.mktemp("echo2025"))


def _import(release: dict[str, Path], out: Path):
    return _run(
        *("import", "echo2025", str(release["release"]), "--images", str(release["images"])),
        *("--offline", "--out", str(out)),
    )


def test_import_never_writes_through_a_link_in_its_folder(release, tmp_path):
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me")
    out = tmp_path / "out"
    assert _import(release, out).exit_code == 0
    for name in ("import.json", "README.md"):  # an earlier import, a link planted where the rerun writes
        (out / name).unlink()
        (out / name).symlink_to(victim)
        _one_error(_import(release, out), "link")
        assert victim.read_text() == "keep me"
        (out / name).unlink()
        (out / name).write_text("{}")


def test_import_refuses_a_folder_it_did_not_write_even_with_an_import_json(release, tmp_path):
    out = tmp_path / "mine"
    (out / "image_to_image").mkdir(parents=True)
    (out / "import.json").write_text("MY DATA")
    (out / "image_to_image" / "test-00000-of-00001.parquet").write_bytes(b"mine")
    _one_error(_import(release, out), "not empty")
    assert (out / "import.json").read_text() == "MY DATA"
    assert (out / "image_to_image" / "test-00000-of-00001.parquet").read_bytes() == b"mine"


def test_an_import_can_be_repeated_into_its_own_folder(release, tmp_path):
    out = tmp_path / "bench"
    assert _import(release, out).exit_code == 0
    again = _import(release, out)
    assert again.exit_code == 0, again.output
    assert json.loads((out / ".echo-bench.json").read_text())["kind"] == "import"


# ------------------------------------------------------------------------------------------ not valid UTF-8
@pytest.mark.skipif(sys.platform == "darwin", reason="macOS file systems refuse names that are not UTF-8")
def test_a_model_folder_whose_name_is_not_utf8_is_skipped_and_the_others_scored(tmp_path, caplog):
    grey = Image.new("RGB", (16, 16), (128, 128, 128))
    bench = make_benchmark(
        tmp_path / "bench", "image_to_image", [{"id": "s1", "prompt": "p", "inputs": [grey]}]
    )
    outputs = make_outputs(tmp_path / "outputs", {"good": {"s1": grey}})
    bad = os.fsencode(str(outputs)) + b"/nova\xffedit"
    os.mkdir(bad)
    Image.new("RGB", (16, 16), (200, 0, 0)).save(os.fsdecode(bad + b"/s1.png"))
    result = _run(
        *("metrics", "--benchmark", str(bench), "--config", "image_to_image", "--outputs", str(outputs)),
        *("--metric", "color_shift", "--out", str(tmp_path / "m")),
    )
    assert result.exit_code == 0, result.output
    summary = json.loads((tmp_path / "m" / "summary.json").read_text())
    assert [row["model"] for row in summary["summary"]] == ["good"]
    assert "not valid UTF-8" in caplog.text


def test_a_command_line_argument_that_is_not_utf8_is_one_error_line(tmp_path):
    name = os.fsdecode(b"GPT\xff4o")
    _one_error(
        _run("build", str(tmp_path), "--target-model", name, "--out", str(tmp_path / "o")), "not valid UTF-8"
    )
    assert not (tmp_path / "o").exists()


def test_surrogate_escapes_in_keyword_and_votes_files_are_repaired(tmp_path):
    from echo_builder.stages.query import load_keywords
    from echo_builder.stats import load_votes

    keywords = tmp_path / "k.json"
    keywords.write_text('[{"term": "Lumen\\ud83d"}]', encoding="utf-8")
    assert [k.term for k in load_keywords(keywords)] == ["Lumen\ufffd"]
    votes = tmp_path / "v.jsonl"
    votes.write_text('{"model_a": "a\\ud83d", "model_b": "b", "winner": "model_a"}\n', encoding="utf-8")
    assert load_votes(votes)["model_a"].tolist() == ["a\ufffd"]


# ------------------------------------------------------------------------- deep JSON, pipes and devices as files
@pytest.mark.parametrize("option", ["keywords", "votes", "human", "assignments"])
@pytest.mark.parametrize("kind", ["deep", "fifo", "dev_zero"])
def test_input_files_that_are_deep_pipes_or_devices_are_one_error_line(tmp_path, option, kind):
    if kind == "deep":
        path = tmp_path / "f.json"
        path.write_text("[" * 100_000)
    elif kind == "fifo":
        path = tmp_path / "f.json"
        os.mkfifo(path)
    else:
        path = Path("/dev/zero")
    if option == "keywords":
        args = (
            "build",
            str(tmp_path),
            "--keywords",
            str(path),
            "--launch-date",
            "2025-01-01",
            "--out",
            str(tmp_path / "o"),
        )
    elif option == "votes":
        args = ("leaderboard", "--votes", str(path))
    elif option == "human":
        run = tmp_path / "run"
        run.mkdir()
        args = ("agreement", str(run), "--human", str(path))
    else:
        from echo_builder.errors import ConfigError
        from echo_builder.release import read_assignments

        folder = tmp_path / "assignments"
        folder.mkdir()
        target = folder / "image_to_image.json"
        if kind == "deep":
            target.write_text("[" * 100_000)
        elif kind == "fifo":
            os.mkfifo(target)
        else:
            target.symlink_to("/dev/zero")
        with pytest.raises(ConfigError, match=r"nested deeper|not a regular file"):
            read_assignments(folder)
        return
    result = _run(*args)
    assert result.exit_code != 0 and "Traceback" not in result.output
    line = _one_error(result)
    assert "nested deeper" in line or "not a regular file" in line or "/dev/zero" in line, line


# --------------------------------------------------------------------------------------------- server URLs
@pytest.mark.parametrize(
    "url, fragment",
    [
        ("http://127.0.0.1:99999/v1", "Port out of range"),
        ("http://[::1/v1", "cannot be used"),
        ("ftp://127.0.0.1/v1", "http:// or https://"),
        ("http:///v1", "names no host"),
        ("http://user:SECRETKEY@127.0.0.1:0/v1", "port 0"),
    ],
)
def test_a_base_url_that_cannot_be_used_is_one_error_line_before_any_work(tmp_path, url, fragment):
    line = _one_error(_run("backends", "ping", "openai:vlm", "--base-url", url), fragment)
    assert "SECRETKEY" not in line
    result = _run(
        *("build", str(REPO / "tests" / "data" / "sources" / "posts.jsonl"), "--backend", "openai:vlm"),
        *("--base-url", url, "--target-model", "x", "--out", str(tmp_path / "o")),
    )
    _one_error(result, fragment)
    assert not (tmp_path / "o").exists()


# ----------------------------------------------------------------------------------------- damaged cache rows
@pytest.mark.parametrize("stored", ['{"text": "[[7]]"', "[1, 2]", '{"unexpected": true}'])
def test_a_damaged_cache_row_is_a_miss_not_a_failed_run(openai_server, tmp_path, stored):
    import sqlite3

    from echo_builder.backends import create_backend, user_message
    from echo_builder.backends.caller import CallRequest, ModelCaller, RetryPolicy
    from echo_builder.cache import CallCache

    def caller():
        return ModelCaller(
            create_backend("openai:vlm", base_url=openai_server.base_url),
            cache=CallCache(tmp_path / "cache"),
            retry=RetryPolicy(max_attempts=1),
        )

    request = CallRequest((user_message("rate it"),))
    first = caller().call(request)
    assert first.ok and openai_server.calls == 1
    with sqlite3.connect(tmp_path / "cache" / "calls.sqlite") as db:
        db.execute("UPDATE calls SET value = ?", (stored,))
    again = caller().call(request)
    assert again.ok and not again.cached and openai_server.calls == 2  # called again, the row replaced
    assert caller().call(request).cached


# ------------------------------------------------------------------------------------------------ the rest
def test_an_out_of_range_random_seed_is_one_error_line():
    pytest.importorskip("timm")
    from echo_builder.errors import ConfigError
    from echo_builder.scoring.structure import DinoStructure

    with pytest.raises(ConfigError, match=r"seed must be in \[0, 2\*\*63 - 1\]"):
        DinoStructure(weights="random:99999999999999999999999")


def test_the_unfilled_prompt_template_is_refused():
    from echo_builder.errors import ConfigError
    from echo_builder.judge.prompts import load_judge_prompt

    with pytest.raises(ConfigError, match="template placeholder"):
        load_judge_prompt(REPO / "docs" / "prompts" / "authors-layout.template.yaml")


# ------------------------------------------------------------------------------------- Bluesky quoted posts
@pytest.mark.parametrize(
    "mutate",
    [
        lambda rec: rec.update(uri=None),
        lambda rec: rec.update(uri="x"),
        lambda rec: rec.update(uri=5),
        lambda rec: rec.update(value="s"),
    ],
    ids=["uri_null", "uri_text", "uri_number", "value_text"],
)
def test_a_quoted_bluesky_post_that_cannot_be_read_is_a_recorded_problem(tmp_path, mutate):
    from echo_builder.sources import read_posts

    source = REPO / "tests" / "data" / "sources" / "bluesky_thread.json"
    clean = read_posts([source])
    thread = json.loads(source.read_text())
    mutate(thread["thread"]["post"]["embed"]["record"]["record"])  # a recordWithMedia quote
    path = tmp_path / "thread.json"
    path.write_text(json.dumps(thread))
    report = read_posts([path])
    assert len(report.posts) == len(clean.posts) - 1  # the quoted post, and only it
    new = [p for p in report.problems if "quoted post skipped" in p.reason]
    assert len(new) == 1 and new[0].location.endswith(".embed.record.record"), report.problems


def test_a_generated_jpeg_with_a_large_colour_profile_is_kept_as_a_readable_png():
    """A generator's JPEG with a 2 MB ICC profile: the PNG written for it must read back (the profile is left out
    when a PNG reader would refuse it), not be thrown away as 'unreadable'."""
    import io

    from echo_builder.generate.base import png_bytes
    from echo_builder.imaging import load_rgb

    buf = io.BytesIO()
    Image.new("RGB", (64, 64), (10, 200, 30)).save(
        buf, format="JPEG", quality=95, icc_profile=b"\x00" * 2_000_000
    )
    written = png_bytes(buf.getvalue())
    image = load_rgb(written, name="written")
    assert image.size == (64, 64) and abs(image.getpixel((32, 32))[1] - 200) <= 3
    small = io.BytesIO()
    Image.new("RGB", (8, 8)).save(small, format="JPEG", icc_profile=b"\x01" * 1000)
    assert Image.open(io.BytesIO(png_bytes(small.getvalue()))).info.get("icc_profile") == b"\x01" * 1000


def test_judge_skips_a_row_without_an_id_or_with_a_repeated_one_and_judges_the_others(
    openai_server, tmp_path, caplog
):
    import pyarrow as pa
    import pyarrow.parquet as pq

    grey = Image.new("RGB", (16, 16), (128, 128, 128))
    bench = make_benchmark(
        tmp_path / "bench",
        "image_to_image",
        [{"id": "s1", "prompt": "p", "inputs": [grey]}, {"id": "s2", "prompt": "q", "inputs": [grey]}],
    )
    shard = next((bench / "image_to_image").glob("*.parquet"))
    table = pq.read_table(shard).to_pylist()
    table += [{**table[0], "id": None}, {**table[1], "prompt": "another prompt"}]  # no id; s2 again
    pq.write_table(pa.Table.from_pylist(table, schema=pq.read_schema(shard)), shard)
    outputs = make_outputs(tmp_path / "outputs", {"m": {"s1": grey, "s2": grey}})
    result = _run(
        *("judge", "--benchmark", str(bench), "--config", "image_to_image", "--outputs", str(outputs)),
        *("--judge", "openai:vlm", "--base-url", openai_server.base_url, "--out", str(tmp_path / "run")),
    )
    assert result.exit_code == 0, result.output
    from echo_builder.judge.run import read_verdicts

    assert sorted(v.sample_id for v in read_verdicts(tmp_path / "run")) == ["s1", "s2"]
    assert "has no usable id" in caplog.text and "'s2' appears twice" in caplog.text
