"""One safe YAML loader for every YAML file echo-bench reads (issue 29), and errors that never quote a file.

Defect class: the run-config and collection readers bounded alias expansion and nesting, the others did not: a
360-byte alias bomb given as ``--judge-prompt`` hung with no output, and ``--judge-prompt /etc/shadow`` printed the
file's first line in its "unknown field" error. Every reader now goes through :func:`echo_dataset.safe_yaml.load_yaml`.
"""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from echo_builder.cli import cli
from echo_builder.errors import ConfigError
from echo_dataset.safe_yaml import MAX_NODES, YAMLReadError, kind_of, load_yaml, shown_key, shown_keys

REPO = Path(__file__).resolve().parents[1]
SECRET = "SECRET"


def _bomb(levels: int = 9) -> str:
    lines = [f"a: &a [{', '.join([repr(SECRET)] * 9)}]"]
    for previous, name in zip("abcdefgh", "bcdefghi"[: levels - 1], strict=False):
        lines.append(f"{name}: &{name} [{', '.join(['*' + previous] * 9)}]")
    return "\n".join(lines) + "\n"


HOSTILE = {
    "alias bomb": (_bomb(), "YAML expands to more than 100,000 values (alias bomb?)"),
    "recursive alias": ("user: &loop [SECRET, *loop]\n", "refers to itself"),
    "recursive mapping": ("user: &loop {a: SECRET, b: *loop}\n", "refers to itself"),
    "deep flow nesting": ("user: " + "[" * 200 + SECRET + "]" * 200 + "\n", "nested too deeply"),
    "nesting past libyaml's limit": ("user: " + "[" * 50_000 + "]" * 50_000, "nested too deeply"),
    "deep block nesting": (
        "".join(" " * i + "a:\n" for i in range(80)) + " " * 80 + SECRET + "\n",
        "nested too deeply",
    ),
    "python tag": (
        "a: !!python/object/apply:os.system ['echo SECRET']\n",
        "could not determine a constructor",
    ),
    "unterminated string": ('name: x\nuser: "SECRET never closed\n', "not valid YAML at line"),
    "tab indentation": ("a: SECRET\n\tb: SECRET\n", "not valid YAML at line 2"),
    "two documents": ("a: SECRET\n---\nb: SECRET\n", "expected a single document"),
    "undefined alias": ("a: *SECRETanchor x\n", "not valid YAML at line 1"),
    "unknown escape": ('a: "\\q SECRET"\n', "not valid YAML at line 1"),
    "too many values": ("[" + ",".join(["x"] * (MAX_NODES + 1)) + "]", "more than 100,000 values"),
}


@pytest.mark.timeout(60)
@pytest.mark.parametrize("case", list(HOSTILE))
def test_a_hostile_document_is_one_error_naming_the_file_never_its_content(case):
    text, words = HOSTILE[case]
    started = time.perf_counter()
    with pytest.raises(YAMLReadError) as caught:
        load_yaml(text, "prompt.yaml")
    message = str(caught.value)
    assert message.startswith("prompt.yaml: ") and words in message, message
    assert SECRET not in message and "\n" not in message, message
    assert time.perf_counter() - started < 10  # refused before anything is expanded (generous: CI is slow)


def test_the_bomb_is_refused_before_it_is_built():
    """The expansion is measured on the composed nodes (each node once), never constructed or walked."""
    from echo_dataset import safe_yaml

    built = []
    real = safe_yaml._load

    def spy(text, where, loader_class, max_nodes, max_depth):
        original = loader_class.construct_document
        loader_class.construct_document = lambda self, node: built.append(node) or original(self, node)
        try:
            return real(text, where, loader_class, max_nodes, max_depth)
        finally:
            loader_class.construct_document = original

    safe_yaml._load = spy
    try:
        with pytest.raises(YAMLReadError, match="alias bomb"):
            load_yaml(_bomb(), "x")
        assert built == []
        assert load_yaml(_bomb(4), "x")["d"][0][0][0][0] == SECRET  # 9^4 = 6,561 values: fine
        assert len(built) == 1
    finally:
        safe_yaml._load = real


def test_plain_data_is_read_as_pyyaml_safe_load_reads_it():
    import yaml

    text = (
        "name: mine\nversion: v1\ndate: 2025-06-10\nn: [1, 2.5, .nan, null, true, '0x1']\n"
        "base: &base {a: 1}\nmerged: {<<: *base, b: 2}\nmulti: |\n  two\n  lines\n"
    )
    got, want = load_yaml(text, "x"), yaml.safe_load(text)
    assert repr(got) == repr(want)  # NaN compares unequal: compared as text
    assert load_yaml("", "x") is None and load_yaml("# only a comment\n", "x") is None
    assert load_yaml(b"\xef\xbb\xbfa: 1\n", "x") == {"a": 1}  # bytes, with a byte-order mark
    # a "\ud83d" escape that libyaml refuses is still read (the callers repair the lone surrogate)
    assert load_yaml('a: "\\ud83d x"\n', "x") == {"a": "\ud83d x"}


def test_a_key_given_twice_is_refused_only_when_asked_and_named_only_when_it_is_a_name():
    # PyYAML's own behaviour where no check is asked
    assert load_yaml("out: a\nout: b\n", "x") == {"out": "b"}
    with pytest.raises(YAMLReadError, match=r"line 2, column 1: key 'out' is given twice"):
        load_yaml("out: a\nout: b\n", "x", unique_keys=True)
    with pytest.raises(YAMLReadError, match="key 2 of the mapping is given twice") as caught:
        load_yaml('"SECRET: x": 1\n"SECRET: x": 2\n', "x", unique_keys=True)
    assert SECRET not in str(caught.value)


def test_the_callers_error_type_is_raised():
    with pytest.raises(ConfigError, match=r"^f\.yaml: not valid YAML at line "):
        load_yaml("a: [", "f.yaml", error=ConfigError)
    with pytest.raises(YAMLReadError, match="not UTF-8 text"):
        load_yaml(b"a: caf\xe9\n", "x")


def test_what_an_error_may_show():
    assert shown_key("temperature") == "'temperature'" and shown_key("answer.kind") == "'answer.kind'"
    assert shown_key(3) == "3" and shown_key(True) is None
    for hidden in ("root:$6$salt$hash:19000", "two words", "x" * 41, "", "é", "1abc"):
        assert shown_key(hidden) is None, hidden
    assert shown_keys(["model_a", "root:$6$x:1"]) == "'model_a', key 2"
    assert kind_of("text") == "a string" and kind_of([1]) == "a list" and kind_of(None).startswith("nothing")


def test_no_module_reads_yaml_around_the_safe_loader():
    """Every YAML read of the packages goes through load_yaml (the one module that imports a loader)."""
    pattern = re.compile(r"yaml\.(safe_load|load|full_load|unsafe_load|load_all|safe_load_all|compose)\b")
    offenders = [
        str(path.relative_to(REPO))
        for package in ("echo_builder", "echo_dataset", "spaces_app")
        for path in (REPO / package).rglob("*.py")
        if path.name != "safe_yaml.py" and pattern.search(path.read_text(encoding="utf-8"))
    ]
    assert offenders == []


# ------------------------------------------------------------------------------------------ through the CLI
SHADOW = "root:$6$SECRETSALT$SECRETHASH:19000:0:99999:7:::\ndaemon:*:19000:0:99999:7:::\n"


@pytest.mark.timeout(60)
@pytest.mark.parametrize(
    ("option", "text", "words"),
    [
        ("--judge-prompt", _bomb(), "YAML expands to more than 100,000 values"),
        ("--judge-prompt", SHADOW, "key 1 of the file is not a prompt field"),
        ("--judge-prompt", "the password is SECRET\n", "expected a YAML mapping of fields, got a string"),
        ("--judge-prompt", "name: x\nuser: 'Rate {prompt}'\nlayout: SECRET value\n", "got a string"),
        ("--judge-prompt", "SECRET-field: 1\n", "field 'SECRET-field': unknown field"),  # a name: shown
        ("--run-config", SHADOW, "unknown key 1 of the file for `echo-bench judge`"),
        ("--run-config", _bomb(), "YAML expands to more than 100,000 values"),
        ("--prices", _bomb(), "YAML expands to more than 100,000 values"),
        ("--prices", "models: {}\n" + SHADOW, "unknown top-level keys key 2, key 3"),
    ],
)
def test_the_readers_name_the_file_and_never_print_it(tmp_path, option, text, words):
    from PIL import Image

    from tests.helpers.benchmark import make_benchmark, make_outputs

    path = tmp_path / "given.yaml"
    path.write_text(text, encoding="utf-8")
    args = ["judge", option, str(path), "--out", str(tmp_path / "run")]
    if option != "--run-config":  # a real benchmark: the file is the only thing wrong (no call is ever made)
        bench = make_benchmark(tmp_path / "bench", "image_to_image", [{"id": "s1", "prompt": "make it blue"}])
        outputs = make_outputs(tmp_path / "outputs", {"m1": {"s1": Image.new("RGB", (8, 8))}})
        args += ["--benchmark", str(bench), "--config", "image_to_image", "--outputs", str(outputs)]
        args += ["--judge", "openai:x", "--base-url", "http://127.0.0.1:9/v1"]
    result = CliRunner().invoke(cli, args)
    line = result.output
    assert result.exit_code == 1 and line.startswith("error: ") and line.count("\n") == 1, line
    assert str(path) in line and words in line, line
    if words != "field 'SECRET-field': unknown field":
        assert SECRET not in line, line
    assert not (tmp_path / "run").exists()


def test_curation_prompt_files_and_cards_use_it(tmp_path):
    from echo_builder.input_files import read_prompt_yaml
    from echo_builder.metrics.publish import _front_matter
    from echo_dataset.versioning import card_version

    bomb = tmp_path / "p.yaml"
    bomb.write_text(_bomb(), encoding="utf-8")
    with pytest.raises(ConfigError, match="alias bomb") as caught:
        read_prompt_yaml(bomb, "NSFW prompt file", "x/1")
    assert SECRET not in str(caught.value)
    text = tmp_path / "s.yaml"
    text.write_text("just SECRET text\n", encoding="utf-8")
    with pytest.raises(ConfigError, match="expected a mapping, got a string") as caught:
        read_prompt_yaml(text, "NSFW prompt file", "x/1")
    assert SECRET not in str(caught.value)
    with pytest.raises(ConfigError, match="front matter does not parse: YAML expands") as caught:
        _front_matter("---\n" + _bomb() + "---\n", "card")
    assert SECRET not in str(caught.value)
    (tmp_path / "ds").mkdir()
    (tmp_path / "ds" / "README.md").write_text("---\n" + _bomb() + "---\n", encoding="utf-8")
    assert card_version(tmp_path / "ds") is None  # an unreadable card has no version, as before


def test_user_file_errors_never_quote_the_file(tmp_path):
    """Keyword, votes, ratings and reference-prompt files that are not what was expected: kinds and names only."""
    from echo_builder.analysis.inputs import read_prompt_file
    from echo_builder.errors import RecordError
    from echo_builder.judge.ratings_file import read_ratings_csv
    from echo_builder.stages.query import load_keywords
    from echo_builder.stats.votes import load_votes

    header = "root:$6$SECRET:19000,uid,shell\nx,y,z\n"
    checks = []
    (tmp_path / "k.json").write_text('{"api_key": "sk-SECRET"}', encoding="utf-8")
    checks.append((load_keywords, tmp_path / "k.json", "got an object with the keys 'api_key'"))
    (tmp_path / "k2.json").write_text('[{"password": "SECRET"}]', encoding="utf-8")
    checks.append((load_keywords, tmp_path / "k2.json", "got an object with the keys 'password'"))
    (tmp_path / "k.txt").write_text("openai\tSECRET\n", encoding="utf-8")
    checks.append((load_keywords, tmp_path / "k.txt", "must be a whole number of days"))
    (tmp_path / "v.csv").write_text(header, encoding="utf-8")
    checks.append((load_votes, tmp_path / "v.csv", "found key 1, 'uid', 'shell'"))
    (tmp_path / "r.csv").write_text(header, encoding="utf-8")
    checks.append((read_ratings_csv, tmp_path / "r.csv", "the header has key 1, 'uid', 'shell'"))
    (tmp_path / "p.csv").write_text(header, encoding="utf-8")
    checks.append((read_prompt_file, tmp_path / "p.csv", "columns: column 1, uid, shell"))
    for reader, path, words in checks:
        with pytest.raises((ConfigError, RecordError)) as caught:
            reader(path)
        assert words in str(caught.value) and SECRET not in str(caught.value), (reader, str(caught.value))
