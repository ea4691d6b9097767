"""``echo-bench judge | leaderboard | metrics | publish-metrics``: judging, ranking and the metrics
(agreement and the judge-validation commands are in :mod:`echo_builder.commands.agreement`)."""

from __future__ import annotations

import inspect
import json
import sys
from pathlib import Path
from typing import Any

import click

from echo_builder.commands.options import (
    MAX_CONCURRENCY,
    MAX_LIMIT,
    MAX_N_BOOT,
    MAX_SEED,
    VOTES_FILE_HELP,
    EchoCommand,
    Number,
    backend_options,
    batch_options,
    call_limit_options,
    cost_options,
    run_config_option,
    run_config_record,
)

#: echo_builder.judge.drift.DEFAULT_DRIFT_THRESHOLD, repeated so the CLI loads without the judge package (a test
#: checks they are equal)
DEFAULT_DRIFT_THRESHOLD = 0.8

__all__ = [
    "judge",
    "leaderboard",
    "metrics",
    "publish_metrics",
]


@click.command(cls=EchoCommand)
@click.option("--benchmark", required=True, help="Hub-shaped benchmark folder (or Hub dataset id).")
@click.option(
    "--config", "config_name", required=True, help="Config to judge: image_to_image, text_to_image, ..."
)
@click.option(
    "--outputs", required=True, type=click.Path(file_okay=False), help="Folder <model>/<sample_id>.png."
)
@click.option(
    "--judge",
    "judges",
    required=True,
    multiple=True,
    metavar="SPEC",
    help="Judge backend, e.g. openai:gpt-4o or transformers:PATH; repeat for an ensemble.",
)
@click.option(
    "--mode",
    type=click.Choice(["single", "pairwise", "probability"]),
    default="single",
    show_default=True,
    help="single: rate each output 1-10; pairwise: compare two outputs in both orders; probability: expected rating "
    "from token probabilities.",
)
@click.option(
    "--out", "out_dir", required=True, type=click.Path(file_okay=False), help="Run folder to write."
)
@click.option(
    "--base-url",
    "--base-urls",
    "base_url",
    multiple=True,
    help="Server URL for openai: judges (default: $ECHO_OPENAI_BASE_URL or $OPENAI_BASE_URL). Repeat it for "
    "replicas of one model (base_urls: [...] in a run config): each call goes to the replica with the fewest "
    "calls outstanding and fails over to another when one errors or times out; verdicts record the replica.",
)
@click.option(
    "-o", "--option", "options", multiple=True, metavar="KEY=VALUE", help="Backend option; repeatable."
)
@click.option(
    "--concurrency",
    default=8,
    show_default=True,
    type=Number(int, 1, MAX_CONCURRENCY),
    help=f"Judge calls in flight (batch size for local models), 1-{MAX_CONCURRENCY}.",
)
@call_limit_options
@click.option(
    "--cache", "cache_dir", type=click.Path(file_okay=False), help="Call cache folder (default RUN/cache)."
)
@click.option(
    "--probability-scale",
    type=click.Choice(["digits", "trig"]),
    default="digits",
    show_default=True,
    help="probability mode: expected 1-9 rating, or TRIGScore from Good/Medium/Bad.",
)
@click.option("--limit", type=Number(int, 1, MAX_LIMIT), help="Judge only the first N samples.")
@click.option(
    "--judge-prompt",
    "judge_prompt",
    type=click.Path(),
    help="Judge prompt file (YAML) replacing the built-in prompt of --mode, e.g. to reproduce ECHO's released "
    "protocol; see docs/reproducing-echo.md.",
)
@click.option(
    "--criteria",
    metavar="NAME,NAME,...",
    help="single mode: rate each output on these criteria in one call (one verdict per criterion; leaderboard "
    "then gives a win rate per criterion and the criteria trade-off map). The built-in criteria prompt declares "
    "prompt_following, input_fidelity (image-to-image only), realism, aesthetics, text; with --judge-prompt, "
    "the criteria its file declares.",
)
@batch_options
@cost_options
@click.option(
    "--anchors",
    type=Number(int, 1, MAX_LIMIT),
    metavar="N",
    help="Also re-score N samples x all models of --anchor-from's run (chosen by its id) into RUN/anchors/, with its "
    "own cache, so `echo-bench leaderboard EARLIER RUN` can check judge drift; see docs/judging.md.",
)
@click.option(
    "--anchor-from",
    "anchor_from",
    type=click.Path(exists=True, file_okay=False),
    metavar="EARLIER_RUN",
    help="The earlier judge run folder whose items --anchors re-scores (its benchmark and outputs must still exist).",
)
@run_config_option
def judge(
    benchmark: str,
    config_name: str,
    outputs: str,
    judges: tuple[str, ...],
    mode: str,
    out_dir: str,
    base_url: tuple[str, ...],
    options: tuple[str, ...],
    concurrency: int,
    timeout_s: float,
    max_attempts: int,
    cache_dir: str | None,
    probability_scale: str,
    limit: int | None,
    judge_prompt: str | None,
    criteria: str | None,
    batch: bool = False,
    batch_retry: str = "online",
    batch_poll_s: float = 30.0,
    max_cost: float | None = None,
    prices_file: str | None = None,
    anchors: int | None = None,
    anchor_from: str | None = None,
) -> None:
    """Judge model outputs on a benchmark config with one or more VLM judges.

    Writes RUN/verdicts.parquet (one row per judgment, failures included), RUN/run.json and RUN/cache; a rerun or
    a resumed run repeats no model call. Then: echo-bench leaderboard RUN.
    """
    from echo_builder.judge.run import run_judging

    result = run_judging(
        benchmark,
        config_name,
        outputs,
        judges,
        out_dir,
        mode=mode,  # type: ignore[arg-type]
        judge_options=backend_options(judges, base_url, options),
        concurrency=concurrency,
        timeout_s=timeout_s,
        max_attempts=max_attempts,
        cache_dir=cache_dir,
        limit=limit,
        probability_scale=probability_scale,  # type: ignore[arg-type]
        judge_prompt=judge_prompt,
        run_config=run_config_record(),
        criteria=criteria.split(",") if criteria is not None else None,
        batch=batch,
        batch_retry=batch_retry,  # type: ignore[arg-type]
        batch_poll_s=batch_poll_s,
        max_cost_usd=max_cost,
        prices_file=prices_file,
        anchors=anchors,
        anchor_from=anchor_from,
    )
    s = result.summary
    if not s:  # a non-main accelerate process: rank 0 reports
        return
    click.echo(
        f"judged {s['n_samples']} samples x {len(s['models'])} models with {len(judges)} judge(s): "
        f"{s['n_verdicts']} verdicts in {s['wall_time_s']:.1f} s"
    )
    click.echo("statuses: " + ", ".join(f"{k}={v}" for k, v in sorted(s["statuses"].items())))
    if s.get("criteria"):
        click.echo(f"criteria (one verdict each per output): {', '.join(s['criteria'])}")
        rated = {v.criterion for v in result.verdicts}
        unasked = [c for c in s["criteria"] if c not in rated]
        if unasked and result.verdicts:  # e.g. input_fidelity on a config without input images
            click.echo(
                f"note: {', '.join(unasked)} not asked: the prompt asks it only of samples with input images",
                err=True,
            )
    for j in s["judges"]:
        click.echo(
            f"  {j['spec']}: {j['calls']} calls, {j['cache_hits']} cache hits, "
            f"snapshot {', '.join(j['snapshots']) or 'not reported'}, "
            f"cost {_usd(j['cost']['usd'])}"
        )
    if "anchors" in s:
        a = s["anchors"]
        shared = sorted(set(a["models"]) & set(s.get("models", ())))
        if shared:  # leaderboard refuses a merge where a model comes from two runs
            merge = (
                f"no merge with {a['from_run']}: both runs judged {', '.join(shared)} and a merged leaderboard "
                "takes each model from one run"
            )
        else:
            merge = f"merge: echo-bench leaderboard {a['from_run']} {result.out_dir}"
        click.echo(
            f"anchors: {len(a['samples'])} samples x {len(a['models'])} models of {a['from_run']} re-scored: "
            f"{a['n_verdicts']} verdicts in {result.out_dir}/anchors; {merge}"
        )
    click.echo(f"wrote {result.out_dir}; next: echo-bench leaderboard {result.out_dir}")
    judged = s["n_verdicts"] - s["statuses"].get("missing_output", 0)
    if judged and not s["ok_verdicts"]:
        click.echo("error: every judgment failed; see the error column of verdicts.parquet", err=True)
        sys.exit(1)


class _MetricsCommand(EchoCommand):
    """``echo-bench metrics``, whose ``--metric`` choices, per-metric options and help come from the metric
    registry (built-ins and plugins), read when the command is first parsed or its help shown."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._static = list(self.params)
        self._base_help = inspect.cleandoc(self.help or "")
        self._key: tuple[str, ...] | None = None

    def _load(self) -> None:
        from echo_builder.scoring.registry import metric_definitions

        definitions = metric_definitions()
        key = tuple(d.name for d in definitions)
        if key == self._key:
            return
        self._key = key
        metric = click.Option(
            ["--metric", "metric_names"],
            multiple=True,
            type=click.Choice(list(key)),
            help="Metric to compute; repeatable (default: all that can run).",
        )
        declared: list[click.Parameter] = []
        for definition in definitions:
            declared.extend(_metric_option(definition, option) for option in definition.options)
        at = next(i for i, p in enumerate(self._static) if p.name == "outputs") + 1
        self.params = [*self._static[:at], metric, *self._static[at:], *declared]
        lines = []
        for d in definitions:
            needs = ", ".join(
                [f"extra {d.extra}"] * bool(d.extra)
                + ["input images"] * d.needs_inputs
                + ["--judge"] * d.needs_judge
                + [f"from {_origin(d.name)}"] * (_origin(d.name) != "built-in")
            )
            better = "higher" if d.spec.higher_is_better else "lower"
            lines.append(f"  {d.name}: {better} is better{'; needs ' + needs if needs else ''}")
        self.help = self._base_help + "\n\n\b\nMetrics (from the metric registry):\n" + "\n".join(lines)

    def get_params(self, ctx: click.Context) -> list[click.Parameter]:
        self._load()
        return super().get_params(ctx)

    def format_help_text(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        self._load()
        super().format_help_text(ctx, formatter)


def _origin(name: str) -> str:
    from echo_builder.scoring.registry import METRICS

    return METRICS.entry(name).origin


def _check_metric_options_apply(metric_names: tuple[str, ...]) -> None:
    """A metric's option typed on the command line for a run that does not compute that metric is a usage error
    (it would be ignored without a word); a run config may carry options of metrics it does not run."""
    if not metric_names:
        return  # every metric runs
    from click.core import ParameterSource

    from echo_builder.scoring.registry import metric_definitions

    owners: dict[str, list[Any]] = {}
    for definition in metric_definitions():
        for option in definition.options:
            if option.type != "column":  # column options are checked with the config's columns (run_metrics)
                owners.setdefault(option.name, []).append((definition.name, option.cli_name))
    ctx = click.get_current_context()
    for name, declared in owners.items():
        if ctx.get_parameter_source(name) is not ParameterSource.COMMANDLINE:
            continue
        metrics_of = [metric for metric, _ in declared]
        if not set(metrics_of) & set(metric_names):
            raise click.UsageError(
                f"{declared[0][1]} is an option of {' and '.join(metrics_of)}, which this run does not compute "
                f"(--metric {' --metric '.join(metric_names)}); add --metric {metrics_of[0]} or drop the option"
            )


def _metric_option(definition: Any, option: Any) -> click.Option:
    """A declared :class:`~echo_builder.scoring.registry.MetricOption` as a click option."""
    kinds: dict[str, Any] = {
        "str": click.STRING,
        "int": click.INT,
        "float": click.FLOAT,
        "path": click.Path(),
        "choice": click.Choice(list(option.choices)),
        "column": click.STRING,
    }
    text = option.help if option.help.startswith(definition.name) else f"{definition.name}: {option.help}"
    if option.type == "bool":
        return click.Option(
            [option.cli_name, option.name], is_flag=True, default=bool(option.default), help=text
        )
    return click.Option(
        [option.cli_name, option.name],
        type=kinds[option.type],
        default=option.default,
        show_default=option.default is not None,
        metavar="COLUMN" if option.type == "column" else None,
        help=text,
    )


@click.command(cls=_MetricsCommand)
@click.option("--benchmark", required=True, help="Hub-shaped benchmark folder (or Hub dataset id).")
@click.option("--config", "config_name", required=True, help="Config: image_to_image, text_to_image, ...")
@click.option(
    "--outputs", required=True, type=click.Path(file_okay=False), help="Folder <model>/<sample_id>.png."
)
@click.option("--out", "out_dir", required=True, type=click.Path(file_okay=False), help="Folder to write.")
@click.option(
    "--judge",
    "judges",
    multiple=True,
    metavar="SPEC",
    help="Judge for metrics that need one (text_rendering); repeatable.",
)
@click.option(
    "--base-url",
    help="Server URL for openai: judges; give it once (replicas, several --base-url, are a judge option).",
)
@click.option(
    "-o", "--option", "options", multiple=True, metavar="KEY=VALUE", help="Judge backend option; repeatable."
)
@click.option(
    "--judge-prompt",
    "judge_prompt",
    type=click.Path(),
    help="text_rendering: judge prompt file (YAML, answer.kind rating) replacing the built-in one.",
)
@click.option(
    "--format", "table_format", type=click.Choice(["parquet", "csv"]), default="parquet", show_default=True
)
@batch_options
@cost_options
@run_config_option
def metrics(
    benchmark: str,
    config_name: str,
    outputs: str,
    out_dir: str,
    judges: tuple[str, ...],
    base_url: str | None,
    options: tuple[str, ...],
    judge_prompt: str | None,
    table_format: str,
    max_cost: float | None = None,
    prices_file: str | None = None,
    metric_names: tuple[str, ...] = (),
    batch: bool = False,
    batch_retry: str = "online",
    batch_poll_s: float = 30.0,
    **metric_options: Any,
) -> None:
    """Compute the community-driven metrics (every metric of the registry, listed below with what it needs;
    plugins included) for every model's outputs; writes per-sample rows, a per-model summary and color
    swatches."""
    from echo_builder.errors import ConfigError
    from echo_builder.scoring.run import run_metrics

    ocr_evidence = bool(metric_options.get("ocr_evidence"))
    if ocr_evidence and (not judges or (metric_names and "text_rendering" not in metric_names)):
        raise ConfigError(
            "--ocr-evidence applies to the judge's text_rendering: pass --judge SPEC (and --metric text_rendering "
            "when naming metrics)"
        )
    _check_metric_options_apply(metric_names)
    if judge_prompt is not None:
        from echo_builder.judge.prompts import load_judge_prompt
        from echo_builder.scoring.text import check_ocr_placeholder

        if metric_names and "text_rendering" not in metric_names:
            raise ConfigError("--judge-prompt applies to --metric text_rendering only")
        loaded = load_judge_prompt(judge_prompt)
        if loaded.answer != "rating":
            raise ConfigError(
                f"judge prompt {judge_prompt}: field 'answer.kind' is {loaded.answer!r}; text_rendering needs 'rating'"
            )
        check_ocr_placeholder(loaded, ocr_evidence)
    run_options: dict[str, Any] = {
        **metric_options,  # each metric's declared options (--dino-weights, --face-backend, ...)
        "judges": list(judges),
        "judge_options": backend_options(judges, base_url, options),
        "cache_dir": str(Path(out_dir) / "cache"),
    }
    if judge_prompt is not None:
        run_options["judge_prompt"] = loaded
    if batch:  # the judge metrics (text_rendering) send their uncached calls through the Batch API
        from echo_builder.backends.batch import batch_settings
        from echo_builder.errors import ConfigError

        if not judges:
            raise ConfigError(
                "--batch sends the judge metrics' calls through the Batch API; give --judge openai:<model>"
            )

        run_options["batch"] = batch_settings(out_dir, retry=batch_retry, poll_s=batch_poll_s)  # type: ignore[arg-type]

    if max_cost is not None and judges:
        from echo_builder.backends.spend import Budget
        from echo_builder.prices import load_prices

        run_options["budget"] = Budget(max_cost, load_prices(prices_file), judges[0])
    result = run_metrics(
        benchmark,
        config_name,
        outputs,
        out_dir,
        metrics=metric_names,
        options=run_options,
        table_format=table_format,
    )  # type: ignore[arg-type]
    click.echo(f"{'model':<28} {'metric':<20} {'better':<6} {'mean':>9} {'n':>5} {'NaN':>5}  NaN reasons")
    for row in result.summary:
        mean = f"{row['mean']:9.4f}" if row["mean"] is not None else f"{'n/a':>9}"
        # NaN reasons, then the notes of numbers that are conventions (e.g. "0 for no face in the output")
        reasons = ", ".join(
            [f"{k} x{v}" for k, v in row["nan_reasons"].items()]
            + [f"{k} x{v}" for k, v in row.get("notes", {}).items()]
        )
        better = {True: "higher", False: "lower"}.get(row["higher_is_better"], "-")
        click.echo(
            f"{row['model'][:28]:<28} {row['metric']:<20} {better:<6} {mean} {row['n']:>5} {row['n_nan']:>5}  "
            f"{reasons or '-'}"
        )
    pooled = [row for row in result.summary if "pooled" in row]
    if pooled:
        click.echo(
            "\npooled color shift (histograms summed over each model's applicable samples, as in the paper's "
            "figure; color_swatches/):"
        )
        for row in pooled:
            value = f"{row['pooled']:9.4f}" if row["pooled"] is not None else f"{'n/a':>9}"
            why = f"  {row['pooled_reason']}" if row.get("pooled_reason") else ""
            click.echo(f"{row['model'][:28]:<28} {value} over {row['pooled_n']} samples{why}")
    for name, reason in result.unavailable.items():
        click.echo(f"not computed: {name}: {reason}", err=True)
    click.echo(f"wrote {result.out_dir}")


def _usd(value: float | None) -> str:
    """A cost for people: ``0.0123 USD``, or ``not priced``."""
    return "not priced" if value is None else f"{value:.4f} USD"


def _strict_json(value: Any) -> str:
    """``value`` as standard JSON: NaN and infinities (undefined statistics) become ``null``, which every JSON
    parser reads (Python's ``json`` would write the non-standard ``NaN``)."""
    import math

    def clean(item: Any) -> Any:
        if isinstance(item, float):
            return item if math.isfinite(item) else None
        if isinstance(item, dict):
            return {str(k): clean(v) for k, v in item.items()}
        if isinstance(item, (list, tuple)):
            return [clean(v) for v in item]
        if hasattr(item, "item") and callable(item.item):  # numpy scalars
            return clean(item.item())
        return item if item is None or isinstance(item, (str, int, bool)) else str(item)

    return json.dumps(clean(value), indent=2, allow_nan=False)


def _print_table(board: Any, fmt: str) -> None:
    import math

    records = board.records()
    if fmt == "json":
        click.echo(_strict_json(records))
        return
    if fmt == "csv":
        click.echo(board.table.to_csv(index=False).rstrip())
        return
    if fmt == "markdown":
        from echo_builder.judge.results import leaderboard_markdown

        click.echo(leaderboard_markdown(board))
        return
    normal = board.meta.get("ci_method") == "normal-comparisons"
    header = (
        f"{'#':>2}  {'model':<34} {'win rate':>8}  {'95% CI':<15} {'Bradley-Terry':>13} {'Elo':>6}  "
        f"{'comparisons':>11} {'failures':>8} {'missing':>7}"
    )
    if normal:
        header += f"  {'bootstrap 95% CI':<16}"
    click.echo(header)
    click.echo("-" * len(header))
    for i, r in enumerate(records, 1):
        bt = r["bt_rating"]
        bt_text = f"{bt:13.0f}" if bt is not None and math.isfinite(bt) else f"{'n/a':>13}"
        elo = r["elo_rating"]
        bt_text += f" {elo:6.0f}" if elo is not None and math.isfinite(elo) else f" {'n/a':>6}"
        if r["win_rate"] is None:  # every comparison of this model failed: shown, never dropped
            rate_text = f"{'n/a':>8}  {'(no comparison)':<15}"
        elif r["ci_low"] is None or r["ci_high"] is None:  # e.g. one comparison: no spread to estimate
            rate_text = f"{r['win_rate']:8.3f}  {'n/a':<15}"
        else:
            rate_text = f"{r['win_rate']:8.3f}  [{r['ci_low']:.3f}, {r['ci_high']:.3f}]"
        line = (
            f"{i:>2}  {r['model'][:34]:<34} {rate_text} {bt_text}  {r['n_comparisons']:>11} "
            f"{r['n_failures']:>8} {r['n_missing']:>7}"
        )
        if normal:
            low, high = r.get("bootstrap_ci_low"), r.get("bootstrap_ci_high")
            line += f"  [{low:.3f}, {high:.3f}]" if low is not None and high is not None else "  n/a"
        click.echo(line)
    if normal:
        click.echo(
            "\n95% CI: normal approximation over comparisons, win rate -+ 1.96 sd/sqrt(n) (ECHO's released "
            "code); it treats comparisons sharing a prompt as independent, so it is narrower than the bootstrap "
            "over prompts shown beside it (echo-bench's default)."
        )
    if board.meta.get("bt_prior"):
        click.echo(
            f"\nBradley-Terry regularised with {board.meta['bt_prior']} virtual ties per model: some model "
            "never wins or never loses (in the data or a bootstrap replicate), where the plain MLE diverges."
        )
    for warning in board.meta.get("warnings", []):
        click.echo(f"\nwarning: {warning}")
    _print_tie_treatments(records)
    from echo_builder.judge.results import criterion_columns

    criteria = criterion_columns(board)
    if criteria:
        click.echo(
            "\nwin rate per criterion (ties count half; the ranking above uses the mean of the criteria):"
        )
        click.echo(f"  {'model':<34} " + " ".join(f"{c[:16]:>16}" for c in criteria))
        for r in records:
            cells = (r[f"win_rate_{c}"] for c in criteria)
            click.echo(
                f"  {r['model'][:34]:<34} "
                + " ".join(f"{v:16.3f}" if v is not None else f"{'n/a':>16}" for v in cells)
            )
    if board.failures is not None:
        failed = board.failures[board.failures["judge_failures"] + board.failures["missing_output"] > 0]
        if not failed.empty:
            click.echo("\njudge failures and missing outputs per model and judge:")
            cols = ["model", "judge", "ok", "missing_output", "parse_failure", "refusal", "error"]
            click.echo(failed[cols].to_string(index=False))
    if board.position_bias is not None and not board.position_bias.empty:
        click.echo("\nposition bias per judge (share of pairs decided by position):")
        click.echo(board.position_bias.to_string(index=False))


def _print_tie_treatments(records: list[dict[str, Any]]) -> None:
    """OpenING's tie treatments, one line per model, when any comparison was a tie (else they all agree)."""
    if not any(r["ties"] for r in records):
        return

    def rate(value: float | None) -> str:
        return f"{value:8.3f}" if value is not None else f"{'n/a':>8}"

    click.echo(
        "\nwin rate under OpenING's tie treatments (FDT: a tie counts for the side the judge leaned to):"
    )
    click.echo(f"  {'model':<34} {'FDT':>8} {'tie=0.5':>8} {'tie=0':>8} {'dropped':>8} {'ties':>6}")
    for r in records:
        click.echo(
            f"  {r['model'][:34]:<34} {rate(r['tie_fdt'])} {rate(r['tie_half'])} {rate(r['tie_zero'])} "
            f"{rate(r['tie_dropped'])} {r['ties']:>6}"
        )


@click.command(cls=EchoCommand)
@click.argument("runs", nargs=-1, type=click.Path(exists=True), metavar="[RUN]...")
@click.option(
    "--votes",
    type=click.Path(exists=True, dir_okay=False),
    help=f"Pairwise votes with model_a, model_b, winner ({VOTES_FILE_HELP}).",
)
@click.option(
    "--ratings",
    type=click.Path(),
    help="Per-sample scores question_id,model,score (CSV, as ECHO's released judge outputs; optional judge column).",
)
@click.option("--example", is_flag=True, help="Rank the bundled example votes (four fictional models).")
@click.option(
    "--models", multiple=True, metavar="PATTERN", help="Keep only these models (shell patterns); repeatable."
)
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["table", "json", "csv", "markdown"]),
    default="table",
    show_default=True,
    help="table for people; json and csv carry every column; markdown: a GitHub-flavoured table with the table's "
    "columns and notes.",
)
@click.option(
    "--plots",
    "plots_dir",
    type=click.Path(file_okay=False),
    help="Folder for PNG plots (default: RUN/plots for a run; none for votes).",
)
@click.option(
    "--missing",
    type=click.Choice(["loss", "skip"]),
    default="loss",
    show_default=True,
    help="A model without an output loses the comparison, or the comparison is skipped.",
)
@click.option(
    "--n-boot",
    default=1000,
    show_default=True,
    type=Number(int, 10, MAX_N_BOOT),
    help="Bootstrap replicates (resampling prompts); intervals need many, 1,000 is standard.",
)
@click.option(
    "--seed",
    default=0,
    show_default=True,
    type=Number(int, 0, MAX_SEED),
    help="Seed of the bootstrap resampling.",
)
@click.option(
    "--bootstrap-judges",
    is_flag=True,
    help="Pool the judges' comparisons and resample judges as well as prompts (default: majority vote per comparison).",
)
@click.option(
    "--ci",
    type=click.Choice(["bootstrap", "normal"]),
    default="bootstrap",
    show_default=True,
    help="Win-rate interval: bootstrap over prompts, or normal: mean +- 1.96 sd/sqrt(n) over comparisons as ECHO's "
    "released code (the bootstrap interval stays beside it); see docs/reproducing-echo.md.",
)
@click.option(
    "--push-to-hub",
    "push_repo",
    metavar="OWNER/NAME",
    help="Also upload the leaderboard (config results, one row per model), the verdicts (config details) and the "
    "run's metadata as a Hub dataset with a card naming the judge snapshots and prompt versions; RUN or --ratings.",
)
@click.option("--private", is_flag=True, help="--push-to-hub: create the dataset repository as private.")
@click.option(
    "--token-env",
    metavar="NAME",
    help="--push-to-hub: environment variable holding the Hub token (default: HF_TOKEN, else the saved login).",
)
@click.option(
    "--by",
    "by",
    multiple=True,
    metavar="KIND[=PATH]",
    help="task[=ANALYSIS_DIR]: win rates per task label (echo-bench analyze's labels, default the rules labeller); "
    "metrics=METRICS_DIR: win rates beside the community metrics, one row per model. RUN only; repeatable.",
)
@click.option(
    "--min-prompts",
    type=Number(int, 1, 1_000_000),
    default=None,
    help="--by task: tasks with fewer prompts are flagged small (* in the table), their intervals too wide to rank "
    "by.  [default: 10]",
)
@click.option(
    "--human",
    "human_votes",
    type=click.Path(exists=True, dir_okay=False),
    help=f"Human pairwise votes with sample_id, model_a, model_b, winner ({VOTES_FILE_HELP}) for the validity "
    "card's agreement section; RUN only.",
)
@click.option(
    "--drift-threshold",
    default=DEFAULT_DRIFT_THRESHOLD,
    show_default=True,
    type=Number(float, 0.0, 1.0),
    help="Several RUNs: least anchor pair agreement (share of pseudo-pairwise outcomes the later scoring repeats) "
    "a judge whose snapshot or prompt version changed may have; below it the merge is refused.",
)
@click.option(
    "--allow-drift",
    is_flag=True,
    help="Several RUNs: merge despite drift or missing anchors; every output then carries a drift flag.",
)
@click.option(
    "--criterion",
    metavar="NAME",
    help="A per-criterion RUN (judge --criteria): rank on this criterion alone (default: the mean of the criteria, "
    "with a win rate per criterion beside it).",
)
def leaderboard(
    runs: tuple[str, ...],
    votes: str | None,
    ratings: str | None,
    example: bool,
    models: tuple[str, ...],
    fmt: str,
    plots_dir: str | None,
    missing: str,
    n_boot: int,
    seed: int,
    bootstrap_judges: bool,
    ci: str,
    push_repo: str | None,
    private: bool,
    token_env: str | None,
    by: tuple[str, ...] = (),
    min_prompts: int | None = None,
    human_votes: str | None = None,
    drift_threshold: float = DEFAULT_DRIFT_THRESHOLD,
    allow_drift: bool = False,
    criterion: str | None = None,
) -> None:
    """Rank models from judge RUN folders, per-sample --ratings, or human pairwise --votes.

    Several RUNs (one config, mode and judge set; each model in one run) are merged into one ranking only after a
    drift check: each later RUN must hold anchors re-scored from an earlier one (judge --anchors N --anchor-from
    EARLIER); a judge whose snapshot or prompt version changed must still agree on them (--drift-threshold), else
    the merge is refused (--allow-drift: merged and flagged). The merged plots and validity card go to
    LAST_RUN/merged/.

    Win rates with 95% intervals (bootstrap over prompts by default), Bradley-Terry ratings (Elo scale) with
    intervals, and judge failures and missing outputs beside each model. For a RUN, also writes its validity
    card, RUN/validity.json and RUN/validity.md (judge snapshots, prompt versions, temperature, failure, refusal
    and position-bias rates, agreement with --human votes, Bradley-Terry regularisation, comparison groups); see
    docs/judging.md.
    """

    from echo_builder.judge.drift import leaderboard_from_runs
    from echo_builder.judge.leaderboard import (
        leaderboard_from_ratings,
        leaderboard_from_run,
        leaderboard_from_votes,
    )

    run = runs[0] if runs else None
    merged = len(runs) > 1
    if merged and (by or push_repo or human_votes):
        raise click.UsageError(
            "--by, --human and --push-to-hub take one RUN; several RUNs are ranked (merged) only"
        )
    if not merged and (allow_drift or drift_threshold != DEFAULT_DRIFT_THRESHOLD):
        raise click.UsageError("--allow-drift and --drift-threshold apply to several RUNs (a merge) only")

    if sum(bool(x) for x in (run, votes, ratings, example)) != 1:
        raise click.UsageError("give exactly one of RUN, --votes FILE or --example, or --ratings FILE")
    if criterion is not None and (not run or by or merged):
        raise click.UsageError("--criterion applies to one judge RUN's leaderboard only")
    if human_votes and (not run or by):
        raise click.UsageError("--human applies to a judge RUN's leaderboard (its validity card) only")
    if by:
        from echo_builder.judge.by_task import print_by

        if not run:
            raise click.UsageError("--by applies to a judge RUN only")
        if push_repo:
            raise click.UsageError("--by prints a breakdown only; push the leaderboard without --by")
        if bootstrap_judges or ci != "bootstrap":
            raise click.UsageError(
                "--by intervals are bootstraps over prompts of majority-voted comparisons; "
                "--ci normal and --bootstrap-judges apply to the plain leaderboard"
            )
        if min_prompts is not None and not any(b.split("=", 1)[0].strip() == "task" for b in by):
            raise click.UsageError("--min-prompts applies to --by task only")
        print_by(
            run,
            by,
            fmt,
            missing=missing,  # type: ignore[arg-type]
            n_boot=n_boot,
            seed=seed,
            min_prompts=10 if min_prompts is None else min_prompts,
        )
        return
    if min_prompts is not None:
        raise click.UsageError("--min-prompts applies to --by task only")
    token = _push_token(push_repo, private, token_env, has_verdicts=bool(run or ratings))
    if run or ratings:
        if models:
            raise click.UsageError("--models applies to --votes only")
        if ratings:
            if bootstrap_judges:
                raise click.UsageError("--bootstrap-judges applies to a judge RUN only")
            board = leaderboard_from_ratings(
                ratings,
                missing=missing,  # type: ignore[arg-type]
                n_boot=n_boot,
                seed=seed,
                ci=ci,  # type: ignore[arg-type]
            )
            plots = Path(plots_dir) if plots_dir else None
        elif merged:
            board = leaderboard_from_runs(
                runs,
                missing=missing,  # type: ignore[arg-type]
                n_boot=n_boot,
                seed=seed,
                bootstrap_judges=bootstrap_judges,
                ci=ci,  # type: ignore[arg-type]
                drift_threshold=drift_threshold,
                allow_drift=allow_drift,
            )
            plots = Path(plots_dir) if plots_dir else Path(runs[-1]) / "merged" / "plots"
        else:
            assert run is not None
            board = leaderboard_from_run(
                run,
                missing=missing,  # type: ignore[arg-type]
                n_boot=n_boot,
                seed=seed,
                bootstrap_judges=bootstrap_judges,
                ci=ci,  # type: ignore[arg-type]
                criterion=criterion,
            )
            plots = Path(plots_dir) if plots_dir else Path(run) / "plots"
    else:
        if bootstrap_judges:
            raise click.UsageError("--bootstrap-judges applies to a judge RUN only")
        if example:
            from echo_builder.examples import example_votes_path

            votes = str(example_votes_path())
            if fmt == "table":
                click.echo(f"example votes: {votes}\n")
        board = leaderboard_from_votes(
            votes,
            models=models,
            n_boot=n_boot,
            seed=seed,
            ci=ci,  # type: ignore[arg-type]
        )
        plots = Path(plots_dir) if plots_dir else None
    if plots is not None and not plots_dir:  # RUN/plots: inside the run folder, never through a link there
        from echo_dataset.safe_io import check_inside

        check_inside(runs[-1], plots)
    validity = None
    if run:  # computed before anything is printed or written: bad --human votes fail with one error line
        validity = (
            _validity(board, run, human_votes, seed=seed) if not merged else _merged_validity(board, runs)
        )
    _print_table(board, fmt)
    if plots is not None:
        written = board.write_plots(plots)
        if fmt == "table":
            click.echo("\nplots: " + ", ".join(str(p) for p in written))
    if run and validity is not None:
        from echo_builder.judge.validity import write_validity

        cards = (
            write_validity(Path(runs[-1]) / "merged", validity, root=runs[-1])
            if merged
            else write_validity(run, validity)
        )
        if fmt == "table":
            click.echo("validity card: " + ", ".join(str(p) for p in cards))
    if push_repo:
        _push_results(
            board, run, ratings, push_repo, private=private, token=token, fmt=fmt, validity=validity
        )


def _validity(board: Any, run: str, human_votes: str | None, *, seed: int) -> dict[str, Any]:
    """The validity card of a judge RUN's leaderboard (:func:`echo_builder.judge.validity.validity_report`)."""
    from echo_builder.judge.results import read_run_meta
    from echo_builder.judge.validity import VALIDITY_JSON, VALIDITY_MD, validity_report
    from echo_builder.judge.verdicts_file import read_verdicts
    from echo_dataset.safe_io import check_inside

    for name in (VALIDITY_JSON, VALIDITY_MD):
        check_inside(run, Path(run) / name)
    return validity_report(
        read_verdicts(run),
        board,
        run_meta=read_run_meta(run),
        run_dir=run,
        human_votes=human_votes,
        seed=seed,
    )


def _merged_validity(board: Any, runs: tuple[str, ...]) -> dict[str, Any]:
    """The validity card of a merged leaderboard: all runs' verdicts, the last run's metadata, the drift check."""
    from echo_builder.judge.validity import VALIDITY_JSON, VALIDITY_MD, validity_report
    from echo_dataset.safe_io import check_inside

    last = Path(runs[-1])
    for name in (VALIDITY_JSON, VALIDITY_MD):
        check_inside(last, last / "merged" / name)
    merge = board.meta["merge"]
    return validity_report(merge["verdicts"], board, run_meta=merge["run_meta"], drift=board.meta["drift"])


def _push_token(repo: str | None, private: bool, token_env: str | None, *, has_verdicts: bool) -> str | None:
    """Check ``--push-to-hub`` and its options before any work; the token (``None``: let the Hub client find one)."""
    import os

    from echo_builder.secrets import register_secret

    if not repo:
        if private or token_env:
            raise click.UsageError("--private and --token-env apply to --push-to-hub only")
        return None
    if not has_verdicts:
        raise click.UsageError("--push-to-hub publishes verdicts: give a judge RUN or --ratings FILE")
    from echo_builder.judge.results import check_repo_id

    check_repo_id(repo)
    token = os.environ.get(token_env or "HF_TOKEN") or None
    if token_env and not token:
        from echo_builder.errors import ConfigError

        raise ConfigError(
            f"--token-env {token_env}: the environment variable {token_env} is not set or empty"
        )
    if (
        not token
    ):  # the saved login (`hf auth login`); none at all fails now, before the leaderboard is computed
        from echo_dataset.errors import MissingTokenError
        from echo_dataset.publish import _token

        token = _token(None)
        if not token:
            raise MissingTokenError(
                "--push-to-hub needs a Hugging Face token with write access: set HF_TOKEN (or the variable named "
                "by --token-env) or run `hf auth login`; nothing was computed or uploaded"
            )
    register_secret(token)
    return token


def _push_results(
    board: Any,
    run: str | None,
    ratings: str | None,
    repo: str,
    *,
    private: bool,
    token: str | None,
    fmt: str,
    validity: dict[str, Any] | None = None,
) -> None:
    """Stage the results dataset in a temporary folder and upload it (``leaderboard --push-to-hub``)."""
    import tempfile

    from echo_builder.judge.results import push_results, read_run_meta, write_results_folder

    if run:
        from echo_builder.judge.verdicts_file import read_verdicts

        verdicts, run_meta = read_verdicts(run), read_run_meta(run)
    else:
        from echo_builder.judge.ratings_file import read_ratings_csv

        assert ratings is not None
        verdicts, run_meta = read_ratings_csv(ratings), None
    with tempfile.TemporaryDirectory(prefix="echo-results-") as staging:
        folder = write_results_folder(
            board, verdicts, Path(staging) / "results", run_meta=run_meta, repo_id=repo, validity=validity
        )
        result = push_results(folder, repo, token=token, private=private)
    click.echo(
        f"pushed the results (configs results, details) to https://huggingface.co/datasets/{repo} ({result})",
        err=fmt != "table",
    )


@click.command("publish-metrics", cls=EchoCommand)
@click.option("--org", required=True, help="Hub user or organisation: the Spaces are ORG/<name>.")
@click.option(
    "--metric",
    "names",
    multiple=True,
    metavar="NAME",
    help="Module to publish; repeatable (default: every module, built-in and plugin).",
)
@click.option("--private", is_flag=True, help="Create the Spaces as private.")
@click.option(
    "--dry-run", is_flag=True, help="Check the modules and list each Space's files; upload nothing."
)
@click.option(
    "--package",
    metavar="REQUIREMENT",
    help="Replace the echo-bench line of each requirements.txt with REQUIREMENT, e.g. 'echo-bench @ "
    "git+https://github.com/OWNER/echo-bench@v0.1.0' or a wheel URL. Required to upload: echo-bench is not on "
    "PyPI, so the modules' own 'echo-bench' line would not install on a Space.",
)
@click.option("--token", envvar="HF_TOKEN", help="Hub token (default: $HF_TOKEN or the saved login).")
def publish_metrics(
    org: str, names: tuple[str, ...], private: bool, dry_run: bool, package: str | None, token: str | None
) -> None:
    """Push each evaluate module as a Hub Space in evaluate's layout (<name>.py, card README.md, app.py,
    requirements.txt), so that evaluate.load("ORG/<name>") works online."""
    from echo_builder.metrics.publish import bare_package_lines, space_files
    from echo_builder.metrics.publish import publish_metrics as run_publish
    from echo_builder.secrets import protect_logging, redact, register_secret

    register_secret(token)
    protect_logging()
    results = run_publish(org, names, token=token, private=private, dry_run=dry_run, package=package)
    failed = []
    for result in results:
        if result.dry_run:
            click.echo(f"would publish {result.name} to {result.url}: {', '.join(result.files)}")
        elif result.error:
            failed.append(result)
            click.echo(f"failed: {result.name}: {redact(result.error)}", err=True)
        else:
            click.echo(f"published {result.name} to {result.url} (evaluate.load({result.repo_id!r}))")
    if (
        dry_run
        and package is None
        and any(bare_package_lines(space_files(r.name)["requirements.txt"]) for r in results)
    ):
        click.echo(
            "note: an upload needs --package (the modules' requirements.txt install echo-bench by name, and it "
            "is not on PyPI), e.g. --package 'echo-bench @ git+https://github.com/OWNER/echo-bench@v0.1.0'"
        )
    if failed:
        names_text = ", ".join(r.name for r in failed)
        raise click.ClickException(f"{len(failed)} of {len(results)} Spaces failed ({names_text}); see above")
