"""``echo-bench collect x``: tweepy against a loopback server replaying real X API v2 recordings
(``../shared/data/api_recordings/x_api_v2``), with scripted 429s, 5xx, HTML pages, truncated JSON and cursor loops.

Pages are chained by the test (the recordings hold no multi-page search chain): page 1 of a query is a recorded
search answer whose ``meta.next_token`` is kept or set, page 2 another recorded answer whose token is removed.
"""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
from click.testing import CliRunner

from echo_builder.cli import cli
from echo_builder.collect.core import CollectError, Collector, plan_jobs
from echo_builder.collect.x import XSearch
from echo_builder.sources import read_posts
from echo_builder.stages.query import load_keywords, parse_launch_date
from tests.helpers.replay_server import (
    ReplayServer,
    Reply,
    html_page,
    rate_limited,
    server_error,
    truncated,
)

pytestmark = pytest.mark.shared_data

SEARCH = "/2/tweets/search/all"
RECENT = "/2/tweets/search/recent"  # the CLI tests: no 1 request/s pause of full-archive search
Q1 = '"gpt-4o" -is:retweet'
Q2 = '"openai" -is:retweet'
TOKEN = "test-bearer-token-123456"
NOW = 1_700_000_000.0  # the fake clock of the collector tests: after the recorded windows (2021)


@pytest.fixture
def rec(shared_data: Path) -> Path:
    path = shared_data / "api_recordings" / "x_api_v2"
    if not path.is_dir():
        pytest.skip("no X API recordings")
    return path


def _with_token(token: str | None):
    def edit(body):
        meta = body.setdefault("meta", {})
        meta.pop("next_token", None)
        if token:
            meta["next_token"] = token
        return body

    return edit


def _pages(rec: Path) -> dict[str, Reply]:
    a = rec / "academictwitteR" / "extracted"
    t = rec / "tweepy" / "extracted"
    w = rec / "twarc-csv" / "extracted"
    return {
        "q1p1": Reply.recorded(a / "03_tweets_search_all", _with_token("tok-q1-2")),
        "q1p2": Reply.recorded(a / "04_tweets_search_all", _with_token(None)),
        "q2p1": Reply.recorded(t / "02_tweets_search_all"),  # its own recorded next_token
        "q2p2": Reply.recorded(w / "05_tweets_search_all"),  # no next_token: the end
    }


Q2_TOKEN = "b26v89c19zqg8o3fpzbn1e0fn1zaav0xt6cy473glm83h"
EXPECTED_POSTS = 206 + 27 + 10 + 1


def _scenario(
    server: ReplayServer,
    rec: Path,
    *,
    q1_first: list[Reply] = (),
    q2_first: list[Reply] = (),
    path: str = SEARCH,
) -> None:
    pages = _pages(rec)
    server.add("GET", path, [*q1_first, pages["q1p1"]], query=Q1, next_token=None)
    server.add("GET", path, [pages["q1p2"]], query=Q1, next_token="tok-q1-2")
    server.add("GET", path, [*q2_first, pages["q2p1"]], query=Q2, next_token=None)
    server.add("GET", path, [pages["q2p2"]], query=Q2, next_token=Q2_TOKEN)


@pytest.fixture
def keywords(tmp_path: Path) -> Path:
    path = tmp_path / "keywords.txt"
    path.write_text("gpt-4o|14\nopenai\n", encoding="utf-8")
    return path


def _collector(server, keywords, out, *, sleep=None, clock=None, **kw) -> Collector:
    platform = XSearch(TOKEN, archive=True, base_url=server.url)
    platform.min_interval_s = 0.0
    jobs, _ = plan_jobs(load_keywords(keywords), platform, launch=parse_launch_date("2021-06-01"))
    return Collector(platform, jobs, out, sleep=sleep or (lambda s: None), clock=clock or (lambda: NOW), **kw)


def _files(out: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(out)): p.read_bytes()
        for p in sorted(out.rglob("*"))
        if p.is_file() and ".collect" not in p.parts
    }


def _cli(args, env=None):
    return CliRunner().invoke(cli, [str(a) for a in args], env={"X_BEARER_TOKEN": TOKEN, **(env or {})})


def test_collect_then_build_reads_every_post(rec, keywords, tmp_path):
    out = tmp_path / "out"
    with ReplayServer() as server:
        _scenario(server, rec, path=RECENT)
        # recent search covers 7 days: a launch 3 days ago, whose 14-day window is still open
        launch = (datetime.now(timezone.utc) - timedelta(days=3)).date()
        args = ["collect", "x", "--query-file", keywords, "--launch-date", launch.isoformat()]
        args += ["--out", out, "--base-url", server.url, "--no-progress"]
        started = datetime.now(timezone.utc)
        result = _cli(args)
        assert result.exit_code == 0, result.output
        assert server.misses == []
        assert len(server.requests) == 4
        first = server.requests[0]
        assert first.headers["authorization"] == f"Bearer {TOKEN}"
        assert first.params["start_time"].startswith(f"{launch.isoformat()}T00:00:00")
        end = datetime.fromisoformat(first.params["end_time"].replace("Z", "+00:00"))
        assert timedelta(seconds=25) < started - end < timedelta(seconds=60)  # X refuses an end in the future
        assert "attachments.media_keys" in first.params["expansions"].split(",")
        assert "start_time" not in server.requests[2].params  # "openai" has no window
        assert first.params["max_results"] == "100"

        summary = json.loads((out / "collect.json").read_text())
        assert summary["status"] == "complete"
        assert summary["posts"] == EXPECTED_POSTS
        assert summary["requests"] == 4
        assert [q["posts"] for q in summary["queries"]] == [233, 11]
        assert [q["pages"] for q in summary["queries"]] == [2, 2]
        assert sum(summary["per_day"].values()) == EXPECTED_POSTS
        assert summary["queries"][0]["window"] == {
            "since": f"{launch.isoformat()}T00:00:00Z",
            "until": f"{(launch + timedelta(days=14)).isoformat()}T00:00:00Z",
        }
        assert summary["queries"][0]["searched"]["until"] == first.params["end_time"][:19] + "Z"
        assert TOKEN not in (out / "collect.json").read_text()
        assert TOKEN not in (out / ".collect" / "state.json").read_text()

        # the pages are the recorded bodies, one per line
        lines = (out / "posts" / "01-gpt-4o.jsonl").read_text().splitlines()
        assert len(lines) == 2
        assert json.loads(lines[1]) == json.loads(_pages(rec)["q1p2"].body)

        # a second run makes no request and changes nothing
        before = _files(out)
        again = _cli(args)
        assert again.exit_code == 0, again.output
        assert "(0 this run)" in again.output
        assert len(server.requests) == 4
        assert _files(out) == before

    report = read_posts(out / "posts")
    data_ids = set()
    for reply in _pages(rec).values():
        data_ids |= {f"x:{t['id']}" for t in json.loads(reply.body).get("data", [])}
    got = {p.id for p in report.posts}
    assert data_ids - got <= {i for i in data_ids if i not in got and _is_retweet(rec, i)}
    assert len(got & data_ids) > 200

    build = tmp_path / "build"
    result = _cli(["build", out / "posts", "--backend", "rules", "--offline", "--out", build])
    assert result.exit_code == 0, result.output
    stages = {s["name"]: s for s in json.loads((build / "report.json").read_text())["stages"]}
    assert stages["collect"]["out"] == len(report.posts)


def _is_retweet(rec: Path, post_id: str) -> bool:
    for reply in _pages(rec).values():
        for tweet in json.loads(reply.body).get("data", []):
            if f"x:{tweet['id']}" == post_id:
                return any(r.get("type") == "retweeted" for r in tweet.get("referenced_tweets", []))
    return False


@pytest.mark.parametrize("kill_after", [1, 2, 3])
def test_killed_run_resumes_byte_identical_without_rereading(rec, keywords, tmp_path, kill_after):
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
                raise KeyboardInterrupt  # the process is killed before the next request goes out
            calls.append(args)
            return real(*args)

        collector.platform.fetch = dying
        with pytest.raises(KeyboardInterrupt):
            collector.run()
        assert len(server.requests) == kill_after
        result = _collector(server, keywords, out).run()
        assert result.requests_this_run == 4 - kill_after
        assert len(server.requests) == 4  # no page was asked twice
        assert server.misses == []
    assert _files(out) == _files(straight)


def test_kill_between_receiving_and_appending_a_page(rec, keywords, tmp_path, monkeypatch):
    straight = tmp_path / "straight"
    with ReplayServer() as server:
        _scenario(server, rec)
        _collector(server, keywords, straight).run()
    out = tmp_path / "killed"
    with ReplayServer() as server:
        _scenario(server, rec)
        collector = _collector(server, keywords, out)
        real_append = Collector._append
        count = []

        def append_then_die(self, job, js, line):
            count.append(1)
            if len(count) == 2:  # half a line reaches the file, then the process dies
                with open(self._output(job), "ab") as handle:
                    handle.write(line[: len(line) // 2].encode())
                raise KeyboardInterrupt
            real_append(self, job, js, line)

        monkeypatch.setattr(Collector, "_append", append_then_die)
        with pytest.raises(KeyboardInterrupt):
            collector.run()
        monkeypatch.setattr(Collector, "_append", real_append)
        assert len(server.requests) == 2
        _collector(server, keywords, out).run()
        assert len(server.requests) == 4  # the received page came from the checkpoint, not from X again
    assert _files(out) == _files(straight)


def test_429_waits_until_the_reset_time_then_retries(rec, keywords, tmp_path):
    now = NOW
    slept: list[float] = []
    with ReplayServer() as server:
        limit = rate_limited({"x-rate-limit-remaining": "0", "x-rate-limit-reset": str(int(now) + 30)})
        _scenario(server, rec, q2_first=[limit])
        result = _collector(server, keywords, tmp_path / "out", sleep=slept.append, clock=lambda: now).run()
        assert len(server.requests) == 5
    assert slept == [31.0]
    assert result.summary["rate_limit_waits"] == {"count": 1, "seconds": 31.0}
    assert result.summary["posts"] == EXPECTED_POSTS


def test_page_with_no_request_left_waits_before_the_next(rec, keywords, tmp_path):
    now = NOW
    slept: list[float] = []

    def exhausted(body):
        return _with_token("tok-q1-2")(body)

    with ReplayServer() as server:
        page = Reply.recorded(rec / "academictwitteR" / "extracted" / "03_tweets_search_all", exhausted)
        page.headers.update({"x-rate-limit-remaining": "0", "x-rate-limit-reset": str(int(now) + 100)})
        pages = _pages(rec)
        server.add("GET", SEARCH, [page], query=Q1, next_token=None)
        server.add("GET", SEARCH, [pages["q1p2"]], query=Q1, next_token="tok-q1-2")
        server.add("GET", SEARCH, [pages["q2p1"]], query=Q2, next_token=None)
        server.add("GET", SEARCH, [pages["q2p2"]], query=Q2, next_token=Q2_TOKEN)
        _collector(server, keywords, tmp_path / "out", sleep=slept.append, clock=lambda: now).run()
        assert server.misses == [] and all(r.status == 200 for r in server.requests)
    assert slept == [101.0]  # waited instead of drawing a 429


def test_429_storm_stops_with_a_message_and_keeps_what_was_collected(rec, keywords, tmp_path):
    now = NOW
    out = tmp_path / "out"
    storm = [rate_limited({"x-rate-limit-reset": str(int(now) + 5)}) for _ in range(6)]
    with ReplayServer() as server:
        _scenario(server, rec, q2_first=storm)
        with pytest.raises(CollectError, match=r"6 times in a row.*rate limit"):
            _collector(server, keywords, out, clock=lambda: now).run()
    summary = json.loads((out / "collect.json").read_text())
    assert summary["status"] == "stopped" and "in a row" in summary["error"]
    assert summary["queries"][0]["status"] == "done" and summary["queries"][0]["posts"] == 233
    assert len((out / "posts" / "01-gpt-4o.jsonl").read_text().splitlines()) == 2


def test_wait_past_max_wait_stops_and_a_later_run_continues(rec, keywords, tmp_path):
    now = NOW
    out = tmp_path / "out"
    with ReplayServer() as server:
        far = rate_limited({"x-rate-limit-reset": str(int(now) + 3600)})
        _scenario(server, rec, q2_first=[far])
        with pytest.raises(
            CollectError, match=r"allowed at .* UTC \(in 3601 s\), past what --max-wait 900 s leaves"
        ):
            _collector(server, keywords, out, clock=lambda: now).run()
        result = _collector(server, keywords, out, clock=lambda: now).run()
        assert result.summary["status"] == "complete" and result.summary["posts"] == EXPECTED_POSTS
        assert server.count(SEARCH) == 5


@pytest.mark.parametrize(
    "fault",
    [server_error(503), server_error(500), html_page(200, "Over capacity"), "truncated"],
    ids=["503", "500", "html", "truncated"],
)
def test_transient_faults_are_retried(rec, keywords, tmp_path, fault):
    slept: list[float] = []
    if fault == "truncated":
        fault = truncated(_pages(rec)["q2p1"])
    with ReplayServer() as server:
        _scenario(server, rec, q2_first=[fault, fault])
        result = _collector(server, keywords, tmp_path / "out", sleep=slept.append).run()
    assert slept == [1.0, 2.0]
    assert result.summary["retries"] == 2 and result.summary["posts"] == EXPECTED_POSTS


@pytest.mark.parametrize(
    ("fault", "message"),
    [
        (html_page(200, "Over capacity"), "HTML page, not JSON ('Over capacity')"),
        ("truncated", "malformed JSON"),
    ],
)
def test_persistent_bad_answers_stop_with_a_clear_message(rec, keywords, tmp_path, fault, message):
    if fault == "truncated":
        fault = truncated(_pages(rec)["q2p1"])
    out = tmp_path / "out"
    with ReplayServer() as server:
        _scenario(server, rec, q2_first=[fault] * 4)
        with pytest.raises(CollectError, match="failed 4 times") as info:
            _collector(server, keywords, out).run()
    assert message in str(info.value)
    assert json.loads((out / "collect.json").read_text())["queries"][0]["posts"] == 233


def test_recorded_401_is_a_clear_error(rec, keywords, tmp_path):
    out = tmp_path / "out"
    unauthorized = Reply.recorded(rec / "academictwitteR" / "extracted" / "07_tweets_search_all")
    with ReplayServer() as server:
        _scenario(server, rec, q2_first=[unauthorized], path=RECENT)
        launch = (datetime.now(timezone.utc) - timedelta(days=3)).date().isoformat()
        args = ["collect", "x", "--query-file", keywords, "--launch-date", launch, "--out", out]
        result = _cli([*args, "--base-url", server.url, "--no-progress"])
    assert result.exit_code == 1
    assert "error: X refused the bearer token (401 Unauthorized" in result.output
    assert "X_BEARER_TOKEN" in result.output and "Traceback" not in result.output
    assert len((out / "posts" / "01-gpt-4o.jsonl").read_text().splitlines()) == 2


def test_403_suspended_and_recorded_400(rec, keywords, tmp_path):
    suspended = Reply.json(
        {"title": "Forbidden", "detail": "This account is suspended.", "type": "about:blank", "status": 403},
        403,
    )
    with ReplayServer() as server:
        _scenario(server, rec, q1_first=[suspended])
        with pytest.raises(CollectError, match="403 Forbidden: Forbidden; This account is suspended"):
            _collector(server, keywords, tmp_path / "a").run()
    bad = Reply.recorded(rec / "academictwitteR" / "extracted" / "06_tweets_search_all")
    with ReplayServer() as server:
        _scenario(server, rec, q1_first=[bad])
        with pytest.raises(CollectError, match=r"rejected the query .*400 Bad Request: .*end_time"):
            _collector(server, keywords, tmp_path / "b").run()


def test_endless_cursor_ends_that_query_and_the_others_go_on(rec, keywords, tmp_path):
    pages = _pages(rec)
    loop = Reply.recorded(rec / "academictwitteR" / "extracted" / "04_tweets_search_all", _with_token("same"))
    out = tmp_path / "out"
    with ReplayServer() as server:
        server.add("GET", SEARCH, [pages["q1p1"]], query=Q1, next_token=None)
        server.add("GET", SEARCH, [loop, loop, loop], query=Q1, next_token="tok-q1-2")
        server.add("GET", SEARCH, [loop, loop, loop], query=Q1, next_token="same")
        server.add("GET", SEARCH, [pages["q2p1"]], query=Q2, next_token=None)
        server.add("GET", SEARCH, [pages["q2p2"]], query=Q2, next_token=Q2_TOKEN)
        result = _collector(server, keywords, out).run()
        assert server.count(SEARCH) == 5  # q1: first page, 'same', 'same' again -> stop; q2: 2 pages
    assert result.errors and "endless cursor" in result.errors[0] and "'same'" in result.errors[0]
    assert result.summary["status"] == "errors"
    assert [q["status"] for q in result.summary["queries"]] == ["error", "done"]


def test_budget_of_posts_sets_page_size_and_a_larger_budget_continues(rec, keywords, tmp_path):
    out = tmp_path / "out"
    with ReplayServer() as server:
        _scenario(server, rec)
        first = _collector(server, keywords, out, max_posts=10).run()
        assert first.budget_reached and server.requests[0].params["max_results"] == "10"
        assert len(server.requests) == 1  # 206 posts read: over budget, no more requests
        again = _collector(server, keywords, out, max_posts=10).run()
        assert again.requests_this_run == 0
        rest = _collector(server, keywords, out, max_requests=100).run()
        assert rest.requests_this_run == 3 and rest.summary["posts"] == EXPECTED_POSTS


def test_missing_token_names_the_variable(keywords, tmp_path, monkeypatch):
    monkeypatch.delenv("X_BEARER_TOKEN", raising=False)
    result = CliRunner().invoke(
        cli,
        [
            "collect",
            "x",
            "--query-file",
            str(keywords),
            "--launch-date",
            "2021-06-01",
            "--archive",
            "--out",
            str(tmp_path / "out"),
        ],
    )
    assert result.exit_code == 1
    assert "set the environment variable X_BEARER_TOKEN" in result.output
    assert not (tmp_path / "out").exists()  # nothing collected: no empty folder left behind
    kept = tmp_path / "kept"
    kept.mkdir()
    (kept / "mine.txt").write_text("x")
    again = CliRunner().invoke(
        cli,
        [
            "collect",
            "x",
            "--query-file",
            str(keywords),
            "--launch-date",
            "2021-06-01",
            "--archive",
            "--out",
            str(kept),
        ],
    )
    assert again.exit_code != 0 and (kept / "mine.txt").read_text() == "x"  # a folder it did not make is kept


def test_recent_search_refuses_windows_older_than_7_days(keywords, tmp_path):
    platform = XSearch(TOKEN)
    jobs, _ = plan_jobs(load_keywords(keywords), platform, launch=parse_launch_date("2021-06-01"))
    with pytest.raises(CollectError, match=r"recent search covers the last 7 days only; use --archive"):
        Collector(platform, jobs, tmp_path / "out", clock=lambda: NOW).run()
    summary = json.loads((tmp_path / "out" / "collect.json").read_text())
    assert summary["status"] == "stopped" and summary["requests"] == 0


def test_a_changed_query_file_is_refused_not_mixed(rec, keywords, tmp_path):
    out = tmp_path / "out"
    with ReplayServer() as server:
        _scenario(server, rec)
        _collector(server, keywords, out, max_requests=1).run()
    keywords.write_text("gpt-4o|7\nopenai\n", encoding="utf-8")
    with ReplayServer() as server, pytest.raises(CollectError, match=r"collect into a new --out folder"):
        _collector(server, keywords, out).run()


def test_lookup_with_expansions_reads_media_and_partial_errors(rec, tmp_path):
    video = Reply.recorded(rec / "twarc-csv" / "extracted" / "02_tweets_lookup")
    partial = Reply.recorded(rec / "academictwitteR" / "extracted" / "12_tweets_lookup")
    with ReplayServer() as server:
        server.add("GET", "/2/tweets", [video], ids="1558553189766631429")
        ids = "1,2,3,4,5,6,7,8,9,1266857669157097473,1266856357954756609,1266855807699861506,"
        ids += "1266855344086663169,1266854627758276608,1266854586188476421"
        server.add("GET", "/2/tweets", [partial], ids=ids)
        platform = XSearch(TOKEN, base_url=server.url)
        body = platform.lookup(["1558553189766631429"])
        asked = server.requests[0].params
        assert set(asked["expansions"].split(",")) >= {
            "attachments.media_keys",
            "referenced_tweets.id",
            "author_id",
        }
        assert "variants" in asked["media.fields"].split(",")
        errors = platform.lookup(ids.split(","))
        assert server.misses == []
        with pytest.raises(CollectError, match="1 to 100 ids"):
            platform.lookup([str(i) for i in range(101)])
    (tmp_path / "a.jsonl").write_text(json.dumps(body) + "\n" + json.dumps(errors) + "\n")
    report = read_posts(tmp_path)
    media = [m for p in report.posts for m in p.media if m.type == "video"]
    assert media and media[0].url.startswith("https://pbs.twimg.com/ext_tw_video_thumb/")
    assert any("Could not find tweet with ids: [1]" in p.reason for p in report.problems)


def test_a_missing_client_library_names_the_extra(keywords, tmp_path, monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "tweepy", None)  # import tweepy raises ImportError
    args = [
        "collect",
        "x",
        "--query-file",
        keywords,
        "--launch-date",
        "2021-06-01",
        "--archive",
        "--out",
        tmp_path / "out",
    ]
    result = _cli(args)
    assert result.exit_code == 1
    assert "needs the optional package 'tweepy'" in result.output
    assert 'pip install -e ".[collect]"' in result.output and "Traceback" not in result.output


@pytest.mark.parametrize("page", [1, 3])
def test_kill_after_appending_before_the_checkpoint(rec, keywords, tmp_path, monkeypatch, page):
    straight = tmp_path / "straight"
    with ReplayServer() as server:
        _scenario(server, rec)
        _collector(server, keywords, straight).run()
    out = tmp_path / "killed"
    real_append, real_save = Collector._append, Collector._save_state
    appended: list[int] = []

    def append(self, job, js, line):
        real_append(self, job, js, line)
        appended.append(1)

    def save(self, state):
        if (
            len(appended) == page and state["pending"] is None
        ):  # the page is in the file, not yet checkpointed
            appended.append(1)
            raise KeyboardInterrupt
        real_save(self, state)

    with ReplayServer() as server:
        _scenario(server, rec)
        monkeypatch.setattr(Collector, "_append", append)
        monkeypatch.setattr(Collector, "_save_state", save)
        with pytest.raises(KeyboardInterrupt):
            _collector(server, keywords, out).run()
        monkeypatch.setattr(Collector, "_append", real_append)
        monkeypatch.setattr(Collector, "_save_state", real_save)
        assert len(server.requests) == page
        _collector(server, keywords, out).run()
        assert len(server.requests) == 4  # the page was appended once, from the checkpoint
    assert _files(out) == _files(straight)


def test_a_folder_that_is_no_collection_is_refused(keywords, tmp_path):
    (tmp_path / "notes.txt").write_text("mine")
    platform = XSearch(TOKEN, archive=True)
    jobs, _ = plan_jobs(load_keywords(keywords), platform, launch=parse_launch_date("2021-06-01"))
    with pytest.raises(CollectError, match="is not empty and holds no collection"):
        Collector(platform, jobs, tmp_path).run()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["keywords.txt", "notes.txt"]


def test_a_conversation_is_collected_like_a_search(rec, tmp_path):
    from echo_builder.collect.x import conversation_job

    replies = Reply.recorded(
        rec / "academictwitteR" / "extracted" / "03_tweets_search_all", _with_token(None)
    )
    with ReplayServer() as server:
        server.add("GET", SEARCH, [replies], query="conversation_id:1400135988567973890")
        platform = XSearch(TOKEN, archive=True, base_url=server.url)
        platform.min_interval_s = 0.0
        job = conversation_job("1400135988567973890")
        result = Collector(platform, [job], tmp_path / "out", clock=lambda: NOW).run()
        assert server.misses == [] and result.summary["posts"] == 206
    assert (tmp_path / "out" / "posts" / "conversation-1400135988567973890.jsonl").exists()
    with pytest.raises(CollectError, match="conversation id is a number"):
        conversation_job("x:123")
