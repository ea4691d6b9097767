"""``echo-bench collect reddit``: PRAW against a loopback server replaying real Reddit answers
(``../shared/data/api_recordings/reddit/extracted``), with scripted 429s, 5xx, HTML pages and cursor loops.

The search page is the recorded ``/r/all/search`` answer; the recordings hold one search page only, so the
``after`` chain behind it is the recorded 11-page ``after`` chain of a user listing (19 -> 29, ending with
``after: null``), a real Reddit ``Listing`` of comments and submissions.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import parse_qs, parse_qsl, urlsplit

import pytest
from click.testing import CliRunner

from echo_builder.cli import cli
from echo_builder.collect.core import CollectError, Collector, plan_jobs
from echo_builder.collect.reddit import RedditSearch
from echo_builder.sources import read_posts
from echo_builder.stages.query import load_keywords, parse_launch_date
from tests.helpers.replay_server import ReplayServer, Reply, html_page, rate_limited, server_error

pytestmark = pytest.mark.shared_data

SEARCH = "/r/all/search"
TOKEN = "/api/v1/access_token"
Q1 = '"gpt-4o"'
Q2 = '"openai"'
ENV = {
    "REDDIT_CLIENT_ID": "test-client-id",
    "REDDIT_CLIENT_SECRET": "test-client-secret-123",
    "REDDIT_USER_AGENT": "script:echo-bench-tests:v1 (by u/nobody)",
}


@pytest.fixture
def rec(shared_data: Path) -> Path:
    path = shared_data / "api_recordings" / "reddit" / "extracted"
    if not path.is_dir():
        pytest.skip("no Reddit recordings")
    return path


@dataclass
class _PrawcoreSleeps:
    retries: list[float] = field(default_factory=list)  # prawcore's retry backoff (sessions, random jitter)
    pacing: list[float] = field(default_factory=list)  # prawcore's rate-limit pacing (x-ratelimit-* headers)


@pytest.fixture(autouse=True)
def _no_prawcore_sleep(monkeypatch):
    """prawcore's own retry and pacing sleeps (time.sleep in its modules) are recorded, not slept, apart.

    The rate limiter sees a virtual clock that moves only when it paces, so its pacing depends on the headers
    served alone: not on how fast this machine runs the test, nor on the retries' random jitter.
    """
    import prawcore.rate_limit
    import prawcore.sessions

    slept = _PrawcoreSleeps()
    start_ns = time.monotonic_ns()

    def paced_ns() -> int:
        return start_ns + int(sum(slept.pacing) * 1e9)

    class _SessionTime:  # prawcore's view of the time module only: other threads keep the real clock and sleep
        monotonic = staticmethod(time.monotonic)
        monotonic_ns = staticmethod(time.monotonic_ns)
        sleep = staticmethod(slept.retries.append)

    class _RateLimitTime:
        monotonic = staticmethod(lambda: paced_ns() / 1e9)
        monotonic_ns = staticmethod(paced_ns)
        sleep = staticmethod(slept.pacing.append)

    monkeypatch.setattr(prawcore.sessions, "time", _SessionTime)
    monkeypatch.setattr(prawcore.rate_limit, "time", _RateLimitTime)
    return slept


def _after(value):
    def edit(body):
        body["data"]["after"] = value
        return body

    return edit


def _listing_chain(rec: Path) -> list[tuple[str | None, Reply]]:
    """(the ``after`` the request carries, the recorded reply) for the user-listing pages 20..29."""
    chain = []
    for n in range(20, 30):
        lines = (rec / f"{n}_user_listing.request.txt").read_text().splitlines()
        url = next(line for line in lines if line.startswith("GET "))
        after = parse_qs(urlsplit(url.split()[1]).query)["after"][0]
        chain.append((after, Reply.recorded(rec / f"{n}_user_listing")))
    return chain


def _scenario(server: ReplayServer, rec: Path, *, q1_first=(), q2_first=()) -> int:
    """Query 1: the recorded search page (its ``after`` set to the listing chain's first) + 10 chained pages;
    query 2: the recorded empty listing. Returns the number of posts served."""
    server.add("POST", TOKEN, [Reply.recorded(rec / "01_access_token")] * 3, grant_type="client_credentials")
    first = Reply.recorded(rec / "02_search", _after("t1_ct5snit"))
    server.add("GET", SEARCH, [*q1_first, first], q=Q1, after=None)
    total = len(json.loads(first.body)["data"]["children"])
    for after, reply in _listing_chain(rec):
        server.add("GET", SEARCH, [reply], q=Q1, after=after)
        total += len(json.loads(reply.body)["data"]["children"])
    server.add("GET", SEARCH, [*q2_first, Reply.recorded(rec / "30_user_listing")], q=Q2, after=None)
    return total


@pytest.fixture
def keywords(tmp_path: Path) -> Path:
    path = tmp_path / "keywords.txt"
    path.write_text("gpt-4o|14\nopenai\n", encoding="utf-8")
    return path


def _collector(server, keywords, out, *, launch="2005-06-23", sleep=None, **kw) -> Collector:
    platform = RedditSearch(
        ["all"],
        client_id=ENV["REDDIT_CLIENT_ID"],
        client_secret=ENV["REDDIT_CLIENT_SECRET"],
        user_agent=ENV["REDDIT_USER_AGENT"],
        base_url=server.url,
    )
    jobs, _ = plan_jobs(load_keywords(keywords), platform, launch=parse_launch_date(launch))
    return Collector(
        platform, jobs, out, sleep=sleep or (lambda s: None), clock=lambda: 1_700_000_000.0, **kw
    )


def _files(out: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(out)): p.read_bytes() for p in sorted((out / "posts").rglob("*")) if p.is_file()
    }


def test_collect_then_build(rec, keywords, tmp_path):
    out = tmp_path / "out"
    args = ["collect", "reddit", "--query-file", keywords, "--launch-date", "2005-06-23", "--out", out]
    with ReplayServer() as server:
        served = _scenario(server, rec)
        args += ["--base-url", server.url, "--no-progress"]
        result = CliRunner().invoke(cli, [str(a) for a in args], env=ENV)
        assert result.exit_code == 0, result.output
        assert server.misses == []
        searches = [r for r in server.requests if r.path == SEARCH]
        assert len(searches) == 12 and server.count(TOKEN) == 1
        assert searches[0].params["sort"] == "new" and searches[0].params["limit"] == "100"
        assert searches[0].headers["authorization"].lower().startswith("bearer ")
        assert searches[0].headers["user-agent"].startswith(ENV["REDDIT_USER_AGENT"])

        summary = json.loads((out / "collect.json").read_text())
        assert summary["status"] == "complete" and summary["posts"] == served
        assert [q["pages"] for q in summary["queries"]] == [11, 1]
        assert [q["posts"] for q in summary["queries"]] == [served, 0]
        assert sum(summary["per_day"].values()) == served
        for path in (out / "collect.json", out / ".collect" / "state.json"):
            assert ENV["REDDIT_CLIENT_SECRET"] not in path.read_text()

        before = _files(out)
        again = CliRunner().invoke(cli, [str(a) for a in args], env=ENV)
        assert again.exit_code == 0 and "(0 this run)" in again.output
        assert len(server.requests) == 13 and _files(out) == before

    report = read_posts(out / "posts")
    assert {f.format for f in report.files} == {"reddit"}
    assert len(report.posts) == served  # every submission and comment of every page
    build = tmp_path / "build"
    result = CliRunner().invoke(
        cli, ["build", str(out / "posts"), "--backend", "rules", "--offline", "--out", str(build)]
    )
    assert result.exit_code == 0, result.output
    stages = {s["name"]: s for s in json.loads((build / "report.json").read_text())["stages"]}
    assert stages["collect"]["out"] == served


def test_search_stops_at_the_window_start(rec, keywords, tmp_path):
    with ReplayServer() as server:
        _scenario(server, rec)
        # "gpt-4o" searches from 2016-03-10: the first page reaches 2013, older than that, so it is the last
        result = _collector(server, keywords, tmp_path / "out", launch="2016-03-10").run()
        assert server.count(SEARCH) == 2
    assert [q["pages"] for q in result.summary["queries"]] == [1, 1]


@pytest.mark.parametrize("kill_after", [1, 6])
def test_killed_run_resumes_byte_identical(rec, keywords, tmp_path, kill_after):
    straight = tmp_path / "straight"
    with ReplayServer() as server:
        _scenario(server, rec)
        _collector(server, keywords, straight).run()
    out = tmp_path / "killed"
    with ReplayServer() as server:
        _scenario(server, rec)
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
        assert server.count(SEARCH) == 12 and server.misses == []
    assert _files(out) == _files(straight)


def test_429_waits_for_x_ratelimit_reset(rec, keywords, tmp_path, _no_prawcore_sleep):
    slept: list[float] = []
    limit = rate_limited({"x-ratelimit-remaining": "0", "x-ratelimit-used": "600", "x-ratelimit-reset": "37"})
    with ReplayServer() as server:
        served = _scenario(server, rec, q2_first=[limit])
        result = _collector(server, keywords, tmp_path / "out", sleep=slept.append).run()
    assert slept == [38.0]
    # prawcore's own delay for the 429 was cleared: one wait, not two
    assert _no_prawcore_sleep.pacing == [] and _no_prawcore_sleep.retries == []
    assert result.summary["rate_limit_waits"]["count"] == 1 and result.summary["posts"] == served


def test_server_errors_are_retried_by_prawcore_then_by_the_collector(
    rec, keywords, tmp_path, _no_prawcore_sleep
):
    slept: list[float] = []
    with ReplayServer() as server:
        served = _scenario(server, rec, q2_first=[server_error(503)] * 3)
        result = _collector(server, keywords, tmp_path / "out", sleep=slept.append).run()
        assert server.count(SEARCH) == 12 + 3
    assert len(_no_prawcore_sleep.retries) == 2  # prawcore retried twice
    assert slept == [1.0] and result.summary["retries"] == 1 and result.summary["posts"] == served


def test_html_page_is_a_clear_error_after_retries(rec, keywords, tmp_path):
    with ReplayServer() as server:
        _scenario(server, rec, q2_first=[html_page(200, "reddit.com: over capacity")] * 4)
        with pytest.raises(
            CollectError, match=r"failed 4 times.*HTML page, not JSON \('reddit.com: over capacity'\)"
        ):
            _collector(server, keywords, tmp_path / "out").run()
    summary = json.loads((tmp_path / "out" / "collect.json").read_text())
    assert summary["status"] == "stopped" and summary["queries"][0]["status"] == "done"


def test_forbidden_subreddit_and_refused_credentials(rec, keywords, tmp_path):
    banned = Reply.json({"reason": "banned", "message": "Forbidden", "error": 403}, 403)
    with ReplayServer() as server:
        _scenario(server, rec, q1_first=[banned])
        with pytest.raises(CollectError, match=r"403 Forbidden: Forbidden; banned"):
            _collector(server, keywords, tmp_path / "a").run()
    with ReplayServer() as server:
        server.add("POST", TOKEN, [Reply.json({"error": "invalid_grant"}, 401)])
        with pytest.raises(CollectError, match="Reddit refused the credentials"):
            _collector(server, keywords, tmp_path / "b").run()


def test_endless_after(rec, keywords, tmp_path):
    with ReplayServer() as server:
        server.add("POST", TOKEN, [Reply.recorded(rec / "01_access_token")])
        looping = Reply.recorded(rec / "02_search", _after("t3_loop"))
        server.add("GET", SEARCH, [looping] * 3, q=Q1)
        server.add("GET", SEARCH, [Reply.recorded(rec / "30_user_listing")], q=Q2)
        result = _collector(server, keywords, tmp_path / "out").run()
    assert "endless cursor" in result.errors[0] and "'t3_loop'" in result.errors[0]
    assert [q["status"] for q in result.summary["queries"]] == ["error", "done"]


EMPTY_MORE = Reply.json({"json": {"errors": [], "data": {"things": []}}})
EMPTY_THREAD = Reply.json([{"kind": "Listing", "data": {"children": []}}] * 2)


def _comments_scenario(server: ReplayServer, rec: Path) -> None:
    """A search page holding the two submissions whose comment trees were recorded (03: 2gmzqe, a small tree;
    04: 3hahrw, 495 things with 12 morechildren stubs and 6 "continue this thread" stubs). The 5 recorded
    morechildren answers (05-09) and the recorded continuation (10) are served for the stubs they were recorded
    for; the stubs nobody recorded get an empty answer."""
    small = json.loads((rec / "03_comments_2gmzqe.response.json").read_text())
    large = json.loads((rec / "04_comments_3hahrw.response.json").read_text())
    page = {
        "kind": "Listing",
        "data": {
            "after": None,
            "children": [small[0]["data"]["children"][0], large[0]["data"]["children"][0]],
        },
    }
    server.add("POST", TOKEN, [Reply.recorded(rec / "01_access_token")] * 3)
    server.add("GET", SEARCH, [Reply.json(page)], q=Q1)
    server.add("GET", "/comments/2gmzqe", [Reply.recorded(rec / "03_comments_2gmzqe")])
    server.add("GET", "/comments/3hahrw", [Reply.recorded(rec / "04_comments_3hahrw")])
    for n in range(5, 10):
        form = (rec / f"{n:02d}_morechildren.request.txt").read_text().strip().splitlines()[-1]
        fields = dict(parse_qsl(form))
        server.add(
            "POST",
            "/api/morechildren",
            [Reply.recorded(rec / f"{n:02d}_morechildren")],
            children=fields["children"],
            link_id="t3_3hahrw",
        )
    server.add("POST", "/api/morechildren", [EMPTY_MORE] * 7, link_id="t3_3hahrw")
    server.add("GET", "/comments/3hahrw/_/cu5v5h7", [Reply.recorded(rec / "10_comments_3hahrw_cu5v5h7")])
    for parent in ("cu61zil", "cu5uyz1", "cu5x40j", "cu5w5nv", "cu61tk1"):
        server.add("GET", f"/comments/3hahrw/_/{parent}", [EMPTY_THREAD])


def _comment_ids(rec: Path, names: list[str]) -> set[str]:
    ids: set[str] = set()

    def walk(node):
        if isinstance(node, list):
            for item in node:
                walk(item)
        elif isinstance(node, dict):
            if node.get("kind") == "t1":
                ids.add(f"reddit:t1_{node['data']['id']}")
            for value in node.values():
                walk(value)

    for name in names:
        walk(json.loads((rec / f"{name}.response.json").read_text()))
    return ids


def _comments_collector(server, tmp_path, out, **kw) -> Collector:
    keywords = tmp_path / "one.txt"
    keywords.write_text("gpt-4o\n", encoding="utf-8")
    platform = RedditSearch(
        ["all"],
        client_id=ENV["REDDIT_CLIENT_ID"],
        client_secret=ENV["REDDIT_CLIENT_SECRET"],
        user_agent=ENV["REDDIT_USER_AGENT"],
        base_url=server.url,
        comments=True,
    )
    jobs, _ = plan_jobs(load_keywords(keywords), platform, launch=None)
    return Collector(platform, jobs, out, sleep=lambda s: None, **kw)


def test_comment_trees_with_morechildren_and_continue_thread(rec, tmp_path):
    out = tmp_path / "out"
    with ReplayServer() as server:
        _comments_scenario(server, rec)
        result = _comments_collector(server, tmp_path, out).run()
        assert server.misses == []
        assert server.count("/api/morechildren") == 12
        assert sum(r.path.startswith("/comments/3hahrw/_/") for r in server.requests) == 6
        assert server.count(SEARCH) == 1 and len(server.requests) == 1 + 1 + 2 + 12 + 6
    assert [q["key"] for q in result.summary["queries"]] == [
        "01-gpt-4o",
        "comments-2gmzqe",
        "comments-3hahrw",
    ]
    assert [q["pages"] for q in result.summary["queries"]] == [1, 1, 19]
    assert result.summary["status"] == "complete"

    report = read_posts(out / "posts")
    got = {p.id: p for p in report.posts}
    recorded = ["03_comments_2gmzqe", "04_comments_3hahrw", *(f"{n:02d}_morechildren" for n in range(5, 10))]
    expected = _comment_ids(rec, [*recorded, "10_comments_3hahrw_cu5v5h7"])
    assert expected <= set(got)
    expanded = got["reddit:t1_cu5pg2h"]  # a comment only the morechildren answer 05 holds
    assert expanded.reply_to_id == "reddit:t1_cu5p1hh" and expanded.root_id == "reddit:t3_3hahrw"
    assert "reddit:t1_cu5pg2h" not in _comment_ids(rec, ["04_comments_3hahrw"])


@pytest.mark.parametrize("kill_after", [3, 10])
def test_comment_trees_resume_byte_identical(rec, tmp_path, kill_after):
    straight = tmp_path / "straight"
    with ReplayServer() as server:
        _comments_scenario(server, rec)
        _comments_collector(server, tmp_path, straight).run()
    out = tmp_path / "killed"
    with ReplayServer() as server:
        _comments_scenario(server, rec)
        collector = _comments_collector(server, tmp_path, out)
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
        _comments_collector(server, tmp_path, out).run()
        assert server.misses == [] and server.count("/api/morechildren") == 12
    assert _files(out) == _files(straight)
