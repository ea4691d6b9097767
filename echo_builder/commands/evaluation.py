"""``echo-bench judge | metrics | publish-metrics``: judging and the metrics (ranking is
:mod:`echo_builder.commands.leaderboard`; agreement and the judge-validation commands are in
:mod:`echo_builder.commands.agreement`)."""

from __future__ import annotations

import inspect
import sys
from pathlib import Path
from typing import Any

import click

from echo_builder.commands.options import (
    MAX_CONCURRENCY,
    MAX_LIMIT,
    EchoCommand,
    Number,
    backend_options,
    batch_options,
    call_limit_options,
    cost_options,
    run_config_option,
    run_config_record,
)
from echo_builder.outlock import locks_output

__all__ = [
    "judge",
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
@locks_output("judge")
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
@locks_output("metrics")
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
