"""Small input files named on the command line: keyword lists, votes, ratings, judge prompts, assignment files.

Sources of posts have their own reader (:mod:`echo_builder.sources.reader`); every other file a command reads goes
through here, so each gets the same guards: only a regular file is opened (a FIFO would block forever, a device
such as ``/dev/zero`` never ends), a size cap, UTF-8 text with the offending byte named, JSON nested too deeply
for the parser is one clear error instead of a ``RecursionError``, and lone UTF-16 surrogates from ``\\ud83d``
escapes are replaced by U+FFFD (as the source readers do) so that no later UTF-8 write fails.
"""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Callable
from pathlib import Path
from typing import Any

from echo_builder.errors import ConfigError

__all__ = [
    "MAX_INPUT_FILE_BYTES",
    "is_utf8",
    "parse_json",
    "read_prompt_yaml",
    "read_small_file",
    "read_text",
]

#: the largest input file read whole (bytes): far above any real keyword list, vote export or prompt file
MAX_INPUT_FILE_BYTES = 512 * 1024 * 1024
#: the largest curation prompt file (YAML) read (bytes)
MAX_PROMPT_YAML_BYTES = 1_000_000


def read_small_file(path: str | Path, limit: int, what: str) -> bytes:
    """The bytes of the regular file ``path``, at most ``limit`` of them.

    Raises:
        ConfigError: ``{what}: ...`` when the path is missing, not a regular file (a folder, a FIFO or a device,
            which could block or never end), unreadable, or larger than ``limit``.
    """
    try:
        info = os.stat(path)
        if stat.S_ISDIR(info.st_mode):
            raise ConfigError(f"{what}: is a folder; give the file")
        if not stat.S_ISREG(info.st_mode):
            raise ConfigError(f"{what}: not a regular file (a pipe or a device is never read)")
        if info.st_size > limit:
            raise ConfigError(f"{what}: the file is larger than {limit} bytes")
        with open(path, "rb") as f:
            raw = f.read(limit + 1)
    except OSError as exc:
        raise ConfigError(f"{what}: cannot read the file ({exc.strerror or exc})") from None
    if len(raw) > limit:
        raise ConfigError(f"{what}: the file is larger than {limit} bytes")
    return raw


def read_text(path: str | Path, what: str, *, limit: int = MAX_INPUT_FILE_BYTES) -> str:
    """The file as UTF-8 text (a leading byte-order mark dropped); raises :class:`ConfigError` naming ``what``
    and, for bytes that are not UTF-8, the first offending byte and its offset."""
    raw = read_small_file(path, limit, what)
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise ConfigError(
            f"{what}: not UTF-8 text (byte 0x{raw[exc.start]:02x} at offset {exc.start}); save it as UTF-8"
        ) from None


def parse_json(text: str, what: str) -> Any:
    """``text`` parsed as JSON, lone surrogates replaced by U+FFFD in every string and key.

    Raises:
        ConfigError: not valid JSON (with the line and column), or nested deeper than the parser allows.
    """
    from echo_builder.sources.base import clean_json

    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigError(
            f"{what}: not valid JSON ({exc.msg} at line {exc.lineno}, column {exc.colno})"
        ) from None
    except RecursionError:
        raise ConfigError(f"{what}: JSON nested deeper than the parser allows") from None
    return clean_json(value)[0]


def is_utf8(text: str) -> bool:
    """Whether ``text`` encodes as UTF-8: Python carries bytes that were not UTF-8 (in a file name or a command-line
    argument) as lone surrogates, which no UTF-8 writer accepts later."""
    if text.isascii():
        return True
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def read_prompt_yaml(
    where: Path, what: str, fmt: str, *, more: Callable[[dict[str, Any]], list[str]] | None = None
) -> dict[str, Any]:
    """A curation prompt file (YAML) of format ``fmt`` with the non-empty strings ``name``, ``version``, ``system``
    and ``user``; ``what`` names the file in errors (``"NSFW prompt file"``); ``more`` returns the names of other
    keys of the file that are missing or invalid (listed in the same error).

    Raises:
        ConfigError: the file is missing or not YAML, its ``format`` is not ``fmt``, or one of those keys is missing
            or not a non-empty string; the message names the file and the keys.
    """
    from echo_dataset.safe_yaml import kind_of, load_yaml

    name = f"{what} {str(where)!r}"
    raw = read_small_file(where, MAX_PROMPT_YAML_BYTES, name)
    # safe and bounded; an error names the line, never the file's content (PyYAML's own message quotes a line)
    data = load_yaml(raw, name, error=ConfigError)
    if not isinstance(data, dict):
        raise ConfigError(f"{name} is not of format {fmt!r}: expected a mapping, got {kind_of(data)}")
    if data.get("format") != fmt:
        raise ConfigError(f"{name} is not of format {fmt!r}")
    missing = [
        k for k in ("name", "version", "system", "user") if not isinstance(data.get(k), str) or not data[k]
    ]
    missing += more(data) if more is not None else []
    if missing:
        raise ConfigError(f"{what} {str(where)!r}: missing or invalid {', '.join(missing)}")
    return data
