"""``twscrape``: X posts saved by twscrape (its ``Tweet`` model, one ``tweet.json()`` per line) -> posts.

twscrape (https://github.com/vladkens/twscrape) reads X's web GraphQL API and gives its results as dataclasses
modelled on snscrape's; users keep them as JSON Lines with ``tweet.json()`` (or ``json.dumps(tweet.dict(),
default=str)``, the same thing). Input shape, the fields read (others are ignored)::

    {"id": 1901..., "id_str": "1901...", "url": "https://x.com/<user>/status/<id>",
     "date": "2025-03-26 18:02:11+00:00", "lang": "en", "rawContent": "...",
     "user": {"id_str": "44196397", "username": "...", "displayname": "...", ...},
     "replyCount", "retweetCount", "likeCount", "quoteCount", "bookmarkedCount", "viewCount",
     "conversationId": 1901..., "conversationIdStr": "1901...",
     "inReplyToTweetId": 1901... | null, "inReplyToTweetIdStr": "1901..." | null,
     "media": {"photos": [{"url"}], "videos": [{"thumbnailUrl", "variants", "duration"}],
               "animated": [{"thumbnailUrl", "videoUrl"}]},
     "quotedTweet": <Tweet> | null, "retweetedTweet": <Tweet> | null,
     "_type": "snscrape.modules.twitter.Tweet"}

Mapping to :class:`~echo_builder.records.Post` (the same ids as ``x_api`` and ``x_graphql``, so one post found
in several exports is read once):

- ``id`` ``x:<id_str>``; ``url`` as given (else ``https://x.com/<username>/status/<id>``); ``author`` the
  ``user.username``, ``author_id`` ``user.id_str``; ``created_at`` ``date`` (ISO 8601 with a space or ``T``);
  ``text`` ``rawContent`` as given (twscrape has already undone X's HTML escaping); ``lang`` as given.
- ``reply_to_id`` ``x:<inReplyToTweetIdStr>``, ``root_id`` ``x:<conversationIdStr>``, ``quoted_id``
  ``x:<quotedTweet.id_str>``; the quoted tweet is read as a post too.
- ``media``: photos (``type="photo"``, the image URL), then videos and animated GIFs by their thumbnail image
  (``type="video"`` / ``"animated_gif"``), in that order.
- ``engagement``: ``likes``, ``reposts``, ``replies``, ``quotes``, ``views``, ``bookmarks``.
- A retweet (``retweetedTweet`` set) is not a post of its own: the original is read, with a note for the wrapper.

Problems: a line without an id, ``rawContent`` or a readable ``date`` is reported at its line (and
``quotedTweet`` / ``retweetedTweet`` path) and skipped.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from echo_builder.records import MediaRef
from echo_builder.sources.base import (
    BadRecord,
    Document,
    FileContext,
    Item,
    SourceAdapter,
    as_str,
    build_post,
    counts,
    get_dict,
    get_list,
    guarded,
    join_location,
    make_media,
    parse_timestamp,
    register_source,
)

__all__ = ["TwscrapeSource"]


def _is_tweet(value: Any) -> bool:
    """twscrape's ``Tweet``: ``rawContent`` and a ``user`` object (snscrape's ``_type`` when present)."""
    if not isinstance(value, dict) or "rawContent" not in value or not isinstance(value.get("user"), dict):
        return False
    kind = value.get("_type")
    return (isinstance(kind, str) and kind.endswith("Tweet")) or "conversationId" in value


def _id(value: dict[str, Any], what: str, *keys: str) -> str | None:
    for key in keys:
        found = as_str(value.get(key), f"{what} ({key})")
        if found is not None:
            if not found.isdigit():
                raise BadRecord(f"{what} must be a numeric tweet id, got {found!r}")
            return found
    return None


def _media(tweet: dict[str, Any]) -> tuple[MediaRef, ...]:
    media = get_dict(tweet, "media")
    refs = [
        make_media(url=p.get("url"), type="photo") for p in get_list(media, "photos") if isinstance(p, dict)
    ]
    refs += [
        make_media(url=v.get("thumbnailUrl"), type="video")
        for v in get_list(media, "videos")
        if isinstance(v, dict)
    ]
    refs += [
        make_media(url=a.get("thumbnailUrl"), type="animated_gif")
        for a in get_list(media, "animated")
        if isinstance(a, dict)
    ]
    return tuple(refs)


@register_source(order=60)  # detection order among the built-in formats
class TwscrapeSource(SourceAdapter):
    """twscrape ``Tweet`` JSON Lines (see the module docstring)."""

    name = "twscrape"
    description = (
        "twscrape's Tweet model as JSON Lines (tweet.json() per line), X posts scraped from the web API"
    )

    def sniff(self, value: Any) -> bool:
        if isinstance(value, list):
            return bool(value) and self.sniff(value[0])
        return _is_tweet(value)

    def parse_document(self, document: Document, ctx: FileContext) -> Iterator[Item]:
        value = document.value
        tweets = list(enumerate(value)) if isinstance(value, list) else [(None, value)]
        for index, tweet in tweets:
            where = join_location(document.location, f"[{index}]" if index is not None else "")
            yield from self._tweet(tweet, where, ctx, depth=0)

    def _tweet(self, tweet: Any, location: str, ctx: FileContext, depth: int) -> Iterator[Item]:
        if not _is_tweet(tweet):
            yield ctx.problem(location, "expected a twscrape Tweet (rawContent and user), got another shape")
            return
        retweeted = tweet.get("retweetedTweet")
        if isinstance(retweeted, dict) and depth < 4:
            native = tweet.get("id_str") or tweet.get("id")
            yield ctx.problem(
                location, f"x:{native} is a retweet; not a post of its own (the original is read)", "note"
            )
            yield from self._tweet(retweeted, join_location(location, "retweetedTweet"), ctx, depth + 1)
            return
        yield from guarded(ctx, location, lambda: self._post(tweet, location, ctx))
        quoted = tweet.get("quotedTweet")
        if isinstance(quoted, dict) and depth < 4:
            yield from self._tweet(quoted, join_location(location, "quotedTweet"), ctx, depth + 1)

    @staticmethod
    def _post(tweet: dict[str, Any], location: str, ctx: FileContext) -> Iterator[Item]:
        native = _id(tweet, "id", "id_str", "id")
        if native is None:
            raise BadRecord("tweet has no id (id_str or id)")
        text = tweet.get("rawContent")
        if not isinstance(text, str):
            raise BadRecord(f"tweet x:{native}: rawContent must be a string, got {type(text).__name__}")
        user = get_dict(tweet, "user")
        username = as_str(user.get("username"), "user.username")
        reply_to = _id(tweet, "inReplyToTweetId", "inReplyToTweetIdStr", "inReplyToTweetId")
        conversation = _id(tweet, "conversationId", "conversationIdStr", "conversationId")
        quoted = get_dict(tweet, "quotedTweet")
        quoted_id = _id(quoted, "quotedTweet.id", "id_str", "id") if quoted else None
        url = as_str(tweet.get("url"), "url") or f"https://x.com/{username or 'i'}/status/{native}"
        engagement = counts(
            (key, tweet.get(field), field)
            for key, field in (
                ("likes", "likeCount"),
                ("reposts", "retweetCount"),
                ("replies", "replyCount"),
                ("quotes", "quoteCount"),
                ("views", "viewCount"),
                ("bookmarks", "bookmarkedCount"),
            )
        )
        yield from build_post(
            ctx,
            location,
            tweet,
            id=f"x:{native}",
            platform="x",
            url=url,
            author_id=_id(user, "user.id", "id_str", "id"),
            author=username,
            created_at=parse_timestamp(tweet.get("date"), "date"),
            text=text,
            lang=as_str(tweet.get("lang"), "lang"),
            media=_media(tweet),
            reply_to_id=f"x:{reply_to}" if reply_to else None,
            root_id=f"x:{conversation}" if conversation else None,
            quoted_id=f"x:{quoted_id}" if quoted_id else None,
            engagement=engagement,
        )
