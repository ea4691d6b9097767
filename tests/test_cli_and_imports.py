"""The CLI surface, lazy imports of heavy dependencies, the backend registry, and secret redaction."""

from __future__ import annotations

import json
import logging
import subprocess
import sys

import pytest
from click.testing import CliRunner

from echo_builder import __version__
from echo_builder.backends import create_backend, list_backends, parse_spec, register_backend
from echo_builder.backends.base import Backend
from echo_builder.backends.rules import RulesBackend, register_rule
from echo_builder.cli import cli
from echo_builder.errors import ConfigError, PermanentBackendError
from echo_builder.secrets import get_logger, redact, register_secret


def _run(*args: str, **kw):
    return CliRunner().invoke(cli, list(args), catch_exceptions=False, **kw)


def test_help_lists_commands_and_version():
    out = _run("--help").output
    for command in ("backends", "cache"):
        assert command in out
    assert _run("--version").output.strip() == f"echo-bench, version {__version__}"
    assert "ping" in _run("backends", "--help").output and "stats" in _run("cache", "--help").output


def test_console_script_is_installed():
    done = subprocess.run(
        [sys.executable, "-m", "echo_builder.cli", "--help"], capture_output=True, text=True
    )
    assert done.returncode == 0 and "backends" in done.stdout


def test_backends_list():
    out = _run("backends", "list").output
    lines = {line.split()[0]: line for line in out.splitlines()[1:4]}
    assert set(lines) == {"openai", "rules", "transformers"}
    assert "judge-local" in lines["transformers"] and "core" in lines["openai"]


def test_backends_ping(openai_server):
    result = _run("backends", "ping", "openai:tiny", "--base-url", openai_server.base_url)
    assert result.exit_code == 0, result.output
    assert "snapshot:  fake-vlm-2026-01-01@fp_test" in result.output
    assert "reply:     'echo: Reply with the single word: pong'" in result.output
    assert openai_server.log.bodies[0]["max_tokens"] == 8


def test_backends_ping_failure_exits_nonzero(openai_server):
    from tests.helpers.openai_server import FaultPlan

    openai_server.faults = FaultPlan(always=lambda body: True, always_kind="400")
    result = CliRunner().invoke(
        cli, ["backends", "ping", "openai:tiny", "--base-url", openai_server.base_url]
    )
    assert result.exit_code == 1 and "FAILED" in result.output and "HTTP 400" in result.output


def test_unknown_backend_is_one_clear_line():
    form = (
        "use <backend>:<target>, e.g. openai:gpt-4o or transformers:<hub id or local path>; backends: openai, "
        "rules, transformers"
    )
    result = CliRunner().invoke(cli, ["backends", "ping", "gemini:pro"])
    assert result.exit_code == 1
    assert result.output.strip() == f"error: unknown backend 'gemini' in spec 'gemini:pro': {form}"
    # a bare model name, as in `judge --judge gpt-4o`: the message shows the spec form
    result = CliRunner().invoke(cli, ["backends", "ping", "gpt-4o"])
    assert result.exit_code == 1
    assert result.output.strip() == f"error: unknown backend spec 'gpt-4o': {form}"


def test_publish_without_a_token_is_one_error_line(tmp_path, monkeypatch):
    import huggingface_hub

    from echo_dataset.writer import write_hub_folder

    hub = write_hub_folder({"text_to_image": [{"id": "a", "prompt": "p"}]}, tmp_path / "hub", card_context={})
    monkeypatch.delenv("HF_TOKEN", raising=False)
    monkeypatch.setattr(huggingface_hub, "get_token", lambda: None)  # no saved login either
    created = []
    monkeypatch.setattr(huggingface_hub, "HfApi", lambda **kw: created.append(kw))
    result = CliRunner().invoke(cli, ["publish", str(hub), "--repo-id", "someone/echo-test"])
    assert result.exit_code == 1 and created == []
    assert result.output.splitlines() == [
        "error: publishing needs a Hugging Face token with write access: set HF_TOKEN, run `hf auth login`, or "
        "pass --token (token= in Python); nothing was uploaded"
    ]


def test_cache_stats(openai_server, tmp_path):
    from echo_builder.backends import user_message
    from echo_builder.backends.caller import CallRequest, ModelCaller
    from echo_builder.cache import CallCache

    backend = create_backend("openai:m", base_url=openai_server.base_url)
    with CallCache(tmp_path) as cache:
        caller = ModelCaller(backend, cache=cache)
        reqs = [CallRequest((user_message(f"q{i}"),), stage="relevance") for i in range(3)]
        caller.call_many(reqs)
        caller.call_many(reqs)
    data = json.loads(_run("cache", "stats", str(tmp_path), "--format", "json").output)
    assert data["entries"] == 3 and data["stages"] == {"relevance": 3}
    stats = data["backends"]["openai:m"]
    assert (stats["entries"], stats["hits"], stats["misses"]) == (3, 3, 3)
    assert stats["output_tokens"] == 6  # "echo: qN" is two words per reply in the fake server
    table = _run("cache", "stats", str(tmp_path)).output
    assert "entries: 3" in table and "openai:m" in table
    missing = CliRunner().invoke(cli, ["cache", "stats", str(tmp_path / "nope")])
    assert missing.exit_code == 2 and "does not exist" in missing.output


@pytest.mark.parametrize(
    "module",
    [
        "echo_builder",
        "echo_dataset",
        "echo_builder.backends",
        "echo_builder.cli",
        "echo_builder.backends.caller",
        "echo_builder.cache",
        "echo_builder.records",
    ],
)
def test_importing_the_packages_pulls_no_heavy_dependency(module):
    code = (
        f"import sys, {module}\n"
        "heavy = [m for m in ('torch', 'transformers', 'openai', 'accelerate', 'datasets') if m in sys.modules]\n"
        "print(','.join(heavy))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == ""


def test_spec_parsing_and_registry():
    assert parse_spec("openai:gpt-4o") == ("openai", "gpt-4o")
    assert parse_spec("transformers:/models/qwen:v2") == ("transformers", "/models/qwen:v2")
    assert parse_spec(" rules ") == ("rules", "")
    for bad, message in [
        ("", "empty backend spec"),
        ("nope:x", "unknown backend"),
        ("openai", "needs a target"),
    ]:
        with pytest.raises(ConfigError, match=message):
            create_backend(bad)
    assert [b.name for b in list_backends()] == ["openai", "rules", "transformers"]

    class Clash(Backend):
        name = "openai"

        async def agenerate(self, messages, params):  # pragma: no cover - never called
            raise NotImplementedError

    with pytest.raises(ConfigError, match="already registered"):
        register_backend(Clash)


def test_rules_backend_dispatches_to_registered_stage_rules():
    backend = create_backend("rules")
    assert isinstance(backend, RulesBackend) and backend.backend_id == "rules"
    with pytest.raises(ConfigError, match="no implementation for stage 'sentiment'"):
        backend.apply("sentiment", "text")
    register_rule("test-upper")(str.upper)
    assert backend.apply("test-upper", "abc") == "ABC"
    with pytest.raises(ConfigError, match="already registered"):
        register_rule("test-upper")(str.lower)
    with pytest.raises(PermanentBackendError, match="does not answer free-form prompts"):
        backend.generate([])
    with pytest.raises(ConfigError, match="takes no options"):
        create_backend("rules", temperature=0)


def test_redaction(monkeypatch, caplog):
    monkeypatch.setenv("SOME_SERVICE_API_KEY", "abcdef123456")
    register_secret("registered-secret-value")
    register_secret("EMPTY")  # placeholders are too short to redact safely
    assert redact("key abcdef123456 and registered-secret-value, EMPTY") == "key *** and ***, EMPTY"
    log = get_logger("echo_builder.tests.redaction")
    with caplog.at_level(logging.INFO, logger="echo_builder"):
        log.info("calling with %s", "registered-secret-value")
        try:
            raise RuntimeError("token abcdef123456 rejected")
        except RuntimeError:
            log.exception("failed")
    assert "registered-secret-value" not in caplog.text and "abcdef123456" not in caplog.text
    assert "calling with ***" in caplog.text
