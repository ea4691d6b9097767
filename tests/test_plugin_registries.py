"""Third-party sources, backends and generators through entry points (issue 15), and ``echo-bench plugins``.

A fake installed distribution is written into a temporary folder put on ``sys.path``: ``myplugin-0.1.dist-info``
with ``METADATA`` and ``entry_points.txt`` next to the plugin's package, exactly what ``pip install`` leaves in
``site-packages``, so :mod:`importlib.metadata` finds it as it would a real install. Nothing of echo-bench is
edited. The same folder on ``PYTHONPATH`` makes the plugin visible to ``echo-bench`` run as a subprocess.

Besides the working plugins, the distribution declares broken ones: a module that does not exist, an object of
the wrong type, a name taken by a built-in, an abstract backend, an adapter whose detection raises. Each is
reported (``plugin_problems()``, ``echo-bench plugins``) and left out; nothing else stops working.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from click.testing import CliRunner

from echo_builder import registry
from echo_builder.backends import create_backend, list_backends, parse_spec
from echo_builder.cli import cli
from echo_builder.errors import ConfigError
from echo_builder.generate import GenerationRequest, create_generator, list_generators
from echo_builder.sources import detect_format, get_source, list_sources, read_posts, registered_sources
from tests.conftest import REPO_ROOT

BUILTIN_SOURCES = ["jsonl", "x_api", "x_graphql", "reddit", "bluesky", "twscrape", "collection"]

PLUGIN_CODE = '''
"""A throwaway echo-bench plugin: a source format, a backend, a generator, and broken declarations."""

from PIL import Image

from echo_builder.backends import Backend, Reply
from echo_builder.generate import GenerationResult, Generator
from echo_builder.records import Post
from echo_builder.sources import SourceAdapter, register_source


@register_source  # the decorator too: the entry point must still see its own class, not a clash
class MastodonSource(SourceAdapter):
    name = "mastodon"
    description = "Mastodon statuses export ({'mastodon_statuses': [...]})"

    def sniff(self, value):
        return isinstance(value, dict) and "mastodon_statuses" in value

    def parse_document(self, document, ctx):
        for status in document.value["mastodon_statuses"]:
            yield Post(id=f"web:{status['id']}", platform="web", text=status["content"])


class GreedySource(SourceAdapter):
    """Claims every JSON value: detected only for what no built-in claims."""

    name = "wildcard"
    description = "claims anything"

    def sniff(self, value):
        return True

    def parse_document(self, document, ctx):
        yield Post(id="web:wildcard", platform="web", text="wildcard")


class ExplodingSniff(SourceAdapter):
    name = "exploding"
    description = "detection raises"

    def sniff(self, value):
        raise RuntimeError("sniff bug")

    def parse_document(self, document, ctx):
        return iter(())


class EchoBackend(Backend):
    name = "echoback"
    description = "answers locally: pong"
    needs_target = True

    async def agenerate(self, messages, params):
        return Reply(text="pong", backend_id=self.backend_id, model_snapshot="echoback-1")


class FaultyBackend(Backend):
    """Starts only with target "ok"; its replies raise a plain RuntimeError (a bug, not a BackendError)."""

    name = "faulty"

    def __init__(self, target):
        if target != "ok":
            raise RuntimeError(f"cannot start with {target}")
        super().__init__(target)

    async def agenerate(self, messages, params):
        raise RuntimeError("reply bug")


class FaultyGenerator(Generator):
    name = "faultygen"

    def __init__(self, target, **options):
        raise KeyError("weights")

    def generate_batch(self, requests):
        return []


class AbstractBackend(Backend):
    name = "abstractback"


class ClashBackend(EchoBackend):
    name = "openai"


class SolidGenerator(Generator):
    name = "solid"
    description = "one flat colour per image"

    def generate_batch(self, requests):
        return [GenerationResult("ok", Image.new("RGB", (8, 8), self.target)) for _ in requests]


NOT_A_CLASS = 42
'''

ENTRY_POINTS = """
[echo_bench.sources]
mastodon = myplugin:MastodonSource
wildcard = myplugin:GreedySource
exploding = myplugin:ExplodingSniff
notasource = myplugin:NOT_A_CLASS
jsonl = myplugin:MastodonSource
x_api = echo_builder.sources.jsonl:JsonlSource

[echo_bench.backends]
echoback = myplugin:EchoBackend
faulty = myplugin:FaultyBackend
abstractback = myplugin:AbstractBackend
openai = myplugin:ClashBackend
misnamed = myplugin:EchoBackend
echo:back = myplugin:EchoBackend

[echo_bench.generators]
solid = myplugin:SolidGenerator
faultygen = myplugin:FaultyGenerator
broken = myplugin_missing_module:Gen
"""

MASTODON = {"mastodon_statuses": [{"id": "7", "content": "a red fox in the snow"}]}


def _write_distribution(site: Path) -> Path:
    """``site/myplugin-0.1.dist-info`` + ``site/myplugin/__init__.py``, as pip would install them."""
    dist = site / "myplugin-0.1.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: myplugin\nVersion: 0.1\n", encoding="utf-8")
    (dist / "entry_points.txt").write_text(ENTRY_POINTS, encoding="utf-8")
    package = site / "myplugin"
    package.mkdir()
    (package / "__init__.py").write_text(textwrap.dedent(PLUGIN_CODE), encoding="utf-8")
    return site


@pytest.fixture
def plugin_site(tmp_path, monkeypatch):
    """The fake distribution on ``sys.path`` with every registry's plugins reloaded; undone afterwards."""
    site = _write_distribution(tmp_path / "site")
    monkeypatch.syspath_prepend(str(site))
    registry.reload_plugins()
    yield site
    monkeypatch.undo()
    for name in [m for m in sys.modules if m == "myplugin" or m.startswith("myplugin.")]:
        del sys.modules[name]
    registry.reload_plugins()
    for kind_registry in registry.all_registries().values():  # classes its decorator registered in-process
        for entry in kind_registry.entries():
            if entry.target.startswith("myplugin:"):
                kind_registry.remove(entry.name)


def _problems() -> dict[str, str]:
    return {f"{p.group}:{p.name}": p.reason for p in registry.plugin_problems()}


def _echo_bench(site: Path, *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), str(REPO_ROOT)])}
    return subprocess.run(
        [sys.executable, "-m", "echo_builder.cli", *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=cwd,
        timeout=300,
    )


# ----------------------------------------------------------------------------------------------- sources


def test_plugin_source_is_detected_after_the_builtins_and_can_be_forced(plugin_site, tmp_path):
    names = [a.name for a in registered_sources()]
    builtins = len(BUILTIN_SOURCES)
    assert names[:builtins] == BUILTIN_SOURCES  # the built-ins keep their detection order, plugins come after
    assert names[builtins:] == ["exploding", "mastodon", "wildcard"]
    info = {s.name: s for s in list_sources()}
    assert info["mastodon"].origin == "myplugin 0.1" and info["x_api"].origin == "built-in"
    assert info["mastodon"].reads_folders is False

    toots = tmp_path / "toots.json"
    toots.write_text(json.dumps(MASTODON), encoding="utf-8")
    x_file = tmp_path / "x.json"
    x_file.write_text(
        json.dumps({"data": [{"id": "1", "text": "hi", "author_id": "9"}], "includes": {}}), encoding="utf-8"
    )
    assert detect_format(toots) == "mastodon"
    assert detect_format(x_file) == "x_api"  # the wildcard plugin claims only what no built-in claims
    report = read_posts([toots, x_file])
    assert [p.id for p in report.posts] == ["web:7", "x:1"]
    assert [f.format for f in report.files] == ["mastodon", "x_api"]
    assert [p.text for p in read_posts(toots, format="mastodon").posts] == ["a red fox in the snow"]
    assert get_source("mastodon").description.startswith("Mastodon statuses")


def test_a_plugin_whose_detection_raises_is_passed_over(plugin_site, tmp_path):
    odd = tmp_path / "odd.json"
    odd.write_text('{"something": "else"}', encoding="utf-8")
    # "exploding" is asked before "wildcard" and raises: wildcard still claims the file, nothing is lost
    assert detect_format(odd) == "wildcard"
    assert [p.id for p in read_posts(odd).posts] == ["web:wildcard"]


def test_broken_plugins_are_reported_and_the_rest_works(plugin_site):
    problems = _problems()
    assert "not loaded" in str(next(p for p in registry.plugin_problems() if p.name == "notasource"))
    assert problems["echo_bench.sources:notasource"].startswith(
        "ConfigError: expected a subclass of echo_builder.sources.SourceAdapter, got int 42"
    )
    assert "taken by echo-bench's built-in source" in problems["echo_bench.sources:jsonl"]
    assert "taken by echo-bench's built-in backend" in problems["echo_bench.backends:openai"]
    assert "is abstract (does not implement agenerate)" in problems["echo_bench.backends:abstractback"]
    assert "set it to the entry point's name 'misnamed'" in problems["echo_bench.backends:misnamed"]
    assert problems["echo_bench.generators:broken"].startswith("ModuleNotFoundError")
    assert (
        "taken by echo-bench's built-in source" in problems["echo_bench.sources:x_api"]
    )  # even pointing at one
    assert "cannot be a backend name: a spec is <name>:<target>" in problems["echo_bench.backends:echo:back"]
    assert len(problems) == 8
    # the built-ins are untouched by the clashing plugins
    assert get_source("jsonl").__class__.__name__ == "JsonlSource"
    assert (
        create_backend("openai:gpt-4o", base_url="http://127.0.0.1:9/v1").__class__.__name__
        == "OpenAIBackend"
    )
    # a broken plugin's name is unknown, and the message says why
    with pytest.raises(ConfigError, match=r"unknown generator 'broken'.*ModuleNotFoundError"):
        create_generator("broken:x")
    with pytest.raises(ConfigError, match=r"unknown source format 'notasource'.*expected a subclass"):
        get_source("notasource")


# ---------------------------------------------------------------------------------------- backends, generators


def test_plugin_backend_and_generator_are_created_from_specs(plugin_site):
    assert parse_spec("echoback:tiny") == ("echoback", "tiny")
    backend = create_backend("echoback:tiny", temperature=0.5)
    assert backend.backend_id == "echoback:tiny" and backend.generation_overrides == {"temperature": 0.5}
    assert backend.generate([]).text == "pong"
    with pytest.raises(ConfigError, match="needs a target"):
        create_backend("echoback")
    listed = {b.name: b for b in list_backends()}
    assert listed["echoback"].origin == "myplugin 0.1" and listed["echoback"].needs_target is True
    assert listed["openai"].origin == "built-in"
    assert sorted(listed) == ["echoback", "faulty", "openai", "rules", "transformers"]

    generator = create_generator("solid:red")
    assert generator.spec == "solid:red"
    (result,) = generator.generate_batch([GenerationRequest("s1", "a fox")])
    assert result.status == "ok" and result.image.getpixel((0, 0)) == (255, 0, 0)
    gens = {g.name: g.origin for g in list_generators()}
    assert gens == {
        "command": "built-in",
        "diffusers": "built-in",
        "openai-images": "built-in",
        "faultygen": "myplugin 0.1",
        "solid": "myplugin 0.1",
    }


def test_a_plugin_that_fails_to_start_or_to_answer_is_one_error(plugin_site, tmp_path):
    with pytest.raises(
        ConfigError, match=r"the backend 'faulty' from myplugin 0.1 failed to start: RuntimeError"
    ):
        create_backend("faulty:bad")
    with pytest.raises(
        ConfigError, match=r"generator 'faultygen' from myplugin 0.1 failed to start: KeyError"
    ):
        create_generator("faultygen:x")
    runner = CliRunner()
    started = runner.invoke(cli, ["backends", "ping", "faulty:bad"])
    assert started.exit_code == 1 and started.output.startswith(
        "error: the backend 'faulty' from myplugin 0.1"
    )
    answered = runner.invoke(cli, ["backends", "ping", "faulty:ok"])
    assert answered.exit_code == 1 and "Traceback" not in answered.output
    assert "faulty:ok: FAILED after" in answered.output
    assert "the plugin backend 'faulty' (myplugin 0.1) raised RuntimeError: reply bug" in answered.output
    # a built-in's own errors are unchanged (no wrapping): an unknown option of the rules baseline
    with pytest.raises(ConfigError, match="the rules backend takes no options"):
        create_backend("rules", colour="red")


def test_a_plugin_backend_that_raises_is_a_recorded_failure_of_that_call(plugin_site):
    """A plain exception from a plugin backend's agenerate is one permanent failure of that call, naming the
    plugin, never retried and never an exception out of the caller (the run records it and goes on); the same
    from a class that is no registered plugin still raises (a bug of echo-bench's own is shown as one)."""
    from echo_builder.backends import Backend, GenerationParams, user_message
    from echo_builder.backends.caller import CallRequest, ModelCaller

    request = CallRequest((user_message("hello"),), GenerationParams(max_tokens=8), stage="test")
    caller = ModelCaller(create_backend("faulty:ok"))
    result = caller.call(request)
    assert not result.ok and result.error_kind == "permanent" and result.attempts == 1
    assert result.error == "the plugin backend 'faulty' (myplugin 0.1) raised RuntimeError: reply bug"
    assert caller.stats.failures == 1 and caller.stats.attempts == 1

    class Unregistered(Backend):
        name = "unregistered-test"

        async def agenerate(self, messages, params):
            raise RuntimeError("own bug")

    with pytest.raises(RuntimeError, match="own bug"):
        ModelCaller(Unregistered("x")).call(request)


def test_reload_forgets_an_uninstalled_plugin(plugin_site, monkeypatch):
    assert "echoback" in [b.name for b in list_backends()]
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p != str(plugin_site)])
    registry.reload_plugins()
    assert [b.name for b in list_backends()] == ["openai", "rules", "transformers"]
    # the module stays imported in this process: the class its @register_source decorator registered stays too,
    # as any class registered in-process does; its entry point (and origin) is gone
    assert [(s.name, s.origin) for s in list_sources() if s.name not in BUILTIN_SOURCES] == [
        ("mastodon", "built-in")
    ]
    assert registry.plugin_problems() == []


# ------------------------------------------------------------------------------------------------------ CLI


def test_plugins_command_lists_every_kind_and_the_problems(plugin_site):
    result = CliRunner().invoke(cli, ["plugins", "--format", "json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.output[result.output.index("{") :])
    rows = {(e["kind"], e["name"]): e for e in data["entries"]}
    assert rows[("source", "mastodon")]["origin"] == "myplugin 0.1"
    assert rows[("backend", "transformers")]["extra"] == "judge-local"
    assert rows[("backend", "rules")]["fields"] == {"needs_target": False}
    assert rows[("source", "collection")]["fields"] == {"reads_folders": True}
    assert rows[("generator", "solid")]["description"] == "one flat colour per image"
    assert {(p["group"], p["name"]) for p in data["problems"]} == {
        ("echo_bench.sources", "notasource"),
        ("echo_bench.sources", "jsonl"),
        ("echo_bench.sources", "x_api"),
        ("echo_bench.backends", "openai"),
        ("echo_bench.backends", "abstractback"),
        ("echo_bench.backends", "misnamed"),
        ("echo_bench.backends", "echo:back"),
        ("echo_bench.generators", "broken"),
    }
    table = CliRunner().invoke(cli, ["plugins", "--kind", "backend"])
    assert table.exit_code == 0
    lines = table.output.splitlines()
    assert lines[0].split() == ["kind", "name", "origin", "install", "description"]
    assert any(line.split()[:4] == ["backend", "echoback", "myplugin", "0.1"] for line in lines)
    assert not any(line.startswith("source") for line in lines)
    assert "problems (4 plugins not loaded):" in table.output  # the backends' only


def test_cli_sees_plugins_in_a_fresh_process(plugin_site, tmp_path):
    listed = _echo_bench(plugin_site, "backends", "list", cwd=tmp_path)
    assert listed.returncode == 0, listed.stderr
    row = next(line for line in listed.stdout.splitlines() if line.startswith("echoback"))
    assert row.split()[:5] == ["echoback", "myplugin", "0.1", "core", "answers"]
    assert "plugin 'openai' (echo_bench.backends = myplugin:ClashBackend from myplugin 0.1) not loaded" in (
        listed.stderr
    )

    ping = _echo_bench(plugin_site, "backends", "ping", "echoback:tiny", cwd=tmp_path)
    assert ping.returncode == 0, ping.stderr
    assert "backend:   echoback:tiny" in ping.stdout
    assert "snapshot:  echoback-1" in ping.stdout and "reply:     'pong'" in ping.stdout

    helped = _echo_bench(plugin_site, "build", "--help", cwd=tmp_path)
    assert (
        "[jsonl|x_api|x_graphql|reddit|bluesky|twscrape|collection|exploding|mastodon|wildcard]"
        in helped.stdout
    )
    assert "Backends: openai, transformers, rules, echoback, faulty." in " ".join(helped.stdout.split())


def test_build_auto_detects_and_forces_a_plugin_source(plugin_site, tmp_path):
    exports = tmp_path / "exports"
    exports.mkdir()
    (exports / "toots.json").write_text(json.dumps(MASTODON), encoding="utf-8")
    common = ["--target-model", "Lumen-2", "--launch-date", "2025-06-10", "--offline"]
    for out, extra in (("auto", []), ("forced", ["--format", "mastodon"])):
        done = _echo_bench(
            plugin_site, "build", str(exports), "--out", str(tmp_path / out), *common, *extra, cwd=tmp_path
        )
        assert done.returncode == 0, done.stderr
        collected = [
            json.loads(line)
            for line in (tmp_path / out / "stages" / "collect.jsonl").read_text().splitlines()
        ]
        assert [(p["id"], p["text"]) for p in collected] == [("web:7", "a red fox in the snow")]
    refused = _echo_bench(
        plugin_site, "build", str(exports), "--out", str(tmp_path / "x"), "--format", "nope", cwd=tmp_path
    )
    assert refused.returncode == 1 and "Traceback" not in refused.stderr
    *warnings, error = refused.stderr.splitlines()
    assert error.startswith("error: --format: 'nope' is not a registered source format; choose from jsonl")
    assert "collection, exploding, mastodon, wildcard (plugins: echo-bench plugins)" in error
    broken = _echo_bench(
        plugin_site,
        "build",
        str(exports),
        "--out",
        str(tmp_path / "y"),
        "--format",
        "notasource",
        cwd=tmp_path,
    )
    assert broken.returncode == 1 and broken.stderr.splitlines()[-1].endswith(
        "; plugin 'notasource' (echo_bench.sources = myplugin:NOT_A_CLASS from myplugin 0.1) not loaded: "
        "ConfigError: expected a subclass of echo_builder.sources.SourceAdapter, got int 42"
    )
    assert not (tmp_path / "y").exists()
    # each broken source plugin is one warning line; only the registry read (sources) loads its plugins
    assert len(warnings) == 3 and all(
        w.startswith("WARNING echo_builder.registry: plugin ") for w in warnings
    )


# ------------------------------------------------------------------------------------------ docs and choices


def test_without_plugins_the_listings_are_the_builtins():
    registry.reload_plugins()
    assert [a.name for a in registered_sources()] == BUILTIN_SOURCES
    result = CliRunner().invoke(cli, ["plugins"])
    assert result.exit_code == 0 and result.output.rstrip().endswith("no plugin problems")
    kinds = {
        line.split()[0] for line in result.output.splitlines()[1:] if line.strip() and " built-in " in line
    }
    assert {"source", "backend", "generator"} <= kinds


@pytest.mark.parametrize(
    ("doc", "kind"),
    [("docs/curation.md", "source"), ("docs/backends.md", "backend"), ("docs/generate.md", "generator")],
)
def test_every_builtin_is_in_its_docs_table(doc, kind):
    """The docs tables list every built-in of the registry (a new built-in without its docs row fails here)."""
    text = (REPO_ROOT / doc).read_text(encoding="utf-8")
    table = {
        line.split("|")[1].strip().strip("`").split(":")[0]
        for line in text.splitlines()
        if line.startswith("| `")
    }
    builtins = [e.name for e in registry.all_registries()[kind] if e.builtin]
    assert builtins and set(builtins) <= table, sorted(set(builtins) - table)


# ------------------------------------------------------------------------------------- docs/extending.md examples


def _doc_example(section: str) -> str:
    """The first ```python block of ``section`` in docs/extending.md."""
    text = (REPO_ROOT / "docs" / "extending.md").read_text(encoding="utf-8")
    body = text[text.index(f"## {section}\n") :]
    return body[body.index("```python\n") + len("```python\n") : body.index("\n```\n")]


@pytest.fixture
def doc_module(tmp_path):
    """Runs a docs example as a module named like its file; its registrations are removed afterwards."""
    created: list[tuple[str, str]] = []

    def run(section: str, module_name: str, kind: str, name: str) -> dict[str, object]:
        namespace: dict[str, object] = {"__name__": module_name}
        exec(compile(_doc_example(section), f"docs/extending.md ({section})", "exec"), namespace)
        created.append((kind, name))
        return namespace

    yield run
    for kind, name in created:
        registry.all_registries()[kind].remove(name)


def test_the_source_example_of_the_docs_reads_statuses(doc_module, tmp_path):
    doc_module("A source format", "mastodon_source", "source", "mastodon")
    statuses = [
        {"uri": "https://m.example/1", "account": {"acct": "ana"}, "content": "a cat, prompt: neon cat",
         "created_at": "2025-06-11T10:00:00Z", "url": "https://m.example/@ana/1",
         "media_attachments": [{"url": "https://m.example/1.png", "type": "image"}]},
        {"uri": "https://m.example/2", "account": "not an object", "content": "broken"},
    ]  # fmt: skip
    path = tmp_path / "statuses.json"
    path.write_text(json.dumps(statuses), encoding="utf-8")
    assert detect_format(path) == "mastodon"
    report = read_posts(path)
    (post,) = report.posts
    assert (post.id, post.author, post.text) == ("web:https://m.example/1", "ana", "a cat, prompt: neon cat")
    assert post.media[0].url == "https://m.example/1.png" and post.created_at.year == 2025
    assert [(p.location, p.level) for p in report.problems] == [("[1]", "error")]


def test_the_backend_example_of_the_docs_registers_without_its_dependency(doc_module):
    doc_module("A backend", "echo_llamacpp", "backend", "llamacpp")
    backend = create_backend("llamacpp:/models/m.gguf", n_ctx=4096, temperature=0.2)
    assert backend.backend_id == "llamacpp:/models/m.gguf" and backend.settings() == {
        "temperature": 0.2,
        "n_ctx": 4096,
    }
    with pytest.raises(ConfigError, match="llamacpp: unknown options"):
        create_backend("llamacpp:m", gpu="yes")


def test_the_generator_example_of_the_docs_makes_images(doc_module):
    doc_module("A generator", "echo_replicate", "generator", "flat")
    generator = create_generator("flat:red", size=4)
    ok, second = generator.generate_batch([GenerationRequest("a", "x"), GenerationRequest("b", "y")])
    assert ok.status == "ok" and ok.image.size == (4, 4) and ok.image.getpixel((0, 0)) == (255, 0, 0)
    assert second.status == "ok" and second.image.getpixel((3, 3)) == (255, 0, 0)
    wrong = create_generator("flat:no-such-colour").generate(GenerationRequest("c", "z"))
    assert wrong.status == "error" and "no-such-colour" in wrong.message
