"""``x_graphql``: X (Twitter) web GraphQL responses -> posts.

Input shape: any response of X's web GraphQL API that holds tweets (TweetDetail conversations, reply and thread
pages, SearchTimeline, UserMedia / UserTweets timelines), as one ``.json`` value, a list of them, or one per line.
Tweets may sit anywhere below ``instructions`` / ``entries`` / ``items`` / modules; the whole value is walked
with an explicit stack (no recursion). A tweet is an object with::

    {"__typename": "Tweet", "rest_id",
     "core": {"user_results": {"result": {"rest_id", "core": {"screen_name"} | "legacy": {"screen_name"}}}},
     "legacy": {"id_str", "full_text", "created_at": "Thu Apr 20 23:21:13 +0000 2023", "conversation_id_str",
                "in_reply_to_status_id_str", "quoted_status_id_str", "lang", "favorite_count", "retweet_count",
                "reply_count", "quote_count", "bookmark_count",
                "extended_entities" | "entities": {"media": [{"media_key", "id_str", "media_url_https", "type",
                                                              "ext_alt_text", "original_info": {"width", "height"}}]}},
     "note_tweet": {"note_tweet_results": {"result": {"text"}}},      # long posts
     "views": {"count": "25900"},
     "quoted_status_result": {"result": <tweet>}}

or ``{"__typename": "TweetWithVisibilityResults", "tweet": <tweet>}`` around one; an object with ``rest_id`` and a
``legacy.full_text`` but no ``__typename`` is taken as a tweet too.

Mapping to :class:`~echo_builder.records.Post`:

- ``id`` ``x:<rest_id>``; ``url`` ``https://x.com/<screen_name>/status/<id>`` (``/i/status/`` without a user);
  ``author_id`` the user's ``rest_id`` (else ``legacy.user_id_str``), ``author`` the screen name.
- ``text``: ``note_tweet`` text when present (the full text of a long post, sent unescaped), else
  ``legacy.full_text`` with X's escaping of ``&``, ``<``, ``>`` undone. The trailing ``https://t.co/...`` link X
  appends for attached media is part of ``full_text`` and is kept as is.
- ``reply_to_id`` ``in_reply_to_status_id_str``; ``root_id`` ``conversation_id_str``; ``quoted_id``
  ``quoted_status_id_str`` (or the quoted result's id); ``created_at`` UTC; ``lang`` as given.
- ``media``: ``extended_entities.media`` (all attachments; ``entities.media`` holds only the first) ->
  ``MediaRef(media_id=media_key or id_str, url=media_url_https, type, alt_text=ext_alt_text, width, height)``
  from ``original_info``. For videos and GIFs ``url`` is the still image; the video variants stay in ``raw``.
- ``engagement``: ``likes``, ``reposts``, ``replies``, ``quotes``, ``bookmarks``, ``views``.
- ``raw``: the tweet object without its nested ``quoted_status_result`` (the quoted tweet is a post of its own).

Each tweet id gives one post per response, at its first occurrence (a later complete copy replaces an earlier stub
that has no ``legacy``). Quoted tweets are posts too. A retweet wrapper (``legacy.retweeted_status_result``) is
passed over with a note, the original tweet inside it is read. Tombstones (``TweetTombstone``,
``TweetUnavailable``) and stubs that never get their content are notes.

Problems: a tweet without an id or text, with an unparseable date or a non-numeric count, a tweet-like object
whose ``__typename`` is not a string, or a ``tweet_results.result`` that is not an object, is reported at its JSON path
(``data.threaded_conversation_with_injections_v2.instructions[1].entries[4].content...``) and skipped.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from echo_builder.sources.base import (
    BadRecord,
    Document,
    FileContext,
    Item,
    RecordProblem,
    SourceAdapter,
    as_str,
    build_post,
    counts,
    format_path,
    get_dict,
    get_list,
    guarded,
    join_location,
    make_media,
    parse_timestamp,
    register_source,
    unescape_entities,
)
from echo_builder.sources.x_api import x_status_url

__all__ = ["XGraphqlSource", "iter_graphql_tweets"]

_TWEET_TYPES = frozenset({"Tweet", "TweetWithVisibilityResults"})
_GONE_TYPES = frozenset({"TweetTombstone", "TweetUnavailable"})
_SNIFF_TYPES = _TWEET_TYPES | _GONE_TYPES
_MARKER_KEYS = ("tweet_results", "threaded_conversation_with_injections_v2", "instructions")
_SNIFF_NODES = 5000

_JPath = tuple[Any, str | int] | None  # linked JSON path: (parent path, key)


def _path_text(path: _JPath) -> str:
    keys: list[str | int] = []
    while path is not None:
        path, key = path
        keys.append(key)
    return format_path(reversed(keys))


def _is_bare_tweet(d: dict[str, Any]) -> bool:
    legacy = d.get("legacy")
    return "rest_id" in d and isinstance(legacy, dict) and "full_text" in legacy


@dataclass
class _Found:
    kind: str  # "tweet" or "gone"
    path: _JPath
    value: Any = None
    full: bool = False


_RESULT_KEYS = frozenset({"tweet_results", "quoted_status_result", "retweeted_status_result"})
_KNOWN_TYPES = _TWEET_TYPES | _GONE_TYPES


def _not_a_tweet(result: Any) -> str | None:
    """Why the ``result`` of a ``tweet_results`` (or quoted / retweeted result) is not a tweet, or ``None``."""
    if not isinstance(result, dict):
        return f"expected a tweet object, got {type(result).__name__}"
    typename = result.get("__typename")
    if typename is None:
        if _is_bare_tweet(result) or isinstance(result.get("tweet"), dict):
            return None
        return f"expected a tweet object, got an object with keys {sorted(str(k) for k in result)[:8]}"
    if not isinstance(typename, str):
        return f"__typename must be a string, got {type(typename).__name__}; tweet skipped"
    if typename == "TweetWithVisibilityResults" and not isinstance(result.get("tweet"), dict):
        return f"TweetWithVisibilityResults without a tweet object (got {type(result.get('tweet')).__name__})"
    if typename not in _KNOWN_TYPES:
        return f"unknown __typename {typename[:60]!r} where a tweet was expected; skipped"
    return None


def iter_graphql_tweets(value: Any) -> Iterator[tuple[str, Any, _JPath]]:
    """Every tweet-like object in ``value`` in document order: ``("tweet", tweet, path)`` for tweets (unwrapping
    ``TweetWithVisibilityResults``), ``("gone", node, path)`` for tombstones, ``("empty", node, path)`` for a
    ``tweet_results`` without a ``result``, and ``("bad", reason, path)`` for a
    malformed one: the ``result`` of ``tweet_results`` / ``quoted_status_result`` / ``retweeted_status_result``
    that is not a tweet, or an object with ``rest_id`` and ``legacy.full_text`` whose ``__typename`` is not a
    string or not a tweet type. Iterative: deep input cannot exhaust the Python stack."""
    stack: list[tuple[Any, _JPath]] = [(value, None)]
    while stack:
        node, path = stack.pop()
        if isinstance(node, dict):
            checked = False  # this node is a result already checked at its parent
            if (
                path is not None
                and path[1] in _RESULT_KEYS
                and "result" in node
                and node["result"] is not None
            ):
                reason = _not_a_tweet(node["result"])
                if reason is not None:  # a malformed tweet: reported, not passed over
                    yield "bad", reason, (path, "result")
            elif path is not None and path[1] == "tweet_results" and node.get("result") is None:
                yield "empty", node, path
            if (
                path is not None
                and path[1] == "result"
                and path[0] is not None
                and path[0][1] in _RESULT_KEYS
            ):
                checked = True
            typename = node.get("__typename")
            if typename is not None and not isinstance(typename, str):  # a list, an object, a number ...
                if not checked and ("rest_id" in node or "legacy" in node):
                    yield (
                        "bad",
                        f"__typename must be a string, got {type(typename).__name__}; tweet skipped",
                        path,
                    )
            elif typename == "TweetWithVisibilityResults" and isinstance(node.get("tweet"), dict):
                yield "tweet", node["tweet"], (path, "tweet")
            elif typename == "Tweet" or (typename is None and _is_bare_tweet(node)):
                yield "tweet", node, path
            elif typename in _GONE_TYPES:
                yield "gone", node, path
            elif (
                typename is not None and typename not in _KNOWN_TYPES and not checked and _is_bare_tweet(node)
            ):
                yield "bad", f"unknown __typename {typename[:60]!r} on a tweet; skipped", path
            children = list(node.items())
            stack.extend(
                (child, (path, key)) for key, child in reversed(children) if isinstance(child, (dict, list))
            )
        elif isinstance(node, list):
            stack.extend(
                (node[i], (path, i))
                for i in range(len(node) - 1, -1, -1)
                if isinstance(node[i], (dict, list))
            )


def _tweet_id(tweet: dict[str, Any]) -> str | None:
    native = tweet.get("rest_id")
    if native is None:
        native = get_dict(tweet, "legacy").get("id_str")
    return as_str(native, "rest_id")


@register_source(order=30)  # detection order among the built-in formats
class XGraphqlSource(SourceAdapter):
    """X web GraphQL responses (see the module docstring)."""

    name = "x_graphql"
    description = "X GraphQL responses: TweetDetail conversations, reply pages, search and media timelines"

    def sniff(self, value: Any) -> bool:
        queue: deque[Any] = deque([value])
        seen = 0
        while queue and seen < _SNIFF_NODES:
            node = queue.popleft()
            seen += 1
            if isinstance(node, dict):
                typename = node.get("__typename")
                if (isinstance(typename, str) and typename in _SNIFF_TYPES) or any(
                    k in node for k in _MARKER_KEYS
                ):
                    return True
                if _is_bare_tweet(node):
                    return True
                queue.extend(v for v in node.values() if isinstance(v, (dict, list)))
            elif isinstance(node, list):
                queue.extend(v for v in node if isinstance(v, (dict, list)))
        return False

    def parse_document(self, document: Document, ctx: FileContext) -> Iterator[Item]:
        found: list[_Found | RecordProblem] = []
        index: dict[str, _Found] = {}
        for kind, node, path in iter_graphql_tweets(document.value):
            if kind == "bad":
                found.append(ctx.problem(join_location(document.location, _path_text(path)), node))
                continue
            if kind == "empty":
                found.append(
                    ctx.problem(
                        join_location(document.location, _path_text(path)),
                        "tweet_results holds no tweet (removed, or not loaded in this response); skipped",
                        "note",
                    )
                )
                continue
            if kind == "gone":
                reason = get_dict(get_dict(node, "tombstone"), "text").get("text") or node.get("reason") or ""
                detail = f": {reason}" if isinstance(reason, str) and reason else ""
                found.append(
                    ctx.problem(
                        join_location(document.location, _path_text(path)),
                        f"tweet not available ({node.get('__typename')}{detail}); skipped",
                        "note",
                    )
                )
                continue
            try:
                native = _tweet_id(node)
            except BadRecord as exc:
                found.append(ctx.problem(join_location(document.location, _path_text(path)), str(exc)))
                continue
            if native is None:
                found.append(
                    ctx.problem(join_location(document.location, _path_text(path)), "tweet has no rest_id")
                )
                continue
            full = isinstance(node.get("legacy"), dict)
            previous = index.get(native)
            if previous is None:
                entry = _Found("tweet", path, node, full)
                index[native] = entry
                found.append(entry)
            elif full and not previous.full:
                previous.path, previous.value, previous.full = path, node, True
        for entry in found:
            if isinstance(entry, RecordProblem):
                yield entry
                continue
            location = join_location(document.location, _path_text(entry.path))
            tweet = entry.value
            if not entry.full:
                yield ctx.problem(
                    location,
                    f"x:{_tweet_id(tweet)} appears only as a reference without content in this file; skipped",
                    "note",
                )
                continue
            yield from guarded(
                ctx, location, lambda tweet=tweet, location=location: self._tweet(tweet, location, ctx)
            )

    def _tweet(self, tweet: dict[str, Any], location: str, ctx: FileContext) -> Iterator[Item]:
        legacy = tweet["legacy"]
        native = _tweet_id(tweet)
        retweeted = get_dict(get_dict(legacy, "retweeted_status_result"), "result")
        if retweeted:
            original = _tweet_id(retweeted.get("tweet", retweeted)) if isinstance(retweeted, dict) else None
            yield ctx.problem(
                location,
                f"x:{native} is a retweet of x:{original}; not a post of its own (the original is read)",
                "note",
            )
            return
        note = get_dict(get_dict(get_dict(tweet, "note_tweet"), "note_tweet_results"), "result").get("text")
        if isinstance(note, str) and note:
            text = note
        else:
            full_text = legacy.get("full_text", legacy.get("text"))
            if not isinstance(full_text, str):
                raise BadRecord(f"tweet x:{native} has no legacy.full_text (got {full_text!r})")
            text = unescape_entities(full_text)
        user = get_dict(get_dict(tweet, "core"), "user_results").get("result")
        user = user if isinstance(user, dict) and user.get("__typename") != "UserUnavailable" else {}
        author_id = as_str(user.get("rest_id"), "user rest_id") or as_str(
            legacy.get("user_id_str"), "user_id_str"
        )
        screen_name = as_str(
            get_dict(user, "core").get("screen_name") or get_dict(user, "legacy").get("screen_name"),
            "screen_name",
        )
        quoted = as_str(legacy.get("quoted_status_id_str"), "quoted_status_id_str")
        if quoted is None:
            result = get_dict(get_dict(tweet, "quoted_status_result"), "result")
            result = get_dict(result, "tweet") or result
            quoted = as_str(result.get("rest_id"), "quoted rest_id") if result else None
        entities = get_dict(legacy, "extended_entities") or get_dict(legacy, "entities")
        media = tuple(
            make_media(
                url=m.get("media_url_https") or m.get("media_url"),
                media_id=m.get("media_key") or m.get("id_str"),
                type=m.get("type", "image"),
                alt_text=m.get("ext_alt_text"),
                width=get_dict(m, "original_info").get("width"),
                height=get_dict(m, "original_info").get("height"),
            )
            for m in get_list(entities, "media")
            if isinstance(m, dict)
        )
        engagement = counts(
            [
                ("likes", legacy.get("favorite_count"), "favorite_count"),
                ("reposts", legacy.get("retweet_count"), "retweet_count"),
                ("replies", legacy.get("reply_count"), "reply_count"),
                ("quotes", legacy.get("quote_count"), "quote_count"),
                ("bookmarks", legacy.get("bookmark_count"), "bookmark_count"),
                ("views", get_dict(tweet, "views").get("count"), "views.count"),
            ]
        )
        reply_to = as_str(legacy.get("in_reply_to_status_id_str"), "in_reply_to_status_id_str")
        conversation = as_str(legacy.get("conversation_id_str"), "conversation_id_str")
        raw = {k: v for k, v in tweet.items() if k != "quoted_status_result"}
        yield from build_post(
            ctx,
            location,
            raw,
            id=f"x:{native}",
            platform="x",
            url=x_status_url(native, screen_name),
            author_id=author_id,
            author=screen_name,
            created_at=parse_timestamp(legacy.get("created_at"), "created_at"),
            text=text,
            media=media,
            reply_to_id=f"x:{reply_to}" if reply_to else None,
            root_id=f"x:{conversation}" if conversation else None,
            quoted_id=f"x:{quoted}" if quoted else None,
            engagement=engagement,
            lang=as_str(legacy.get("lang"), "lang"),
        )
