"""roles, tier and applicability: rules baselines and a scripted VLM."""

from __future__ import annotations

import json

from PIL import Image

from echo_builder.backends import create_backend
from echo_builder.backends.caller import ModelCaller, RetryPolicy
from echo_builder.cache import CallCache
from echo_builder.records import ApplicabilityFlags, MediaRef, Sample
from echo_builder.stages.roles import rules_roles, run_roles
from echo_builder.stages.tier import route, rules_applicability, run_applicability, run_tier

SHA = [f"{i:02x}" * 32 for i in range(6)]


def _ref(i, **kw):
    return MediaRef(url=f"https://e.com/{i}.png", sha256=SHA[i], path=f"{SHA[i][:2]}/{SHA[i]}.png", **kw)


def _sample(prompt="a fox", *, outputs=(), inputs=(), **kw):
    return Sample(
        id="echo-0000000000000001",
        prompt=prompt,
        output_images=tuple(outputs),
        input_images=tuple(inputs),
        quality=kw.pop("quality", "Benchmark"),
        **kw,
    )


def test_rules_roles():
    dup = _ref(1)
    sample = _sample(
        "Turn this photo into Ghibli style", outputs=[_ref(0), _ref(1), dup], needs_input_images=True
    )
    answer = rules_roles(sample)
    assert (answer.inputs, answer.outputs) == ([0], [1])  # the duplicate (same sha256) is dropped
    [split] = run_roles([sample]).samples
    assert split.input_images == (_ref(0),) and split.output_images == (_ref(1),)
    plain = run_roles([_sample(outputs=[_ref(0), _ref(2)])]).samples[0]
    assert plain.input_images == () and len(plain.output_images) == 2
    screenshot = rules_roles(_sample("my ChatGPT chat", outputs=[_ref(0, width=400, height=1600)]))
    assert screenshot.conversation_screenshot and rules_roles(_sample("[Brand] logo")).fill_in_the_blank


def test_roles_with_a_scripted_vlm(openai_server, tmp_path):
    store = tmp_path / "store"
    for i in range(3):
        (store / SHA[i][:2]).mkdir(parents=True, exist_ok=True)
        Image.new("RGB", (32, 32), (80 * i, 0, 0)).save(store / SHA[i][:2] / f"{SHA[i]}.png")
    openai_server.reply = lambda body: json.dumps(
        {"inputs": [2], "outputs": [0, 7], "unrelated": [1], "conversation_screenshot": True}
    )
    caller = ModelCaller(
        create_backend("openai:vlm", base_url=openai_server.base_url),
        cache=CallCache(tmp_path / "c"),
        retry=RetryPolicy(max_attempts=2, initial_backoff_s=0.001),
    )
    result = run_roles([_sample(outputs=[_ref(0), _ref(1), _ref(2)])], caller=caller, store_root=store)
    [sample] = result.samples
    assert sample.input_images == (_ref(2),) and sample.output_images == (_ref(0),) and sample.is_screenshot
    assert any("do not exist: [7]" in n for n in result.notes)
    content = openai_server.log.bodies[0]["messages"][1]["content"]
    assert [p["type"] for p in content] == ["image_url"] * 3 + ["text"]


def test_tier_and_routing():
    ok = _sample(outputs=[_ref(0)])
    rows = run_tier(
        [
            ok,
            _sample(outputs=[MediaRef(url="https://e.com/gone.png")]),  # download failed: no file
            _sample(outputs=[_ref(0)], needs_input_images=True),
            _sample("[Brand] logo", outputs=[_ref(0)], prompt_fill_blank=True),
            _sample(quality="Analysis"),
            _sample(quality="Trash"),
            _sample(outputs=[_ref(1)], inputs=[_ref(0)]),
        ]
    ).samples
    assert [(s.tier, s.review) for s in rows] == [
        ("Benchmark", None),
        ("Manual Review", "output image"),
        ("Manual Review", "input image"),
        ("Manual Review", "prompt"),
        ("Analysis", None),  # its own tier, not a Manual Review without a reason
        ("Discard", None),
        ("Benchmark", None),
    ]
    assert [route(s) for s in rows] == [
        "text_to_image",
        "analysis",
        "analysis",
        "analysis",
        "analysis",
        None,
        "image_to_image",
    ]


def test_rules_applicability():
    t2i = rules_applicability(_sample('a poster that says "SALE"'))
    assert t2i == ApplicabilityFlags(text_rendering=True)
    assert rules_applicability(_sample("a quiet lake")) == ApplicabilityFlags(text_rendering=False)
    i2i = rules_applicability(_sample("put a hat on the woman in my photo", inputs=[_ref(0)]))
    assert i2i == ApplicabilityFlags(face_identity=True, structure=True, no_color_shift=True)
    restyle = rules_applicability(_sample("redraw in Ghibli style", inputs=[_ref(0)]))
    assert (
        restyle.no_color_shift is False and restyle.face_identity is None
    )  # no evidence: unknown, not False
    # "photo of my <thing>" is no evidence of a person; "photo of me" and a relative are
    assert (
        rules_applicability(
            _sample("remove the car from this photo of my street", inputs=[_ref(0)])
        ).face_identity
        is None
    )
    for prompt in ("add a hat to this photo of me", "make my daughter smile in this photo"):
        assert rules_applicability(_sample(prompt, inputs=[_ref(0)])).face_identity is True, prompt


def test_applicability_failure_is_unknown(openai_server, tmp_path):
    store = tmp_path / "store"
    (store / SHA[0][:2]).mkdir(parents=True)
    Image.new("RGB", (16, 16)).save(store / SHA[0][:2] / f"{SHA[0]}.png")
    openai_server.reply = lambda body: "I am not sure."
    caller = ModelCaller(
        create_backend("openai:vlm", base_url=openai_server.base_url), retry=RetryPolicy(max_attempts=1)
    )
    tiered = run_tier([_sample("add a hat", outputs=[_ref(1)], inputs=[_ref(0)])]).samples
    result = run_applicability(tiered, caller=caller, store_root=store)
    assert result.samples[0].applicability == ApplicabilityFlags()  # all unknown
    assert result.failures[0].stage == "applicability"
    openai_server.reply = lambda body: '{"face_identity": false, "structure": true, "no_color_shift": true}'
    ok = run_applicability(tiered, caller=caller, store_root=store).samples[0].applicability
    assert ok == ApplicabilityFlags(face_identity=False, structure=True, no_color_shift=True)


def _store_with(tmp_path, images):
    store = tmp_path / "store"
    refs = []
    for i, img in enumerate(images):
        (store / SHA[i][:2]).mkdir(parents=True, exist_ok=True)
        img.save(store / SHA[i][:2] / f"{SHA[i]}.png")
        refs.append(
            MediaRef(
                url=f"https://e.com/{i}.png",
                sha256=SHA[i],
                path=f"{SHA[i][:2]}/{SHA[i]}.png",
                width=img.width,
                height=img.height,
            )
        )
    return store, refs


def _vlm(server, tmp_path):
    return ModelCaller(
        create_backend("openai:vlm", base_url=server.base_url),
        cache=CallCache(tmp_path / "cache"),
        retry=RetryPolicy(max_attempts=1),
    )


def test_templates_fill_each_output_when_confident(openai_server, tmp_path):
    from echo_builder.stages.templates_screenshots import run_templates

    store, refs = _store_with(
        tmp_path, [Image.new("RGB", (32, 32), (200, 0, 0)), Image.new("RGB", (32, 32), (0, 0, 200))]
    )

    def reply(body):  # confident only about the red output
        from tests.test_judge import _dominant, _images

        confident = _dominant(_images(body)[0]) == "red"
        filled = "a figure of Jackie Chan on a desk" if confident else "?"
        return json.dumps({"filled_prompt": filled, "confident": confident})

    openai_server.reply = reply
    template = _sample(
        "a figure of [character] on a desk", outputs=refs, prompt_fill_blank=True, source_post_ids=("x:1",)
    )
    other = _sample("a plain prompt", outputs=refs[:1])
    result = run_templates([template, other], caller=_vlm(openai_server, tmp_path), store_root=store)
    filled, untouched = result.samples
    assert filled.prompt == "a figure of Jackie Chan on a desk" and filled.prompt_modified
    assert filled.output_images == (refs[0],) and filled.id != template.id
    assert untouched == other and any("not confident" in n for n in result.notes)
    assert run_templates([template], caller=None, store_root=store).samples == [template]  # rules: unchanged


def test_screenshots_boxes_and_crops(openai_server, tmp_path):
    from echo_builder.stages.templates_screenshots import CROP_MARGIN_PX, run_screenshots

    shot = Image.new("RGB", (400, 800), (255, 255, 255))
    shot.paste((0, 200, 0), (50, 100, 250, 300))  # the uploaded photo
    shot.paste((200, 0, 0), (50, 400, 350, 700))  # the generated image
    store, [ref] = _store_with(tmp_path, [shot])
    openai_server.reply = lambda body: json.dumps(
        {  # 0-1000 normalised [x1, y1, x2, y2] on the 400 x 800 screenshot (-o box_format=norm1000)
            "prompt": "make it red",
            "boxes": [
                {"role": "input", "bbox": [125, 125, 625, 375]},
                {"role": "output", "bbox": [125, 500, 875, 1125]},
                {"role": "output", "bbox": [25, 12.5, 37.5, 18.75]},
            ],
        }
    )
    sample = _sample("", outputs=[ref], is_screenshot=True)
    caller = _vlm(openai_server, tmp_path)
    caller.backend.box_format_option = "norm1000"
    result = run_screenshots([sample], caller=caller, store_root=store)
    [out] = result.samples
    assert out.prompt == "make it red"
    assert [(b.role, b.x1, b.y1, b.x2, b.y2) for b in out.input_bboxes] == [
        ("input", 50, 100, 250, 300),
        ("output", 50, 400, 350, 800),
    ]  # clipped to the frame
    crop_in = Image.open(store / out.input_images[0].path)
    assert crop_in.size == (200 - 2 * CROP_MARGIN_PX, 200 - 2 * CROP_MARGIN_PX)
    assert crop_in.getpixel((5, 5)) == (0, 200, 0)  # the 10 px inward margin cut the white frame
    assert Image.open(store / out.output_images[0].path).getpixel((5, 5)) == (200, 0, 0)
    assert any("degenerate" in n for n in result.notes)


def test_vlm_tier_can_demote_never_promote(openai_server, tmp_path):
    store, refs = _store_with(
        tmp_path, [Image.new("RGB", (32, 32), (9, 9, 9)), Image.new("RGB", (32, 32), (99, 9, 9))]
    )
    openai_server.reply = lambda body: '{"tier": "Manual Review", "review": "output image"}'
    good = _sample("add a hat", inputs=[refs[0]], outputs=[refs[1]])
    needs_input = _sample("turn this photo", outputs=[refs[1]], needs_input_images=True)
    result = run_tier([good, needs_input], caller=_vlm(openai_server, tmp_path), store_root=store)
    assert [(s.tier, s.review) for s in result.samples] == [
        ("Manual Review", "output image"),
        ("Manual Review", "input image"),
    ]
    assert openai_server.calls == 1  # only the sample the rules let through was asked
    openai_server.reply = lambda body: '{"tier": "Excellent"}'
    failed = run_tier([good], caller=_vlm(openai_server, tmp_path / "b"), store_root=store)
    assert failed.samples[0].tier == "Benchmark" and failed.failures[0].stage == "tier"
    # Manual Review always comes with its reason: an answer without one is a failed answer, not a reasonless tier
    openai_server.reply = lambda body: '{"tier": "Manual Review", "review": null}'
    reasonless = run_tier([good], caller=_vlm(openai_server, tmp_path / "c"), store_root=store)
    assert [(s.tier, s.review) for s in reasonless.samples] == [("Benchmark", None)]
    assert reasonless.failures[0].stage == "tier" and "review" in reasonless.failures[0].reason
