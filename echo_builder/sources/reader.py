"""Reading exports into posts: files and folders in, :class:`SourceReport` out.

:func:`read_posts` is the entry point of the ``collect`` stage (Flow 1 in ``spec/ECHO.md``). It expands folders,
decodes and parses each file once, picks the adapter (``format=`` or auto-detection), collects the posts and the
problems, drops repeated post ids (the first occurrence wins) and flags posts that reply to themselves.

File handling:

- ``.json``: one JSON value (a file that turns out to hold several values, one per line, is read as JSON Lines);
  ``.jsonl`` / ``.ndjson``: one JSON value per line (blank lines ignored, ``\\r\\n`` accepted), parsed one
  at a time as the adapter reads; any other extension given explicitly: read as ``.json``. A leading UTF-8
  byte-order mark is ignored. In a JSON Lines file, a line that is not UTF-8 is one problem for that line.
- Compressed files (``.zst``, ``.gz``, ``.bz2``, ``.xz``, or any name whose first bytes are one of these) are
  decompressed on the fly by :mod:`echo_builder.sources.streams` (zstd long windows, a decompression-bomb guard);
  the name without the compression suffix decides as above (``RC_2023-01.zst``: by content). A truncated or
  corrupt stream keeps the records before the damage and is one problem located at the line it stopped in.
- Streaming: content up to :data:`WHOLE_BYTES` (64 MiB, decompressed) is read as one buffer; past it, JSON Lines
  are read line by line and a top-level list item by item (``JSONDecoder.raw_decode`` over a sliding buffer,
  items located ``[i]``), so memory is bounded by the posts kept, not the file. A single JSON value that is not a
  list is held whole, up to :data:`MAX_FILE_BYTES` (2 GiB), as is each line or item.
- Only regular files are read. A named pipe, a device (``/dev/zero``) or a socket, given or found in a folder, or
  a link to one, is one problem naming it, decided by ``stat`` alone: it is never opened (a pipe would block the
  run, a device would be read until memory runs out).
- A folder is an input of a folder format when an adapter claims it (a prompt collection has ``cases/``);
  otherwise its ``.json``/``.jsonl``/``.ndjson`` files, compressed or not (and compressed files with no inner
  extension, as Reddit's dumps), are read in sorted order, descending into subfolders (hidden entries and
  symlinked folders are skipped; other files are listed in ``skipped_files``).
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

import codecs
import contextlib
import io
import itertools
import json
import logging
import os
import re
import stat
import sys
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

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
from echo_builder.sources.streams import (
    COMPRESSED_EXTENSIONS,
    SourceStreamError,
    _kind,
    inner_name,
    open_source,
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
    """A file (or the rest of it) that cannot be read; ``location`` says where reading stopped (``None``: the file)."""

    def __init__(self, reason: str, location: str | None = None) -> None:
        super().__init__(reason)
        self.location = location


# ------------------------------------------------------------------------------------------------ loading


#: the most bytes of one JSON value held whole: a source file that is one JSON value other than a list (an API
#: response), one line of a JSON Lines file, one item of a top-level list. JSON Lines files and lists stream.
MAX_FILE_BYTES = 2 * 1024**3


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


def _too_large(size: int | None) -> str:
    what = f"file is {size:,} bytes" if size is not None else "the decompressed file is"
    return (
        f"{what}, over the {MAX_FILE_BYTES:,}-byte limit for one source file read whole (one JSON value that is "
        "not a list; JSON Lines and top-level lists are streamed whatever their size); split it into smaller JSON "
        "Lines files and pass those"
    )


def _no_memory(size: int, step: str) -> str:
    return (
        f"file is {size:,} bytes and memory ran out while {step} it (sources are read whole into memory); split it "
        "into smaller JSON Lines files and pass those"
    )


def _read_all(stream: BinaryIO, size: int) -> tuple[bytes, _Unreadable | None]:
    """Up to ``size`` bytes of ``stream`` (fewer only at its end), and the error that ended the reading early (a
    truncated or corrupt compressed stream, the bomb guard, an I/O error), if any: the bytes before it are kept."""
    chunks: list[bytes] = []
    got = 0
    try:
        while got < size:
            chunk = stream.read1(min(size - got, 1 << 22))  # one raw read: an error loses no byte before it
            if not chunk:
                break
            chunks.append(chunk)
            got += len(chunk)
    except SourceStreamError as exc:
        return b"".join(chunks), _Unreadable(str(exc))
    except OSError as exc:
        return b"".join(chunks), _Unreadable(f"cannot read the file ({exc.strerror or exc})")
    except MemoryError:
        raise _Unreadable(_no_memory(size, "reading")) from None
    return b"".join(chunks), None


def _decode_bytes(data: bytes, lines: bool, compression: str | None) -> tuple[str, dict[int, str]]:
    """The text of a file held whole, and for a JSON Lines file whose some lines are not UTF-8, those lines'
    numbers and why (they are left empty in the text: one bad line is one problem, not a lost file)."""
    if not data.strip():
        raise _Unreadable(
            "file is empty; expected JSON or JSON Lines"
            if compression is None
            else f"file decompresses ({compression}) to nothing; expected JSON or JSON Lines"
        )
    if data.startswith(b"\xef\xbb\xbf"):
        data = data[3:]
    try:
        return data.decode("utf-8"), {}
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        where = f"byte 0x{data[exc.start]:02x} at offset {exc.start}, line {line}"
        whole = _Unreadable(
            f"file is not valid UTF-8 ({where}); re-encode it as UTF-8"
            if compression is None
            else f"the {compression}-decompressed content is not UTF-8 text ({where}); expected JSON or JSON Lines"
        )
        if not lines:
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
            bad[number] = _bad_line(raw, exc)
    if not any(t.strip() for t in texts):  # no line is readable: the file is in another encoding
        raise whole from None
    return "\n".join(texts), bad


def _bad_line(raw: bytes, exc: UnicodeDecodeError) -> str:
    return f"line is not valid UTF-8 (byte 0x{raw[exc.start]:02x} at column {exc.start + 1}); skipped"


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
    """A file ready to read: one whole JSON ``document``; or ``lines`` of a JSON Lines file, as
    ``(number, text, why_unreadable)`` with ``text`` ``None`` for a line that is not UTF-8 (each parsed only when
    read, so a large dump never holds its parsed lines at once); or ``items``, the parsed items of a large top-level
    list, one at a time. ``candidates`` are the first records that parse (the first lines, or the first items of a
    top-level list, else the whole value), which vote on the format. ``stream`` is closed by :meth:`close`."""

    document: Document | None
    lines: Iterator[tuple[int, str | None, str | None]]
    candidates: list[Any]
    items: Iterator[Document] | None = None
    stream: BinaryIO | None = None
    #: what stopped the reading early (a truncated stream), raised once the records before it are read
    error: _Unreadable | None = None

    def close(self) -> None:
        if self.stream is not None:
            with contextlib.suppress(Exception):
                self.stream.close()
            self.stream = None


#: content up to this many (decompressed) bytes is read whole, as one buffer; longer JSON Lines files and top-level
#: lists are streamed record by record (a larger single JSON object is read whole up to :data:`MAX_FILE_BYTES`)
WHOLE_BYTES = 64 * 1024**2

#: bytes read from a stream at a time while walking a large top-level list
_CHUNK = 1 << 20

#: lines buffered while looking for the first records of a streamed JSON Lines file
_SNIFF_LINES = 10_000

_NOT_SPACE = re.compile(rb"[^ \t\r\n]")


def _load(path: Path) -> _Loaded:
    """Open ``path`` (decompressing on the fly) and prepare its records; see :class:`_Loaded`."""
    try:
        stream, compression = open_source(path)
    except SourceStreamError as exc:
        raise _Unreadable(str(exc)) from None
    try:
        head, error = _read_all(stream, WHOLE_BYTES + 1)
        lines = inner_name(path).suffix.lower() in LINE_EXTENSIONS
        if len(head) <= WHOLE_BYTES or error is not None:
            stream.close()
            return _load_bytes(head, lines, compression, error)
        start = 3 if head.startswith(b"\xef\xbb\xbf") else 0
        first = _NOT_SPACE.search(head, start)
        if not lines and first is not None and head[first.start() : first.start() + 1] == b"[":
            return _load_array(stream, head, first.start())
        if not lines:
            newline = head.find(b"\n", start)
            lines = newline != -1 and _is_json(head[start:newline])
        if lines:
            return _load_lines(stream, head)
        # one large JSON value that is not a list (an API response): read whole, within MAX_FILE_BYTES
        rest, error = _read_all(stream, MAX_FILE_BYTES + 1 - len(head))
        stream.close()
        if error is not None:
            raise error
        if len(head) + len(rest) > MAX_FILE_BYTES:
            raise _Unreadable(_too_large(os.stat(path).st_size if compression is None else None))
        return _load_bytes(head + rest, False, compression)
    except BaseException:
        stream.close()
        raise


def _is_json(data: bytes) -> bool:
    try:
        json.loads(data)
    except (ValueError, RecursionError):
        return False
    return True


def _load_bytes(
    data: bytes,
    lines: bool,
    compression: str | None,
    error: _Unreadable | None = None,
) -> _Loaded:
    """A file held whole: one JSON value, else JSON Lines (a ``.json`` file of several values, one per line).

    ``error`` ended the reading early: JSON Lines keep the complete lines before it (the last, cut line is
    dropped) and report it after them; other content is the error alone."""
    if len(data) > MAX_FILE_BYTES:
        raise _Unreadable(_too_large(len(data) if compression is None else None))
    if error is not None:
        cut = data.rfind(b"\n") + 1
        if not cut or not (lines or _is_json(data[: data.find(b"\n")])):
            raise error
        data = data[:cut]
        error.location = "line " + str(data.count(b"\n") + 1)
    text, undecodable = _decode_bytes(data, lines or error is not None, compression)
    del data
    if not lines and error is None:
        document = _whole(text)
        if document is not None:
            value = document.value
            items = value[:_SNIFF_RECORDS] if isinstance(value, list) and value else [value]
            return _Loaded(document, iter(()), items)
    # split on "\n" only: U+2028 and other Unicode line breaks may appear unescaped inside JSON strings
    numbered: list[tuple[int, str | None, str | None]] = [
        (n, stripped if n not in undecodable else None, undecodable.get(n))
        for n, line in enumerate(text.split("\n"), start=1)
        if (stripped := line.strip()) or n in undecodable
    ]
    del text
    candidates, first_problem = _first_records(numbered)
    if candidates:
        return _Loaded(None, iter(numbered), candidates, error=error)
    raise error or _Unreadable(_no_line(first_problem))


def _first_records(
    lines: Iterable[tuple[int, str | None, str | None]],
) -> tuple[list[Any], RecordProblem | None]:
    """The first parsed values (at most :data:`_SNIFF_RECORDS`) of ``lines``, and the first unparseable line.
    They vote on the format whatever a ``line_filter`` later skips."""
    first_problem: RecordProblem | None = None
    candidates: list[Any] = []
    for number, line, _ in lines:
        if line is None:
            continue
        parsed = _parse_line("", number, line)
        if isinstance(parsed, Document):
            candidates.append(parsed.value)
            if len(candidates) >= _SNIFF_RECORDS:
                break
        elif first_problem is None:
            first_problem = parsed
    return candidates, first_problem


def _no_line(first_problem: RecordProblem | None) -> str:
    reason = (
        f"{first_problem.location}: {first_problem.reason}"
        if first_problem is not None
        else "no line to parse"
    )
    return f"no line of this JSON Lines file could be parsed (first, {reason})"


class _Joined(io.RawIOBase):
    """``head`` then the rest of ``stream``, as one raw stream (to read lines across the two)."""

    def __init__(self, head: bytes, stream: BinaryIO) -> None:
        self._head = memoryview(head)
        self._stream = stream

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        if self._head.nbytes:
            n = min(len(buffer), self._head.nbytes)
            buffer[:n] = self._head[:n]
            self._head = self._head[n:]
            return n
        data = self._stream.read1(len(buffer))  # one raw read: an error loses no byte before it
        buffer[: len(data)] = data
        return len(data)


def _stream_lines(stream: BinaryIO, head: bytes) -> Iterator[tuple[int, str | None, str | None]]:
    """The non-blank lines of ``head`` + ``stream`` as ``(number, text, why_unreadable)``, one at a time.

    A line longer than :data:`MAX_FILE_BYTES` is skipped with its reason; a decompression error or bomb raises
    :class:`_Unreadable` located at the line being read."""
    joined = io.BufferedReader(_Joined(head, stream), buffer_size=1 << 20)
    del head
    number = 0
    try:
        while True:
            raw = joined.readline(MAX_FILE_BYTES + 1)
            if not raw:
                return
            number += 1
            if len(raw) > MAX_FILE_BYTES and not raw.endswith(b"\n"):
                while raw and not raw.endswith(b"\n"):  # the rest of the line, dropped piece by piece
                    raw = joined.readline(1 << 24)
                yield number, None, f"line is over {MAX_FILE_BYTES:,} bytes; skipped"
                continue
            if number == 1 and raw.startswith(b"\xef\xbb\xbf"):
                raw = raw[3:]
            raw = raw.strip()
            if not raw:
                continue
            try:
                yield number, raw.decode("utf-8"), None
            except UnicodeDecodeError as exc:
                yield number, None, _bad_line(raw, exc)
    except SourceStreamError as exc:
        raise _Unreadable(str(exc), f"line {number + 1}") from None
    except OSError as exc:
        raise _Unreadable(f"cannot read the file ({exc.strerror or exc})", f"line {number + 1}") from None
    finally:
        joined.close()


def _load_lines(stream: BinaryIO, head: bytes) -> _Loaded:
    """A large JSON Lines file, streamed: the first lines are buffered to vote on the format."""
    lines = _stream_lines(stream, head)
    del head
    buffered: list[tuple[int, str | None, str | None]] = []
    error: _Unreadable | None = None
    try:
        parsed = 0
        for entry in lines:
            buffered.append(entry)
            if entry[1] is not None:
                parsed += _is_json(entry[1].encode())
            if parsed >= _SNIFF_RECORDS or len(buffered) >= _SNIFF_LINES:
                break
    except _Unreadable as exc:
        error, lines = exc, iter(())
    candidates, first_problem = _first_records(buffered)
    if not candidates:
        raise error or _Unreadable(_no_line(first_problem))
    return _Loaded(None, itertools.chain(buffered, lines), candidates, stream=stream, error=error)


def _stream_array(stream: BinaryIO, head: bytes, start: int) -> Iterator[Document]:
    """The items of a top-level JSON list, parsed one at a time with ``JSONDecoder.raw_decode`` over a sliding
    buffer (an item cut by a chunk boundary is completed from the next chunk). Each item is a :class:`Document`
    located ``[i]``. A syntax error or the end of the data inside the list raises :class:`_Unreadable` located at
    the item; the items before it have been yielded."""
    decoder = codecs.getincrementaldecoder("utf-8")("strict")
    plain = json.JSONDecoder()
    lenient = json.JSONDecoder(parse_int=_huge_int)
    offset = 0  # bytes decoded before ``buffer``'s text, for messages
    buffer = ""
    position = 0
    eof = False
    pending = head[start + 1 :]  # after the "["
    del head
    want = _CHUNK
    failed: _Unreadable | None = None  # a decompression error, raised once the bytes before it are used

    def fill() -> None:
        nonlocal buffer, position, eof, pending, want, failed
        if pending:
            data, pending = pending, b""
        elif failed is not None:
            raise _Unreadable(str(failed), f"[{index}]")
        else:
            data, failed = _read_all(stream, want)
            if failed is not None and not data:
                raise _Unreadable(str(failed), f"[{index}]")
        try:
            text = decoder.decode(data, final=not data)
        except UnicodeDecodeError as exc:
            raise _Unreadable(
                f"content is not valid UTF-8 (byte 0x{data[exc.start]:02x} at byte {offset + exc.start:,} of the "
                "list); reading stopped",
                f"[{index}]",
            ) from None
        if not data:
            eof = True
        buffer = buffer[position:] + text
        position = 0

    def skip_space() -> str:
        nonlocal position
        while True:
            while position < len(buffer) and buffer[position] in " \t\r\n":
                position += 1
            if position < len(buffer) or eof:
                return buffer[position : position + 1]
            fill()

    index = 0
    expect_item = True
    while True:
        char = skip_space()
        if not char:
            raise _Unreadable(
                f"file ends inside the top-level list, after {index} items (truncated?)", f"[{index}]"
            )
        if char == "]" and (index == 0 or not expect_item):
            position += 1
            if skip_space():
                raise _Unreadable("extra data after the top-level list; it was not read", f"[{index}]")
            return
        if not expect_item:
            if char != ",":
                raise _Unreadable(f"not valid JSON: expected ',' or ']' after item {index - 1}", f"[{index}]")
            position += 1
            expect_item = True
            continue
        while True:
            try:
                try:
                    value, end = plain.raw_decode(buffer, position)
                except json.JSONDecodeError:
                    raise
                except ValueError as exc:
                    if "digits" not in str(exc):
                        raise
                    value, end = lenient.raw_decode(buffer, position)
                if end < len(buffer) or eof:
                    break
            except json.JSONDecodeError as exc:
                # an error at the end of the buffer (or a string running to it) may be an item cut by the chunk
                # boundary; any other is a syntax error (reading more would not help, and could read the whole file)
                string = (
                    _JSON_STRING.match(buffer, exc.pos) if exc.msg.startswith("Unterminated string") else None
                )
                cut = exc.pos >= len(buffer) - 8 or (string is not None and not string.group(1))
                if not cut:
                    raise _Unreadable(
                        f"not valid JSON in item {index} of the top-level list: {exc.msg}; reading stopped",
                        f"[{index}]",
                    ) from None
                if eof:
                    raise _Unreadable(
                        f"file ends inside item {index} of the top-level list (truncated?)", f"[{index}]"
                    ) from None
            except RecursionError:
                raise _Unreadable(_TOO_DEEP, f"[{index}]") from None
            # the item may go on past the buffer: read more (twice as much each time, so a long item is linear)
            want = min(want * 2, MAX_FILE_BYTES) if len(buffer) - position >= want else want
            if len(buffer) - position > MAX_FILE_BYTES:
                raise _Unreadable(
                    f"item {index} is over {MAX_FILE_BYTES:,} bytes; reading stopped", f"[{index}]"
                )
            fill()
        text = buffer[position:end]
        repaired = 0
        if has_surrogate_escape(text):
            value, repaired = clean_json(value)
        offset += len(text.encode("utf-8")) if not text.isascii() else len(text)
        position = end
        want = _CHUNK
        yield Document(f"[{index}]", value, repaired=repaired)
        index += 1
        expect_item = False


def _load_array(stream: BinaryIO, head: bytes, start: int) -> _Loaded:
    """A large top-level list, streamed: its first items are buffered to vote on the format."""
    items = _stream_array(stream, head, start)
    del head
    first: list[Document] = []
    error: _Unreadable | None = None
    try:
        for document in items:
            first.append(document)
            if len(first) >= _SNIFF_RECORDS:
                break
    except _Unreadable as exc:
        error, items = exc, iter(())
    if not first:
        raise error or _Unreadable("the top-level list is empty; nothing read")
    return _Loaded(
        None,
        iter(()),
        [d.value for d in first],
        items=itertools.chain(first, items),
        stream=stream,
        error=error,
    )


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
        loaded = _load(p)
        try:
            return _format_of(loaded.candidates)
        finally:
            loaded.close()
    except _Unreadable as exc:
        raise RecordError(f"{path}: {exc}") from None


# ------------------------------------------------------------------------------------------------ reading


@dataclass
class _Unit:
    path: Path
    label: str
    folder: bool
    hf: bool = False  # an ``hf:<repo>[:config]`` dataset reference (``label`` holds it)


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
        elif not _source_name(path):
            yield _label(path)
        elif entry.is_file():
            yield (path, False)
        else:
            yield RecordProblem(_label(path), None, _not_regular(path) or "not a regular file")


def _source_name(path: Path) -> bool:
    """Whether a file found in a folder is read: a ``.json``/``.jsonl``/``.ndjson`` name, or one of those (or a name
    without extension, as Reddit's ``RC_2023-01.zst``) compressed as ``.zst``, ``.gz``, ``.bz2`` or ``.xz``."""
    suffix = path.suffix.lower()
    if suffix in KNOWN_EXTENSIONS:
        return True
    if suffix not in COMPRESSED_EXTENSIONS:
        return False
    inner = inner_name(path).suffix.lower()
    return inner in KNOWN_EXTENSIONS or not inner or not inner[1:].isalpha()


def _label(path: str | os.PathLike[str]) -> str:
    """A path as shown in problems: a name that is not valid UTF-8 gets U+FFFD for its undecodable bytes."""
    return clean_text(os.fspath(path) if not isinstance(path, bytes) else os.fsdecode(path))[0]


def _as_paths(
    paths: str | os.PathLike[str] | Iterable[str | os.PathLike[str]],
) -> list[str | os.PathLike[str]]:
    if isinstance(paths, (str, os.PathLike)):
        return [paths]
    return list(paths)


def _read_unit(
    unit: _Unit,
    fmt: str | None,
    keep_raw: bool,
    found: dict[str, str | None],
    line_filter: Callable[[str], bool] | None = None,
    hf_columns: dict[str, str] | None = None,
) -> Iterator[Post | RecordProblem]:
    """Posts and problems of one file or folder input, one at a time; ``found["format"]`` is set to the format
    used (``None`` when none was found). ``line_filter(text)`` false skips a JSON Lines line unparsed."""
    ctx = FileContext(unit.label, unit.path, keep_raw)
    found["format"] = fmt
    loaded: _Loaded | None = None
    pending: list[RecordProblem] = []  # problems met between documents, passed on in file order
    try:
        if unit.hf:
            from echo_builder.sources.hf import read_hf

            found["format"] = "hf"
            yield from read_hf(unit.label, hf_columns or {}, ctx)
            return
        if unit.folder:
            name = fmt or _folder_format(unit.path)
            found["format"] = name
            if name is None:
                raise _Unreadable("folder is not an input of any folder format (a collection needs cases/)")
            adapter: SourceAdapter = get_source(name)
            if not adapter.reads_folders:
                raise _Unreadable(f"format {name!r} reads files, not folders")
            yield from adapter.read_folder(unit.path, ctx)
            return
        loaded = _load(unit.path)
        name = fmt or _format_of(loaded.candidates)
        found["format"] = name
        adapter = get_source(name)
        if adapter.reads_folders:
            raise _Unreadable(f"format {name!r} reads folders, not files")
        lines = loaded.lines

        def docs() -> Iterator[Document]:
            if loaded.document is not None:
                yield loaded.document
            if loaded.items is not None:
                yield from loaded.items
            for number, line, why in lines:
                if line is None:  # bytes that are not UTF-8, or a line over the size limit: this line only
                    pending.append(ctx.problem(f"line {number}", why or "line is unreadable; skipped"))
                    continue
                if line_filter is not None and not line_filter(line):
                    continue
                if adapter.reads_line_text:  # the adapter parses and validates the text itself
                    yield Document(f"line {number}", None, line)
                    continue
                parsed = _parse_line(unit.label, number, line)
                if isinstance(parsed, RecordProblem):  # an unparseable line, kept in file order
                    pending.append(parsed)
                else:
                    yield parsed
            if loaded.error is not None:  # what ended the reading early, after the records before it
                raise loaded.error

        if type(adapter).parse_documents is SourceAdapter.parse_documents:
            # one document at a time: a failure inside one (an adapter bug) loses no other document of the file
            for document in docs():
                yield from pending
                pending.clear()
                if document.repaired:
                    yield ctx.problem(document.location or None, surrogate_note(document.repaired), "note")
                produced: list[Post | RecordProblem] = []
                try:
                    for item in adapter.parse_document(document, ctx):
                        produced.append(item)
                    if not produced:  # a record never vanishes without a word: [] or {} on a line
                        what = "line" if document.location.startswith("line") else "record"
                        what = what if document.location else "file"
                        produced.append(
                            ctx.problem(
                                document.location or None,
                                f"this {what} holds no post ({_describe(document.value)}); nothing read",
                                "note",
                            )
                        )
                except MemoryError:
                    raise
                except RecursionError:
                    produced.append(
                        ctx.problem(document.location or None, "record nested too deeply to read")
                    )
                except Exception as exc:
                    reason = clean_text(f"reading stopped by an unexpected {type(exc).__name__}: {exc}")[0]
                    produced.append(ctx.problem(document.location or None, reason))
                yield from produced
            yield from pending
            return
        for item in adapter.parse_documents(docs(), ctx):
            yield from pending
            pending.clear()
            yield item
        yield from pending
    except _Unreadable as exc:
        yield from pending
        yield ctx.problem(exc.location, str(exc))
    except RecursionError:
        yield ctx.problem(None, "input nested too deeply to read")
    except MemoryError:
        yield ctx.problem(None, "out of memory while reading; split the file")
    except Exception as exc:  # an adapter bug must not lose the other files; the problem names it
        reason = clean_text(f"reading stopped by an unexpected {type(exc).__name__}: {exc}")[0]
        yield ctx.problem(None, reason)
    finally:
        if loaded is not None:
            loaded.close()


def read_posts(
    paths: str | os.PathLike[str] | Iterable[str | os.PathLike[str]],
    *,
    format: str | None = None,
    keep_raw: bool = True,
    line_filter: Callable[[str], bool] | None = None,
    post_filter: Callable[[Post], bool] | None = None,
    hf_columns: dict[str, str] | None = None,
) -> SourceReport:
    """Read posts from export files and folders.

    Args:
        paths: one path or several; each a file or a folder (see the module docstring). Order is kept.
        format: a registered source name (``x_api``, ``x_graphql``, ``reddit``, ``bluesky``, ``twscrape``,
            ``collection``, ``jsonl`` or a plugin's) to use for every input instead of auto-detection.
        keep_raw: store each source object in ``Post.raw`` (``False`` saves memory).
        line_filter: ``line_filter(text)`` false skips a line of a JSON Lines file without parsing it (a cheap
            first pass, see :mod:`echo_builder.sources.prefilter`); lines it skips are neither posts nor problems.
        post_filter: ``post_filter(post)`` false drops a post before de-duplication (it is not counted).
        hf_columns: the column mapping of ``hf:<repo>[:config]`` sources (:mod:`echo_builder.sources.hf`), such
            as ``{"prompt": "text"}``. A path given as ``hf:...`` is such a dataset, loaded with ``datasets``.

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
        if isinstance(given, str) and given.startswith("hf:"):
            units.append(_Unit(Path(), given, False, hf=True))
            continue
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
        found: dict[str, str | None] = {}
        kept = errors = notes = dups = 0
        for item in _read_unit(unit, format, keep_raw, found, line_filter, hf_columns):
            if isinstance(item, RecordProblem):
                report.problems.append(item)
                errors += item.level == "error"
                notes += item.level == "note"
                continue
            if not isinstance(item, Post):  # a source format's bug: that item is a problem, the rest is read
                report.problems.append(
                    RecordProblem(
                        unit.label,
                        None,
                        f"the source format {found.get('format')!r} produced {type(item).__name__}, not a Post "
                        "or a RecordProblem; left out",
                    )
                )
                errors += 1
                continue
            if post_filter is not None and not post_filter(item):
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
        report.files.append(FileSummary(unit.label, found.get("format"), kept, errors, notes, dups))
    return report
