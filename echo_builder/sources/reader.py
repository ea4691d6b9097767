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
- Streaming: content up to :data:`~echo_builder.sources.loading.WHOLE_BYTES` (64 MiB, decompressed) is read as one buffer; past it, JSON Lines
  are read line by line and a top-level list item by item (``JSONDecoder.raw_decode`` over a sliding buffer,
  items located ``[i]``), so memory is bounded by the posts kept, not the file. A single JSON value that is not a
  list is held whole, up to :data:`~echo_builder.sources.loading.MAX_FILE_BYTES` (2 GiB), as is each line or item.
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

import logging
import os
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from echo_builder.errors import RecordError
from echo_builder.plugin_deadline import PluginTimeoutError, call_with_deadline, iterate_with_deadline
from echo_builder.records import Post
from echo_builder.sources.base import (
    Document,
    FileContext,
    RecordProblem,
    SourceAdapter,
    clean_text,
    get_source,
    registered_sources,
    surrogate_note,
)
from echo_builder.sources.loading import (
    KNOWN_EXTENSIONS,
    _load,
    _Loaded,
    _not_regular,
    _parse_line,
    _Unreadable,
)
from echo_builder.sources.streams import (
    COMPRESSED_EXTENSIONS,
    inner_name,
)

__all__ = ["FileSummary", "SourceReport", "detect_format", "read_posts"]

log = logging.getLogger(__name__)


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


def _sniff(value: Any) -> str | None:
    """The first registered file format whose ``sniff`` claims ``value``; an adapter whose ``sniff`` raises (a bug
    in a plugin, a value it did not expect) does not claim it, and the next one is asked."""
    for adapter in registered_sources():
        if adapter.reads_folders:
            continue
        if _asks(adapter, adapter.sniff, value):
            return adapter.name
    return None


def _plugin_origin(adapter: SourceAdapter) -> str | None:
    """The distribution of a plugin source format (``None`` for a built-in or one registered in this process)."""
    from echo_builder.sources.base import SOURCES

    try:
        entry = SOURCES.entry(adapter.name)
    except Exception:  # not registered under its name: treated as the package's own
        return None
    return None if entry.builtin else entry.origin


#: plugin adapters abandoned after one of their calls ran past the plugin call deadline (id -> adapter, kept alive
#: so the id is not reused), and why: never asked again in this process
_ABANDONED: dict[int, tuple[SourceAdapter, str]] = {}


def _abandoned(adapter: SourceAdapter) -> str | None:
    found = _ABANDONED.get(id(adapter))
    return found[1] if found is not None and found[0] is adapter else None


def _abandon(adapter: SourceAdapter, exc: PluginTimeoutError) -> str:
    reason = (
        f"the source format {adapter.name!r} did not return within {exc.seconds:g} s ({exc.setting}); abandoned "
        "for the rest of this run"
    )
    if _abandoned(adapter) is None:
        _ABANDONED[id(adapter)] = (adapter, reason)
        log.warning("%s", reason)
    return reason


def _asks(adapter: SourceAdapter, sniff: Any, value: Any) -> bool:
    """``sniff(value)`` as a bool; ``False`` (logged once per adapter) when it raises anything but MemoryError.
    A plugin's ``sniff`` runs under the plugin call deadline; one that does not return in time is abandoned (it
    claims nothing more in this process)."""
    origin = _plugin_origin(adapter)
    try:
        if origin is None:
            return bool(sniff(value))
        if _abandoned(adapter) is not None:
            return False
        return bool(
            call_with_deadline(
                sniff, value, what=f"the source format {adapter.name!r} ({origin}): its detection"
            )
        )
    except PluginTimeoutError as exc:
        _abandon(adapter, exc)
        return False
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
        + "".join(f" (not asked: {_abandoned(a)})" for a in registered_sources() if _abandoned(a))
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
            yield from _guarded_items(adapter, lambda: adapter.read_folder(unit.path, ctx), ctx, None)
            return
        loaded = _load(unit.path)
        name = fmt or _format_of(loaded.candidates)
        found["format"] = name
        adapter = get_source(name)
        if adapter.reads_folders:
            raise _Unreadable(f"format {name!r} reads folders, not files")
        if _abandoned(adapter) is not None:
            raise _Unreadable(f"not read: {_abandoned(adapter)}")
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
                    for item in _guarded_items(
                        adapter,
                        lambda document=document: adapter.parse_document(document, ctx),
                        ctx,
                        document,
                    ):
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
                except _Stopped as stopped:  # a plugin that hung on this record: the file ends here
                    yield from produced
                    yield from pending
                    yield stopped.problem
                    return
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
        for item in _guarded_items(adapter, lambda: adapter.parse_documents(docs(), ctx), ctx, None):
            yield from pending
            pending.clear()
            yield item
        yield from pending
    except _Stopped as stopped:
        yield from pending
        yield stopped.problem
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


class _Stopped(Exception):
    """A plugin adapter's call ran past the deadline: the file's reading ends with ``problem``."""

    def __init__(self, problem: RecordProblem) -> None:
        super().__init__(problem.reason)
        self.problem = problem


def _guarded_items(
    adapter: SourceAdapter, make: Callable[[], Iterable[Any]], ctx: FileContext, document: Document | None
) -> Iterator[Any]:
    """The items of ``make()``: as they come for a built-in; for a plugin, each waited for at most the plugin call
    deadline (:func:`~echo_builder.plugin_deadline.iterate_with_deadline`). A plugin that does not return in time
    is abandoned: :class:`_Stopped` with one problem naming the record (the records before it are kept; the
    adapter reads nothing more in this run)."""
    origin = _plugin_origin(adapter)
    if origin is None:
        yield from make()
        return
    try:
        yield from iterate_with_deadline(make, what=f"the source format {adapter.name!r} ({origin})")
    except PluginTimeoutError as exc:
        reason = _abandon(adapter, exc)
        location = (document.location or None) if document is not None else None
        raise _Stopped(ctx.problem(location, f"reading stopped: {reason}")) from None


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
