"""The ``transformers:`` backend on a tiny random Qwen2-VL built in the test and loaded from a folder."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys

import pytest
from PIL import Image

from echo_builder.backends import GenerationParams, create_backend, user_message
from echo_builder.backends.caller import CallRequest, ModelCaller
from echo_builder.cache import CallCache
from echo_builder.errors import ConfigError
from tests.conftest import REPO_ROOT

pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("accelerate")


@pytest.fixture(scope="module")
def backend(tiny_vlm):
    return create_backend(f"transformers:{tiny_vlm}", batch_size=3, dtype="float32")


def _image(w, h, color):
    return Image.new("RGB", (w, h), color)


def test_generates_text_for_image_and_text_conversations(backend):
    calls = [
        ([user_message(_image(40, 56, (255, 0, 0)), "describe the image")], GenerationParams(max_tokens=5)),
        ([user_message("describe the image")], GenerationParams(max_tokens=5)),
        ([user_message(_image(64, 64, (0, 0, 255)), "and this one?")], GenerationParams(max_tokens=5)),
        ([user_message("just text, no image")], GenerationParams(max_tokens=3)),
    ]
    replies = backend.generate_batch(calls)
    assert all(isinstance(r.text, str) for r in replies)
    assert [r.usage.output_tokens <= p.max_tokens for (_, p), r in zip(calls, replies, strict=True)] == [
        True
    ] * 4
    assert replies[1].usage.output_tokens >= 1
    # same text: the image adds its vision tokens (2 for 40x56 in the tiny processor) plus start/end markers
    assert replies[0].usage.input_tokens == replies[1].usage.input_tokens + 4
    assert {r.backend_id for r in replies} == {backend.backend_id}
    assert replies[0].model_snapshot.startswith(os.path.basename(backend.target) + "@")
    # batching and padding do not change a greedy answer
    alone = backend.generate([user_message("describe the image")], GenerationParams(max_tokens=5))
    assert alone.text == replies[1].text


def test_candidate_probabilities_sum_to_one(backend):
    messages = [user_message(_image(40, 56, (10, 200, 10)), "Rate the image from 1 to 9. Rating:")]
    digits = [str(d) for d in range(1, 10)]
    scores = backend.candidate_probabilities(messages, digits)
    assert math.isclose(sum(scores.probabilities.values()), 1.0, rel_tol=1e-9)
    assert all(0.0 < p < 1.0 for p in scores.probabilities.values())
    assert 0.0 < scores.coverage <= 1.0
    # the normalised numbers are a softmax of the unnormalised log-probabilities
    top = max(scores.logprobs.values())
    z = sum(math.exp(v - top) for v in scores.logprobs.values())
    assert scores.probabilities["5"] == pytest.approx(math.exp(scores.logprobs["5"] - top) / z)
    words = backend.candidate_probabilities(messages, ["Good", "Medium", "Bad"])
    assert math.isclose(sum(words.probabilities.values()), 1.0, rel_tol=1e-9)
    with pytest.raises(ConfigError, match="start with the same token"):
        backend.candidate_probabilities(messages, ["1", "10"])


def test_logprobs_of_generated_tokens(backend):
    reply = backend.generate(
        [user_message("hello")], GenerationParams(max_tokens=4, logprobs=True, top_logprobs=3)
    )
    assert reply.logprobs_status == "ok" and len(reply.logprobs) == reply.usage.output_tokens
    first = reply.logprobs[0]
    assert first.logprob <= 0 and len(first.top) == 3
    assert first.top[0][1] >= first.logprob  # greedy: the chosen token is the most likely
    assert math.isclose(first.top[0][1], first.logprob)


def test_sampling_parameters_are_honoured(backend):
    msgs = [user_message("tell me something")]
    greedy = {backend.generate(msgs, GenerationParams(max_tokens=8)).text for _ in range(2)}
    assert len(greedy) == 1
    hot = [
        backend.generate(msgs, GenerationParams(max_tokens=8, temperature=2.0, seed=s)).text for s in range(6)
    ]
    assert len(set(hot)) > 1  # temperature is not silently ignored
    again = backend.generate(msgs, GenerationParams(max_tokens=8, temperature=2.0, seed=3)).text
    assert again == hot[3]  # seeded sampling is reproducible


def test_caller_batches_and_caches(backend, tmp_path):
    cache = CallCache(tmp_path)
    caller = ModelCaller(backend, cache=cache, concurrency=3)
    reqs = [
        CallRequest((user_message(f"q{i}"),), GenerationParams(max_tokens=4), stage="judge") for i in range(5)
    ]
    first = caller.call_many(reqs)
    assert all(r.ok and not r.cached for r in first) and caller.stats.attempts == 5
    second = ModelCaller(backend, cache=cache, concurrency=3).call_many(reqs)
    assert all(r.cached for r in second) and [r.reply for r in second] == [r.reply for r in first]


def test_bad_options_and_paths(tmp_path):
    with pytest.raises(ConfigError, match="batch_sise"):
        create_backend(f"transformers:{tmp_path}", batch_sise=2)
    missing = create_backend(f"transformers:{tmp_path / 'nope'}")
    with pytest.raises(ConfigError, match="cannot load model or processor"):
        missing.generate([user_message("x")])


@pytest.mark.slow
def test_accelerate_launch_splits_work_and_gathers_in_order(tiny_vlm, tmp_path):
    from tests.helpers.launch import accelerate_launch, cpu_env

    single, multi = tmp_path / "single.json", tmp_path / "multi.json"
    script = ["tests.helpers.distributed_generate", str(tiny_vlm)]
    subprocess.run(
        [sys.executable, "-m", *script, str(single)], cwd=REPO_ROOT, env=cpu_env(), check=True, timeout=300
    )
    launched = accelerate_launch([*script, str(multi)])
    assert launched.returncode == 0, launched.stderr[-3000:]
    one, two = json.loads(single.read_text()), json.loads(multi.read_text())
    assert (one["processes"], two["processes"]) == (1, 2)
    assert len(two["texts"]) == 7 and two["texts"] == one["texts"]
