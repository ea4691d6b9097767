"""Opening source files as byte streams: compression detected and undone on the fly, with a decompression-bomb guard.

Platform dumps come compressed: Reddit's Pushshift / Arctic Shift archives are zstd with long windows (up to 2 GiB;
``zstd --long=31``), other exports are gzip, bzip2 or xz. :func:`open_source` returns a binary stream of the
decompressed bytes, read in bounded pieces so that memory never depends on the file's size.

- The compression is decided by the file's first bytes (its magic number); a name ending in ``.zst``, ``.gz``,
  ``.bz2`` or ``.xz`` whose bytes are not of that kind is refused with a message saying so (a renamed or
  half-downloaded file), as are ZIP and 7-Zip archives (unpack them first).
- zstd: the ``zstandard`` package, ``max_window_size`` :data:`ZSTD_MAX_WINDOW` (2 GiB, what ``--long=31`` dumps
  need), frame after frame; a stream that ends inside a frame is reported as truncated (``zstandard`` itself
  would return the partial data silently). gzip, bzip2, xz: the standard library, multi-member files included.
- Decompression-bomb guard: reading stops with a clear error once the decompressed bytes exceed
  :data:`MAX_DECOMPRESSED_BYTES`, or exceed :data:`MAX_RATIO` times the compressed size past
  :data:`RATIO_FLOOR_BYTES` (real JSON dumps compress about 5-15x; a file of zeros compresses 30,000x).

Every failure is a :class:`SourceStreamError` whose message names what went wrong and after how many decompressed
bytes; the reader turns it into a problem of the file (posts read before it are kept).
"""

from __future__ import annotations

import bz2
import gzip
import io
import lzma
import os
import stat
from pathlib import Path
from typing import BinaryIO

__all__ = [
    "COMPRESSED_EXTENSIONS",
    "MAX_DECOMPRESSED_BYTES",
    "MAX_RATIO",
    "RATIO_FLOOR_BYTES",
    "ZSTD_MAX_WINDOW",
    "SourceStreamError",
    "compression_of_name",
    "inner_name",
    "open_source",
]

#: file name endings of the compressions read on the fly -> compression name
COMPRESSED_EXTENSIONS = {
    ".zst": "zstd",
    ".zstd": "zstd",
    ".gz": "gzip",
    ".gzip": "gzip",
    ".bz2": "bzip2",
    ".xz": "xz",
}

#: largest zstd window accepted (bytes): 2 GiB, the ``--long=31`` window of Reddit archive dumps
ZSTD_MAX_WINDOW = 2**31

#: the most decompressed bytes read from one compressed file (1 TiB: a monthly Reddit comment dump is ~0.5 TB)
MAX_DECOMPRESSED_BYTES = 2**40

#: the largest decompressed / compressed ratio accepted past :data:`RATIO_FLOOR_BYTES`
MAX_RATIO = 200

#: decompressed bytes allowed whatever the ratio (small files of repetitive JSON compress very well)
RATIO_FLOOR_BYTES = 256 * 1024**2

_MAGIC = (
    (b"\x28\xb5\x2f\xfd", "zstd"),
    (b"\x1f\x8b", "gzip"),
    (b"BZh", "bzip2"),
    (b"\xfd7zXZ\x00", "xz"),
)
_ARCHIVES = (
    (b"PK\x03\x04", "a ZIP archive"),
    (b"7z\xbc\xaf\x27\x1c", "a 7-Zip archive"),
)

# compressed bytes handed to the zstd decompressor per call: its output per call is at most ~32,000 times this
_ZSTD_FEED = 4096


class SourceStreamError(Exception):
    """A source file that cannot be read as a stream: unsupported or corrupt compression, a bomb, an I/O error."""


def compression_of_name(name: str | os.PathLike[str]) -> str | None:
    """The compression a file name announces (``"zstd"``, ``"gzip"``, ``"bzip2"``, ``"xz"``), or ``None``."""
    return COMPRESSED_EXTENSIONS.get(Path(name).suffix.lower())


def inner_name(name: str | os.PathLike[str]) -> Path:
    """The name without its compression suffix: ``RC_2023-01.ndjson.zst`` -> ``RC_2023-01.ndjson``."""
    path = Path(name)
    return path.with_suffix("") if compression_of_name(path) else path


def _kind(mode: int) -> str:
    """What a non-regular file is, in words (also :mod:`echo_builder.sources.reader`'s)."""
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


class _Guarded(io.RawIOBase):
    """Decompressed bytes of ``inner`` (a ``read(n)`` stream), counted against the bomb limits; decompressor
    errors become :class:`SourceStreamError` naming the compression and the decompressed offset."""

    def __init__(
        self, inner: BinaryIO | _ZstdReader, raw: BinaryIO, compression: str, compressed_size: int
    ) -> None:
        self._inner = inner
        self._raw = raw
        self._read = getattr(inner, "read1", inner.read)
        self.compression = compression
        self.compressed_size = compressed_size
        self.total = 0
        self._error: SourceStreamError | None = None

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: memoryview) -> int:  # type: ignore[override]
        # at most 64 KiB per call, and an error is raised on the call after the data decoded before it: the
        # buffered reader above hands out every complete line read before a truncation or the bomb limit
        if self._error is not None:
            raise self._error
        try:
            # read1: one step of the decompressor (a stdlib reader's read(n) loops, and an error in a later step
            # would lose the bytes of the earlier ones)
            data = self._read(min(len(buffer), 1 << 16))
        except SourceStreamError as exc:
            data, self._error = b"", exc
        except MemoryError:
            raise
        except Exception as exc:  # EOFError, OSError, lzma.LZMAError, zstandard.ZstdError, ...
            data, self._error = b"", SourceStreamError(self._corrupt(exc))
        n = len(data)
        buffer[:n] = data
        self.total += n
        if self._error is None:
            self._error = self._over()
        if n == 0 and self._error is not None:
            raise self._error
        return n

    def _corrupt(self, exc: BaseException) -> str:
        detail = str(exc) or type(exc).__name__
        if isinstance(exc, EOFError):
            detail = "the compressed stream ends before its end marker"
        return (
            f"{self.compression} data is truncated or corrupt after {self.total:,} decompressed bytes ({detail}); "
            "the posts before that point are kept"
        )

    def _over(self) -> SourceStreamError | None:
        if self.total > MAX_DECOMPRESSED_BYTES:
            return SourceStreamError(
                f"decompression stopped: over {MAX_DECOMPRESSED_BYTES:,} decompressed bytes (the limit for one "
                "file); split the dump"
            )
        if self.total > RATIO_FLOOR_BYTES and self.total > MAX_RATIO * max(self.compressed_size, 1):
            return SourceStreamError(
                f"decompression stopped: {self.total:,} bytes from {self.compressed_size:,} compressed bytes is over "
                f"{MAX_RATIO}x (a decompression bomb, or not a JSON dump); the posts before that point are kept"
            )
        return None

    def close(self) -> None:
        try:
            self._inner.close()
        finally:
            self._raw.close()
            super().close()


class _ZstdReader:
    """zstd frames one after another, ``read(n)`` giving at most ``n`` bytes; a stream ending inside a frame
    raises ``EOFError`` (truncated), which ``zstandard``'s own readers do not."""

    def __init__(self, raw: BinaryIO) -> None:
        import zstandard

        self._raw = raw
        self._dctx = zstandard.ZstdDecompressor(max_window_size=ZSTD_MAX_WINDOW)
        self._obj = self._dctx.decompressobj()
        self._fed = False  # the current frame has received input
        self._pending = b""
        self._offset = 0
        self._input = b""
        self._done = False
        self._failed: Exception | None = None

    def read(self, n: int) -> bytes:
        if self._failed is not None and self._offset >= len(self._pending):
            raise self._failed
        while len(self._pending) - self._offset < n and not self._done:
            try:
                self._step()
            except Exception as exc:  # truncated or corrupt: the bytes decoded before it are handed out first
                if self._offset >= len(self._pending):
                    raise
                self._failed = exc
                break
        start = self._offset
        chunk = self._pending[start : start + n]
        self._offset = start + len(chunk)
        if self._offset >= len(self._pending):
            self._pending, self._offset = b"", 0
        return chunk

    def _step(self) -> None:
        if not self._input:
            self._input = self._raw.read(1 << 16)
            if not self._input:
                if self._fed and not self._obj.eof:
                    raise EOFError("zstd stream ends inside a frame")
                self._done = True
                return
        piece, self._input = self._input[:_ZSTD_FEED], self._input[_ZSTD_FEED:]
        out = self._obj.decompress(piece)
        self._fed = True
        if self._obj.eof:  # the frame ended: the rest is the next frame (or padding)
            rest = self._obj.unused_data
            self._obj = self._dctx.decompressobj()
            self._fed = False
            self._input = rest + self._input
        if out:
            self._pending = self._pending[self._offset :] + out if self._offset < len(self._pending) else out
            self._offset = 0

    def close(self) -> None:
        self._raw.close()


def open_source(path: Path) -> tuple[BinaryIO, str | None]:
    """A buffered binary stream of ``path``'s (decompressed) bytes and the compression found (``None``: plain).

    The file is opened non-blocking and checked with ``fstat`` (a file swapped for a named pipe after the caller's
    ``stat`` must not block the run). Raises :class:`SourceStreamError` when it cannot be opened, is not a regular
    file, is an archive (ZIP, 7-Zip), or its name announces a compression its bytes do not have. The caller closes
    the stream.
    """
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(path, flags)
    except OSError as exc:
        raise SourceStreamError(f"cannot read the file ({exc.strerror or exc})") from None
    raw = os.fdopen(fd, "rb")
    try:
        info = os.fstat(raw.fileno())
        if not stat.S_ISREG(info.st_mode):
            raise SourceStreamError(
                f"{_kind(info.st_mode)}, not a regular file; only regular files and folders are read as sources"
            )
        head = raw.read(8)
        raw.seek(0)
    except OSError as exc:
        raw.close()
        raise SourceStreamError(f"cannot read the file ({exc.strerror or exc})") from None
    except SourceStreamError:
        raw.close()
        raise
    found = next((name for magic, name in _MAGIC if head.startswith(magic)), None)
    named = compression_of_name(path)
    if named is not None and found != named:
        raw.close()
        what = f"{found}-compressed" if found else f"not compressed (it starts with bytes {head[:4].hex()})"
        raise SourceStreamError(
            f"the name says {named}-compressed ({path.suffix}) but the file is {what}; a renamed or incomplete "
            "download? Rename or re-download it"
        )
    archive = next((name for magic, name in _ARCHIVES if head.startswith(magic)), None)
    if archive is not None:
        raw.close()
        raise SourceStreamError(
            f"{archive}, which is not read as a source; unpack it and pass the JSON / JSON Lines files "
            "(or recompress them as .zst, .gz, .bz2 or .xz)"
        )
    if found is None:
        return raw, None
    inner: BinaryIO | _ZstdReader
    if found == "zstd":
        inner = _ZstdReader(raw)
    elif found == "gzip":
        inner = gzip.GzipFile(fileobj=raw, mode="rb")
    elif found == "bzip2":
        inner = bz2.BZ2File(raw, mode="rb")
    else:
        inner = lzma.LZMAFile(raw, mode="rb")  # noqa: SIM115 - closed with the returned stream
    guarded = _Guarded(inner, raw, found, info.st_size)
    return io.BufferedReader(guarded, buffer_size=1 << 20), found  # type: ignore[return-value]
