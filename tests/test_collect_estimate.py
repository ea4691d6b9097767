"""What a collection may read and cost before it starts: ``estimate collect``, the note ``collect x`` prints, and
``--max-cost`` refusing a run before any request (docs/collect.md, "Costs and rate limits")."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from echo_builder.cli import cli
from echo_builder.collect.core import DEFAULT_QUERY_POSTS
from echo_builder.collect.estimate import estimate_collection
from echo_builder.errors import ConfigError
from tests.helpers.replay_server import ReplayServer


@pytest.fixture
def keywords(tmp_path: Path) -> Path:
    path = tmp_path / "keywords.txt"
    path.write_text("gpt-4o\nopenai image\nsora\n", encoding="utf-8")  # 3 queries
    return path


def test_the_bound_is_queries_times_the_per_query_budget_capped_by_max_posts():
    assert DEFAULT_QUERY_POSTS == 2000
    unbounded = estimate_collection("x", 3, max_posts=None, max_posts_per_query=DEFAULT_QUERY_POSTS)
    # X's pages hold at least 10 posts: each bound may be passed by up to 9 posts, billed too
    assert unbounded.max_posts == 3 * (2000 + 9) and unbounded.cost_usd == pytest.approx(30.135)
    assert unbounded.shown_cost() == "$30.14"  # rounded up, never down
    assert unbounded.price is not None and unbounded.price.per_post_read == 0.005
    capped = estimate_collection("x", 3, max_posts=150, max_posts_per_query=DEFAULT_QUERY_POSTS)
    assert (capped.max_posts, capped.cost_usd) == (159, pytest.approx(0.795))
    assert "at most 159 posts, up to $0.80 at $0.005 a post read" in capped.describe()
    free = estimate_collection("bluesky", 3, max_posts=None, max_posts_per_query=100)
    assert (free.max_posts, free.price, free.cost_usd) == (300, None, None)
    assert estimate_collection("reddit", 2, max_posts=None, max_posts_per_query=None).max_posts is None


def test_a_price_file_replaces_the_shipped_price(tmp_path):
    prices = tmp_path / "prices.yaml"
    prices.write_text(
        "platforms:\n  x: {per_post_read: 0.01, date: 2026-12-01, source: https://example.com/pricing}\n",
        encoding="utf-8",
    )
    estimate = estimate_collection("x", 1, max_posts=None, max_posts_per_query=500, prices=str(prices))
    assert estimate.cost_usd == pytest.approx(5.09)
    prices.write_text("platforms:\n  x: {per_post_read: cheap}\n", encoding="utf-8")
    with pytest.raises(ConfigError, match="x"):
        estimate_collection("x", 1, max_posts=None, max_posts_per_query=500, prices=str(prices))


def test_estimate_collect_prints_the_bound_without_a_request(keywords):
    result = CliRunner().invoke(
        cli,
        ["estimate", "collect", "x", "--query-file", str(keywords), "--max-posts-per-query", "100", "--json"],
    )
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert (data["platform"], data["queries"], data["max_posts"], data["cost_usd"]) == ("x", 3, 327, 1.635)
    assert data["per_post_read"] == 0.005 and data["price_date"] == "2025-08-15"


def test_collect_x_says_what_it_may_cost_and_refuses_past_max_cost_before_any_request(
    keywords, tmp_path, monkeypatch
):
    monkeypatch.setenv("X_BEARER_TOKEN", "test-bearer-token-123456")
    out = tmp_path / "collection"
    with ReplayServer() as server:
        result = CliRunner().invoke(
            cli,
            [
                "collect", "x", "--query-file", str(keywords), "--out", str(out), "--base-url", server.url,
                "--no-progress", "--max-cost", "10",
            ],
        )  # fmt: skip
        assert server.requests == [] and server.misses == []
    assert result.exit_code == 1
    lines = result.output.splitlines()
    assert lines[0] == (
        "note: x: 3 queries may read at most 6,027 posts, up to $30.14 at $0.005 a post read (prices.yaml, "
        "2025-08-15; check https://docs.x.com/x-api/getting-started/pricing)"
    )
    assert lines[1].startswith("error: this collection may cost up to $30.14, over --max-cost $10.00")
    assert len(lines) == 2
    assert not out.exists()


def test_max_cost_compares_the_unrounded_cost(keywords, tmp_path, monkeypatch):
    monkeypatch.setenv("X_BEARER_TOKEN", "test-bearer-token-123456")
    one = tmp_path / "one.txt"
    one.write_text("gpt-4o\n", encoding="utf-8")
    with ReplayServer() as server:
        result = CliRunner().invoke(
            cli,
            [
                "collect", "x", "--query-file", str(one), "--out", str(tmp_path / "c"), "--base-url", server.url,
                "--no-progress", "--max-posts", "6", "--max-cost", "0.07",
            ],
        )  # fmt: skip
        assert server.requests == []
    assert result.exit_code == 1  # 6 + 9 posts at $0.005 = $0.075, over $0.07 although it rounds to $0.07
    assert "may cost up to $0.08, over --max-cost $0.07" in result.output
