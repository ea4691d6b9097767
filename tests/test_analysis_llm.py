"""``echo-bench analyze`` with an LLM labeller: a scripted-LLM build, labelled by a scripted OpenAI-compatible
server on the loopback; refusals and unparseable answers are counted failures with the item left unlabelled."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from echo_builder.cli import cli
from tests.helpers.analysis import assert_md_matches_json, independent_first_bigrams
from tests.helpers.openai_server import FakeOpenAIServer

REFUSED = "REFUSE: this one the labeller will not answer"
PROSE = "PROSE: the labeller answers in prose"


def _text(body: dict) -> str:
    content = body["messages"][-1]["content"]
    if isinstance(content, list):
        return "".join(p.get("text", "") for p in content if p.get("type") == "text")
    return content


def curator(body: dict) -> str:
    """The build's curator: every post relevant; one sample per thread with a scripted feedback reply."""
    text = _text(body)
    if "Rate the post" in text:
        return '{"score": 5}'
    if "Thread (each post" in text:
        urls = re.findall(r"\[\d+\] (\S+)", text)
        tail = urls[0].rsplit("/", 1)[-1]
        feedback = {"...101": "it turned everything yellow", "...201": REFUSED, "...301": PROSE}.get(
            "..." + tail[-3:], "the hands have six fingers and the text is misspelled"
        )
        fb = [{"post_url": urls[1], "feedback": feedback}] if len(urls) > 1 else []
        prompt = {
            "...101": "a receipt from a diner with a total of $12.40",
            "...201": "Change the sky to sunset",
        }.get("..." + tail[-3:], f"scripted prompt number {tail}")
        return json.dumps(
            {
                "samples": [
                    {
                        "prompt": prompt,
                        "post_urls": [urls[0]],
                        "quality": "Benchmark",
                        "community_feedback": fb,
                    }
                ]
            }
        )
    return "I cannot help with that."


def labeller(body: dict) -> str:
    """The analysis labeller: open labels (folded by the package), a refusal, a prose answer."""
    text = _text(body)
    slot = re.search(r"<(?:text|prompt)>\n(.*)\n</(?:text|prompt)>", text, re.S)
    if "List every failure" in text:
        text = slot[1]
        if REFUSED in text:
            return "I'm sorry, but I can't help with that request."
        if PROSE in text:
            return "The user seems unhappy about the colours."
        if "yellow" in text:
            return json.dumps(
                {"labels": [{"category": "Yellow tint", "evidence": "turned everything yellow"}]}
            )
        if "six fingers" in text:
            return json.dumps(
                {
                    "labels": [
                        {"category": "bad anatomy", "evidence": "six fingers"},
                        {"category": "Typo", "evidence": "the text is misspelled"},
                        {"category": "Watermark added", "evidence": "a watermark in the corner"},
                    ]
                }
            )
        return json.dumps({"labels": []})
    if "Which task does the prompt ask for" in text:
        text = slot[1]
        if "receipt" in text:
            return json.dumps({"task": "Receipt generation", "evidence": "a receipt from a diner"})
        if "Change the sky" in text:
            return "Sorry, I can't classify this."
        return json.dumps({"task": "Balloon animals", "evidence": "scripted prompt"})
    return "?"


@pytest.fixture(scope="module")
def scripted_build(tmp_path_factory) -> Path:
    """The demo's posts built by a scripted LLM curator, with the demo's images seeded (offline)."""
    from echo_builder.demo import run_demo

    root = tmp_path_factory.mktemp("scripted")
    run_demo(root / "demo", progress=False)
    out = root / "build"
    out.mkdir()
    shutil.copytree(root / "demo" / "benchmark" / "media", out / "media")
    with FakeOpenAIServer(curator) as server:
        result = CliRunner().invoke(
            cli,
            [
                "build",
                str(root / "demo" / "posts"),
                "--backend",
                "openai:curator",
                "--base-url",
                server.base_url,
                "--target-model",
                "Lumen-2",
                "--launch-date",
                "2025-06-10",
                "--offline",
                "--out",
                str(out),
            ],
            catch_exceptions=False,
        )
    assert result.exit_code == 0, result.output
    return out


def _analyze(build: Path, out: Path, server: FakeOpenAIServer):
    return CliRunner().invoke(
        cli,
        [
            "analyze",
            str(build),
            "--out",
            str(out),
            "--backend",
            "openai:labeller",
            "--base-url",
            server.base_url,
            "--max-attempts",
            "1",
            "--n-boot",
            "40",
        ],
        catch_exceptions=False,
    )


def test_llm_labels_are_folded_and_failures_counted_unlabelled(scripted_build, tmp_path):
    out = tmp_path / "analysis"
    with FakeOpenAIServer(labeller) as server:
        result = _analyze(scripted_build, out, server)
    assert result.exit_code == 0, result.output
    doc = json.loads((out / "analysis.json").read_text())
    labels = {r["item_id"]: r for r in map(json.loads, (out / "labels.jsonl").read_text().splitlines())}
    cats = {r["category"]: r for r in doc["failures"]["categories"]}
    # "Yellow tint" folded onto color drift, measured by color_shift
    assert cats["color_drift"]["metric"] == "color_shift" and cats["color_drift"]["items"] == 1
    assert cats["color_drift"]["examples"][0]["evidence"] == "turned everything yellow"
    # evidence is checked against the text: a quote the text does not hold is kept but marked
    marks = [lab for r in labels.values() for lab in r["labels"] if r["labeller"] == "failure"]
    assert all(lab["quoted"] == (lab["category"] != "watermark") for lab in marks)
    # an open category outside the taxonomy is kept as its own, with no metric
    assert cats["watermark"]["in_taxonomy"] is False and cats["watermark"]["metric"] is None
    assert (
        cats["anatomy_error"]["metric"] is None and cats["text_rendering_error"]["metric"] == "text_rendering"
    )
    # the refusal and the prose answer: counted failures, the items kept with no label at all
    failed = {f["item_id"]: f for f in doc["failures"]["failed_items"]}
    assert doc["failures"]["summary"]["failures"] == 2 == len(failed)
    for item_id in failed:
        assert labels[item_id]["labels"] == [] and labels[item_id]["status"] == "parse_failure"
    texts = {labels[i]["text"] for i in failed}
    assert texts == {REFUSED, PROSE}
    assert doc["failures"]["summary"]["items"] == len(
        [r for r in labels.values() if r["labeller"] == "failure"]
    )
    # tasks: folded, open, and a refused prompt left unlabelled (not in any task count)
    tasks = {t["task"]: t for t in doc["tasks"]["tasks"]}
    assert tasks["document_generation"]["items"] == 1 and tasks["document_generation"]["new_task"] is True
    assert "balloon_animal" in tasks  # open task, singularised
    assert doc["tasks"]["summary"]["failures"] == 1
    assert sum(t["items"] for t in tasks.values()) == doc["tasks"]["summary"]["items"] - 1
    assert doc["labeller"]["prompt_versions"] == {
        "taxonomy": "feedback-taxonomy-v1",
        "tasks": "task-labels-v1",
    }
    assert_md_matches_json(out, doc)
    markdown = (out / "analysis.md").read_text()
    mark = cats["watermark"]
    assert f"| watermark (open) | open | {mark['items']} | {mark['samples']} | no metric yet |" in markdown
    assert mark["items"] == cats["anatomy_error"]["items"] >= 1
    assert mark["given_as"] == ["watermark added"]
    assert '- watermark: "watermark added"' in markdown
    for config in ("text_to_image", "image_to_image"):
        sets = {s["name"]: s for s in doc["diversity"]["sets"]}
        if f"build:{config}" in sets:
            import pyarrow.parquet as pq

            prompts = [
                p
                for f in sorted((scripted_build / config).glob("test-*.parquet"))
                for p in pq.read_table(f, columns=["prompt"]).column("prompt").to_pylist()
            ]
            assert sets[f"build:{config}"]["unique_first_bigrams"] == independent_first_bigrams(prompts)


def test_rerun_repeats_no_model_call(scripted_build, tmp_path):
    out = tmp_path / "analysis"
    with FakeOpenAIServer(labeller) as server:
        assert _analyze(scripted_build, out, server).exit_code == 0
        first = server.calls
        assert first > 0
        server.reset_log()
        again = _analyze(scripted_build, out, server)
        assert again.exit_code == 0, again.output
        assert server.calls == 0  # every reply, the refusals and their re-asks included, is in OUT/cache
    doc = json.loads((out / "analysis.json").read_text())
    assert doc["failures"]["summary"]["failures"] == 2  # still counted: a cached refusal is still a refusal


def test_unreachable_labeller_counts_every_item_as_a_failure(scripted_build, tmp_path):
    out = tmp_path / "analysis"
    result = CliRunner().invoke(
        cli,
        [
            "analyze",
            str(scripted_build),
            "--out",
            str(out),
            "--backend",
            "openai:labeller",
            "--base-url",
            "http://127.0.0.1:9/v1",
            "--max-attempts",
            "1",
            "--timeout",
            "5",
            "--n-boot",
            "10",
        ],
        catch_exceptions=False,
    )
    # the report is written, with every text counted unlabelled, and the command says so and exits 1
    assert result.exit_code == 1, result.output
    assert (
        result.output.strip()
        .splitlines()[-1]
        .startswith("error: every labeller call of taxonomy and tasks failed")
    )
    doc = json.loads((out / "analysis.json").read_text())
    assert doc["failures"]["summary"]["failures"] == doc["failures"]["summary"]["items"] > 0
    assert doc["failures"]["categories"] == [] and doc["tasks"]["tasks"] == []
    assert doc["tasks"]["summary"]["failures"] == doc["tasks"]["summary"]["items"] > 0


def test_a_label_without_evidence_is_a_counted_failure_not_a_label(scripted_build, tmp_path):
    """Every label carries its evidence: a label with no quote is a wrong schema, re-asked once, then a failure
    with the item unlabelled ("none" needs no quote)."""

    def no_quote(body: dict) -> str:
        text = _text(body)
        slot = re.search(r"<(?:text|prompt)>\n(.*)\n</(?:text|prompt)>", text, re.S)
        if slot is None:  # the re-ask: the same answer again
            return json.dumps({"labels": [{"category": "Yellow tint"}]})
        if "List every failure" in text:
            if "yellow" in slot[1]:
                return json.dumps({"labels": [{"category": "Yellow tint", "evidence": " "}]})
            return json.dumps({"labels": [{"category": "none"}]})
        return json.dumps({"task": "none"})

    out = tmp_path / "analysis"
    with FakeOpenAIServer(no_quote) as server:
        result = _analyze(scripted_build, out, server)
    assert result.exit_code == 0, result.output
    doc = json.loads((out / "analysis.json").read_text())
    labels = [json.loads(line) for line in (out / "labels.jsonl").read_text().splitlines()]
    yellow = [r for r in labels if r["labeller"] == "failure" and "yellow" in r["text"]]
    assert len(yellow) == 1 and yellow[0]["status"] == "parse_failure" and yellow[0]["labels"] == []
    assert "no evidence" in yellow[0]["reason"]
    assert doc["failures"]["summary"]["failures"] == 1 and doc["failures"]["categories"] == []
    others = [r for r in labels if r["labeller"] == "failure" and "yellow" not in r["text"]]
    assert others and all(r["status"] == "ok" and r["labels"] == [] for r in others)
    assert doc["tasks"]["summary"]["failures"] == 0 and doc["tasks"]["tasks"] == []
    assert_md_matches_json(out, doc)
