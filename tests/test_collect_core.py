"""The platform-neutral collector: query windows from the keyword file, body decoding, checkpoint checks.

A scripted platform stands in for the API clients here (their replays are in ``test_collect_{x,bluesky,reddit}``).
"""

from __future__ import annotations

import json
from datetime import datetime, timezone
from pathlib import Path

import pytest

from echo_builder.collect.core import (
    BadResponse,
    CollectError,
    Collector,
    Job,
    Page,
    Window,
    decode_json,
    parse_bound,
    plan_jobs,
)
from echo_builder.errors import ConfigError
from echo_builder.stages.query import Keyword, load_keywords

LAUNCH = datetime(2025, 3, 25, tzinfo=timezone.utc)


class Scripted:
    """Pages by cursor: ``pages[(query, cursor)] = (body, next_cursor)``."""

    name = "scripted"
    max_page_size = 50
    min_page_size = 1
    min_interval_s = 0.0
    auth_requests = 0

    def __init__(self, pages):
        self.pages = pages
        self.asked: list[tuple[str, str | None, int]] = []

    def query_for(self, term: str) -> str:
        return f"<{term}>"

    def fetch(self, job: Job, cursor: str | None, page_size: int) -> Page:
        self.asked.append((job.query, cursor, page_size))
        body, nxt = self.pages[(job.query, cursor)]
        return Page(body, nxt, [LAUNCH] * len(body["items"]))


def _utc(text: str) -> datetime:
    return parse_bound(text, "test")


def test_windows_follow_the_keyword_file_and_since_until(tmp_path: Path):
    path = tmp_path / "k.json"
    path.write_text(
        json.dumps(
            [
                {"term": "gpt-4o", "window_days": 14, "before_days": 2},
                {"term": "openai"},
                {"term": "sora", "window_days": 3},
                {
                    "term": "GPT-4o",
                    "window_days": 14,
                    "before_days": 2,
                },  # same query once the platform says so
            ]
        )
    )
    platform = Scripted({})
    platform.query_for = lambda term: term.lower()
    jobs, notes = plan_jobs(
        load_keywords(path), platform, launch=LAUNCH, since=_utc("2025-03-24"), until=_utc("2025-04-30")
    )
    assert [(j.key, j.query) for j in jobs] == [
        ("01-gpt-4o", "gpt-4o"),
        ("02-openai", "openai"),
        ("03-sora", "sora"),
    ]
    assert jobs[0].window == Window(_utc("2025-03-24"), _utc("2025-04-08"))  # launch - 2 d cut to --since
    assert jobs[1].window == Window(_utc("2025-03-24"), _utc("2025-04-30"))  # no window: --since..--until
    assert jobs[2].window == Window(LAUNCH, _utc("2025-03-28"))
    assert notes == []

    jobs, notes = plan_jobs([Keyword("sora", 3)], platform, launch=LAUNCH, since=_utc("2025-04-01"))
    assert jobs == [] and "do not overlap" in notes[0]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"launch": None}, "need the target model's launch date"),
        (
            {"launch": LAUNCH, "since": _utc("2025-04-02"), "until": _utc("2025-04-01")},
            "is not before --until",
        ),
    ],
)
def test_bad_windows_are_refused(kwargs, message):
    with pytest.raises(ConfigError, match=message):
        plan_jobs([Keyword("sora", 3)], Scripted({}), **kwargs)


def test_parse_bound_and_decode_json():
    assert parse_bound("2025-03-25", "--since") == LAUNCH
    assert parse_bound("2025-03-25T12:00:00+02:00", "--since").hour == 12
    with pytest.raises(ConfigError, match="--until must be YYYY-MM-DD"):
        parse_bound("next week", "--until")
    assert decode_json(b'{"a": 1}', "application/json", "X") == {"a": 1}
    with pytest.raises(BadResponse, match=r"X answered with an HTML page, not JSON \('Rate Limited'\)"):
        decode_json(b"<html><head><title>Rate\n Limited</title></head></html>", "text/html", "X")
    with pytest.raises(BadResponse, match=r"malformed JSON .*char 11.*12 bytes, possibly truncated"):
        decode_json(b'{"data": [{"', "application/json", "X")


def _one_job() -> list[Job]:
    return [Job("01-a", "a", "<a>", Window())]


def test_pages_budget_and_summary(tmp_path: Path):
    pages = {
        ("<a>", None): ({"items": [1, 2, 3]}, "c1"),
        ("<a>", "c1"): ({"items": [4, 5]}, "c2"),
        ("<a>", "c2"): ({"items": [6]}, None),
    }
    platform = Scripted(pages)
    result = Collector(platform, _one_job(), tmp_path / "out", max_posts=4).run()
    assert platform.asked == [("<a>", None, 4), ("<a>", "c1", 1)]  # pages no larger than what is left
    assert result.budget_reached and result.summary["status"] == "budget" and result.summary["posts"] == 5
    assert result.summary["per_day"] == {"2025-03-25": 5}
    lines = (tmp_path / "out" / "posts" / "01-a.jsonl").read_text().splitlines()
    assert [json.loads(line) for line in lines] == [{"items": [1, 2, 3]}, {"items": [4, 5]}]
    assert result.summary["queries"][0]["status"] == "incomplete"
    more = Collector(platform, _one_job(), tmp_path / "out", max_posts=10).run()
    assert platform.asked[-1] == ("<a>", "c2", 5) and more.requests_this_run == 1
    assert more.summary["status"] == "complete" and more.summary["queries"][0]["status"] == "done"


def test_a_corrupt_or_foreign_checkpoint_is_a_clear_error(tmp_path: Path):
    out = tmp_path / "out"
    Collector(Scripted({("<a>", None): ({"items": []}, None)}), _one_job(), out).run()
    state = out / ".collect" / "state.json"
    other = Scripted({})
    other.name = "other"
    with pytest.raises(CollectError, match="holds a 'scripted' collection; collect other into another --out"):
        Collector(other, _one_job(), out).run()
    state.write_text('{"version": 1, "platf')
    with pytest.raises(CollectError, match="the collection checkpoint is unreadable"):
        Collector(Scripted({}), _one_job(), out).run()


def test_max_attempts_must_be_positive(tmp_path: Path):
    with pytest.raises(ConfigError, match="max_attempts must be >= 1"):
        Collector(Scripted({}), _one_job(), tmp_path, max_attempts=0)


def test_a_reordered_or_extended_query_file_is_refused_before_any_request(tmp_path: Path):
    pages = {(f"<{t}>", None): ({"items": [1]}, None) for t in ("a", "b", "new")}
    platform = Scripted(pages)

    def jobs(*terms: str) -> list[Job]:
        return [Job(f"{i:02d}-{t}", t, f"<{t}>", Window()) for i, t in enumerate(terms, 1)]

    Collector(platform, jobs("a", "b"), tmp_path / "out").run()
    asked = len(platform.asked)
    for changed in (
        jobs("new", "a", "b"),
        jobs("b", "a"),
        jobs("a"),
    ):  # numbered in file order: renamed searches
        with pytest.raises(CollectError, match="was collected with another query file"):
            Collector(platform, changed, tmp_path / "out").run()
    assert len(platform.asked) == asked  # nothing asked (and paid) again
    again = Collector(platform, jobs("a", "b"), tmp_path / "out").run()
    assert again.requests_this_run == 0
