"""Deterministic generator of the hostile-input corpus's binary and large files.

The small images under ``images/`` are committed (made once with ``python tests/data/hostile/make_corpus.py
--small tests/data/hostile/images``); the large and bomb cases are written at test time into a temporary folder by
:func:`write_large` (``tests/reliability/test_hostile.py`` does this), so the repository stays small. Every byte
comes from this script: no randomness without a fixed seed, no network.

Small (committed): ``header_bomb.png`` (a 68-byte PNG declaring 100,000 x 100,000 pixels), ``truncated.png`` (a
64 x 64 noise PNG cut in half), ``jpeg_named.png`` (a JPEG saved under a .png name), ``text_named.png`` (text
saved under a .png name), ``empty.png`` (0 bytes), ``tall_1x20000.png`` (1 x 20,000 px, valid).

Large (generated): ``zlib_bomb.png`` (20,000 x 20,000 1-bit PNG, 400 M pixels in about 50 KB),
``huge_string.jsonl`` (one post whose text is 30,000,000 characters), ``deep_nesting.json`` (100,000 nested
arrays), ``escaped_quotes_truncated.json`` (an export cut off inside a 600,000-character string full of escaped
quotes), ``open_quotes.jsonl`` (a post of 100,000 opening quote marks and letters), ``whitespace_reply.txt`` (a
judge reply of ``[[`` followed by 20,000 spaces).
"""

from __future__ import annotations

import io
import json
import random
import struct
import sys
import zlib
from collections.abc import Callable
from pathlib import Path

__all__ = ["HUGE_TEXT_CHARS", "LARGE", "SMALL", "png_chunks", "write_large", "write_small"]

HUGE_TEXT_CHARS = 30_000_000
TINT = (180, 90, 40)  # colour of jpeg_named.png and tall_1x20000.png


def _chunk(kind: bytes, data: bytes) -> bytes:
    return (
        struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)
    )


def png_chunks(width: int, height: int, bit_depth: int, color_type: int, idat: bytes) -> bytes:
    """A PNG file from its header fields and already-compressed IDAT data (hand-built: no encoder limits)."""
    header = struct.pack(">IIBBBBB", width, height, bit_depth, color_type, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + _chunk(b"IHDR", header) + _chunk(b"IDAT", idat) + _chunk(b"IEND", b"")


def _pil_bytes(image, fmt: str, **kwargs) -> bytes:
    buf = io.BytesIO()
    image.save(buf, format=fmt, **kwargs)
    return buf.getvalue()


def _header_bomb() -> bytes:
    # 1-bit grey, 100,000 x 100,000: the header alone says 10^10 pixels; the data is one empty row
    return png_chunks(100_000, 100_000, 1, 0, zlib.compress(b"\x00" * 16, 9))


def _truncated() -> bytes:
    from PIL import Image

    rng = random.Random(8)
    noise = Image.frombytes("RGB", (64, 64), bytes(rng.randrange(256) for _ in range(64 * 64 * 3)))
    data = _pil_bytes(noise, "PNG")
    return data[: len(data) // 2]


def _jpeg_named() -> bytes:
    from PIL import Image

    return _pil_bytes(Image.new("RGB", (32, 32), TINT), "JPEG", quality=95)


def _tall() -> bytes:
    from PIL import Image

    return _pil_bytes(Image.new("RGB", (1, 20_000), TINT), "PNG")


SMALL: dict[str, Callable[[], bytes]] = {
    "header_bomb.png": _header_bomb,
    "truncated.png": _truncated,
    "jpeg_named.png": _jpeg_named,
    "text_named.png": lambda: b"This is a text file saved as a PNG; it holds no image.\n",
    "empty.png": lambda: b"",
    "tall_1x20000.png": _tall,
}


def _zlib_bomb(path: Path) -> None:
    width = height = 20_000
    row = b"\x00" + b"\x00" * (width // 8)  # filter byte + one bit per pixel
    compressor = zlib.compressobj(9)
    parts = [compressor.compress(row) for _ in range(height)]
    parts.append(compressor.flush())
    path.write_bytes(png_chunks(width, height, 1, 0, b"".join(parts)))


def _post_line(text: str, **extra) -> str:
    post = {
        "id": "x:1950000000000000001",
        "platform": "x",
        "url": "https://x.com/someone/status/1950000000000000001",
        "author": "someone",
        "created_at": "2025-04-01T00:00:00Z",
        "text": text,
        "root_id": "x:1950000000000000001",
        **extra,
    }
    return json.dumps(post) + "\n"


def _huge_string(path: Path) -> None:
    head = "GPT-4o image generation. Prompt: "
    path.write_text(_post_line(head + "a" * (HUGE_TEXT_CHARS - len(head))), encoding="utf-8")


def _deep_nesting(path: Path) -> None:
    path.write_text("[" * 100_000 + "]" * 100_000, encoding="utf-8")


def _escaped_quotes_truncated(path: Path) -> None:
    text = '{"data": [{"id": "1", "text": "' + 'a\\"' * 200_000  # cut off inside the string
    path.write_text(text, encoding="utf-8")


def _open_quotes(path: Path) -> None:
    # an attached image makes the rules relevance keep it, so extraction searches the text for a quoted prompt
    media = [{"type": "photo", "url": "https://pbs.twimg.com/media/quotes.jpg"}]
    path.write_text(_post_line("GPT-4o image generation " + "“a" * 50_000, media=media), encoding="utf-8")


def _whitespace_reply(path: Path) -> None:
    path.write_text("[[" + " " * 20_000, encoding="utf-8")


LARGE: dict[str, Callable[[Path], None]] = {
    "zlib_bomb.png": _zlib_bomb,
    "huge_string.jsonl": _huge_string,
    "deep_nesting.json": _deep_nesting,
    "escaped_quotes_truncated.json": _escaped_quotes_truncated,
    "open_quotes.jsonl": _open_quotes,
    "whitespace_reply.txt": _whitespace_reply,
}


def write_small(folder: str | Path) -> list[Path]:
    """Write the small (committed) images into ``folder``."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    written = []
    for name, make in SMALL.items():
        (folder / name).write_bytes(make())
        written.append(folder / name)
    return written


def write_large(folder: str | Path, names: list[str] | None = None) -> list[Path]:
    """Write the generated cases (all, or ``names``) into ``folder``."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    written = []
    for name in names or list(LARGE):
        LARGE[name](folder / name)
        written.append(folder / name)
    return written


if __name__ == "__main__":
    if len(sys.argv) != 3 or sys.argv[1] not in ("--small", "--large"):
        sys.exit("usage: make_corpus.py --small DIR | --large DIR")
    paths = (write_small if sys.argv[1] == "--small" else write_large)(sys.argv[2])
    for p in paths:
        print(f"{p}  {p.stat().st_size:,} bytes")
