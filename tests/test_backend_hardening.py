"""Model backends against hostile servers and options (issue 13 items 5, 14, 19; issue 14 item 9).

- every HTTP reply body is capped on its decoded size, read incrementally, and an oversized one fails that call
  once (no retries) with a clear recorded error;
- a key inside ``--base-url`` (userinfo or ``?api-key=``) or echoed back by the server appears in no log line and
  no written file;
- numeric options refuse nan, inf and out-of-range values with one ``error:`` line naming the option and the range,
  on every command and in the Python API; keyword windows never overflow;
- every option that can change a reply (``extra_body``, run-wide ``temperature``...) is part of the cache key and
  is recorded in ``run.json``, the build report and the card.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import sqlite3
import zlib
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pandas as pd
import pytest
from click.testing import CliRunner
from PIL import Image

from echo_builder.backends import GenerationParams, create_backend, user_message
from echo_builder.backends.bounded_http import ReplyTooLargeError, read_capped
from echo_builder.backends.caller import CallRequest, ModelCaller, RetryPolicy
from echo_builder.cache import CallCache
from echo_builder.cli import cli
from echo_builder.commands.options import parse_options
from echo_builder.errors import ConfigError
from echo_builder.records import Post
from echo_builder.secrets import redact, redact_url, register_url_secrets
from echo_builder.stages.query import Keyword, run_query
from tests.helpers.benchmark import make_benchmark, make_outputs
from tests.helpers.openai_server import FakeOpenAIServer, FaultPlan, Scripted

FAST = RetryPolicy(max_attempts=4, initial_backoff_s=0.001, max_backoff_s=0.01, jitter=False)
MiB = 2**20


def _request(text: str = "hello") -> CallRequest:
    return CallRequest((user_message(text),), GenerationParams(max_tokens=16), stage="test")


def _decoded_read(error: str) -> int:
    """Decoded bytes the client read before stopping, from the recorded error."""
    match = re.search(r"stopped reading after ([\d,]+) decoded", error)
    assert match, error
    return int(match.group(1).replace(",", ""))


# -- 13.14: reply size caps -------------------------------------------------------------------------------------------
@pytest.mark.parametrize("status", [200, 500])
def test_gzip_bomb_reply_or_error_body_fails_the_call_once_after_reading_at_most_the_cap(status):
    """A 64 KiB gzip body that inflates to 64 MiB, as a reply and as an error body: the client stops at the
    1 MiB cap (decoded), records a permanent error, and does not ask again."""
    plan = FaultPlan(
        always=lambda body: True, always_kind="gzip_bomb", bomb_bytes=64 * MiB, bomb_status=status
    )
    with FakeOpenAIServer(faults=plan) as server:
        backend = create_backend("openai:m", base_url=server.base_url, timeout_s=30, max_reply_bytes=MiB)
        result = ModelCaller(backend, retry=FAST).call(_request())
        assert server.calls == 1  # not retried: the same server sends the same body again
    assert not result.ok and result.error_kind == "permanent"
    assert "reply too large" in result.error and "1,048,576-byte cap" in result.error
    assert _decoded_read(result.error) <= MiB + 1  # memory held: the cap, not 64 MiB


def test_endless_chunked_reply_is_not_read_past_the_cap():
    """A body of unknown length (chunked, 256 MiB): reading stops at the cap and the rest is never sent."""
    plan = FaultPlan(always=lambda body: True, always_kind="big_body", big_body_bytes=256 * MiB)
    with FakeOpenAIServer(faults=plan) as server:
        backend = create_backend("openai:m", base_url=server.base_url, timeout_s=30, max_reply_bytes=MiB)
        result = ModelCaller(backend, retry=FAST).call(_request())
        assert server.calls == 1
        sent = server.log.body_bytes_sent
    assert result.error_kind == "permanent" and "reply too large" in result.error
    assert _decoded_read(result.error) <= MiB + 1
    assert (
        sent < 64 * MiB
    )  # the client closed the connection: only socket buffers' worth more left the server


def test_default_cap_lets_normal_replies_through(openai_server):
    backend = create_backend("openai:m", base_url=openai_server.base_url, timeout_s=10)
    assert backend.config.max_reply_bytes == 16 * MiB
    assert ModelCaller(backend).call(_request("hi")).reply.text == "echo: hi"


def test_image_generation_reply_bomb_is_a_recorded_error_after_one_attempt(tmp_path):
    from echo_builder.generate.manifest import read_records
    from echo_builder.generate.run import run_generation

    bench = make_benchmark(tmp_path / "bench", "text_to_image", [{"id": "p0", "prompt": "a cat"}])
    plan = FaultPlan(always=lambda body: True, always_kind="gzip_bomb", bomb_bytes=64 * MiB)
    with FakeOpenAIServer(faults=plan) as server:
        options = {
            "base_url": server.base_url,
            "max_attempts": 4,
            "initial_backoff_s": 0.001,
            "timeout_s": 30,
            "max_reply_bytes": MiB,
        }
        result = run_generation(
            bench, "text_to_image", "openai-images:img", "api", tmp_path / "out", options=options
        )
        assert server.calls == 1
    assert result.summary["statuses"] == {"error": 1}
    record = read_records(tmp_path / "out" / "api")["p0"]
    assert "reply too large" in record["message"] and _decoded_read(record["message"]) <= MiB + 1


class _FakeResponse:
    """An unread response: headers and raw chunks from an iterator; counts the chunks pulled."""

    def __init__(self, headers: dict[str, str], chunks) -> None:
        self.headers = headers
        self._chunks = chunks
        self.pulled = 0

    async def aiter_raw(self):
        for chunk in self._chunks:
            self.pulled += 1
            yield chunk


def _endless_gzip():
    compressor = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    block = bytes(MiB)
    while True:  # a never-ending gzip stream of zeros, ~1 KiB per MiB
        yield compressor.compress(block) + compressor.flush(zlib.Z_SYNC_FLUSH)


@pytest.mark.parametrize("encoding", ["gzip", "x-gzip"])
def test_read_capped_stops_an_endless_compressed_stream(encoding):
    response = _FakeResponse({"content-encoding": encoding}, _endless_gzip())
    with pytest.raises(ReplyTooLargeError) as info:
        asyncio.run(read_capped(response, 3 * MiB))
    assert info.value.read == 3 * MiB + 1 and info.value.limit == 3 * MiB
    assert response.pulled <= 5  # about one chunk per MiB decoded


def test_read_capped_deflate_identity_content_length_and_unknown_codings():
    payload = b'{"ok": true}' * 100
    for wbits in (zlib.MAX_WBITS, -zlib.MAX_WBITS):  # zlib-wrapped and raw deflate
        c = zlib.compressobj(6, zlib.DEFLATED, wbits)
        body = c.compress(payload) + c.flush()
        got = asyncio.run(read_capped(_FakeResponse({"content-encoding": "deflate"}, iter([body])), 4096))
        assert got == payload
    assert asyncio.run(read_capped(_FakeResponse({}, iter([payload[:10], payload[10:]])), 4096)) == payload
    declared = _FakeResponse({"content-length": str(10 * MiB)}, iter([b"x"]))
    with pytest.raises(ReplyTooLargeError, match="Content-Length"):
        asyncio.run(read_capped(declared, MiB))
    assert declared.pulled == 0  # refused before reading a byte
    for coding in ("br", "zstd", "gzip, gzip"):
        with pytest.raises(ReplyTooLargeError, match="cannot be bounded"):
            asyncio.run(read_capped(_FakeResponse({"content-encoding": coding}, iter([b"x"])), MiB))


# -- 13.19: keys in URLs and replies ------------------------------------------------------------------------------------
def test_url_credentials_are_registered_and_redacted():
    register_url_secrets("https://bob:pw-Secret%2F42@api.example.com/v1?api-key=q-Secret-77&model=x")
    text = "key pw-Secret/42 or pw-Secret%2F42 and q-Secret-77"
    assert redact(text) == "key *** or *** and ***"
    assert (
        redact_url("https://bob:whatever@h.example/v1?token=abc123&x=1")
        == "https://***@h.example/v1?token=***&x=1"
    )
    register_url_secrets(
        "https://u:broken-Secret-9@h:99999/v1"
    )  # an invalid port still registers the password
    assert redact("broken-Secret-9") == "***"


def _files_text(folder: Path) -> str:
    """Every file under ``folder`` as text: raw bytes, parquet cells and SQLite rows."""
    chunks = []
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        chunks.append(path.read_bytes().decode("utf-8", "replace"))
        if path.suffix == ".parquet":
            chunks.append(pd.read_parquet(path).to_json())
        if path.name == "calls.sqlite":
            with sqlite3.connect(path) as conn:
                chunks.extend(str(row) for row in conn.execute("SELECT * FROM calls"))
    return "\n".join(chunks)


def test_keys_in_the_base_url_and_echoed_by_the_server_are_in_no_log_and_no_file(
    tmp_path, caplog, monkeypatch
):
    userinfo_key, query_key, env_key = "sk-userinfo-Q1w2E3r4", "sk-query-Z9x8C7v6", "sk-env-M5n4B3v2"
    monkeypatch.setenv("OPENAI_API_KEY", env_key)
    bench = make_benchmark(
        tmp_path / "bench", "text_to_image", [{"id": f"s{i}", "prompt": f"p{i}"} for i in range(3)]
    )
    outputs = make_outputs(
        tmp_path / "outputs", {"m": {f"s{i}": Image.new("RGB", (16, 16)) for i in range(3)}}
    )

    def echo_keys(body):  # a server that repeats every credential it saw
        return Scripted(f"Your keys: {userinfo_key} {query_key} {env_key}. Rating: [[7]]")

    with FakeOpenAIServer(reply=echo_keys) as server:
        port = server.base_url.split(":")[2].split("/")[0]
        base = f"http://user:{userinfo_key}@127.0.0.1:{port}/v1?api-key={query_key}"
        caplog.set_level(logging.DEBUG)
        out = tmp_path / "run"
        result = CliRunner().invoke(
            cli,
            ["-vv", "judge", "--benchmark", str(bench), "--config", "text_to_image", "--outputs", str(outputs),
             "--judge", "openai:j", "--out", str(out), "--base-url", base],
        )  # fmt: skip
        assert server.calls >= 3  # the calls really reached the server
    assert result.exit_code == 0, result.output
    logged = caplog.text + "\n".join(r.getMessage() for r in caplog.records) + result.output
    assert "HTTP Request" in logged or "Sending HTTP Request" in logged  # the HTTP stack did log at DEBUG
    written = _files_text(out)
    assert "Your keys: *** *** ***. Rating: [[7]]" in written  # the echoed keys were stored, redacted
    assert pd.read_parquet(out / "verdicts.parquet")["rating"].tolist() == [7, 7, 7]
    for key in (userinfo_key, query_key, env_key):
        assert key not in logged, f"{key} in a log line"
        assert key not in written, f"{key} in a written file"


# -- 13.5: numeric options -----------------------------------------------------------------------------------------------
NUMERIC = [
    ("judge", "--timeout", "(0, 86400]"),
    ("judge", "--max-attempts", "[1, 100]"),
    ("judge", "--concurrency", "[1, 1024]"),
    ("judge", "--limit", "[1, 1000000000]"),
    ("build", "--timeout", "(0, 86400]"),
    ("build", "--max-attempts", "[1, 100]"),
    ("build", "--concurrency", "[1, 1024]"),
    ("build", "--threshold", "[1, 5]"),
    ("generate", "--seed", "[0, 4294967295]"),
    ("generate", "--limit", "[1, 1000000000]"),
    ("leaderboard", "--n-boot", "[10, 1000000]"),
    ("leaderboard", "--seed", "[0, 4294967295]"),
    ("backends ping", "--timeout", "(0, 86400]"),
]


@pytest.mark.parametrize(("command", "option", "accepted"), NUMERIC)
@pytest.mark.parametrize("value", ["nan", "inf", "-inf", "-1", "1e999", "99999999999999999999", "two"])
def test_numeric_options_refuse_bad_values_with_one_error_line(tmp_path, command, option, accepted, value):
    args = [*command.split(), option, value]
    if command == "build":
        args.insert(1, str(tmp_path))  # SOURCES must exist for click to get that far
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 1, result.output
    assert (
        result.output
        == f"error: {option}: {value!r} is not accepted; give " + result.output.split("give ", 1)[1]
    )
    assert accepted in result.output and result.output.count("\n") == 1 and "Traceback" not in result.output
    assert not any(tmp_path.iterdir()) or command == "build"  # nothing was written


def test_space_numeric_options_are_checked_too(monkeypatch):
    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parents[1] / "spaces_app"))
    pytest.importorskip("gradio")
    from echo_space.cli import main

    for args in (["--port", "99999"], ["--n-boot", "nan"]):
        result = CliRunner().invoke(main, args)
        assert result.exit_code == 1 and args[0] in result.output and "Traceback" not in result.output


def test_python_api_refuses_non_finite_and_out_of_range_numbers(openai_server):
    backend = create_backend("openai:m", base_url=openai_server.base_url)
    for bad in (float("nan"), float("inf"), -1.0, 0.0, 10**9):
        with pytest.raises(ConfigError, match=r"timeout_s must be a number of seconds in \(0, 86400\]"):
            ModelCaller(backend, timeout_s=bad)
        with pytest.raises(ConfigError, match="timeout_s"):
            create_backend("openai:m", base_url=openai_server.base_url, timeout_s=bad)
    for bad in (0, 10**6, 2.5, True):
        with pytest.raises(ConfigError, match=r"concurrency must be a whole number in \[1, 1024\]"):
            ModelCaller(backend, concurrency=bad)
    with pytest.raises(ValueError, match="finite"):
        RetryPolicy(max_total_s=float("inf"))
    for option, bad in (("temperature", float("nan")), ("top_p", 0.0), ("max_tokens", 0), ("seed", -1)):
        with pytest.raises(ConfigError, match=f"invalid generation option for openai:m: {option}"):
            create_backend("openai:m", base_url=openai_server.base_url, **{option: bad})
    for raw in ("timeout_s=NaN", "timeout_s=Infinity", "max_reply_bytes=-Infinity"):
        with pytest.raises(ConfigError, match="finite number"):
            parse_options((raw,))
    assert parse_options(("temperature=0.5", "name=NaNny")) == {"temperature": 0.5, "name": "NaNny"}


def test_huge_keyword_windows_are_clamped_not_an_overflow():
    launch = datetime(2025, 3, 25, tzinfo=timezone.utc)
    posts = [
        Post(
            id=f"x:{i}",
            platform="x",
            text="new model drop",
            author_id="a",
            created_at=launch + timedelta(days=d),
        )
        for i, d in enumerate((-400, 5, 4000))
    ]
    for window, before in ((3_000_000, 0), (999_999_999, 3_000_000), (10**30, 10**30)):
        result = run_query(
            posts, [Keyword("model", window_days=window, before_days=before)], launch_date=launch
        )
        kept = [p.id for p in result.kept]
        assert kept == (["x:1", "x:2"] if before == 0 else ["x:0", "x:1", "x:2"])


# -- 14.9: everything that changes a reply is in the cache key ---------------------------------------------------------------
def _run_calls(server, cache_dir, texts, **options):
    backend = create_backend("openai:m", base_url=server.base_url, timeout_s=10, **options)
    with CallCache(cache_dir) as cache:
        caller = ModelCaller(backend, cache=cache)
        results = caller.call_many([_request(t) for t in texts])
    assert all(r.ok for r in results)
    return caller.stats.attempts, caller.stats.cache_hits


@pytest.mark.parametrize(
    "options",
    [
        {"extra_body": {"temperature": 1}},
        {"temperature": 0.7},
        {"top_p": 0.5},
        {"max_tokens": 7},
        {"seed": 11},
        {"extra_body": {"top_k": 5}},
    ],
)
def test_runs_differing_in_one_reply_option_both_call_identical_runs_hit(openai_server, tmp_path, options):
    texts = ["a", "b", "c", "d"]
    assert _run_calls(openai_server, tmp_path, texts) == (4, 0)
    assert _run_calls(openai_server, tmp_path, texts, **options) == (
        4,
        0,
    )  # not served the default run's replies
    assert _run_calls(openai_server, tmp_path, texts, **options) == (0, 4)
    assert _run_calls(openai_server, tmp_path, texts) == (0, 4)
    sent = openai_server.log.bodies[4]
    for key, value in options.items():
        if key == "extra_body":
            assert all(sent[k] == v for k, v in value.items())  # extra_body fields go into the JSON body
        else:
            assert sent[key] == value  # the run-wide value replaced the stage's own


def test_generation_options_apply_to_local_backends_through_the_caller():
    """transformers: and any other backend get the run-wide values in the params of every call."""
    from echo_builder.backends.base import Backend, Reply

    seen = []

    class Local(Backend):
        name = "local-test"

        async def agenerate(self, messages, params):
            seen.append(params)
            return Reply(text="ok", backend_id=self.backend_id)

    backend = Local("tiny")
    backend.generation_overrides = {"temperature": 0.9, "seed": 3}
    ModelCaller(backend).call(_request())
    assert (seen[0].temperature, seen[0].seed, seen[0].max_tokens) == (0.9, 3, 16)
    assert backend.settings() == {"temperature": 0.9, "seed": 3}


def test_judge_records_settings_in_run_json_and_a_changed_setting_makes_new_calls(openai_server, tmp_path):
    bench = make_benchmark(
        tmp_path / "bench", "text_to_image", [{"id": f"s{i}", "prompt": f"p{i}"} for i in range(2)]
    )
    outputs = make_outputs(
        tmp_path / "outputs", {"m": {f"s{i}": Image.new("RGB", (16, 16)) for i in range(2)}}
    )
    cache = tmp_path / "cache"

    def judge(out, *options):
        args = ["judge", "--benchmark", str(bench), "--config", "text_to_image", "--outputs", str(outputs),
                "--judge", "openai:j", "--out", str(tmp_path / out), "--base-url", openai_server.base_url,
                "--cache", str(cache)]  # fmt: skip
        for option in options:
            args += ["-o", option]
        result = CliRunner().invoke(cli, args)
        assert result.exit_code == 0, result.output
        return json.loads((tmp_path / out / "run.json").read_text())["judges"][0]

    default = judge("a")
    warm = judge("b", "temperature=1", 'extra_body={"top_k": 3}')
    again = judge("c", "temperature=1", 'extra_body={"top_k": 3}')
    assert (default["calls"], default["settings"]) == (2, {})
    assert (warm["calls"], warm["cache_hits"]) == (2, 0)
    assert warm["settings"] == {"temperature": 1.0, "extra_body": {"top_k": 3}}
    assert (again["calls"], again["cache_hits"]) == (0, 2)


def test_card_states_the_generation_settings():
    from echo_dataset.card import card_context_from_report, render_card

    report = {
        "backend": "openai:gpt-4o",
        "backend_settings": {"temperature": 0.5, "extra_body": {"top_k": 3}},
    }
    card = render_card(card_context_from_report(report), counts={"text_to_image": 1})
    assert '- Generation settings: `extra_body={"top_k": 3}`, `temperature=0.5`' in card
    default = render_card(card_context_from_report({"backend": "openai:gpt-4o"}), counts={"text_to_image": 1})
    assert "- Generation settings: defaults (temperature 0)" in default


def test_run_judging_checks_its_limits_before_writing(tmp_path):
    from echo_builder.judge.run import run_judging

    bench = make_benchmark(tmp_path / "bench", "text_to_image", [{"id": "s0", "prompt": "p"}])
    outputs = make_outputs(tmp_path / "outputs", {"m": {"s0": Image.new("RGB", (16, 16))}})
    for limits in ({"timeout_s": float("nan")}, {"concurrency": 0}, {"max_attempts": 10**6}):
        with pytest.raises(ConfigError, match=next(iter(limits))):
            run_judging(bench, "text_to_image", outputs, ["openai:j"], tmp_path / "run", **limits)
        assert not (tmp_path / "run").exists()


def test_transformers_options_that_change_replies_join_the_cache_key(tmp_path):
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    plain = create_backend(f"transformers:{tmp_path}")
    other = create_backend(f"transformers:{tmp_path}", revision="v2", dtype="bfloat16", temperature=0.3)
    assert plain.settings() == {}
    assert other.cache_settings() == {"revision": "v2", "dtype": "bfloat16"}
    assert other.settings() == {"temperature": 0.3, "revision": "v2", "dtype": "bfloat16"}
    request = _request()
    keys = {ModelCaller(b)._key(ModelCaller(b)._prepare(request)) for b in (plain, other)}
    assert len(keys) == 2


def test_build_records_generation_settings_in_report_and_card(openai_server, tmp_path):
    """A build with -o temperature=0.2: every call is sent at 0.2, report.json and the card say so."""
    source = Path(__file__).resolve().parent / "data" / "hostile" / "sources" / "backends_window.jsonl"
    out = tmp_path / "out"
    openai_server.reply = lambda body: '{"score": 1}'  # relevance: nothing kept, the build ends there
    args = ["build", str(source), "--out", str(out), "--backend", "openai:vlm", "--base-url", openai_server.base_url,
            "--target-model", "image gen", "--offline", "-o", "temperature=0.2", "-o", 'extra_body={"top_k": 2}']  # fmt: skip
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 0, result.output
    assert openai_server.calls > 0
    assert {(b["temperature"], b["top_k"]) for b in openai_server.log.bodies} == {(0.2, 2)}
    report = json.loads((out / "report.json").read_text())
    assert report["backend_settings"] == {"temperature": 0.2, "extra_body": {"top_k": 2}}
    assert (
        '- Generation settings: `extra_body={"top_k": 2}`, `temperature=0.2`'
        in (out / "README.md").read_text()
    )


def test_build_api_checks_its_limits_before_writing(tmp_path):
    from echo_builder.pipeline import BuildConfig, build

    source = Path(__file__).resolve().parent / "data" / "hostile" / "sources" / "backends_window.jsonl"
    for limits in ({"timeout_s": float("inf")}, {"max_attempts": 0}, {"concurrency": 5000}):
        config = BuildConfig(sources=[str(source)], out_dir=str(tmp_path / "out"), **limits)
        with pytest.raises(ConfigError, match=next(iter(limits))):
            build(config)
        assert not (tmp_path / "out").exists()


def test_model_listings_and_every_other_body_of_the_client_are_capped(openai_server):
    """The cap sits under the client, so it covers every route (here the model listing, a GET)."""
    from echo_builder.backends.bounded_http import capped_client

    async def listing(limit: int):
        client = capped_client(limit, 10.0)
        try:
            response = await client.get(openai_server.base_url + "/models")
            return response.json()
        finally:
            await client.aclose()

    assert asyncio.run(listing(4096))["data"][0]["id"] == openai_server.model_snapshot
    with pytest.raises(ReplyTooLargeError, match="over the 16-byte cap"):
        asyncio.run(listing(16))


@pytest.mark.parametrize(
    ("spec", "option", "value"),
    [
        ("openai-images:img", "timeout_s", float("nan")),
        ("openai-images:img", "max_total_s", float("inf")),
        ("openai-images:img", "max_reply_bytes", 10),
        ("command:python x.py", "timeout_s", float("inf")),
        ("diffusers:/nowhere", "guidance_scale", float("nan")),
        ("diffusers:/nowhere", "height", 10**9),
    ],
)
def test_generator_numeric_options_are_finite_and_bounded(spec, option, value):
    from echo_builder.generate import create_generator

    if spec.startswith("diffusers:"):
        pytest.importorskip("diffusers")
    base = {"base_url": "http://127.0.0.1:9/v1"} if spec.startswith("openai-images:") else {}
    with pytest.raises(ConfigError, match=rf"invalid options for {re.escape(spec)}: {option}: "):
        create_generator(spec, **base, **{option: value})
