"""The ``openai-images:`` generator against the loopback server (scripted images, injected faults) and the
``command:`` generator with small scripts (the JSON protocol, crashes, refusals, timeouts)."""

from __future__ import annotations

import hashlib
import io
import json
import shlex
import sys
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from echo_builder.errors import ConfigError
from echo_builder.generate import create_generator, derive_seed
from echo_builder.generate.manifest import read_records
from echo_builder.generate.run import run_generation
from tests.helpers.benchmark import make_benchmark
from tests.helpers.openai_server import FakeOpenAIServer, FaultPlan

PROMPTS = {f"p{i}": f"prompt number {i}" for i in range(6)}
FAST_RETRIES = {"initial_backoff_s": 0.005, "max_backoff_s": 0.02, "timeout_s": 5}


@pytest.fixture
def t2i(tmp_path) -> Path:
    return make_benchmark(
        tmp_path / "bench", "text_to_image", [{"id": k, "prompt": v} for k, v in PROMPTS.items()]
    )


def _colour(path: Path) -> tuple[int, ...]:
    with Image.open(path) as img:
        colours = img.convert("RGB").getcolors()
    assert len(colours) == 1, "expected a one-colour image"
    return colours[0][1]


def _expected_colour(model: str, prompt: str, images: tuple[bytes, ...] = ()) -> tuple[int, ...]:
    """What the loopback server paints: the first three bytes of SHA-256 over model, NUL, prompt and images."""
    digest = hashlib.sha256(model.encode() + b"\x00" + prompt.encode())
    for image in images:
        digest.update(image)
    return tuple(digest.digest()[:3])


# -- openai-images -------------------------------------------------------------------------------------------
def test_transient_faults_are_retried_within_bounds(t2i, tmp_path):
    plan = FaultPlan(rate=0.5, kinds=("429", "500", "drop", "garbage", "truncated", "wrong_fields"), seed=3)
    plan.retry_after_ms = 5
    with FakeOpenAIServer(faults=plan) as server:
        options = {"base_url": server.base_url, "max_attempts": 8, "concurrency": 3, **FAST_RETRIES}
        result = run_generation(
            t2i, "text_to_image", "openai-images:img-1", "api", tmp_path / "out", options=options
        )
        bodies, faults = list(server.log.bodies), list(server.log.faults)
    assert result.summary["statuses"] == {"ok": 6}
    assert sum(1 for f in faults if f) >= 3  # the faults really happened
    records = read_records(tmp_path / "out" / "api")
    for sample_id, prompt in PROMPTS.items():
        sent = [b for b in bodies if b["prompt"] == prompt]
        assert {b["_route"] for b in sent} == {"generations"} and {b["model"] for b in sent} == {"img-1"}
        assert records[sample_id]["details"]["attempts"] == len(sent) <= 8
        assert _colour(tmp_path / "out" / "api" / f"{sample_id}.png") == _expected_colour("img-1", prompt)


def test_a_server_that_keeps_failing_is_a_recorded_error_after_max_attempts(t2i, tmp_path):
    plan = FaultPlan(always=lambda body: body.get("prompt") == PROMPTS["p2"], always_kind="500")
    with FakeOpenAIServer(faults=plan) as server:
        options = {"base_url": server.base_url, "max_attempts": 3, **FAST_RETRIES}
        result = run_generation(t2i, "text_to_image", "openai-images:img-1", "api", tmp_path, options=options)
        assert sum(1 for b in server.log.bodies if b["prompt"] == PROMPTS["p2"]) == 3
    assert result.summary["statuses"] == {"ok": 5, "error": 1}
    record = read_records(tmp_path / "api")["p2"]
    assert record["status"] == "error" and record["message"].startswith(
        "gave up after 3 attempt(s): HTTP 500"
    )
    assert not (tmp_path / "api" / "p2.png").exists()


def test_content_policy_refusal_is_recorded_once_and_kept_on_rerun(t2i, tmp_path, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-secret-key-123456")
    plan = FaultPlan(always=lambda body: body.get("prompt") == PROMPTS["p4"], always_kind="refuse")
    with FakeOpenAIServer(faults=plan) as server:
        args = (t2i, "text_to_image", "openai-images:img-1", "api", tmp_path)
        options = {"base_url": server.base_url, **FAST_RETRIES}
        first = run_generation(*args, options=options)
        assert server.calls == 6  # the refusal was not retried
        assert first.summary["statuses"] == {"ok": 5, "refused": 1}
        assert "safety system" in read_records(tmp_path / "api")["p4"]["message"]
        again = run_generation(*args, options=options)
        assert (again.summary["skipped"], server.calls) == (6, 6)  # a recorded refusal is not paid for twice
        retried = run_generation(*args, options=options, retry_refused=True)
        assert (retried.summary["attempted"], server.calls) == (1, 7)
    text = (tmp_path / "api" / "manifest.json").read_text()
    assert "sk-test-secret-key-123456" not in text and "base_url" not in json.loads(text)["parameters"]


def test_samples_with_input_images_go_to_the_edits_route(tmp_path):
    red, blue = Image.new("RGB", (24, 16), (200, 0, 0)), Image.new("RGB", (8, 8), (0, 0, 200))
    bench = make_benchmark(
        tmp_path / "bench",
        "image_to_image",
        [
            {"id": "one", "prompt": "edit one", "inputs": [red]},
            {"id": "two", "prompt": "combine", "inputs": [red, blue]},
        ],
    )
    with FakeOpenAIServer() as server:
        options = {"base_url": server.base_url, "size": "1024x1024", **FAST_RETRIES}
        run_generation(
            bench, "image_to_image", "openai-images:img-1", "api", tmp_path / "out", options=options
        )
        bodies = {b["prompt"]: b for b in server.log.bodies}
    assert {b["_route"] for b in bodies.values()} == {"edits"}
    assert bodies["combine"]["size"] == "1024x1024"
    sent = [Image.open(io.BytesIO(data)).convert("RGB") for data in bodies["combine"]["images"]]
    assert [img.size for img in sent] == [(24, 16), (8, 8)]  # both inputs, in order, unchanged
    np.testing.assert_array_equal(np.asarray(sent[0]), np.asarray(red))
    np.testing.assert_array_equal(np.asarray(sent[1]), np.asarray(blue))
    expected = _expected_colour("img-1", "combine", tuple(bodies["combine"]["images"]))
    assert _colour(tmp_path / "out" / "api" / "two.png") == expected


def test_openai_images_options_are_checked():
    with pytest.raises(ConfigError, match="no API key"):
        create_generator("openai-images:gpt-image-1")
    with pytest.raises(ConfigError, match="qualty"):
        create_generator("openai-images:gpt-image-1", base_url="http://127.0.0.1:9/v1", qualty="high")


# -- command -------------------------------------------------------------------------------------------------
SCRIPT = r"""
import json, os, sys, time
from PIL import Image

request = json.load(sys.stdin)
inputs_exist = [os.path.exists(p) for p in request["input_images"]]
with open(sys.argv[1], "a") as log:
    log.write(json.dumps({**request, "inputs_exist": inputs_exist}) + "\n")
prompt = request["prompt"]
if prompt == "crash":
    print("loading weights... boom", file=sys.stderr)
    sys.exit(3)
if prompt == "refuse":
    print("some log line")
    print(json.dumps({"status": "refused", "message": "policy: no dragons"}))
    sys.exit(0)
if prompt == "silent":
    sys.exit(0)
if prompt == "hang":
    time.sleep(30)
colour = request["seed"] % 256
if request["input_images"]:
    colour = Image.open(request["input_images"][0]).getpixel((0, 0))[0]
image = Image.new("RGB", (12, 10), (colour, len(request["input_images"]), 7))
image.save(request["output_path"], format="JPEG" if prompt == "jpeg" else "PNG")
"""


@pytest.fixture
def script(tmp_path) -> tuple[str, Path]:
    path = tmp_path / "my_model.py"
    path.write_text(SCRIPT)
    log = tmp_path / "requests.jsonl"
    return f"command:{shlex.quote(sys.executable)} {shlex.quote(str(path))} {shlex.quote(str(log))}", log


def test_command_protocol_and_per_sample_failures(script, tmp_path):
    spec, log = script
    rows = [
        {"id": "plain", "prompt": "a cat"},
        {"id": "edit", "prompt": "redder", "inputs": [Image.new("RGB", (5, 5), (123, 1, 1))]},
        {"id": "crashes", "prompt": "crash"},
        {"id": "refuses", "prompt": "refuse"},
        {"id": "silent", "prompt": "silent"},
        {"id": "jpeg", "prompt": "jpeg"},
        {"id": "hangs", "prompt": "hang"},
    ]
    bench = make_benchmark(tmp_path / "bench", "mixed", rows)
    result = run_generation(
        bench, "mixed", spec, "mine", tmp_path / "out", seed=11, options={"timeout_s": 3, "concurrency": 2}
    )
    assert result.summary["statuses"] == {"ok": 3, "error": 3, "refused": 1}
    records = read_records(tmp_path / "out" / "mine")
    folder = tmp_path / "out" / "mine"
    assert _colour(folder / "plain.png") == (derive_seed(11, "plain") % 256, 0, 7)
    assert _colour(folder / "edit.png") == (123, 1, 7)  # the script read the input file it was given
    with Image.open(folder / "jpeg.png") as img:
        assert img.format == "PNG"  # a JPEG at output_path is converted
    assert (
        records["crashes"]["message"] == "the program exited with status 3; stderr: loading weights... boom"
    )
    assert records["refuses"]["status"] == "refused" and records["refuses"]["message"] == "policy: no dragons"
    assert records["silent"]["message"] == "the program exited 0 but wrote no image to output_path"
    assert records["hangs"]["message"] == "no image within 3 s; the program was killed"
    requests = {r["sample_id"]: r for r in map(json.loads, log.read_text().splitlines())}
    assert set(requests["edit"]) == {
        "sample_id",
        "prompt",
        "input_images",
        "seed",
        "output_path",
        "inputs_exist",
    }
    assert requests["edit"]["inputs_exist"] == [True] and requests["plain"]["input_images"] == []
    assert requests["edit"]["seed"] == derive_seed(11, "edit") and requests["edit"]["prompt"] == "redder"
    assert not Path(requests["edit"]["input_images"][0]).exists()  # temporary files are cleaned up


def test_the_documented_minimal_program_runs(tmp_path):
    import random

    docs = (Path(__file__).resolve().parents[1] / "docs" / "generate.md").read_text()
    program = docs.split("A minimal program", 1)[1].split("```python\n", 1)[1].split("```", 1)[0]
    (tmp_path / "my_model.py").write_text(program)
    rows = [
        {"id": "plain", "prompt": "a cat"},
        {"id": "edit", "prompt": "make it pink", "inputs": [Image.new("RGB", (64, 48), (10, 200, 30))]},
    ]
    bench = make_benchmark(tmp_path / "bench", "mixed", rows)
    spec = f"command:{shlex.quote(sys.executable)} {shlex.quote(str(tmp_path / 'my_model.py'))} --steps 20"
    result = run_generation(bench, "mixed", spec, "mine", tmp_path / "out", seed=5)
    assert result.summary["statuses"] == {"ok": 2}, read_records(tmp_path / "out" / "mine")
    with Image.open(tmp_path / "out" / "mine" / "plain.png") as img:
        background = tuple(random.Random(derive_seed(5, "plain")).randrange(256) for _ in range(3))
        assert img.size == (512, 512) and img.convert("RGB").getpixel((511, 511)) == background
    with Image.open(tmp_path / "out" / "mine" / "edit.png") as img:
        assert img.size == (64, 48) and img.convert("RGB").getpixel((63, 47)) == (10, 200, 30)


def test_missing_program_is_a_clear_error(tmp_path):
    bench = make_benchmark(tmp_path / "bench", "text_to_image", [{"id": "a", "prompt": "p"}])
    with pytest.raises(ConfigError, match="program 'no-such-program-xyz' not found"):
        run_generation(bench, "text_to_image", "command:no-such-program-xyz --fast", "m", tmp_path / "out")
    assert not (tmp_path / "out").exists()
    with pytest.raises(ConfigError, match="cannot split the command line"):
        create_generator("command:python 'unclosed")
