"""``jsonl``: JSON Lines of :class:`~echo_builder.records.Post`, the package's own interchange format.

Input shape: one ``Post`` JSON object per line, exactly as ``Post.model_dump_json()`` writes it (``id``,
``platform`` and the other fields of :class:`~echo_builder.records.Post`; unknown keys are an error). A ``.json``
file holding one such object or a list of them is read too (locations ``[i]``).

Mapping: none; each line is validated with ``Post.model_validate_json``, so a written file reads back equal.

Problems: a line that is not valid JSON or does not validate as a ``Post`` (unknown field, id not namespaced with
its platform, negative count, a date out of range once converted to UTC ...) is reported with its line number and
skipped. A lone UTF-16 surrogate (``"\\ud83d"``) is replaced by U+FFFD, with a note.

Detected when the first record is an object with a string ``platform`` from :data:`~echo_builder.ids.PLATFORMS`
and an ``id`` starting with ``"<platform>:"``.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from echo_builder.ids import PLATFORMS
from echo_builder.records import Post
from echo_builder.sources.base import (
    Document,
    FileContext,
    Item,
    SourceAdapter,
    clean_json,
    clean_text,
    has_surrogate_escape,
    join_location,
    register_source,
    surrogate_note,
    validation_summary,
)

__all__ = ["JsonlSource", "write_jsonl"]


def _looks_like_post(value: Any) -> bool:
    if not isinstance(value, dict):
        return False
    platform, post_id = value.get("platform"), value.get("id")
    return (
        isinstance(platform, str)
        and platform in PLATFORMS
        and isinstance(post_id, str)
        and post_id.startswith(platform + ":")
    )


@register_source(order=10)  # detection order among the built-in formats
class JsonlSource(SourceAdapter):
    """JSON Lines of ``Post`` records (see the module docstring)."""

    name = "jsonl"
    description = "JSON Lines of echo-bench Post records (Post.model_dump_json per line)"
    reads_line_text = True

    def sniff(self, value: Any) -> bool:
        if isinstance(value, list):
            return bool(value) and _looks_like_post(value[0])
        return _looks_like_post(value)

    def parse_document(self, document: Document, ctx: FileContext) -> Iterator[Item]:
        if document.text is not None:
            yield from self._one(ctx, document.location, document.text, json_text=True)
        elif isinstance(document.value, list):
            for i, value in enumerate(document.value):
                yield from self._one(ctx, join_location(document.location, f"[{i}]"), value, json_text=False)
        else:
            yield from self._one(ctx, join_location(document.location, ""), document.value, json_text=False)

    @staticmethod
    def _one(ctx: FileContext, location: str, value: Any, *, json_text: bool) -> Iterator[Item]:
        try:
            if json_text and has_surrogate_escape(value):
                # pydantic's JSON parser refuses a lone surrogate escape outright; parse with json, repair, validate
                try:
                    parsed, repaired = clean_json(json.loads(value))
                except json.JSONDecodeError:
                    parsed, repaired = None, 0
                if parsed is not None:
                    json_text, value = False, parsed
                    if repaired:
                        yield ctx.problem(location, surrogate_note(repaired), "note")
            post = Post.model_validate_json(value) if json_text else Post.model_validate(value)
        except ValidationError as exc:
            yield ctx.problem(location, f"not a valid Post: {validation_summary(exc)}")
            return
        except RecursionError:
            yield ctx.problem(location, "record nested too deeply to read")
            return
        except MemoryError:
            raise
        except Exception as exc:  # any failure converting this line stays with this line
            yield ctx.problem(location, clean_text(f"not a valid Post ({type(exc).__name__}: {exc})")[0])
            return
        yield post if ctx.keep_raw or post.raw is None else post.model_copy(update={"raw": None})


def write_jsonl(posts: Iterable[Post], path: str | os.PathLike[str]) -> int:
    """Write ``posts`` as JSON Lines (one ``Post.model_dump_json()`` per line, UTF-8, ``\\n`` endings).

    The file is written to a temporary name beside ``path`` and moved into place, so a crash never leaves a
    torn file. Returns the number of posts written.
    """
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    count = 0
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="\n") as fh:
            for post in posts:
                fh.write(post.model_dump_json())
                fh.write("\n")
                count += 1
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return count
