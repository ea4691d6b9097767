"""``echo-bench metrics``: the community-driven metrics over every model's outputs on a benchmark config.

For each model folder (``<outputs>/<model>/<sample_id>.<ext>``) and each requested metric, the metric runs on the
samples it applies to: the sample's applicability flag when the benchmark has one (``False`` = not applicable;
unknown = computed), and the metric's own needs (color shift, structure and face identity compare with input
images; text rendering needs a judge). Nothing is silently skipped: every (model, sample, metric) gets a row with
its value or the reason it is NaN.

Written under ``--out``: ``metrics.parquet`` (or ``.csv``) with one row per (model, sample, metric) and the
columns ``model, sample_id, metric, value, nan_reason, note, detail``; ``summary.csv`` / ``summary.json`` per
model and metric (mean, count, NaN counts by reason, counts of conventional values by note, direction, and for
color shift the pooled figure); and ``color_swatches/<model>.png`` (pooled input vs output mean colors, how the
paper shows the yellow cast; the title's number is the summary's ``pooled``).

Values that are conventions rather than measurements carry their reason everywhere the value goes: NaN has its
``nan_reason`` (not applicable, missing output, unreadable image, ...); a number that is a convention (face
identity's 0.0 for "a face in the inputs, none in the output") has its ``note``, counted per model in the
summary's ``notes`` and printed in the table's reasons column.

Outputs are matched to samples by file stem (``<outputs>/<model>/<sample_id>.<ext>``). Output files that match no
sample of any config of the benchmark are reported as a warning (as ``judge`` does); a run where no output file
matches any sample of the config at all (wrong names, a folder level too many) is a :class:`ConfigError`.
"""

from __future__ import annotations

import json
import math
from collections import Counter
from collections.abc import Callable, Mapping, Sequence, Set
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from echo_builder.errors import ConfigError, EchoError
from echo_builder.ids import safe_file_name
from echo_builder.plugin_deadline import PluginTimeoutError, call_with_deadline
from echo_builder.scoring.base import METRIC_SPECS, MetricResult
from echo_builder.secrets import get_logger
from echo_dataset.safe_io import (
    check_inside,
    claim_output,
    ensure_dir,
    mark_output,
    open_atomic,
    write_json,
    write_text,
)

__all__ = ["APPLICABILITY_FLAG", "METRIC_NAMES", "MetricsRunResult", "run_metrics"]

log = get_logger(__name__)


class _RegistryView:
    """A read-only view of :data:`~echo_builder.scoring.registry.METRICS`, read on each use (plugins included)."""

    def _definitions(self) -> list[Any]:
        from echo_builder.scoring.registry import metric_definitions

        return metric_definitions()


class _MetricNames(_RegistryView, Sequence[str]):
    """The registered metric names (a tuple-like view, kept for code that imported ``METRIC_NAMES``)."""

    def _names(self) -> tuple[str, ...]:
        return tuple(d.name for d in self._definitions())

    def __getitem__(self, index: Any) -> Any:
        return self._names()[index]

    def __len__(self) -> int:
        return len(self._names())

    def __eq__(self, other: object) -> bool:
        return tuple(self) == (tuple(other) if isinstance(other, (tuple, list, _MetricNames)) else other)

    def __hash__(self) -> int:
        return hash(self._names())

    def __repr__(self) -> str:
        return repr(self._names())


class _FlagMap(_RegistryView, Mapping[str, str]):
    """metric name -> the applicability flag governing it (metrics without a flag are absent)."""

    def _map(self) -> dict[str, str]:
        return {d.name: d.applicability_flag for d in self._definitions() if d.applicability_flag}

    def __getitem__(self, key: str) -> str:
        return self._map()[key]

    def __iter__(self) -> Any:
        return iter(self._map())

    def __len__(self) -> int:
        return len(self._map())

    def __repr__(self) -> str:
        return repr(self._map())


class _NeedsInputs(_RegistryView, Set[str]):
    """The names of the metrics that compare an output with the sample's input images."""

    def _set(self) -> frozenset[str]:
        return frozenset(d.name for d in self._definitions() if d.needs_inputs)

    def __contains__(self, name: object) -> bool:
        return name in self._set()

    def __iter__(self) -> Any:
        return iter(self._set())

    def __len__(self) -> int:
        return len(self._set())


#: Registered metric names, in metric order (built-ins by declared `order`; a live view of the metric registry).
METRIC_NAMES: Sequence[str] = _MetricNames()
#: Which applicability flag of a sample governs each metric (a live view of the metric registry).
APPLICABILITY_FLAG: Mapping[str, str] = _FlagMap()
_NEEDS_INPUTS: Set[str] = _NeedsInputs()


@dataclass
class MetricsRunResult:
    """Rows (one per model, sample and metric), the per-model summary, and what was unavailable and why."""

    out_dir: Path
    rows: list[dict[str, Any]]
    summary: list[dict[str, Any]]
    unavailable: dict[str, str] = field(default_factory=dict)
    #: model -> number of its output files that match no sample of the benchmark (``judge``'s "stray" outputs)
    unmatched: dict[str, int] = field(default_factory=dict)


def _flag(row: dict[str, Any], name: str) -> bool | None:
    flags = row.get("applicability")
    if isinstance(flags, dict) and name in flags:
        return flags[name]
    value = row.get(name)
    return value if isinstance(value, bool) else None


def _metric_function(name: str, options: dict[str, Any]) -> Callable[..., MetricResult]:
    """The registered metric ``name`` as ``f(inputs, outputs, prompts, columns=None)`` with the run's options
    bound; ``columns`` maps each of its ``"column"`` options to that column's values for these samples.

    Raises:
        ConfigError: an unknown metric, or one that needs a judge when none is configured.
        MissingDependencyError: its factory needs an extra that is not installed.
    """
    from echo_builder.scoring.registry import METRICS

    definition = METRICS.get(name)
    if definition.needs_judge and not options.get("judges"):
        raise ConfigError(f"{name} needs a judge: pass --judge openai:<model> or transformers:<path>")
    bound = {**definition.option_defaults(), **{k: v for k, v in options.items() if v is not None}}
    entry = METRICS.entry(name)
    builtin = entry.builtin
    what = f"metric {name!r} ({entry.origin})"
    if builtin:
        factory = definition.load_factory(entry.origin)
    else:  # a plugin's factory module may still have to be imported: under the plugin import deadline
        try:
            factory = call_with_deadline(definition.load_factory, entry.origin, what=what, imports=True)
        except PluginTimeoutError as exc:
            raise PluginMetricError(
                f"{what} failed: its import did not return within {exc.seconds:g} s ({exc.setting}); abandoned"
            ) from None

    def run(
        inputs: list[Any], outputs: list[Any], prompts: list[str], columns: dict[str, list[Any]] | None = None
    ) -> MetricResult:
        arguments = (inputs, outputs, prompts, {**bound, **(columns or {})})
        try:
            # a plugin's factory runs under the plugin call deadline (a daemon thread, abandoned when it passes)
            result = factory(*arguments) if builtin else call_with_deadline(factory, *arguments, what=what)
        except PluginTimeoutError as exc:  # that metric's failure, like a plugin that raises
            raise PluginMetricError(
                f"{what} failed: it did not return within {exc.seconds:g} s ({exc.setting}); abandoned"
            ) from None
        except (EchoError, ImportError):
            raise
        except Exception as exc:
            if builtin:
                raise
            # a plugin's own bug is that metric's failure, reported by name; the other metrics still run
            raise PluginMetricError(
                f"metric {name!r} ({METRICS.entry(name).origin}) failed: {type(exc).__name__}: {exc}"
            ) from exc
        if builtin:
            return _checked(name, result, len(outputs))
        try:
            return _checked(name, result, len(outputs))
        except ConfigError as exc:  # a plugin's malformed result: that metric's failure too
            raise PluginMetricError(str(exc)) from exc

    return run


class PluginMetricError(ConfigError):
    """A plugin metric raised or returned something unusable: that metric's failure, named; the other metrics of
    the run are still computed and written (``run_metrics`` raises it at the end)."""


def _checked(name: str, result: Any, n: int) -> MetricResult:
    """A factory's result, checked: a :class:`MetricResult` with one value per sample (a plugin's mistake is a
    clear error naming the metric, not a crash elsewhere)."""
    if not isinstance(result, MetricResult):
        raise ConfigError(f"metric {name!r} returned {type(result).__name__}, not a MetricResult")
    if len(result.values) != n:
        raise ConfigError(f"metric {name!r} returned {len(result.values)} values for {n} samples")
    return result


def run_metrics(
    benchmark: str | Path,
    config: str,
    outputs_dir: str | Path,
    out_dir: str | Path,
    *,
    metrics: Sequence[str] = (),
    options: dict[str, Any] | None = None,
    table_format: Literal["parquet", "csv"] = "parquet",
    optional_metrics: Sequence[str] = (),
) -> MetricsRunResult:
    """Compute the metrics for every model and write the rows, the summary and the color swatches.

    Args:
        metrics: metric names of the metric registry; empty means every registered metric that can run (those
            that need a judge only when one is configured). A named metric that cannot run is an error.
        optional_metrics: more metrics to compute when they can; one that cannot run (or fails) is recorded in
            ``unavailable`` instead of stopping the run (the demo runs plugin metrics this way).
        options: each metric's declared options by name (``dino_weights`` (path or ``random:<seed>``),
            ``structure_reduction``, ``face_backend``, ``face_model_dir``, a plugin's own; ``None`` = the declared
            default), ``face_options``, ``judges``, ``judge_options``, ``cache_dir``, ``judge_prompt`` (a
            :class:`~echo_builder.judge.prompts.JudgePrompt` for ``text_rendering``).

    Returns:
        :class:`MetricsRunResult`; its ``summary`` rows hold ``model, metric, mean, n, n_nan, nan_reasons`` (reason
        prefix -> count), ``notes`` (note -> count of conventional values such as 0.0 for no face in the output)
        and ``higher_is_better``, plus for color shift ``pooled`` (8-bit levels, None when undefined),
        ``pooled_n``, ``pooled_deltas`` (R, G, B) and ``pooled_reason``; ``unmatched`` counts output files that
        match no sample of any config, per model (also logged as a warning).

    Raises:
        ConfigError: an unknown metric, a requested metric that cannot run (its message says how to fix it),
            unreadable outputs, or no output file of any model matching a sample id of the config (nothing is
            written then).
        PluginMetricError: a requested plugin metric raised or returned an unusable result; raised after every
            other metric's results are written (the failed metric has no rows; ``summary.json`` names it under
            ``unavailable``).
    """
    import pandas as pd

    from echo_builder.generate.manifest import generation_failures
    from echo_builder.judge.run import check_output_matches, discover_outputs
    from echo_dataset.loading import read_config

    options = dict(options or {})
    explicit = bool(metrics)
    from echo_builder.scoring.registry import METRICS, metric_definitions

    names = list(metrics) or [
        d.name for d in metric_definitions() if not d.needs_judge or options.get("judges")
    ]
    for name in names:
        if name not in METRICS:
            raise ConfigError(METRICS.unknown_message(name))
    samples = read_config(benchmark, config)
    column_options = _column_options(names + list(optional_metrics), options, samples, benchmark, config)
    outputs = discover_outputs(outputs_dir)
    unmatched = check_output_matches(benchmark, config, outputs_dir, samples, outputs)
    # `echo-bench generate` records why an output is missing (refused, nsfw, error); the NaN reason shows it
    failures = {model: generation_failures(Path(outputs_dir) / model) for model in outputs}
    out = Path(out_dir)
    # OUT is new or empty, or an earlier metrics run (rerun: its files are replaced, each atomically); never a
    # folder of other files, and nothing is written through a symbolic link below it
    claim_output(
        out,
        "metrics",
        signatures=(("summary.json", "metrics.parquet"), ("summary.json", "metrics.csv")),
        what="metrics folder",
    )
    for name in ("metrics.parquet", "metrics.csv", "summary.csv", "summary.json", "color_swatches", "cache"):
        check_inside(out, out / name)
    mark_output(out, "metrics")
    rows: list[dict[str, Any]] = []
    unavailable: dict[str, str] = {}
    plugin_failures: list[str] = []  # requested plugin metrics that failed: an error once the rest is written
    optional = [m for m in optional_metrics if m not in names]
    for name in optional:
        if name not in METRICS:
            raise ConfigError(METRICS.unknown_message(name))
    names += optional
    for name in names:
        strict = explicit and name not in optional
        try:
            function = _metric_function(name, options)
        except PluginMetricError as exc:  # a plugin factory not even loaded in time: as if it failed
            unavailable[name] = str(exc)
            if strict:
                plugin_failures.append(str(exc))
            continue
        except EchoError as exc:
            if strict:
                raise
            unavailable[name] = str(exc)
            continue
        for model, files in outputs.items():
            try:
                rows.extend(
                    _rows_for(
                        name, function, model, samples, files, failures.get(model), column_options.get(name)
                    )
                )
            except PluginMetricError as exc:
                rows = [row for row in rows if row["metric"] != name]  # no partial results of that metric
                unavailable[name] = str(exc)
                if strict:
                    plugin_failures.append(str(exc))
                break
            except (EchoError, ImportError) as exc:
                if strict:
                    raise
                unavailable[name] = str(exc)
                # the result's `unavailable` carries it (`echo-bench metrics` prints it once, as "not computed")
                log.info("metric %s unavailable: %s", name, exc)
                break
    frame = pd.DataFrame(rows, columns=list(ROW_COLUMNS))
    if table_format == "csv":
        write_text(out, out / "metrics.csv", frame.to_csv(index=False))
    else:
        with open_atomic(out, out / "metrics.parquet") as f:
            frame.astype({"detail": str}).to_parquet(f, index=False)
    summary = _summary(frame)
    pooled: dict[str, Any] = {}
    if "color_shift" in names and "color_shift" not in unavailable:
        pooled = {model: _pooled_color_shift(samples, files) for model, files in outputs.items()}
        for row in summary:
            if row["metric"] == "color_shift" and row["model"] in pooled:
                row.update(_pooled_fields(pooled[row["model"]]))
    table = pd.DataFrame(summary)
    # CSV cells hold text: the reason counts as "reason xN; ...", the deltas as "R G B"
    for column in ("nan_reasons", "notes"):
        if column in table.columns:
            table[column] = [_counts_text(c) for c in table[column]]
    if "pooled_deltas" in table.columns:
        table["pooled_deltas"] = [
            " ".join("nan" if d is None else f"{d:g}" for d in v) if isinstance(v, list) else None
            for v in table["pooled_deltas"]
        ]
    write_text(out, out / "summary.csv", table.to_csv(index=False))
    write_json(
        out,
        out / "summary.json",
        {"summary": summary, "unavailable": unavailable, "unmatched_outputs": unmatched},
    )
    if pooled:
        _swatches(pooled, out / "color_swatches", root=out)
    if plugin_failures:
        raise PluginMetricError(
            "; ".join(plugin_failures) + f" (the other metrics' results are written to {out})"
        )
    return MetricsRunResult(out, rows, summary, unavailable, unmatched)


def _column_options(
    names: Sequence[str],
    options: Mapping[str, Any],
    samples: Sequence[dict[str, Any]],
    benchmark: str | Path,
    config: str,
) -> dict[str, dict[str, str]]:
    """metric -> {option name: benchmark column} for every ``"column"`` option given, each column checked.

    Raises:
        ConfigError: a given column is not a column of the config, or is given for a metric this run does not
            compute (before anything is written).
    """
    from echo_builder.scoring.registry import METRICS, metric_definitions

    for definition in metric_definitions():
        for option in definition.options:
            if (
                option.type == "column"
                and options.get(option.name) is not None
                and definition.name not in names
            ):
                raise ConfigError(
                    f"{option.cli_name} applies to the metric {definition.name}, which this run does not compute "
                    f"(add --metric {definition.name})"
                )
    found: dict[str, dict[str, str]] = {}
    present = set().union(*(sample.keys() for sample in samples)) if samples else set()
    for name in names:
        if name not in METRICS:
            continue
        for option in METRICS.get(name).options:
            column = options.get(option.name)
            if option.type != "column" or column is None:
                continue
            if not isinstance(column, str) or column not in present:
                listed = ", ".join(sorted(present)) or "none (the config has no rows)"
                raise ConfigError(
                    f"{option.cli_name} {column!r} ({name}): the config {config!r} of {benchmark} has no such "
                    f"column; its columns: {listed}"
                )
            found.setdefault(name, {})[option.name] = column
    return found


#: Columns of ``metrics.parquet`` / ``metrics.csv``, in order.
ROW_COLUMNS = ("model", "sample_id", "metric", "value", "nan_reason", "note", "detail")


def _rows_for(
    name: str,
    function: Callable[..., MetricResult],
    model: str,
    samples: Sequence[dict[str, Any]],
    files: dict[str, Path],
    failures: dict[str, str] | None = None,
    columns: Mapping[str, str] | None = None,
) -> list[dict[str, Any]]:
    """One row per sample; ``columns`` maps the metric's ``"column"`` options to the benchmark column whose
    values (one per scored sample) the factory receives under that option's name."""
    rows, todo = [], []
    from echo_builder.scoring.registry import metric_definition

    definition = metric_definition(name)
    flag_name = definition.applicability_flag
    for sample in samples:
        base = {"model": model, "sample_id": sample["id"], "metric": name, "note": None, "detail": None}
        inputs = [img for img in (sample.get("input_images") or ()) if img is not None]
        flag = _flag(sample, flag_name) if flag_name else None
        if flag is False:
            rows.append(
                {
                    **base,
                    "value": math.nan,
                    "nan_reason": f"not applicable: the sample's {flag_name} flag is false",
                }
            )
        elif definition.needs_inputs and not inputs:
            rows.append(
                {**base, "value": math.nan, "nan_reason": "not applicable: the sample has no input images"}
            )
        elif sample["id"] not in files:
            reason = (failures or {}).get(sample["id"]) or "the model produced no image"
            rows.append({**base, "value": math.nan, "nan_reason": f"missing output: {reason}"})
        else:
            todo.append((base, inputs, files[sample["id"]], sample.get("prompt", ""), sample))
    if todo:
        values = {option: [t[4].get(column) for t in todo] for option, column in (columns or {}).items()}
        arguments = ([t[1] for t in todo], [t[2] for t in todo], [t[3] for t in todo])
        result = function(*arguments, values) if values else function(*arguments)
        deltas = result.extras.get("deltas")
        per_sample = result.extras.get("details")
        notes = result.extras.get("notes") or [None] * len(todo)
        for k, (base, *_) in enumerate(todo):
            detail = None
            if per_sample is not None:  # a metric's own per-sample detail (JSON-ready), e.g. text_accuracy's
                detail = None if per_sample[k] is None else json.dumps(per_sample[k], ensure_ascii=False)
            elif deltas is not None:
                detail = json.dumps({"delta_rgb": [round(float(d), 4) for d in deltas[k]]})
            elif "backend" in result.extras:
                detail = json.dumps({"backend": result.extras["backend"]})
            value = float(result.values[k])
            row = {**base, "value": value, "nan_reason": result.nan_reasons[k], "detail": detail}
            row["note"] = notes[k] if math.isfinite(value) else None
            rows.append(row)
    order = {s["id"]: i for i, s in enumerate(samples)}
    return sorted(rows, key=lambda r: order[r["sample_id"]])


def _summary(frame: Any) -> list[dict[str, Any]]:
    out = []
    for (model, metric), group in frame.groupby(["model", "metric"], sort=True):
        values = group["value"].astype(float)
        finite = values[values.notna()]
        spec = _spec(metric)
        out.append(
            {
                "model": model,
                "metric": metric,
                "mean": float(finite.mean()) if len(finite) else None,
                "n": len(finite),
                "n_nan": int(values.isna().sum()),
                "nan_reasons": dict(
                    Counter(r.split(":", 1)[0] for r in group["nan_reason"] if isinstance(r, str))
                ),
                # numbers that are conventions, not measurements (e.g. 0.0 for no face in the output), by note
                "notes": dict(
                    Counter(_note_key(r) for r in group.get("note", ()) if isinstance(r, str) and r)
                ),
                "higher_is_better": spec.higher_is_better if spec else None,
                # scores compare only within one backend: its id (every setting that changes a value) goes along
                "backend": _backend_of(group["detail"]),
            }
        )
    return out


def _spec(metric: str) -> Any:
    """The metric's spec from the registry (``None`` for a name no longer registered)."""
    from echo_builder.scoring.registry import METRICS

    return METRICS.get(metric).spec if metric in METRICS else METRIC_SPECS.get(metric)


def _backend_of(details: Any) -> str | None:
    """The backend id(s) recorded in the rows' ``detail`` JSON (``" | "``-joined if several), else None."""
    found = []
    for detail in details:
        if isinstance(detail, str) and '"backend"' in detail:
            backend = json.loads(detail).get("backend")
            if backend and backend not in found:
                found.append(backend)
    return " | ".join(found) or None


def _counts_text(counts: Any) -> str:
    """``{"missing output": 1, "not applicable": 2}`` as ``"missing output x1; not applicable x2"``."""
    return "; ".join(f"{k} x{v}" for k, v in counts.items()) if isinstance(counts, dict) else ""


def _note_key(note: str) -> str:
    """A note without its parenthesised detail, e.g. ``"failure: no face detected in the output ..."``."""
    return note.split(" (", 1)[0]


def _pooled_color_shift(samples: Sequence[dict[str, Any]], files: dict[str, Path]) -> Any:
    """The model's pooled color shift over the samples color shift applies to (the same rule as its rows)."""
    from echo_builder.scoring.color import pooled_color_shift

    inputs = [[img for img in (s.get("input_images") or ()) if img is not None] for s in samples]
    outputs = [files.get(s["id"]) for s in samples]
    applicable = [_flag(s, APPLICABILITY_FLAG["color_shift"]) for s in samples]
    return pooled_color_shift(inputs, outputs, on_image_error="nan", applicable=applicable)


def _pooled_fields(pooled: Any) -> dict[str, Any]:
    """Summary fields of a :class:`~echo_builder.scoring.color.PooledColorShift` (JSON-ready, NaN -> None)."""

    def number(x: Any) -> float | None:
        return round(float(x), 4) if math.isfinite(float(x)) else None

    return {
        "pooled": number(pooled.magnitude),
        "pooled_n": pooled.n_images,
        "pooled_deltas": [number(d) for d in pooled.deltas],
        "pooled_reason": pooled.reason,
    }


def _swatches(pooled_by_model: dict[str, Any], folder: Path, *, root: Path) -> None:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.patches import Rectangle

    ensure_dir(root, folder)
    for model, pooled in pooled_by_model.items():
        if not pooled.n_images:
            continue
        fig = Figure(figsize=(4.8, 2.6))
        FigureCanvasAgg(fig)
        ax = fig.add_subplot()
        for x, (label, rgb) in enumerate((("inputs", pooled.input_means), ("outputs", pooled.output_means))):
            if rgb is None or any(math.isnan(float(c)) for c in rgb):
                continue
            ax.add_patch(Rectangle((x * 1.1, 0), 1, 1, color=[min(max(float(c) / 255, 0), 1) for c in rgb]))
            ax.text(
                x * 1.1 + 0.5,
                -0.15,
                f"{label}\n({', '.join(f'{float(c):.1f}' for c in rgb)})",
                ha="center",
                va="top",
                fontsize=8,
            )
        ax.set_xlim(-0.1, 2.2)
        ax.set_ylim(-0.6, 1.05)
        ax.axis("off")
        # parse_math off: a "$...$" in a model name is text, not a formula that may fail to render
        ax.set_title(
            f"{model}: pooled color shift {float(pooled.magnitude):.2f}\n"
            f"({pooled.n_images} applicable samples, {pooled.n_not_applicable} not applicable)",
            fontsize=9,
            parse_math=False,
        )
        with open_atomic(root, folder / safe_file_name(model, ".png")) as f:
            fig.savefig(f, format="png", dpi=120, bbox_inches="tight")
