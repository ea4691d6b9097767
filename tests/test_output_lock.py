"""One writer per output folder (issue 29): the lock every writing command holds on its ``--out``.

A tiny helper process (``tests.helpers.hold_output``) holds a folder's lock the way a running command does; a second
run of each command into that folder, in this process or as a real ``echo-bench`` process, must be refused with one
``error:`` line naming the helper's pid and command line, and change nothing in the folder. A lock left by a
SIGKILLed run never blocks. The processes are synchronised through their pipes, never by sleeping.
"""

from __future__ import annotations

import hashlib
import json
import os
import selectors
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from echo_builder.cli import cli
from echo_builder.outlock import (
    LOCK_FILE,
    LOCK_FILES,
    OWNER_FILE,
    OutputInUseError,
    exclusive_output,
    is_lock_file,
    read_owner,
)
from tests.conftest import REPO_ROOT
from tests.helpers.launch import cpu_env

DEADLINE_S = 60  # a generous bound on the helper's start (an import), never a synchronisation sleep


class Holder:
    """A helper process holding a folder's lock (see :func:`hold`)."""

    def __init__(self, proc: subprocess.Popen[str], pid: int) -> None:
        self.proc, self.pid = proc, pid

    def kill(self) -> None:
        """SIGKILL it (the lock and owner files stay behind, stale) and reap it."""
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=DEADLINE_S)


def _read_line(proc: subprocess.Popen[str], deadline_s: float) -> str:
    """The next line of ``proc``'s standard output, failing the test after ``deadline_s`` seconds."""
    assert proc.stdout is not None
    with selectors.DefaultSelector() as selector:
        selector.register(proc.stdout, selectors.EVENT_READ)
        if not selector.select(timeout=deadline_s):
            proc.kill()
            pytest.fail(f"the helper printed nothing within {deadline_s} s")
    return proc.stdout.readline()


@contextmanager
def hold(
    out: Path, command: str, root: Path | None = None, env: dict[str, str] | None = None
) -> Iterator[Holder]:
    """Start ``tests.helpers.hold_output`` on ``out`` and wait until it holds the lock; release it on exit."""
    args = [sys.executable, "-m", "tests.helpers.hold_output", str(out), command]
    if root is not None:
        args.append(str(root))
    proc = subprocess.Popen(
        args,
        cwd=REPO_ROOT,
        env={**cpu_env(), **(env or {})},
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        line = _read_line(proc, DEADLINE_S)
        if not line.startswith("ready "):
            proc.wait(timeout=DEADLINE_S)
            pytest.fail(
                f"the helper did not take the lock: {line!r} {proc.stderr.read() if proc.stderr else ''}"
            )
        holder = Holder(proc, int(line.split()[1]))
        assert holder.pid == proc.pid
        yield holder
    finally:
        if proc.poll() is None:
            assert proc.stdin is not None
            proc.stdin.close()  # the helper leaves its `with` block: lock released, files removed
            proc.wait(timeout=DEADLINE_S)
        for stream in (proc.stdin, proc.stdout, proc.stderr):
            if stream is not None and not stream.closed:
                stream.close()


def _snapshot(folder: Path) -> dict[str, Any]:
    """Every entry under ``folder`` (and the folder itself): kind, size, modification time and content hash."""
    out: dict[str, Any] = {}
    for path in [folder, *sorted(folder.rglob("*"))]:
        info = path.lstat()
        key = path.relative_to(folder).as_posix()
        if path.is_symlink():
            out[key] = ("link", os.readlink(path))
        elif path.is_dir():
            out[key] = ("dir", info.st_mtime_ns)
        else:
            out[key] = ("file", info.st_size, info.st_mtime_ns, hashlib.sha256(path.read_bytes()).hexdigest())
    return out


def _cli(*args: Any) -> Any:
    return CliRunner().invoke(cli, [str(a) for a in args])


def _one_error(result: Any) -> str:
    """The run failed with exit code 1 and exactly one ``error:`` line, no traceback; returns that line."""
    assert result.exit_code == 1, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    assert "Traceback" not in result.output
    errors = [line for line in result.stderr.splitlines() if line.strip() and not line.startswith("note:")]
    assert len(errors) == 1 and errors[0].startswith("error: "), result.stderr
    return errors[0]


def _refused_line(line: str, out: Path, holder: Holder, command: str) -> None:
    assert line.startswith(f"error: {out} is in use by another echo-bench run (pid {holder.pid}, started "), (
        line
    )
    assert f": echo-bench {command} --out {out});" in line, line
    assert line.endswith("wait for it to finish or choose another --out"), line


# ----------------------------------------------------------------------------------------- every writing command
@pytest.fixture
def inputs(tmp_path: Path) -> dict[str, Path]:
    """Paths the commands' arguments must name (never read: the lock is checked first)."""
    posts = tmp_path / "posts.jsonl"
    posts.write_text("")
    (tmp_path / "bench").mkdir()
    (tmp_path / "outputs").mkdir()
    query = tmp_path / "query.txt"
    query.write_text("lumen\n")
    return {"posts": posts, "bench": tmp_path / "bench", "outputs": tmp_path / "outputs", "query": query}


def _command(name: str, inputs: dict[str, Path], out: Path) -> list[Any]:
    bench, outputs = inputs["bench"], inputs["outputs"]
    return {
        "build": ["build", inputs["posts"], "--offline", "--out", out],
        "judge": ["judge", "--benchmark", bench, "--config", "image_to_image", "--outputs", outputs,
                  "--judge", "openai:judge", "--out", out],
        "metrics": ["metrics", "--benchmark", bench, "--config", "image_to_image", "--outputs", outputs,
                    "--metric", "color_shift", "--out", out],
        "generate": ["generate", "--benchmark", bench, "--config", "image_to_image", "--model", "command:true",
                     "--name", "tiny", "--out", out],
        "import echo2025": ["import", "echo2025", bench, "--offline", "--out", out],
        "analyze": ["analyze", bench, "--out", out],
        "collect": ["collect", "bluesky", "--query-file", inputs["query"], "--launch-date", "2025-06-10",
                    "--out", out],
    }[name]  # fmt: skip


COMMANDS = ["collect", "build", "judge", "metrics", "generate", "import echo2025", "analyze"]


@pytest.mark.parametrize("command", COMMANDS)
def test_a_second_run_into_a_folder_in_use_is_refused_in_one_line_and_changes_nothing(
    tmp_path, inputs, command
):
    out = tmp_path / "out"
    out.mkdir()
    (out / "notes.txt").write_text("an earlier run's file")
    # generate writes (and locks) OUTPUTS/<name>; the others their --out
    locked, root = (out / "tiny", out) if command == "generate" else (out, None)
    with hold(locked, command, root=root) as holder:
        assert read_owner(locked)["pid"] == holder.pid
        before = _snapshot(out)
        line = _one_error(_cli(*_command(command, inputs, out)))
        _refused_line(line, locked, holder, command)
        assert _snapshot(out) == before  # not a byte, not a time stamp, not a file more
    assert not any((locked / name).exists() for name in LOCK_FILES)  # the holder removed both on release
    assert (out / "notes.txt").read_text() == "an earlier run's file"


def test_generate_runs_of_other_models_into_one_outputs_folder_go_on_side_by_side(tmp_path, inputs):
    """Only OUTPUTS/<name> is locked: another model's run into the same OUTPUTS is not refused (it fails later,
    on the empty benchmark, not on the lock)."""
    outputs = tmp_path / "outputs-folder"
    with hold(outputs / "other", "generate", root=outputs):
        result = _cli(*_command("generate", inputs, outputs))
    assert "in use by another echo-bench run" not in result.output
    assert not (outputs / "tiny").exists()  # the failed run left no empty model folder


def test_a_second_echo_bench_process_is_refused_with_exit_code_1(tmp_path, inputs):
    out = tmp_path / "run"
    with hold(out, "judge") as holder:
        before = _snapshot(out)
        done = subprocess.run(
            [sys.executable, "-m", "echo_builder.cli", *map(str, _command("judge", inputs, out))],
            cwd=REPO_ROOT,
            env=cpu_env(),
            capture_output=True,
            text=True,
            timeout=DEADLINE_S,
        )
        assert done.returncode == 1, done.stderr
        assert done.stdout == ""
        lines = done.stderr.splitlines()
        assert len(lines) == 1, done.stderr
        _refused_line(lines[0], out, holder, "judge")
        assert _snapshot(out) == before


def test_a_lock_left_by_a_killed_run_does_not_block_the_next_one(tmp_path):
    from tests.test_pipeline import _posts_file

    posts = tmp_path / "posts.jsonl"
    _posts_file(posts, n=6)
    out = tmp_path / "build"
    with hold(out, "build") as holder:
        holder.kill()
    assert (out / LOCK_FILE).exists() and read_owner(out)["pid"] == holder.pid  # stale files stay behind
    result = _cli("build", posts, "--out", out, "--target-model", "GPT-4o", "--offline", "--no-pseudonymize")
    assert result.exit_code == 0, result.output
    assert (out / "report.json").is_file()
    assert not any((out / name).exists() for name in LOCK_FILES)  # released: both removed
    with hold(out, "build") as holder:  # and the next run takes it too
        assert read_owner(out)["pid"] == holder.pid


def test_a_stale_owner_record_is_overwritten(tmp_path):
    out = tmp_path / "out"
    with hold(out, "metrics") as holder:
        holder.kill()
    with exclusive_output(out, "metrics"):
        owner = read_owner(out)
        assert owner["pid"] == os.getpid() and owner["command"] == "metrics"
    assert sorted(p.name for p in out.iterdir()) == []


# ----------------------------------------------------------------------------------------- the context manager
def test_the_owner_record_names_the_run_and_hides_credentials(tmp_path, monkeypatch):
    monkeypatch.setattr(
        sys,
        "argv",
        ["/venv/bin/echo-bench", "judge", "--out", "x", "-o", "api_key=sk-very-secret", "--token", "hf_secret",
         "--base-url", "http://user:pw@127.0.0.1:1/v1", "-o", "max_tokens=16"],
    )  # fmt: skip
    with exclusive_output(tmp_path / "x", "judge"):
        text = (tmp_path / "x" / OWNER_FILE).read_text()
    owner = json.loads(text)
    assert owner["pid"] == os.getpid() and owner["command"] == "judge"
    assert owner["command_line"].startswith("echo-bench judge --out x -o 'api_key=***' --token '***'")
    assert "max_tokens=16" in owner["command_line"]
    for secret in ("sk-very-secret", "hf_secret", "pw@"):
        assert secret not in text


def test_a_failure_inside_removes_the_folders_it_created_and_keeps_the_others(tmp_path):
    new = tmp_path / "a" / "b" / "out"
    with pytest.raises(RuntimeError), exclusive_output(new, "build"):
        assert (new / LOCK_FILE).exists()
        raise RuntimeError("the inputs are invalid")
    assert not (tmp_path / "a").exists()  # nothing left behind, parents included
    existing = tmp_path / "existing"
    existing.mkdir()
    with pytest.raises(RuntimeError), exclusive_output(existing, "build"):
        raise RuntimeError("boom")
    assert existing.is_dir() and list(existing.iterdir()) == []
    kept = tmp_path / "kept"
    with pytest.raises(RuntimeError), exclusive_output(kept, "build"):
        (kept / "partial.json").write_text("{}")
        raise RuntimeError("late failure")
    assert sorted(p.name for p in kept.iterdir()) == ["partial.json"]


def test_a_command_that_fails_its_checks_leaves_no_new_folder(tmp_path, inputs):
    out = tmp_path / "new-run"
    result = _cli("judge", "--benchmark", inputs["bench"], "--config", "image_to_image", "--outputs",
                  inputs["outputs"], "--judge", "nope:model", "--out", out)  # fmt: skip
    _one_error(result)
    assert not out.exists()
    result = _cli(
        *_command("generate", inputs, tmp_path / "gen")[:-4], "--name", "../escape", "--out", tmp_path / "gen"
    )
    assert "cannot be used as a file name" in _one_error(result)
    assert not (tmp_path / "gen").exists() and not (tmp_path / "escape").exists()


def test_a_link_at_the_lock_file_is_refused_and_never_followed(tmp_path, inputs):
    out, victim = tmp_path / "out", tmp_path / "victim.txt"
    out.mkdir()
    victim.write_text("precious")
    (out / LOCK_FILE).symlink_to(victim)
    line = _one_error(_cli(*_command("metrics", inputs, out)))
    assert "symbolic link" in line and LOCK_FILE in line
    assert victim.read_text() == "precious" and (out / LOCK_FILE).is_symlink()


def test_a_file_at_out_is_left_to_the_command_to_refuse(tmp_path):
    out = tmp_path / "file"
    out.write_text("not a folder")  # (the CLI's --out refuses a file before the command starts)
    with exclusive_output(out, "analyze") as folder:
        assert folder == out
    assert out.read_text() == "not a folder" and sorted(p.name for p in tmp_path.iterdir()) == ["file"]


def test_launched_processes_share_their_main_process_lock(tmp_path, monkeypatch):
    """Under accelerate launch every process runs the command: rank 0 holds the lock; the others go on when it is
    their launch's, and are refused when another run holds the folder."""
    out = tmp_path / "run"
    launch = {
        "WORLD_SIZE": "2",
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": "29500",
        "TORCHELASTIC_RUN_ID": "none",
    }
    for key, value in {**launch, "RANK": "1"}.items():
        monkeypatch.setenv(key, value)
    with hold(out, "judge", env={**launch, "RANK": "0"}):
        before = _snapshot(out)
        with exclusive_output(out, "judge"):  # rank 1 of the same launch
            assert _snapshot(out) == before  # writes nothing
    with (
        hold(out, "judge", env={"WORLD_SIZE": "1"}) as holder,  # a run outside this launch
        pytest.raises(OutputInUseError, match=f"pid {holder.pid}"),
        exclusive_output(out, "judge"),
    ):
        pass


def test_lock_files_are_ignored_by_folder_checks_and_never_published(tmp_path):
    from huggingface_hub.utils import filter_repo_objects

    from echo_dataset.publish import publish
    from echo_dataset.safe_io import claim_output
    from echo_dataset.writer import write_hub_folder

    assert is_lock_file(LOCK_FILE) and is_lock_file(Path("x") / OWNER_FILE) and not is_lock_file("README.md")
    stale = tmp_path / "stale"
    with hold(stale, "build") as holder:
        holder.kill()
    assert claim_output(stale, "build") is None  # a folder holding only a killed run's lock files is empty
    rows = [{"id": "a", "prompt": "p"}]
    hub = write_hub_folder({"text_to_image": rows}, tmp_path / "hub", card_context={}, pseudonymize=False)
    for name in LOCK_FILES:
        (hub / name).write_bytes((stale / name).read_bytes())

    class Api:
        def create_repo(self, *args: Any, **kwargs: Any) -> None:
            pass

        def upload_folder(self, **kwargs: Any) -> str:
            root = Path(kwargs["folder_path"])
            local = sorted(p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file())
            self.uploaded = set(filter_repo_objects(local, allow_patterns=kwargs.get("allow_patterns")))
            return "commit"

    api = Api()
    publish(hub, "me/echo", api=api, check_pseudonymized=False)
    assert "README.md" in api.uploaded and not api.uploaded & LOCK_FILES
