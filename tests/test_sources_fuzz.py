"""Fuzzing the source readers with mutated real exports (issue 13, Acceptance).

The example exports of ``tests/data/sources/`` and the demo's exports are read once as they are; then one record
(the object that makes one post) gets one mutation: a value of another JSON type, a deleted key, a lone surrogate,
a NUL, a huge or non-finite number, a date out of range, a long string. Whatever the mutation:

- no exception escapes ``read_posts``, and every post it returns can be written as UTF-8 JSON;
- the mutated record is a ``Post`` or a counted problem (it never vanishes silently);
- every post of the other records is read, identical (a bad record never removes a good one).

A second property truncates a file anywhere: no exception, and every post of the lines before the cut survives.
Hypothesis runs derandomised with a bounded number of examples (well under a minute in all).
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from echo_builder.sources import read_posts
from echo_builder.sources.x_graphql import iter_graphql_tweets
from tests.helpers.properties import examples

DATA = Path(__file__).parent / "data" / "sources"
DEMO = Path(__file__).resolve().parents[1] / "echo_builder" / "examples" / "demo" / "exports"
EXAMPLES = {
    "x_api_page": (DATA / "x_api_page.json", "x_api"),
    "x_api_pages": (DATA / "x_api_pages.jsonl", "x_api"),
    "x_graphql": (DATA / "x_graphql_detail.json", "x_graphql"),
    "reddit": (DATA / "reddit_dump.ndjson", "reddit"),
    "bluesky": (DATA / "bluesky_thread.json", "bluesky"),
    "jsonl": (DATA / "posts.jsonl", "jsonl"),
    "demo_search": (DEMO / "search_lumen-2.json", "x_api"),
    "demo_replies": (DEMO / "replies.json", "x_api"),
}
COLLECTION = DATA / "collection" / "mini-prompts"

FUZZ = settings(  # derandomised by the suite's "ci" profile (tests/conftest.py)
    max_examples=examples(100),
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)

Path_ = tuple[Any, ...]

# values of every JSON type and the hostile scalars of issue 13
REPLACEMENTS: list[Any] = [
    None,
    True,
    0,
    -1,
    10**30,
    10**400,
    1e308,
    float("nan"),
    float("inf"),
    "",
    "a\x00b",
    "\ud83d",
    "lone \udc00 low",
    "9999-12-31T23:00:00-05:00",
    "0001-01-01T00:00:00+01:00",
    "x" * 5000,
    "9" * 5000,
    [],
    ["a", 1],
    {},
    {"a": {"b": None}},
]


# ------------------------------------------------------------------------------------ records of each format
def _records(fmt: str, docs: list[Any]) -> Iterator[tuple[Path_, str]]:
    """``(path, post id)`` of each object that makes one post; ``path`` starts with the document's index."""
    for d, doc in enumerate(docs):
        if fmt == "x_api":
            responses = doc if isinstance(doc, list) else [doc]
            base: Path_ = (d,)
            for r, response in enumerate(responses):
                if not isinstance(response, dict):
                    continue
                where = (*base, r) if isinstance(doc, list) else base
                data = response.get("data")
                tweets = [(("data", i), t) for i, t in enumerate(data)] if isinstance(data, list) else []
                if isinstance(data, dict):
                    tweets.append((("data",), data))
                includes = response.get("includes", {}).get("tweets", [])
                tweets += [(("includes", "tweets", i), t) for i, t in enumerate(includes)]
                for sub, tweet in tweets:
                    if isinstance(tweet, dict) and isinstance(tweet.get("id"), str):
                        yield (*where, *sub), f"x:{tweet['id']}"
        elif fmt == "x_graphql":
            for kind, node, linked in iter_graphql_tweets(doc):
                if kind == "tweet" and "legacy" in node and isinstance(node.get("rest_id"), str):
                    keys: list[Any] = []
                    while linked is not None:
                        linked, key = linked
                        keys.append(key)
                    yield (d, *reversed(keys)), f"x:{node['rest_id']}"
        elif fmt == "reddit":
            if isinstance(doc, dict) and isinstance(doc.get("id"), str):
                prefix = "t1_" if "body" in doc else "t3_"
                name = doc.get("name") or prefix + doc["id"]
                yield (d,), f"reddit:{name}"
        elif fmt == "bluesky":
            stack: list[tuple[Any, Path_]] = [(doc, (d,))]
            while stack:
                node, path = stack.pop()
                if isinstance(node, dict):
                    uri = node.get("uri")
                    if (
                        isinstance(uri, str)
                        and uri.startswith("at://")
                        and ("record" in node or "value" in node)
                    ):
                        yield path, f"bluesky:{uri}"
                    stack.extend((v, (*path, k)) for k, v in node.items())
                elif isinstance(node, list):
                    stack.extend((v, (*path, i)) for i, v in enumerate(node))
        elif fmt == "jsonl" and isinstance(doc, dict) and isinstance(doc.get("id"), str):
            yield (d,), doc["id"]


def _inner_paths(value: Any, path: Path_ = ()) -> Iterator[Path_]:
    """Every path inside ``value`` (the value itself first)."""
    yield path
    if isinstance(value, dict):
        for key, child in value.items():
            yield from _inner_paths(child, (*path, key))
    elif isinstance(value, list):
        for i, child in enumerate(value):
            yield from _inner_paths(child, (*path, i))


def _get(root: Any, path: Path_) -> Any:
    for key in path:
        root = root[key]
    return root


# ------------------------------------------------------------------------------------------ files on disk
def _load(path: Path) -> tuple[list[Any], list[str] | None]:
    """Parsed documents and, for JSON Lines, every line's text (blank and broken lines kept as they are)."""
    text = path.read_text(encoding="utf-8")
    if path.suffix == ".json":
        return [json.loads(text)], None
    lines = text.split("\n")
    docs = []
    for line in lines:
        try:
            docs.append(json.loads(line) if line.strip() else None)
        except json.JSONDecodeError:
            docs.append(None)
    return docs, lines


def _write(path: Path, docs: list[Any], lines: list[str] | None, changed: int | None) -> None:
    if lines is None:
        path.write_text(json.dumps(docs[0]), encoding="utf-8")  # surrogates written as \ud83d escapes
        return
    out = list(lines)
    if changed is not None:
        out[changed] = json.dumps(docs[changed])
    path.write_text("\n".join(out), encoding="utf-8")


def _related(a: Path_, b: Path_) -> bool:
    """One path is inside the other (or they are the same)."""
    n = min(len(a), len(b))
    return a[:n] == b[:n]


def _check(before, after, mutated_id: str, excluded: set[str]) -> None:
    for post in after.posts:  # every later writer needs valid UTF-8
        post.model_dump_json().encode("utf-8")
    for problem in after.problems:
        str(problem).encode("utf-8")
    kept = {p.id: p for p in after.posts}
    for post in before.posts:
        if post.id not in excluded:
            assert kept.get(post.id) == post, f"{post.id} was lost or changed by a mutation of {mutated_id}"
    # the mutated record is a post (same or new id) or a counted problem
    others = {p.id for p in before.posts} - excluded
    new_posts = [p for p in after.posts if p.id not in others]
    new_problems = [p for p in after.problems if p not in before.problems]
    assert new_posts or new_problems, f"the record of {mutated_id} vanished without a problem"


@pytest.mark.parametrize("name", sorted(EXAMPLES))
@FUZZ
@given(data=st.data())
def test_one_mutated_record_never_removes_another(name, data, tmp_path_factory):
    source, fmt = EXAMPLES[name]
    docs, lines = _load(source)
    folder = tmp_path_factory.mktemp("fuzz")
    target = folder / source.name
    _write(target, docs, lines, None)
    before = read_posts(target)
    read_ids = {p.id for p in before.posts}
    records = [(path, pid) for path, pid in _records(fmt, docs) if pid in read_ids]
    assert records, f"no record of {name} found"

    path, post_id = data.draw(st.sampled_from(records), label="record")
    record = _get(docs, path)
    inner = data.draw(st.sampled_from(list(_inner_paths(record))), label="field")
    full = (*path, *inner)
    parent_path, key = (full[:-1], full[-1]) if full else ((), None)
    parent = _get(docs, parent_path)
    ops = ["replace"] + (["delete"] if isinstance(parent, dict) else [])
    current = _get(docs, full)
    if isinstance(current, str):
        ops += ["surrogate", "nul"]
    op = data.draw(st.sampled_from(ops), label="operation")
    if op == "replace":
        parent[key] = data.draw(st.sampled_from(REPLACEMENTS), label="value")
    elif op == "delete":
        del parent[key]
    elif op == "surrogate":
        parent[key] = current + "\ud83d"
    else:
        parent[key] = current[: len(current) // 2] + "\x00" + current[len(current) // 2 :]
    _write(target, docs, lines, path[0] if lines is not None else None)

    after = read_posts(target)  # no exception escapes
    excluded = {pid for p, pid in records if _related(p, full) or _related(p, path)} | {post_id}
    _check(before, after, post_id, excluded)


@pytest.mark.parametrize("name", sorted(EXAMPLES))
@FUZZ
@given(cut=st.floats(min_value=0.0, max_value=1.0))
def test_a_truncated_file_keeps_every_complete_line(name, cut, tmp_path_factory):
    source, _ = EXAMPLES[name]
    raw = source.read_bytes()
    at = int(len(raw) * cut)
    folder = tmp_path_factory.mktemp("cut")
    target = folder / source.name
    target.write_bytes(raw[:at])  # possibly inside a multi-byte character
    after = read_posts(target)  # no exception escapes
    for post in after.posts:
        post.model_dump_json().encode("utf-8")
    original = {p.id: p for p in read_posts(source).posts}
    assert all(original.get(p.id) == p for p in after.posts)  # nothing invented from a cut record
    if source.suffix != ".json":  # JSON Lines: the complete lines before the cut all survive
        whole = folder / f"whole{source.suffix}"
        whole.write_bytes(raw[: raw.rfind(b"\n", 0, at) + 1] or b"\n")
        expected = read_posts(whole).posts if whole.read_bytes().strip() else []
        assert [p for p in after.posts if p.id in {e.id for e in expected}] == expected


# ------------------------------------------------------------------------------------- prompt collections
@FUZZ
@given(data=st.data())
def test_one_mutated_case_never_removes_another(data, tmp_path_factory):
    folder = tmp_path_factory.mktemp("collection") / "mini-prompts"
    shutil.copytree(COLLECTION, folder)
    before = read_posts(folder)
    read = {p.id for p in before.posts}
    cases = sorted(p for p in (folder / "cases").iterdir() if f"collection:mini-prompts/{p.name}" in read)
    case = data.draw(st.sampled_from(cases), label="case")
    loaded = yaml.safe_load((case / "case.yml").read_text(encoding="utf-8"))
    key = data.draw(st.sampled_from(sorted(loaded)), label="field")
    op = data.draw(st.sampled_from(["replace", "delete", "cut"]), label="operation")
    if op == "replace":
        loaded[key] = data.draw(st.sampled_from(REPLACEMENTS), label="value")
    elif op == "delete":
        del loaded[key]
    text = yaml.safe_dump(loaded, allow_unicode=True)
    if op == "cut":
        text = text[: data.draw(st.integers(0, len(text)), label="cut")]
    (case / "case.yml").write_text(text, encoding="utf-8")

    after = read_posts(folder)
    post_id = f"collection:mini-prompts/{case.name}"
    _check(before, after, post_id, {post_id})


LINE_EXAMPLES = sorted(name for name, (path, _) in EXAMPLES.items() if path.suffix != ".json")


@pytest.mark.parametrize("name", LINE_EXAMPLES)
@FUZZ
@given(data=st.data())
def test_corrupt_bytes_in_one_line_lose_only_that_line(name, data, tmp_path_factory):
    """Bytes spliced into one line of a JSON Lines export (invalid UTF-8, a NUL, a 5,000-digit number, a cut):
    the posts of every other line are read, identical."""
    source, _ = EXAMPLES[name]
    lines = source.read_bytes().split(b"\n")
    index = data.draw(st.sampled_from([i for i, line in enumerate(lines) if line.strip()]), label="line")
    line = lines[index]
    at = data.draw(st.integers(0, len(line)), label="at")
    cut = data.draw(st.integers(0, min(8, len(line) - at)), label="cut")
    junk = data.draw(
        st.one_of(
            st.binary(max_size=6),
            st.sampled_from(
                [b"\xff", b"\xc3", b"\x00", b"9" * 5000, b'"\\ud83d"', b"\\ud83d", b"\r", b"NaN"]
            ),
        ),
        label="bytes",
    )
    folder = tmp_path_factory.mktemp("bytes")
    original = folder / f"original{source.suffix}"
    original.write_bytes(b"\n".join(lines))
    before = read_posts(original)
    lines[index] = line[:at] + junk + line[at + cut :]
    target = folder / f"corrupt{source.suffix}"
    target.write_bytes(b"\n".join(lines))
    after = read_posts(target)  # no exception escapes
    for post in after.posts:
        post.model_dump_json().encode("utf-8")
    # posts of the other lines: the original read, less the posts of the corrupted line
    alone = folder / f"alone{source.suffix}"
    alone.write_bytes(line)
    own = {p.id for p in read_posts(alone).posts} if line.strip() else set()
    kept = {p.id: p for p in after.posts}
    for post in before.posts:
        if post.id not in own:
            assert kept.get(post.id) == post, f"{post.id} lost by corrupting line {index + 1}"
