"""One writer per output folder: the exclusive lock every writing command holds on its ``--out`` while it runs.

``collect``, ``build``, ``judge``, ``metrics``, ``generate`` (on ``OUTPUTS/<name>``, the folder it writes),
``import`` and ``analyze`` enter :func:`exclusive_output` before they read or write anything in their output folder.
A second run into the same folder while the first one runs is refused at once with one line naming the first
run's process (:class:`OutputInUseError`)::

    error: runs/x is in use by another echo-bench run (pid 1234, started 2026-12-01 10:00:00 UTC: echo-bench
    judge ... --out runs/x); wait for it to finish or choose another --out

The lock is an ``flock`` (through the ``filelock`` library, never waiting: timeout 0) on ``OUT/.echo-bench.lock``;
the holder records itself in ``OUT/.echo-bench.owner.json`` (pid, host, command line, start time) right after
acquiring it, so that a refused run can name it (the lock file itself stays empty). The kernel releases an
``flock`` when its process dies, however it dies, so a run killed with SIGKILL never blocks the next one: its
owner file is then stale and simply overwritten. A run that ends (normally or with an error) removes both files,
so a finished folder holds neither; a killed run leaves them behind, and every check of what a folder holds
ignores them (:func:`is_lock_file`; :func:`echo_dataset.safe_io.claim_output` ignores every ``.echo-bench*``
name), as do ``publish`` and ``leaderboard --push-to-hub``, which upload only the files they list.

Processes started together by ``accelerate launch`` / ``torchrun`` (``WORLD_SIZE > 1``) share their run's folder:
the main process (``RANK`` 0) holds the lock for all of them, and the others only check that no other run holds
it.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import json
import os
import re
import shlex
import socket
import stat
import sys
import time
import warnings
from collections.abc import Callable, Iterator
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, TypeVar

from echo_builder.errors import EchoError

__all__ = [
    "LOCK_FILE",
    "LOCK_FILES",
    "OWNER_FILE",
    "OutputInUseError",
    "exclusive_output",
    "is_lock_file",
    "locks_output",
    "read_owner",
]

#: The file whose ``flock`` is the lock (empty; inside the output folder).
LOCK_FILE = ".echo-bench.lock"
#: The holder's record, beside the lock file: ``pid``, ``host``, ``command``, ``command_line``, ``started_at``...
OWNER_FILE = ".echo-bench.owner.json"
#: Both names: what an output folder may hold besides a command's own files (ignore them when listing a folder).
LOCK_FILES = frozenset({LOCK_FILE, OWNER_FILE})

#: How long a refused run waits for the holder's owner record to appear (it is written right after the lock is
#: taken; a holder that is releasing it lets the refused run take it instead), in seconds.
_SETTLE_S = 2.0
_MAX_OWNER_BYTES = 64 * 1024
_MAX_SHOWN = 300  # characters of the other run's command line in the message
#: ``flock`` is not supported by the file system (some network mounts): the run goes on without a lock.
_NO_LOCKING = {errno.ENOSYS, errno.ENOLCK, errno.EOPNOTSUPP, getattr(errno, "ENOTSUP", errno.EOPNOTSUPP)}
#: The lock file cannot be created because the folder cannot be written: nor can the command, which says so.
_UNWRITABLE = {errno.EROFS, errno.EACCES, errno.EPERM, errno.ENOSPC, errno.EDQUOT}
#: Option and ``-o KEY=VALUE`` names whose values are credentials (``--token``, ``api_key``, ``hf_token``), whole words
#: only (``--keywords`` and ``max_tokens`` are not).
_SECRET_NAME = re.compile(
    r"(?:^|[-_])(?:api[-_]?key|key|token|secret|password|passwd|credentials?|authorization)(?:$|[-_])",
    re.IGNORECASE,
)

F = TypeVar("F", bound=Callable[..., Any])


class OutputInUseError(EchoError):
    """Another echo-bench run holds the output folder's lock.

    Attributes:
        folder: the output folder.
        owner: the other run's record (``pid``, ``command_line``, ``started_at``, ``host``...), or ``None`` when
            its process could not be identified.
    """

    def __init__(self, folder: str | Path, owner: dict[str, Any] | None) -> None:
        self.folder = Path(folder)
        self.owner = owner
        super().__init__(
            f"{folder} is in use by another echo-bench run ({_describe(owner)}); wait for it to finish or choose "
            "another --out"
        )


def is_lock_file(name: str | os.PathLike[str]) -> bool:
    """Whether ``name`` (a file name or path) is one of the lock's files (:data:`LOCK_FILES`), which a listing of
    an output folder must ignore."""
    return Path(name).name in LOCK_FILES


def read_owner(folder: str | Path) -> dict[str, Any] | None:
    """The owner record in ``folder`` (``OUT/.echo-bench.owner.json``), or ``None`` when it is absent,
    unreadable, a link or not a record. The record may be stale (a run killed with SIGKILL leaves it)."""
    path = Path(folder) / OWNER_FILE
    try:
        info = os.lstat(path)
        if not stat.S_ISREG(info.st_mode) or info.st_size > _MAX_OWNER_BYTES:
            return None
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or not isinstance(data.get("pid"), int) or isinstance(data["pid"], bool):
        return None
    return data


@contextlib.contextmanager
def exclusive_output(out_dir: str | Path, command: str, *, root: str | Path | None = None) -> Iterator[Path]:
    """Hold the exclusive lock on the output folder ``out_dir`` for the ``with`` block.

    Creates ``out_dir`` (and its missing parents) when absent, takes the ``flock`` of ``out_dir/.echo-bench.lock``
    without waiting, and writes ``out_dir/.echo-bench.owner.json`` (``pid``, ``host``, ``command``,
    ``command_line`` with credentials hidden, ``started_at``, and ``launch`` under ``accelerate launch``). On leaving
    the block both files are removed and the lock released; when the block raised, every folder this call created
    is removed again if it is empty (a command that fails its checks leaves no new empty folder behind).

    The block runs unlocked, and the command's own checks and writes report the problem in their own words, when
    ``out_dir`` exists but is not a folder (a file, a dangling link) or cannot be created (a file in the way, a
    read-only parent) or no file can be created in it (read-only, full), and after a warning (shown by the CLI as a
    ``note:`` line) when the lock file cannot be locked (a file system without ``flock``, another user's lock file).
    When the owner record cannot be written (a full disk) the lock is held without it. A process started by
    ``accelerate launch`` with ``RANK`` > 0 takes no lock (its main process holds it) and writes nothing; it only
    refuses to run when another run holds the folder.

    Args:
        out_dir: the output folder (it may itself be a symbolic link: the user chose it).
        command: the command's name for the owner record (``build``, ``import echo2025``).
        root: the folder ``out_dir`` must lie in through no symbolic link (``generate`` locks ``OUTPUTS/<name>``
            below ``OUTPUTS``); default ``out_dir`` itself.

    Yields:
        ``out_dir`` as a :class:`~pathlib.Path`.

    Raises:
        OutputInUseError: another live run holds the lock (nothing was written).
        UnsafeOutputPathError: the lock or owner file, or a folder between ``root`` and ``out_dir``, is a
            symbolic link.
    """
    from echo_dataset.safe_io import OutputWriteError, UnsafeOutputPathError, check_inside

    out = Path(out_dir)
    base = Path(root) if root is not None else out
    if os.path.lexists(out) and not out.is_dir():
        yield out  # a file or a dangling link: the command's own check refuses it with its own message
        return
    lock_path, owner_path = out / LOCK_FILE, out / OWNER_FILE
    check_inside(base, lock_path)
    check_inside(base, owner_path)
    launch = _launch()
    if launch is not None and launch[0] > 0:  # a non-main process of a launch: its main process holds it
        owner = _live_owner(out)
        if owner is not None and owner.get("launch") != launch[1]:
            raise OutputInUseError(out, owner)
        yield out
        return
    try:
        created = _make_folders(out)
    except OSError:
        # a file in the way, a read-only parent: the command's own first write says so, in its own words
        yield out
        return
    lock = None
    identity: tuple[int, int] | None = None
    try:
        try:
            lock = _acquire(out, lock_path)
        except OutputInUseError:
            raise
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise UnsafeOutputPathError(
                    f"{lock_path} is a symbolic link; echo-bench writes only inside the output folder {base} and "
                    "never through a link: remove the link or choose another --out"
                ) from None
            if exc.errno not in _UNWRITABLE or os.path.lexists(lock_path):
                # no flock on this file system, or a lock file this process cannot open: go on, unprotected
                reason = "this file system cannot lock files" if exc.errno in _NO_LOCKING else "no lock"
                warnings.warn(
                    f"{out} is not locked ({reason}: {exc.strerror or exc}); a second run into the same folder "
                    "would not be refused",
                    stacklevel=3,
                )
            # else no file can be created in the folder (read-only, full): the command's first write says so
        if lock is not None:
            with contextlib.suppress(OSError):
                info = os.lstat(lock_path)
                identity = (info.st_dev, info.st_ino)
            # a full disk: the lock holds all the same (a refused run then finds the pid in /proc/locks)
            with contextlib.suppress(OutputWriteError):
                _write_owner(out, owner_path, command, launch)
        yield out
    except BaseException:
        _release(lock, out, lock_path, owner_path, identity)
        lock = None
        _remove_empty(created)
        raise
    finally:
        _release(lock, out, lock_path, owner_path, identity)


def locks_output(
    command: str, *, folder: Callable[[dict[str, Any]], tuple[Path, Path]] | None = None
) -> Callable[[F], F]:
    """Decorator for a command's callback: run it inside :func:`exclusive_output` of its ``out_dir`` argument.

    Args:
        command: the command's name (``build``, ``import echo2025``).
        folder: ``f(arguments) -> (folder to lock, root)`` for a command that writes below ``--out`` rather than
            into it (``generate``: ``OUTPUTS/<name>`` below ``OUTPUTS``); it may raise to refuse the arguments.
            Default: ``(out_dir, out_dir)``.
    """

    def decorate(function: F) -> F:
        @functools.wraps(function)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            if folder is not None:
                target, root = folder(kwargs)
            else:
                target = root = Path(kwargs["out_dir"])
            with exclusive_output(target, command, root=root):
                return function(*args, **kwargs)

        return wrapper  # type: ignore[return-value]

    return decorate


# ------------------------------------------------------------------------------------------------------- internals
def _acquire(out: Path, lock_path: Path) -> Any:
    """The acquired ``FileLock``; raises :class:`OutputInUseError` when a live run holds it."""
    from filelock import Timeout

    deadline = time.monotonic() + _SETTLE_S
    delay = 0.005
    while True:
        lock = _new_lock(lock_path)
        try:
            lock.acquire()
        except Timeout:
            pass
        else:
            if _holds_the_named_file(lock, lock_path):
                return lock
            lock.release()  # locked a file that the previous holder removed meanwhile: try the new one
        owner = _live_owner(out)
        if owner is not None:
            raise OutputInUseError(out, owner)
        if time.monotonic() >= deadline:
            raise OutputInUseError(out, _holder_from_proc_locks(lock_path))
        # the holder has not written its record yet, or is releasing the lock (it removes the lock file first)
        time.sleep(delay)
        delay = min(delay * 2, 0.1)


def _new_lock(lock_path: Path) -> Any:
    """A non-waiting ``FileLock`` on ``lock_path`` (0644, shared between threads, no soft-file fallback)."""
    from filelock import FileLock

    try:
        return FileLock(str(lock_path), timeout=0, mode=0o644, thread_local=False, fallback_to_soft=False)
    except TypeError:  # filelock 3.x, which has no soft fallback to turn off
        return FileLock(str(lock_path), timeout=0, mode=0o644, thread_local=False)


def _holds_the_named_file(lock: Any, lock_path: Path) -> bool:
    """Whether the file ``lock`` locked is still the one at ``lock_path`` (a holder removes the file before it
    releases it, so a run that opened the file just before then has locked a removed file)."""
    fd = getattr(getattr(lock, "_context", None), "lock_file_fd", None)
    if not isinstance(fd, int):
        return True  # no way to tell with this filelock version
    try:
        return os.path.samestat(os.fstat(fd), os.lstat(lock_path))
    except OSError:
        return False


def _release(
    lock: Any, out: Path, lock_path: Path, owner_path: Path, identity: tuple[int, int] | None
) -> None:
    """Remove the owner record and the lock file (while still holding the lock), then release it."""
    if lock is None or not lock.is_locked:
        return
    try:
        record = read_owner(out)
        if record is not None and record.get("pid") == os.getpid():
            with contextlib.suppress(OSError):
                os.unlink(owner_path)
        with contextlib.suppress(OSError):
            info = os.lstat(lock_path)
            # a waiter that opened this file before it was removed finds it unlinked and tries again
            if identity is not None and (info.st_dev, info.st_ino) == identity:
                os.unlink(lock_path)
    finally:
        lock.release()


def _make_folders(out: Path) -> list[Path]:
    """Create ``out`` and its missing parents; the folders created, outermost first. Raises ``OSError`` (after
    removing what it created) when one cannot be created."""
    missing: list[Path] = []
    current = out
    while not os.path.lexists(current) and current != current.parent:
        missing.append(current)
        current = current.parent
    created: list[Path] = []
    for folder in reversed(missing):
        try:
            os.mkdir(folder)
        except FileExistsError:
            if not folder.is_dir():
                _remove_empty(created)
                raise
            continue  # another process made it at the same moment: not ours to remove
        except OSError:
            _remove_empty(created)
            raise
        created.append(folder)
    return created


def _remove_empty(created: list[Path]) -> None:
    """Remove the folders this run created, innermost first, as long as they are empty."""
    for folder in reversed(created):
        try:
            os.rmdir(folder)
        except OSError:
            return


def _write_owner(out: Path, owner_path: Path, command: str, launch: tuple[int, str] | None) -> None:
    from echo_dataset.safe_io import write_json

    now = time.time()
    record: dict[str, Any] = {
        "pid": os.getpid(),
        "host": socket.gethostname(),
        "command": command,
        "command_line": _command_line(command),
        "started_at": datetime.fromtimestamp(now, timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC"),
        "started_at_unix": round(now, 3),
    }
    process_start = _process_start(os.getpid())
    if process_start is not None:
        record["process_start"] = process_start
    if launch is not None:
        record["launch"] = launch[1]
    write_json(out, owner_path, record, sort_keys=True)


def _live_owner(out: Path) -> dict[str, Any] | None:
    """The owner record when its process is still running (on another host: taken as running), else ``None``."""
    record = read_owner(out)
    if record is None:
        return None
    if record.get("host") not in (None, socket.gethostname()):
        return record  # cannot be checked from here: a run on another machine sharing the folder
    pid = record["pid"]
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return None
    except PermissionError:
        pass  # another user's process: alive
    except OSError:
        return None
    recorded = record.get("process_start")
    if recorded is not None and _process_start(pid) not in (None, recorded):
        return None  # the pid was reused by another process
    if _is_zombie(pid):
        return None  # exited (its files, and so its lock, are closed) but not yet reaped
    return record


def _process_start(pid: int) -> int | None:
    """The process's start time in clock ticks since boot (Linux ``/proc``), to tell a reused pid apart."""
    fields = _proc_stat(pid)
    try:
        return int(fields[19]) if fields else None
    except (IndexError, ValueError):
        return None


def _is_zombie(pid: int) -> bool:
    fields = _proc_stat(pid)
    return bool(fields) and fields[0] == "Z"


def _proc_stat(pid: int) -> list[str] | None:
    """The fields of ``/proc/PID/stat`` after the command name (state first), or ``None`` without ``/proc``."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return text.rpartition(")")[2].split()


def _holder_from_proc_locks(lock_path: Path) -> dict[str, Any] | None:
    """Who holds the ``flock`` of ``lock_path``, from Linux's ``/proc/locks`` (when no owner record names it)."""
    try:
        info = os.stat(lock_path)
        lines = Path("/proc/locks").read_text().splitlines()
    except OSError:
        return None
    where = f"{os.major(info.st_dev):02x}:{os.minor(info.st_dev):02x}:{info.st_ino}"
    for line in lines:
        fields = line.split()
        if len(fields) >= 6 and "->" not in fields and fields[1] == "FLOCK" and fields[5] == where:
            try:
                pid = int(fields[4])
            except ValueError:
                continue
            try:
                raw = Path(f"/proc/{pid}/cmdline").read_bytes()
                words = [w.decode("utf-8", "replace") for w in raw.split(b"\0") if w]
            except OSError:
                words = []
            return {"pid": pid, "command_line": shlex.join(_hide_secrets(words)) if words else None}
    return None


def _launch() -> tuple[int, str] | None:
    """``(rank, launch id)`` for a process started by ``accelerate launch`` / ``torchrun``, else ``None``."""
    try:
        if int(os.environ.get("WORLD_SIZE", "1")) <= 1:
            return None
        rank = int(os.environ.get("RANK", "0"))
    except ValueError:
        return None
    env = os.environ
    return (
        rank,
        f"{env.get('MASTER_ADDR', '')}:{env.get('MASTER_PORT', '')}/{env.get('TORCHELASTIC_RUN_ID', '')}",
    )


def _command_line(command: str) -> str:
    """This process's command line as a user typed it (``echo-bench build ...``), credentials hidden."""
    args = list(sys.argv[1:])
    # called from Python (a notebook, a test runner), the process's own argv would mislead: the command only
    words = ["echo-bench", *args] if command.split()[0] in args else ["echo-bench", *command.split()]
    return shlex.join(_hide_secrets(words))


def _hide_secrets(words: list[str]) -> list[str]:
    """``words`` with the values of credential options (``--token X``, ``-o api_key=X``), URL passwords and every
    known secret (:func:`echo_builder.secrets.redact`) replaced by ``***``."""
    from echo_builder.secrets import redact, redact_url

    shown: list[str] = []
    hide_next = False
    for word in words:
        if hide_next:
            shown.append("***")
            hide_next = False
            continue
        name, sep, _ = word.partition("=")
        if word.startswith("-") and not sep and _SECRET_NAME.search(word.lstrip("-")):
            hide_next = True
            shown.append(word)
        elif sep and _SECRET_NAME.search(name.lstrip("-")):
            shown.append(f"{name}=***")
        elif "://" in word:
            shown.append(redact_url(word))
        else:
            shown.append(redact(word))
    return shown


def _describe(owner: dict[str, Any] | None) -> str:
    """``pid 1234, started ...: echo-bench build ...`` for the message."""
    if owner is None:
        return "its process could not be identified"
    where = f"pid {owner['pid']}"
    host = owner.get("host")
    if host and host != socket.gethostname():
        where += f" on {host}"
    if owner.get("started_at"):
        where += f", started {owner['started_at']}"
    line = " ".join(str(owner.get("command_line") or "").split())
    if len(line) > _MAX_SHOWN:
        line = line[: _MAX_SHOWN - 3] + "..."
    return f"{where}: {line}" if line else where
