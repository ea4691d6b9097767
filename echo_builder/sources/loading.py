"""Loading one source file: bytes in, JSON documents out (the decoding half of :mod:`echo_builder.sources.reader`).

What the reader's module docstring promises about file handling is done here: only regular files are opened
(:func:`_not_regular` decides by ``stat`` alone), content up to :data:`WHOLE_BYTES` is read as one buffer and
parsed once, larger JSON Lines are streamed line by line and a larger top-level list item by item
(``JSONDecoder.raw_decode`` over a sliding buffer of :data:`_CHUNK` bytes), every single value is capped at
:data:`MAX_FILE_BYTES`, lone surrogates become U+FFFD with a note, and the first :data:`_SNIFF_RECORDS` records
are kept for format detection. A file that cannot be read raises :class:`_Unreadable` with where it stopped.
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
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

from echo_builder.sources.base import (
    Document,
    RecordProblem,
    clean_json,
    has_surrogate_escape,
)
from echo_builder.sources.streams import (
    SourceStreamError,
    _kind,
    inner_name,
    open_source,
)

log = logging.getLogger(__name__)

LINE_EXTENSIONS = frozenset({".jsonl", ".ndjson"})
JSON_EXTENSIONS = frozenset({".json"})
KNOWN_EXTENSIONS = LINE_EXTENSIONS | JSON_EXTENSIONS


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
