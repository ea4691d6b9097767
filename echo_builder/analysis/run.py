"""``run_analysis``: read a build or benchmark, label, measure, and write the report folder.

Everything that can be refused is checked before the output folder is touched: the call limits, the reference
prompt files, the input benchmark, the launch date and the language model. The folder is then claimed (a folder
holding anything but an earlier analysis is refused) and written: ``labels.jsonl`` (every labelled text with its
labels and evidence, failures included), ``analysis.json``, ``analysis.md``, ``plots/*.png`` and, with an LLM
labeller, ``cache/`` (a rerun repeats no model call).
"""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import date
from pathlib import Path
from typing import Any

from echo_builder.analysis import activity as activity_mod
from echo_builder.analysis.diversity import diversity
from echo_builder.analysis.inputs import Benchmark, read_benchmark, read_prompt_file
from echo_builder.analysis.labelling import Category, Item, LabellingResult, load_prompt, normalise_label
from echo_builder.analysis.report import mask_accounts, render_markdown, rounded, write_plots
from echo_builder.analysis.tasks import TASKS, label_tasks
from echo_builder.analysis.taxonomy import CATEGORIES, FAILURE_KINDS, label_feedback
from echo_builder.errors import ConfigError

__all__ = ["AnalysisResult", "run_analysis"]

#: Configs whose prompts are prompts (the analysis split holds discussion posts).
PROMPT_CONFIGS = ("text_to_image", "image_to_image")
#: Output folder kind (its ``.echo-bench.json`` marker).
KIND = "analysis"


@dataclass
class AnalysisResult:
    """The output folder and the analysis document written to ``analysis.json``."""

    out_dir: Path
    document: dict[str, Any]


def _items(bench: Benchmark) -> tuple[list[Item], list[Item]]:
    """Feedback texts (and analysis-split posts) to label for failures, and every config's prompts to label with
    tasks (the analysis split's too: ECHO's new tasks come from all of its samples)."""
    feedback, prompts = [], []
    for s in bench.samples:
        for k, text in enumerate(s.feedback):
            feedback.append(Item(f"{s.sample_id}#feedback-{k}", s.sample_id, s.config, "feedback", text))
        if s.config == "analysis" and s.prompt.strip():
            feedback.append(Item(f"{s.sample_id}#post", s.sample_id, s.config, "post", s.prompt))
        if s.prompt.strip():
            prompts.append(Item(s.sample_id, s.sample_id, s.config, "prompt", s.prompt))
    return feedback, prompts


def _aggregate(
    result: LabellingResult, taxonomy: Sequence[Category], examples: int, configs: Sequence[str] = ()
) -> list[dict[str, Any]]:
    """Per category: texts and samples labelled, the metric, and up to ``examples`` examples (sorted by texts,
    then name)."""
    known = {c.name: c for c in taxonomy}
    items: Counter[str] = Counter()
    samples: dict[str, set[str]] = defaultdict(set)
    by_config: dict[str, Counter[str]] = defaultdict(Counter)
    shown: dict[str, list[dict[str, Any]]] = defaultdict(list)
    open_names: set[str] = set()
    given: dict[str, Counter[str]] = defaultdict(Counter)
    for labelled in result.items:
        for label in labelled.labels:
            items[label.category] += 1
            if not label.in_taxonomy:
                given[label.category][normalise_label(label.raw)] += 1
            samples[label.category].add(labelled.item.sample_id)
            by_config[label.category][labelled.item.config] += 1
            if not label.in_taxonomy:
                open_names.add(label.category)
            if len(shown[label.category]) < examples:
                shown[label.category].append(
                    {
                        "item_id": labelled.item.item_id,
                        "config": labelled.item.config,
                        "evidence": mask_accounts(label.evidence),
                        "text": mask_accounts(labelled.item.text),
                    }
                )
    rows = []
    for name in sorted(items, key=lambda n: (-items[n], n)):
        cat = known.get(name)
        rows.append(
            {
                "category": name,
                "kind": cat.kind if cat else "open",
                "description": cat.description if cat else None,
                "in_taxonomy": cat is not None,
                "metric": cat.metric if cat else None,
                "items": items[name],
                "samples": len(samples[name]),
                "by_config": {c: by_config[name].get(c, 0) for c in sorted({*configs, *by_config[name]})},
                "examples": shown[name],
                # an open category: the labeller's own names folded into it, most frequent first
                **({"given_as": _most_common(given[name])} if cat is None else {}),
            }
        )
    return rows


def _most_common(counts: Counter[str], limit: int = 5) -> list[str]:
    return [name for name, _ in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[:limit]]


def _failed(result: LabellingResult) -> list[dict[str, Any]]:
    return [{"item_id": i.item.item_id, "status": i.status, "reason": i.reason} for i in result.failures]


def _backend(backend: str, options: dict[str, Any]) -> Any:
    """The labeller's backend (``None`` for rules), created before the output folder is touched."""
    if backend.strip() == "rules":
        if options:
            raise ConfigError(f"the rules backend takes no options, got {sorted(options)}")
        return None
    from echo_builder.backends import create_backend

    return create_backend(backend, **options)


def _caller(model: Any, out: Path, limits: dict[str, Any]) -> Any:
    """A cached :class:`ModelCaller` for ``model`` (cache in ``OUT/cache``), or ``None`` for rules."""
    if model is None:
        return None
    from echo_builder.backends.caller import ModelCaller, RetryPolicy
    from echo_builder.cache import CallCache

    cache = CallCache(out / "cache", root=out)
    return ModelCaller(
        model,
        cache=cache,
        concurrency=limits["concurrency"],
        timeout_s=limits["timeout_s"],
        retry=RetryPolicy(max_attempts=limits["max_attempts"]),
    )


def run_analysis(
    source: str | Path,
    out_dir: str | Path,
    *,
    backend: str = "rules",
    backend_options: dict[str, Any] | None = None,
    concurrency: int = 8,
    timeout_s: float = 120.0,
    max_attempts: int = 6,
    lm: str | None = None,
    lm_options: dict[str, Any] | None = None,
    compare: Sequence[str | Path] = (),
    compare_column: str | None = None,
    launch_date: date | None = None,
    target_model: str | None = None,
    sample_size: int | None = None,
    n_boot: int = 1000,
    seed: int = 0,
    examples: int = 3,
    progress: bool = False,
    batch: bool = False,
    batch_retry: str = "online",
    batch_poll_s: float = 30.0,
) -> AnalysisResult:
    """Analyse a build or benchmark folder (ECHO's analysis half) and write the report folder.

    Args:
        source: a build folder, a benchmark folder, or a Hub dataset id.
        out_dir: the folder to write (absent, empty, or an earlier analysis).
        backend: ``rules`` (the keyword lexicons) or an LLM spec such as ``openai:gpt-4o``.
        backend_options: options of the backend (``base_url``, ...).
        concurrency, timeout_s, max_attempts: the model-call limits (see ``ModelCaller``).
        lm: a causal LM for perplexity (``transformers:<id or path>`` or the id or path); ``None``: not computed.
        lm_options: ``batch_size``, ``max_length``, ``dtype``, ``revision`` of the LM.
        compare: reference prompt files (one prompt per line, CSV/TSV/Parquet); each set is named by its file stem.
        compare_column: the prompt column of CSV/TSV/Parquet reference files.
        launch_date: day 0 of the activity timeline (default: the build's ``launch_date``, else the first post).
        target_model: the model the posts are about, shown to the LLM (default: the build's ``target_model``).
        sample_size: the common size for the diversity subsets (default: the smallest set's size); a set smaller
            than it has no subset statistics (``sample_size`` and the ``at_sample_size`` values ``None``).
        n_boot: subsets and bootstrap replicates, >= 1.
        seed: random seed of the subsets and bootstraps.
        examples: example quotes kept per category, >= 0.
        batch: send the LLM labeller's uncached calls through the OpenAI Batch API (``openai:`` labellers;
            :mod:`echo_builder.backends.batch`), checkpointing batch ids in ``OUT/batches``.
        batch_retry: ``online``, ``batch`` or ``none``: what happens to lines a batch failed transiently.
        batch_poll_s: seconds before the first status check of a batch (then doubling up to 10 minutes).

    Returns:
        The :class:`AnalysisResult`.

    Raises:
        ConfigError: a bad option, reference file or language model, or ``batch`` with a labeller that has no
            Batch API (before anything is written).
        BenchmarkNotFoundError: no readable benchmark at ``source``.
        OutputFolderError: ``out_dir`` holds something other than an earlier analysis.
    """
    from echo_builder.backends.caller import check_call_limits
    from echo_dataset.safe_io import claim_output, mark_output, open_atomic

    check_call_limits(concurrency=concurrency, timeout_s=timeout_s, max_attempts=max_attempts)
    if isinstance(examples, bool) or not isinstance(examples, int) or not 0 <= examples <= 100:
        raise ConfigError(f"examples must be a whole number in [0, 100], got {examples!r}")
    references: list[tuple[str, str, list[str]]] = []
    names: set[str] = set()
    for path in compare:
        name = Path(path).stem
        if name in names or name.startswith("build:"):
            raise ConfigError(
                f"--compare {path}: another reference set is already called {name!r}; rename one file"
            )
        names.add(name)
        references.append((name, str(path), read_prompt_file(path, compare_column)))
    bench = read_benchmark(source)
    if launch_date is None and isinstance(bench.build.get("launch_date"), str):
        try:
            launch_date = date.fromisoformat(bench.build["launch_date"])
        except ValueError:
            bench.problems.append(
                f"build.json launch_date {bench.build['launch_date']!r} is not a date; ignored"
            )
    if target_model is None and isinstance(bench.build.get("target_model"), str):
        target_model = bench.build["target_model"]
    # diversity and fluency: the build's prompt configs, then each reference set
    sets: list[tuple[str, str, str | None, list[str]]] = []
    for config in PROMPT_CONFIGS:
        prompts = [s.prompt for s in bench.samples if s.config == config and s.prompt.strip()]
        if prompts:
            sets.append((f"build:{config}", "build", config, prompts))
    sets.extend((name, "reference", path, prompts) for name, path, prompts in references)
    common = min((len(p) for *_, p in sets), default=0)
    if sample_size is not None and sets:
        if sample_size > max(len(p) for *_, p in sets):
            raise ConfigError(
                f"--sample-size {sample_size} is larger than every prompt set (the largest has "
                f"{max(len(p) for *_, p in sets)} prompts)"
            )
        common = sample_size  # sets smaller than it get no subset statistics (n/a), the others compare
    model = _backend(backend, dict(backend_options or {}))
    if batch:
        from echo_builder.backends.batch import batch_settings, check_batchable

        if model is None:
            raise ConfigError(
                "--batch needs an openai: labeller (an OpenAI-compatible server with the Batch API); the rules "
                "labeller calls no model. Run it without --batch."
            )
        check_batchable(model)
        batch_settings(out_dir, retry=batch_retry, poll_s=batch_poll_s)  # type: ignore[arg-type]  # checks the values
    language_model = None
    if lm is not None:
        from echo_builder.analysis.fluency import CausalLM, parse_lm_spec

        language_model = CausalLM(parse_lm_spec(lm), **(lm_options or {}))

    out = Path(out_dir)
    claim_output(out, KIND, signatures=("analysis.json",), what="analysis folder")
    mark_output(out, KIND, source=str(source))
    caller = _caller(
        model,
        out,
        {"concurrency": concurrency, "timeout_s": timeout_s, "max_attempts": max_attempts},
    )
    if batch and caller is not None:
        from echo_builder.backends.batch import batch_settings

        caller.batch = batch_settings(out, retry=batch_retry, poll_s=batch_poll_s)  # type: ignore[arg-type]
    try:
        feedback_items, prompt_items = _items(bench)
        model_name = target_model or "the model"
        failures = label_feedback(
            feedback_items, caller=caller, target_model=model_name, progress="taxonomy" if progress else None
        )
        tasks = label_tasks(
            prompt_items, caller=caller, target_model=model_name, progress="tasks" if progress else None
        )
    finally:
        if caller is not None and caller.cache is not None:
            caller.cache.close()
    with open_atomic(out, out / "labels.jsonl", "w") as f:
        for kind, result in (("failure", failures), ("task", tasks)):
            for labelled in result.items:
                f.write(json.dumps({"labeller": kind, **labelled.to_dict()}, ensure_ascii=False) + "\n")

    failure_rows = _aggregate(failures, CATEGORIES, examples, bench.configs)
    task_rows = _aggregate(tasks, TASKS, examples, bench.configs)
    for row in task_rows:
        row["task"] = row.pop("category")
        row["new_task"] = row.pop("kind") == "new_task"
        row.pop("metric")

    diversity_rows = []
    for name, origin, where, prompts in sets:
        if len(prompts) >= common:
            stats = diversity(prompts, sample_size=common, n_boot=n_boot, seed=seed)
        else:  # --sample-size above this set's size: its full-set values only, nothing to compare at the size
            stats = diversity(prompts, n_boot=n_boot, seed=seed)
            stats["sample_size"] = None
            stats["at_sample_size"] = {k: {"mean": None, "ci": [None, None]} for k in stats["at_sample_size"]}
        diversity_rows.append({"name": name, "origin": origin, "source": where, **stats})
    fluency: dict[str, Any] = {"model": None, "reason": "no --lm given", "sets": []}
    if language_model is not None:
        fluency = {"model": language_model.target, "reason": None, "sets": []}
        for name, _, _, prompts in sets:
            fluency["sets"].append(
                {"name": name, **language_model.perplexity(prompts, n_boot=n_boot, seed=seed)}
            )

    timeline = activity_mod.activity(((s.config, s.created_at) for s in bench.samples), launch_date)
    configs = {
        c: {
            "samples": sum(1 for s in bench.samples if s.config == c),
            "feedback": sum(len(s.feedback) for s in bench.samples if s.config == c),
        }
        for c in bench.configs
    }
    failure_cats = [r for r in failure_rows if r["kind"] in (*FAILURE_KINDS, "open")]
    behaviour_cats = [r for r in failure_rows if r["kind"] == "behaviour"]
    labelled_fail = sum(
        1
        for i in failures.items
        if any(lab.category in {r["category"] for r in failure_cats} for lab in i.labels)
    )
    doc: dict[str, Any] = {
        "format": "echo-bench-analysis/1",
        "input": {
            "source": str(source),
            "target_model": target_model,
            "launch_date": launch_date.isoformat() if launch_date else None,
            "configs": configs,
            "n_problems": len(bench.problems),
            "problems": bench.problems,
        },
        "labeller": {
            "backend": backend,
            "prompt_versions": {
                "taxonomy": load_prompt("feedback-taxonomy", "analysis-taxonomy").version,
                "tasks": load_prompt("task-labels", "analysis-tasks").version,
            },
        },
        "taxonomy": [
            {"category": c.name, "kind": c.kind, "description": c.description, "metric": c.metric}
            for c in CATEGORIES
        ],
        "failures": {
            "summary": {
                "items": len(failures.items),
                "with_failure": labelled_fail,
                "failures": len(failures.failures),
            },
            "categories": failure_cats,
            "failed_items": _failed(failures),
        },
        "behaviours": {"categories": behaviour_cats},
        "tasks": {
            "summary": {
                "items": len(tasks.items),
                "unlabelled": sum(1 for i in tasks.items if i.status == "ok" and not i.labels),
                "failures": len(tasks.failures),
            },
            "tasks": task_rows,
            "failed_items": _failed(tasks),
        },
        "diversity": {"sample_size": common, "n_boot": n_boot, "seed": seed, "sets": diversity_rows},
        "fluency": fluency,
        "activity": timeline,
    }
    doc = rounded(doc)
    doc["plots"] = write_plots(doc, out)
    # both texts are made first and written side by side, so that a failure (a full disk) leaves the earlier
    # analysis.json and analysis.md as a matching pair
    json_text = json.dumps(doc, indent=2, ensure_ascii=False) + "\n"
    md_text = render_markdown(doc)
    with (
        open_atomic(out, out / "analysis.json", "w") as json_file,
        open_atomic(out, out / "analysis.md", "w") as md_file,
    ):
        json_file.write(json_text)
        json_file.flush()
        md_file.write(md_text)
        md_file.flush()
    mark_output(out, KIND, source=str(source), complete=True)
    return AnalysisResult(out, doc)
