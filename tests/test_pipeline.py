"""`echo-bench build`: the curation pipeline end to end, on real shared data and with a scripted LLM; resume."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from datetime import datetime, timedelta, timezone

import pytest
import yaml
from click.testing import CliRunner

from echo_builder.cli import cli
from echo_builder.pipeline import BuildConfig, build
from echo_builder.records import MediaRef, Post, Sample, Tree
from echo_builder.stages.threads import build_trees
from tests.conftest import REPO_ROOT


def _read_jsonl(path, model):
    return [model.model_validate_json(line) for line in path.read_text().splitlines() if line.strip()]


# -- real data ----------------------------------------------------------------------------------------------------------
def test_x_conversation_becomes_one_tree(shared_data):
    from echo_builder.sources import read_posts

    path = shared_data / "x_graphql" / "raw_tweet_details.json"
    posts = list(read_posts([path]).posts)
    # an independent count straight from the file: every tweet object and its parent link
    raw, edges_by_hand = {}, set()

    def walk(node):
        if isinstance(node, dict):
            if node.get("__typename") == "Tweet" and "legacy" in node:
                raw[node["rest_id"]] = node["legacy"]
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(json.loads(path.read_text()))
    for tid, legacy in raw.items():
        parent = legacy.get("in_reply_to_status_id_str")
        if parent in raw:
            edges_by_hand.add((f"x:{parent}", f"x:{tid}"))
    root = "x:1649191520250245121"
    result = build_trees([p for p in posts if p.id == root], posts, max_depth=50, max_size=10_000)
    assert len(result.trees) == 1
    tree = result.trees[0]
    assert tree.root_id == root and len(tree.posts) == len(raw) == 37
    assert len({p.id for p in tree.posts}) == len(tree.posts)  # no duplicate nodes
    edges = {(parent, child) for parent, kids in tree.children.items() for child in kids}
    assert edges == edges_by_hand and len(edges) == 36
    # the author's self-thread, in order: each continuation replies to the previous one
    author = tree.post(root).author_id
    chain, current = [root], root
    while True:
        nxt = [c for c in tree.children.get(current, ()) if tree.post(c).author_id == author]
        if not nxt:
            break
        current = nxt[0]
        chain.append(current)
    times = [tree.post(pid).created_at for pid in chain]
    assert len(chain) >= 2 and times == sorted(times)


def test_build_on_shared_data_with_rules(shared_data, tmp_path):
    collection = shared_data / "prompt_collections" / "awesome-gpt4o-images"
    x_graphql = shared_data / "x_graphql"
    out = tmp_path / "build"
    result = CliRunner().invoke(
        cli,
        [
            "build",
            str(collection),
            str(x_graphql),
            "--backend",
            "rules",
            "--target-model",
            "GPT-4o",
            "--out",
            str(out),
        ],
        catch_exceptions=False,
    )
    assert result.exit_code == 0, result.output
    report = json.loads((out / "report.json").read_text())
    stages = {s["name"]: s for s in report["stages"]}
    from echo_builder.pipeline import STAGE_ORDER

    assert tuple(s["name"] for s in report["stages"]) == STAGE_ORDER
    assert stages["query"]["curated"] == 100
    scores = [json.loads(line) for line in (out / "stages" / "relevance.jsonl").read_text().splitlines()]
    x_scores = [s for s in scores if s["post_id"].startswith("x:")]
    assert all(not s["kept"] for s in x_scores)  # API-pricing posts are not about image generation
    samples = _read_jsonl(out / "stages" / "extract.jsonl", Sample)
    assert len(samples) == 100 and all(s.platform == "collection" for s in samples)
    cases = sorted((collection / "cases").iterdir(), key=lambda p: int(p.name))
    by_case = {s.source_post_ids[0].rsplit("/", 1)[-1]: s for s in samples}
    for case in cases:
        data = yaml.safe_load((case / "case.yml").read_text())
        sample = by_case[case.name]
        assert sample.prompt == data["prompt"].rstrip("\n")
        assert sample.needs_input_images == bool((data.get("reference_note") or "").strip())
    assert sum(s.needs_input_images for s in samples) == 38
    # placeholders: 【成龙】 (case 20), {Programmer} (44), [Brand Logo]-style blanks (100); not HTML (34) or JSON (25)
    assert [by_case[c].prompt_fill_blank for c in ("20", "44", "100", "34", "25", "1")] == [True] * 3 + [
        False
    ] * 3
    assert sum(1 for s in samples if s.output_images) == 6
    assert stages["extract"]["Benchmark"] == 100 and "samples: 100 extracted" in result.output
    # the six example images were imported into the media store; every other case lacks an output image
    assert stages["media"]["local"] == 6 and stages["media"]["failed_refs"] == 0
    final = _read_jsonl(out / "stages" / "applicability.jsonl", Sample)
    reviews = {s.source_post_ids[0].rsplit("/", 1)[-1]: (s.tier, s.review) for s in final}
    assert reviews["3"] == ("Benchmark", None)  # a poster with its example image and no upload needed
    assert all(
        reviews[c][1] == "input image" for c, s in by_case.items() if s.needs_input_images and s.output_images
    )
    assert stages["applicability"]["configs"]["text_to_image"] == sum(
        t == "Benchmark" for t, _ in reviews.values()
    )


# -- scripted LLM, resume after SIGKILL -----------------------------------------------------------------------------------
T0 = datetime(2025, 3, 26, tzinfo=timezone.utc)


def _posts_file(path, n=30):
    posts = []
    for i in range(n):
        relevant = i % 3 == 0
        posts.append(
            Post(
                id=f"x:{1000 + i}",
                platform="x",
                url=f"https://x.com/u{i}/status/{1000 + i}",
                author_id=f"u{i}",
                text=(
                    f"GPT-4o made this! prompt: a cat number {i}"
                    if relevant
                    else f"gpt-4o api pricing note {i}"
                ),
                created_at=T0 + timedelta(minutes=i),
                media=(MediaRef(url=f"https://e.com/{i}.png"),) if relevant else (),
            )
        )
    posts.append(
        Post(
            id="x:2000",
            platform="x",
            url="https://x.com/v/status/2000",
            author_id="v",
            text="wow, GPT-4o nailed it",
            reply_to_id="x:1000",
            created_at=T0 + timedelta(hours=2),
        )
    )
    path.write_text("\n".join(p.model_dump_json() for p in posts) + "\n")
    return path


def scripted_curator(body):
    text = body["messages"][1]["content"]
    if "Rate the post" in text:
        if "a cat number 6\n" in text:  # an unknown label, even when re-asked: a counted failure
            return '{"score": "very relevant"}'
        if "a cat number 3\n" in text:  # a fenced answer with a trailing comma: repaired, still used
            return '```json\n{"score": 4, "note": "fenced",}\n```'
        return '{"score": 5}' if "prompt:" in text else '{"score": 1}'
    url = text.split("[1] ", 1)[1].split(" ", 1)[0]
    return json.dumps(
        {"samples": [{"prompt": "scripted prompt", "post_urls": [url], "quality": "Benchmark"}]}
    )


def test_build_with_a_scripted_llm(openai_server, tmp_path):
    openai_server.reply = scripted_curator
    posts = _posts_file(tmp_path / "posts.jsonl")
    result = build(
        BuildConfig(
            sources=[posts],
            out_dir=tmp_path / "out",
            backend="openai:curator",
            backend_options={"base_url": openai_server.base_url},
            target_model="GPT-4o",
            progress=False,
            offline=True,
        )
    )
    stages = {s["name"]: s for s in result.report["stages"]}
    assert (
        stages["query"]["out"] == 31 and stages["relevance"]["out"] == 9
    )  # 10 posts with a prompt, 1 failed
    histogram = stages["relevance"]["score_histogram"]
    assert histogram == {"1": 21, "2": 0, "3": 0, "4": 1, "5": 8}  # the 4 is the repaired fenced answer
    assert stages["relevance"]["failures"] == 1 and stages["relevance"]["failed_ids"] == ["x:1006"]
    failures_file = tmp_path / "out" / "stages" / "failures.jsonl"
    failures = [json.loads(line) for line in failures_file.read_text().splitlines()]
    assert failures[0]["raw_text"] == '{"score": "very relevant"}' and "score" in failures[0]["reason"]
    assert (
        stages["threads"]["out"] == 9 and stages["threads"]["posts_in_trees"] == 10
    )  # the reply joins a tree
    assert stages["extract"]["out"] == 9 and stages["extract"]["Benchmark"] == 9
    assert result.report["backend"] == "openai:curator"
    assert result.report["backend_snapshots"] == ["fake-vlm-2026-01-01@fp_test"]
    prompts = result.report["versions"]["prompts"]
    assert (prompts["relevance"], prompts["extract"], prompts["roles"]) == (
        "relevance-v1",
        "extract-v1",
        "roles-v1",
    )
    # offline: the posts' image URLs are not in the media store, and each sample says so
    assert stages["media"]["failed_refs"] == 9
    media = _read_jsonl(tmp_path / "out" / "stages" / "media.jsonl", Sample)
    assert all(e.endswith("offline and not in the media store") for s in media for e in s.media_errors)
    with pytest.raises(Exception, match="--resume"):
        build(BuildConfig(sources=[posts], out_dir=tmp_path / "out"))


@pytest.mark.slow
def test_sigkill_during_relevance_then_resume(openai_server, tmp_path):
    openai_server.reply = scripted_curator
    openai_server.latency_s = 0.05
    posts = _posts_file(tmp_path / "posts.jsonl", n=60)
    env = dict(os.environ, PYTHONPATH=str(REPO_ROOT))

    def command(out, *extra):
        return [
            sys.executable,
            "-m",
            "echo_builder.cli",
            "build",
            str(posts),
            "--out",
            str(out),
            "--backend",
            "openai:curator",
            "--base-url",
            openai_server.base_url,
            "--target-model",
            "GPT-4o",
            "--concurrency",
            "2",
            "--offline",
            *extra,
        ]

    proc = subprocess.Popen(
        command(tmp_path / "killed"), env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    deadline = time.monotonic() + 60
    while openai_server.calls < 20 and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.005)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert proc.returncode == -signal.SIGKILL
    assert not (tmp_path / "killed" / "report.json").exists()
    before = {json.dumps(b, sort_keys=True) for b in openai_server.log.bodies}
    openai_server.reset_log()
    resumed = subprocess.run(
        command(tmp_path / "killed", "--resume"), env=env, capture_output=True, text=True, timeout=120
    )
    assert resumed.returncode == 0, resumed.stderr
    repeated = [b for b in openai_server.log.bodies if json.dumps(b, sort_keys=True) in before]
    # only calls that were in flight when the process died (at most the concurrency) may be sent again
    assert len(repeated) <= 2
    openai_server.reset_log()
    clean = subprocess.run(command(tmp_path / "clean"), env=env, capture_output=True, text=True, timeout=120)
    assert clean.returncode == 0, clean.stderr
    for name in (
        "report.json",
        "stages/collect.jsonl",
        "stages/relevance.jsonl",
        "stages/threads.jsonl",
        "stages/extract.jsonl",
        "stages/failures.jsonl",
    ):
        assert (tmp_path / "killed" / name).read_bytes() == (tmp_path / "clean" / name).read_bytes(), name
    trees = _read_jsonl(tmp_path / "clean" / "stages" / "threads.jsonl", Tree)
    assert len(trees) == 19  # 20 posts with a prompt; number 6 failed relevance in both runs alike


def test_build_checks_options_before_any_work(tmp_path):
    posts = _posts_file(tmp_path / "posts.jsonl", n=6)
    out = tmp_path / "out"

    def run(*extra):
        return CliRunner().invoke(cli, ["build", str(posts), "--out", str(out), "--offline", *extra])

    bad_date = run("--launch-date", "2025-13-45", "--target-model", "GPT-4o")
    assert bad_date.exit_code == 1 and "launch date must be YYYY-MM-DD" in bad_date.output
    assert not (out / "stages").exists() and "stage" not in bad_date.stdout  # nothing written, no stray table
    for name, content, message in [
        ("window.json", '[{"term": "GPT-4o", "window_days": "x"}]', "window_days must be a whole number"),
        ("dict.json", '{"GPT-4o": "x"}', "expected a list of keywords"),
        (
            "typo.json",
            '[{"term": "GPT-4o", "before": 3}]',
            "unknown key 'before'; the keys are 'term' (required), 'window_days', 'before_days'",
        ),
        ("empty.txt", "# nothing\n", "holds no keyword"),
        ("negative.txt", "GPT-4o|-5\n", "negative.txt:1"),
    ]:
        path = tmp_path / name
        path.write_text(content)
        result = run("--keywords", str(path), "--launch-date", "2025-03-25")
        assert result.exit_code == 1 and message in result.output, (name, result.output)
        assert not (out / "stages").exists()
    assert run("--target-model", "GPT-4o").exit_code == 0  # the fixed command then works without --resume


def test_build_with_nothing_readable_fails_clearly(tmp_path):
    folder = tmp_path / "junk"
    folder.mkdir()
    (folder / "notes.txt").write_text("hello")
    (folder / "blob.bin").write_bytes(os.urandom(64))
    result = CliRunner().invoke(cli, ["build", str(folder), "--out", str(tmp_path / "out")])
    assert result.exit_code == 1 and "no post could be read" in result.output
    assert not (tmp_path / "out" / "stages").exists()


def test_build_exits_nonzero_when_every_model_call_fails(openai_server, tmp_path):
    openai_server.reply = lambda body: "ok [[7]]"  # never the JSON the stages ask for
    posts = _posts_file(tmp_path / "posts.jsonl", n=6)
    result = CliRunner().invoke(
        cli,
        [
            "build",
            str(posts),
            "--out",
            str(tmp_path / "out"),
            "--backend",
            "openai:curator",
            "--base-url",
            openai_server.base_url,
            "--target-model",
            "GPT-4o",
        ],
    )
    assert result.exit_code == 1 and "every model call of relevance failed" in result.output
    assert (tmp_path / "out" / "report.json").is_file()  # the failures are recorded, not lost


def test_build_writes_a_loadable_dataset(shared_data, tmp_path):
    import datasets

    collection = shared_data / "prompt_collections" / "awesome-gpt4o-images"
    out = tmp_path / "build"
    result = CliRunner().invoke(
        cli,
        [
            "build",
            str(collection),
            str(shared_data / "x_graphql"),
            "--backend",
            "rules",
            "--target-model",
            "GPT-4o",
            "--out",
            str(out),
        ],
        catch_exceptions=False,
    )
    assert result.exit_code == 0, result.output
    t2i = datasets.load_dataset(str(out), "text_to_image")["test"]
    analysis = datasets.load_dataset(str(out), "analysis")["test"]
    cases = {}
    for case in (collection / "cases").iterdir():
        data = yaml.safe_load((case / "case.yml").read_text())
        cases[data["prompt"].rstrip("\n")] = (case, data)
    assert len(t2i) >= 1
    for row in t2i:
        case, data = cases[row["prompt"]]  # prompts are case prompts verbatim
        [image] = row["output_images"]
        from PIL import Image

        original = Image.open(case / data["image"]).convert("RGB")
        assert image.convert("RGB").size == original.size
        assert image.convert("RGB").tobytes() == original.tobytes()  # the collection's own image, decoded
    needs_upload = [r for r in analysis if r["needs_input_images"]]
    assert needs_upload and all(r["review"] == "input image" for r in needs_upload if r["output_images"])
    all_urls = [u for ds in (t2i, analysis) for r in ds for u in r["source_post_urls"]]
    assert not any("1649191520250245121" in u for u in all_urls)  # the X conversation is in no config
    report = json.loads((out / "report.json").read_text())
    configs = {s["name"]: s for s in report["stages"]}["applicability"]["configs"]
    assert (configs["text_to_image"], configs["analysis"]) == (len(t2i), len(analysis))
    card = (out / "README.md").read_text()
    assert f"{len(t2i)}" in card and "rules" in card and "configs:" in card


def test_publish_without_a_token_fails_before_any_work(tmp_path, monkeypatch):
    monkeypatch.delenv("HF_TOKEN", raising=False)
    monkeypatch.setenv("HF_HUB_DISABLE_IMPLICIT_TOKEN", "1")
    posts = _posts_file(tmp_path / "posts.jsonl", n=3)
    out = tmp_path / "out"
    built = CliRunner().invoke(
        cli, ["build", str(posts), "--out", str(out), "--offline", "--target-model", "GPT-4o"]
    )
    assert built.exit_code == 0, built.output
    result = CliRunner().invoke(cli, ["publish", str(out), "--repo-id", "someone/echo-test"])
    assert result.exit_code == 1 and "token" in result.output.lower()


def test_resume_refuses_changed_settings(tmp_path):
    posts = _posts_file(tmp_path / "posts.jsonl", n=3)
    out = tmp_path / "out"
    base = ["build", str(posts), "--out", str(out), "--offline"]
    assert CliRunner().invoke(cli, [*base, "--target-model", "GPT-4o"]).exit_code == 0
    changed = CliRunner().invoke(cli, [*base, "--target-model", "GPT-5", "--resume"])
    assert changed.exit_code == 1 and "other settings (target_model: was " in changed.output
    assert CliRunner().invoke(cli, [*base, "--target-model", "GPT-4o", "--resume"]).exit_code == 0


def test_offline_build_says_how_many_images_were_not_in_the_store(tmp_path):
    posts = _posts_file(tmp_path / "posts.jsonl", n=3)
    out = tmp_path / "out"
    built = CliRunner().invoke(
        cli, ["build", str(posts), "--out", str(out), "--offline", "--target-model", "GPT-4o"]
    )
    assert built.exit_code == 0, built.output
    samples = _read_jsonl(out / "stages" / "samples.jsonl", Sample)
    missed = sum("offline and not in the media store" in e for s in samples for e in s.media_errors)
    assert missed > 0
    assert (
        f"note: {missed} image(s) were not in the media store and --offline downloads nothing" in built.stderr
    )
