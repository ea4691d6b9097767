"""``echo-bench generate``: run a generator over a benchmark config into ``OUTPUTS/<model name>/<sample_id>.png``.

What a run does, in order (everything that can be checked cheaply is checked before the model loads):

1. checks the model name and every sample id are safe file names (no ``/``, ``\\``, ``..``, NUL, leading ``.``),
   creates the spec's generator (unknown generator or option: an error), reads the config, and checks the output
   folder is writable;
2. reads what earlier runs recorded (``manifest.json`` and any shards a crash left, see
   :mod:`echo_builder.generate.manifest`) and refuses to mix outputs of another model spec, seed or output
   parameters into the folder;
3. skips samples already done: an ``ok`` record whose PNG exists, has the recorded size and decodes; recorded
   refusals and NSFW blocks are kept too unless ``retry_refused``; errors and missing inputs are retried;
4. groups the remaining samples into batches of the generator's ``batch_size``, in benchmark order, and deals the
   batches to the processes (``accelerate launch --num_processes K``: a contiguous share of batches per process;
   one process takes all), loads the model, and generates. Each image is written atomically (a temporary file
   renamed into place), then its record is appended to the process's shard;
5. once every process is done, the main process merges the shards into ``manifest.json``.

Seeds: each sample's seed is :func:`~echo_builder.generate.base.derive_seed` of the run's ``seed`` and the sample
id, and batches are formed before they are dealt to processes, so a seeded model makes the same pixels with 1 or K
processes. A different ``batch_size`` (or a resumed run, whose batches hold other samples) uses the same seeds, but
batched float arithmetic may round differently: expect rare pixel values to move by one level.
"""

from __future__ import annotations

import os
import sys
import time
from collections import Counter, deque
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from echo_builder import __version__
from echo_builder.errors import ConfigError, ImageError
from echo_builder.generate import create_generator
from echo_builder.generate.base import GenerationRequest, GenerationResult, Generator, derive_seed, png_bytes
from echo_builder.generate.distributed import Processes, processes
from echo_builder.generate.manifest import (
    MANIFEST_FILE,
    ShardWriter,
    read_manifest,
    read_records,
    read_run_headers,
    shard_files,
    write_manifest,
)
from echo_builder.input_files import is_utf8
from echo_builder.secrets import get_logger, redact
from echo_dataset.safe_io import (
    OutputFolderError,
    OutputWriteError,
    check_inside,
    refuse_links,
    remove,
    write_bytes,
)

__all__ = ["SEED_POLICY", "GenerationRunResult", "check_file_name", "run_generation"]

log = get_logger(__name__)
SEED_POLICY = "per-sample seed = first 4 bytes (big-endian) of sha256('<seed>:<sample_id>'), in [0, 2**32)"
_VERSIONED = ("echo-bench", "diffusers", "torch", "transformers", "accelerate", "openai", "pillow")
_MAX_NAME_BYTES = 200  # file names are limited to 255 bytes; leave room for ".png" and temporary suffixes


@dataclass
class GenerationRunResult:
    """What a run did. ``summary`` and ``manifest`` are filled on the main process only (empty elsewhere)."""

    model_dir: Path
    summary: dict[str, Any] = field(default_factory=dict)
    manifest: dict[str, Any] = field(default_factory=dict)


def check_file_name(value: str, what: str) -> str:
    """Return ``value`` when it is safe as one file or folder name, else raise :class:`ConfigError`.

    Refused: empty, ``.``/``..``, a leading ``.`` (hidden, and ``judge`` skips hidden folders), ``/`` or ``\\``
    (path separators: traversal or absolute paths), NUL or other control characters, over 200 bytes.
    """
    problem = None
    if not isinstance(value, str) or not value:
        problem = "it is empty"
    elif value.startswith("."):
        problem = "it starts with '.' (hidden files and '..' are not allowed)"
    elif "/" in value or "\\" in value:
        problem = "it contains a path separator ('/' or '\\')"
    elif any(ord(c) < 32 or ord(c) == 127 for c in value):
        problem = "it contains NUL or another control character"
    elif not is_utf8(value):
        problem = "it is not valid UTF-8 text"
    elif len(value.encode("utf-8")) > _MAX_NAME_BYTES:
        problem = f"it is longer than {_MAX_NAME_BYTES} bytes"
    if problem:
        raise ConfigError(f"{what} {value!r} cannot be used as a file name: {problem}")
    return value


def _versions() -> dict[str, str]:
    from importlib import metadata

    out = {"python": sys.version.split()[0]}
    for package in _VERSIONED:
        try:
            out[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            continue
    out["echo-bench"] = __version__
    return out


def _check_folder(out_dir: Path, model_dir: Path) -> None:
    """``model_dir`` lies inside ``out_dir`` through no symbolic link, and is absent, empty or a generate run's
    folder (``manifest.json`` or its shards): generate never overwrites images it did not make."""
    check_inside(out_dir, model_dir)
    if not model_dir.is_dir():
        return
    refuse_links(model_dir)  # no manifest, shard or image is read, appended or replaced through a link
    entries = [p.name for p in model_dir.iterdir() if not p.name.startswith(".")]
    if entries and MANIFEST_FILE not in entries and not shard_files(model_dir):
        shown = ", ".join(sorted(entries)[:5]) + (", ..." if len(entries) > 5 else "")
        raise OutputFolderError(
            f"{model_dir} is not empty and holds no generation manifest (it holds {shown}): these are not outputs "
            "of `echo-bench generate`, which never overwrites files it did not write. Use another --name or --out."
        )


def _check_writable(model_dir: Path) -> None:
    """Create ``model_dir`` and a file in it, then remove what was created: a model that then fails to load
    leaves no empty model folder behind (``judge`` would count it as a model with every output missing)."""
    created = [p for p in (model_dir, *model_dir.parents) if not p.exists()]
    try:
        model_dir.mkdir(parents=True, exist_ok=True)
        probe = model_dir / f".write-probe-{os.getpid()}"
        write_bytes(model_dir, probe, b"")
        probe.unlink()
    except OSError as exc:
        reason = exc.strerror or str(exc)
        raise ConfigError(
            f"output folder {str(model_dir)!r} is not writable ({reason}); choose another --out"
        ) from None
    finally:
        for folder in created:  # deepest first
            try:
                folder.rmdir()
            except OSError:
                break


def _usable_samples(samples: Sequence[Mapping[str, Any]], where: str) -> list[Mapping[str, Any]]:
    """The samples whose id can name an output file, each id once; every other sample is skipped with a warning
    naming it (one bad row never stops the others: ``judge`` and ``metrics`` treat such ids per sample too)."""
    usable: list[Mapping[str, Any]] = []
    seen: set[str] = set()
    for i, row in enumerate(samples):
        sample_id = row.get("id")
        try:
            check_file_name(sample_id, f"sample id of row {i} in {where}")  # type: ignore[arg-type]
        except ConfigError as exc:
            log.warning("%s; that sample is skipped", exc)
            continue
        if sample_id in seen:
            log.warning(
                "sample id %r appears twice in %s; its row %d is skipped (outputs would overwrite each other)",
                sample_id,
                where,
                i,
            )
            continue
        seen.add(sample_id)  # type: ignore[arg-type]
        usable.append(row)
    return usable


def _check_identity(model_dir: Path, identity: dict[str, Any], manifest: Mapping[str, Any] | None) -> None:
    earlier = [manifest.get("identity")] if manifest else []
    earlier += [h.get("run") for h in read_run_headers(model_dir)]
    for previous in earlier:
        if not isinstance(previous, dict) or previous == identity:
            continue
        differing = sorted(k for k in set(previous) | set(identity) if previous.get(k) != identity.get(k))
        details = "; ".join(f"{k}: {previous.get(k)!r} before, {identity.get(k)!r} now" for k in differing)
        raise ConfigError(
            f"{model_dir} holds outputs of a different run ({details}). Use another --name, or move the folder "
            "away to start over."
        )


def _output_ok(path: Path, record: Mapping[str, Any]) -> bool:
    """The PNG exists, has the recorded size, and decodes (through :func:`echo_builder.imaging.open_image`)."""
    from echo_builder.imaging import open_image

    try:
        if record.get("bytes") is not None and path.stat().st_size != record["bytes"]:
            return False
        open_image(path)
    except (OSError, ImageError):
        return False
    return True


def _plan(
    samples: Sequence[Mapping[str, Any]],
    records: Mapping[str, Mapping[str, Any]],
    model_dir: Path,
    retry_refused: bool,
) -> tuple[list[Mapping[str, Any]], int]:
    """``(samples to generate, number skipped)``."""
    todo: list[Mapping[str, Any]] = []
    for row in samples:
        record = records.get(row["id"]) or {}
        status = record.get("status")
        if status == "ok" and _output_ok(model_dir / f"{row['id']}.png", record):
            continue
        if status in ("refused", "nsfw") and not retry_refused:
            continue
        todo.append(row)
    return todo, len(samples) - len(todo)


def _input_images(row: Mapping[str, Any], benchmark: str | Path) -> tuple[tuple[Any, ...], str | None]:
    """The sample's input images as RGB PIL images, or ``((), reason)`` when one is missing or corrupt."""
    from echo_builder.imaging import load_rgb

    raw = list(row.get("input_images") or ())
    images = []
    for i, image in enumerate(raw, 1):
        label = f"input image {i} of {len(raw)}"
        if image is None or (isinstance(image, dict) and not image.get("bytes") and not image.get("path")):
            return (), f"{label} is missing (the benchmark row holds no bytes and no path)"
        if isinstance(image, dict) and not image.get("bytes"):
            path = Path(image["path"])
            if not path.is_absolute() and not path.exists() and (Path(benchmark) / path).exists():
                image = {"path": str(Path(benchmark) / path)}  # relative to the benchmark folder
        try:
            images.append(load_rgb(image, name=label))
        except ImageError as exc:
            return (), str(exc)
    return tuple(images), None


def _batches(items: Sequence[Any], size: int) -> Iterator[Sequence[Any]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


def _safe_generate(generator: Generator, requests: Sequence[GenerationRequest]) -> list[GenerationResult]:
    """The generator's results; an unexpected exception becomes an ``error`` result for each request."""
    if not requests:
        return []
    start = time.perf_counter()
    try:
        results = generator.generate_batch(requests)
        results = list(results)
        if len(results) != len(requests):
            raise RuntimeError(
                f"{generator.spec} returned {len(results)} results for {len(requests)} requests"
            )
    except Exception as exc:  # one broken batch must not end the run: every sample gets a recorded error
        log.warning("%s failed on a batch of %d: %s", generator.spec, len(requests), exc)
        seconds = (time.perf_counter() - start) / len(requests)
        message = redact(f"{type(exc).__name__}: {exc}")
        return [GenerationResult("error", message=message, seconds=seconds) for _ in requests]
    # a result of the wrong type is that sample's error (a plugin's bug), the batch's other results are kept
    seconds = (time.perf_counter() - start) / len(requests)
    return [
        result
        if isinstance(result, GenerationResult)
        else GenerationResult(
            "error",
            message=f"{generator.spec} returned {type(result).__name__}, not a GenerationResult",
            seconds=seconds,
        )
        for result in results
    ]


def _screen(checker: Any, data: bytes, sample_id: str) -> tuple[dict[str, Any], str | None]:
    """Screen an encoded output: (the record's ``screening`` entry, the reason to withhold it or ``None``).

    A flagged image is withheld with status ``nsfw``; one the checker cannot screen is withheld with status
    ``error`` (errors are retried by the next run), never written unscreened.
    """
    from echo_builder.errors import MissingDependencyError

    entry: dict[str, Any] = {
        "detector": None,
        "threshold": checker.threshold,
        "flagged": None,
        "detections": [],
    }
    try:
        screened = checker.check(data, name=f"the output of {sample_id}")
    except MissingDependencyError:
        raise
    except Exception as exc:  # confined to this sample: recorded, the run goes on
        entry["error"] = redact(f"{type(exc).__name__}: {exc}")
        return entry, f"NSFW screening failed, output withheld: {entry['error']}"
    entry.update(
        detector=screened.detector_id, flagged=bool(screened.flagged), detections=screened.detections
    )
    if not screened.flagged:
        return entry, None
    hits = ", ".join(f"{d['class']} {d['score']:.2f}" for d in screened.flagging) or "flagged"
    return entry, (
        f"withheld by NSFW screening ({screened.detector_id}, threshold {screened.threshold}): {hits}"
    )


def _finish(
    model_dir: Path,
    request: GenerationRequest,
    result: GenerationResult,
    rank: int,
    checker: Any = None,
) -> dict[str, Any]:
    """Write the image (atomically) and return the sample's record. With an NSFW ``checker`` the record gets
    ``screening`` (detector, threshold, flagged, every raw detection) and a flagged image is not written: its
    status is ``nsfw`` with the flagging detections in the message."""
    from PIL import Image

    from echo_builder.imaging import open_image

    record: dict[str, Any] = {
        "type": "sample",
        "sample_id": request.sample_id,
        "status": result.status,
        "message": redact(result.message) if result.message else None,
        "seed": request.seed,
        "seconds": round(result.seconds, 4),
        "file": None,
        "bytes": None,
        "sha256": None,
        "width": None,
        "height": None,
        "rank": rank,
        "details": result.details,
    }
    path = model_dir / f"{request.sample_id}.png"
    if result.status == "ok":
        import hashlib

        try:
            data = png_bytes(result.image)
            if isinstance(result.image, Image.Image):
                width, height = result.image.size
            else:  # encoded bytes, already decoded once by png_bytes
                width, height = open_image(data, name="the generated image").size
        except ImageError as exc:
            record.update(status="error", message=f"the generator returned an unreadable image: {exc}")
            return {**record, "finished_at": time.time()}
        if checker is not None:
            record["screening"], withheld = _screen(checker, data, request.sample_id)
            if withheld is not None:
                status = "nsfw" if record["screening"]["flagged"] else "error"
                record.update(status=status, message=withheld)
                return {**record, "finished_at": time.time()}
        try:  # atomically (a temporary file, then a rename), never through a link planted at the path
            write_bytes(model_dir, path, data)
        except OutputWriteError as exc:
            raise ConfigError(f"{exc}; the outputs and records written so far are kept") from None
        record.update(
            file=path.name,
            bytes=len(data),
            sha256=hashlib.sha256(data).hexdigest(),
            width=width,
            height=height,
        )
    record["finished_at"] = time.time()
    return record


def _progress(total: int, name: str, procs: Processes, enabled: bool) -> Any:
    from tqdm.auto import tqdm

    desc = f"generating {name}"
    if procs.num_processes > 1:
        desc += f" (process 1 of {procs.num_processes}, its share)"
    disable = True if not (enabled and procs.is_main) else None  # None: shown on a terminal only
    return tqdm(total=total, desc=desc, unit="img", disable=disable)


def run_generation(
    benchmark: str | Path,
    config: str,
    model: str,
    name: str,
    out_dir: str | Path,
    *,
    seed: int = 0,
    limit: int | None = None,
    options: Mapping[str, Any] | None = None,
    retry_refused: bool = False,
    progress: bool = True,
    nsfw_check: Any = None,
    nsfw_threshold: float | None = None,
    nsfw_options: Mapping[str, Any] | None = None,
) -> GenerationRunResult:
    """Generate an image for every sample of ``config`` with ``model`` into ``out_dir/name/``.

    Args:
        benchmark: hub-shaped benchmark folder (or Hub dataset id) holding ``config``.
        config: ``text_to_image``, ``image_to_image``, ...
        model: generator spec (``diffusers:<path>``, ``openai-images:<model>``, ``command:<command line>``).
        name: the model's name in the outputs folder (what ``judge`` and ``leaderboard`` show).
        out_dir: the outputs folder (``OUTPUTS``); ``OUTPUTS/<name>/<sample_id>.png`` and ``manifest.json``.
        seed: base seed; each sample's seed is derived from it and the sample id (see :data:`SEED_POLICY`).
        limit: only the first ``limit`` samples of the config.
        options: generator options (``{"steps": 4, "dtype": "bfloat16"}``); unknown keys are an error.
        retry_refused: also retry samples whose recorded outcome is ``refused`` or ``nsfw``.
        progress: show a progress bar (main process, on a terminal).
        nsfw_check: screen every generated image before it is written (:func:`echo_builder.safety.create_checker`:
            ``"nudenet"``, a VLM spec, or a checker object). A flagged image is withheld, not written: its record
            has status ``nsfw`` and a message naming the detector, threshold and flagging detections; every
            screened record keeps ``screening`` (``detector``, ``threshold``, ``flagged``, raw ``detections``).
            An image the checker cannot screen is withheld with status ``error`` (retried by the next run).
        nsfw_threshold, nsfw_options: the checker's threshold (``None``: its default) and options.

    Returns:
        :class:`GenerationRunResult`; on the main process ``summary`` counts samples skipped, generated and
        failed in this run (``statuses``) and times it in seconds (``load_s`` model loading, ``generate_s`` the
        generation loop, ``model_s`` the part of it inside the generator, ``wall_time_s`` everything), and
        ``manifest`` is the merged manifest.

    Raises:
        ConfigError: unsafe model name or sample id, duplicate sample ids, unknown generator or option, a model or
            program that does not exist, an output folder that is not writable, or a folder holding another
            run's outputs. Raised before anything is written, except a disk that fails mid-run (what was written
            stays, with its records).
        BenchmarkNotFoundError: the benchmark or config does not exist.
    """
    from echo_dataset.loading import read_config

    check_file_name(name, "model name (--name)")
    if limit is not None and limit < 1:
        raise ConfigError(f"limit must be >= 1, got {limit}")
    started = time.time()
    checker = None
    if nsfw_check is not None:  # a bad checker or a missing extra fails before anything is written
        from echo_builder.safety import create_checker

        checker = create_checker(nsfw_check, threshold=nsfw_threshold, options=nsfw_options)
    elif nsfw_threshold is not None or nsfw_options:
        raise ConfigError("nsfw_threshold and nsfw_options need nsfw_check")
    generator = create_generator(model, **dict(options or {}))
    rows = read_config(benchmark, config)
    samples = rows[:limit] if limit is not None else rows
    samples = _usable_samples(samples, f"{benchmark}/{config}")
    if not samples:
        raise ConfigError(f"no sample of {benchmark}/{config} has an id that can name an output file")
    model_dir = Path(out_dir) / name
    procs = processes()
    if procs.is_main:  # one prober: another process's probe could see the folder vanish under it
        _check_folder(Path(out_dir), model_dir)
        _check_writable(model_dir)
    identity = {"model_spec": generator.spec, "seed": int(seed), "parameters": generator.output_parameters()}
    manifest = read_manifest(model_dir)
    _check_identity(model_dir, identity, manifest)
    todo, skipped = _plan(samples, read_records(model_dir), model_dir, retry_refused)
    procs.wait()  # every process has read the folder before any writes to it
    # batches first, then whole batches to processes: a sample lands in the same batch with any process count,
    # so even batched float arithmetic (which rounds differently per batch shape) gives the same pixels
    batches = procs.split(list(_batches(todo, generator.batch_size)))
    mine = [row for batch in batches for row in batch]
    load_s = 0.0
    if mine:
        t0 = time.perf_counter()
        generator.load()
        load_s = time.perf_counter() - t0
    model_dir.mkdir(parents=True, exist_ok=True)
    generate_start, model_s = time.perf_counter(), 0.0
    bar = _progress(len(mine), name, procs, progress)
    # PNG encoding and writing run in background threads while the model makes the next batch (on an H200 they
    # took 1 s of every 4.3 s at batch 8 when done in line, bench/RESULTS.md "GPU paths"); a sample's record
    # goes to the shard, in order, only once its file is in place, so a crash never records an unwritten image.
    writer = ThreadPoolExecutor(max_workers=2, thread_name_prefix="png-writer")
    written: deque[Future[dict[str, Any]]] = deque()
    try:
        with ShardWriter(model_dir, procs.rank) as shard:

            def record_finished(keep: int) -> None:
                """Record every finished write in order; wait until at most ``keep`` remain (bounds memory)."""
                while written and (len(written) > keep or written[0].done()):
                    shard.write(written.popleft().result())
                    bar.update(1)

            shard.write(
                {
                    "type": "run",
                    "run": identity,
                    "rank": procs.rank,
                    "num_processes": procs.num_processes,
                    "started_at": started,
                }
            )
            for batch in batches:
                requests, results = [], []
                pending: list[GenerationRequest] = []
                for row in batch:
                    stale = model_dir / f"{row['id']}.png"
                    if stale.exists() and not _output_ok(stale, {}):
                        remove(model_dir, stale)  # a file that does not decode holds nothing to keep
                    images, problem = _input_images(row, benchmark)
                    request = GenerationRequest(
                        row["id"], str(row.get("prompt") or ""), images, derive_seed(seed, row["id"])
                    )
                    requests.append(request)
                    if problem is None:
                        pending.append(request)
                        results.append(None)
                    else:
                        results.append(GenerationResult("missing_input", message=problem))
                t_model = time.perf_counter()
                generated = iter(_safe_generate(generator, pending))
                model_s += time.perf_counter() - t_model
                for request, result in zip(requests, results, strict=True):
                    written.append(
                        writer.submit(
                            _finish, model_dir, request, result or next(generated), procs.rank, checker
                        )
                    )
                record_finished(keep=2 * generator.batch_size)
            record_finished(keep=0)
    finally:
        writer.shutdown(wait=True)
        bar.close()
        generator_info = generator.info() if mine else {}
        generator.close()
    generate_s = time.perf_counter() - generate_start
    procs.wait()
    if not procs.is_main:
        return GenerationRunResult(model_dir)
    records = read_records(model_dir)
    previous = manifest or {}
    run_entry = {
        "started_at": started,
        "finished_at": time.time(),
        "num_processes": procs.num_processes,
        "config": config,
        "samples": len(samples),
        "skipped": skipped,
        "attempted": len(todo),
        "statuses": dict(Counter(records[r["id"]]["status"] for r in todo if r["id"] in records)),
    }
    header = {
        "name": name,
        "model_spec": generator.spec,
        "identity": identity,
        "seed": int(seed),
        "seed_policy": SEED_POLICY,
        "parameters": generator.parameters(),
        "generator": generator_info or previous.get("generator", {}),
        "versions": _versions(),
        "benchmark": str(benchmark),
        "config": config,
        "runs": [*previous.get("runs", []), run_entry],
    }
    if checker is not None:  # recorded only when screening ran: other manifests are as before
        header["nsfw_screening"] = {"detector": checker.detector_id, "threshold": checker.threshold}
    elif "nsfw_screening" in previous:  # an earlier run's screening still describes the outputs it wrote
        header["nsfw_screening"] = previous["nsfw_screening"]
    written = write_manifest(model_dir, header, records, order=[r["id"] for r in rows])
    for tmp in model_dir.glob(".*.png.tmp-*"):  # left by a crashed run; every process is done now
        tmp.unlink(missing_ok=True)
    failures = [
        (r["id"], records[r["id"]]["status"], records[r["id"]].get("message"))
        for r in todo
        if r["id"] in records and records[r["id"]]["status"] != "ok"
    ]
    summary = {
        "model": name,
        "model_spec": generator.spec,
        "model_dir": str(model_dir),
        "n_samples": len(samples),
        "skipped": skipped,
        "attempted": len(todo),
        "statuses": run_entry["statuses"],
        "failures": failures,
        "counts": {
            status: sum(1 for r in samples if records.get(r["id"], {}).get("status") == status)
            for status in sorted({records[r["id"]]["status"] for r in samples if r["id"] in records})
        },
        "num_processes": procs.num_processes,
        "load_s": round(load_s, 3),
        "generate_s": round(generate_s, 3),
        "model_s": round(model_s, 3),
        "wall_time_s": round(time.time() - started, 3),
    }
    return GenerationRunResult(model_dir, summary, written)
