"""``x_api``: X (Twitter) API v2 responses -> posts.

Input shape (a ``.json`` file with one response or a list of responses, or ``.jsonl`` with one per line)::

    {"data": <tweet> | [<tweet>, ...],
     "includes": {"users": [{"id", "username", "name", ...}],
                  "media": [{"media_key", "type", "url" | "preview_image_url", "alt_text", "width", "height"}],
                  "tweets": [<tweet>, ...]},          # referenced (quoted / replied-to / retweeted) tweets
     "errors": [{"title", "detail", ...}], "meta": {...}}

    <tweet> = {"id", "text", "author_id", "created_at": "2023-04-20T23:21:13.000Z", "conversation_id",
               "in_reply_to_user_id", "referenced_tweets": [{"type": "replied_to" | "quoted" | "retweeted",
               "id"}], "attachments": {"media_keys": [...]}, "public_metrics": {"like_count", "retweet_count",
               "reply_count", "quote_count", "impression_count", "bookmark_count"}, "lang",
               "note_tweet": {"text"}}

A line may also be a single tweet object in twarc2's "flattened" form (``author`` and ``attachments.media``
inline, referenced tweets expanded inside ``referenced_tweets``).

Mapping to :class:`~echo_builder.records.Post`:

- ``id`` ``x:<id>``; ``url`` ``https://x.com/<username>/status/<id>`` (``https://x.com/i/status/<id>`` when
  the author is not in ``includes.users``); ``author_id`` the user id, ``author`` the username.
- ``text``: ``note_tweet.text`` (the full text of a long post) when present, else ``text`` with X's HTML escaping
  of ``&``, ``<``, ``>`` undone; nothing else is changed.
- ``reply_to_id`` / ``quoted_id`` from ``referenced_tweets`` (``replied_to`` / ``quoted``), ``root_id`` from
  ``conversation_id``; ``created_at`` UTC; ``lang`` as given.
- ``media``: ``attachments.media_keys`` in order, each resolved in ``includes.media`` to
  ``MediaRef(media_id=media_key, url=url or preview_image_url, type, alt_text, width, height)``; a key missing
  from ``includes`` still gives ``MediaRef(media_id=key)`` so the media stage can resolve it later.
- ``engagement``: ``likes``, ``reposts``, ``replies``, ``quotes``, ``views`` (impression_count), ``bookmarks``.
- ``raw``: the tweet object as given.

Every tweet of ``data`` and then of ``includes.tweets`` becomes a post (referenced tweets are posts too). A
retweet (``referenced_tweets`` type ``retweeted``) is not a post of its own: it is passed over with a note; the
original arrives through ``includes.tweets``. Entries of ``errors`` (deleted or protected referenced tweets)
become notes.

Problems: a tweet without a string ``id`` or ``text``, with an unparseable date (or one outside years 1-9999 in
UTC), a non-numeric count or one beyond 2**63 - 1 is reported at its JSON path (``data[3]``,
``line 2: includes.tweets[0]``) and skipped; ``includes`` that is not an object, or ``includes.tweets`` that is
not a list, is reported too.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

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
    preview,
    register_source,
    unescape_entities,
)

__all__ = ["XApiSource", "x_status_url"]

_RESPONSE_KEYS = ("data", "includes", "errors", "meta")
_TWEET_HINTS = (
    "author_id",
    "edit_history_tweet_ids",
    "public_metrics",
    "conversation_id",
    "referenced_tweets",
    "attachments",
    "created_at",
)


def x_status_url(tweet_id: str, username: str | None) -> str:
    """``https://x.com/<username>/status/<id>``, or ``https://x.com/i/status/<id>`` without a username."""
    return f"https://x.com/{username}/status/{tweet_id}" if username else f"https://x.com/i/status/{tweet_id}"


def _is_tweet(value: Any) -> bool:
    return (
        isinstance(value, dict)
        and isinstance(value.get("id"), (str, int))
        and ("text" in value or "edit_history_tweet_ids" in value)
        and not any(k in value for k in ("platform", "__typename", "legacy", "rest_id"))
    )


def _is_response(value: Any) -> bool:
    if not isinstance(value, dict) or _is_tweet(value):
        return False
    data = value.get("data")
    if _is_tweet(data):
        return True
    if isinstance(data, list):  # any of the first tweets: a malformed first one must not hide the page
        return any(_is_tweet(t) for t in data[:50]) if data else isinstance(value.get("meta"), dict)
    if data is None:  # a page with only referenced tweets, or an empty search page
        meta = value.get("meta")
        return isinstance(value.get("includes"), dict) or (isinstance(meta, dict) and "result_count" in meta)
    return False


@register_source(order=20)  # detection order among the built-in formats
class XApiSource(SourceAdapter):
    """X API v2 responses (see the module docstring)."""

    name = "x_api"
    description = "X API v2 responses: data + includes.users/media/tweets (JSON or JSON Lines)"

    def sniff(self, value: Any) -> bool:
        if isinstance(value, list):
            return bool(value) and self.sniff(value[0])
        if _is_response(value):
            return True
        return _is_tweet(value) and any(k in value for k in _TWEET_HINTS)

    def parse_document(self, document: Document, ctx: FileContext) -> Iterator[Item]:
        value = document.value
        if isinstance(value, list):
            for i, item in enumerate(value):
                yield from self._response(item, document.location, f"[{i}]", ctx)
        else:
            yield from self._response(value, document.location, "", ctx)

    def _response(self, obj: Any, prefix: str, base: str, ctx: FileContext) -> Iterator[Item]:
        def where(path: str) -> str:
            return join_location(prefix, f"{base}.{path}" if base and path else base or path)

        if not isinstance(obj, dict):
            yield ctx.problem(where(""), f"expected an X API v2 response object, got {type(obj).__name__}")
            return
        if _is_tweet(obj) and not any(k in obj for k in _RESPONSE_KEYS):  # a flattened tweet
            users = {}
            author = obj.get("author")
            if isinstance(author, dict) and author.get("id") is not None:
                users[str(author["id"])] = author
            yield from guarded(ctx, where(""), lambda: self._tweet(obj, users, {}, where(""), ctx))
            for i, ref in enumerate(get_list(obj, "referenced_tweets")):
                if _is_tweet(ref) and "text" in ref:
                    loc = where(f"referenced_tweets[{i}]")
                    yield from guarded(
                        ctx, loc, lambda ref=ref, loc=loc: self._tweet(ref, users, {}, loc, ctx)
                    )
            return
        includes = get_dict(obj, "includes")
        if obj.get("includes") is not None and not isinstance(obj.get("includes"), dict):
            kind = type(obj.get("includes")).__name__
            yield ctx.problem(where("includes"), f"includes must be an object, got {kind}; skipped")
        users = {
            str(u["id"]): u
            for u in get_list(includes, "users")
            if isinstance(u, dict) and u.get("id") is not None
        }
        media = {
            str(m["media_key"]): m
            for m in get_list(includes, "media")
            if isinstance(m, dict) and m.get("media_key") is not None
        }
        tweets: list[tuple[str, Any]] = []
        data = obj.get("data")
        if isinstance(data, list):
            tweets.extend((f"data[{i}]", t) for i, t in enumerate(data))
        elif data is not None:
            tweets.append(("data", data))
        included = includes.get("tweets")
        if included is not None and not isinstance(included, list):
            yield ctx.problem(
                where("includes.tweets"),
                f"includes.tweets must be a list, got {type(included).__name__}; skipped",
            )
        tweets.extend((f"includes.tweets[{i}]", t) for i, t in enumerate(get_list(includes, "tweets")))
        for path, tweet in tweets:
            loc = where(path)
            yield from guarded(
                ctx, loc, lambda tweet=tweet, loc=loc: self._tweet(tweet, users, media, loc, ctx)
            )
        for i, err in enumerate(get_list(obj, "errors")):
            if isinstance(err, dict):
                parts = [preview(err[k], 200).strip("'") for k in ("title", "detail") if err.get(k)]
                text = ": ".join(parts) or preview(err, 200)
            else:
                text = preview(err, 200)
            yield ctx.problem(where(f"errors[{i}]"), f"the API reported: {text}", "note")

    def _tweet(
        self, tweet: Any, users: dict[str, Any], media: dict[str, Any], location: str, ctx: FileContext
    ) -> Iterator[Item]:
        if not isinstance(tweet, dict):
            raise BadRecord(f"expected a tweet object, got {type(tweet).__name__}")
        native = as_str(tweet.get("id"), "tweet id", required=True)
        refs: dict[str, str] = {}
        for ref in get_list(tweet, "referenced_tweets"):
            if isinstance(ref, dict) and isinstance(ref.get("type"), str):
                ref_id = as_str(ref.get("id"), f"referenced_tweets {ref['type']} id")
                if ref_id:
                    refs.setdefault(ref["type"], ref_id)
        if "retweeted" in refs:
            yield ctx.problem(
                location,
                f"x:{native} is a retweet of x:{refs['retweeted']}; not a post of its own (the original is read "
                "from includes.tweets when present)",
                "note",
            )
            return
        note = get_dict(tweet, "note_tweet").get("text")
        if isinstance(note, str) and note:
            text = note
        else:
            raw_text = tweet.get("text")
            if not isinstance(raw_text, str):
                raise BadRecord(f"tweet x:{native} has no text (expected a string, got {raw_text!r})")
            text = unescape_entities(raw_text)
        author_id = as_str(tweet.get("author_id"), "author_id")
        user = users.get(author_id) if author_id else None
        if user is None and isinstance(tweet.get("author"), dict):
            user = tweet["author"]
            author_id = author_id or as_str(user.get("id"), "author id")
        username = as_str(user.get("username"), "username") if user else None
        attachments = get_dict(tweet, "attachments")
        refs_media: list[Any] = []
        inline = get_list(attachments, "media")
        if inline:
            refs_media = inline
        else:
            for key in get_list(attachments, "media_keys"):
                if isinstance(key, (str, int)) and not isinstance(key, bool):
                    refs_media.append(media.get(str(key), {"media_key": str(key)}))
        media_refs = tuple(
            make_media(
                url=m.get("url") or m.get("preview_image_url"),
                media_id=m.get("media_key"),
                type=m.get("type", "image"),
                alt_text=m.get("alt_text"),
                width=m.get("width"),
                height=m.get("height"),
            )
            for m in refs_media
            if isinstance(m, dict)
        )
        metrics = get_dict(tweet, "public_metrics")
        engagement = counts(
            (key, metrics.get(field), f"public_metrics.{field}")
            for key, field in (
                ("likes", "like_count"),
                ("reposts", "retweet_count"),
                ("replies", "reply_count"),
                ("quotes", "quote_count"),
                ("views", "impression_count"),
                ("bookmarks", "bookmark_count"),
            )
        )
        conversation = as_str(tweet.get("conversation_id"), "conversation_id")
        yield from build_post(
            ctx,
            location,
            tweet,
            id=f"x:{native}",
            platform="x",
            url=x_status_url(native, username),
            author_id=author_id,
            author=username,
            created_at=parse_timestamp(tweet.get("created_at"), "created_at"),
            text=text,
            media=media_refs,
            reply_to_id=f"x:{refs['replied_to']}" if "replied_to" in refs else None,
            root_id=f"x:{conversation}" if conversation else None,
            quoted_id=f"x:{refs['quoted']}" if "quoted" in refs else None,
            engagement=engagement,
            lang=as_str(tweet.get("lang"), "lang"),
        )
