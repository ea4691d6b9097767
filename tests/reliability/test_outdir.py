"""The output folder: nothing written outside it, nothing lost in it (issue 13 items 1, 6, 10, 11 and 16).

Every command that writes (``build``, ``judge``, ``metrics``, ``generate``, ``demo``, ``leaderboard``'s plots,
``publish``'s upload list, the dataset writer, the call cache) is driven through the CLI with:

- a symbolic link planted at each path it writes (file or folder), pointing outside the output folder: the
  command refuses with one ``error:`` line naming the link, or replaces only the link; nothing outside changes;
- an output folder holding files the command did not write: refused, the files unchanged;
- a read-only output folder and a disk that fills up at the N-th write: one ``error:`` line naming the path, no
  truncated file, and a rerun that completes and repeats no model call that was answered;
- a crashed build rerun as is, and a failed ``--resume`` over a finished build (its files stay as they were).

Read-only folders and full disks are simulated deterministically (``os.open`` refusing with ``EROFS``, a file write
raising ``ENOSPC`` at the N-th write, the cache's SQLite insert failing with ``database or disk is full``), since
the tests may run as root (which ignores permissions) and cannot mount file systems.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import shlex
import sqlite3
import sys
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from PIL import Image

from echo_builder.cli import cli
from tests.helpers.benchmark import make_benchmark, make_outputs, png_bytes

GREY = (128, 128, 128)


# ------------------------------------------------------------------------------------------------------ helpers
def _cli(*args: Any) -> Any:
    return CliRunner().invoke(cli, [str(a) for a in args])


def _tree(folder: Path) -> dict[str, str]:
    """Every entry under ``folder``: files by content hash, links by target, folders as ``dir``."""
    out: dict[str, str] = {}
    for path in sorted(folder.rglob("*")):
        key = path.relative_to(folder).as_posix()
        if path.is_symlink():
            out[key] = f"link:{os.readlink(path)}"
        elif path.is_dir():
            out[key] = "dir"
        else:
            out[key] = hashlib.sha256(path.read_bytes()).hexdigest()
    return out


def _one_error(result: Any, *fragments: str) -> str:
    """The run failed with exit code 1 and exactly one ``error:`` line (holding every fragment), no traceback."""
    assert result.exit_code == 1, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    assert "Traceback" not in result.output
    errors = [line for line in result.stderr.splitlines() if line.strip() and not line.startswith("note:")]
    assert len(errors) == 1 and errors[0].startswith("error: "), result.stderr
    for fragment in fragments:
        assert fragment in errors[0], (fragment, errors[0])
    return errors[0]


def _posts(path: Path) -> Path:
    from tests.test_pipeline import _posts_file

    _posts_file(path, n=6)
    return path


def _build(posts: Path, out: Path, *extra: Any) -> Any:
    return _cli(
        "build", posts, "--out", out, "--target-model", "GPT-4o", "--offline", "--no-pseudonymize", *extra
    )


def _bench(folder: Path) -> Path:
    grey = Image.new("RGB", (16, 16), GREY)
    samples = [{"id": f"s{i}", "prompt": f"make it warmer {i}", "inputs": [grey]} for i in range(3)]
    return make_benchmark(folder, "image_to_image", samples)


def _outputs(folder: Path) -> Path:
    colors = {"a": (150, 120, 100), "b": (100, 120, 150)}  # two models, six distinct judge calls
    return make_outputs(
        folder, {m: {f"s{i}": Image.new("RGB", (16, 16), c) for i in range(3)} for m, c in colors.items()}
    )


def _judge(bench: Path, outputs: Path, server: Any, run: Path, *extra: Any) -> Any:
    return _cli(
        "judge", "--benchmark", bench, "--config", "image_to_image", "--outputs", outputs, "--judge",
        "openai:judge", "--base-url", server.base_url, "--out", run, "--max-attempts", "1", *extra,
    )  # fmt: skip


def _metrics(bench: Path, outputs: Path, out: Path) -> Any:
    return _cli(
        "metrics", "--benchmark", bench, "--config", "image_to_image", "--outputs", outputs,
        "--metric", "color_shift", "--out", out, "--format", "csv",
    )  # fmt: skip


GENERATOR = "import json, sys; from PIL import Image; r = json.load(sys.stdin); Image.new('RGB', (8, 8)).save(r['output_path'])"


def _generate(bench: Path, out: Path, tmp: Path) -> Any:
    script = tmp / "gen.py"
    if not script.exists():
        script.write_text(GENERATOR)
    return _cli(
        "generate", "--benchmark", bench, "--config", "image_to_image", "--model", f"command:{shlex.quote(sys.executable)} {script}",
        "--name", "tiny", "--out", out,
    )  # fmt: skip


@pytest.fixture
def ws(tmp_path, openai_server) -> dict[str, Any]:
    """Inputs (posts, a benchmark, two models' outputs), an ``outside`` folder a link may point to, and a judge
    answering ``[[7]]``."""
    openai_server.reply = lambda body: "fine [[7]]"
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "victim.txt").write_text("precious")
    for config in ("text_to_image", "image_to_image", "analysis"):
        (outside / config).mkdir()
        (outside / config / "test-00000-of-00001.parquet").write_text("someone else's shard")
    return {
        "tmp": tmp_path,
        "posts": _posts(tmp_path / "posts.jsonl"),
        "bench": _bench(tmp_path / "bench"),
        "outputs": _outputs(tmp_path / "outputs"),
        "server": openai_server,
        "outside": outside,
    }


def _plant(out: Path, name: str, outside: Path) -> None:
    """Replace ``out/name`` by a link to the outside file (for a file) or folder (for a folder or a config)."""
    import shutil

    target = out / name
    is_dir = (
        target.is_dir()
        or name in ("text_to_image", "image_to_image", "analysis", "cache", "plots")
        or (name in ("stages", "media", "color_swatches", "tiny"))
    )
    if target.is_dir() and not target.is_symlink():
        shutil.rmtree(target)
    elif target.exists() or target.is_symlink():
        target.unlink()
    target.parent.mkdir(parents=True, exist_ok=True)
    if is_dir:
        dest = outside / (name if (outside / name).is_dir() else "dir")
        dest.mkdir(exist_ok=True)
        (dest / "keep.txt").write_text("keep")
        target.symlink_to(dest, target_is_directory=True)
    else:
        target.symlink_to(outside / "victim.txt")


# ------------------------------------------------------------------------------------------------ item 16: links
BUILD_PATHS = [
    "README.md",
    "report.json",
    "build.json",
    "text_to_image",
    "image_to_image",
    "stages",
    "media",
    "media/index.jsonl",  # inside the media store (written by the media stage): found by the scan for links
    "stages/collect.jsonl",
]


@pytest.mark.parametrize("name", BUILD_PATHS)
def test_build_never_writes_through_a_link_planted_in_its_folder(ws, name):
    out = ws["tmp"] / "out"
    assert _build(ws["posts"], out).exit_code == 0
    _plant(out, name, ws["outside"])
    before = _tree(ws["outside"])
    result = _build(ws["posts"], out, "--resume")
    _one_error(result, "symbolic link", str(out / name))
    assert (
        _tree(ws["outside"]) == before
    )  # nothing written, replaced or deleted there (the stale shard stays)


def test_a_new_build_refuses_a_seeded_media_folder_that_is_a_link(ws):
    out = ws["tmp"] / "out"
    out.mkdir()
    _plant(out, "media", ws["outside"])
    before = _tree(ws["outside"])
    _one_error(_build(ws["posts"], out), "symbolic link", str(out / "media"))
    assert _tree(ws["outside"]) == before


def test_the_dataset_writer_never_writes_or_deletes_through_a_config_link(tmp_path):
    from echo_dataset.safe_io import UnsafeOutputPathError
    from echo_dataset.writer import write_hub_folder

    outside = tmp_path / "outside"
    (outside / "text_to_image").mkdir(parents=True)
    (outside / "text_to_image" / "test-00000-of-00002.parquet").write_text("stale shard of someone else")
    folder = tmp_path / "ds"
    folder.mkdir()
    (folder / "text_to_image").symlink_to(outside / "text_to_image", target_is_directory=True)
    before = _tree(outside)
    rows = {"text_to_image": [{"id": "a", "prompt": "p"}]}
    with pytest.raises(UnsafeOutputPathError, match="text_to_image is a symbolic link"):
        write_hub_folder(rows, folder, card_context={}, pseudonymize=False)
    assert _tree(outside) == before
    assert not (folder / "README.md").exists() and not list(folder.glob("image_to_image/*"))  # all or nothing


@pytest.mark.parametrize("name", ["run.json", "verdicts.parquet", "cache", "cache/calls.sqlite", "plots"])
def test_judge_and_leaderboard_never_write_through_a_link_in_the_run_folder(ws, name):
    run = ws["tmp"] / "run"
    assert _judge(ws["bench"], ws["outputs"], ws["server"], run).exit_code == 0
    _plant(run, name, ws["outside"])
    before = _tree(ws["outside"])
    if name == "plots":
        result = _cli("leaderboard", run, "--n-boot", "20")
    else:
        result = _judge(ws["bench"], ws["outputs"], ws["server"], run)
    _one_error(result, "symbolic link", name.split("/")[-1])
    assert _tree(ws["outside"]) == before


def test_judge_refuses_a_planted_temporary_file_link(ws):
    run = ws["tmp"] / "run"
    assert _judge(ws["bench"], ws["outputs"], ws["server"], run).exit_code == 0
    for tmp_name in ("verdicts.parquet.tmp", f".verdicts.parquet.tmp-{os.getpid()}"):
        (run / tmp_name).symlink_to(ws["outside"] / "victim.txt")
        before = _tree(ws["outside"])
        _one_error(_judge(ws["bench"], ws["outputs"], ws["server"], run), "symbolic link", tmp_name)
        assert _tree(ws["outside"]) == before
        (run / tmp_name).unlink()


def test_an_atomic_write_never_follows_a_link_at_its_temporary_name(tmp_path):
    from echo_dataset.safe_io import UnsafeOutputPathError, remove, write_text

    root, outside = tmp_path / "out", tmp_path / "victim.txt"
    root.mkdir()
    outside.write_text("precious")
    (root / f".run.json.tmp-{os.getpid()}").symlink_to(outside)  # a predictable name, planted in advance
    write_text(root, root / "run.json", "{}")
    assert outside.read_text() == "precious" and (root / "run.json").read_text() == "{}"
    (root / "sub").symlink_to(tmp_path, target_is_directory=True)
    with pytest.raises(UnsafeOutputPathError):
        write_text(root, root / "sub" / "victim.txt", "overwritten")
    with pytest.raises(UnsafeOutputPathError):
        remove(root, root / "sub" / "victim.txt")
    with pytest.raises(UnsafeOutputPathError):
        write_text(root, root / ".." / "victim.txt", "overwritten")
    assert outside.read_text() == "precious"


@pytest.mark.parametrize("name", ["summary.json", "summary.csv", "metrics.csv", "color_swatches"])
def test_metrics_never_write_through_a_link(ws, name):
    out = ws["tmp"] / "m"
    assert _metrics(ws["bench"], ws["outputs"], out).exit_code == 0
    _plant(out, name, ws["outside"])
    before = _tree(ws["outside"])
    _one_error(_metrics(ws["bench"], ws["outputs"], out), "symbolic link", name)
    assert _tree(ws["outside"]) == before


@pytest.mark.parametrize("name", ["tiny", "tiny/manifest.json", "tiny/manifest.rank0.jsonl"])
def test_generate_never_writes_through_a_link(ws, name):
    out = ws["tmp"] / "gen"
    first = _generate(ws["bench"], out, ws["tmp"])
    assert first.exit_code == 0, first.output
    if name != "tiny":  # a crash left the shard: the rerun must append to it, not through a link at its name
        (out / "tiny" / "s0.png").unlink()
    _plant(out, name, ws["outside"])
    before = _tree(ws["outside"])
    _one_error(_generate(ws["bench"], out, ws["tmp"]), "symbolic link", name.split("/")[-1])
    assert _tree(ws["outside"]) == before


def test_demo_overwrite_removes_a_planted_link_never_its_target(tmp_path):
    out, outside = tmp_path / "demo", tmp_path / "outside"
    outside.mkdir()
    (outside / "keep.txt").write_text("keep")
    assert _cli("demo", "--out", out, "--no-progress").exit_code == 0
    import shutil

    shutil.rmtree(out / "metrics")
    (out / "metrics").symlink_to(outside, target_is_directory=True)
    (out / "summary.json").unlink()
    (out / "summary.json").symlink_to(outside / "keep.txt")
    assert _cli("demo", "--out", out, "--overwrite", "--no-progress").exit_code == 0
    assert _tree(outside) == {"keep.txt": hashlib.sha256(b"keep").hexdigest()}
    assert (out / "metrics").is_dir() and not (out / "metrics").is_symlink()


def test_publish_refuses_a_linked_file(ws):
    from echo_dataset.errors import InvalidHubFolderError
    from echo_dataset.publish import publish

    out = ws["tmp"] / "out"
    assert _build(ws["posts"], out).exit_code == 0
    (out / "README.md").unlink()
    (out / "README.md").symlink_to(ws["outside"] / "victim.txt")

    class Api:  # never reached
        def create_repo(self, *a: Any, **k: Any) -> None:
            raise AssertionError("no network work for a refused folder")

    with pytest.raises(InvalidHubFolderError, match=r"README\.md is a symbolic link"):
        publish(out, "me/echo", api=Api(), check_pseudonymized=False)


def test_the_call_cache_never_opens_a_linked_database(tmp_path):
    from echo_builder.cache import CallCache
    from echo_dataset.safe_io import UnsafeOutputPathError

    (tmp_path / "c").mkdir()
    (tmp_path / "elsewhere.sqlite").write_bytes(b"")
    (tmp_path / "c" / "calls.sqlite").symlink_to(tmp_path / "elsewhere.sqlite")
    with pytest.raises(UnsafeOutputPathError, match=r"calls\.sqlite is a symbolic link"):
        CallCache(tmp_path / "c")
    assert (tmp_path / "elsewhere.sqlite").read_bytes() == b""


# ------------------------------------------------------------------------- item 11: folders the command did not write
def _foreign(folder: Path) -> dict[str, str]:
    """Files with the names a build, a judge run or a metrics run write, but written by someone else."""
    folder.mkdir(parents=True)
    (folder / "README.md").write_text("my notes")
    (folder / "report.json").write_text('{"mine": true}')
    (folder / "text_to_image").mkdir()
    (folder / "text_to_image" / "test-00000-of-00001.parquet").write_text("my data")
    (folder / "summary.json").write_text("{}")
    return _tree(folder)


@pytest.mark.parametrize("command", ["build", "judge", "metrics", "generate", "demo"])
def test_every_command_refuses_a_folder_of_files_it_did_not_write(ws, command):
    out = ws["tmp"] / "theirs"
    before = _foreign(out)
    result = {
        "build": lambda: _build(ws["posts"], out),
        "judge": lambda: _judge(ws["bench"], ws["outputs"], ws["server"], out),
        "metrics": lambda: _metrics(ws["bench"], ws["outputs"], out),
        "generate": lambda: _generate(ws["bench"], ws["tmp"] / "gen", ws["tmp"]),
        "demo": lambda: _cli("demo", "--out", out, "--overwrite", "--no-progress"),
    }
    if command == "generate":  # OUTPUTS may hold other models; OUTPUTS/<name> must be its own
        out = ws["tmp"] / "gen" / "tiny"
        before = _foreign(out)
        (out / "s0.png").write_bytes(png_bytes(Image.new("RGB", (4, 4), (1, 2, 3))))
        before = _tree(out)
    error = _one_error(result[command](), str(out))
    assert "not" in error and ("empty" in error or "demo folder" in error)
    assert _tree(out) == before
    assert ws["server"].calls == 0  # refused before any model call


def test_build_accepts_a_folder_seeded_with_media_only_and_then_reruns_as_one(ws):
    out = ws["tmp"] / "out"
    (out / "media").mkdir(parents=True)  # the README's tour: copy an earlier build's media store first
    assert _build(ws["posts"], out).exit_code == 0
    assert json.loads((out / ".echo-bench.json").read_text())["complete"] is True
    again = _build(ws["posts"], out)
    _one_error(again, "already holds a finished build", "--resume")


def test_judge_and_metrics_refuse_each_others_folders(ws):
    run, metrics = ws["tmp"] / "run", ws["tmp"] / "m"
    assert _judge(ws["bench"], ws["outputs"], ws["server"], run).exit_code == 0
    assert _metrics(ws["bench"], ws["outputs"], metrics).exit_code == 0
    _one_error(_metrics(ws["bench"], ws["outputs"], run), "holds an echo-bench judge output")
    _one_error(
        _judge(ws["bench"], ws["outputs"], ws["server"], metrics), "holds an echo-bench metrics output"
    )
    assert _judge(ws["bench"], ws["outputs"], ws["server"], run).exit_code == 0  # its own kind: a rerun
    assert _metrics(ws["bench"], ws["outputs"], metrics).exit_code == 0


# ------------------------------------------------------------------------------- items 1 and 10: reruns and resumes
def test_a_crashed_build_continues_on_a_plain_rerun(ws, monkeypatch):
    import echo_builder.stages.tier as tier

    out = ws["tmp"] / "out"
    real = tier.run_tier
    monkeypatch.setattr(tier, "run_tier", lambda *a, **k: (_ for _ in ()).throw(RuntimeError("power cut")))
    crashed = _build(ws["posts"], out)
    assert isinstance(crashed.exception, RuntimeError) and (out / "stages" / "extract.jsonl").is_file()
    monkeypatch.setattr(tier, "run_tier", real)
    rerun = _build(ws["posts"], out)  # the same command: no --resume needed
    assert rerun.exit_code == 0, rerun.output
    assert "unfinished build with the same settings" in rerun.stderr
    clean = ws["tmp"] / "clean"
    assert _build(ws["posts"], clean).exit_code == 0
    for name in (
        "report.json",
        "stages/samples.jsonl",
        "README.md",
        "image_to_image/test-00000-of-00001.parquet",
    ):
        assert (out / name).read_bytes() == (clean / name).read_bytes(), name
    # with other settings the unfinished build is not silently mixed: one line says what differs
    monkeypatch.setattr(tier, "run_tier", lambda *a, **k: (_ for _ in ()).throw(RuntimeError("power cut")))
    other = ws["tmp"] / "other"
    _build(ws["posts"], other)
    monkeypatch.setattr(tier, "run_tier", real)
    _one_error(_build(ws["posts"], other, "--threshold", "3"), "unfinished build with other settings")


def _finished_files(out: Path) -> dict[str, str]:
    return {k: v for k, v in _tree(out).items() if not k.startswith((".echo-bench-next", "run_stats.json"))}


@pytest.mark.parametrize("failure", ["sources_now_empty", "a_late_stage_fails"])
def test_a_failed_resume_leaves_the_finished_build_as_it_was(ws, monkeypatch, failure):
    out = ws["tmp"] / "out"
    assert _build(ws["posts"], out).exit_code == 0
    before = _finished_files(out)
    assert len([k for k in before if k.startswith("stages/")]) >= 10
    if failure == "sources_now_empty":
        ws["posts"].write_text("")
        result = _build(ws["posts"], out, "--resume")
        _one_error(result, "no post could be read")
    else:
        import echo_builder.stages.tier as tier

        def broken(*a: Any, **k: Any) -> Any:
            raise OSError(errno.ENOSPC, "No space left on device", str(out / "media"))

        monkeypatch.setattr(tier, "run_applicability", broken)
        _one_error(_build(ws["posts"], out, "--resume"), "No space left on device")
    assert (
        _finished_files(out) == before
    )  # every stage file, the report, the card and the shards as they were


# ------------------------------------------------------------------------------------- item 6: read-only folders
@pytest.fixture
def read_only(monkeypatch):
    """``make(folder)``: writes and new folders under ``folder`` fail with EROFS, as on a read-only mount."""
    real_open, real_mkdir = os.open, os.mkdir
    frozen: list[Path] = []

    def inside(path: Any) -> bool:
        p = Path(os.fsdecode(path)).absolute()
        return any(p == f or f in p.parents for f in frozen)

    def fake_open(path: Any, flags: int, *args: Any, **kwargs: Any) -> int:
        if flags & (os.O_WRONLY | os.O_RDWR | os.O_CREAT) and inside(path):
            raise OSError(errno.EROFS, os.strerror(errno.EROFS), os.fsdecode(path))
        return real_open(path, flags, *args, **kwargs)

    def fake_mkdir(path: Any, *args: Any, **kwargs: Any) -> None:
        if inside(path):
            if Path(os.fsdecode(path)).is_dir():
                raise FileExistsError(errno.EEXIST, "File exists", os.fsdecode(path))
            raise OSError(errno.EROFS, os.strerror(errno.EROFS), os.fsdecode(path))
        real_mkdir(path, *args, **kwargs)

    monkeypatch.setattr(os, "open", fake_open)
    monkeypatch.setattr(os, "mkdir", fake_mkdir)
    return lambda folder: frozen.append(Path(folder).absolute())


def _run_writing(command: str, ws: dict[str, Any], out: Path) -> Any:
    """Run one of the commands that write an output folder, into ``out``, on the workspace's inputs."""
    run = {
        "build": lambda: _build(ws["posts"], out),
        "judge": lambda: _judge(ws["bench"], ws["outputs"], ws["server"], out),
        "metrics": lambda: _metrics(ws["bench"], ws["outputs"], out),
        "generate": lambda: _generate(ws["bench"], out, ws["tmp"]),
        "demo": lambda: _cli("demo", "--out", out, "--no-progress"),
    }
    return run[command]()


@pytest.mark.parametrize("command", ["build", "judge", "metrics", "generate", "demo"])
def test_a_read_only_output_folder_is_one_error_line(ws, read_only, command):
    out = ws["tmp"] / "ro"
    out.mkdir()
    read_only(out)
    _one_error(_run_writing(command, ws, out), str(out), "Read-only file system")
    assert list(out.iterdir()) == [] and ws["server"].calls == 0


@pytest.mark.skipif(os.name != "posix" or os.geteuid() == 0, reason="root writes into read-only folders")
@pytest.mark.parametrize("command", ["judge", "metrics"])
def test_a_really_read_only_folder_is_one_error_line(ws, command):
    out = ws["tmp"] / "ro"
    out.mkdir()
    out.chmod(0o555)
    try:
        if command == "judge":
            result = _judge(ws["bench"], ws["outputs"], ws["server"], out)
        else:
            result = _metrics(ws["bench"], ws["outputs"], out)
        _one_error(result, str(out))
    finally:
        out.chmod(0o755)


# ------------------------------------------------------------------------------------------ item 6: a full disk
class Disk:
    """Files under ``root`` written through echo-bench's writers: the ``fail_at``-th write raises ENOSPC."""

    def __init__(self, root: Path, fail_at: int) -> None:
        self.root, self.fail_at, self.writes = root.absolute(), fail_at, 0


@pytest.fixture
def full_disk(monkeypatch):
    real_fdopen = os.fdopen

    def install(root: Path, fail_at: int) -> Disk:
        disk = Disk(root, fail_at)

        def fdopen(fd: int, *args: Any, **kwargs: Any) -> Any:
            f = real_fdopen(fd, *args, **kwargs)
            try:
                path = Path(os.readlink(f"/proc/self/fd/{fd}"))
            except OSError:
                return f
            if disk.root not in path.parents:
                return f
            write = f.write

            def limited(data: Any) -> Any:
                disk.writes += 1
                if disk.writes >= disk.fail_at:
                    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
                return write(data)

            f.write = limited
            return f

        monkeypatch.setattr(os, "fdopen", fdopen)
        return disk

    return install


def _check_nothing_torn(out: Path) -> None:
    """No temporary file left; every JSON and JSON-lines file parses; every Parquet file reads."""
    import pyarrow.parquet as pq

    for path in out.rglob("*"):
        assert ".tmp-" not in path.name, path
        if path.suffix == ".json":
            json.loads(path.read_text())
        elif path.suffix == ".jsonl":
            [json.loads(line) for line in path.read_text().splitlines()]
        elif path.suffix == ".parquet":
            pq.read_table(path)


@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="needs /proc to map a file to its path")
@pytest.mark.parametrize("fail_at", [1, 3, 7, 12])
def test_build_on_a_full_disk_fails_in_one_line_and_resumes_without_repeating_a_call(ws, full_disk, fail_at):
    from tests.test_pipeline import scripted_curator

    server = ws["server"]
    server.reply = scripted_curator
    extra = ("--backend", "openai:curator", "--base-url", server.base_url, "--max-attempts", "1")
    out = ws["tmp"] / "out"
    out.mkdir()
    disk = full_disk(out, fail_at)
    failed = _build(ws["posts"], out, *extra)
    _one_error(failed, "No space left on device", str(out))
    _check_nothing_torn(out)
    paid = {json.dumps(b, sort_keys=True) for b in server.log.bodies}
    server.reset_log()
    disk.fail_at = 10**9  # space is back
    resumed = _build(ws["posts"], out, *extra, "--resume")
    assert resumed.exit_code == 0, resumed.output
    repeated = [b for b in server.log.bodies if json.dumps(b, sort_keys=True) in paid]
    assert repeated == []
    server.reset_log()
    clean = ws["tmp"] / "clean"
    assert _build(ws["posts"], clean, *extra).exit_code == 0
    for name in ("report.json", "stages/samples.jsonl", "stages/relevance.jsonl", "README.md"):
        assert (out / name).read_bytes() == (clean / name).read_bytes(), name


@pytest.fixture
def full_cache(monkeypatch):
    """The call cache's disk fills after ``limit`` stored replies; deleting the reserve file frees room again."""
    from echo_builder.cache import CallCache

    state = {"limit": 10**9, "stored": 0, "freed": False}
    real_insert, real_release = CallCache._insert, CallCache._release_reserve

    def insert(self: Any, row: Any) -> None:
        if state["stored"] >= state["limit"] and not state["freed"]:
            raise sqlite3.OperationalError("database or disk is full")
        real_insert(self, row)
        state["stored"] += 1

    def release(self: Any) -> bool:
        freed = real_release(self)
        state["freed"] = state["freed"] or freed
        return freed

    monkeypatch.setattr(CallCache, "_insert", insert)
    monkeypatch.setattr(CallCache, "_release_reserve", release)
    return state


@pytest.mark.parametrize("limit", [0, 2, 5])
def test_judge_on_a_full_disk_keeps_every_reply_it_paid_for(ws, full_cache, limit):
    server = ws["server"]
    server.latency_s = 0.02  # several calls in flight when the disk fills
    run = ws["tmp"] / "run"
    full_cache["limit"] = limit
    failed = _judge(ws["bench"], ws["outputs"], server, run, "--concurrency", "4")
    _one_error(failed, "is full", str(run / "cache" / "calls.sqlite"))
    _check_nothing_torn(run)
    assert not (run / "verdicts.parquet").exists()
    paid = {json.dumps(b, sort_keys=True) for b in server.log.bodies}
    if limit == 0:  # the run stopped sending calls once the disk was full: only those in flight were made
        assert len(paid) <= 4
    server.reset_log()
    full_cache["limit"] = 10**9
    resumed = _judge(ws["bench"], ws["outputs"], server, run, "--concurrency", "4")
    assert resumed.exit_code == 0, resumed.output
    assert [b for b in server.log.bodies if json.dumps(b, sort_keys=True) in paid] == []
    assert len(paid) + server.calls == 6  # 3 samples x 2 models, each asked exactly once over both runs


@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="needs /proc to map a file to its path")
@pytest.mark.parametrize("fail_at", [1, 2])
def test_judge_and_metrics_on_a_full_disk_leave_the_previous_files_whole(ws, full_disk, fail_at):
    run, metrics = ws["tmp"] / "run", ws["tmp"] / "m"
    assert _judge(ws["bench"], ws["outputs"], ws["server"], run).exit_code == 0
    assert _metrics(ws["bench"], ws["outputs"], metrics).exit_code == 0
    before = {"run": _tree(run), "m": _tree(metrics)}
    disk = full_disk(run, fail_at)
    _one_error(_judge(ws["bench"], ws["outputs"], ws["server"], run), "No space left on device")
    disk.root = metrics.absolute()
    disk.writes = 0
    _one_error(_metrics(ws["bench"], ws["outputs"], metrics), "No space left on device")
    _check_nothing_torn(run)
    _check_nothing_torn(metrics)
    if fail_at == 1:  # the first file failed: every file is the previous run's
        for name, folder in (("run", run), ("m", metrics)):
            assert _tree(folder) == before[name]


def test_publish_to_an_unresolvable_hub_is_one_error_line(ws, monkeypatch):
    out = ws["tmp"] / "out"
    assert _build(ws["posts"], out).exit_code == 0
    import huggingface_hub

    class Unreachable(huggingface_hub.HfApi):
        def __init__(self, *a: Any, **k: Any) -> None:
            super().__init__(*a, **k)
            self.endpoint = "https://hub.invalid"  # as HF_ENDPOINT gives it when set before the import

        def create_repo(self, *a: Any, **k: Any) -> Any:
            import httpx

            raise httpx.ConnectError("[Errno -2] Name or service not known")

    monkeypatch.setattr(huggingface_hub, "HfApi", Unreachable)
    result = _cli("publish", out, "--repo-id", "me/echo", "--token", "hf_test", "--skip-pseudonym-check")
    _one_error(result, "hub.invalid", "Name or service not known", "nothing was published")


def _tmpfs(mount: Path, options: str) -> Any:
    """Mount a tmpfs at ``mount`` (skips the test where that is not allowed); returns the unmount function."""
    import shutil
    import subprocess

    mount.mkdir()
    if not shutil.which("mount") or os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(mount)], capture_output=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.decode(errors='replace').strip()}")
    return lambda: subprocess.run(["umount", "-l", str(mount)], capture_output=True)


@pytest.fixture
def tiny_disk(tmp_path):
    """A real 4 MiB tmpfs (skipped where mounting is not allowed)."""
    unmount = _tmpfs(tmp_path / "disk", "size=4m")
    try:
        yield tmp_path / "disk"
    finally:
        unmount()


@pytest.mark.parametrize("command", ["build", "judge", "metrics", "generate", "demo"])
def test_a_really_read_only_mount_is_one_error_line(ws, command):
    """A read-only file system refuses even root: each command ends with one line naming the folder."""
    out = ws["tmp"] / "ro"
    unmount = _tmpfs(out, "ro,size=1m")
    try:
        _one_error(_run_writing(command, ws, out), str(out), "Read-only file system")
        assert ws["server"].calls == 0
    finally:
        unmount()


def _fill(folder: Path) -> Path:
    """Write one file until the disk holding ``folder`` is full; returns it."""
    filler = folder / "filler"
    with open(filler, "wb", buffering=0) as f:
        for size in (65536, 4096, 512, 1):  # down to the last byte
            try:
                while f.write(b"\0" * size):
                    pass
            except OSError as exc:
                assert exc.errno == errno.ENOSPC
    return filler


def test_judge_on_a_really_full_disk_keeps_every_reply_it_paid_for(ws, tiny_disk):
    """The disk fills up (another program's file) while the third reply is on its way: the run stops with one
    line, every reply received is in the cache (the reserve file gives the room), and the rerun asks nothing
    twice. One call at a time, so nothing else writes while the disk is being filled (calls in flight at that
    moment: the simulated test above)."""
    server = ws["server"]
    server.latency_s = 0.02
    filler: list[Path] = []

    def reply(body: dict[str, Any]) -> str:
        if server.calls >= 3 and not filler:
            filler.append(_fill(tiny_disk))
        return "fine [[7]]"

    server.reply = reply
    run = tiny_disk / "run"
    failed = _judge(ws["bench"], ws["outputs"], server, run, "--concurrency", "1")
    _one_error(failed, str(run))
    assert not (run / "verdicts.parquet").exists()
    paid = {json.dumps(b, sort_keys=True) for b in server.log.bodies}
    filler[0].unlink()  # space is back
    server.reset_log()
    resumed = _judge(ws["bench"], ws["outputs"], server, run, "--concurrency", "1")
    assert resumed.exit_code == 0, resumed.output
    repeated = [b for b in server.log.bodies if json.dumps(b, sort_keys=True) in paid]
    assert repeated == [], (failed.stderr, len(paid))
    assert len(paid) + server.calls == 6


def test_a_new_build_that_reads_nothing_leaves_no_folder_behind(ws):
    out = ws["tmp"] / "new"
    ws["posts"].write_text("")
    _one_error(_build(ws["posts"], out), "no post could be read")
    assert not out.exists()


def test_a_write_error_without_a_path_names_the_output_folder(ws, monkeypatch):
    """A full disk inside a stage's own writer (no file name on the error) still names where: the --out folder."""
    import echo_builder.stages.media as media

    def full(*a: Any, **k: Any) -> Any:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(media, "run_media", full)
    out = ws["tmp"] / "out"
    _one_error(
        _build(ws["posts"], out), f"cannot write in {out}", "No space left on device", "the disk is full"
    )
