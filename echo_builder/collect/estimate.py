"""What a collection may read and cost before it starts (``estimate collect``, and the note ``collect x`` prints).

X bills every post a search returns (``platforms.x.per_post_read`` in ``prices.yaml``); Bluesky and Reddit do not
bill. The bound is the run's own: every query stops at ``--max-posts-per-query`` posts and the run at
``--max-posts``, so a collection of ``n`` queries reads at most ``min(n * per_query, max_posts)`` posts, plus, on
X, up to 9 posts per bound (X's pages hold at least 10 posts, and the last one before a bound is billed whole). Comment
trees (Reddit ``--comments``) and posts a server returns beyond a page's asked size are not in it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from echo_builder.prices import PlatformPrice, platform_price

#: The smallest page X's search answers (``max_results`` 10..100, or 10..500 in the archive).
X_MIN_PAGE = 10

__all__ = ["CollectionEstimate", "estimate_collection"]


@dataclass(frozen=True)
class CollectionEstimate:
    """The most posts a collection may read and what they cost.

    Attributes:
        platform: ``x``, ``bluesky`` or ``reddit``.
        queries: searches planned.
        max_posts: the most posts read (``None``: unbounded, when neither bound is set).
        price: the platform's price per post, ``None`` for a platform that does not bill per post.
        cost_usd: ``max_posts * price`` in US dollars, unrounded (``None`` without a price or a bound); shown
            rounded up to the cent.
    """

    platform: str
    queries: int
    max_posts: int | None
    price: PlatformPrice | None
    cost_usd: float | None

    def describe(self) -> str:
        """One line for a person: the bound, and its price with the price's date and source."""
        posts = "an unbounded number of" if self.max_posts is None else f"at most {self.max_posts:,}"
        line = f"{self.platform}: {self.queries} queries may read {posts} posts"
        if self.price is not None and self.cost_usd is not None:
            line += (
                f", up to {self.shown_cost()} at ${self.price.per_post_read:g} a post read (prices.yaml, "
                f"{self.price.date}; check {self.price.source})"
            )
        return line

    def shown_cost(self) -> str:
        """``cost_usd`` rounded up to the cent, as ``$1,234.57`` (empty without a cost)."""
        if self.cost_usd is None:
            return ""
        return f"${math.ceil(round(self.cost_usd * 100, 6)) / 100:,.2f}"

    def to_dict(self) -> dict[str, Any]:
        return {
            "platform": self.platform,
            "queries": self.queries,
            "max_posts": self.max_posts,
            "per_post_read": self.price.per_post_read if self.price else None,
            "price_date": str(self.price.date) if self.price else None,
            "cost_usd": round(self.cost_usd, 6) if self.cost_usd is not None else None,
        }


def estimate_collection(
    platform: str,
    queries: int,
    *,
    max_posts: int | None,
    max_posts_per_query: int | None,
    prices: str | None = None,
) -> CollectionEstimate:
    """The bound of a collection of ``queries`` searches on ``platform`` (see the module docstring); ``prices``:
    a price file whose ``platforms:`` entries replace the shipped ones. Raises
    :class:`~echo_builder.errors.ConfigError` for a bad price file."""
    # X asks for pages of at least 10 posts: the last page before a bound may pass it by up to 9 (billed too)
    slack = X_MIN_PAGE - 1 if platform == "x" else 0
    bounds = [
        b
        for b in (
            max_posts + slack if max_posts is not None else None,
            queries * (max_posts_per_query + slack) if max_posts_per_query else None,
        )
        if b is not None
    ]
    most = min(bounds) if bounds else None
    price = platform_price(platform, prices)
    cost = most * price.per_post_read if price is not None and most is not None else None
    return CollectionEstimate(platform, queries, most, price, cost)
