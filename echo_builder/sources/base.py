"""Shared pieces of the source adapters: the problem record, the adapter interface, the registry and helpers.

An adapter turns one input format into :class:`~echo_builder.records.Post` records. It never raises on bad data:
it yields a :class:`RecordProblem` for each record it cannot read and goes on with the next one. Each record is
converted inside :func:`guarded`, which turns any exception (a wrong JSON type, a date that overflows once in UTC,
a count too large for 64 bits, an adapter bug) into one problem for that record. Files are opened,
decoded and parsed by :mod:`echo_builder.sources.reader`, which hands each adapter already-parsed JSON
:class:`Document` values (one per file, or one per line of a JSON Lines file); the collection adapter reads a
folder instead.
"""

from __future__ import annotations

import math
import re
from abc import ABC
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path
from types import MappingProxyType
from typing import Any, ClassVar, Literal

from pydantic import TypeAdapter, ValidationError

from echo_builder.errors import ConfigError, RecordError
from echo_builder.records import MediaRef, Post
from echo_builder.registry import BUILT_IN, Entry, Registry

__all__ = [
    "SOURCES",
    "BadRecord",
    "Document",
    "FileContext",
    "Item",
    "RecordProblem",
    "SourceAdapter",
    "SourceInfo",
    "as_count",
    "as_str",
    "build_post",
    "clean_json",
    "clean_text",
    "counts",
    "format_path",
    "get_dict",
    "get_list",
    "get_source",
    "guarded",
    "has_surrogate_escape",
    "join_location",
    "list_sources",
    "make_media",
    "parse_timestamp",
    "positive_int",
    "preview",
    "register_source",
    "registered_sources",
    "surrogate_note",
    "unescape_entities",
    "validation_summary",
]

ProblemLevel = Literal["error", "note"]


@dataclass(frozen=True)
class RecordProblem:
    """Something in the input that could not be read as given.

    Attributes:
        file: the file (or collection folder) as it was passed or found.
        location: where in it: ``"line 7"`` (JSON Lines), a JSON path such as ``"data[3]"`` or
            ``"line 2: includes.tweets[0]"``, a case folder such as ``"cases/12"``; ``None`` for the whole file.
        reason: what was expected and what was found.
        level: ``"error"`` when a record (or the whole file) was skipped; ``"note"`` when data was kept or an
            expected non-post was passed over (a deleted parent, a retweet wrapper, a post replying to itself).
    """

    file: str
    location: str | None
    reason: str
    level: ProblemLevel = "error"

    def __str__(self) -> str:
        where = self.file if self.location is None else f"{self.file}: {self.location}"
        return f"{where}: {self.level}: {self.reason}"


@dataclass(frozen=True)
class Document:
    """One parsed JSON value handed to an adapter.

    Attributes:
        location: ``""`` for a whole ``.json`` file, ``"line N"`` for a line of a JSON Lines file.
        value: the parsed value (dict, list, str, number, bool or None); ``None`` without parsing for adapters
            that set ``reads_line_text``.
        text: the line's text for JSON Lines input, else ``None``.
        repaired: how many strings of ``value`` held a lone UTF-16 surrogate, replaced by U+FFFD when parsed
            (the reader records a note for them).
    """

    location: str
    value: Any
    text: str | None = None
    repaired: int = 0


@dataclass
class FileContext:
    """What an adapter knows about the file being read.

    Attributes:
        file: the file or folder name used in problems.
        path: its path.
        keep_raw: store the source object in ``Post.raw`` (``False`` saves memory on large exports).
    """

    file: str
    path: Path
    keep_raw: bool = True

    def problem(self, location: str | None, reason: str, level: ProblemLevel = "error") -> RecordProblem:
        """A :class:`RecordProblem` for this file."""
        return RecordProblem(self.file, location, reason, level)


class BadRecord(Exception):
    """Raised inside an adapter when a record does not have the expected shape; becomes a RecordProblem."""


Item = Post | RecordProblem


class SourceAdapter(ABC):  # noqa: B024 - subclasses override one of two entry points
    """One input format -> :class:`Post` records.

    Subclasses set ``name`` and ``description``, and implement either :meth:`sniff` plus
    :meth:`parse_document` (JSON / JSON Lines formats) or, with ``reads_folders = True``, :meth:`sniff_folder`
    plus :meth:`read_folder`. Both entry points yield posts and :class:`RecordProblem` values in a deterministic
    order and never raise on bad data.
    """

    name: ClassVar[str] = ""
    description: ClassVar[str] = ""
    reads_folders: ClassVar[bool] = False
    #: JSON Lines input is handed over as unparsed line text (``Document.value`` is ``None``); the adapter parses
    #: and reports bad lines itself. Used by ``jsonl``, which validates each line straight from its JSON text.
    reads_line_text: ClassVar[bool] = False

    def sniff(self, value: Any) -> bool:
        """Whether ``value`` (the first JSON value of a file) looks like this format."""
        return False

    def sniff_folder(self, folder: Path) -> bool:
        """Whether ``folder`` is an input of this format (folder formats only)."""
        return False

    def parse_documents(self, documents: Iterable[Document], ctx: FileContext) -> Iterator[Item]:
        """Posts and problems of a whole file; by default :meth:`parse_document` on each document in turn."""
        for document in documents:
            yield from self.parse_document(document, ctx)

    def parse_document(self, document: Document, ctx: FileContext) -> Iterator[Item]:
        """Posts and problems of one parsed JSON value."""
        raise NotImplementedError(f"source {self.name!r} does not read JSON documents")

    def read_folder(self, folder: Path, ctx: FileContext) -> Iterator[Item]:
        """Posts and problems of a folder input (folder formats only)."""
        raise NotImplementedError(f"source {self.name!r} does not read folders")


@dataclass(frozen=True)
class SourceInfo:
    """What ``list_sources()`` shows for one registered adapter."""

    name: str
    description: str
    reads_folders: bool
    origin: str = BUILT_IN  # "built-in" or the plugin's distribution ("echo-mastodon 0.1")


def _entry(cls: type[SourceAdapter], origin: str, order: float | None = None) -> Entry[SourceAdapter]:
    return Entry(
        cls.name,
        f"{cls.__module__}:{cls.__qualname__}",
        str(cls.description or ""),
        None,
        origin,
        MappingProxyType({"reads_folders": bool(cls.reads_folders)}),
        order,
    )


def _check_adapter(cls: Any) -> type[SourceAdapter]:
    """``cls`` if it is a SourceAdapter subclass with a name; :class:`ConfigError` otherwise."""
    if not (isinstance(cls, type) and issubclass(cls, SourceAdapter)):
        raise ConfigError(
            f"expected a subclass of echo_builder.sources.SourceAdapter, got {type(cls).__name__} {cls!r}"
        )
    if not cls.name or not isinstance(cls.name, str):
        raise ConfigError(f"{cls.__qualname__} has no `name`; set the class attribute before registering")
    return cls


def _adopt(name: str, loaded: Any, origin: str) -> tuple[Entry[SourceAdapter], SourceAdapter]:
    """An ``echo_bench.sources`` entry point's object as an entry and its instance: it must be a SourceAdapter
    subclass named like the entry point that implements reading (``parse_document(s)``, or ``read_folder``)."""
    cls = _check_adapter(loaded)
    if cls.name != name:
        raise ConfigError(
            f"{cls.__qualname__}.name is {cls.name!r}; set it to the entry point's name {name!r}"
        )
    if cls.reads_folders:
        if cls.read_folder is SourceAdapter.read_folder:
            raise ConfigError(f"{cls.__qualname__} sets reads_folders but does not implement read_folder")
    elif cls.parse_document is SourceAdapter.parse_document and (
        cls.parse_documents is SourceAdapter.parse_documents
    ):
        raise ConfigError(f"{cls.__qualname__} implements neither parse_document nor parse_documents")
    return _entry(cls, origin), cls()


#: The modules of ``echo_builder.sources`` that declare no source format (discovery does not import them).
HELPER_MODULES = ("base", "hf", "loading", "prefilter", "reader", "streams")

#: Every source format: the built-ins (one module of ``echo_builder.sources`` each, found by
#: :func:`~echo_builder.registry.discover_modules` and registered with ``@register_source(order=N)``), adapters
#: registered with :func:`register_source` at run time, and plugins (entry-point group ``echo_bench.sources``).
#: Detection asks the built-ins by ``order``, then those registered without one (in registration order), then the
#: plugins by name. Objects are adapter instances; entries carry ``reads_folders`` in their fields.
SOURCES: Registry[SourceAdapter] = Registry(
    "source", adopt=_adopt, package="echo_builder.sources", helpers=HELPER_MODULES
)


def register_source(cls: type[SourceAdapter] | None = None, *, order: float | None = None) -> Any:
    """Class decorator, bare or with ``order``: register an adapter under ``cls.name``.

    Auto-detection asks the registered adapters in turn and takes the first that claims a file: the built-ins by
    ``order`` (lower first: ``jsonl`` is 10, ``x_api`` 20, ... ``collection`` 70), then adapters registered
    without an order in registration order, then plugins by name. A format whose files another format would
    also claim takes a lower number than that format.

    Raises:
        ConfigError: ``cls`` is not a :class:`SourceAdapter` subclass, its name is empty, the name is taken by
            another class, or another built-in has the same ``order``.
    """

    def decorate(adapter: type[SourceAdapter]) -> type[SourceAdapter]:
        _check_adapter(adapter)
        SOURCES.add(_entry(adapter, BUILT_IN, order), adapter())
        return adapter

    return decorate(cls) if cls is not None else decorate


def get_source(name: str) -> SourceAdapter:
    """The adapter registered as ``name``; raises :class:`ConfigError` listing the known names otherwise."""
    if not isinstance(name, str) or name not in SOURCES:
        broken = [p for p in SOURCES.problems() if p.name == name]
        raise ConfigError(
            f"unknown source format {name!r}; registered formats: {', '.join(sorted(SOURCES.names()))}"
            + (f" ({broken[0]})" if broken else "")
        )
    return SOURCES.get(name)


def registered_sources() -> list[SourceAdapter]:
    """Registered adapters in detection order: the built-ins by `order`, those registered without one, then plugins."""
    entries = sorted(SOURCES.entries(), key=lambda e: not e.builtin)  # stable: keeps registration order
    return [SOURCES.get(e.name) for e in entries]


def list_sources() -> list[SourceInfo]:
    """Every registered adapter (built-ins and plugins), sorted by name."""
    return [
        SourceInfo(e.name, e.description, bool(e.get_field("reads_folders", False)), e.origin)
        for e in sorted(SOURCES.entries(), key=lambda e: e.name)
    ]


# --------------------------------------------------------------------------------------------------- helpers


def format_path(path: Iterable[str | int]) -> str:
    """JSON path text for a sequence of keys and indices: ``("data", 3, "id")`` -> ``"data[3].id"``."""
    out: list[str] = []
    for key in path:
        if isinstance(key, int):
            out.append(f"[{key}]")
        else:
            out.append(f".{key}" if out else str(key))
    return "".join(out)


def join_location(prefix: str, path: str) -> str:
    """``"line 3"`` + ``"data[1]"`` -> ``"line 3: data[1]"``; an empty part is left out."""
    if prefix and path:
        return f"{prefix}: {path}"
    return prefix or path or "(top level)"


def unescape_entities(text: str) -> str:
    """Undo the HTML escaping X and Reddit apply to post text: ``&lt;``, ``&gt;`` and ``&amp;`` only.

    Other entities (``&#39;``, ``&quot;``) are not produced by these platforms and are left as typed; ``&amp;`` is
    replaced last so a literal ``&lt;`` typed by a user (sent as ``&amp;lt;``) comes back as ``&lt;``.
    """
    if "&" not in text:
        return text
    return text.replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&")


_DATETIME = TypeAdapter(datetime)
_MONTHS = {
    m: i
    for i, m in enumerate(
        ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"), 1
    )
}


def _twitter_time(text: str, what: str) -> datetime | None:
    """X's legacy format ``"Thu Apr 20 23:21:13 +0000 2023"`` (locale-independent), or ``None``.

    Raises :class:`BadRecord` when the time is well formed but falls outside ``datetime``'s range in UTC.
    """
    parts = text.split()
    if len(parts) != 6 or parts[1] not in _MONTHS:
        return None
    _, month, day, clock, offset, year = parts
    try:
        hh, mm, ss = (int(x) for x in clock.split(":"))
        sign = -1 if offset.startswith("-") else 1
        off = timedelta(hours=int(offset[1:3]), minutes=int(offset[3:5])) * sign
        local = datetime(int(year), _MONTHS[month], int(day), hh, mm, ss, tzinfo=timezone(off))
    except (ValueError, IndexError, OverflowError):
        return None
    return _to_utc(local, text, what)


def _to_utc(value: datetime, given: Any, what: str) -> datetime:
    """``value`` in UTC (naive means UTC); :class:`BadRecord` when the conversion leaves ``datetime``'s range
    (``9999-12-31T23:00:00-05:00``, ``0001-01-01T00:00:00+01:00``)."""
    if value.tzinfo is None:
        return value.replace(tzinfo=timezone.utc)
    try:
        return value.astimezone(timezone.utc)
    except (OverflowError, ValueError):
        raise BadRecord(
            f"{what} {preview(given)} is out of range: converted to UTC it falls outside years 1-9999"
        ) from None


def parse_timestamp(value: Any, what: str = "timestamp") -> datetime | None:
    """A UTC-aware datetime from an ISO 8601 string (``Z`` or offset; naive means UTC), X's legacy
    ``"Thu Apr 20 23:21:13 +0000 2023"`` format, or Unix seconds (int, float or digit string).

    ``None`` and ``""`` give ``None``. Raises :class:`BadRecord` for anything else, including dates that fall
    outside years 1-9999 once converted to UTC and numbers of seconds too large for a date.
    """
    if value is None or value == "":
        return None
    if isinstance(value, bool):
        raise BadRecord(f"{what} must be a date string or Unix seconds, got {value!r}")
    seconds: float | None = None
    if isinstance(value, (int, float)):
        try:
            seconds = float(value)
        except OverflowError:  # an integer beyond float's range
            raise BadRecord(f"{what} {preview(value)} is out of range for a date") from None
    elif isinstance(value, str):
        stripped = value.strip()
        try:
            seconds = float(stripped) if stripped.replace(".", "", 1).isdigit() else None
        except (ValueError, OverflowError):
            seconds = None
        if seconds is None:
            legacy = _twitter_time(stripped, what)
            if legacy is not None:
                return legacy
            try:
                parsed = _DATETIME.validate_python(stripped)
            except ValidationError:
                raise BadRecord(f"{what} {preview(value)} is not an ISO 8601 date or Unix seconds") from None
            return _to_utc(parsed, value, what)
    else:
        raise BadRecord(f"{what} must be a date string or Unix seconds, got {type(value).__name__}")
    if not math.isfinite(seconds):
        raise BadRecord(f"{what} {preview(value)} is not a finite number of seconds")
    try:
        return datetime.fromtimestamp(seconds, tz=timezone.utc)
    except (OverflowError, OSError, ValueError):
        raise BadRecord(f"{what} {preview(value)} is out of range for a date") from None


def as_str(value: Any, what: str, *, required: bool = False) -> str | None:
    """``value`` as a string id or text: str as is, int converted; ``None``/empty -> ``None`` (or BadRecord if required)."""
    if value is None or value == "":
        if required:
            raise BadRecord(f"missing {what}")
        return None
    if isinstance(value, bool) or not isinstance(value, (str, int)):
        raise BadRecord(f"{what} must be a string, got {type(value).__name__} {preview(value)}")
    return str(value)


#: the largest count kept: a signed 64-bit integer, what Parquet and SQLite columns hold
MAX_COUNT = 2**63 - 1


def as_count(value: Any, what: str) -> int | None:
    """A count from an int or a digit string (X sends view counts as strings); ``None`` if absent.

    Raises :class:`BadRecord` for other types and for counts above :data:`MAX_COUNT` (2**63 - 1). Negative
    integers are returned as given (``Post`` refuses them with a clear message).
    """
    if value is None:
        return None
    if isinstance(value, bool):
        raise BadRecord(f"{what} must be a count, got {value!r}")
    n: int | None = None
    if isinstance(value, float) and math.isinf(
        value
    ):  # also a JSON integer past 4,300 digits (read as a float)
        raise BadRecord(f"{what} {preview(value)} is out of range for a count (at most 2**63 - 1)")
    if isinstance(value, int):
        n = value
    elif isinstance(value, float) and value.is_integer():
        n = int(value)
    elif isinstance(value, str) and value.strip().isascii() and value.strip().isdigit():
        digits = value.strip().lstrip("0") or "0"
        if len(digits) > 19:  # int() of a 5,000-digit string raises; anything this long is out of range
            raise BadRecord(f"{what} {preview(value)} is out of range for a count (at most 2**63 - 1)")
        n = int(digits)
    if n is None:
        raise BadRecord(f"{what} must be a count, got {preview(value)}")
    if n > MAX_COUNT:
        raise BadRecord(f"{what} {preview(value)} is out of range for a count (at most 2**63 - 1)")
    return n


def counts(pairs: Iterable[tuple[str, Any, str]]) -> dict[str, int]:
    """Engagement dict from ``(key, value, source field name)`` triples; absent values are left out."""
    out: dict[str, int] = {}
    for key, value, source in pairs:
        n = as_count(value, source)
        if n is not None:
            out[key] = n
    return out


def preview(value: Any, limit: int = 60) -> str:
    """A short ``repr`` of ``value`` for messages (never raises: a value too deep to show gives its type)."""
    if isinstance(value, str) and len(value) > limit:
        value = value[: limit + 1]  # repr of a 30 MB string is not needed to show 60 characters
    try:
        text = repr(value)
    except (RecursionError, ValueError):
        return f"<{type(value).__name__}>"
    return clean_text(text if len(text) <= limit else text[:limit] + "...")[0]


def build_post(
    ctx: FileContext, location: str, raw: Any, *, always_raw: bool = False, **fields: Any
) -> Iterator[Item]:
    """Yield a validated :class:`Post` (or the problem that prevents it).

    ``raw`` is stored only when ``ctx.keep_raw`` (or ``always_raw``: for sources whose ``raw`` carries data later
    stages need, such as a collection's ``needs_input_image``); when only the raw object fails validation (nested
    deeper than pydantic's limit, a NaN, a non-string key) the post is kept without it and a note says so. A
    lone surrogate left in a string field is replaced by U+FFFD, with a note.
    """
    keep = ctx.keep_raw or always_raw
    repaired = 0
    for key, value in fields.items():  # parsed JSON and YAML were cleaned already; names of files were not
        if isinstance(value, str):
            fields[key], n = clean_text(value)
            repaired += n > 0
    if repaired:
        yield ctx.problem(location, surrogate_note(repaired), "note")
    try:
        yield Post(**fields, raw=raw if keep else None)
        return
    except ValidationError as exc:
        errors = exc.errors()
        if not (keep and raw is not None and errors and all(e["loc"][:1] == ("raw",) for e in errors)):
            yield ctx.problem(location, f"invalid post: {validation_summary(exc)}")
            return
    try:
        post = Post(**fields, raw=None)
    except ValidationError as exc:  # pragma: no cover - the same fields validated above apart from raw
        yield ctx.problem(location, f"invalid post: {validation_summary(exc)}")
        return
    yield ctx.problem(
        location,
        "raw source object is not storable as JSON (too deep or invalid); kept the post without it",
        "note",
    )
    yield post


def validation_summary(exc: ValidationError) -> str:
    """The first three errors of a pydantic ``ValidationError`` as ``field: message`` text."""
    parts = []
    for err in exc.errors()[:3]:
        loc = ".".join(str(p) for p in err["loc"][:4])
        parts.append(f"{loc}: {err['msg']}" if loc else err["msg"])
    more = len(exc.errors()) - 3
    return "; ".join(parts) + (f" (+{more} more)" if more > 0 else "")


def guarded(ctx: FileContext, location: str, make: Callable[[], Iterable[Item]]) -> Iterator[Item]:
    """Run ``make()`` and pass its items on; a record that cannot be converted becomes one problem at ``location``.

    Every exception but :class:`MemoryError` is caught: :class:`BadRecord` and :class:`RecordError` give their
    message; the errors that wrongly shaped JSON causes in plain Python access (``KeyError``, ``TypeError``,
    ``AttributeError``, ``ValueError``, ``OverflowError`` ...) give ``unexpected record shape (<type>: <message>)``.
    One record's problem never ends the reading of the records after it.
    """
    try:
        items = list(make())
    except BadRecord as exc:
        yield ctx.problem(location, str(exc))
        return
    except RecordError as exc:
        yield ctx.problem(location, str(exc))
        return
    except RecursionError:
        yield ctx.problem(location, "record nested too deeply to read")
        return
    except MemoryError:
        raise
    except Exception as exc:  # any per-record failure stays with its record
        yield ctx.problem(location, clean_text(f"unexpected record shape ({type(exc).__name__}: {exc})")[0])
        return
    yield from items


# ------------------------------------------------------------------------------- text that is not valid Unicode

# a \uD800-\uDFFF escape in JSON text that is not half of a pair: the only way a parsed JSON string can hold a
# surrogate, since the text itself was decoded as strict UTF-8 (which refuses encoded surrogates). A high half not
# followed by a low escape, or a low half not preceded by a high escape: what is left once the pairs are removed.
# An escaped backslash before "uD83D" can fake a pair (a real lone low half after the text \\uD83D), so text
# holding "\\u" is walked instead.
_SURROGATE_PAIR_ESCAPE = re.compile(r"\\u[dD][89abAB][0-9a-fA-F]{2}\\u[dD][c-fC-F][0-9a-fA-F]{2}")
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F][0-9a-fA-F]{2}")
_ESCAPED_BACKSLASH_U = re.compile(r"\\\\u")
_SURROGATE = re.compile("[\ud800-\udfff]")
REPLACEMENT = "\ufffd"


def has_surrogate_escape(text: str) -> bool:
    """Whether parsing JSON ``text`` can give a string holding a lone surrogate.

    A cheap filter on the text: ``False`` guarantees :func:`json.loads` gives none; ``True`` means look. Valid
    pairs such as ``\\ud83d\\ude00`` (what ``ensure_ascii`` encoders write for an emoji) do not count, so ordinary
    exports are not walked.
    """
    if "\\u" not in text or _SURROGATE_ESCAPE.search(text) is None:
        return False
    if _ESCAPED_BACKSLASH_U.search(text) is not None:
        return True
    return _SURROGATE_ESCAPE.search(_SURROGATE_PAIR_ESCAPE.sub("", text)) is not None


def clean_text(text: str) -> tuple[str, int]:
    """``text`` with every lone UTF-16 surrogate (U+D800-U+DFFF) replaced by U+FFFD, and how many were replaced.

    A lone surrogate cannot be encoded as UTF-8, so it would break every later writer (JSON Lines, Parquet, the
    call cache); it reaches Python strings from JSON escapes (``"\\ud83d"``), YAML escapes or file names that are
    not valid UTF-8 (``surrogateescape``).
    """
    if text.isascii() or _SURROGATE.search(text) is None:
        return text, 0
    return _SURROGATE.subn(REPLACEMENT, text)


def clean_json(value: Any) -> tuple[Any, int]:
    """``value`` (parsed JSON or YAML: dicts, lists, scalars) with lone surrogates replaced in every string,
    keys included, and the number of strings changed. Lists and dicts are changed in place (dicts rebuilt only
    when a key changes); iterative, so deep values cannot exhaust the Python stack."""
    if isinstance(value, str):
        text, n = clean_text(value)
        return text, int(n > 0)
    changed = 0
    stack = [value]
    while stack:
        node = stack.pop()
        if isinstance(node, dict) and any(
            isinstance(k, str) and not k.isascii() and _SURROGATE.search(k) for k in node
        ):
            items = list(node.items())
            node.clear()
            for k, v in items:
                if isinstance(k, str):
                    k, n = clean_text(k)
                    changed += n > 0
                node[k] = v
        if isinstance(node, (dict, list)):
            for k, v in list(node.items() if isinstance(node, dict) else enumerate(node)):
                if isinstance(v, str):
                    text, n = clean_text(v)
                    if n:
                        node[k] = text
                        changed += 1
                elif isinstance(v, (dict, list)):
                    stack.append(v)
    return value, changed


def surrogate_note(count: int) -> str:
    """The note recorded when :func:`clean_json` repaired ``count`` strings."""
    return (
        f"{count} string{'s' if count != 1 else ''} held a lone UTF-16 surrogate (such as a \\ud83d escape "
        "without its pair), which is not valid Unicode; replaced by U+FFFD and the data kept"
    )


def get_dict(obj: Any, key: str) -> dict[str, Any]:
    """``obj[key]`` when both are dicts, else ``{}`` (absent optional objects)."""
    if isinstance(obj, dict):
        value = obj.get(key)
        if isinstance(value, dict):
            return value
    return {}


def get_list(obj: Any, key: str) -> list[Any]:
    """``obj[key]`` when it is a list, else ``[]``."""
    if isinstance(obj, dict):
        value = obj.get(key)
        if isinstance(value, list):
            return value
    return []


def positive_int(value: Any) -> int | None:
    """A pixel size: a positive int (or integral float/digit string), else ``None`` (sizes are optional)."""
    try:
        n = as_count(value, "size")
    except BadRecord:
        return None
    return n if n is not None and 1 <= n <= 2**31 - 1 else None


_MEDIA_TYPES = frozenset({"photo", "video", "animated_gif", "image"})


def make_media(
    *,
    url: Any = None,
    media_id: Any = None,
    type: Any = "image",
    alt_text: Any = None,
    width: Any = None,
    height: Any = None,
    path: str | None = None,
) -> MediaRef:
    """A :class:`MediaRef` from loosely typed platform fields.

    Strings are kept as given (empty -> ``None``); a type outside ``photo``/``video``/``animated_gif`` becomes
    the generic ``image``; sizes that are not positive integers are dropped (they are optional and re-measured
    after download). Raises :class:`BadRecord` when an id or URL is not a string.
    """
    return MediaRef(
        url=as_str(url, "media url"),
        media_id=as_str(media_id, "media id"),
        type=type if type in _MEDIA_TYPES else "image",
        alt_text=alt_text if isinstance(alt_text, str) and alt_text else None,
        width=positive_int(width),
        height=positive_int(height),
        path=path,
    )
