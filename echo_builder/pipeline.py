"""The curation pipeline: the declared stages (collect -> query -> relevance -> threads -> extract -> media ->
roles -> templates -> screenshots -> tier -> applicability, then the optional safety stage when ``nsfw_check`` is
set and the optional feedback_verdict stage when ``feedback_verdicts`` is, plus any plugin stage), resumable.

The stages are declared in :mod:`echo_builder.stages.registry` (one module per stage); :func:`build` runs them in
order on one shared context and does, once for all of them, what every stage needs: each stage's files are written
under ``OUT/stages/`` when it completes (atomically: temp file, then rename), ``OUT/report.json`` records per stage
what went in, what came out and what failed, plus the backend, the prompt versions and the package version. Every
model call goes through the call cache in ``OUT/cache`` (unless another is given): a build killed at any moment and
run again with ``resume=True`` repeats no completed call and writes byte-identical stage outputs and report. Wall
times and cache hits, which legitimately differ between runs, are kept apart in ``OUT/run_stats.json``.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import date
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from echo_builder import __version__
from echo_builder.errors import ConfigError, EchoError
from echo_builder.records import Sample, Tree
from echo_builder.refresh import apply_refresh, refresh_inputs
from echo_builder.secrets import redact, redactor
from echo_dataset.safe_io import (
    MARKER_FILE,
    check_inside,
    claim_output,
    ensure_dir,
    mark_output,
    open_atomic,
    write_text,
)

__all__ = ["STAGE_ORDER", "BuildConfig", "BuildResult", "build"]  # noqa: F822 (STAGE_ORDER: module __getattr__)

REPORT_FILE = "report.json"


def __getattr__(name: str) -> Any:
    # STAGE_ORDER: the built-in stages' names in run order, read from their declarations (computed on first use)
    if name == "STAGE_ORDER":
        from echo_builder.stages.registry import builtin_order

        return tuple(d.name for d in builtin_order())
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


@dataclass
class BuildConfig:
    """Everything that determines a build's outputs.

    Attributes:
        sources: files or folders of posts (any supported export format).
        out_dir: the build folder.
        backend: ``rules`` (no model) or an LLM spec such as ``openai:gpt-4o``.
        backend_options: options of the backend (``base_url``, ...).
        target_model: the image model the benchmark is about.
        launch_date: its launch date, for time-windowed keywords.
        keywords_file: keyword list; default: the target model's name.
        source_format: force one source format instead of auto-detection.
        prefilter: read only the posts matching the keywords (and time windows) and the threads around them, in
            two streaming passes over the sources (:mod:`echo_builder.sources.prefilter`): memory bounded by the
            kept posts instead of the sources' size. Needs keywords (``keywords_file`` or ``target_model``).
        hf_columns: for ``hf:<repo>[:config]`` sources (a ``datasets``-loadable prompt collection), which column
            holds the prompt, id, image ... (``{"prompt": "text"}``, see :mod:`echo_builder.sources.hf`).
        relevance_threshold: minimum relevance kept (1-5, ECHO: 4).
        max_depth, max_tree_size: bounds of reply-tree expansion.
        concurrency, timeout_s, max_attempts: model-call limits.
        cache_dir: call cache (default ``OUT/cache``).
        resume: continue in an existing build folder.
        offline: the media stage uses only images already in the media store (no download).
        media_allow: non-public addresses the media stage may fetch from (a local mirror): ``HOST[:PORT]`` or CIDR
            entries, see :meth:`echo_builder.stages.media.MediaPolicy.from_entries`; link-local and cloud-metadata
            addresses are never fetched.
        allow_private_media: deprecated; the same as ``media_allow`` of the loopback addresses (127.0.0.0/8, ::1).
        media_store: the content-addressed image store (default ``OUT/media``).
        pseudonymize: replace account identifiers in the dataset's text, URLs and author fields (default on).
        salt_file: a file holding the pseudonym salt, to share one salt (and so the same pseudonyms) across
            builds; default: a random salt per build. Either way the salt is kept in ``OUT/stages/salt``
            (reused by ``resume``), never in the dataset nor in what ``publish`` uploads.
        license: the card's ``license``; default ``other`` with the terms stated in the card (the posts and images
            remain their authors'), since the builder holds no right to grant an open license.
        max_shard_bytes: a config estimated above this many bytes is written as several Parquet shards
            (``test-0000K-of-0000N.parquet``); ``None``: 500 MB, the shard size ``datasets``' ``push_to_hub`` uses.
        skip_stages: names of plugin stages (entry point ``echo_bench.stages``) this build leaves out; the built-in
            stages always run. A build that runs other stages than the built-ins records them in ``build.json``.
        nsfw_check: run the optional ``safety`` stage (:mod:`echo_builder.stages.safety`), which fills ``has_nsfw``
            of every row with images: ``"nudenet"`` (NudeNet's shipped detector, the ``nsfw`` extra), a VLM spec
            such as ``openai:gpt-4o`` (:class:`echo_builder.safety.VlmNsfwChecker`), or a checker object (what
            :func:`echo_builder.safety.create_checker` returns; tests inject scripted ones). ``None`` (default):
            no screening, ``has_nsfw`` stays null.
        nsfw_threshold: the checker's flagging threshold in [0, 1]; ``None``: its default (NudeNet 0.6, VLM 0.5).
        nsfw_options: checker options (NudeNet: ``classes``; a VLM: its backend's options such as ``base_url``).
        feedback_verdicts: run the optional ``feedback_verdict`` stage
            (:mod:`echo_builder.stages.feedback_verdict`): each ``community_feedback`` item labelled positive /
            negative / mixed / not a verdict (the build's backend, or the rules lexicon) into
            ``OUT/stages/feedback_verdict.jsonl``. ``False`` (default): not labelled.
        expand: run the optional ``expand`` stage (:mod:`echo_builder.stages.expand`) on these platforms (``x``,
            ``bluesky``, ``reddit``): fetch the kept posts' missing ancestors and replies before ``threads``.
            Empty (default): no request is made and the build's files are those of a build without the stage.
        expand_depth: rounds of expansion (>= 1; round ``r + 1`` expands the posts round ``r`` found).
        expand_max_tree: the most posts expansion adds to one conversation (>= 1).
        expand_max_requests: the most pages fetched per platform (cached pages included); ``None``: no limit.
        expand_options: ``archive`` (X full-archive search for the conversation searches), ``base_url`` (another
            API host), and the waits of :class:`echo_builder.collect.core.Collector` (``max_wait_s``,
            ``max_attempts``, ``max_rate_limited``; tests inject ``sleep`` and ``clock``).
        batch: send the model calls the cache cannot answer through the OpenAI Batch API (``openai:`` backends;
            :mod:`echo_builder.backends.batch`), checkpointing batch ids in ``OUT/batches``. The stage files equal
            an online build's for the same replies; a build may switch between batch and online when resumed.
        batch_retry: ``online``, ``batch`` or ``none``: what happens to lines a batch failed transiently.
        batch_poll_s: seconds before the first status check of a batch (then doubling up to 10 minutes).
        max_cost_usd: ``--max-cost``: the model calls this invocation sends may cost at most this many US dollars
            (:class:`~echo_builder.backends.spend.Budget`); the call that would pass it stops the build with
            :class:`~echo_builder.errors.BudgetExceededError`, every reply so far kept for ``resume``. ``None``: no
            cap. Ignored by the ``rules`` backend (it makes no call).
        prices_file: a price file whose entries replace or add to the shipped ``echo_builder/prices.yaml``
            (:func:`echo_builder.prices.load_prices`).
        previous: refresh this earlier version (a dataset or build folder, or a Hub dataset id): published samples
            keep their ids, previous samples outside the new collection window are carried over unchanged, and
            what was removed is recorded with its reason in ``OUT/changes.json`` (see :mod:`echo_builder.refresh`).
        version: the dataset's version ``MAJOR.MINOR.PATCH``, written into the card; default with ``previous``:
            the previous card's version with the minor number bumped (``1.0.0`` when it has none); default
            without: none (the card has no Version section).
        takedowns: a file of sample ids or post ids (one a line) to remove (reason ``takedown``); with
            ``previous`` or without.
    """

    sources: Sequence[str | Path]
    out_dir: str | Path
    backend: str = "rules"
    backend_options: dict[str, Any] = field(default_factory=dict)
    target_model: str | None = None
    launch_date: date | str | None = None
    keywords_file: str | Path | None = None
    source_format: str | None = None
    prefilter: bool = False
    hf_columns: dict[str, str] = field(default_factory=dict)
    relevance_threshold: int = 4
    max_depth: int = 8
    max_tree_size: int = 500
    concurrency: int = 8
    timeout_s: float = 120.0
    max_attempts: int = 6
    cache_dir: str | Path | None = None
    resume: bool = False
    progress: bool = True
    offline: bool = False
    media_allow: Sequence[str] = ()
    allow_private_media: bool = False
    media_store: str | Path | None = None
    pseudonymize: bool = True
    license: str = "other"
    max_shard_bytes: int | None = None
    salt_file: str | Path | None = None
    skip_stages: Sequence[str] = ()
    nsfw_check: Any = None
    nsfw_threshold: float | None = None
    nsfw_options: dict[str, Any] = field(default_factory=dict)
    feedback_verdicts: bool = False
    expand: Sequence[str] = ()
    expand_depth: int = 8
    expand_max_tree: int = 500
    expand_max_requests: int | None = 1000
    expand_options: dict[str, Any] = field(default_factory=dict)
    batch: bool = False
    batch_retry: str = "online"
    batch_poll_s: float = 30.0
    max_cost_usd: float | None = None
    prices_file: str | Path | None = None
    previous: str | Path | None = None
    version: str | None = None
    takedowns: str | Path | None = None


@dataclass
class BuildResult:
    """The build's samples, trees and report, and where they were written."""

    out_dir: Path
    samples: list[Sample]
    trees: list[Tree]
    report: dict[str, Any]


def _write_jsonl(root: Path, path: Path, rows: Sequence[BaseModel | dict[str, Any]]) -> None:
    """Write one JSON line per row to ``path`` below ``root`` atomically (never through a symbolic link)."""
    clean = redactor()  # stage records keep reply text and errors: no key a server echoed back
    with open_atomic(root, path, "w") as f:
        for row in rows:
            line = (
                row.model_dump_json()
                if isinstance(row, BaseModel)
                else json.dumps(row, ensure_ascii=False, sort_keys=True)
            )
            f.write(clean(line) + "\n")


def _write_json(path: Path, data: Any, *, root: Path) -> None:
    text = json.dumps(data, indent=2, ensure_ascii=False, sort_keys=True, default=str)
    write_text(root, path, redact(text) + "\n")  # no key a server echoed back reaches a report


#: What a folder may hold before a first build writes into it: a seeded media store, a shared call cache.
SEEDED_ENTRIES = ("media", "cache")
#: Files that show a build folder written before the marker existed.
BUILD_SIGNATURES = ("build.json",)  # every build has written it first
#: Where a rebuild over a finished build writes its stage files until it has finished (then they replace
#: ``stages/``): a failed rebuild leaves the finished build's files as they were.
NEXT_DIR = ".echo-bench-next"


@dataclass
class _Folder:
    """The build folder and how this run writes to it."""

    out: Path
    stages: Path  # where this run writes its stage files (``OUT/stages`` or the staging folder)
    created: bool  # the folder did not exist before this run
    staged: bool  # ``stages`` is the staging folder: commit it at the end


def _prepare_out(config: BuildConfig, stages: Sequence[str]) -> _Folder:
    """Claim the build folder (see :func:`echo_dataset.safe_io.claim_output`) and decide how to write it.

    - absent, empty, or holding only a seeded ``media/`` or ``cache/``: a new build;
    - an unfinished build (a run that crashed or failed): a plain rerun with the same settings continues it, as
      ``--resume`` does (the call cache answers every completed call); one that finished no stage starts over;
    - a finished build: only ``--resume`` rebuilds it, with the same settings, writing the new stage files aside
      until the run has finished;
    - anything else (a folder of other files, another command's output, a link inside): refused, nothing written.
    """
    out = Path(config.out_dir)
    # new: absent, or holding nothing but the output lock (which `echo-bench build` takes first, creating the folder)
    created = not out.exists() or _only_lock_files(out)
    previous = claim_output(
        out, "build", signatures=BUILD_SIGNATURES, allowed=SEEDED_ENTRIES, what="build folder"
    )
    for name in (
        "stages",
        "cache",
        "media",
        "expand",
        NEXT_DIR,
        "build.json",
        "report.json",
        "README.md",
        "batches",
    ):
        check_inside(out, out / name)
    settings = _settings(config, stages)
    recorded = out / "build.json"
    finished = False
    if previous is not None:
        finished = bool(previous.get("complete", (out / REPORT_FILE).is_file()))
        try:
            before = json.loads(recorded.read_text(encoding="utf-8")) if recorded.is_file() else None
        except (OSError, ValueError):
            before = None
        changed = (
            sorted(k for k in set(settings) | set(before) if settings.get(k) != before.get(k))
            if isinstance(before, dict)
            else []
        )
        has_results = (out / "stages").is_dir() and any((out / "stages").iterdir())
        if finished and not config.resume:
            raise ConfigError(
                f"{out} already holds a finished build; pass --resume to rebuild it (completed model calls are "
                "not repeated), or choose another --out"
            )
        if changed and (finished or has_results):
            state = "a finished" if finished else "an unfinished"
            shown = "; ".join(
                f"{k}: was {before.get(k)!r}, now {settings.get(k)!r}"
                if k != "keywords"
                else "keywords file content"
                for k in changed
            )
            raise ConfigError(
                f"{out} holds {state} build with other settings ({shown}); "
                + ("resume" if finished else "rerun")
                + " with the same options, or choose another --out"
            )
        if not finished and not config.resume and has_results:
            warnings.warn(
                f"{out} holds an unfinished build with the same settings; continuing it as --resume would "
                "(completed model calls are not repeated)",
                stacklevel=2,
            )
    # a rebuild of a finished build keeps it marked finished: its files stay intact until the rebuild is done
    mark_output(out, "build", complete=finished)
    _write_json(recorded, settings, root=out)
    stages = out / "stages"
    if finished:
        stages = out / NEXT_DIR / "stages"
        if (out / NEXT_DIR).is_dir():
            shutil.rmtree(out / NEXT_DIR)  # what an earlier failed rebuild left (never a link: checked above)
    return _Folder(out, stages, created, finished)


def _only_lock_files(out: Path) -> bool:
    """Whether the folder ``out`` holds the output lock's files (:mod:`echo_builder.outlock`) and nothing else."""
    from echo_builder.outlock import is_lock_file

    try:
        entries = [p.name for p in out.iterdir()] if out.is_dir() else []
    except OSError:
        return False
    return bool(entries) and all(is_lock_file(name) for name in entries)


def _commit(folder: _Folder) -> None:
    """Move a rebuild's stage files from the staging folder over ``OUT/stages`` (each one atomically)."""
    if not folder.staged:
        return
    final = folder.out / "stages"
    ensure_dir(folder.out, final)
    for file in sorted(folder.stages.iterdir()):
        check_inside(folder.out, final / file.name)
        os.replace(file, final / file.name)
    shutil.rmtree(folder.out / NEXT_DIR)


def _settings(config: BuildConfig, stages: Sequence[str]) -> dict[str, Any]:
    """What must not change between a build and its resumption (paths as given, the keyword file by content, and
    the stages run, recorded only when they are not the built-ins: plugin stages, ``skip_stages``)."""
    from echo_builder.stages.registry import builtin_order

    keywords = Path(config.keywords_file).read_text(encoding="utf-8") if config.keywords_file else None
    settings: dict[str, Any] = {
        "sources": [str(s) for s in config.sources],
        "backend": config.backend,
        "target_model": config.target_model,
        "launch_date": str(config.launch_date) if config.launch_date else None,
        "keywords": keywords,
        "source_format": config.source_format,
        "relevance_threshold": config.relevance_threshold,
        "max_depth": config.max_depth,
        "max_tree_size": config.max_tree_size,
        "pseudonymize": config.pseudonymize,
        "license": config.license,
    }
    if config.nsfw_check is not None:  # recorded only when set: a build without it keeps its build.json
        from echo_builder.stages.safety import screening_settings

        settings["nsfw_check"] = screening_settings(config)
    if config.feedback_verdicts:  # recorded only when on: a build without it keeps its build.json
        settings["feedback_verdicts"] = True
    if config.expand:  # recorded only when set, as nsfw_check
        from echo_builder.stages.expand import expansion_settings

        settings["expand"] = expansion_settings(config)
    if config.prefilter:  # recorded only when on: builds made before the option resume as before
        settings["prefilter"] = True
    if config.hf_columns:
        settings["hf_columns"] = dict(config.hf_columns)
    for key in ("previous", "version", "takedowns"):  # recorded only when set (a refresh, see refresh.py)
        if getattr(config, key) is not None:
            settings[key] = str(getattr(config, key))
    if list(stages) != [d.name for d in builtin_order(config)]:
        settings["stages"] = list(stages)
    return settings


def build(config: BuildConfig, *, on_stage: Callable[[dict[str, Any]], None] | None = None) -> BuildResult:
    """Run the declared curation stages (:func:`echo_builder.stages.registry.stage_order`) and write the folder.

    Each stage runs on one shared :class:`~echo_builder.stages.registry.StageContext`; after it returns, this loop
    writes its stage files (atomically, under ``OUT/stages/``), times it (``run_stats.json``), appends its entry to
    ``report.json``'s ``stages`` and calls ``on_stage``. Plugin stages (entry point ``echo_bench.stages``) run in
    their declared place unless ``config.skip_stages`` names them.

    Args:
        config: the :class:`BuildConfig`.
        on_stage: called with each stage's report entry as soon as the stage finishes (for progress output).

    Raises:
        ConfigError: bad options, an existing build without ``resume``, or no readable source at all.
        StageError: a plugin stage failed or returned something other than a ``StageOutput``.
    """
    from echo_builder.ids import unique_sample_ids
    from echo_builder.stages.registry import NoPostsError, StageContext, active_stages
    from echo_dataset.pseudonym import BUILD_SALT_FILE, author_identifiers

    # everything that can be wrong with the options is checked before any stage runs or any file is written
    if not 1 <= config.relevance_threshold <= 5:
        raise ConfigError(f"relevance threshold must be 1-5, got {config.relevance_threshold}")
    if config.concurrency < 1:
        raise ConfigError(f"concurrency must be >= 1, got {config.concurrency}")
    stages = active_stages(config.skip_stages, config)
    prepared = {d.name: d.prepare(config) for d in stages if d.prepare is not None}
    if not re.fullmatch(r"[a-z0-9][a-z0-9.+-]{0,63}", config.license or ""):
        raise ConfigError(
            f"license {config.license!r} is not a Hub license id (lowercase letters, digits, '.', '+', '-'; "
            "e.g. other, cc-by-4.0)"
        )
    if config.salt_file is not None:
        _salt(config, None)  # a bad salt file fails before anything is written
    from echo_builder.prices import load_prices

    prices = load_prices(config.prices_file)  # a bad price file fails before anything is written
    refresh = refresh_inputs(config)  # an unreadable previous version or takedown file: before any write
    caller = _caller(config, prices)
    folder = _prepare_out(config, [d.name for d in stages])
    out, stages_dir = folder.out, folder.stages
    salt = _salt(config, out)
    cache = None
    if caller is not None:
        from echo_builder.cache import CallCache

        cache = caller.cache = CallCache(
            config.cache_dir or out / "cache", root=None if config.cache_dir else out
        )
        if config.batch:
            from echo_builder.backends.batch import batch_settings

            caller.batch = batch_settings(out, retry=config.batch_retry, poll_s=config.batch_poll_s)  # type: ignore[arg-type]
    context = StageContext(
        config=config,
        out=out,
        caller=caller,
        store_root=Path(config.media_store) if config.media_store else out / "media",
        prepared=prepared,
    )
    entries: list[dict[str, Any]] = []
    timings: dict[str, float] = {}
    try:
        for definition in stages:
            started = time.perf_counter()
            used_before = caller.meter.snapshot() if caller is not None else {}
            try:
                output = _run_stage(definition, context)
            except NoPostsError:
                # nothing was written but the marker and build.json: an earlier build's files are intact, and a
                # folder this run made (holding nothing worth keeping) is removed again
                if folder.created:
                    for name in (MARKER_FILE, "build.json", BUILD_SALT_FILE):
                        (out / name).unlink(missing_ok=True)
                    with contextlib.suppress(OSError):
                        (out / "stages").rmdir()  # held only the salt
                    with contextlib.suppress(OSError):
                        out.rmdir()
                raise
            for name in definition.files or ():
                if name in output.files:
                    _write_jsonl(out, stages_dir / name, output.files[name])
            entry = {"name": definition.name, **output.report}
            if caller is not None and definition.calls_model:
                # tokens of the replies this stage used, cache hits included: the same on a resumed build
                used = caller.meter.since(used_before)
                entry["cost"] = prices.cost(
                    caller.backend.backend_id, *used, batch=caller.batch is not None
                ).to_dict()
            entries.append(entry)
            timings[definition.name] = round(time.perf_counter() - started, 3)
            if on_stage is not None:
                on_stage(entry)
        # ids must be unique for the dataset: never let a collision fail the write after every paid call
        samples, duplicate_notes = unique_sample_ids(context.samples)
        _write_jsonl(out, stages_dir / "samples.jsonl", samples)
        _write_jsonl(out, stages_dir / "failures.jsonl", [vars(f) for f in context.failures])
    finally:
        if cache is not None:
            cache.close()

    versions: dict[str, Any] = {
        "package": __version__,
        "prompts": {d.name: d.version for d in stages if d.calls_model},
    }
    plugins = _plugin_stages(stages)
    if plugins:
        versions["plugin_stages"] = plugins
    report = {
        "echo_bench_version": __version__,
        "backend": caller.backend.backend_id if caller is not None else "rules",
        # run-wide generation parameters and reply-changing options (-o temperature=..., extra_body)
        "backend_settings": caller.backend.settings() if caller is not None else {},
        "backend_snapshots": (
            sorted(_snapshots(config.cache_dir or out / "cache", caller.backend.backend_id))
            if caller is not None
            else [f"rules@{__version__}"]
        ),
        "target_model": config.target_model,
        "launch_date": str(config.launch_date) if config.launch_date else None,
        "sources": [str(s) for s in config.sources],
        "versions": versions,
        "stages": entries,
    }
    if caller is not None:
        report["cost"] = _cost_summary(caller, prices)
    if duplicate_notes:
        report["duplicate_ids"] = duplicate_notes
    expanded = next((e for e in entries if e["name"] == "expand"), None)
    if expanded is not None:  # --expand: the posts fetched from the platforms, apart from those in the files
        from echo_builder.stages.expand import EXPANSION_FIELDS

        report["expansion"] = {key: expanded[key] for key in EXPANSION_FIELDS}
    # the dataset first (its files are all renamed into place together), then the report and the stage files:
    # until the dataset is written, a rebuild has changed none of a finished build's files
    changes = None
    if refresh is not None:
        changes = apply_refresh(refresh, samples, context.posts)
        report["refresh"] = {k: changes[k] for k in ("version", "previous", "window", "counts")}
    _write_dataset(
        config,
        out,
        [s for s in samples if changes is None or s.id in changes["_keep"]],
        report,
        salt=salt,
        identifiers=author_identifiers(context.posts),
        changes=changes,
    )
    if changes is not None:
        _write_json(
            out / "changes.json", {k: v for k, v in changes.items() if not k.startswith("_")}, root=out
        )
    _write_json(out / REPORT_FILE, report, root=out)
    _commit(folder)
    stats: dict[str, Any] = {"wall_time_s": timings, **context.run_stats}
    if caller is not None:
        stats["model_calls"] = vars(caller.stats)
        # what this invocation's own calls cost (a resumed build pays only for the calls it repeats)
        spent = prices.cost(
            caller.backend.backend_id, *caller.meter.totals(fresh=True), batch=caller.batch is not None
        )
        stats["spent"] = spent.to_dict()
        if caller.budget is not None:
            stats["budget"] = caller.budget.summary()
    _write_json(out / "run_stats.json", stats, root=out)
    mark_output(out, "build", complete=True)
    return BuildResult(out, samples, context.trees, report)


def _run_stage(definition: Any, context: Any) -> Any:
    """Run one stage; a plugin stage's exception or malformed output becomes a :class:`StageError` naming it."""
    from echo_builder.stages.registry import STAGES, StageError, StageOutput

    entry = STAGES.entry(definition.name)
    if entry.builtin:
        return definition.run(context)
    from echo_builder.plugin_deadline import PluginTimeoutError, call_with_deadline

    where = f"the plugin stage {definition.name!r} ({entry.origin})"
    try:
        # under the plugin call deadline: a stage that never returns is abandoned (its daemon thread keeps running
        # until the process ends; whatever it does to the context later is never read) and named like a failure
        output = call_with_deadline(definition.run, context, what=where)
    except PluginTimeoutError as exc:
        raise StageError(
            f"{where} did not return within {exc.seconds:g} s ({exc.setting}); abandoned; build without it with "
            f"--skip-stage {definition.name}",
            stage=definition.name,
        ) from None
    except EchoError:
        raise
    except Exception as exc:  # third-party code: its failure is named, with the way to build without it
        raise StageError(
            f"{where} failed: {type(exc).__name__}: {exc}; build without it with --skip-stage {definition.name}",
            stage=definition.name,
        ) from exc
    if not isinstance(output, StageOutput) or not isinstance(output.report, dict):
        raise StageError(
            f"{where} returned {type(output).__name__}, not a StageOutput", stage=definition.name
        )
    missing = [k for k in ("in", "out", "failures") if type(output.report.get(k)) is not int]
    undeclared = sorted(set(output.files) - set(definition.files or ()))
    if missing or "name" in output.report or undeclared:
        problem = (
            f"its report needs integer {missing}"
            if missing
            else "its report may not set 'name'"
            if "name" in output.report
            else f"it wrote stage files it does not declare: {undeclared}"
        )
        raise StageError(f"{where} returned an unusable StageOutput: {problem}", stage=definition.name)
    for key, value in output.report.items():
        try:
            json.dumps(value, allow_nan=False)
        except (TypeError, ValueError):
            shown = repr(value) if len(repr(value)) <= 80 else repr(value)[:77] + "..."
            raise StageError(
                f"{where} returned a report whose field {key!r} is not JSON (no NaN, infinity or objects): {shown}",
                stage=definition.name,
            ) from None
    # what later stages read must still be what they expect (a plugin may replace any field)
    from echo_builder.records import Post, Sample, Tree
    from echo_builder.stages.base import StageFailure

    for name, kind in (("posts", Post), ("selected", Post), ("trees", Tree), ("samples", Sample)):
        value = getattr(context, name)
        wrong = (
            next((i for i, item in enumerate(value) if not isinstance(item, kind)), None)
            if isinstance(value, list)
            else -1
        )
        if wrong is not None:
            found = type(value).__name__ if wrong < 0 else f"a {type(value[wrong]).__name__} at index {wrong}"
            raise StageError(
                f"{where} left context.{name} holding {found}, not a list of {kind.__name__}",
                stage=definition.name,
            )
    if not isinstance(context.failures, list) or not all(
        isinstance(f, StageFailure) for f in context.failures
    ):
        raise StageError(
            f"{where} left context.failures holding something other than StageFailure records",
            stage=definition.name,
        )
    return output


def _plugin_stages(stages: Sequence[Any]) -> dict[str, dict[str, str]]:
    """Version and origin of each plugin stage that ran (``versions.plugin_stages`` of the report)."""
    from echo_builder.stages.registry import STAGES

    plugins: dict[str, dict[str, str]] = {}
    for definition in stages:
        entry = STAGES.entry(definition.name)
        if not entry.builtin:
            plugins[definition.name] = {"version": definition.version, "origin": entry.origin}
    return plugins


def _salt(config: BuildConfig, out: Path | None) -> str:
    """The build's pseudonym salt (see :func:`echo_dataset.pseudonym.build_salt`); ``out=None`` only checks
    ``config.salt_file``."""
    from echo_dataset.pseudonym import build_salt, read_salt_file

    try:
        if out is None:
            return read_salt_file(config.salt_file)  # type: ignore[arg-type]
        return build_salt(out, salt_file=config.salt_file)  # type: ignore[return-value]
    except ValueError as exc:
        raise ConfigError(str(exc)) from None


def _write_dataset(
    config: BuildConfig,
    out: Path,
    samples: list[Sample],
    report: dict[str, Any],
    *,
    salt: str,
    identifiers: Sequence[str] = (),
    changes: dict[str, Any] | None = None,
) -> None:
    """The hub-shaped folder in ``out`` itself (``<config>/test-*.parquet`` + README card), so
    ``load_dataset(out, "text_to_image")`` and ``echo-bench publish out`` work directly. ``salt`` and
    ``identifiers`` (the input's authors) go to the pseudonymization; ``changes`` (a refresh) adds the carried
    rows of the previous version and the card's Version section."""
    from echo_builder.dataset_rows import rows_by_config
    from echo_dataset.card import card_context_from_report
    from echo_dataset.writer import DEFAULT_MAX_SHARD_BYTES, write_hub_folder

    store_root = Path(config.media_store) if config.media_store else out / "media"
    grouped, dropped = rows_by_config(samples, media_root=store_root)
    context = card_context_from_report(report, dropped=dropped, license=config.license)
    carried = None
    if changes is not None:
        from echo_builder.refresh import carried_rows

        carried = carried_rows(changes["previous"]["source"], changes["carried"])
        context |= {
            "version": changes["version"],  # None: no Version section (a takedown file alone)
            "previous_source": changes["previous"]["source"] if changes["previous"]["source"] else None,
            "previous_version": changes["previous"]["version"],
            "changes": changes["counts"],
        }
        # a refresh's card shows this collection window, not the span of the rows it carried over
        if changes["window"] and changes["previous"]["source"]:
            context["collection_window"] = tuple(changes["window"])
    write_hub_folder(
        grouped,
        out,
        media_root=store_root,
        card_context=context,
        pseudonymize=config.pseudonymize,
        salt=salt,
        identifiers=identifiers,
        max_shard_bytes=config.max_shard_bytes or DEFAULT_MAX_SHARD_BYTES,
        carried=carried,
    )


def _cost_summary(caller: Any, prices: Any) -> dict[str, Any]:
    """``report.json``'s ``cost``: tokens and USD of every reply the build used (cache hits priced as if paid,
    so a resumed build reports what building from scratch costs) and the price entry applied."""
    model = caller.backend.backend_id
    total = prices.cost(model, *caller.meter.totals(), batch=caller.batch is not None)
    return {
        "currency": "USD",
        **total.to_dict(),
        "price": prices.describe(model),
        "note": "list prices as of the price entry's date (Batch API prices for a --batch build); cache hits are "
        "priced as if paid",
    }


def _caller(config: BuildConfig, prices: Any = None) -> Any:
    """The model caller for ``config.backend`` (``None`` for rules); its cache is attached once the folder exists.
    The call limits are checked first, for every backend (a bad number fails before anything is written); with
    ``config.max_cost_usd`` it gets a :class:`~echo_builder.backends.spend.Budget` on ``prices``."""
    from echo_builder.backends.caller import check_call_limits

    check_call_limits(
        concurrency=config.concurrency, timeout_s=config.timeout_s, max_attempts=config.max_attempts
    )
    if config.backend.strip() == "rules":
        if config.backend_options:
            raise ConfigError(f"the rules backend takes no options, got {sorted(config.backend_options)}")
        if config.batch:
            raise ConfigError(
                "--batch needs an openai: backend (an OpenAI-compatible server with the Batch API); the rules "
                "backend calls no model. Run it without --batch."
            )
        return None
    from echo_builder.backends import create_backend
    from echo_builder.backends.caller import ModelCaller, RetryPolicy

    budget = None
    if config.max_cost_usd is not None:
        from echo_builder.backends.spend import Budget
        from echo_builder.prices import load_prices

        budget = Budget(config.max_cost_usd, prices or load_prices(), config.backend.strip())
    backend = create_backend(config.backend, **config.backend_options)
    if config.batch:
        from echo_builder.backends.batch import batch_settings, check_batchable

        check_batchable(backend)
        batch_settings(".", retry=config.batch_retry, poll_s=config.batch_poll_s)  # type: ignore[arg-type]  # checks the values
    return ModelCaller(
        backend,
        concurrency=config.concurrency,
        timeout_s=config.timeout_s,
        retry=RetryPolicy(max_attempts=config.max_attempts),
        budget=budget,
    )


def _snapshots(cache_dir: str | Path, backend_id: str) -> set[str]:
    """Model snapshots of ``backend_id`` that answered, read back from the cache (resumed runs report them too)."""
    snapshots: set[str] = set()
    db = Path(cache_dir) / "calls.sqlite"
    if not db.exists():
        return snapshots
    import sqlite3

    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        for (value,) in conn.execute("SELECT value FROM calls WHERE backend = ?", (backend_id,)):
            snapshot = json.loads(value).get("model_snapshot")
            if snapshot:
                snapshots.add(snapshot)
    finally:
        conn.close()
    return snapshots
