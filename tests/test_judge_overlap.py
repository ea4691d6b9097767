"""Image preparation overlaps the judge calls: calls start before every image is prepared; duplicates go once."""

from __future__ import annotations

import threading
import time

from PIL import Image

from echo_builder.backends import create_backend
from echo_builder.backends.caller import ModelCaller
from echo_builder.judge import Judge, JudgeItem
from echo_builder.judge import judging as judging_module


def _items(n: int, same: bool = False) -> list[JudgeItem]:
    return [
        JudgeItem(
            f"s{i}",
            f"prompt {i}",
            (),
            "model",
            Image.new("RGB", (32, 32), (0 if same else i * 9 % 256, 90, 40)),
        )
        for i in range(n)
    ]


def test_calls_start_while_later_images_are_still_being_prepared(openai_server, monkeypatch):
    openai_server.reply = lambda body: "Fine. [[7]]"
    openai_server.latency_s = 0.01
    finished: list[float] = []
    lock = threading.Lock()
    real = judging_module.prepare_for_judge

    def slow_prepare(image, **kwargs):
        time.sleep(0.03)  # a large image's resize and encode, without holding the GIL
        part = real(image, **kwargs)
        with lock:
            finished.append(time.monotonic())
        return part

    monkeypatch.setattr(judging_module, "prepare_for_judge", slow_prepare)
    backend = create_backend("openai:j", base_url=openai_server.base_url)
    judge = Judge(ModelCaller(backend, concurrency=4))
    verdicts = judge.single(_items(24))
    assert [v.rating for v in verdicts] == [7.0] * 24
    assert [v.sample_id for v in verdicts] == [f"s{i}" for i in range(24)]  # input order kept
    assert len(finished) == 24 and openai_server.calls == 24
    # the first call reached the server long before the last image was ready
    assert openai_server.log.times[0] < max(finished) - 0.1


def test_identical_requests_are_sent_once_and_share_the_answer(openai_server):
    openai_server.reply = lambda body: "Fine. [[4]]"
    backend = create_backend("openai:j", base_url=openai_server.base_url)
    caller = ModelCaller(backend, concurrency=8)
    verdicts = Judge(caller).single(
        [JudgeItem("s", "same prompt", (), f"m{i}", Image.new("RGB", (16, 16))) for i in range(6)]
    )
    assert [v.rating for v in verdicts] == [4.0] * 6 and [v.model for v in verdicts] == [
        f"m{i}" for i in range(6)
    ]
    assert openai_server.calls == 1 and caller.stats.requests == 1


def test_pairwise_and_probability_keep_their_order(openai_server):
    from tests.helpers.openai_server import Scripted

    openai_server.reply = lambda body: Scripted("7", next_token_probs={"7": 0.6, "8": 0.4})
    backend = create_backend("openai:j", base_url=openai_server.base_url)
    items = _items(5)
    probs = Judge(ModelCaller(backend, concurrency=3)).probability(items)
    assert [v.sample_id for v in probs] == [f"s{i}" for i in range(5)]
    assert all(abs(v.rating - 7.4) < 1e-6 for v in probs)
    openai_server.reply = lambda body: "A is better. [[A]]"
    other = [
        JudgeItem(it.sample_id, it.prompt, (), "other", Image.new("RGB", (32, 32), (1, 2, 3))) for it in items
    ]
    pairs = Judge(ModelCaller(backend, concurrency=3)).pairwise(list(zip(items, other, strict=True)))
    assert [(v.sample_id, v.order) for v in pairs] == [(f"s{i}", o) for i in range(5) for o in ("AB", "BA")]
    assert [v.winner for v in pairs] == ["A", "B"] * 5  # the BA answer "A" names model_b
