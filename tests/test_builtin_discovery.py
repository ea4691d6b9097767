"""Built-ins are one module each (issue 15): every registry finds its package's modules, orders them by number.

Checked for the five kinds: each module of a registry's package either declares built-ins or is one of its
declared helper modules (which declare nothing); the listing order is the declared ``order`` (pinned here to the
order of earlier versions), not the module or import order; one helper (:func:`discover_modules`) serves every
kind; and a new module dropped into ``echo_builder.sources`` or ``echo_builder.scoring`` is picked up with no
other file edited, at the place its ``order`` says.
"""

from __future__ import annotations

import importlib
import re
import subprocess
import sys
import textwrap

import pytest
from click.testing import CliRunner

from echo_builder import registry as registry_module
from echo_builder.backends import BACKENDS, create_backend, list_backends
from echo_builder.cli import cli
from echo_builder.errors import ConfigError
from echo_builder.generate import GENERATORS, GenerationRequest, create_generator
from echo_builder.registry import Registry, discover_modules
from echo_builder.scoring.registry import METRICS, metric_definitions
from echo_builder.sources import SOURCES, detect_format, read_posts, registered_sources
from echo_builder.stages.registry import STAGES
from tests.conftest import REPO_ROOT

KINDS = {
    "metric": (METRICS, "echo_builder.scoring"),
    "source": (SOURCES, "echo_builder.sources"),
    "backend": (BACKENDS, "echo_builder.backends"),
    "generator": (GENERATORS, "echo_builder.generate"),
    "stage": (STAGES, "echo_builder.stages"),
}

#: The order of earlier versions (import order then), which the declared order numbers must keep.
EXPECTED_ORDER = {
    "metric": ["color_shift", "structure_distance", "face_identity", "text_rendering", "text_accuracy"],
    "source": ["jsonl", "x_api", "x_graphql", "reddit", "bluesky", "twscrape", "collection"],
    "backend": ["openai", "transformers", "rules"],
    "generator": ["diffusers", "openai-images", "command"],
}


def _builtin_targets(registry: Registry, package: str) -> dict[str, set[str]]:
    """module -> names of the built-in entries it declares (entries of test modules left out)."""
    found: dict[str, set[str]] = {}
    for entry in registry.entries():
        module = entry.target.partition(":")[0]
        if entry.builtin and module.startswith(package + "."):
            found.setdefault(module, set()).add(entry.name)
    return found


@pytest.mark.parametrize("kind", list(KINDS))
def test_every_module_declares_builtins_or_is_a_declared_helper(kind):
    registry, package = KINDS[kind]
    assert registry.package == package
    declaring = set(discover_modules(package, registry.helpers))
    assert declaring == set(registry.builtin_modules())
    targets = _builtin_targets(registry, package)
    # each discovered module declares at least one entry, and no entry comes from a helper module
    assert sorted(declaring - set(targets)) == []
    assert sorted(set(targets) - declaring) == []
    helpers = {f"{package}.{name}" for name in registry.helpers}
    assert helpers.isdisjoint(targets)
    for name in sorted(registry.helpers):  # importing a helper (other code does) adds no entry
        before = registry.names()
        importlib.import_module(f"{package}.{name}")
        assert registry.names() == before, f"{package}.{name} is a helper but declares something"


@pytest.mark.parametrize("kind", list(EXPECTED_ORDER))
def test_the_listing_order_is_the_declared_order(kind):
    registry, package = KINDS[kind]
    builtins = [e for e in registry.entries() if e.builtin and e.target.startswith(package + ".")]
    assert [e.name for e in builtins] == EXPECTED_ORDER[kind]
    orders = [e.order for e in builtins]
    assert all(isinstance(o, int) for o in orders), orders  # every built-in of these kinds declares a number
    assert orders == sorted(orders) and len(set(orders)) == len(orders)
    # not the module order: the modules sort differently for metrics and sources
    if kind in ("metric", "source"):
        by_module = sorted(builtins, key=lambda e: e.target)
        assert [e.name for e in by_module] != EXPECTED_ORDER[kind]


def test_the_consumers_read_the_declared_order():
    assert [d.name for d in metric_definitions()] == EXPECTED_ORDER["metric"]
    assert [s.name for s in registered_sources()] == EXPECTED_ORDER["source"]
    listed = CliRunner().invoke(cli, ["plugins"])
    assert listed.exit_code == 0, listed.output
    rows = [line.split()[:2] for line in listed.output.splitlines()[1:] if line.strip()]
    for kind, names in EXPECTED_ORDER.items():
        assert [name for k, name in rows if k == kind][: len(names)] == names


@pytest.fixture
def drop_module(monkeypatch, tmp_path):
    """``drop(registry, package, module_name, code)``: a new module in ``package`` (its folder extended with a temp
    folder), the registry made to discover its built-ins again; everything restored afterwards."""
    added: list[str] = []

    def drop(registry: Registry, package: str, name: str, code: str) -> None:
        pkg = importlib.import_module(package)
        folder = tmp_path / package.replace(".", "_")
        folder.mkdir(exist_ok=True)
        (folder / f"{name}.py").write_text(textwrap.dedent(code), encoding="utf-8")
        importlib.invalidate_caches()
        monkeypatch.setattr(pkg, "__path__", [*pkg.__path__, str(folder)])
        monkeypatch.setattr(registry, "_entries", dict(registry._entries))
        monkeypatch.setattr(registry, "_objects", dict(registry._objects))
        monkeypatch.setattr(registry, "_builtins_imported", False)
        added.append(f"{package}.{name}")

    yield drop
    for module in added:
        sys.modules.pop(module, None)


TOOTS_SOURCE = """
    from echo_builder.records import Post
    from echo_builder.sources.base import SourceAdapter, register_source


    @register_source(order=55)  # before twscrape (60): it claims twscrape-shaped records first
    class TootSource(SourceAdapter):
        name = "toots_test"
        description = "test-only: twscrape-shaped records read as toots"

        def sniff(self, value):
            return isinstance(value, dict) and "rawContent" in value

        def parse_document(self, document, ctx):
            yield Post(id=f"web:{document.value['id']}", platform="web", text=document.value["rawContent"])
"""


def test_a_new_source_module_is_discovered_at_its_declared_place(drop_module, tmp_path):
    line = (
        '{"id": 7, "rawContent": "hi", "user": {"username": "a"}, "_type": "snscrape.modules.twitter.Tweet"}'
    )
    path = tmp_path / "tweets.jsonl"
    path.write_text(line + "\n", encoding="utf-8")
    assert detect_format(path) == "twscrape"
    drop_module(SOURCES, "echo_builder.sources", "toots_test", TOOTS_SOURCE)
    names = [s.name for s in registered_sources()]
    assert names[:7] == ["jsonl", "x_api", "x_graphql", "reddit", "bluesky", "toots_test", "twscrape"]
    assert detect_format(path) == "toots_test"
    assert [p.id for p in read_posts(path).posts] == ["web:7"]


BRIGHTNESS_METRIC = """
    import numpy as np

    from echo_builder.scoring.base import MetricResult, MetricSpec
    from echo_builder.scoring.registry import MetricDefinition, declare_metric


    def brightness_test(inputs, outputs, prompts, options):
        return MetricResult(np.zeros(len(outputs)), [None] * len(outputs))


    BRIGHTNESS_TEST_METRIC = declare_metric(
        MetricDefinition(
            name="brightness_test",
            spec=MetricSpec("brightness_test", False, 0.0, 255.0, "8-bit levels", "test"),
            factory=brightness_test,
        ),
        target="echo_builder.scoring.brightness_test:BRIGHTNESS_TEST_METRIC",
        order=15,
    )
"""


def test_a_new_metric_module_is_discovered_at_its_declared_place(drop_module):
    drop_module(METRICS, "echo_builder.scoring", "brightness_test", BRIGHTNESS_METRIC)
    names = [d.name for d in metric_definitions()]
    assert names[:6] == [
        "color_shift",
        "brightness_test",
        "structure_distance",
        "face_identity",
        "text_rendering",
        "text_accuracy",
    ]
    assert METRICS.entry("brightness_test").order == 15


def test_discovery_errors_are_loud_and_name_the_module(drop_module):
    with pytest.raises(ConfigError, match=r"helper modules \['no_such_helper'\] of echo_builder.sources"):
        discover_modules("echo_builder.sources", ("base", "no_such_helper"))
    with pytest.raises(ConfigError, match="is not a package"):
        discover_modules("echo_builder.errors")
    drop_module(SOURCES, "echo_builder.sources", "broken_test", "import echo_no_such_module_for_tests\n")
    with pytest.raises(
        ImportError, match=r"built-in source module echo_builder\.sources\.broken_test failed"
    ):
        SOURCES.names()


def test_two_builtins_may_not_share_an_order(drop_module):
    clash = TOOTS_SOURCE.replace("order=55", "order=60")  # twscrape's number
    drop_module(SOURCES, "echo_builder.sources", "toots_test", clash)
    with pytest.raises(ImportError, match=r"'twscrape' and 'toots_test' both declare order 60"):
        SOURCES.names()


def test_order_sorts_builtins_then_unnumbered_then_plugins(monkeypatch):
    monkeypatch.setitem(
        registry_module._REGISTRIES, "generator", GENERATORS
    )  # restored: the test's is a copy
    reg: Registry[object] = Registry("generator")
    monkeypatch.setattr(reg, "_plugins_loaded", True)
    reg.declare("late", "m:late", order=30)
    reg.declare("unnumbered", "m:unnumbered")
    reg.declare("plugin", "p:plugin", origin="someplugin 0.1", order=1)  # a plugin's order is ignored
    reg.declare("early", "m:early", order=10)
    reg.declare("middle", "m:middle", order=20.5)
    assert reg.names() == ["early", "middle", "late", "unnumbered", "plugin"]
    with pytest.raises(ConfigError, match="order must be a number"):
        reg.declare("bad", "m:bad", order="1")
    assert "bad" not in reg


# ------------------------------------------------------------------ docs/extending.md "Inside the package" examples


def _doc_file(path: str) -> str:
    """The code block that docs/extending.md introduces with ``File `path`:``."""
    text = (REPO_ROOT / "docs" / "extending.md").read_text(encoding="utf-8")
    match = re.search(rf"^File `{re.escape(path)}`:\n+```\w*\n(.*?)^```", text, re.M | re.S)
    assert match, f"docs/extending.md shows no file {path}"
    return match.group(1)


def test_the_documented_built_in_source_is_one_module(drop_module, tmp_path):
    drop_module(SOURCES, "echo_builder.sources", "mastodon", _doc_file("echo_builder/sources/mastodon.py"))
    assert [s.name for s in registered_sources()][:8] == [*EXPECTED_ORDER["source"], "mastodon"]
    path = tmp_path / "statuses.json"
    path.write_text('[{"uri": "https://m.example/1", "account": {"acct": "ana"}, "content": "hi"}]', "utf-8")
    assert detect_format(path) == "mastodon"
    (post,) = read_posts(path).posts
    assert (post.id, post.author, post.text) == ("web:https://m.example/1", "ana", "hi")


def test_the_documented_built_in_backend_is_one_module(drop_module):
    drop_module(BACKENDS, "echo_builder.backends", "llamacpp", _doc_file("echo_builder/backends/llamacpp.py"))
    entry = BACKENDS.entry("llamacpp")
    assert (entry.builtin, entry.order, entry.extra) == (True, 40, "llamacpp")
    assert "llamacpp" in [b.name for b in list_backends()]
    backend = create_backend("llamacpp:/models/m.gguf", n_ctx=4096)
    assert backend.backend_id == "llamacpp:/models/m.gguf" and backend.n_ctx == 4096
    assert "llama_cpp" not in sys.modules  # the heavy import waits for the first call


def test_the_documented_built_in_generator_is_one_module(drop_module):
    drop_module(GENERATORS, "echo_builder.generate", "flat", _doc_file("echo_builder/generate/flat.py"))
    assert GENERATORS.names()[:4] == [*EXPECTED_ORDER["generator"], "flat"]
    (result,) = create_generator("flat:red", size=2).generate_batch([GenerationRequest("s", "p")])
    assert result.status == "ok" and result.image.getpixel((1, 1)) == (255, 0, 0)


def test_the_documented_built_in_metric_is_one_module(drop_module):
    drop_module(METRICS, "echo_builder.scoring", "contrast", _doc_file("echo_builder/scoring/contrast.py"))
    assert [d.name for d in metric_definitions()][:6] == [*EXPECTED_ORDER["metric"], "contrast_shift"]
    assert METRICS.entry("contrast_shift").order == 60


def test_discovering_every_builtin_imports_no_heavy_dependency():
    code = (
        "import sys\n"
        "from echo_builder.registry import all_registries\n"
        "sizes = {kind: len(r.names()) for kind, r in all_registries().items()}\n"
        "heavy = [m for m in ('torch', 'transformers', 'openai', 'accelerate', 'datasets', 'timm', 'dlib', "
        "'onnxruntime', 'rapidocr_onnxruntime', 'gradio', 'diffusers', 'evaluate') if m in sys.modules]\n"
        "print(sorted(sizes), min(sizes.values()), ','.join(heavy))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120, cwd=REPO_ROOT
    )
    # every kind read (at least 3 built-ins each), and the heavy list after the count is empty
    assert done.stdout.strip() == "['backend', 'generator', 'metric', 'source', 'stage'] 3"
