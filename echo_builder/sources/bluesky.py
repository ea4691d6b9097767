"""``bluesky``: Bluesky (AT Protocol) thread, post and feed views -> posts.

Input shape: the JSON body of ``app.bsky.feed.getPostThread`` (one per file, a list, or one per line)::

    {"thread": <node>}
    <node> = {"$type": "app.bsky.feed.defs#threadViewPost", "post": <postView>,
              "parent": <node>, "replies": [<node>, ...]}
           | {"$type": "app.bsky.feed.defs#notFoundPost", "uri", "notFound": true}
           | {"$type": "app.bsky.feed.defs#blockedPost", "uri", "blocked": true, "author": {...}}
    <postView> = {"uri": "at://<did>/app.bsky.feed.post/<rkey>", "cid",
                  "author": {"did", "handle", "displayName"},
                  "record": {"text", "createdAt", "langs": [...],
                             "reply": {"root": {"uri"}, "parent": {"uri"}}, "embed": {...}},
                  "embed": {"$type": "app.bsky.embed.images#view",
                            "images": [{"thumb", "fullsize", "alt", "aspectRatio": {"width", "height"}}]}
                         | {"$type": "app.bsky.embed.video#view", "cid", "thumbnail", "alt", "aspectRatio"}
                         | {"$type": "app.bsky.embed.record#view", "record": <viewRecord>}
                         | {"$type": "app.bsky.embed.recordWithMedia#view", "record": {"record": <viewRecord>},
                            "media": <images or video view>},
                  "likeCount", "repostCount", "replyCount", "quoteCount"}
    <viewRecord> = {"$type": "app.bsky.embed.record#viewRecord", "uri", "author", "value": <record>,
                    "embeds": [<embed view>], "likeCount", ...}

Also read: ``{"posts": [<postView>]}`` (``getPosts``, ``searchPosts``) and ``{"feed": [{"post": <postView>,
"reply": {"parent": <postView>, "root": <postView>}}]}`` (``getAuthorFeed``, ``getTimeline``, ``getFeed``).

Order: a thread's ancestors from the top down, the thread's post, then its replies depth first in the order
given (iteratively: long threads cannot exhaust the Python stack); a quoted post right after the post quoting it.

Mapping to :class:`~echo_builder.records.Post`:

- ``id`` ``bluesky:<at-uri>``; ``url`` ``https://bsky.app/profile/<handle>/post/<rkey>`` (the DID when the handle
  is missing or ``handle.invalid``); ``author_id`` the DID, ``author`` the handle (``None`` for the placeholder ``handle.invalid``).
- ``text`` ``record.text`` as given (Bluesky does not escape); ``created_at`` ``record.createdAt`` in UTC;
  ``lang`` the first of ``record.langs``.
- ``reply_to_id`` / ``root_id``: ``record.reply.parent.uri`` / ``record.reply.root.uri``; a post that is no reply
  is its own root. ``quoted_id``: the embedded record's URI when it is a post (quotes of feeds or lists are not).
- ``media``: from the hydrated ``embed`` view: images (``url`` = ``fullsize``, else ``thumb``; ``alt_text``;
  ``width``/``height`` from ``aspectRatio``, which clients fill with the pixel size but may be a reduced ratio),
  a video (``url`` = its ``thumbnail`` still, ``media_id`` = its CID), the media part of ``recordWithMedia``.
  Without a view, the record's image blobs give ``MediaRef(media_id=<blob CID>, url=None)``.
- ``engagement``: ``likes``, ``reposts``, ``replies``, ``quotes``. ``raw``: the post view as given.

Problems: ``notFoundPost`` and ``blockedPost`` nodes (deleted or blocked posts) are notes; a post view without an
``at://`` URI, with a non-string text or an unreadable ``createdAt`` (or one outside years 1-9999 in UTC) is
reported at its JSON path (``thread.replies[2].post``) and skipped; ``replies`` that is not a list, or a
``parent`` that is not a thread node, is reported (the posts inside it cannot be read).
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
    preview,
    register_source,
)

__all__ = ["BlueskySource", "bsky_post_url"]

_DEFS = "app.bsky.feed.defs#"
_POST_COLLECTION = "/app.bsky.feed.post/"


def bsky_post_url(uri: str, handle: str | None, did: str | None) -> str | None:
    """``https://bsky.app/profile/<handle or did>/post/<rkey>`` for an ``app.bsky.feed.post`` URI, else ``None``."""
    if _POST_COLLECTION not in uri:
        return None
    authority = uri[len("at://") :].split("/", 1)[0]
    who = handle if handle and handle != "handle.invalid" else (did or authority)
    return f"https://bsky.app/profile/{who}/post/{uri.rsplit('/', 1)[-1]}"


def _is_post_view(value: Any) -> bool:
    return (
        isinstance(value, dict)
        and isinstance(value.get("uri"), str)
        and value["uri"].startswith("at://")
        and isinstance(value.get("record"), dict)
    )


def _is_thread_node(value: Any) -> bool:
    if not isinstance(value, dict):
        return False
    kind = value.get("$type")
    if isinstance(kind, str) and kind.startswith(_DEFS):
        return True
    return _is_post_view(value.get("post")) or value.get("notFound") is True or value.get("blocked") is True


def _uri(node: dict[str, Any]) -> str:
    """The node's ``uri`` for a message: as given when it is a string, else a short preview."""
    uri = node.get("uri")
    return uri if isinstance(uri, str) else preview(uri)


def _aspect(value: Any) -> tuple[Any, Any]:
    ratio = value if isinstance(value, dict) else {}
    return ratio.get("width"), ratio.get("height")


def _embed_media(embed: dict[str, Any]) -> tuple[MediaRef, ...]:
    kind = str(embed.get("$type") or "")
    if kind.startswith("app.bsky.embed.recordWithMedia"):
        return _embed_media(get_dict(embed, "media"))
    if kind.startswith("app.bsky.embed.images") or ("images" in embed and "video" not in kind):
        out = []
        for img in get_list(embed, "images"):
            if not isinstance(img, dict):
                continue
            width, height = _aspect(img.get("aspectRatio"))
            blob = get_dict(get_dict(img, "image"), "ref").get("$link")  # record form: a blob reference
            out.append(
                make_media(
                    url=img.get("fullsize") or img.get("thumb"),
                    media_id=blob,
                    type="photo",
                    alt_text=img.get("alt"),
                    width=width,
                    height=height,
                )
            )
        return tuple(out)
    if kind.startswith("app.bsky.embed.video"):
        width, height = _aspect(embed.get("aspectRatio"))
        cid = embed.get("cid") or get_dict(get_dict(embed, "video"), "ref").get("$link")
        return (
            make_media(
                url=embed.get("thumbnail"),
                media_id=cid,
                type="video",
                alt_text=embed.get("alt"),
                width=width,
                height=height,
            ),
        )
    return ()


def _is_quoted_post_view(record: dict[str, Any]) -> bool:
    """An embedded viewRecord of a post (not a feed, list or starter pack, not a bare strong ref): it carries the
    quoted post's ``value`` or declares itself a viewRecord whose uri is not another kind of record."""
    kind = str(record.get("$type") or "")
    uri = record.get("uri")
    other_kind = isinstance(uri, str) and "/app.bsky." in uri and _POST_COLLECTION not in uri
    return not other_kind and ("value" in record or kind.endswith("#viewRecord"))


def _embedded_record(embed: dict[str, Any]) -> dict[str, Any]:
    """The quoted record (view or strong ref) of a record or recordWithMedia embed, else ``{}``."""
    kind = str(embed.get("$type") or "")
    if kind.startswith("app.bsky.embed.recordWithMedia"):
        return get_dict(get_dict(embed, "record"), "record")
    if kind.startswith("app.bsky.embed.record"):
        return get_dict(embed, "record")
    return {}


class _View:
    """The parts of a post view or an embedded viewRecord that make a post."""

    def __init__(self, view: dict[str, Any], *, embedded: bool) -> None:
        self.view = view
        self.record = get_dict(view, "value" if embedded else "record")
        embeds = get_list(view, "embeds") if embedded else [view.get("embed")]
        self.embed = next((e for e in embeds if isinstance(e, dict)), None) or get_dict(self.record, "embed")


@register_source(order=50)  # detection order among the built-in formats
class BlueskySource(SourceAdapter):
    """Bluesky post threads, post lists and feeds (see the module docstring)."""

    name = "bluesky"
    description = "Bluesky app.bsky.feed.getPostThread threads (also getPosts/searchPosts and feeds)"

    def sniff(self, value: Any) -> bool:
        if isinstance(value, list):
            return bool(value) and self.sniff(value[0])
        if not isinstance(value, dict):
            return False
        if _is_thread_node(value.get("thread")):
            return True
        posts, feed = value.get("posts"), value.get("feed")
        # any of the first entries: a malformed first one must not hide the others
        if isinstance(posts, list) and any(_is_post_view(p) for p in posts[:50]):
            return True
        if isinstance(feed, list) and any(
            isinstance(f, dict) and _is_post_view(f.get("post")) for f in feed[:50]
        ):
            return True
        return _is_post_view(value) or (_is_thread_node(value) and "post" in value)

    def parse_document(self, document: Document, ctx: FileContext) -> Iterator[Item]:
        value = document.value
        tops = [(f"[{i}]", v) for i, v in enumerate(value)] if isinstance(value, list) else [("", value)]
        for base, top in tops:

            def at(path: str, base: str = base) -> str:
                return join_location(document.location, f"{base}.{path}" if base and path else base or path)

            if not isinstance(top, dict):
                yield ctx.problem(at(""), f"expected a Bluesky response object, got {type(top).__name__}")
            elif "thread" in top:
                yield from self._thread(top["thread"], "thread", at, ctx)
            elif isinstance(top.get("posts"), list):
                for i, view in enumerate(top["posts"]):
                    yield from self._node_post(view, at(f"posts[{i}]"), ctx)
            elif isinstance(top.get("feed"), list):
                for i, item in enumerate(top["feed"]):
                    reply = get_dict(item, "reply")
                    yield from self._node_post(get_dict(item, "post"), at(f"feed[{i}].post"), ctx)
                    for part in ("parent", "root"):
                        if part in reply:
                            yield from self._node_post(reply[part], at(f"feed[{i}].reply.{part}"), ctx)
            elif _is_post_view(top):
                yield from self._node_post(top, at(""), ctx)
            else:
                yield from self._thread(top, "", at, ctx)

    def _thread(self, node: Any, path: str, at: Any, ctx: FileContext) -> Iterator[Item]:
        ancestors: list[tuple[Any, str]] = []
        parent_path = f"{path}.parent" if path else "parent"
        parent = node.get("parent") if isinstance(node, dict) else None
        while parent is not None:
            if not isinstance(parent, dict):  # the ancestors above are lost with it: say so
                ancestors.append((parent, parent_path))
                break
            ancestors.append((parent, parent_path))
            parent, parent_path = parent.get("parent"), parent_path + ".parent"
        for anc, anc_path in reversed(ancestors):
            yield from self._node(anc, anc_path, at, ctx)
        stack: list[tuple[Any, str]] = [(node, path)]
        while stack:
            current, current_path = stack.pop()
            yield from self._node(current, current_path, at, ctx)
            prefix = f"{current_path}.replies" if current_path else "replies"
            replies = current.get("replies") if isinstance(current, dict) else None
            if replies is not None and not isinstance(replies, list):
                yield ctx.problem(
                    at(prefix),
                    f"replies must be a list of thread nodes, got {type(replies).__name__}; skipped",
                )
                continue
            replies = replies or []
            stack.extend((replies[i], f"{prefix}[{i}]") for i in range(len(replies) - 1, -1, -1))

    def _node(self, node: Any, path: str, at: Any, ctx: FileContext) -> Iterator[Item]:
        if not isinstance(node, dict):
            yield ctx.problem(at(path), f"expected a thread node object, got {type(node).__name__}")
            return
        kind = node.get("$type", "")
        if kind == _DEFS + "notFoundPost" or node.get("notFound") is True:
            yield ctx.problem(at(path), f"post {_uri(node)} not found (deleted?); skipped", "note")
        elif kind == _DEFS + "blockedPost" or node.get("blocked") is True:
            yield ctx.problem(at(path), f"post {_uri(node)} is blocked; skipped", "note")
        elif "post" in node:
            yield from self._node_post(node["post"], at(f"{path}.post" if path else "post"), ctx)
        else:
            what = preview(kind) if kind else repr(sorted(str(k) for k in node)[:6])
            yield ctx.problem(at(path), f"unknown thread node type {what}; skipped")

    def _node_post(self, view: Any, location: str, ctx: FileContext) -> Iterator[Item]:
        if isinstance(view, dict) and (view.get("notFound") is True or view.get("blocked") is True):
            state = "not found (deleted?)" if view.get("notFound") is True else "blocked"
            yield ctx.problem(location, f"post {_uri(view)} {state}; skipped", "note")
            return
        yield from guarded(ctx, location, lambda: self._post(view, location, ctx, embedded=False))

    def _post(self, view: Any, location: str, ctx: FileContext, *, embedded: bool) -> Iterator[Item]:
        if not isinstance(view, dict):
            raise BadRecord(f"expected a post view object, got {type(view).__name__}")
        uri = as_str(view.get("uri"), "uri", required=True)
        if uri is None or not uri.startswith("at://"):
            raise BadRecord(f"post uri must start with at://, got {uri!r}")
        record_key = "value" if embedded else "record"
        if not isinstance(view.get(record_key), dict):  # else the post would be kept with no text and no date
            raise BadRecord(f"post {record_key} must be an object, got {type(view.get(record_key)).__name__}")
        parts = _View(view, embedded=embedded)
        text = parts.record.get("text", "")
        if not isinstance(text, str):
            raise BadRecord(f"record.text must be a string, got {type(text).__name__}")
        author = get_dict(view, "author")
        did = as_str(author.get("did"), "author.did")
        handle = as_str(author.get("handle"), "author.handle")
        if handle == "handle.invalid":  # the AppView's placeholder when a handle does not verify
            handle = None
        reply = get_dict(parts.record, "reply")
        parent_uri = as_str(get_dict(reply, "parent").get("uri"), "reply.parent.uri")
        root_uri = as_str(get_dict(reply, "root").get("uri"), "reply.root.uri")
        quoted = _embedded_record(parts.embed)
        quoted_uri = as_str(quoted.get("uri"), "embedded record uri") if quoted else None
        if quoted_uri and _POST_COLLECTION not in quoted_uri:
            quoted_uri = None  # a quoted feed generator, list or starter pack is not a post
        langs = get_list(parts.record, "langs")
        yield from build_post(
            ctx,
            location,
            view,
            id=f"bluesky:{uri}",
            platform="bluesky",
            url=bsky_post_url(uri, handle, did),
            author_id=did,
            author=handle,
            created_at=parse_timestamp(parts.record.get("createdAt"), "createdAt"),
            text=text,
            media=_embed_media(parts.embed),
            reply_to_id=f"bluesky:{parent_uri}" if parent_uri else None,
            root_id=f"bluesky:{root_uri}" if root_uri else (None if parent_uri else f"bluesky:{uri}"),
            quoted_id=f"bluesky:{quoted_uri}" if quoted_uri else None,
            engagement=counts(
                (key, view.get(field), field)
                for key, field in (
                    ("likes", "likeCount"),
                    ("reposts", "repostCount"),
                    ("replies", "replyCount"),
                    ("quotes", "quoteCount"),
                )
            ),
            lang=langs[0] if langs and isinstance(langs[0], str) else None,
        )
        with_media = str(parts.embed.get("$type", "")).startswith("app.bsky.embed.recordWithMedia")
        quoted_loc = f"{location}.embed.record" + (".record" if with_media else "")
        if quoted_uri and isinstance(quoted.get("value"), dict) and not embedded:
            yield from guarded(ctx, quoted_loc, lambda: self._post(quoted, quoted_loc, ctx, embedded=True))
        elif quoted and not embedded and _is_quoted_post_view(quoted):
            # a hydrated quoted post that cannot be read is that record's problem, never silently gone
            yield ctx.problem(
                quoted_loc,
                "quoted post skipped: its uri is not a post uri or its value is not a record "
                f"(uri {preview(quoted.get('uri'))}, value {type(quoted.get('value')).__name__})",
            )
        elif (
            not quoted
            and not embedded
            and str(parts.embed.get("$type", "")).startswith("app.bsky.embed.record")
        ):
            container = get_dict(parts.embed, "record") if with_media else parts.embed
            yield ctx.problem(
                quoted_loc,
                f"quoted record skipped: expected an object, got {type(container.get('record')).__name__}",
                "note" if container.get("record") is None else "error",
            )
