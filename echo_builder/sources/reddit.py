"""``reddit``: Reddit dumps (submissions and comments) -> posts.

Input shape: NDJSON as written by Pushshift / Arctic Shift dumps and the Reddit API, one object per line (a
``.json`` file with a list, or Reddit's own ``Listing`` responses such as ``/comments/<id>.json``, are read
too)::

    submission: {"id", "name": "t3_<id>", "title", "selftext", "url", "permalink", "author", "author_fullname",
                 "subreddit", "created_utc", "score", "num_comments", "num_crossposts", "post_hint",
                 "is_gallery", "gallery_data": {"items": [{"media_id", "caption"}]},
                 "media_metadata": {<media_id>: {"status", "e": "Image" | "AnimatedImage" | "RedditVideo",
                                                 "s": {"u" | "gif" | "mp4", "x", "y"}}},
                 "preview": {"images": [{"source": {"url", "width", "height"}}]}, "crosspost_parent"}
    comment:    {"id", "name": "t1_<id>", "link_id": "t3_<id>", "parent_id": "t3_<id>" | "t1_<id>", "body",
                 "author", "author_fullname", "subreddit", "created_utc", "score", "permalink",
                 "media_metadata"}
    listing:    {"kind": "Listing", "data": {"children": [{"kind": "t3" | "t1", "data": {...}}]}}, comments'
                ``replies`` being listings again (walked with an explicit stack).
    morechildren: {"json": {"errors": [], "data": {"things": [{"kind": "t1" | "more", "data": {...}}]}}}, the
                answer of ``/api/morechildren`` (comments a ``more`` stub stood for; written by ``collect reddit
                --comments``).

Mapping to :class:`~echo_builder.records.Post`:

- ``id`` ``reddit:t3_<id>`` (submission) / ``reddit:t1_<id>`` (comment); ``url`` ``https://www.reddit.com`` +
  ``permalink`` (built from subreddit and ids when absent).
- ``text``: a submission's ``title``, plus a blank line and ``selftext`` when that is not empty; a comment's
  ``body``; Reddit's escaping of ``&``, ``<``, ``>`` is undone, ``[deleted]`` / ``[removed]`` are kept as given.
- ``reply_to_id``: a comment's ``parent_id``; ``root_id``: its ``link_id`` (a submission is its own root);
  ``quoted_id``: a crosspost's ``crosspost_parent``.
- ``author``: the user name as given (``[deleted]`` included); ``author_id``: ``author_fullname`` (``t2_...``),
  ``None`` for deleted accounts. ``lang``: ``None`` (Reddit does not report one).
- ``media``: a gallery's images in ``gallery_data`` order (``media_metadata`` entries with status ``valid``;
  caption as alt text), else inline ``media_metadata`` images, else the linked image itself for image posts
  (``post_hint == "image"`` or an image URL), else the ``preview`` images (``type="video"`` for video posts,
  the generic ``"image"`` for link previews). ``&amp;`` in media URLs is unescaped.
- ``engagement``: ``score`` (left out when negative: ``Post`` counts are non-negative; ``raw`` keeps it),
  ``replies`` (``num_comments``, all comments of a submission), ``crossposts``.
- ``raw``: the object as given (a listing comment without its nested ``replies``).

Problems: a record that is neither a submission (``title``) nor a comment (``body``), has no ``id``, or has an
unreadable ``created_utc`` (or one outside years 1-9999) is reported with its line (and JSON path inside a
listing) and skipped; a listing whose ``children`` is not a list is reported; a ``more`` stub (comments not loaded)
is a note. An image post (``post_hint`` ``image``) without a ``url`` falls back to its preview images.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

from echo_builder.records import MediaRef
from echo_builder.sources.base import (
    BadRecord,
    Document,
    FileContext,
    Item,
    SourceAdapter,
    as_count,
    as_str,
    build_post,
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

__all__ = ["RedditSource"]

_BASE = "https://www.reddit.com"
_IMAGE_URL = re.compile(
    r"^https?://(i\.redd\.it|i\.imgur\.com|preview\.redd\.it)/|\.(jpe?g|png|gif|webp)(\?|$)", re.I
)
_DELETED = frozenset({"[deleted]", "[removed]"})


def _is_thing(value: Any) -> bool:
    return (
        isinstance(value, dict)
        and value.get("kind") in ("t1", "t3", "more")
        and isinstance(value.get("data"), dict)
    )


def _is_listing(value: Any) -> bool:
    return isinstance(value, dict) and value.get("kind") == "Listing" and isinstance(value.get("data"), dict)


def _is_morechildren(value: Any) -> bool:
    """The answer of ``/api/morechildren`` (``api_type=json``): ``{"json": {"errors", "data": {"things"}}}``."""
    inner = value.get("json") if isinstance(value, dict) else None
    data = inner.get("data") if isinstance(inner, dict) else None
    return isinstance(data, dict) and isinstance(data.get("things"), list)


def _is_item(value: Any) -> bool:
    return (
        isinstance(value, dict)
        and ("subreddit" in value or "subreddit_id" in value)
        and any(k in value for k in ("title", "selftext", "body", "link_id"))
    )


def _fullname(value: Any, prefix: str, what: str) -> str:
    text = as_str(value, what, required=True)
    if text is None:  # as_str(required=True) raises first; no assert on input data
        raise BadRecord(f"missing {what}")
    return text if text.startswith(("t1_", "t3_")) else prefix + text


def _url(value: Any) -> str | None:
    text = as_str(value, "url")
    return unescape_entities(text) if text else None


def _metadata_media(meta: dict[str, Any], media_id: str, caption: Any) -> MediaRef | None:
    entry = meta.get(media_id)
    if not isinstance(entry, dict) or entry.get("status", "valid") != "valid":
        return None
    kind = entry.get("e")
    source = get_dict(entry, "s")
    if kind == "AnimatedImage":
        return make_media(
            url=_url(source.get("gif") or source.get("mp4")),
            media_id=media_id,
            type="animated_gif",
            alt_text=caption,
            width=source.get("x"),
            height=source.get("y"),
        )
    if kind == "RedditVideo":
        return make_media(
            url=_url(entry.get("hlsUrl") or entry.get("dashUrl")),
            media_id=media_id,
            type="video",
            alt_text=caption,
            width=entry.get("x"),
            height=entry.get("y"),
        )
    return make_media(
        url=_url(source.get("u")),
        media_id=media_id,
        type="photo",
        alt_text=caption,
        width=source.get("x"),
        height=source.get("y"),
    )


def _media(item: dict[str, Any], submission: bool) -> tuple[MediaRef, ...]:
    meta = get_dict(item, "media_metadata")
    out: list[MediaRef | None] = []
    gallery = get_list(get_dict(item, "gallery_data"), "items")
    if gallery:
        for g in gallery:
            if isinstance(g, dict) and isinstance(g.get("media_id"), str):
                out.append(_metadata_media(meta, g["media_id"], g.get("caption")))
    elif meta:
        out.extend(_metadata_media(meta, key, None) for key in meta)
    found = tuple(m for m in out if m is not None)
    if found or not submission:
        return found
    previews = [p for p in get_list(get_dict(item, "preview"), "images") if isinstance(p, dict)]
    link = as_str(item.get("url"), "url")
    image_post = item.get("post_hint") == "image" or (
        link and _IMAGE_URL.search(link) and not item.get("is_self")
    )
    if image_post and link:  # an image post without a url (null, "") falls back to its preview images
        source = get_dict(previews[0], "source") if previews else {}
        url = unescape_entities(link)
        kind = "animated_gif" if url.lower().split("?")[0].endswith(".gif") else "photo"
        return (make_media(url=url, type=kind, width=source.get("width"), height=source.get("height")),)
    video = item.get("is_video") is True or item.get("post_hint") in ("hosted:video", "rich:video")
    return tuple(
        make_media(
            url=_url(get_dict(p, "source").get("url")),
            media_id=p.get("id"),
            type="video" if video else "image",
            width=get_dict(p, "source").get("width"),
            height=get_dict(p, "source").get("height"),
        )
        for p in previews
        if get_dict(p, "source").get("url")
    )


def _permalink(item: dict[str, Any]) -> str | None:
    link = as_str(item.get("permalink"), "permalink")
    if not link:
        return None
    return link if link.startswith("http") else _BASE + (link if link.startswith("/") else "/" + link)


@register_source(order=40)  # detection order among the built-in formats
class RedditSource(SourceAdapter):
    """Reddit submissions and comments (see the module docstring)."""

    name = "reddit"
    description = "Reddit dumps: NDJSON submissions + comments (Pushshift style) or Reddit API listings"

    def sniff(self, value: Any) -> bool:
        if isinstance(value, list):
            return bool(value) and self.sniff(value[0])
        return _is_listing(value) or _is_thing(value) or _is_item(value) or _is_morechildren(value)

    def parse_document(self, document: Document, ctx: FileContext) -> Iterator[Item]:
        stack: list[tuple[Any, tuple[str | int, ...]]] = [(document.value, ())]
        while stack:
            node, path = stack.pop()
            loc = join_location(document.location, format_path(path))
            if isinstance(node, list):
                stack.extend((node[i], (*path, i)) for i in range(len(node) - 1, -1, -1))
            elif _is_listing(node):
                children = node["data"].get("children")
                if children is not None and not isinstance(children, list):
                    yield ctx.problem(
                        join_location(document.location, format_path((*path, "data", "children"))),
                        f"listing children must be a list, got {type(children).__name__}; skipped",
                    )
                    continue
                children = children or []
                stack.extend(
                    (children[i], (*path, "data", "children", i)) for i in range(len(children) - 1, -1, -1)
                )
            elif _is_morechildren(node):
                things = node["json"]["data"]["things"]
                stack.extend(
                    (things[i], (*path, "json", "data", "things", i)) for i in range(len(things) - 1, -1, -1)
                )
            elif _is_thing(node):
                data = node["data"]
                if node["kind"] == "more":
                    n = len(get_list(data, "children"))
                    yield ctx.problem(loc, f"{n} more comments not loaded in this listing", "note")
                    continue
                replies = data.get("replies")
                if _is_listing(replies):
                    stack.append((replies, (*path, "data", "replies")))
                item = {k: v for k, v in data.items() if k != "replies"}
                comment = node["kind"] == "t1"
                yield from guarded(
                    ctx, loc, lambda item=item, comment=comment, loc=loc: self._item(item, comment, loc, ctx)
                )
            elif isinstance(node, dict):
                yield from guarded(ctx, loc, lambda node=node, loc=loc: self._item(node, None, loc, ctx))
            else:
                yield ctx.problem(
                    loc, f"expected a Reddit submission or comment object, got {type(node).__name__}"
                )

    def _item(
        self, item: dict[str, Any], comment: bool | None, location: str, ctx: FileContext
    ) -> Iterator[Item]:
        if comment is None:
            if "body" in item or ("link_id" in item and "title" not in item):
                comment = True
            elif "title" in item or "selftext" in item:
                comment = False
            else:
                raise BadRecord(
                    f"neither a submission (title) nor a comment (body); keys: {sorted(str(k) for k in item)[:8]}"
                )
        native = item.get("name") if isinstance(item.get("name"), str) else item.get("id")
        fullname = _fullname(native, "t1_" if comment else "t3_", "id")
        subreddit = as_str(item.get("subreddit"), "subreddit")
        author = as_str(item.get("author"), "author")
        author_id = (
            None
            if author is None or author in _DELETED
            else as_str(item.get("author_fullname"), "author_fullname")
        )
        score = as_count(item.get("score"), "score") if not _negative(item.get("score")) else None
        engagement = {"score": score} if score is not None else {}
        if comment:
            body = item.get("body")
            if not isinstance(body, str):
                raise BadRecord(f"comment {fullname} has no body (expected a string, got {body!r})")
            link = _fullname(item.get("link_id"), "t3_", "link_id")
            parent_raw = item.get("parent_id")
            if parent_raw is None:
                parent = link
            else:
                text_parent = as_str(parent_raw, "parent_id", required=True) or link
                parent = (
                    text_parent
                    if text_parent.startswith(("t1_", "t3_"))
                    else ("t3_" + text_parent if "t3_" + text_parent == link else "t1_" + text_parent)
                )
            url = _permalink(item) or (
                f"{_BASE}/r/{subreddit}/comments/{link[3:]}/_/{fullname[3:]}/"
                if subreddit
                else f"{_BASE}/comments/{link[3:]}/_/{fullname[3:]}/"
            )
            text = unescape_entities(body)
            reply_to, root, quoted = f"reddit:{parent}", f"reddit:{link}", None
        else:
            title = item.get("title")
            if not isinstance(title, str):
                raise BadRecord(f"submission {fullname} has no title (expected a string, got {title!r})")
            selftext = item.get("selftext") or ""
            if not isinstance(selftext, str):
                raise BadRecord(
                    f"submission {fullname}: selftext must be a string, got {type(selftext).__name__}"
                )
            text = unescape_entities(title) + (f"\n\n{unescape_entities(selftext)}" if selftext else "")
            url = _permalink(item) or f"{_BASE}/comments/{fullname[3:]}/"
            crosspost = as_str(item.get("crosspost_parent"), "crosspost_parent")
            reply_to, root = None, f"reddit:{fullname}"
            quoted = f"reddit:{_fullname(crosspost, 't3_', 'crosspost_parent')}" if crosspost else None
            for key, field in (("replies", "num_comments"), ("crossposts", "num_crossposts")):
                n = as_count(item.get(field), field)
                if n is not None:
                    engagement[key] = n
        yield from build_post(
            ctx,
            location,
            item,
            id=f"reddit:{fullname}",
            platform="reddit",
            url=url,
            author_id=author_id,
            author=author,
            created_at=parse_timestamp(item.get("created_utc", item.get("created")), "created_utc"),
            text=text,
            media=_media(item, submission=not comment),
            reply_to_id=reply_to,
            root_id=root,
            quoted_id=quoted,
            engagement=engagement,
        )


def _negative(value: Any) -> bool:
    """A negative score (Reddit sends net votes, which can be below zero), as a number or a string."""
    if isinstance(value, bool):
        return False
    if isinstance(value, (int, float)):
        return value < 0
    return isinstance(value, str) and value.strip().startswith("-") and value.strip()[1:].isdigit()
