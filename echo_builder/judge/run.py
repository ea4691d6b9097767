"""A judge run: a benchmark config plus a folder of model outputs, judged by one or more VLM judges.

Layout read: ``<outputs>/<model>/<sample_id>.<ext>`` (ext one of :data:`IMAGE_EXTENSIONS`). Files are matched by
exact stem, never by prefix or directory order (both were defects of the reference code); two files for one
sample in one model folder are an error. Layout written under ``--out RUN``:

- ``verdicts.parquet``: one :class:`~echo_builder.records.Verdict` row per judgment (single: sample x model x
  judge; pairwise: sample x model pair x order x judge), including failures and missing outputs;
- ``run.json``: what was judged and how (package version, benchmark, config, the outputs folder, models, judges
  with the model snapshots they reported and their reply-changing settings, prompt versions and the prompt's
  temperature, counts per status, cache hits);
- ``cache/``: the call cache (unless another is given), so a rerun or a resumed run repeats no call.
"""

from __future__ import annotations

import itertools
import json
import os
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from echo_builder import __version__
from echo_builder.backends import create_backend
from echo_builder.backends.caller import ModelCaller, RetryPolicy, check_call_limits
from echo_builder.cache import CallCache
from echo_builder.errors import ConfigError
from echo_builder.input_files import is_utf8
from echo_builder.judge.judging import Judge, JudgeItem
from echo_builder.judge.prompts import (
    CRITERIA,
    PAIRWISE_LEAN,
    PROBABILITY_DIGITS,
    PROBABILITY_TRIG,
    SINGLE,
    JudgePrompt,
    load_judge_prompt,
)
from echo_builder.judge.verdicts_file import (
    RUN_FILE,
    VERDICTS_FILE,
    missing_models,
    read_verdicts,
    write_verdicts,
)
from echo_builder.outlock import is_lock_file
from echo_builder.records import Verdict
from echo_builder.secrets import get_logger, redact
from echo_dataset.safe_io import check_inside, claim_output, mark_output, write_text

__all__ = [
    "IMAGE_EXTENSIONS",
    "RUN_FILE",
    "VERDICTS_FILE",
    "JudgeRunResult",
    "check_output_matches",
    "discover_outputs",
    "read_verdicts",
    "run_judging",
    "write_verdicts",
]

log = get_logger(__name__)
IMAGE_EXTENSIONS = frozenset({".png", ".jpg", ".jpeg", ".webp", ".gif", ".bmp", ".tif", ".tiff"})


def discover_outputs(outputs_dir: str | Path) -> dict[str, dict[str, Path]]:
    """``{model: {sample_id: image path}}`` from ``<outputs>/<model>/<sample_id>.<ext>``, sorted.

    Hidden folders and non-image files are ignored. A model folder or file whose name is not valid UTF-8 is
    skipped with a warning: such a name cannot be a model's name in a verdict or a table, nor a sample id. Raises
    :class:`ConfigError` when the folder does not exist, holds no model folder, or a model has two images for one
    sample.
    """
    root = Path(outputs_dir)
    if not root.is_dir():
        raise ConfigError(f"outputs folder {str(root)!r} does not exist")
    found: dict[str, dict[str, Path]] = {}
    for model_dir in sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith(".")):
        if not is_utf8(model_dir.name):
            log.warning(
                "model folder %s skipped: its name is not valid UTF-8 (rename it)", ascii(model_dir.name)
            )
            continue
        entries = sorted(model_dir.iterdir())
        if entries and all(is_lock_file(f.name) for f in entries):
            continue  # a generate run that is loading its model (or was killed then): not a model's outputs yet
        files: dict[str, Path] = {}
        for f in entries:
            if not f.is_file() or f.suffix.lower() not in IMAGE_EXTENSIONS:
                continue
            if not is_utf8(f.name):
                log.warning("output %s skipped: its name is not valid UTF-8 (rename it)", ascii(str(f)))
                continue
            if f.stem in files:
                raise ConfigError(
                    f"model {model_dir.name!r} has two outputs for sample {f.stem!r}: {files[f.stem].name} and "
                    f"{f.name}; keep one"
                )
            files[f.stem] = f
        found[model_dir.name] = files
    if not found:
        raise ConfigError(f"no model folders in {str(root)!r}; expected <outputs>/<model>/<sample_id>.png")
    return found


def _identified(rows: Sequence[dict[str, Any]], where: str) -> list[dict[str, Any]]:
    """The rows with a usable id (a non-empty string), each id once; any other row is skipped with a warning
    naming it, so one bad row never stops the run or merges two samples into one."""
    kept: list[dict[str, Any]] = []
    seen: set[str] = set()
    for i, row in enumerate(rows):
        sample_id = row.get("id")
        if not isinstance(sample_id, str) or not sample_id:
            log.warning("row %d of %s has no usable id (%r); that sample is skipped", i, where, sample_id)
        elif sample_id in seen:
            log.warning("sample id %r appears twice in %s; its row %d is skipped", sample_id, where, i)
        else:
            seen.add(sample_id)
            kept.append(row)
    return kept


@dataclass
class JudgeRunResult:
    """What a run produced: the verdicts, where they are, and a summary for people."""

    out_dir: Path
    verdicts: list[Verdict]
    summary: dict[str, Any] = field(default_factory=dict)


def _items(
    samples: Sequence[dict[str, Any]],
    outputs: dict[str, dict[str, Path]],
    failures: dict[str, dict[str, str]] | None = None,
) -> dict[str, list[JudgeItem]]:
    """Judge items per sample; a missing output carries the generation manifest's reason when there is one."""
    per_sample: dict[str, list[JudgeItem]] = {}
    for row in samples:
        inputs = tuple(img for img in (row.get("input_images") or ()) if img is not None)
        per_sample[row["id"]] = [
            JudgeItem(
                row["id"],
                row["prompt"],
                inputs,
                model,
                outputs[model].get(row["id"]),
                output_error=(failures or {}).get(model, {}).get(row["id"]),
            )
            for model in outputs
        ]
    return per_sample


def run_judging(
    benchmark: str | Path,
    config: str,
    outputs_dir: str | Path,
    judges: Sequence[str],
    out_dir: str | Path,
    *,
    mode: Literal["single", "pairwise", "probability"] = "single",
    judge_options: dict[str, dict[str, Any]] | None = None,
    concurrency: int = 8,
    timeout_s: float = 120.0,
    max_attempts: int = 6,
    cache_dir: str | Path | None = None,
    limit: int | None = None,
    progress: bool = True,
    probability_scale: Literal["digits", "trig"] = "digits",
    judge_prompt: str | Path | JudgePrompt | None = None,
    run_config: dict[str, Any] | None = None,
    batch: bool = False,
    batch_retry: Literal["online", "batch", "none"] = "online",
    batch_poll_s: float = 30.0,
    max_cost_usd: float | None = None,
    prices_file: str | Path | None = None,
    anchors: int | None = None,
    anchor_from: str | Path | None = None,
    criteria: Sequence[str] | None = None,
) -> JudgeRunResult:
    """Judge every (sample, model) of ``config`` with every judge spec and write the run folder.

    Args:
        benchmark: hub-shaped benchmark folder (or Hub id) holding ``config``.
        outputs_dir: ``<outputs>/<model>/<sample_id>.<ext>``.
        judges: backend specs (``openai:gpt-4o``, ``transformers:/models/qwen``); several make an ensemble.
        out_dir: run folder to write (created).
        mode: ``single`` (1-10 ratings), ``pairwise`` (both orders) or ``probability`` (expected digit rating).
        judge_options: backend options per spec (``{"openai:gpt-4o": {"base_url": ...}}``).
        limit: judge only the first ``limit`` samples (for a quick look).
        probability_scale: for ``probability`` mode, ``digits`` (expected 1-9 rating) or ``trig`` (TRIGScore).
        judge_prompt: a judge prompt file (or a loaded :class:`JudgePrompt`) replacing the built-in prompt of
            ``mode``; its ``answer.kind`` must fit the mode (single: ``rating`` or ``criteria``, pairwise:
            ``preference``, probability: ``digits`` or ``trig`` as ``probability_scale``). The built-in pairwise
            prompt is :data:`~echo_builder.judge.prompts.PAIRWISE_LEAN` (ties carry a lean, so OpenING's FDT tie
            treatment is computed). Its identity (name, version with the
            content hash, source, SHA-256) goes into ``run.json`` and every verdict's ``prompt_version``.
        run_config: the ``--run-config`` file the command read (path, SHA-256, its values and the keys the
            command line overrode; :func:`echo_builder.commands.options.run_config_record`), kept in ``run.json``
            under ``run_config`` when given.
        batch: send the calls the cache cannot answer through the OpenAI Batch API (``openai:`` judges, every
            mode; :mod:`echo_builder.backends.batch`), checkpointing batch ids in ``RUN/batches``.
            The verdicts equal an online run's for the same replies, except ``latency_s``, which is 0.0 for a
            call answered in a batch (a batch has no per-call wall time).
        batch_retry: ``online``, ``batch`` or ``none``: what happens to lines a batch failed transiently.
        batch_poll_s: seconds before the first status check of a batch (then doubling up to 10 minutes).
        max_cost_usd: ``--max-cost``: the calls of all judges together may cost at most this many US dollars
            (:class:`~echo_builder.backends.spend.Budget`); ``None``: no cap. Cache hits cost nothing.
        prices_file: a price file on top of the shipped ``echo_builder/prices.yaml``. ``run.json`` records per
            judge ``cost`` (this run's calls) and ``cost_with_cache`` (every reply used, cache hits priced as if
            paid), each ``{input_tokens, output_tokens, usd}`` with ``usd`` ``null`` for an unpriced model.
        anchors, anchor_from: re-score ``anchors`` samples x all models of the earlier run ``anchor_from`` with
            this run's judges into ``RUN/anchors/`` (own verdicts file and call cache; see
            :mod:`echo_builder.judge.drift`), so ``echo-bench leaderboard EARLIER RUN`` can check judge drift.
            Single and probability modes only; both or neither must be given.
        criteria: single mode only: rate these criteria (names declared by a ``criteria`` prompt; the built-in
            :data:`~echo_builder.judge.prompts.CRITERIA` declares prompt_following, input_fidelity, realism,
            aesthetics and text) in one call per output, one verdict per criterion. A ``criteria`` prompt file
            without ``criteria`` rates all it declares. ``run.json`` lists the criteria rated.

    Raises:
        ConfigError: no judges, no models, unknown mode, unreadable outputs, a bad or unfitting prompt file,
            criteria outside single mode or not declared by the prompt (the message lists the declared ones), a bad
            price file, ``max_cost_usd`` for a judge without a price, or ``batch`` with a judge that has no Batch
            API.
        BudgetExceededError: the next call would pass ``max_cost_usd``; the calls in flight finish and every reply
            is in the run's cache, so the same command with a higher ``--max-cost`` continues (nothing but the
            cache and the folder's marker is written then).
    """
    from echo_builder.backends.spend import Budget
    from echo_builder.prices import load_prices
    from echo_dataset.loading import read_config

    if not judges:
        raise ConfigError("give at least one --judge backend spec")
    if len(set(judges)) != len(judges):
        raise ConfigError(f"a judge is listed twice: {list(judges)}")
    if mode not in ("single", "pairwise", "probability"):
        raise ConfigError(f"unknown mode {mode!r}; use single, pairwise or probability")
    if limit is not None and limit < 1:
        raise ConfigError(f"limit must be >= 1, got {limit}")
    probability = PROBABILITY_DIGITS if probability_scale == "digits" else PROBABILITY_TRIG
    prompt = {"single": SINGLE, "pairwise": PAIRWISE_LEAN, "probability": probability}[mode]
    if criteria is not None:
        if mode != "single":
            raise ConfigError(f"--criteria applies to --mode single, not --mode {mode}")
        prompt = CRITERIA
    if judge_prompt is not None:
        custom = judge_prompt if isinstance(judge_prompt, JudgePrompt) else load_judge_prompt(judge_prompt)
        if criteria is not None and custom.answer != "criteria":
            raise ConfigError(
                f"judge prompt {custom.source}: field 'answer.kind' is {custom.answer!r}, but --criteria needs "
                "'criteria' (a prompt that declares its criteria)"
            )
        if custom.answer != prompt.answer and not (mode == "single" and custom.answer == "criteria"):
            raise ConfigError(
                f"judge prompt {custom.source}: field 'answer.kind' is {custom.answer!r}, but --mode {mode}"
                + (f" --probability-scale {probability_scale}" if mode == "probability" else "")
                + f" needs {prompt.answer!r}"
            )
        prompt = custom
    if (anchors is None) != (anchor_from is None):
        raise ConfigError("--anchors N and --anchor-from EARLIER_RUN go together")
    anchor_work: tuple[list[JudgeItem], dict[str, Any]] | None = None
    if anchors is not None and anchor_from is not None:
        from echo_builder.judge.drift import anchor_items

        if mode == "pairwise":
            raise ConfigError(
                "--anchors needs --mode single or probability (ratings); pairwise runs have none yet"
            )
        if Path(anchor_from).resolve() == Path(out_dir).resolve():
            raise ConfigError("--anchor-from must be an earlier run, not this run's --out folder")
        # the outputs finder is handed over so that drift does not import this module back
        anchor_work = anchor_items(anchor_from, anchors, mode, discover_outputs)
    if criteria is not None:
        prompt = prompt.select_criteria(criteria)
    all_samples = _identified(read_config(benchmark, config), f"{benchmark}/{config}")
    samples = all_samples[:limit] if limit is not None else all_samples
    outputs = discover_outputs(outputs_dir)
    check_output_matches(benchmark, config, outputs_dir, all_samples, outputs)
    in_benchmark = {row["id"] for row in all_samples}
    stray = {
        m: sorted(set(files) - in_benchmark) for m, files in outputs.items() if set(files) - in_benchmark
    }
    out = Path(out_dir)
    previous = out / RUN_FILE
    if previous.is_file() and not previous.is_symlink():
        try:
            previous_mode = json.loads(previous.read_text()).get("mode")
        except (OSError, ValueError, AttributeError):
            previous_mode = None
        if previous_mode not in (None, mode):
            raise ConfigError(
                f"{out} holds a {previous_mode} run; a {mode} run would replace its verdicts. Choose another --out."
            )
    # limits and backends are checked first: a bad number, spec, option or missing key fails before anything is written
    check_call_limits(concurrency=concurrency, timeout_s=timeout_s, max_attempts=max_attempts)
    prices = load_prices(prices_file)
    budgets: dict[str, Budget] = {}
    if max_cost_usd is not None:
        first = Budget(max_cost_usd, prices, judges[0])
        budgets = {spec: first if spec == judges[0] else first.for_model(spec) for spec in judges}
    backends = {spec: create_backend(spec, **(judge_options or {}).get(spec, {})) for spec in judges}
    batching = None
    if batch:
        from echo_builder.backends.batch import batch_settings, check_batchable

        for backend in backends.values():
            check_batchable(backend)
        batching = batch_settings(out, retry=batch_retry, poll_s=batch_poll_s)
    # RUN is new or empty, or an earlier judge run (a rerun resumes it from the cache); never a folder of other
    # files, and no path written below it may be a symbolic link
    claim_output(
        out, "judge", signatures=((RUN_FILE, VERDICTS_FILE), "cache/calls.sqlite"), what="judge run folder"
    )
    for name in (
        RUN_FILE,
        VERDICTS_FILE,
        "cache",
        "plots",
        "batches",
        "anchors",
        "anchors/cache",
        "anchors/anchors.json",
    ):
        check_inside(out, out / name)
    mark_output(out, "judge")
    cache = CallCache(cache_dir or out / "cache", root=None if cache_dir else out)
    from echo_builder.generate.manifest import generation_failures

    # `echo-bench generate` records why an output is missing (refused, nsfw, error); show that reason
    failures = {model: generation_failures(Path(outputs_dir) / model) for model in outputs}
    per_sample = _items(samples, outputs, failures)
    verdicts: list[Verdict] = []
    anchor_verdicts: list[Verdict] = []
    # the anchors' own cache: they are asked again even when --cache is the earlier run's cache
    anchor_cache = CallCache(out / "anchors" / "cache", root=out) if anchor_work is not None else None
    judge_info: list[dict[str, Any]] = []
    started = time.time()
    try:
        for spec, backend in backends.items():
            caller = ModelCaller(
                backend,
                cache=cache,
                concurrency=concurrency,
                timeout_s=timeout_s,
                retry=RetryPolicy(max_attempts=max_attempts),
                batch=batching,
                budget=budgets.get(spec),
            )
            judge = Judge(caller, prompts={prompt.answer: prompt})
            label = f"judging with {spec}" if progress else None
            if prompt.answer == "criteria":
                batch = judge.criteria(
                    [it for items in per_sample.values() for it in items], progress=label, template=prompt
                )
            elif mode == "single":
                batch = judge.single([it for items in per_sample.values() for it in items], progress=label)
            elif mode == "probability":
                batch = judge.probability(
                    [it for items in per_sample.values() for it in items], scale=probability_scale
                )
            else:
                pairs = [pair for items in per_sample.values() for pair in itertools.combinations(items, 2)]
                batch = judge.pairwise(pairs, progress=label)
            verdicts.extend(batch)
            if anchor_work is not None and anchor_cache is not None:
                anchor_caller = ModelCaller(
                    backend,
                    cache=anchor_cache,
                    concurrency=concurrency,
                    timeout_s=timeout_s,
                    retry=RetryPolicy(max_attempts=max_attempts),
                )
                anchor_judge = Judge(anchor_caller, prompts={prompt.answer: prompt})
                if mode == "single":
                    anchor_batch = anchor_judge.single(
                        anchor_work[0], progress=f"anchors with {spec}" if progress else None
                    )
                else:
                    anchor_batch = anchor_judge.probability(anchor_work[0], scale=probability_scale)
                anchor_verdicts.extend(anchor_batch)
                anchor_calls = anchor_caller.stats.attempts
            else:
                anchor_calls = None
            snapshots = sorted({v.judge_snapshot for v in batch if v.judge_snapshot})
            judge_info.append(
                {
                    "spec": spec,
                    # run-wide generation parameters and reply-changing options (-o temperature=..., extra_body)
                    "settings": backend.settings(),
                    "snapshots": snapshots,
                    "calls": caller.stats.attempts,
                    "cache_hits": caller.stats.cache_hits,
                    "requests": caller.stats.requests,
                    "input_tokens": caller.stats.input_tokens,
                    "output_tokens": caller.stats.output_tokens,
                    "statuses": dict(Counter(v.status for v in batch)),
                    "cost": prices.cost(
                        spec, *caller.meter.totals(fresh=True), batch=batching is not None
                    ).to_dict(),
                    "cost_with_cache": prices.cost(
                        spec, *caller.meter.totals(), batch=batching is not None
                    ).to_dict(),
                    "price": prices.describe(spec),
                    **({"anchor_calls": anchor_calls} if anchor_calls is not None else {}),
                }
            )
            spread = getattr(backend, "spread", None)
            if callable(spread):  # replicas: calls each answered, and failed over to another
                judge_info[-1]["replicas"] = spread()
            backend.close()
    finally:
        cache.close()
        if anchor_cache is not None:
            anchor_cache.close()
    if int(os.environ.get("RANK", "0")) != 0:
        # under `accelerate launch` every process holds all verdicts (gathered in order); rank 0 writes them
        return JudgeRunResult(out, verdicts, {})
    write_verdicts(verdicts, out / VERDICTS_FILE, root=out)
    summary = {
        "echo_bench_version": __version__,
        "benchmark": str(benchmark),
        "config": config,
        "mode": mode,
        "prompt_version": prompt.version,
        "judge_prompt": prompt.identity(),
        # the criteria rated (answer kind criteria); [] for one overall score
        "criteria": list(prompt.criterion_names),
        # the prompt file's sampling temperature; a judge's `-o temperature=` (judges[].settings) wins over it
        "prompt_temperature": prompt.temperature,
        "outputs": str(outputs_dir),
        "n_samples": len(samples),
        "models": sorted(outputs),
        # no file, or a file that cannot be decoded: both are missing outputs, counted once per sample
        "missing_outputs": {
            m: len(
                {
                    v.sample_id
                    for v in verdicts
                    if v.status == "missing_output"
                    and m in (v.model, v.model_a, v.model_b)
                    and (v.mode != "pairwise" or m in missing_models(v))
                }
            )
            for m in sorted(outputs)
        },
        "ok_verdicts": sum(1 for v in verdicts if v.status == "ok"),
        "stray_outputs": {m: len(v) for m, v in stray.items()},
        "judges": judge_info,
        "n_verdicts": len(verdicts),
        "statuses": dict(Counter(v.status for v in verdicts)),
        "wall_time_s": round(time.time() - started, 3),
        "cost_usd": _total_usd(judge_info),
    }
    if budgets:
        summary["budget"] = next(iter(budgets.values())).summary()
    if run_config is not None:
        summary["run_config"] = run_config
    if batching is not None:
        summary["batch"] = {"retry": batch_retry, "checkpoints": "batches"}
    if anchor_work is not None:
        from echo_builder.judge.drift import ANCHORS_DIR, ANCHORS_FILE

        record = {**anchor_work[1], "n_verdicts": len(anchor_verdicts)}
        write_verdicts(anchor_verdicts, out / ANCHORS_DIR / VERDICTS_FILE, root=out)
        write_text(out, out / ANCHORS_DIR / ANCHORS_FILE, json.dumps(record, indent=2, sort_keys=True) + "\n")
        summary["anchors"] = {
            k: record[k] for k in ("from_run", "from_run_id", "samples", "models", "n_verdicts")
        }
    write_text(out, out / RUN_FILE, redact(json.dumps(summary, indent=2, sort_keys=True)) + "\n")
    # (outputs matching no sample were warned about before any call: check_output_matches; run.json counts them)
    return JudgeRunResult(out, verdicts, summary)


def _total_usd(judge_info: Sequence[dict[str, Any]]) -> float | None:
    """USD of this run's calls over all judges; ``None`` when a judge that made calls has no price."""
    total = 0.0
    for info in judge_info:
        usd = info["cost"]["usd"]
        if usd is None:
            if info["cost"]["input_tokens"] or info["cost"]["output_tokens"]:
                return None
            continue
        total += usd
    return round(total, 6)


def check_output_matches(
    benchmark: str | Path,
    config: str,
    outputs_dir: str | Path,
    samples: Sequence[dict[str, Any]],
    outputs: dict[str, dict[str, Path]],
) -> dict[str, int]:
    """Check ``outputs`` (from :func:`discover_outputs`) against the config's ``samples`` before any work.

    Used by ``judge`` and ``metrics`` alike. Warns (logging) about a model none of whose files matches a sample and
    about files whose stem is a sample id of no config of the benchmark (files of the benchmark's other configs are
    expected in a shared outputs folder and are not counted).

    Returns:
        model -> count of its files that match no sample of any config.

    Raises:
        ConfigError: the config has no sample, or no output file of any model matches one of its sample ids (a
            wrong folder, one level too high or too low, or misnamed files); nothing has been written then.
    """
    if not samples:
        raise ConfigError(
            f"config {config!r} of {str(benchmark)!r} has no sample: nothing to evaluate (is it the right config? "
            "the build's report.json says what each stage kept)"
        )
    ids = {str(s["id"]) for s in samples}
    matched = {model: sum(1 for stem in files if stem in ids) for model, files in outputs.items()}
    stray = {model: [stem for stem in files if stem not in ids] for model, files in outputs.items()}
    elsewhere = _ids_of_other_configs(benchmark, config) if any(stray.values()) else set()
    unknown = {m: n for m, stems in stray.items() if (n := len(set(stems) - elsewhere))}
    if not outputs:
        raise ConfigError(
            f"no model folder with output images in {str(outputs_dir)!r}; expected <outputs>/<model>/<sample_id>.png"
        )
    if not any(matched.values()):
        n_files = sum(len(files) for files in outputs.values())
        nested = sorted(
            str(p.relative_to(outputs_dir))
            for model in outputs
            for p in (Path(outputs_dir) / model).iterdir()
            if p.is_dir() and not p.name.startswith(".")
        )
        # one line whatever the names hold: control characters are shown escaped
        example = str(samples[0]["id"]).encode("unicode_escape").decode("ascii")
        hint = (
            f"; the model folders hold sub-folders ({', '.join(repr(n) for n in nested[:3])}"
            f"{', ...' if len(nested) > 3 else ''}): "
            "is --outputs one level too high?"
            if nested
            else ""
        )
        raise ConfigError(
            f"no output file in {str(outputs_dir)!r} matches a sample id of config {config!r} "
            f"({len(outputs)} model folder(s), {n_files} image file(s)); expected <outputs>/<model>/<sample_id>.png, "
            f"e.g. <model>/{example}.png{hint}"
        )
    for model, n in matched.items():
        if not n:
            log.warning(
                "model %r: none of its %d output file(s) matches a sample id of config %r; all its values are NaN",
                model,
                len(outputs[model]),
                config,
            )
    if unknown:
        log.warning(
            "outputs for samples in no config of %s were ignored (files per model): %s", benchmark, unknown
        )
    return unknown


def _ids_of_other_configs(benchmark: str | Path, config: str) -> set[str]:
    """Sample ids of the benchmark's other configs (local folders only: reads the ``id`` column alone)."""
    import pyarrow.parquet as pq

    from echo_dataset import CONFIG_NAMES, SPLIT

    root = Path(benchmark)
    if not root.is_dir():
        return set()
    ids: set[str] = set()
    for name in CONFIG_NAMES:
        if name != config:
            for file in sorted((root / name).glob(f"{SPLIT}-*.parquet")):
                ids.update(pq.read_table(file, columns=["id"]).column("id").to_pylist())
    return ids
