"""``build --expand x|bluesky|reddit``: the optional ``expand`` stage against a loopback server replaying the real
API recordings (``../shared/data/api_recordings``), as the ``collect`` tests do.

Each scenario exports only the kept post (its parent and replies absent, as in a keyword search export); the
server answers the expansion's requests with recorded answers: X, the academictwitteR full-archive page 03 (18
posts of conversation 1371430980523802624, served as a two-page conversation search) and a lookup answer of the
conversation's root from the same recording; Bluesky, the recorded ``getPostThread`` 08 (parent chain and reply);
Reddit, the recorded comment trees 03 and 04 with their ``morechildren`` and "continue this thread" answers.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from echo_builder.errors import ConfigError
from echo_builder.pipeline import BuildConfig, build
from tests.helpers.replay_server import ReplayServer, Reply, html_page, rate_limited, truncated
from tests.test_collect_reddit import ENV as REDDIT_ENV
from tests.test_collect_reddit import _comment_ids, _comments_scenario
from tests.test_collect_reddit import _no_prawcore_sleep as _no_prawcore_sleep  # autouse here too

pytestmark = pytest.mark.shared_data

X_TOKEN = "test-bearer-token-123456"
CONVERSATION = "1371430980523802624"
SEED = "1400887989446840324"  # a reply to the conversation's root
X_SEARCH = "/2/tweets/search/recent"
X_LOOKUP = "/2/tweets"
THREAD = "/xrpc/app.bsky.feed.getPostThread"
BSKY_SEED = "at://did:plc:user41/app.bsky.feed.post/3kbi57u4sys2l"


@pytest.fixture
def recordings(shared_data: Path) -> Path:
    path = shared_data / "api_recordings"
    if not path.is_dir():
        pytest.skip("no API recordings")
    return path


@pytest.fixture
def keywords(tmp_path: Path) -> Path:
    path = tmp_path / "keywords.txt"
    path.write_text("gpt-4o\n", encoding="utf-8")
    return path


def _config(sources, out, keywords, platform, server, **kw) -> BuildConfig:
    options = {"base_url": server.url, "sleep": lambda s: None, "max_wait_s": 30.0, **kw.pop("options", {})}
    return BuildConfig(
        sources=sources,
        out_dir=out,
        keywords_file=keywords,
        relevance_threshold=1,
        offline=True,
        progress=False,
        expand=[platform],
        expand_options=options,
        **kw,
    )


def _trees(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "stages" / "threads.jsonl").read_text().splitlines()]


def _tree_of(trees: list[dict], post_id: str) -> dict:
    found = [t for t in trees if any(p["id"] == post_id for p in t["posts"])]
    assert len(found) == 1, f"{post_id} is in {len(found)} trees"
    return found[0]


def _outputs(out: Path) -> dict[str, bytes]:
    names = ["report.json", "build.json", "expand/pages.jsonl"]
    files = {n: (out / n).read_bytes() for n in names}
    files.update({str(p.relative_to(out)): p.read_bytes() for p in sorted((out / "stages").glob("*.jsonl"))})
    files.update({str(p.relative_to(out)): p.read_bytes() for p in sorted((out / "expand").glob("*.jsonl"))})
    return files


# -- X -------------------------------------------------------------------------------------------------------------
def _x_recording(recordings: Path) -> dict:
    return json.loads(
        (recordings / "x_api_v2/academictwitteR/extracted/03_tweets_search_all.response.json").read_text()
    )


def _x_export(recordings: Path, path: Path) -> None:
    body = _x_recording(recordings)
    seed = next(t for t in body["data"] if t["id"] == SEED)
    seed = {**seed, "text": "gpt-4o " + seed["text"]}
    users = [u for u in body["includes"]["users"] if u["id"] == seed["author_id"]]
    path.write_text(json.dumps({"data": [seed], "includes": {"users": users}}) + "\n", encoding="utf-8")


def _x_scenario(server: ReplayServer, recordings: Path, *, search_first=(), lookup_first=()) -> set[str]:
    """The conversation search (two pages) and the root's lookup; returns the conversation's post ids."""
    body = _x_recording(recordings)
    conversation = [t for t in body["data"] if t["conversation_id"] == CONVERSATION]
    root = next(t for t in body["includes"]["tweets"] if t["id"] == CONVERSATION)
    users = body["includes"]["users"]
    first = {"data": conversation[:10], "includes": {"users": users}, "meta": {"next_token": "page-2"}}
    second = {"data": conversation[10:], "includes": {"users": users}, "meta": {}}
    query = f"conversation_id:{CONVERSATION}"
    server.add("GET", X_SEARCH, [*search_first, Reply.json(first)], query=query, next_token=None)
    server.add("GET", X_SEARCH, [Reply.json(second)], query=query, next_token="page-2")
    lookup = {"data": [root], "includes": {"users": users}}
    server.add("GET", X_LOOKUP, [*lookup_first, Reply.json(lookup)], ids=CONVERSATION)
    return {f"x:{t['id']}" for t in conversation} | {f"x:{CONVERSATION}"}


def _x_parents(recordings: Path) -> dict[str, str]:
    body = _x_recording(recordings)
    parents = {}
    for tweet in [*body["data"], *body["includes"]["tweets"]]:
        for ref in tweet.get("referenced_tweets", []):
            if ref["type"] == "replied_to":
                parents[f"x:{tweet['id']}"] = f"x:{ref['id']}"
    return parents


def test_x_expansion_puts_every_recorded_reply_and_ancestor_in_the_tree(
    recordings, keywords, tmp_path, monkeypatch
):
    monkeypatch.setenv("X_BEARER_TOKEN", X_TOKEN)
    export = tmp_path / "export.jsonl"
    _x_export(recordings, export)
    out = tmp_path / "build"
    with ReplayServer() as server:
        expected = _x_scenario(server, recordings)
        result = build(_config([export], out, keywords, "x", server))
        assert server.misses == []
        assert server.count(X_SEARCH) == 2 and server.count(X_LOOKUP) == 1
        assert server.requests[0].headers["authorization"] == f"Bearer {X_TOKEN}"
    tree = _tree_of(_trees(out), f"x:{SEED}")
    members = {p["id"] for p in tree["posts"]}
    assert tree["root_id"] == f"x:{CONVERSATION}" and tree["missing_ids"] == []
    assert expected <= members and len(expected) == 19
    parents = _x_parents(recordings)
    for child in expected - {f"x:{CONVERSATION}"}:  # each recorded reply sits under its recorded parent
        assert child in tree["children"][parents[child]], child
    report = json.loads((out / "report.json").read_text())
    assert report["expansion"]["requests"] == 3
    assert report["expansion"]["posts_added"] == 18  # the root and the 17 replies besides the seed
    assert report["expansion"]["trees_touched"] == 1 and report["expansion"]["errors"] == []
    stages = [s["name"] for s in report["stages"]]
    assert stages.index("relevance") < stages.index("expand") < stages.index("threads")
    rows = [json.loads(line) for line in (out / "stages" / "expand.jsonl").read_text().splitlines()]
    assert {r["id"] for r in rows} == expected - {f"x:{SEED}"} and {r["round"] for r in rows} == {1}
    assert len(result.trees) == 1
    stats = json.loads((out / "run_stats.json").read_text())
    assert stats["expansion"]["requests_this_run"] == {"x": 3}


def test_x_rerun_makes_no_request_and_gives_the_same_files(recordings, keywords, tmp_path, monkeypatch):
    monkeypatch.setenv("X_BEARER_TOKEN", X_TOKEN)
    export = tmp_path / "export.jsonl"
    _x_export(recordings, export)
    out = tmp_path / "build"
    with ReplayServer() as server:
        _x_scenario(server, recordings)
        build(_config([export], out, keywords, "x", server))
    first = _outputs(out)
    with ReplayServer() as server:  # answers nothing: every request would be a miss
        build(_config([export], out, keywords, "x", server, resume=True))
        assert server.requests == []
    assert _outputs(out) == first
    assert json.loads((out / "run_stats.json").read_text())["expansion"]["requests_this_run"] == {"x": 0}


def test_x_killed_and_resumed_is_byte_identical_and_reads_no_page_twice(
    recordings, keywords, tmp_path, monkeypatch
):
    monkeypatch.setenv("X_BEARER_TOKEN", X_TOKEN)
    export = tmp_path / "export.jsonl"
    _x_export(recordings, export)
    straight = tmp_path / "straight"
    with ReplayServer() as server:
        _x_scenario(server, recordings)
        build(_config([export], straight, keywords, "x", server))
    expected = _outputs(straight)

    from echo_builder.collect import expand as module

    for kill_after in (1, 2):
        out = tmp_path / f"killed-{kill_after}"
        real = module.ExpansionCache.put
        calls = {"n": 0}

        def put(self, key, body, next_cursor, _real=real, _calls=calls, _n=kill_after, **kw):
            if _calls["n"] == _n:
                raise KeyboardInterrupt("killed")  # the page was received but never stored
            _calls["n"] += 1
            return _real(self, key, body, next_cursor, **kw)

        with ReplayServer() as server:
            _x_scenario(server, recordings)
            monkeypatch.setattr(module.ExpansionCache, "put", put)
            with pytest.raises(KeyboardInterrupt):
                build(_config([export], out, keywords, "x", server))
            monkeypatch.setattr(module.ExpansionCache, "put", real)
            stored = [(r.path, r.params.get("ids"), r.params.get("next_token")) for r in server.requests]
            stored = stored[:kill_after]
        with open(out / "expand" / "pages.jsonl", "ab") as handle:
            handle.write(b'{"v":1,"key":"half a li')  # a line cut off by the kill
        with ReplayServer() as server:
            _x_scenario(server, recordings)
            build(_config([export], out, keywords, "x", server, resume=True))
            # the pages stored before the kill are not asked again; the rest are, once each
            asked = [(r.path, r.params.get("ids"), r.params.get("next_token")) for r in server.requests]
            assert server.misses == [] and len(asked) == 3 - kill_after
            assert not set(asked) & set(stored)
        got = _outputs(out)
        assert got.keys() == expected.keys()
        for name in expected:
            if name != "build.json":
                assert got[name] == expected[name], name


def test_without_expand_nothing_changes(recordings, keywords, tmp_path, monkeypatch):
    from echo_builder.stages.registry import stage_order

    export = tmp_path / "export.jsonl"
    _x_export(recordings, export)
    config = BuildConfig(sources=[export], out_dir=tmp_path / "b", keywords_file=keywords, progress=False)
    assert "expand" not in [d.name for d in stage_order(config)]
    build(config)
    report = json.loads((tmp_path / "b" / "report.json").read_text())
    assert "expansion" not in report and not (tmp_path / "b" / "expand").exists()
    assert "expand" not in json.loads((tmp_path / "b" / "build.json").read_text())


def test_bad_expand_options_fail_before_anything_is_written(tmp_path, keywords):
    for kw, message in (
        ({"expand": ["mastodon"]}, "--expand takes x, bluesky, reddit"),
        ({"expand": ["x"], "expand_depth": 0}, "--expand-depth"),
        ({"expand": ["x"], "expand_max_requests": -1}, "--expand-max-requests"),
    ):
        config = BuildConfig(sources=[tmp_path], out_dir=tmp_path / "b", keywords_file=keywords, **kw)
        with pytest.raises(ConfigError, match=message):
            build(config)
        assert not (tmp_path / "b").exists()


@pytest.mark.parametrize(
    ("fault", "message"),
    [
        (Reply.json({"title": "Unauthorized", "status": 401}, 401), "X refused the bearer token"),
        (
            Reply.json({"title": "Forbidden", "detail": "This account is suspended"}, 403),
            "403 Forbidden: Forbidden; This account is suspended",
        ),
        (html_page(200, "Over capacity"), "HTML page, not JSON ('Over capacity')"),
        (truncated(Reply.json({"data": [{"id": "1", "text": "x" * 200}]})), "malformed JSON"),
    ],
)
def test_x_faults_keep_the_exports_and_say_why(recordings, keywords, tmp_path, monkeypatch, fault, message):
    monkeypatch.setenv("X_BEARER_TOKEN", X_TOKEN)
    export = tmp_path / "export.jsonl"
    _x_export(recordings, export)
    out = tmp_path / "build"
    with ReplayServer() as server:
        _x_scenario(server, recordings, lookup_first=[fault] * 4)
        build(_config([export], out, keywords, "x", server))
    report = json.loads((out / "report.json").read_text())
    errors = report["expansion"]["errors"]
    assert len(errors) == 1 and message in errors[0], errors
    # the failed lookup stopped X's expansion after the conversation search: those posts and the seed are kept
    tree = _tree_of(_trees(out), f"x:{SEED}")
    assert f"x:{SEED}" in {p["id"] for p in tree["posts"]}
    assert report["expansion"]["posts_added"] == 17 and tree["missing_ids"] == [f"x:{CONVERSATION}"]


def test_x_rate_limit_storm_stops_with_a_message(recordings, keywords, tmp_path, monkeypatch):
    monkeypatch.setenv("X_BEARER_TOKEN", X_TOKEN)
    export = tmp_path / "export.jsonl"
    _x_export(recordings, export)
    out = tmp_path / "build"
    storm = rate_limited({"x-rate-limit-remaining": "0", "x-rate-limit-reset": "0"})
    slept: list[float] = []
    with ReplayServer() as server:
        _x_scenario(server, recordings, search_first=[storm] * 10)
        build(_config([export], out, keywords, "x", server, options={"sleep": slept.append}))
        assert server.count(X_LOOKUP) == 0  # the storm stopped X's expansion
    errors = json.loads((out / "report.json").read_text())["expansion"]["errors"]
    assert len(errors) == 1 and "rate limit is exceeded" in errors[0] and len(slept) == 5
    assert [p["id"] for p in _tree_of(_trees(out), f"x:{SEED}")["posts"]] == [f"x:{SEED}"]


def test_x_endless_cursor_ends_that_request_only(recordings, keywords, tmp_path, monkeypatch):
    monkeypatch.setenv("X_BEARER_TOKEN", X_TOKEN)
    export = tmp_path / "export.jsonl"
    _x_export(recordings, export)
    out = tmp_path / "build"
    body = _x_recording(recordings)
    conversation = [t for t in body["data"] if t["conversation_id"] == CONVERSATION]
    loop = {
        "data": conversation[:2],
        "includes": {"users": body["includes"]["users"]},
        "meta": {"next_token": "same"},
    }
    with ReplayServer() as server:
        query = f"conversation_id:{CONVERSATION}"
        server.add("GET", X_SEARCH, [Reply.json(loop)], query=query, next_token=None)
        server.add("GET", X_SEARCH, [Reply.json(loop)] * 5, query=query, next_token="same")
        lookup = {"data": [next(t for t in body["includes"]["tweets"] if t["id"] == CONVERSATION)]}
        server.add("GET", X_LOOKUP, [Reply.json(lookup)], ids=CONVERSATION)
        build(_config([export], out, keywords, "x", server))
        assert server.count(X_SEARCH) == 2 and server.count(X_LOOKUP) == 1 and server.misses == []
    errors = json.loads((out / "report.json").read_text())["expansion"]["errors"]
    assert len(errors) == 1 and "endless cursor" in errors[0] and "'same'" in errors[0]


def test_x_ten_thousand_deep_chain_is_bounded_by_depth(keywords, tmp_path, monkeypatch):
    """A synthetic reply chain 10,000 posts deep: each lookup reveals one more parent; expansion stops after
    ``expand_depth`` rounds, with the chain so far kept and the tree counted as truncated by depth."""
    monkeypatch.setenv("X_BEARER_TOKEN", X_TOKEN)

    def tweet(n: int) -> dict:
        ref = [{"type": "replied_to", "id": str(n - 1)}] if n > 1 else []
        return {
            "id": str(n),
            "text": f"gpt-4o post {n}",
            "author_id": "9000000001",
            "conversation_id": "1",
            "created_at": "2024-05-01T00:00:00.000Z",
            "referenced_tweets": ref,
        }

    export = tmp_path / "export.jsonl"
    export.write_text(json.dumps({"data": [tweet(10_000)]}) + "\n", encoding="utf-8")
    out = tmp_path / "build"
    with ReplayServer() as server:
        server.add("GET", X_SEARCH, [Reply.json({"meta": {"result_count": 0}})], query="conversation_id:1")
        for n in range(9_999, 9_990, -1):
            server.add("GET", X_LOOKUP, [Reply.json({"data": [tweet(n)]})], ids=str(n))
        build(_config([export], out, keywords, "x", server, expand_depth=5))
        assert server.misses == [] and server.count(X_LOOKUP) == 5
    expansion = json.loads((out / "report.json").read_text())["expansion"]
    assert expansion["posts_added"] == 5 and expansion["truncated_by_depth"] == 1
    tree = _tree_of(_trees(out), "x:10000")
    assert tree["root_id"] == "x:9995" and tree["missing_ids"] == ["x:9994"]


def test_request_budget_bounds_the_expansion_and_a_resume_stops_at_the_same_place(
    recordings, keywords, tmp_path, monkeypatch
):
    monkeypatch.setenv("X_BEARER_TOKEN", X_TOKEN)
    export = tmp_path / "export.jsonl"
    _x_export(recordings, export)
    out = tmp_path / "build"
    with ReplayServer() as server:
        _x_scenario(server, recordings)
        build(_config([export], out, keywords, "x", server, expand_max_requests=2))
        assert len(server.requests) == 2
    expansion = json.loads((out / "report.json").read_text())["expansion"]
    assert expansion["requests"] == 2 and expansion["truncated_by_budget"] == 1
    before = _outputs(out)
    with ReplayServer() as server:
        build(_config([export], out, keywords, "x", server, expand_max_requests=2, resume=True))
        assert server.requests == []
    assert _outputs(out) == before


# -- Bluesky -------------------------------------------------------------------------------------------------------
def test_bluesky_expansion_fetches_the_thread(recordings, keywords, tmp_path):
    rec = recordings / "bluesky" / "recorded"
    thread = json.loads((rec / "08_getPostThread.response.json").read_text())
    seed = json.loads(json.dumps(thread["thread"]["post"]))
    seed["record"]["text"] = "gpt-4o " + seed["record"]["text"]
    export = tmp_path / "export.jsonl"
    export.write_text(json.dumps({"posts": [seed]}) + "\n", encoding="utf-8")
    out = tmp_path / "build"
    with ReplayServer() as server:
        server.add("GET", THREAD, [Reply.recorded(rec / "08_getPostThread")], uri=BSKY_SEED)
        build(_config([export], out, keywords, "bluesky", server))
        assert server.misses == [] and server.count(THREAD) == 1
        assert "authorization" not in server.requests[0].headers  # threads are public
    tree = _tree_of(_trees(out), f"bluesky:{BSKY_SEED}")
    base = "bluesky:at://did:plc:user41/app.bsky.feed.post/"
    assert tree["root_id"] == base + "3kbi55xm6u62v" and tree["missing_ids"] == []
    assert tree["children"] == {
        base + "3kbi55xm6u62v": [base + "3kbi56mwx5j2q"],
        base + "3kbi56mwx5j2q": [base + "3kbi57u4sys2l"],
        base + "3kbi57u4sys2l": [base + "3kbi5dzaujr2n"],
    }
    expansion = json.loads((out / "report.json").read_text())["expansion"]
    assert expansion["posts_added"] == 3 and expansion["requests"] == 1


# -- Reddit --------------------------------------------------------------------------------------------------------
def test_reddit_expansion_reads_the_whole_comment_trees(recordings, keywords, tmp_path, monkeypatch):
    for key, value in REDDIT_ENV.items():
        monkeypatch.setenv(key, value)
    rec = recordings / "reddit" / "extracted"
    small = json.loads((rec / "03_comments_2gmzqe.response.json").read_text())
    large = json.loads((rec / "04_comments_3hahrw.response.json").read_text())
    children = []
    for listing in (small, large):
        child = json.loads(json.dumps(listing[0]["data"]["children"][0]))
        child["data"]["title"] = "gpt-4o " + child["data"]["title"]
        children.append(child)
    export = tmp_path / "export.jsonl"
    export.write_text(json.dumps({"kind": "Listing", "data": {"after": None, "children": children}}) + "\n")
    out = tmp_path / "build"
    with ReplayServer() as server:
        _comments_scenario(server, rec)
        build(
            _config(
                [export],
                out,
                keywords,
                "reddit",
                server,
                expand_max_tree=10_000,
                max_tree_size=10_000,
                max_depth=1_000,
            )
        )
        assert server.misses == [] and server.count("/api/morechildren") == 12
    recorded = ["03_comments_2gmzqe", "04_comments_3hahrw", *(f"{n:02d}_morechildren" for n in range(5, 10))]
    expected = _comment_ids(rec, [*recorded, "10_comments_3hahrw_cu5v5h7"])
    trees = _trees(out)
    in_trees = {p["id"]: t["root_id"] for t in trees for p in t["posts"]}
    missing = expected - set(in_trees)
    assert not missing, sorted(missing)[:5]
    posts = {p["id"]: p for t in trees for p in t["posts"]}
    for comment in expected:
        assert in_trees[comment] == posts[comment]["root_id"], comment  # in its submission's tree
    expansion = json.loads((out / "report.json").read_text())["expansion"]
    assert expansion["posts_added"] == len(expected) and expansion["trees_touched"] == 2
    first = _outputs(out)
    with ReplayServer() as server:  # a rerun: every page from the cache, not even a token request
        build(
            _config(
                [export],
                out,
                keywords,
                "reddit",
                server,
                resume=True,
                expand_max_tree=10_000,
                max_tree_size=10_000,
                max_depth=1_000,
            )
        )
        assert server.requests == []
    assert _outputs(out) == first


def test_build_cli_expands_and_names_the_options(recordings, keywords, tmp_path, monkeypatch):
    from click.testing import CliRunner

    from echo_builder.cli import cli

    monkeypatch.setenv("X_BEARER_TOKEN", X_TOKEN)
    export = tmp_path / "export.jsonl"
    _x_export(recordings, export)
    out = tmp_path / "build"
    args = [
        "build",
        str(export),
        "--out",
        str(out),
        "--keywords",
        str(keywords),
        "--threshold",
        "1",
        "--offline",
    ]
    with ReplayServer() as server:
        _x_scenario(server, recordings)
        result = CliRunner().invoke(
            cli, [*args, "--expand", "x", "--expand-base-url", server.url, "--expand-max-requests", "3"]
        )
        assert result.exit_code == 0, result.output
        assert server.misses == [] and len(server.requests) == 3
    assert "expand" in result.output
    recorded = json.loads((out / "build.json").read_text())["expand"]
    assert recorded == {"platforms": ["x"], "depth": 8, "max_tree": 500, "max_requests": 3}
    refused = CliRunner().invoke(cli, [*args[:3], str(tmp_path / "other"), "--expand-archive"])
    assert refused.exit_code != 0 and "--expand-archive and --expand-base-url need --expand" in refused.output
    shown = CliRunner().invoke(cli, ["build", "--help"])
    assert "--expand [x|bluesky|reddit]" in shown.output and "--expand-max-requests" in shown.output


def _bsky_view(n: int, parent: int | None) -> str:
    uri = f"at://did:plc:user1/app.bsky.feed.post/p{n}"
    reply = (
        f',"reply":{{"parent":{{"uri":"at://did:plc:user1/app.bsky.feed.post/p{parent}","cid":"c"}},'
        f'"root":{{"uri":"at://did:plc:user1/app.bsky.feed.post/p0","cid":"c"}}}}'
        if parent is not None
        else ""
    )
    return (
        f'{{"uri":"{uri}","cid":"c","author":{{"did":"did:plc:user1","handle":"user1.test"}},'
        f'"record":{{"$type":"app.bsky.feed.post","text":"gpt-4o post {n}","createdAt":"2024-05-01T00:00:00Z"{reply}}},'
        f'"indexedAt":"2024-05-01T00:00:00Z","replyCount":0}}'
    )


def test_bluesky_thread_ten_thousand_deep_gives_a_clear_message(keywords, tmp_path):
    """A synthetic getPostThread answer whose parent chain is 10,000 levels deep (JSON nested 20,000 deep): the
    answer cannot be read, the expansion says so, and the kept post stays."""
    depth = 10_000
    seed = json.loads(_bsky_view(depth, depth - 1))
    export = tmp_path / "export.jsonl"
    export.write_text(json.dumps({"posts": [seed]}) + "\n", encoding="utf-8")
    node = '{"$type":"app.bsky.feed.defs#threadViewPost","post":'
    opening = [node + _bsky_view(n, n - 1) + ',"parent":' for n in range(depth, 0, -1)]
    body = ('{"thread":' + "".join(opening) + node + _bsky_view(0, None) + "}" * (depth + 2)).encode()
    deep = Reply(200, {"content-type": "application/json"}, body)
    out = tmp_path / "build"
    with ReplayServer() as server:
        server.add("GET", THREAD, [deep] * 4)
        build(_config([export], out, keywords, "bluesky", server))
    expansion = json.loads((out / "report.json").read_text())["expansion"]
    assert len(expansion["errors"]) == 1 and "nested too deeply" in expansion["errors"][0], expansion
    assert expansion["posts_added"] == 0
    seed_id = f"bluesky:{seed['uri']}"
    assert [p["id"] for p in _tree_of(_trees(out), seed_id)["posts"]] == [seed_id]


def test_a_missing_credential_is_reported_and_the_build_goes_on(recordings, keywords, tmp_path, monkeypatch):
    monkeypatch.delenv("X_BEARER_TOKEN", raising=False)
    export = tmp_path / "export.jsonl"
    _x_export(recordings, export)
    out = tmp_path / "build"
    with ReplayServer() as server:
        build(_config([export], out, keywords, "x", server))
        assert server.requests == []
    errors = json.loads((out / "report.json").read_text())["expansion"]["errors"]
    assert errors == ["x: collect x: set the environment variable X_BEARER_TOKEN (see docs/collect.md)"]
    assert (out / "stages" / "samples.jsonl").exists()
    # the command line says it after the stage table too, not only in report.json
    from click.testing import CliRunner

    from echo_builder.cli import cli

    again = tmp_path / "cli-build"
    with ReplayServer() as server:
        args = ["build", str(export), "--out", str(again), "--keywords", str(keywords), "--threshold", "1"]
        result = CliRunner().invoke(
            cli, [*args, "--offline", "--expand", "x", "--expand-base-url", server.url]
        )
        assert server.requests == []
    assert result.exit_code == 0, result.output
    assert "warning: reply-tree expansion stopped early (1 error(s)):" in result.output
    assert "set the environment variable X_BEARER_TOKEN" in result.output


@pytest.mark.filterwarnings(
    "ignore:no --target-model and no --keywords"
)  # every post is kept: the whole trees
def test_reddit_collect_then_build_expand_reproduces_collect_with_comments(recordings, tmp_path, monkeypatch):
    """``collect reddit`` (searches only) then ``build --expand reddit`` reads the same posts as ``collect reddit
    --comments``: the expansion reproduces the recorded conversations, and links them into the same trees."""
    from echo_builder.sources import read_posts
    from tests.test_collect_reddit import _comments_collector

    for key, value in REDDIT_ENV.items():
        monkeypatch.setenv(key, value)
    rec = recordings / "reddit" / "extracted"
    with ReplayServer() as server:
        _comments_scenario(server, rec)
        _comments_collector(server, tmp_path, tmp_path / "with-comments").run()
    with ReplayServer() as server:
        _comments_scenario(server, rec)
        collector = _comments_collector(server, tmp_path, tmp_path / "searched")
        collector.platform.comments = False
        collector.run()
        assert server.count("/comments/3hahrw") == 0
        bounds = {"expand_max_tree": 10_000, "max_tree_size": 10_000, "max_depth": 1_000}
        options = {"base_url": server.url, "sleep": lambda s: None}
        expanded = tmp_path / "expanded"
        build(
            BuildConfig(
                sources=[tmp_path / "searched" / "posts"],
                out_dir=expanded,
                relevance_threshold=1,
                offline=True,
                progress=False,
                expand=["reddit"],
                expand_options=options,
                **bounds,
            )
        )
        assert server.misses == []
    plain = tmp_path / "plain"
    build(
        BuildConfig(
            sources=[tmp_path / "with-comments" / "posts"],
            out_dir=plain,
            relevance_threshold=1,
            offline=True,
            progress=False,
            **bounds,
        )
    )
    collected = {p.id for p in read_posts(tmp_path / "with-comments" / "posts").posts}
    searched = {p.id for p in read_posts(tmp_path / "searched" / "posts").posts}
    added = {
        json.loads(line)["id"] for line in (expanded / "stages" / "expand.jsonl").read_text().splitlines()
    }
    assert added == collected - searched and len(added) > 400
    shape = {t["root_id"]: (sorted(p["id"] for p in t["posts"]), t["children"]) for t in _trees(expanded)}
    assert shape == {
        t["root_id"]: (sorted(p["id"] for p in t["posts"]), t["children"]) for t in _trees(plain)
    }


def test_tree_size_bound_stops_paging_a_conversation(recordings, keywords, tmp_path, monkeypatch):
    monkeypatch.setenv("X_BEARER_TOKEN", X_TOKEN)
    export = tmp_path / "export.jsonl"
    _x_export(recordings, export)
    out = tmp_path / "build"
    with ReplayServer() as server:
        _x_scenario(server, recordings)
        build(_config([export], out, keywords, "x", server, expand_max_tree=5))
        assert server.count(X_SEARCH) == 1 and server.count(X_LOOKUP) == 0  # the first page filled it
    expansion = json.loads((out / "report.json").read_text())["expansion"]
    first_page = [t["id"] for t in _x_recording(recordings)["data"] if t["conversation_id"] == CONVERSATION][
        :10
    ]
    assert expansion["posts_added"] == len(set(first_page) - {SEED}) and expansion["truncated_by_size"] == 1
    assert expansion["truncated_by_depth"] == expansion["truncated_by_budget"] == 0
