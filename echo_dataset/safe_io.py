"""Writing inside an output folder, and only there: containment checks, atomic writes, one-line errors.

Every command that writes files (``build`` and the dataset writer, ``judge``, ``metrics``, ``generate``, ``demo``,
``leaderboard``'s plots, the call cache's folder) writes through these helpers (here, below ``echo_builder``, so the
dataset writer can use them too), which guarantee:

- **Containment.** Every path written, replaced or deleted lies below the output folder ``root`` (the folder the
  user named, which may itself be a symbolic link), and no path component below ``root`` is a symbolic link. A link
  planted at ``OUT/README.md``, ``OUT/<config>/`` or ``RUN/run.json`` is refused with :class:`UnsafeOutputPathError`
  before anything is written through it; files are opened with ``O_NOFOLLOW | O_EXCL``.
- **Atomicity.** A file is written to a temporary name in its own folder and renamed over the target
  (``os.replace``) only once complete, so a crash or a full disk never leaves a truncated file, and a failed run
  leaves the previous run's file as it was. The temporary file is removed on failure (which also gives back the
  space a full disk needs for the call cache's last entries).
- **One clear error.** Any ``OSError`` while writing (read-only folder, full disk, permission denied) becomes an
  :class:`OutputWriteError` naming the path and what to do, which the CLI prints as one ``error:`` line.

Output folders are also *claimed* (:func:`claim_output`): a command writes into a non-empty folder only when it
recognises its own earlier run there (the ``.echo-bench.json`` marker it writes first, or the files an older
version left), so a mistyped ``--out`` never overwrites somebody else's files.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
import stat
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import IO, Any

from echo_dataset.errors import EchoDatasetError

__all__ = [
    "MARKER_FILE",
    "OutputFolderError",
    "OutputWriteError",
    "UnsafeOutputPathError",
    "check_inside",
    "claim_output",
    "describe_os_error",
    "ensure_dir",
    "mark_output",
    "open_atomic",
    "read_marker",
    "refuse_links",
    "remove",
    "write_bytes",
    "write_json",
    "write_text",
]

#: The marker every command writes first into an output folder it creates: ``{"kind": "build" | ..., ...}``.
MARKER_FILE = ".echo-bench.json"
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_CLOEXEC = getattr(os, "O_CLOEXEC", 0)


class OutputFolderError(EchoDatasetError, ValueError):
    """The output folder cannot be used: it holds files this command did not write, or a run of another kind."""


class UnsafeOutputPathError(OutputFolderError):
    """A path to be written leads outside the output folder (a symbolic link, or ``..``)."""


class OutputWriteError(EchoDatasetError, OSError):
    """Writing inside the output folder failed (read-only folder, full disk, permission denied)."""


def describe_os_error(exc: OSError, path: str | Path | None = None, *, action: str = "write") -> str:
    """One line for an ``OSError`` while writing: the path, the system's reason and what to do next."""
    where = path if path is not None else (exc.filename or "a file")
    reason = exc.strerror or str(exc)
    hint = {
        errno.ENOSPC: "the disk is full: free space and run the command again (files already complete are kept)",
        errno.EDQUOT: "the disk quota is exhausted: free space and run the command again",
        errno.EROFS: "the file system is read-only: choose another --out",
        errno.EACCES: "no permission to write there: choose another --out",
        errno.EPERM: "no permission to write there: choose another --out",
    }.get(exc.errno or 0)
    return f"cannot {action} {where}: {reason}" + (f"; {hint}" if hint else "")


def _components(root: Path, path: Path) -> list[Path]:
    """``path``'s ancestors below ``root`` and ``path`` itself, outermost first; raises when not below ``root``."""
    try:
        relative = path.relative_to(root)
    except ValueError:
        relative = None
    if relative is None or any(part == ".." for part in relative.parts):
        raise UnsafeOutputPathError(f"{path} is outside the output folder {root}; nothing was written there")
    out, current = [], root
    for part in relative.parts:
        current = current / part
        out.append(current)
    return out


def check_inside(root: str | Path, path: str | Path, *, final_may_be_link: bool = False) -> Path:
    """``path`` when no component of it below ``root`` is a symbolic link (nor ``..``); raises otherwise.

    Args:
        root: the output folder (may itself be a link: the user chose it).
        path: a path below ``root`` (``root / "stages" / "collect.jsonl"``); it need not exist.
        final_may_be_link: accept a link as the last component (deleting a link removes only the link).

    Raises:
        UnsafeOutputPathError: a component is a symbolic link, or ``path`` is not below ``root``.
    """
    root, path = Path(root), Path(path)
    parts = _components(root, path)
    for i, part in enumerate(parts):
        try:
            mode = os.lstat(part).st_mode
        except FileNotFoundError:
            break  # nothing below a missing folder exists yet
        except NotADirectoryError:
            break
        if stat.S_ISLNK(mode) and not (final_may_be_link and i == len(parts) - 1):
            target = os.readlink(part)
            raise UnsafeOutputPathError(
                f"{part} is a symbolic link (to {target}); echo-bench writes only inside the output folder "
                f"{root} and never through a link: remove the link or choose another --out"
            )
    return path


def refuse_links(root: str | Path) -> None:
    """Raise :class:`UnsafeOutputPathError` for the first symbolic link anywhere below ``root`` (links are not
    followed while looking). Commands call it on an output folder they are about to write again: a link planted
    in a media store or a cache folder would otherwise receive writes meant for the folder."""
    root = Path(root)
    for folder, dirs, names in os.walk(root, followlinks=False):
        for name in sorted([*dirs, *names]):
            path = Path(folder) / name
            if path.is_symlink():
                raise UnsafeOutputPathError(
                    f"{path} is a symbolic link (to {os.readlink(path)}); echo-bench writes only inside the "
                    f"output folder {root} and never through a link: remove the link or choose another --out"
                )


def ensure_dir(root: str | Path, path: str | Path | None = None) -> Path:
    """Create ``path`` (default ``root``) and its missing parents below ``root``, refusing links; returns it.

    Raises:
        UnsafeOutputPathError: a component below ``root`` is a link.
        OutputWriteError: the folder cannot be created (read-only, full disk, a file in the way).
    """
    root = Path(root)
    target = root if path is None else Path(path)
    try:
        root.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise OutputWriteError(describe_os_error(exc, root, action="create the folder")) from None
    if target == root:
        return target
    for part in _components(root, target):
        check_inside(root, part)
        try:
            os.mkdir(part)
        except FileExistsError:
            if not part.is_dir():
                raise OutputWriteError(f"cannot create the folder {part}: a file is in the way") from None
        except OSError as exc:
            raise OutputWriteError(describe_os_error(exc, part, action="create the folder")) from None
    return target


@contextlib.contextmanager
def open_atomic(
    root: str | Path, path: str | Path, mode: str = "wb", encoding: str = "utf-8"
) -> Iterator[IO[Any]]:
    """A new file object whose content replaces ``path`` atomically when the ``with`` block ends without error.

    The temporary file ``.<name>.tmp-<pid>`` is created next to ``path`` with ``O_EXCL | O_NOFOLLOW``; on an
    exception it is removed and ``path`` keeps its previous content. ``mode`` is ``"wb"`` or ``"w"`` (text,
    ``encoding``).

    Raises:
        UnsafeOutputPathError: ``path`` or a folder above it (below ``root``) is a symbolic link.
        OutputWriteError: the write failed (read-only folder, full disk...).
    """
    root, path = Path(root), Path(path)
    if mode not in ("wb", "w"):
        raise ValueError(f"mode must be 'wb' or 'w', got {mode!r}")
    ensure_dir(root, path.parent)
    check_inside(root, path)
    tmp_name = f".{path.name}.tmp-{os.getpid()}"
    if (
        len(tmp_name.encode("utf-8", "surrogateescape")) > 255
    ):  # a name already at NAME_MAX: a hashed stand-in
        tmp_name = f".{hashlib.sha256(os.fsencode(path.name)).hexdigest()[:24]}.tmp-{os.getpid()}"
    tmp = path.with_name(tmp_name)
    with contextlib.suppress(FileNotFoundError):
        if stat.S_ISLNK(os.lstat(tmp).st_mode) or tmp.is_file():
            os.unlink(tmp)  # left by a crashed run of this process id (a link is removed, never followed)
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW | _CLOEXEC, 0o644)
    except OSError as exc:
        raise OutputWriteError(describe_os_error(exc, path)) from None
    done = False
    try:
        with os.fdopen(fd, mode, **({"encoding": encoding, "newline": ""} if mode == "w" else {})) as f:
            yield f
        check_inside(root, path)  # re-checked: a link planted while the file was written is refused too
        if path.is_dir() and not path.is_symlink():
            raise OutputWriteError(f"cannot write {path}: a folder is in the way")
        os.replace(tmp, path)
        done = True
    except OutputWriteError:
        raise
    except OSError as exc:
        raise OutputWriteError(describe_os_error(exc, path)) from None
    finally:
        if not done:
            with contextlib.suppress(OSError):
                os.unlink(tmp)


def write_bytes(root: str | Path, path: str | Path, data: bytes) -> Path:
    """Write ``data`` to ``path`` below ``root`` atomically (see :func:`open_atomic`); returns ``path``."""
    with open_atomic(root, path, "wb") as f:
        f.write(data)
    return Path(path)


def write_text(root: str | Path, path: str | Path, text: str) -> Path:
    """Write ``text`` (UTF-8) to ``path`` below ``root`` atomically; returns ``path``."""
    return write_bytes(root, path, text.encode("utf-8"))


def write_json(root: str | Path, path: str | Path, data: Any, **dumps: Any) -> Path:
    """Write ``data`` as JSON (``indent=2`` unless given, a final newline) to ``path`` below ``root``."""
    dumps.setdefault("indent", 2)
    return write_text(root, path, json.dumps(data, **dumps) + "\n")


def remove(root: str | Path, path: str | Path) -> bool:
    """Delete the file (or link: only the link) ``path`` below ``root``; ``False`` when it did not exist.

    Raises:
        UnsafeOutputPathError: a folder above ``path`` (below ``root``) is a link, so the file is elsewhere.
        OutputWriteError: it cannot be deleted.
    """
    check_inside(root, path, final_may_be_link=True)
    try:
        os.unlink(path)
    except FileNotFoundError:
        return False
    except OSError as exc:
        raise OutputWriteError(describe_os_error(exc, path, action="delete")) from None
    return True


# ------------------------------------------------------------------------------------------------ claiming folders
def read_marker(folder: str | Path) -> dict[str, Any] | None:
    """The folder's ``.echo-bench.json`` marker, or ``None`` (absent, a link, unreadable)."""
    path = Path(folder) / MARKER_FILE
    try:
        if stat.S_ISLNK(os.lstat(path).st_mode):
            return None
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def mark_output(root: str | Path, kind: str, **fields: Any) -> dict[str, Any]:
    """Write (or update) ``root``'s marker: ``{"kind": kind, **fields}`` (atomically); returns it."""
    marker = {**(read_marker(root) or {}), "kind": kind, **fields}
    write_json(root, Path(root) / MARKER_FILE, marker, sort_keys=True)
    return marker


def claim_output(
    root: str | Path,
    kind: str,
    *,
    signatures: Iterable[str | tuple[str, ...]] = (),
    allowed: Iterable[str] = (),
    what: str | None = None,
    scan_links: bool = True,
) -> dict[str, Any] | None:
    """Check that a run of ``kind`` may write into ``root``, then create ``root`` and probe that it is writable.

    ``root`` may be absent or empty; hold a run of the same ``kind`` (its marker, or any of ``signatures``: the
    files an older version wrote); or hold only entries listed in ``allowed`` (e.g. a seeded ``media/``). Anything
    else is refused: the command never overwrites files it did not write.

    Args:
        root: the output folder.
        kind: ``build``, ``judge``, ``metrics``, ``demo``, ``generate``.
        signatures: what shows an earlier run of ``kind`` written before the marker existed: a path relative to
            ``root``, or a tuple of paths that must all exist.
        allowed: names that may already be there in a folder that is not yet a run (seeded inputs).
        what: how to call a run of ``kind`` in messages (default ``"<kind> run"``).
        scan_links: refuse a folder holding a symbolic link anywhere below it (see :func:`refuse_links`).

    Returns:
        The earlier run's marker (``{}`` for one recognised by its signature files), or ``None`` for a new folder.

    Raises:
        OutputFolderError: ``root`` is a file, holds a run of another kind, or holds files that are not a run.
        OutputWriteError: ``root`` cannot be created or written (read-only, full disk).
    """
    root = Path(root)
    what = what or f"{kind} run"
    if root.exists() and not root.is_dir():
        raise OutputFolderError(
            f"--out {root} is a file; give a folder (absent, empty, or an earlier {what})"
        )
    previous: dict[str, Any] | None = None
    if root.is_dir():
        try:
            entries = sorted(p.name for p in root.iterdir())
        except OSError as exc:
            raise OutputWriteError(describe_os_error(exc, root, action="read the folder")) from None
        marker = read_marker(root)
        if marker is not None:
            if marker.get("kind") != kind:
                raise OutputFolderError(
                    f"--out {root} holds an echo-bench {marker.get('kind')} output, not a {what}; choose another "
                    "--out"
                )
            previous = marker
        elif any(all((root / n).exists() for n in ((s,) if isinstance(s, str) else s)) for s in signatures):
            previous = {}
        else:
            # ``.echo-bench*``: the marker's temporary file or the probe of another process starting the same run
            foreign = [
                n for n in entries if n not in set(allowed) and not n.startswith((".echo-bench", MARKER_FILE))
            ]
            if foreign:
                shown = ", ".join(foreign[:5]) + (", ..." if len(foreign) > 5 else "")
                raise OutputFolderError(
                    f"--out {root} is not empty and is not an earlier {what} (it holds {shown}); echo-bench "
                    "never overwrites files it did not write: choose a new or empty folder"
                )
        if scan_links:
            refuse_links(root)
    ensure_dir(root)
    probe = root / f".echo-bench-probe-{os.getpid()}"
    try:
        write_bytes(root, probe, b"")
    finally:
        with contextlib.suppress(OSError):
            os.unlink(probe)
    return previous
