"""``echo-bench collect bluesky``: the atproto SDK against a loopback server replaying real searchPosts answers
(``../shared/data/api_recordings/bluesky/recorded``), with scripted 429s (``RateLimit-Reset``), 5xx, HTML pages,
truncated JSON and cursor loops.

No sign-in was recorded (the recordings were made with a session already open), so the
``com.atproto.server.createSession`` answer is synthetic: the lexicon's fields, with an unsigned JWT whose ``exp`` is
far ahead (the SDK reads ``exp`` to decide when to refresh). No second search page was recorded either: page 2 of a
query is another recorded answer, its cursor removed.
"""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from echo_builder.cli import cli
from echo_builder.collect.bluesky import BlueskySearch
from echo_builder.collect.core import CollectError, Collector, plan_jobs
from echo_builder.sources import read_posts
from echo_builder.stages.query import load_keywords, parse_launch_date
from tests.helpers.replay_server import ReplayServer, Reply, html_page, rate_limited, server_error, truncated

pytestmark = pytest.mark.shared_data

SEARCH = "/xrpc/app.bsky.feed.searchPosts"
SESSION = "/xrpc/com.atproto.server.createSession"
Q1 = '"gpt-4o"'
Q2 = '"openai"'
HANDLE = "collector.example.com"
PASSWORD = "abcd-efgh-ijkl-mnop"
NOW = 1_751_619_000.0


def _jwt(payload: dict) -> str:
    def part(obj: dict) -> str:
        return base64.urlsafe_b64encode(json.dumps(obj).encode()).rstrip(b"=").decode()

    return f"{part({'alg': 'ES256K', 'typ': 'at+jwt'})}.{part(payload)}.c2lnbmF0dXJl"


SESSION_REPLY = Reply.json(
    {
        "did": "did:plc:collector",
        "handle": HANDLE,
        "accessJwt": _jwt({"scope": "com.atproto.appPass", "sub": "did:plc:collector", "exp": 4102444800}),
        "refreshJwt": _jwt({"scope": "com.atproto.refresh", "sub": "did:plc:collector", "exp": 4102444800}),
        "active": True,
    }
)


@pytest.fixture
def rec(shared_data: Path) -> Path:
    path = shared_data / "api_recordings" / "bluesky" / "recorded"
    if not path.is_dir():
        pytest.skip("no Bluesky recordings")
    return path


def _no_cursor(body):
    body.pop("cursor", None)
    return body


def _pages(rec: Path) -> dict[str, Reply]:
    return {
        "q1p1": Reply.recorded(rec / "01_searchPosts"),  # cursor "25"
        "q1p2": Reply.recorded(rec / "06_searchPosts"),  # no cursor
        "q2p1": Reply.recorded(rec / "05_searchPosts"),  # cursor "100"
        "q2p2": Reply.recorded(rec / "01_searchPosts", _no_cursor),
    }


EXPECTED_POSTS = 25 + 1 + 100 + 25


def _scenario(server: ReplayServer, rec: Path, *, q1_first=(), q2_first=()) -> None:
    pages = _pages(rec)
    server.add("POST", SESSION, [SESSION_REPLY], identifier=HANDLE, password=PASSWORD)
    server.add("GET", SEARCH, [*q1_first, pages["q1p1"]], q=Q1, cursor=None)
    server.add("GET", SEARCH, [pages["q1p2"]], q=Q1, cursor="25")
    server.add("GET", SEARCH, [*q2_first, pages["q2p1"]], q=Q2, cursor=None)
    server.add("GET", SEARCH, [pages["q2p2"]], q=Q2, cursor="100")


@pytest.fixture
def keywords(tmp_path: Path) -> Path:
    path = tmp_path / "keywords.txt"
    path.write_text("gpt-4o|14\nopenai\n", encoding="utf-8")
    return path


def _collector(server, keywords, out, *, sleep=None, **kw) -> Collector:
    platform = BlueskySearch(HANDLE, PASSWORD, base_url=server.url)
    jobs, _ = plan_jobs(load_keywords(keywords), platform, launch=parse_launch_date("2025-05-10"))
    return Collector(platform, jobs, out, sleep=sleep or (lambda s: None), clock=lambda: NOW, **kw)


def _files(out: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(out)): p.read_bytes() for p in sorted((out / "posts").rglob("*")) if p.is_file()
    }


def test_collect_then_build(rec, keywords, tmp_path):
    out = tmp_path / "out"
    env = {"BLUESKY_HANDLE": HANDLE, "BLUESKY_APP_PASSWORD": PASSWORD}
    args = ["collect", "bluesky", "--query-file", keywords, "--launch-date", "2025-05-10", "--out", out]
    with ReplayServer() as server:
        _scenario(server, rec)
        args += ["--base-url", server.url, "--no-progress"]
        result = CliRunner().invoke(cli, [str(a) for a in args], env=env)
        assert result.exit_code == 0, result.output
        assert server.misses == []
        assert [r.path for r in server.requests] == [SESSION] + [SEARCH] * 4
        first = server.requests[1]
        assert first.headers["authorization"].startswith("Bearer ey")
        assert first.params["since"] == "2025-05-10T00:00:00.000Z"
        assert first.params["until"] == "2025-05-24T00:00:00.000Z"
        assert first.params["sort"] == "latest" and first.params["limit"] == "100"
        assert "since" not in server.requests[3].params

        summary = json.loads((out / "collect.json").read_text())
        assert summary["status"] == "complete"
        assert (
            summary["posts"] == EXPECTED_POSTS and summary["requests"] == 4 and summary["auth_requests"] == 1
        )
        assert [q["posts"] for q in summary["queries"]] == [26, 125]
        assert summary["per_day"]["2025-05-19"] >= 25
        for path in (out / "collect.json", out / ".collect" / "state.json"):
            assert PASSWORD not in path.read_text()

        before = _files(out)
        again = CliRunner().invoke(cli, [str(a) for a in args], env=env)
        assert again.exit_code == 0 and "(0 this run)" in again.output
        assert len(server.requests) == 5  # no sign-in, no search
        assert _files(out) == before

    report = read_posts(out / "posts")
    expected = set()
    for reply in _pages(rec).values():
        expected |= {f"bluesky:{p['uri']}" for p in json.loads(reply.body)["posts"]}
    got = {p.id for p in report.posts}
    assert expected <= got  # quoted posts come on top
    assert {f.format for f in report.files} == {"bluesky"}

    build = tmp_path / "build"
    result = CliRunner().invoke(
        cli, ["build", str(out / "posts"), "--backend", "rules", "--offline", "--out", str(build)]
    )
    assert result.exit_code == 0, result.output
    stages = {s["name"]: s for s in json.loads((build / "report.json").read_text())["stages"]}
    assert stages["collect"]["out"] == len(report.posts)


@pytest.mark.parametrize("kill_after", [1, 3])
def test_killed_run_resumes_byte_identical(rec, keywords, tmp_path, kill_after):
    straight = tmp_path / "straight"
    with ReplayServer() as server:
        _scenario(server, rec)
        _collector(server, keywords, straight).run()
    out = tmp_path / "killed"
    with ReplayServer() as server:
        _scenario(server, rec)
        server.add("POST", SESSION, [SESSION_REPLY])  # the resumed process signs in again
        collector = _collector(server, keywords, out)
        real = collector.platform.fetch
        calls = []

        def dying(*args):
            if len(calls) == kill_after:
                raise KeyboardInterrupt
            calls.append(args)
            return real(*args)

        collector.platform.fetch = dying
        with pytest.raises(KeyboardInterrupt):
            collector.run()
        _collector(server, keywords, out).run()
        assert server.count(SEARCH) == 4 and server.misses == []
    assert _files(out) == _files(straight)


def test_429_with_ratelimit_reset_waits(rec, keywords, tmp_path):
    slept: list[float] = []
    limit = rate_limited(
        {"RateLimit-Remaining": "0", "RateLimit-Reset": str(int(NOW) + 42)}, {"error": "RateLimitExceeded"}
    )
    with ReplayServer() as server:
        _scenario(server, rec, q1_first=[limit])
        result = _collector(server, keywords, tmp_path / "out", sleep=slept.append).run()
    assert slept == [43.0]
    assert result.summary["rate_limit_waits"]["count"] == 1 and result.summary["posts"] == EXPECTED_POSTS


@pytest.mark.parametrize("fault", ["503", "html", "truncated"])
def test_transient_faults_are_retried(rec, keywords, tmp_path, fault):
    reply = {
        "503": server_error(503),
        "html": html_page(502, "Bad Gateway"),
        "truncated": truncated(_pages(rec)["q2p1"]),
    }[fault]
    slept: list[float] = []
    with ReplayServer() as server:
        _scenario(server, rec, q2_first=[reply])
        result = _collector(server, keywords, tmp_path / "out", sleep=slept.append).run()
    assert slept == [1.0] and result.summary["retries"] == 1
    assert result.summary["posts"] == EXPECTED_POSTS


def test_html_page_200_persistent_is_a_clear_error(rec, keywords, tmp_path):
    with ReplayServer() as server:
        _scenario(server, rec, q2_first=[html_page(200, "Maintenance")] * 4)
        with pytest.raises(CollectError, match=r"HTML page, not JSON \('Maintenance'\)"):
            _collector(server, keywords, tmp_path / "out").run()
    assert json.loads((tmp_path / "out" / "collect.json").read_text())["queries"][0]["posts"] == 26


def test_bad_app_password_is_a_clear_error(rec, keywords, tmp_path):
    refused = Reply.json(
        {"error": "AuthenticationRequired", "message": "Invalid identifier or password"}, 401
    )
    with ReplayServer() as server:
        server.add("POST", SESSION, [refused])
        with pytest.raises(
            CollectError, match=r"Bluesky refused signing in .*Invalid identifier or password"
        ):
            _collector(server, keywords, tmp_path / "out").run()


def test_endless_cursor(rec, keywords, tmp_path):
    looping = Reply.recorded(rec / "05_searchPosts")  # cursor "100", served for cursor "100" again
    with ReplayServer() as server:
        _scenario(server, rec)
        server.routes[4].replies = [looping]
        result = _collector(server, keywords, tmp_path / "out").run()
    assert len(result.errors) == 1 and "endless cursor" in result.errors[0] and "'100'" in result.errors[0]
    assert [q["status"] for q in result.summary["queries"]] == ["done", "error"]


def test_public_thread_and_posts_without_signing_in(rec, tmp_path):
    thread_uri = "at://did:plc:user30/app.bsky.feed.post/3k7qmjev5lr2s"
    with ReplayServer() as server:
        server.add(
            "GET",
            "/xrpc/app.bsky.feed.getPostThread",
            [Reply.recorded(rec / "02_getPostThread")],
            uri=thread_uri,
        )
        server.add(
            "GET", "/xrpc/app.bsky.feed.getPosts", [Reply.recorded(rec / "03_getPosts")], uris=thread_uri
        )
        platform = BlueskySearch(base_url=server.url)  # no handle, no password: never needed
        thread, headers = platform.query_raw("app.bsky.feed.getPostThread", {"uri": thread_uri}, public=True)
        posts, _ = platform.query_raw("app.bsky.feed.getPosts", {"uris": [thread_uri]}, public=True)
        assert server.misses == [] and server.count(SESSION) == 0 and platform.auth_requests == 0
        assert "authorization" not in server.requests[0].headers
        assert headers["ratelimit-policy"].startswith("3000")
    (tmp_path / "thread.jsonl").write_text(json.dumps(thread) + "\n" + json.dumps(posts) + "\n")
    report = read_posts(tmp_path)
    assert f"bluesky:{thread_uri}" in {p.id for p in report.posts}
    assert thread["thread"]["post"]["uri"] == thread_uri


def test_options_from_a_run_config_file(rec, keywords, tmp_path):
    out = tmp_path / "out"
    with ReplayServer() as server:
        _scenario(server, rec)
        config = tmp_path / "collect.yaml"
        config.write_text(
            f"query-file: {keywords}\nlaunch-date: 2025-05-10\nout: {out}\nbase-url: {server.url}\n"
            "max-requests: 1\nprogress: false\n",
            encoding="utf-8",
        )
        env = {"BLUESKY_HANDLE": HANDLE, "BLUESKY_APP_PASSWORD": PASSWORD}
        result = CliRunner().invoke(cli, ["collect", "bluesky", "--run-config", str(config)], env=env)
        assert result.exit_code == 0, result.output
        assert server.count(SEARCH) == 1  # max-requests from the file
        bad = tmp_path / "bad.yaml"
        bad.write_text("query-flie: x\n", encoding="utf-8")
        refused = CliRunner().invoke(cli, ["collect", "bluesky", "--run-config", str(bad)], env=env)
        assert refused.exit_code != 0 and "query-flie" in refused.output
    assert json.loads((out / "collect.json").read_text())["status"] == "budget"
