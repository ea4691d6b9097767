"""``collection``: community prompt collections (a folder of cases) -> one post per case.

Input shape: a folder ``<collection>/`` holding ``cases/<n>/case.yml`` (``n`` a number; other names are read
after the numbered ones), optionally ``ATTRIBUTION.yml`` and an example image per case, as in the
awesome-gpt4o-images collection::

    title: 复古宣传海报                  title_en: Retro Style Promotional Poster
    author: "@user_9"                   author_link: https://x.com/user_9
    source_links: [{url: https://x.com/user_9/status/...}]      # or plain URL strings
    image: example_vintage_poster.png   alt_text: ...   alt_text_en: ...
    prompt: |                           # the prompt in its original language (required)
      ...
    prompt_en: |  ...                   prompt_note / prompt_note_en: ...
    reference_note: |  ...              # non-empty: the user must upload a photo (image-to-image)
    reference_note_en: ...              submitter / submitter_link: ...

Mapping to :class:`~echo_builder.records.Post`:

- ``id`` ``collection:<collection folder name>/<case folder name>``; ``platform`` ``collection``; ``root_id`` the
  post itself (a case is a conversation of its own).
- ``text``: ``prompt`` exactly as in the file, in its original language, without the final line break(s) that
  a YAML block scalar (``|``) adds.
- ``url``: the first of ``source_links`` (``None`` without one); ``author``: ``author`` as given (``author_id``
  stays ``None``: a collection names people, it does not identify accounts); ``created_at``, ``lang``: ``None``.
- ``media``: the example image named by ``image`` when that file exists inside the case folder (else any
  ``.png``/``.jpg``/``.jpeg``/``.webp``/``.gif`` in it, sorted by name), as ``MediaRef(path=<absolute path>,
  url=None, type="image", alt_text=alt_text)``. An ``image`` naming a file outside the case folder, or an image
  file that is a symbolic link to one, is ignored with a note.
- ``raw``: every field of ``case.yml`` (``title``, ``title_en``, ``prompt_en``, ``prompt_note``,
  ``reference_note`` ...; dates as ISO strings) plus ``needs_input_image`` (``True`` when ``reference_note`` or
  ``reference_note_en`` is not blank), ``source_urls`` (all links), ``example_images`` (paths relative to the
  collection), ``collection``, ``case``, ``case_dir`` and ``attribution`` (``ATTRIBUTION.yml`` or ``None``).

Problems (reported at ``cases/<n>`` and skipped): no ``case.yml``, a file that is not UTF-8 or not valid YAML, a
top level that is not a mapping, a missing or empty ``prompt`` (or one that is not text), YAML that expands past
100,000 values (alias bombs), a ``case.yml`` over 8 MiB. An unreadable ``ATTRIBUTION.yml`` is a note; the case is
kept. A lone UTF-16 surrogate (a ``"\\uD83D"`` YAML escape, or a case folder name that is not UTF-8) is replaced
by U+FFFD with a note; an example image whose path is not UTF-8 is ignored with a note.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from echo_builder.sources.base import (
    BadRecord,
    FileContext,
    Item,
    SourceAdapter,
    build_post,
    clean_text,
    guarded,
    make_media,
    register_source,
    surrogate_note,
)
from echo_dataset.safe_yaml import YAMLReadError, load_yaml

__all__ = ["CollectionSource"]

IMAGE_SUFFIXES = frozenset({".png", ".jpg", ".jpeg", ".webp", ".gif"})
_MAX_VALUES = 100_000
_MAX_DEPTH = 64


def _case_key(path: Path) -> tuple[int, int, str, str]:
    """Numbered cases first, in numeric order (compared by length then digits: ``int()`` of a 5,000-digit name
    would raise), then the other names."""
    name = path.name
    if name.isascii() and name.isdigit():
        digits = name.lstrip("0") or "0"
        return (0, len(digits), digits, name)
    return (1, 0, "", name)


def _jsonable(value: Any, repaired: list[int] | None = None) -> Any:
    """A JSON-compatible copy of a YAML value: dates as ISO strings, keys as strings, lone surrogates (from YAML
    ``"\\ud83d"`` escapes) replaced by U+FFFD and counted in ``repaired[0]``; bounded in size and depth."""
    budget = [_MAX_VALUES]
    fixed = repaired if repaired is not None else [0]

    def text(s: str) -> str:
        cleaned, n = clean_text(s)
        fixed[0] += n > 0
        return cleaned

    def convert(v: Any, depth: int) -> Any:
        budget[0] -= 1
        if budget[0] < 0:
            raise BadRecord(f"YAML expands to more than {_MAX_VALUES:,} values (alias bomb?)")
        if depth > _MAX_DEPTH:
            raise BadRecord(f"YAML nested deeper than {_MAX_DEPTH} levels")
        if isinstance(v, str):
            return text(v)
        if v is None or isinstance(v, (bool, int)):
            return v
        if isinstance(v, float):
            return v if v == v and v not in (float("inf"), float("-inf")) else str(v)
        if isinstance(v, (dt.date, dt.datetime, dt.time)):
            return v.isoformat()
        if isinstance(v, dict):
            return {text(str(k)): convert(x, depth + 1) for k, x in v.items()}
        if isinstance(v, (list, tuple, set, frozenset)):
            items = sorted(v, key=repr) if isinstance(v, (set, frozenset)) else v
            return [convert(x, depth + 1) for x in items]
        if isinstance(v, bytes):
            raise BadRecord("YAML holds binary data (!!binary); expected text")
        return text(str(v))

    return convert(value, 0)


#: the largest case.yml / ATTRIBUTION.yml read (a case is a few KB of text)
MAX_YAML_BYTES = 8 * 1024**2


def _load_yaml(path: Path) -> Any:
    try:
        size = path.stat().st_size
        if size > MAX_YAML_BYTES:
            raise BadRecord(
                f"{path.name} is {size:,} bytes, over the {MAX_YAML_BYTES:,}-byte limit for a case file"
            )
        text = path.read_bytes().decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise BadRecord(
            f"{path.name} is not valid UTF-8 (offset {exc.start}); re-encode it as UTF-8"
        ) from None
    except OSError as exc:
        raise BadRecord(f"cannot read {path.name} ({exc.strerror or exc})") from None
    # the package's one safe YAML reader: a safe loader (libyaml's, or PyYAML's own for a "\uD83D" escape that
    # libyaml refuses, so the text is repaired like any other source's), an alias bomb or a recursive alias refused
    # before it is built, nesting bounded; the message names the line, never the case's text
    try:
        return load_yaml(text, path.name, max_nodes=_MAX_VALUES, max_depth=_MAX_DEPTH)
    except YAMLReadError as exc:
        if exc.reason.startswith("not valid YAML"):
            raise BadRecord(f"{path.name} is {exc.reason}") from None
        raise BadRecord(f"{path.name}: {exc.reason}") from None


def _text(case: dict[str, Any], key: str) -> str:
    value = case.get(key)
    return value if isinstance(value, str) else ""


def _source_urls(value: Any) -> list[str]:
    links = value if isinstance(value, list) else [value] if value else []
    urls = []
    for link in links:
        url = link.get("url") if isinstance(link, dict) else link
        if isinstance(url, str) and url.strip():
            urls.append(url.strip())
    return urls


@register_source(order=70)  # detection order among the built-in formats
class CollectionSource(SourceAdapter):
    """Community prompt collections (see the module docstring)."""

    name = "collection"
    description = "community prompt collections: a folder with cases/<n>/case.yml (+ ATTRIBUTION.yml, image)"
    reads_folders = True

    def sniff_folder(self, folder: Path) -> bool:
        return (folder / "cases").is_dir()

    def read_folder(self, folder: Path, ctx: FileContext) -> Iterator[Item]:
        cases = folder / "cases"
        if not cases.is_dir():
            yield ctx.problem(None, "not a prompt collection: no cases/ folder")
            return
        root = folder.resolve()
        try:
            entries = list(cases.iterdir())
        except OSError as exc:
            yield ctx.problem("cases", f"cannot list the cases ({exc.strerror or exc})")
            return
        dirs = sorted((d for d in entries if d.is_dir() and not d.name.startswith(".")), key=_case_key)
        for case_dir in dirs:
            location = f"cases/{clean_text(case_dir.name)[0]}"
            yield from guarded(
                ctx,
                location,
                lambda case_dir=case_dir, location=location: self._case(root, case_dir, location, ctx),
            )

    def _case(self, root: Path, case_dir: Path, location: str, ctx: FileContext) -> Iterator[Item]:
        case_file = next((case_dir / n for n in ("case.yml", "case.yaml") if (case_dir / n).is_file()), None)
        if case_file is None:
            raise BadRecord("no case.yml in the case folder")
        loaded = _load_yaml(case_file)
        if not isinstance(loaded, dict):
            raise BadRecord(f"case.yml must be a mapping of fields, got {type(loaded).__name__}")
        repaired = [0]
        case = _jsonable(loaded, repaired)
        prompt = case.get("prompt")
        if not isinstance(prompt, str) or not prompt.strip():
            raise BadRecord(f"case.yml has no prompt (expected non-empty text, got {prompt!r})")
        notes: list[Item] = []
        attribution = None
        attribution_file = case_dir / "ATTRIBUTION.yml"
        if attribution_file.is_file():
            try:
                attribution = _jsonable(_load_yaml(attribution_file), repaired)
            except BadRecord as exc:
                notes.append(ctx.problem(location, f"ATTRIBUTION.yml ignored: {exc}", "note"))
        if repaired[0]:
            notes.insert(0, ctx.problem(location, surrogate_note(repaired[0]), "note"))
        images: list[Path] = []
        named = case.get("image")
        case_root = case_dir.resolve()
        if isinstance(named, str) and named.strip():
            try:
                candidate: Path | None = (case_dir / named.strip()).resolve()
            except (OSError, ValueError) as exc:  # a NUL in the name, a link loop
                candidate = None
                notes.append(
                    ctx.problem(location, f"image {named!r} cannot be used ({exc}); ignored", "note")
                )
            if candidate is None:
                pass
            elif not candidate.is_relative_to(case_root):
                notes.append(
                    ctx.problem(location, f"image {named!r} points outside the case folder; ignored", "note")
                )
            elif candidate.is_file():
                images.append(candidate)
        if not images:
            found = sorted(
                (p for p in case_dir.iterdir() if p.is_file() and p.suffix.lower() in IMAGE_SUFFIXES),
                key=lambda p: p.name,
            )
            for p in found:
                if p.resolve().is_relative_to(case_root):
                    images.append(p.resolve())
                else:  # a symbolic link out of the collection (a cloned repository can hold one)
                    notes.append(
                        ctx.problem(
                            location, f"{p.name} is a link to a file outside the case folder; ignored", "note"
                        )
                    )
        for image in list(images):  # a path that is not valid UTF-8 could be neither stored nor opened again
            if clean_text(str(image))[1]:
                images.remove(image)
                notes.append(
                    ctx.problem(
                        location,
                        f"image {clean_text(image.name)[0]!r}: its path is not valid UTF-8; ignored",
                        "note",
                    )
                )
        alt = _text(case, "alt_text") or _text(case, "alt_text_en") or None
        urls = _source_urls(case.get("source_links"))
        relative = [p.relative_to(root).as_posix() if p.is_relative_to(root) else str(p) for p in images]
        raw = {
            **case,
            "needs_input_image": bool(
                _text(case, "reference_note").strip() or _text(case, "reference_note_en").strip()
            ),
            "source_urls": urls,
            "example_images": relative,
            "collection": clean_text(root.name)[0],
            "case": clean_text(case_dir.name)[0],
            "case_dir": f"cases/{clean_text(case_dir.name)[0]}",
            "attribution": attribution,
        }
        author = case.get("author")
        post_id = f"collection:{clean_text(root.name)[0]}/{clean_text(case_dir.name)[0]}"
        yield from notes
        yield from build_post(
            ctx,
            location,
            raw,
            always_raw=True,
            id=post_id,
            platform="collection",
            url=urls[0] if urls else None,
            author=author if isinstance(author, str) and author else None,
            text=prompt.rstrip("\n"),
            media=tuple(make_media(path=str(p), type="image", alt_text=alt) for p in images),
            root_id=post_id,
        )
