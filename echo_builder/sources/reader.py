"""Reading exports into posts: files and folders in, :class:`SourceReport` out.

:func:`read_posts` is the entry point of the ``collect`` stage (Flow 1 in ``spec/ECHO.md``). It expands folders,
decodes and parses each file once, picks the adapter (``format=`` or auto-detection), collects the posts and the
problems, drops repeated post ids (the first occurrence wins) and flags posts that reply to themselves.

File handling:

- ``.json``: one JSON value (a file that turns out to hold several values, one per line, is read as JSON Lines);
  ``.jsonl`` / ``.ndjson``: one JSON value per line (blank lines ignored, ``\\r\\n`` accepted), parsed one
  at a time as the adapter reads; any other extension given explicitly: read as ``.json``. A leading UTF-8
  byte-order mark is ignored. The whole file is read and decoded in memory first: files over
  :data:`MAX_FILE_BYTES` (2 GiB) are refused with a problem saying so; decompress ``.zst``/``.gz`` dumps and split
  very large ones before reading. In a JSON Lines file, a line that is not UTF-8 is one problem for that line.
- Only regular files are read. A named pipe, a device (``/dev/zero``) or a socket, given or found in a folder, or
  a link to one, is one problem naming it, decided by ``stat`` alone: it is never opened (a pipe would block the
  run, a device would be read until memory runs out).
- A folder is an input of a folder format when an adapter claims it (a prompt collection has ``cases/``);
  otherwise its ``.json``/``.jsonl``/``.ndjson`` files are read in sorted order, descending into subfolders
  (hidden entries and symlinked folders are skipped; other files are listed in ``skipped_files``).
- The format is voted by the first 50 records (lines, or items of a top-level list): a malformed first record
  does not make a file of good ones unreadable.
- A lone UTF-16 surrogate in a parsed string (from a ``"\\ud83d"`` escape without its pair), keys included, is
  replaced by U+FFFD with a note for its line or file: this is the one place where text enters from JSON sources,
  so every later writer (stage files, Parquet, the call cache) gets valid UTF-8. File and folder names that are not
  UTF-8 are shown with U+FFFD in problems and summaries.
- A whole file that cannot be read (missing, empty, not UTF-8, truncated or invalid JSON, nested too deeply for
  the parser, unknown format) is one :class:`RecordProblem` with ``location=None``; the other files still load.
  Inside a file, an exception while reading one document (a line, or the whole value) is a problem for that
  document; a line that yields neither a post nor a problem gets a note (``[]`` or ``{}`` on a line).
"""

from __future__ import annotations

import json
import logging
import os
import re
import stat
import sys
from collections import deque
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from echo_builder.errors import RecordError
from echo_builder.records import Post
from echo_builder.sources.base import (
    Document,
    FileContext,
    RecordProblem,
    SourceAdapter,
    clean_json,
    clean_text,
    get_source,
    has_surrogate_escape,
    registered_sources,
    surrogate_note,
)

__all__ = ["FileSummary", "SourceReport", "detect_format", "read_posts"]

log = logging.getLogger(__name__)

LINE_EXTENSIONS = frozenset({".jsonl", ".ndjson"})
JSON_EXTENSIONS = frozenset({".json"})
KNOWN_EXTENSIONS = LINE_EXTENSIONS | JSON_EXTENSIONS


@dataclass(frozen=True)
class FileSummary:
    """Per-input counts: ``posts`` kept (after cross-file de-duplication), ``errors`` (records or the file
    skipped), ``notes`` and ``duplicates`` (posts dropped because an earlier input had the same id)."""

    path: str
    format: str | None
    posts: int
    errors: int
    notes: int
    duplicates: int


@dataclass
class SourceReport:
    """What :func:`read_posts` found.

    Attributes:
        posts: every post once, in input order (files in the order given, folders sorted, records in file order).
        problems: errors (skipped records or files) and notes, in the same order.
        duplicates: how many posts were dropped because their id was already read.
        duplicate_ids: id -> number of dropped repeats.
        files: one :class:`FileSummary` per input file or folder.
        skipped_files: files inside given folders that were not read (unknown extension).
    """

    posts: list[Post] = field(default_factory=list)
    problems: list[RecordProblem] = field(default_factory=list)
    duplicates: int = 0
    duplicate_ids: dict[str, int] = field(default_factory=dict)
    files: list[FileSummary] = field(default_factory=list)
    skipped_files: list[str] = field(default_factory=list)

    @property
    def errors(self) -> list[RecordProblem]:
        """Problems that made a record or a file be skipped."""
        return [p for p in self.problems if p.level == "error"]

    @property
    def notes(self) -> list[RecordProblem]:
        """Informational problems: data kept as given, or expected non-posts passed over."""
        return [p for p in self.problems if p.level == "note"]

    def summary(self) -> str:
        """A Markdown table of the per-file counts and the totals."""
        rows = ["| input | format | posts | errors | notes | duplicates |", "|---|---|---|---|---|---|"]
        for f in self.files:
            rows.append(
                f"| {f.path} | {f.format or '?'} | {f.posts} | {f.errors} | {f.notes} | {f.duplicates} |"
            )
        rows.append(
            f"| **total** | | {len(self.posts)} | {len(self.errors)} | {len(self.notes)} | {self.duplicates} |"
        )
        return "\n".join(rows)


class _Unreadable(Exception):
    pass


# ------------------------------------------------------------------------------------------------ loading


#: the largest source file read (sources are read whole into memory; larger dumps must be split first)
MAX_FILE_BYTES = 2 * 1024**3


def _kind(mode: int) -> str:
    """What a non-regular file is, in words."""
    if stat.S_ISFIFO(mode):
        return "a named pipe (FIFO)"
    if stat.S_ISCHR(mode):
        return "a character device"
    if stat.S_ISBLK(mode):
        return "a block device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISDIR(mode):
        return "a folder"
    return "not a regular file"


def _not_regular(path: Path) -> str | None:
    """Why ``path`` (symbolic links followed) cannot be a source file, or ``None`` for a regular file.

    Only ``stat`` is called: a named pipe or a device is never opened (opening can block or have effects).
    """
    try:
        mode = path.stat().st_mode
    except OSError as exc:
        return f"cannot read the file ({exc.strerror or exc})"
    if stat.S_ISREG(mode):
        return None
    return f"{_kind(mode)}, not a regular file; only regular files and folders are read as sources"


def _too_large(size: int) -> str:
    return (
        f"file is {size:,} bytes, over the {MAX_FILE_BYTES:,}-byte limit for one source file (sources are read "
        "whole into memory); split it into smaller JSON Lines files and pass those"
    )


def _no_memory(size: int, step: str) -> str:
    return (
        f"file is {size:,} bytes and memory ran out while {step} it (sources are read whole into memory); split it "
        "into smaller JSON Lines files and pass those"
    )


def _read_bytes(path: Path) -> bytes | bytearray:
    """The bytes of a regular file, at most :data:`MAX_FILE_BYTES`.

    The file is opened non-blocking and checked again with ``fstat`` (a file swapped for a named pipe after the
    first check must not block the run); reading stops one byte past the limit.
    """
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(path, flags)
    except OSError as exc:
        raise _Unreadable(f"cannot read the file ({exc.strerror or exc})") from None
    with os.fdopen(fd, "rb") as fh:
        try:
            info = os.fstat(fh.fileno())
            if not stat.S_ISREG(info.st_mode):
                raise _Unreadable(
                    f"{_kind(info.st_mode)}, not a regular file; only regular files and folders are read as sources"
                )
            if info.st_size > MAX_FILE_BYTES:
                raise _Unreadable(_too_large(info.st_size))
            # the size stat reports, then on in chunks (a file that grows, or reports 0 as /proc files do); never a
            # buffer of the cap's size up front
            buffer = bytearray(fh.read(min(info.st_size, MAX_FILE_BYTES) + 1))
            while len(buffer) <= MAX_FILE_BYTES:
                chunk = fh.read(min(1 << 24, MAX_FILE_BYTES + 1 - len(buffer)))
                if not chunk:
                    break
                buffer += chunk
            data = buffer
        except OSError as exc:
            raise _Unreadable(f"cannot read the file ({exc.strerror or exc})") from None
        except MemoryError:
            raise _Unreadable(_no_memory(info.st_size, "reading")) from None
    if len(data) > MAX_FILE_BYTES:  # grew while being read
        raise _Unreadable(_too_large(len(data)))
    return data


def _decode(path: Path) -> tuple[str, dict[int, str]]:
    """The file's text, and for a JSON Lines file whose some lines are not UTF-8, those lines' numbers and why
    (they are left empty in the text: one bad line is one problem, not a lost file)."""
    data = _read_bytes(path)
    if not data.strip():
        raise _Unreadable("file is empty; expected JSON or JSON Lines")
    if data.startswith(b"\xef\xbb\xbf"):
        data = data[3:]
    try:
        return data.decode("utf-8"), {}
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        whole = _Unreadable(
            f"file is not valid UTF-8 (byte 0x{data[exc.start]:02x} at offset {exc.start}, line {line}); "
            "re-encode it as UTF-8"
        )
        if path.suffix.lower() not in LINE_EXTENSIONS:
            raise whole from None
    except MemoryError:
        raise _Unreadable(_no_memory(len(data), "decoding")) from None
    texts: list[str] = []
    bad: dict[int, str] = {}
    for number, raw in enumerate(data.split(b"\n"), start=1):
        try:
            texts.append(raw.decode("utf-8"))
        except UnicodeDecodeError as exc:
            texts.append("")
            bad[number] = (
                f"line is not valid UTF-8 (byte 0x{raw[exc.start]:02x} at column {exc.start + 1}); skipped"
            )
    if not any(t.strip() for t in texts):  # no line is readable: the file is in another encoding
        raise whole from None
    return "\n".join(texts), bad


def _huge_int(digits: str) -> int | float:
    """A JSON integer literal as ``int``, or as ``float`` (``inf`` past float's range) when it has more digits than
    Python converts (4,300 by default): such a number then fails its record's checks instead of the parser."""
    limit = sys.get_int_max_str_digits() if hasattr(sys, "get_int_max_str_digits") else 0
    return float(digits) if limit and len(digits.lstrip("-")) > limit else int(digits)


def _parsed(text: str) -> tuple[Any, int]:
    """``json.loads(text)`` with lone surrogates replaced by U+FFFD, and how many strings were repaired.

    An integer with thousands of digits makes ``json.loads`` raise a plain ``ValueError`` (not a decode error)
    that would lose the whole file; the text is then parsed again with such integers read as floats."""
    try:
        value = json.loads(text)
    except json.JSONDecodeError:
        raise
    except ValueError as exc:
        if "digits" not in str(exc):
            raise
        value = json.loads(text, parse_int=_huge_int)
    if has_surrogate_escape(text):
        return clean_json(value)
    return value, 0


# a JSON string, its closing quote optional: strings are consumed left to right and never rescanned from a quote
# inside one (a pattern requiring the closing quote restarts at every escaped quote of an unclosed string: quadratic)
_JSON_STRING = re.compile(r'"(?:[^"\\]|\\.)*("?)', re.S)


def _unclosed(text: str) -> bool:
    """Whether ``text`` ends inside a string or with brackets still open (a cut-off file)."""
    outside: list[str] = []
    position = 0
    for match in _JSON_STRING.finditer(text):
        if not match.group(1):  # a string that never ends
            return True
        outside.append(text[position : match.start()])
        position = match.end()
    rest = "".join(outside) + text[position:]
    return rest.count("[") + rest.count("{") > rest.count("]") + rest.count("}")


def _json_error(exc: json.JSONDecodeError, text: str, where: str) -> str:
    position = f"{exc.msg} at line {exc.lineno} column {exc.colno}"
    if exc.pos >= len(text.rstrip()) or _unclosed(text):
        return f"{where} ends before its JSON value is complete (truncated?): {position}"
    return f"{where} is not valid JSON: {position}"


_TOO_DEEP = "JSON nested deeper than the parser allows (about 1,000 levels); not a plausible export"


def _whole(text: str) -> Document | None:
    """The file as one JSON value; ``None`` when it holds several values (then it is JSON Lines)."""
    try:
        value, repaired = _parsed(text)
        return Document("", value, repaired=repaired)
    except RecursionError:
        raise _Unreadable(_TOO_DEEP) from None
    except json.JSONDecodeError as exc:
        if exc.msg == "Extra data" and "\n" in text[: exc.pos + 1]:
            return None
        raise _Unreadable(_json_error(exc, text, "file")) from None
    except MemoryError:
        raise _Unreadable(_no_memory(len(text), "parsing")) from None


def _parse_line(file: str, number: int, line: str) -> Document | RecordProblem:
    location = f"line {number}"
    try:
        value, repaired = _parsed(line)
        return Document(location, value, line, repaired)
    except RecursionError:
        return RecordProblem(file, location, _TOO_DEEP)
    except json.JSONDecodeError as exc:
        return RecordProblem(file, location, f"not valid JSON: {exc.msg} at column {exc.colno}")


#: how many records (lines, or items of a top-level list) are tried when detecting a file's format: a first
#: record that is malformed must not make a file of good records unreadable
_SNIFF_RECORDS = 50


@dataclass
class _Loaded:
    """A decoded file: one whole JSON ``document``, or the non-blank ``lines`` of a JSON Lines file (parsed
    one at a time while reading, so a large dump never holds every parsed line at once); ``candidates`` are the
    first records that parse (the first lines, or the first items of a top-level list, else the whole value),
    which vote on the format."""

    document: Document | None
    lines: list[tuple[int, str | None]]
    candidates: list[Any]
    undecodable: dict[int, str] = field(default_factory=dict)


def _load(path: Path) -> _Loaded:
    text, undecodable = _decode(path)
    if path.suffix.lower() not in LINE_EXTENSIONS:
        document = _whole(text)
        if document is not None:
            value = document.value
            items = value[:_SNIFF_RECORDS] if isinstance(value, list) and value else [value]
            return _Loaded(document, [], items)
    # split on "\n" only: U+2028 and other Unicode line breaks may appear unescaped inside JSON strings
    lines: list[tuple[int, str | None]] = [
        (n, stripped if n not in undecodable else None)
        for n, line in enumerate(text.split("\n"), start=1)
        if (stripped := line.strip()) or n in undecodable
    ]
    del text
    first_problem: RecordProblem | None = None
    candidates: list[Any] = []
    for number, line in lines:
        if line is None:
            continue
        parsed = _parse_line(str(path), number, line)
        if isinstance(parsed, Document):
            candidates.append(parsed.value)
            if len(candidates) >= _SNIFF_RECORDS:
                break
        elif first_problem is None:
            first_problem = parsed
    if candidates:
        return _Loaded(None, lines, candidates, undecodable)
    reason = (
        f"{first_problem.location}: {first_problem.reason}"
        if first_problem is not None
        else "no line to parse"
    )
    raise _Unreadable(f"no line of this JSON Lines file could be parsed (first, {reason})")


def _sniff(value: Any) -> str | None:
    """The first registered file format whose ``sniff`` claims ``value``; an adapter whose ``sniff`` raises (a bug
    in a plugin, a value it did not expect) does not claim it, and the next one is asked."""
    for adapter in registered_sources():
        if adapter.reads_folders:
            continue
        if _asks(adapter, adapter.sniff, value):
            return adapter.name
    return None


def _asks(adapter: SourceAdapter, sniff: Any, value: Any) -> bool:
    """``sniff(value)`` as a bool; ``False`` (logged once per adapter) when it raises anything but MemoryError."""
    try:
        return bool(sniff(value))
    except (RecursionError, TypeError, AttributeError, KeyError, ValueError):  # a value of another shape
        return False
    except MemoryError:
        raise
    except Exception as exc:  # one adapter's detection bug must not stop the reading of any input
        if adapter.name not in _SNIFF_FAILED:
            _SNIFF_FAILED.add(adapter.name)
            log.warning(
                "source format %r: its detection raised %s: %s; it is passed over for such inputs",
                adapter.name,
                type(exc).__name__,
                exc,
            )
        return False


_SNIFF_FAILED: set[str] = set()


def _describe(value: Any) -> str:
    if isinstance(value, dict):
        keys = sorted(str(k) for k in value)[:8]
        return f"an object with keys {keys}"
    if isinstance(value, list):
        return f"a list of {len(value)} items"
    return f"a JSON {type(value).__name__}"


def _folder_format(folder: Path) -> str | None:
    for adapter in registered_sources():
        if adapter.reads_folders and _asks(adapter, adapter.sniff_folder, folder):
            return adapter.name
    return None


def _format_of(candidates: list[Any]) -> str:
    """The format most of the candidate records are claimed by (the earliest claimed on a tie): one malformed
    record, even one that looks like another format, does not decide the format of a file of good ones."""
    votes: dict[str, int] = {}
    for value in candidates:
        name = _sniff(value)
        if name is not None:
            votes[name] = votes.get(name, 0) + 1
    if votes:  # dicts keep the order names were first claimed in, and max keeps the first of equal counts
        return max(votes, key=lambda n: votes[n])
    formats = ", ".join(a.name for a in registered_sources() if not a.reads_folders)
    first = candidates[0] if candidates else None
    raise _Unreadable(
        f"unknown format: the first record is {_describe(first)}, which matches none of "
        f"{formats}; pass format=... to choose one"
    )


def detect_format(path: str | os.PathLike[str]) -> str:
    """The registered format name that ``path`` (a file or a folder) would be read with.

    Files are decoded and parsed; the first record decides. Raises :class:`RecordError` when the file cannot be
    read or no adapter recognises it, with the reason.
    """
    p = Path(path)
    if p.is_dir():
        name = _folder_format(p)
        if name is None:
            raise RecordError(
                f"{path}: folder is not an input of any folder format (a collection needs cases/)"
            )
        return name
    why = _not_regular(p)
    if why is not None:  # never opened
        raise RecordError(f"{path}: {why}")
    try:
        return _format_of(_load(p).candidates)
    except _Unreadable as exc:
        raise RecordError(f"{path}: {exc}") from None


# ------------------------------------------------------------------------------------------------ reading


@dataclass
class _Unit:
    path: Path
    label: str
    folder: bool


def _walk(folder: Path) -> Iterator[tuple[Path, bool] | str | RecordProblem]:
    """Files to read (``(path, False)``), folder inputs (``(path, True)``), skipped file names, and a problem for
    each entry with a source extension that is not a regular file (a named pipe, a device, a link to one), in
    sorted depth-first order. Entries are classified by ``stat`` alone; nothing is opened."""
    stack: list[Iterator[os.DirEntry[str]]] = [iter(sorted(os.scandir(folder), key=lambda e: e.name))]
    while stack:
        entry = next(stack[-1], None)
        if entry is None:
            stack.pop()
            continue
        if entry.name.startswith("."):
            continue
        path = Path(entry.path)
        if entry.is_dir(follow_symlinks=False):
            if _folder_format(path) is not None:
                yield (path, True)
            else:
                try:
                    stack.append(iter(sorted(os.scandir(path), key=lambda e: e.name)))
                except OSError:
                    yield _label(path)
        elif path.suffix.lower() not in KNOWN_EXTENSIONS:
            yield _label(path)
        elif entry.is_file():
            yield (path, False)
        else:
            yield RecordProblem(_label(path), None, _not_regular(path) or "not a regular file")


def _label(path: str | os.PathLike[str]) -> str:
    """A path as shown in problems: a name that is not valid UTF-8 gets U+FFFD for its undecodable bytes."""
    return clean_text(os.fspath(path) if not isinstance(path, bytes) else os.fsdecode(path))[0]


def _as_paths(
    paths: str | os.PathLike[str] | Iterable[str | os.PathLike[str]],
) -> list[str | os.PathLike[str]]:
    if isinstance(paths, (str, os.PathLike)):
        return [paths]
    return list(paths)


def _read_unit(unit: _Unit, fmt: str | None, keep_raw: bool) -> tuple[str | None, list[Post | RecordProblem]]:
    """Posts and problems of one file or folder input, and the format used (``None`` when none was found)."""
    ctx = FileContext(unit.label, unit.path, keep_raw)
    items: list[Post | RecordProblem] = []
    name = fmt
    try:
        if unit.folder:
            name = fmt or _folder_format(unit.path)
            if name is None:
                raise _Unreadable("folder is not an input of any folder format (a collection needs cases/)")
            adapter: SourceAdapter = get_source(name)
            if not adapter.reads_folders:
                raise _Unreadable(f"format {name!r} reads files, not folders")
            for item in adapter.read_folder(unit.path, ctx):
                items.append(item)
            return name, items
        loaded = _load(unit.path)
        name = fmt or _format_of(loaded.candidates)
        adapter = get_source(name)
        if adapter.reads_folders:
            raise _Unreadable(f"format {name!r} reads folders, not files")
        lines = deque(loaded.lines)  # consumed from the front: each line is freed once read
        del loaded.lines[:]

        def docs() -> Iterator[Document]:
            if loaded.document is not None:
                yield loaded.document
            while lines:
                number, line = lines.popleft()
                if line is None:  # bytes that are not UTF-8: this line only
                    items.append(ctx.problem(f"line {number}", loaded.undecodable[number]))
                    continue
                if adapter.reads_line_text:  # the adapter parses and validates the text itself
                    yield Document(f"line {number}", None, line)
                    continue
                parsed = _parse_line(unit.label, number, line)
                if isinstance(parsed, RecordProblem):  # an unparseable line, kept in file order
                    items.append(parsed)
                else:
                    yield parsed

        if type(adapter).parse_documents is SourceAdapter.parse_documents:
            # one document at a time: a failure inside one (an adapter bug) loses no other document of the file
            for document in docs():
                if document.repaired:
                    items.append(
                        ctx.problem(document.location or None, surrogate_note(document.repaired), "note")
                    )
                produced = len(items)
                try:
                    for item in adapter.parse_document(document, ctx):
                        items.append(item)
                    if len(items) == produced:  # a record never vanishes without a word: [] or {} on a line
                        what = "line" if document.location else "file"
                        items.append(
                            ctx.problem(
                                document.location or None,
                                f"this {what} holds no post ({_describe(document.value)}); nothing read",
                                "note",
                            )
                        )
                except MemoryError:
                    raise
                except RecursionError:
                    items.append(ctx.problem(document.location or None, "record nested too deeply to read"))
                except Exception as exc:
                    reason = clean_text(f"reading stopped by an unexpected {type(exc).__name__}: {exc}")[0]
                    items.append(ctx.problem(document.location or None, reason))
            return name, items
        for item in adapter.parse_documents(docs(), ctx):
            items.append(item)
        return name, items
    except _Unreadable as exc:
        return name, [*items, ctx.problem(None, str(exc))]
    except RecursionError:
        return name, [*items, ctx.problem(None, "input nested too deeply to read")]
    except MemoryError:
        return name, [*items, ctx.problem(None, "out of memory while reading; split the file")]
    except Exception as exc:  # an adapter bug must not lose the other files; the problem names it
        reason = clean_text(f"reading stopped by an unexpected {type(exc).__name__}: {exc}")[0]
        return name, [*items, ctx.problem(None, reason)]


def read_posts(
    paths: str | os.PathLike[str] | Iterable[str | os.PathLike[str]],
    *,
    format: str | None = None,
    keep_raw: bool = True,
) -> SourceReport:
    """Read posts from export files and folders.

    Args:
        paths: one path or several; each a file or a folder (see the module docstring). Order is kept.
        format: a registered source name (``x_api``, ``x_graphql``, ``reddit``, ``bluesky``, ``collection``,
            ``jsonl`` or a plugin's) to use for every input instead of auto-detection.
        keep_raw: store each source object in ``Post.raw`` (``False`` saves memory).

    Returns:
        A :class:`SourceReport`: each post id once (the first occurrence wins, later ones are counted in
        ``duplicates``), problems with file and location, per-file counts. A post whose ``reply_to_id`` is its
        own id is kept as given, with a note (the threads stage treats it as a root).

    Raises:
        ConfigError: ``format`` is not a registered source name. Bad data never raises; it is reported.
    """
    if format is not None:
        get_source(format)
    report = SourceReport()
    seen: set[str] = set()
    units: list[_Unit] = []
    for given in _as_paths(paths):
        path = Path(os.fsdecode(given) if isinstance(given, bytes) else given)
        label = _label(path if isinstance(given, bytes) else str(given))
        if path.is_dir():
            found_fmt = _folder_format(path)
            if (format and get_source(format).reads_folders) or (format is None and found_fmt):
                units.append(_Unit(path, label, True))
                continue
            if found_fmt:  # a file format forced on a folder input
                reason = f"format {format!r} reads files, but this folder is a {found_fmt!r} input"
                report.problems.append(RecordProblem(label, None, reason))
                report.files.append(FileSummary(label, format, 0, 1, 0, 0))
                continue
            try:
                for found in _walk(path):
                    if isinstance(found, str):
                        report.skipped_files.append(found)
                    elif isinstance(found, RecordProblem):
                        report.problems.append(found)
                        report.files.append(FileSummary(found.file, format, 0, 1, 0, 0))
                    else:
                        units.append(_Unit(found[0], _label(found[0]), found[1]))
            except OSError as exc:
                report.problems.append(
                    RecordProblem(label, None, f"cannot list the folder ({exc.strerror or exc})")
                )
                report.files.append(FileSummary(label, format, 0, 1, 0, 0))
        elif path.exists():
            why = _not_regular(path)
            if why is None:
                units.append(_Unit(path, label, False))
            else:  # a named pipe would block the run, /dev/zero would fill the memory: never opened
                report.problems.append(RecordProblem(label, None, why))
                report.files.append(FileSummary(label, format, 0, 1, 0, 0))
        else:
            report.problems.append(RecordProblem(label, None, "no such file or folder"))
            report.files.append(FileSummary(label, format, 0, 1, 0, 0))
    for unit in units:
        name, items = _read_unit(unit, format, keep_raw)
        kept = errors = notes = dups = 0
        for item in items:
            if isinstance(item, RecordProblem):
                report.problems.append(item)
                errors += item.level == "error"
                notes += item.level == "note"
                continue
            if item.id in seen:
                dups += 1
                report.duplicate_ids[item.id] = report.duplicate_ids.get(item.id, 0) + 1
                continue
            seen.add(item.id)
            if item.reply_to_id is not None and item.reply_to_id == item.id:
                report.problems.append(
                    RecordProblem(
                        unit.label,
                        item.id,
                        "post replies to itself (reply_to_id == id); kept as given, the threads stage treats "
                        "it as a root",
                        "note",
                    )
                )
                notes += 1
            report.posts.append(item)
            kept += 1
        report.duplicates += dups
        report.files.append(FileSummary(unit.label, name, kept, errors, notes, dups))
    return report
