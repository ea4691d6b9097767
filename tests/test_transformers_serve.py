"""A real OpenAI-compatible server someone else wrote: ``transformers serve`` with the tiny random Qwen2-VL.

Beside the scripted loopback server, these tests run the production ``openai:`` backend, ``echo-bench judge`` (single,
pairwise and probability modes) and the screenshots curation stage against transformers' own FastAPI server
(``transformers[serving]``), started offline on a free loopback port. The model's weights are random, so its text
is gibberish: what is checked is the protocol (image parts, usage, logprobs, error bodies, model listing) and that
every call ends as a recorded verdict or failure. Where the server differs from the OpenAI API (docs/backends.md,
"transformers serve"), the assertions say so.
"""

from __future__ import annotations

import pytest
from click.testing import CliRunner
from PIL import Image, ImageDraw

from echo_builder.backends import GenerationParams, create_backend, user_message
from echo_builder.backends.caller import ModelCaller, RetryPolicy
from echo_builder.cache import CallCache
from echo_builder.cli import cli
from echo_builder.errors import LogprobsUnavailableError, PermanentBackendError
from echo_builder.judge.run import read_verdicts
from tests.helpers.benchmark import make_benchmark, make_outputs

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def served(tiny_vlm):
    """(base URL, model id) of ``transformers serve`` pinned to the tiny model folder; stopped after the module."""
    pytest.importorskip("fastapi")
    pytest.importorskip("uvicorn")
    from tests.helpers.transformers_serve import ServeUnavailable, transformers_serve

    server = transformers_serve(tiny_vlm)
    try:
        base_url = server.__enter__()
    except ServeUnavailable as exc:
        pytest.fail(str(exc))
    try:
        yield base_url, str(tiny_vlm)
    finally:
        server.__exit__(None, None, None)


def _backend(served, model=None, **options):
    base_url, served_model = served
    return create_backend(f"openai:{model or served_model}", base_url=base_url, **options)


def test_model_listing_and_the_servers_error_bodies(served):
    _, model = served
    backend = _backend(served)
    assert backend.list_models() == [model]  # the id is the folder path the server was started with
    # a pinned server refuses other names with FastAPI's {"detail": ...}; the error quotes it and lists the models
    with pytest.raises(PermanentBackendError) as refused:
        _backend(served, "gpt-4o").generate([user_message("hi")], GenerationParams(max_tokens=2))
    message = str(refused.value)
    assert refused.value.status_code == 400
    assert f"Server is pinned to '{model}'; requested 'gpt-4o'" in message
    assert f"the server lists: {model}" in message
    # fields it does not know (vLLM's top_k) are a 422 whose detail names them
    with pytest.raises(PermanentBackendError, match=r"Unexpected fields in the request.*top_k"):
        _backend(served, extra_body={"top_k": 5}).generate(
            [user_message("hi")], GenerationParams(max_tokens=2)
        )


def test_image_parts_usage_finish_reason_and_snapshot(served):
    _, model = served
    backend = _backend(served)
    params = GenerationParams(max_tokens=3)
    # the tiny processor turns a 28 x 28 image into 1 vision token and a tall screenshot into 2 (28 x 56 px)
    small = backend.generate([user_message(Image.new("RGB", (28, 28), "red"), "Rate this image")], params)
    tall = backend.generate([user_message(Image.new("RGB", (1036, 2240), "red"), "Rate this image")], params)
    text_only = backend.generate([user_message("Rate this image")], params)
    assert tall.usage.input_tokens - small.usage.input_tokens == 1
    assert small.usage.input_tokens > text_only.usage.input_tokens  # the image part reached the model
    assert (small.usage.output_tokens, small.finish_reason) == (3, "length")
    assert (
        small.model_snapshot == model
    )  # no system_fingerprint: the snapshot is the model id the server reports


def test_logprobs_are_ignored_and_say_so(served):
    backend = _backend(served)
    reply = backend.generate(
        [user_message("Good or Bad?")], GenerationParams(max_tokens=1, logprobs=True, top_logprobs=5)
    )
    assert reply.logprobs is None and reply.logprobs_status == "unavailable"
    with pytest.raises(LogprobsUnavailableError, match="no token log-probabilities"):
        backend.candidate_probabilities([user_message("Good or Bad?")], ["Good", "Bad"])


@pytest.fixture
def judge_inputs(tmp_path):
    samples = [{"id": f"s{i}", "prompt": f"draw shape {i}"} for i in range(2)]
    bench = make_benchmark(tmp_path / "bench", "text_to_image", samples)
    colors = {s["id"]: Image.new("RGB", (40 + 8 * i, 56), (40 * i, 90, 200)) for i, s in enumerate(samples)}
    outputs = make_outputs(tmp_path / "outputs", {"m1": colors, "m2": dict(reversed(colors.items()))})
    return bench, outputs


@pytest.mark.parametrize(
    ("mode", "status"), [("single", "parse_failure"), ("pairwise", "parse_failure"), ("probability", "error")]
)
def test_judge_end_to_end(served, judge_inputs, tmp_path, mode, status):
    base_url, model = served
    bench, outputs = judge_inputs
    out = tmp_path / mode
    args = ["judge", "--benchmark", str(bench), "--config", "text_to_image", "--outputs", str(outputs)]
    args += ["--judge", f"openai:{model}", "--base-url", base_url, "--mode", mode, "--out", str(out)]
    result = CliRunner().invoke(cli, [*args, "--max-attempts", "2"])
    # random weights never write a valid verdict: every judgment is a recorded failure, and the run says so
    assert result.exit_code == 1 and "error: every judgment failed" in result.output, result.output
    verdicts = read_verdicts(out)
    assert len(verdicts) == 4 and {v.status for v in verdicts} == {status}
    assert {v.judge for v in verdicts} == {f"openai:{model}"}
    if mode == "probability":  # transformers serve ignores `logprobs`: each verdict names why
        assert all("log-probabilities" in (v.error or "") for v in verdicts)
    else:  # the model's own (gibberish) text and the usage the server reported are kept beside each failure
        assert all(v.raw_text and v.input_tokens and v.output_tokens for v in verdicts)


def test_screenshots_stage_end_to_end(served, tmp_path):
    from echo_builder.records import MediaRef, Sample
    from echo_builder.stages.templates_screenshots import run_screenshots

    shot = Image.new("RGB", (1170, 2532), "white")
    ImageDraw.Draw(shot).rectangle((60, 1380, 1110, 2430), fill=(200, 40, 40))
    sha = "c" * 64
    (tmp_path / "store" / "cc").mkdir(parents=True)
    shot.save(tmp_path / "store" / "cc" / f"{sha}.png")
    sample = Sample(
        id="echo-0000000000000001",
        prompt="",
        output_images=(MediaRef(url="https://e.com/s.png", sha256=sha, path=f"cc/{sha}.png"),),
        quality="Benchmark",
        is_screenshot=True,
    )
    caller = ModelCaller(
        _backend(served), cache=CallCache(tmp_path / "cache"), retry=RetryPolicy(max_attempts=2)
    )
    result = run_screenshots([sample], caller=caller, store_root=tmp_path / "store")
    assert result.info["box_format"] == "norm1000"  # the folder's config.json: model_type qwen2_vl
    # gibberish is a recorded failure of this sample (asked, re-asked once), with the model's text; nothing lost
    [failure] = result.failures
    assert failure.stage == "screenshots" and failure.raw_text
    assert result.samples == [sample]
    assert caller.stats.attempts == 2 and caller.stats.input_tokens > 0
