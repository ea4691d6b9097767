"""Leaderboards by task, and one table joining the judges' win rates with the community metrics.

``leaderboard RUN --by task`` splits a judge run's comparisons by the task label of each prompt (from an
``echo-bench analyze`` folder's ``labels.jsonl``, or, without one, the rules task labeller on the run's own
benchmark prompts) and computes every model's win rate with a 95% bootstrap interval over that task's prompts
(:func:`echo_builder.stats.bootstrap_win_rates`). A task with fewer than ``min_prompts`` prompts is flagged
``small``: its interval is wide and its ranking is not to be trusted. Prompts without a task form ``(no task)``; prompts whose labelling failed (an LLM labeller's refusal or
unreadable answer) form ``(labelling failed)``, so they are never mistaken for prompts that have no task.

``leaderboard RUN --by metrics=DIR`` joins, per model, the judge win rate and its interval with each community
metric's mean over the samples it applies to and their number ``n`` (the ``summary.json`` of ``echo-bench
metrics --out DIR``), the two tables ECHO reports separately.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

import pandas as pd

from echo_builder.errors import ConfigError

__all__ = [
    "LABELLING_FAILED",
    "NO_TASK",
    "joined_table",
    "leaderboard_by_task",
    "parse_by",
    "read_task_labels",
    "rules_task_labels",
    "run_comparisons",
]

#: The group of prompts without a task label.
NO_TASK = "(no task)"
#: The group of prompts whose task labelling failed (kept apart from prompts without a task).
LABELLING_FAILED = "(labelling failed)"


def parse_by(values: Sequence[str]) -> dict[str, str | None]:
    """``--by`` values (``task``, ``task=ANALYSIS_DIR``, ``metrics=METRICS_DIR``) as ``{kind: path or None}``.

    Raises:
        ConfigError: an unknown kind, ``metrics`` without a folder, or a kind given twice.
    """
    out: dict[str, str | None] = {}
    for value in values:
        kind, sep, path = value.partition("=")
        kind = kind.strip()
        if kind not in ("task", "metrics"):
            raise ConfigError(f"--by {value!r}: use task, task=ANALYSIS_DIR or metrics=METRICS_DIR")
        if kind in out:
            raise ConfigError(f"--by {kind} given twice")
        if kind == "metrics" and not path:
            raise ConfigError("--by metrics needs the folder of an echo-bench metrics run: --by metrics=DIR")
        out[kind] = path if sep else None
    return out


def read_task_labels(path: str | Path) -> dict[str, str | None]:
    """Task label per sample id from an ``echo-bench analyze`` folder or its ``labels.jsonl``; ``None`` for a
    prompt without a task, :data:`LABELLING_FAILED` for one whose labelling failed (``status`` other than ``ok``).

    Raises:
        ConfigError: no such file, or a line that is not a JSON object.
    """
    file = Path(path)
    if file.is_dir():
        file = file / "labels.jsonl"
    if not file.is_file():
        raise ConfigError(f"--by task={path}: no labels.jsonl there; give an echo-bench analyze --out folder")
    labels: dict[str, str | None] = {}
    for number, line in enumerate(file.read_text(encoding="utf-8").split("\n"), 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except ValueError:
            raise ConfigError(f"{file} line {number}: not JSON") from None
        if not isinstance(record, dict) or record.get("labeller") != "task":
            continue
        sample = record.get("sample_id")
        found = record.get("labels") or []
        if isinstance(sample, str) and record.get("status", "ok") != "ok":
            labels[sample] = LABELLING_FAILED
        elif isinstance(sample, str):
            first = found[0].get("category") if found and isinstance(found[0], dict) else None
            labels[sample] = first if isinstance(first, str) else None
    return labels


def rules_task_labels(benchmark: str | Path, config: str) -> dict[str, str | None]:
    """Task label per sample id of ``config``'s prompts, by the rules lexicon (``echo_builder.analysis.tasks``)."""
    from echo_builder.analysis.labelling import Item
    from echo_builder.analysis.tasks import label_tasks
    from echo_dataset.loading import read_config

    rows = read_config(benchmark, config, columns=("id", "prompt"))
    items = [
        Item(str(r["id"]), str(r["id"]), config, "prompt", r["prompt"])
        for r in rows
        if isinstance(r.get("id"), str) and isinstance(r.get("prompt"), str)
    ]
    result = label_tasks(items, caller=None, target_model="the model")
    return {i.item.sample_id: (i.labels[0].category if i.labels else None) for i in result.items}


def run_comparisons(run_dir: str | Path, *, missing: Literal["loss", "skip"] = "loss") -> pd.DataFrame:
    """A judge run's comparisons, one judge per comparison (judges combined by strict majority, as the
    leaderboard does): columns ``sample_id``, ``judge``, ``model_a``, ``model_b``, ``outcome``."""
    from echo_builder.judge.leaderboard import pairwise_comparisons, verdict_ratings
    from echo_builder.judge.run import read_verdicts
    from echo_builder.stats import majority_vote, pseudo_pairwise

    verdicts = read_verdicts(run_dir)
    if not verdicts:
        raise ConfigError(f"{run_dir}: the run has no verdicts")
    pairwise = [v for v in verdicts if v.mode == "pairwise"]
    if pairwise:
        per_judge, _ = pairwise_comparisons(pairwise, missing=missing)
    else:
        per_judge = pseudo_pairwise(verdict_ratings(verdicts), missing=missing)
    if per_judge.empty:
        return per_judge
    return majority_vote(per_judge) if per_judge["judge"].nunique() > 1 else per_judge


def leaderboard_by_task(
    run_dir: str | Path,
    labels: dict[str, str | None] | None = None,
    *,
    min_prompts: int = 10,
    missing: Literal["loss", "skip"] = "loss",
    n_boot: int = 1000,
    seed: int = 0,
) -> pd.DataFrame:
    """Win rates per task label, with 95% bootstrap intervals over each task's prompts.

    Args:
        run_dir: a judge run folder.
        labels: task per sample id (:func:`read_task_labels`); ``None`` labels the run's benchmark prompts with the
            rules lexicon (the benchmark and config named in ``run.json``).
        min_prompts: groups with fewer prompts are flagged ``small``.
        missing, n_boot, seed: as ``leaderboard``.

    Returns:
        Columns ``task``, ``model``, ``win_rate`` (in [0, 1]), ``ci_low``, ``ci_high``, ``n_prompts`` (prompts of
        the task with a comparison), ``n_comparisons``, ``small``; tasks by prompts (most first), then models by
        win rate.

    Raises:
        ConfigError: an empty run, ``run.json`` without its benchmark when ``labels`` is ``None``, or ``labels``
            that name none of the run's prompts (the analysis of another benchmark).
    """
    from echo_builder.stats import bootstrap_win_rates

    if labels is None:
        try:
            meta = json.loads((Path(run_dir) / "run.json").read_text(encoding="utf-8"))
            benchmark, config = meta["benchmark"], meta["config"]
        except (OSError, ValueError, KeyError, TypeError):
            raise ConfigError(
                f"{run_dir}: run.json does not name its benchmark; give the labels: --by task=ANALYSIS_DIR"
            ) from None
        try:
            labels = rules_task_labels(benchmark, config)
        except FileNotFoundError as exc:  # the benchmark moved, or a relative path from another folder
            raise ConfigError(
                f"{exc}: the benchmark named in {run_dir}/run.json cannot be read for the rules task labels; "
                "give the labels: --by task=ANALYSIS_DIR"
            ) from None
    comparisons = run_comparisons(run_dir, missing=missing)
    columns = ["task", "model", "win_rate", "ci_low", "ci_high", "n_prompts", "n_comparisons", "small"]
    if comparisons.empty:
        return pd.DataFrame(columns=columns)
    if labels and not comparisons["sample_id"].isin(list(labels)).any():
        raise ConfigError(
            f"--by task: the labels name none of the run's {comparisons['sample_id'].nunique()} prompts (they "
            f"label {len(labels)} other samples); give the echo-bench analyze folder of this run's benchmark"
        )
    tasks = comparisons["sample_id"].map(lambda s: labels.get(s) or NO_TASK)
    frames = []
    for task, group in comparisons.groupby(tasks, sort=False):
        n_prompts = int(group["sample_id"].nunique())
        table = bootstrap_win_rates(group, n_boot=n_boot, seed=seed)
        table.insert(0, "task", task)
        table["n_prompts"] = n_prompts
        table["small"] = n_prompts < min_prompts
        frames.append(table)
    out = pd.concat(frames, ignore_index=True)
    out["_size"] = out.groupby("task")["n_prompts"].transform("max")
    out = out.sort_values(["_size", "task", "win_rate"], ascending=[False, True, False], kind="stable")
    return out[columns].reset_index(drop=True)


def joined_table(
    run_dir: str | Path,
    metrics_dir: str | Path,
    *,
    missing: Literal["loss", "skip"] = "loss",
    n_boot: int = 1000,
    seed: int = 0,
) -> pd.DataFrame:
    """One row per model: judge win rate and 95% bootstrap interval beside each metric's mean and ``n``.

    Returns:
        Columns ``model``, ``win_rate``, ``ci_low``, ``ci_high``, ``n_comparisons``, then per metric ``<metric>``
        (mean over the applicable samples scored; NaN when none) and ``<metric>_n``; models of either table.
        ``attrs["higher_is_better"]``: each metric's direction, as the metrics summary gives it.

    Raises:
        ConfigError: no ``summary.json`` in ``metrics_dir``, or it is not a metrics summary.
    """
    from echo_builder.stats import bootstrap_win_rates

    file = Path(metrics_dir) / "summary.json"
    try:
        summary = json.loads(file.read_text(encoding="utf-8"))["summary"]
        rows = [(str(r["model"]), str(r["metric"]), r.get("mean"), int(r.get("n") or 0)) for r in summary]
        direction = {
            str(r["metric"]): r["higher_is_better"]
            for r in summary
            if isinstance(r.get("higher_is_better"), bool)
        }
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ConfigError(
            f"--by metrics={metrics_dir}: no readable summary.json of an echo-bench metrics run ({exc})"
        ) from None
    comparisons = run_comparisons(run_dir, missing=missing)
    if comparisons.empty:
        judge = pd.DataFrame(columns=["model", "win_rate", "ci_low", "ci_high", "n_comparisons"])
    else:
        judge = bootstrap_win_rates(comparisons, n_boot=n_boot, seed=seed)[
            ["model", "win_rate", "ci_low", "ci_high", "n_comparisons"]
        ]
    if rows:
        names = sorted({metric for _, metric, _, _ in rows})
        wide: dict[str, dict[str, Any]] = {}
        for model, metric, mean, n in rows:
            entry = wide.setdefault(model, {"model": model, **{m: float("nan") for m in names}})
            entry.update({f"{m}_n": entry.get(f"{m}_n", 0) for m in names})
            entry[metric] = float(mean) if isinstance(mean, (int, float)) else float("nan")
            entry[f"{metric}_n"] = n
        judge = judge.merge(pd.DataFrame(list(wide.values())), on="model", how="outer")
    out = judge.sort_values("win_rate", ascending=False, na_position="last", kind="stable").reset_index(
        drop=True
    )
    out.attrs["higher_is_better"] = direction
    return out


def _strict(value: Any) -> Any:
    if isinstance(value, float) and value != value:
        return None
    if hasattr(value, "item"):
        return _strict(value.item())
    return value


def _markdown_value(value: Any) -> str:
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "n/a"
    return f"{value:.3f}" if isinstance(value, float) else str(value)


def print_by(
    run: str,
    by: Sequence[str],
    fmt: str,
    *,
    missing: Literal["loss", "skip"],
    n_boot: int,
    seed: int,
    min_prompts: int = 10,
) -> None:
    """The ``leaderboard RUN --by ...`` output: a table per kind, or JSON / CSV of the same rows."""
    import click

    kinds = parse_by(by)
    tables: dict[str, pd.DataFrame] = {}
    if "task" in kinds:
        labels = read_task_labels(kinds["task"]) if kinds["task"] else None
        tables["task"] = leaderboard_by_task(
            run, labels, min_prompts=min_prompts, missing=missing, n_boot=n_boot, seed=seed
        )
    if "metrics" in kinds:
        tables["metrics"] = joined_table(
            run, kinds["metrics"] or "", missing=missing, n_boot=n_boot, seed=seed
        )
    if fmt == "json":
        click.echo(
            json.dumps(
                {
                    k: [{c: _strict(v) for c, v in row.items()} for row in t.to_dict("records")]
                    for k, t in tables.items()
                },
                indent=2,
            )
        )
        return
    if fmt == "markdown":
        from echo_builder.judge.markdown import markdown_cell
        from echo_builder.judge.markdown import markdown_table as _markdown_table

        for kind, table in tables.items():
            columns = [str(c) for c in table.columns]
            rows = [
                [markdown_cell(_markdown_value(v)) for v in record]
                for record in table.itertuples(index=False)
            ]
            numeric = [pd.api.types.is_numeric_dtype(table[c]) for c in table.columns]
            click.echo(f"### Win rates by {kind}\n")
            click.echo("\n".join(_markdown_table([markdown_cell(c) for c in columns], rows, numeric)) + "\n")
        return
    if fmt == "csv":
        for kind, table in tables.items():
            click.echo(table.assign(by=kind).to_csv(index=False), nl=False)
        return
    for kind, table in tables.items():
        if kind == "task":
            click.echo(
                f"Win rates by task (95% bootstrap intervals over the task's prompts; * fewer than {min_prompts} prompts)"
            )
            click.echo(f"  {'task':<26} {'model':<24} {'win rate':>8}  {'95% CI':<15} {'prompts':>7}")
            for row in table.itertuples():
                mark = " *" if row.small else ""
                click.echo(
                    f"  {row.task[:26]:<26} {row.model[:24]:<24} {row.win_rate:8.3f}  "
                    f"[{row.ci_low:.3f}, {row.ci_high:.3f}] {row.n_prompts:>7}{mark}"
                )
        else:
            metric_cols = [
                c
                for c in table.columns
                if c not in ("model", "win_rate", "ci_low", "ci_high", "n_comparisons")
                and not c.endswith("_n")
            ]
            click.echo("Judge win rate beside the community metrics (mean over applicable samples, n)")
            direction = table.attrs.get("higher_is_better", {})
            if direction:
                click.echo(
                    "  ("
                    + "; ".join(
                        f"{m}: {'higher' if direction[m] else 'lower'} is better"
                        for m in metric_cols
                        if m in direction
                    )
                    + ")"
                )
            header = f"  {'model':<24} {'win rate':>8}  {'95% CI':<15}" + "".join(
                f" {m[:20]:>20}" for m in metric_cols
            )
            click.echo(header)
            for row in table.to_dict("records"):
                rate = "     n/a" if pd.isna(row["win_rate"]) else f"{row['win_rate']:8.3f}"
                ci = "" if pd.isna(row["ci_low"]) else f"[{row['ci_low']:.3f}, {row['ci_high']:.3f}]"
                cells = ""
                for m in metric_cols:
                    value = row.get(m)
                    n = row.get(f"{m}_n")
                    shown = "n/a" if value is None or pd.isna(value) else f"{value:.3f} (n={int(n or 0)})"
                    cells += f" {shown:>20}"
                click.echo(f"  {str(row['model'])[:24]:<24} {rate}  {ci:<15}{cells}")
