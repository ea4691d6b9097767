"""Sample ids are unique in every build (issue 13 item 4: a fill-in-the-blank post with two byte-identical images
whose roles call failed made two samples with one id, and the dataset writer failed after every model call, on
every resume)."""

from __future__ import annotations

import json

from PIL import Image

from echo_builder.ids import unique_sample_ids
from echo_builder.records import MediaRef, Sample
from tests.test_stages_vlm import _store_with, _vlm


def _sample(sid: str, prompt: str) -> Sample:
    return Sample(id=sid, prompt=prompt, quality="Benchmark")


def test_identical_copies_are_dropped_and_different_samples_renamed_in_order():
    a, a_again, a_other, a_third, b = (
        _sample("echo-a", "p"),
        _sample("echo-a", "p"),
        _sample("echo-a", "q"),
        _sample("echo-a", "r"),
        _sample("echo-b", "p"),
    )
    kept, notes = unique_sample_ids([a, a_again, b, a_other, a_third])
    assert [(s.id, s.prompt) for s in kept] == [
        ("echo-a", "p"),
        ("echo-b", "p"),
        ("echo-a-2", "q"),
        ("echo-a-3", "r"),
    ]
    assert len(notes) == 3 and "identical copy was dropped" in notes[0] and "echo-a-2" in notes[1]
    assert unique_sample_ids([a, b]) == ([a, b], [])
    # a new id never takes one that is already used
    kept, _ = unique_sample_ids([a, _sample("echo-a-2", "x"), a_other])
    assert [s.id for s in kept] == ["echo-a", "echo-a-2", "echo-a-3"]


def test_byte_identical_outputs_of_a_template_fill_one_sample(openai_server, tmp_path):
    from echo_builder.stages.templates_screenshots import run_templates

    store, (ref,) = _store_with(tmp_path, [Image.new("RGB", (32, 32), (200, 0, 0))])
    twin = MediaRef(
        url="https://e.com/copy.png", sha256=ref.sha256, path=ref.path
    )  # the same bytes, posted twice
    openai_server.reply = lambda body: json.dumps(
        {"filled_prompt": "a figure of a cat on a desk", "confident": True}
    )
    template = Sample(
        id="echo-0000000000000001",
        prompt="a figure of [character] on a desk",
        output_images=(ref, twin),
        prompt_fill_blank=True,
        source_post_ids=("x:1",),
        quality="Benchmark",
    )
    result = run_templates([template], caller=_vlm(openai_server, tmp_path), store_root=store)
    assert [s.prompt for s in result.samples] == ["a figure of a cat on a desk"]
    assert result.samples[0].output_images == (ref,)


def test_a_build_whose_stages_collide_on_an_id_still_writes_its_dataset(tmp_path, monkeypatch):
    """Whatever stage makes the collision, the build writes every distinct sample and reports the duplicates."""
    import echo_builder.stages.tier as tier
    from echo_builder.pipeline import BuildConfig, build
    from echo_dataset.loading import read_config
    from tests.helpers.chains import write_chain

    real = tier.run_applicability

    def doubling(samples, **kwargs):
        done = real(samples, **kwargs)
        first = done.samples[0]
        done.samples.extend([first, first.model_copy(update={"prompt": first.prompt + " (other)"})])
        return done

    monkeypatch.setattr(tier, "run_applicability", doubling)
    source = write_chain(tmp_path / "chain.jsonl", 3, kept="all")
    result = build(
        BuildConfig(
            sources=[source],
            out_dir=tmp_path / "out",
            target_model="Lumen-2",
            launch_date="2025-06-10",
            offline=True,
        )
    )
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    assert len(report["duplicate_ids"]) == 2
    ids = [
        json.loads(line)["id"]
        for line in (tmp_path / "out" / "stages" / "samples.jsonl").read_text().splitlines()
    ]
    assert len(ids) == len(set(ids)) == 2 and ids[1] == ids[0] + "-2"
    assert result is not None
    rows = sum(len(read_config(tmp_path / "out", c)) for c in ("text_to_image", "image_to_image", "analysis"))
    assert rows == 2
