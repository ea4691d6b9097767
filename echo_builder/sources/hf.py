"""``hf:<repo>[:config]`` sources: a ``datasets``-loadable prompt collection -> one curated post per row.

Curated prompt sets are often published as Hugging Face datasets (a column of prompts, maybe ids, images, links).
A source argument ``hf:<repo>`` or ``hf:<repo>:<config>`` (``<repo>`` a Hub id such as ``org/prompts``, or a local
folder ``datasets.load_dataset`` reads) is loaded with ``datasets.load_dataset(repo, config, streaming=True)``:
rows are read one at a time and nothing is written to the ``datasets`` cache; every split is read, in sorted
order. With ``HF_HUB_OFFLINE=1`` only local folders and already-cached Hub datasets load.

Which column holds what is given by a column mapping (``build --hf-columns prompt=text,id=uid``), ``FIELD=COLUMN``
pairs for these fields:

- ``prompt`` (required; default: the first of the columns ``prompt``, ``text``, ``caption``, ``instruction``
  that exists): the post's ``text``, as given; a row whose prompt is missing or blank is one problem, skipped.
- ``id``: a stable row id (default: the split and row number, ``train/17``).
- ``url``, ``author``, ``title``: text columns copied to ``url``, ``author`` and ``raw["title"]``.
- ``image``: an example image: a URL (``http(s)://``) becomes ``MediaRef(url=...)``; a path to an existing
  local file, or an ``Image`` column whose file is local, becomes ``MediaRef(path=...)``; an image held only as
  bytes inside the dataset is not extracted (a note says so).
- ``needs_input_image``: a boolean column: the prompt edits an input photo the user supplies (image-to-image).

Posts are ``platform="collection"`` like a prompt-collection folder (they skip the query and relevance stages),
with ``id`` ``collection:hf/<repo>[:config]/<row id>``, ``root_id`` the post itself, and ``raw`` holding the row's
text, number and boolean columns plus ``needs_input_image``, ``source`` and ``split``.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from typing import Any

from echo_builder.errors import ConfigError
from echo_builder.sources.base import FileContext, Item, build_post, make_media, preview

__all__ = ["HF_FIELDS", "HF_PREFIX", "is_hf_source", "parse_hf_columns", "parse_hf_source", "read_hf"]

HF_PREFIX = "hf:"

#: the fields a column mapping may name
HF_FIELDS = ("prompt", "id", "url", "author", "title", "image", "needs_input_image")

_PROMPT_DEFAULTS = ("prompt", "text", "caption", "instruction")


def is_hf_source(value: Any) -> bool:
    """Whether a source argument is an ``hf:`` dataset reference."""
    return isinstance(value, str) and value.startswith(HF_PREFIX)


def parse_hf_source(value: str) -> tuple[str, str | None]:
    """``hf:org/name:config`` -> ``("org/name", "config")``; ``hf:org/name`` -> ``("org/name", None)``.

    Raises :class:`ConfigError` for an empty repository."""
    spec = value[len(HF_PREFIX) :]
    repo, config = spec, None
    head, sep, tail = spec.rpartition(":")
    if sep and head and "/" not in tail:
        repo, config = head, tail or None
    if not repo.strip():
        raise ConfigError(f"{value!r}: name a dataset, as hf:<repo> or hf:<repo>:<config>")
    return repo, config


def parse_hf_columns(pairs: str | None) -> dict[str, str]:
    """``"prompt=text,id=uid"`` -> ``{"prompt": "text", "id": "uid"}``.

    Raises :class:`ConfigError` for a pair without ``=``, an unknown field (see :data:`HF_FIELDS`) or a field
    named twice."""
    mapping: dict[str, str] = {}
    for pair in (pairs or "").split(","):
        if not pair.strip():
            continue
        field, sep, column = (part.strip() for part in pair.partition("="))
        if not sep or not field or not column:
            raise ConfigError(f"--hf-columns: {pair.strip()!r} is not FIELD=COLUMN")
        if field not in HF_FIELDS:
            raise ConfigError(f"--hf-columns: unknown field {field!r}; fields: {', '.join(HF_FIELDS)}")
        if field in mapping:
            raise ConfigError(f"--hf-columns: {field!r} is given twice")
        mapping[field] = column
    return mapping


def _text(row: Mapping[str, Any], column: str | None) -> str | None:
    if column is None:
        return None
    value = row.get(column)
    if value is None or (isinstance(value, str) and not value.strip()):
        return None
    return value if isinstance(value, str) else str(value)


def _image(value: Any) -> tuple[Any, str | None]:
    """``(MediaRef or None, note)`` for an image cell."""
    path = value.get("path") if isinstance(value, dict) else value
    if isinstance(path, str) and path.startswith(("http://", "https://")):
        return make_media(url=path, type="image"), None
    if isinstance(path, str) and path and os.path.isfile(path):
        return make_media(path=os.path.abspath(path), type="image"), None
    if value is None or value == "":
        return None, None
    return None, "the image cell is not a URL or a local file (images embedded as bytes are not extracted)"


def read_hf(source: str, columns: Mapping[str, str], ctx: FileContext) -> Iterator[Item]:
    """Posts (and problems) of an ``hf:`` source, one row at a time (see the module docstring).

    A dataset that cannot be loaded, or a mapping naming a column the dataset lacks, is one problem for the whole
    source (``location=None``); a row without a prompt is a problem at ``<split>/<row>``."""
    try:
        repo, config = parse_hf_source(source)
    except ConfigError as exc:
        yield ctx.problem(None, str(exc))
        return
    try:
        import datasets

        loaded = datasets.load_dataset(repo, config, streaming=True)
    except Exception as exc:  # missing dataset, offline, bad config: one problem naming it
        yield ctx.problem(None, f"cannot load the dataset {repo!r}{f' ({config})' if config else ''}: {exc}")
        return
    splits = (
        [(name, loaded[name]) for name in sorted(loaded)]
        if isinstance(loaded, Mapping)
        else [("train", loaded)]
    )
    label = source[len(HF_PREFIX) :]
    for split, rows in splits:
        features = getattr(rows, "features", None) or {}
        known = list(features)
        mapping = dict(columns)
        if "prompt" not in mapping:
            found = next((c for c in _PROMPT_DEFAULTS if c in known), None)
            if found is None and known:
                yield ctx.problem(
                    None,
                    f"split {split!r}: no prompt column (none of {', '.join(_PROMPT_DEFAULTS)}); name it with "
                    f"--hf-columns prompt=COLUMN (columns: {', '.join(known[:20])})",
                )
                continue
            mapping["prompt"] = found or "prompt"
        missing = [c for c in mapping.values() if known and c not in known]
        if missing:
            yield ctx.problem(
                None,
                f"split {split!r}: no column {', '.join(map(repr, missing))} (columns: {', '.join(known[:20])})",
            )
            continue
        image_column = mapping.get("image")
        if image_column is not None and type(features.get(image_column)).__name__ == "Image":
            rows = rows.cast_column(image_column, datasets.Image(decode=False))
        number = -1
        try:
            for number, row in enumerate(rows):
                yield from _row(row, number, split, label, mapping, ctx)
        except Exception as exc:  # a broken data file half-way: the rows before it are kept
            yield ctx.problem(f"{split}/{number + 1}", f"reading the dataset stopped: {exc}")


def _row(
    row: Mapping[str, Any], number: int, split: str, label: str, mapping: Mapping[str, str], ctx: FileContext
) -> Iterator[Item]:
    location = f"{split}/{number}"
    prompt = row.get(mapping["prompt"])
    if not isinstance(prompt, str) or not prompt.strip():
        yield ctx.problem(
            location, f"no prompt in column {mapping['prompt']!r} (got {preview(prompt)}); skipped"
        )
        return
    row_id = _text(row, mapping.get("id")) or location
    media = ()
    if "image" in mapping:
        ref, note = _image(row.get(mapping["image"]))
        if note:
            yield ctx.problem(location, note, "note")
        media = (ref,) if ref is not None else ()
    needs = row.get(mapping["needs_input_image"]) if "needs_input_image" in mapping else False
    raw = {k: v for k, v in row.items() if isinstance(v, (str, int, float, bool)) or v is None}
    raw.update(
        needs_input_image=bool(needs),
        source=f"{HF_PREFIX}{label}",
        split=split,
        title=_text(row, mapping.get("title")),
    )
    post_id = f"collection:hf/{label}/{row_id}"
    yield from build_post(
        ctx,
        location,
        raw,
        always_raw=True,
        id=post_id,
        platform="collection",
        url=_text(row, mapping.get("url")),
        author=_text(row, mapping.get("author")),
        text=prompt,
        media=media,
        root_id=post_id,
    )
