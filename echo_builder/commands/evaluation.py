"""``echo-bench judge | leaderboard | agreement | metrics``: judging, ranking and the metrics."""

from __future__ import annotations

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
    Number,
    backend_options,
    call_limit_options,
)

__all__ = ["agreement", "judge", "leaderboard", "metrics"]


@click.command()
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
    "--base-url", help="Server URL for openai: judges (default: $ECHO_OPENAI_BASE_URL or $OPENAI_BASE_URL)."
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
def judge(
    benchmark: str,
    config_name: str,
    outputs: str,
    judges: tuple[str, ...],
    mode: str,
    out_dir: str,
    base_url: str | None,
    options: tuple[str, ...],
    concurrency: int,
    timeout_s: float,
    max_attempts: int,
    cache_dir: str | None,
    probability_scale: str,
    limit: int | None,
    judge_prompt: str | None,
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
    )
    s = result.summary
    if not s:  # a non-main accelerate process: rank 0 reports
        return
    click.echo(
        f"judged {s['n_samples']} samples x {len(s['models'])} models with {len(judges)} judge(s): "
        f"{s['n_verdicts']} verdicts in {s['wall_time_s']:.1f} s"
    )
    click.echo("statuses: " + ", ".join(f"{k}={v}" for k, v in sorted(s["statuses"].items())))
    for j in s["judges"]:
        click.echo(
            f"  {j['spec']}: {j['calls']} calls, {j['cache_hits']} cache hits, "
            f"snapshot {', '.join(j['snapshots']) or 'not reported'}"
        )
    click.echo(f"wrote {result.out_dir}; next: echo-bench leaderboard {result.out_dir}")
    judged = s["n_verdicts"] - s["statuses"].get("missing_output", 0)
    if judged and not s["ok_verdicts"]:
        click.echo("error: every judgment failed; see the error column of verdicts.parquet", err=True)
        sys.exit(1)


@click.command()
@click.option("--benchmark", required=True, help="Hub-shaped benchmark folder (or Hub dataset id).")
@click.option("--config", "config_name", required=True, help="Config: image_to_image, text_to_image, ...")
@click.option(
    "--outputs", required=True, type=click.Path(file_okay=False), help="Folder <model>/<sample_id>.png."
)
@click.option(
    "--metric",
    "metric_names",
    multiple=True,
    type=click.Choice(["color_shift", "structure_distance", "face_identity", "text_rendering"]),
    help="Metric to compute; repeatable (default: all that can run).",
)
@click.option("--out", "out_dir", required=True, type=click.Path(file_okay=False), help="Folder to write.")
@click.option(
    "--dino-weights",
    help="structure_distance weights: a local file, or random:<seed> for a smoke test "
    "(default: timm's vit_small_patch16_224.dino from the Hub).",
)
@click.option(
    "--structure-reduction",
    type=click.Choice(["max", "min", "first"]),
    default="max",
    show_default=True,
    help="structure_distance of a sample with several input images: the output's distance to each input, "
    "reduced to one value: max (the least preserved input, as the paper), min (the best preserved) or first "
    "(the first input only).",
)
@click.option("--face-backend", type=click.Choice(["dlib", "auraface"]), default="dlib", show_default=True)
@click.option(
    "--face-model-dir", type=click.Path(file_okay=False), help="Folder of the face backend's model files."
)
@click.option(
    "--judge", "judges", multiple=True, metavar="SPEC", help="Judge for text_rendering; repeatable."
)
@click.option("--base-url", help="Server URL for openai: judges.")
@click.option("-o", "--option", "options", multiple=True, metavar="KEY=VALUE", help="Judge backend option.")
@click.option(
    "--judge-prompt",
    "judge_prompt",
    type=click.Path(),
    help="text_rendering: judge prompt file (YAML, answer.kind rating) replacing the built-in one.",
)
@click.option(
    "--format", "table_format", type=click.Choice(["parquet", "csv"]), default="parquet", show_default=True
)
def metrics(
    benchmark: str,
    config_name: str,
    outputs: str,
    metric_names: tuple[str, ...],
    out_dir: str,
    dino_weights: str | None,
    structure_reduction: str,
    face_backend: str,
    face_model_dir: str | None,
    judges: tuple[str, ...],
    base_url: str | None,
    options: tuple[str, ...],
    judge_prompt: str | None,
    table_format: str,
) -> None:
    """Compute the community-driven metrics (color shift, structure distance, face identity, text rendering)
    for every model's outputs; writes per-sample rows, a per-model summary and color swatches."""
    from echo_builder.scoring.run import run_metrics

    if judge_prompt is not None:
        from echo_builder.errors import ConfigError
        from echo_builder.judge.prompts import load_judge_prompt

        if metric_names and "text_rendering" not in metric_names:
            raise ConfigError("--judge-prompt applies to --metric text_rendering only")
        loaded = load_judge_prompt(judge_prompt)
        if loaded.answer != "rating":
            raise ConfigError(
                f"judge prompt {judge_prompt}: field 'answer.kind' is {loaded.answer!r}; text_rendering needs 'rating'"
            )
    run_options: dict[str, Any] = {
        "dino_weights": dino_weights,
        "structure_reduction": structure_reduction,
        "face_backend": face_backend,
        "face_options": {"model_dir": face_model_dir} if face_model_dir else {},
        "judges": list(judges),
        "judge_options": backend_options(judges, base_url, options),
        "cache_dir": str(Path(out_dir) / "cache"),
    }
    if judge_prompt is not None:
        run_options["judge_prompt"] = loaded
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


@click.command()
@click.argument("run", required=False, type=click.Path(exists=True))
@click.option(
    "--votes",
    type=click.Path(exists=True, dir_okay=False),
    help="Pairwise votes with model_a, model_b, winner (JSON list, JSON Lines or CSV).",
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
    "--format", "fmt", type=click.Choice(["table", "json", "csv"]), default="table", show_default=True
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
    "--by",
    "by",
    multiple=True,
    metavar="KIND[=PATH]",
    help="task[=ANALYSIS_DIR]: win rates per task label (echo-bench analyze's labels, default the rules labeller); "
    "metrics=METRICS_DIR: win rates beside the community metrics, one row per model. RUN only; repeatable.",
)
def leaderboard(
    run: str | None,
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
    by: tuple[str, ...] = (),
) -> None:
    """Rank models from a judge RUN folder, per-sample --ratings, or human pairwise --votes.

    Win rates with 95% intervals (bootstrap over prompts by default), Bradley-Terry ratings (Elo scale) with
    intervals, and judge failures and missing outputs beside each model.
    """

    from echo_builder.judge.leaderboard import (
        leaderboard_from_ratings,
        leaderboard_from_run,
        leaderboard_from_votes,
    )

    if sum(bool(x) for x in (run, votes, ratings, example)) != 1:
        raise click.UsageError("give exactly one of RUN, --votes FILE or --example, or --ratings FILE")
    if by:
        from echo_builder.judge.by_task import print_by

        if not run:
            raise click.UsageError("--by applies to a judge RUN only")
        print_by(run, by, fmt, missing=missing, n_boot=n_boot, seed=seed)  # type: ignore[arg-type]
        return
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
        else:
            assert run is not None
            board = leaderboard_from_run(
                run,
                missing=missing,  # type: ignore[arg-type]
                n_boot=n_boot,
                seed=seed,
                bootstrap_judges=bootstrap_judges,
                ci=ci,  # type: ignore[arg-type]
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

        check_inside(run, plots)  # type: ignore[arg-type]
    _print_table(board, fmt)
    if plots is not None:
        written = board.write_plots(plots)
        if fmt == "table":
            click.echo("\nplots: " + ", ".join(str(p) for p in written))


@click.command()
@click.argument("run", type=click.Path(exists=True))
@click.option(
    "--human",
    required=True,
    type=click.Path(exists=True, dir_okay=False),
    help="Human pairwise votes with sample_id, model_a, model_b, winner.",
)
@click.option("--format", "fmt", type=click.Choice(["table", "json"]), default="table", show_default=True)
def agreement(run: str, human: str, fmt: str) -> None:
    """Agreement of a judge RUN with human votes: pair agreement (with and without ties), Kendall tau-b of the
    model rankings, and Kendall's W among the judges."""
    from echo_builder.judge.agreement import judge_human_agreement

    report = judge_human_agreement(run, human)
    if fmt == "json":
        click.echo(_strict_json(report))
        return
    click.echo(
        f"{'judge':<40} {'pairs':>6} {'agree (ties)':>12} {'agree (no ties)':>15} {'tau-b':>7} {'p':>7}"
    )
    for row in report["judges"]:
        click.echo(
            f"{row['judge']:<40} {row['n_pairs']:>6} {row['pair_agreement']:>12.3f} "
            f"{row['pair_agreement_no_ties']:>15.3f} {row['tau_b']:>7.3f} {row['tau_p']:>7.3f}"
        )
        if row["tau_reason"]:
            click.echo(f"  tau-b undefined: {row['tau_reason']}")
    w = report["kendalls_w"]
    click.echo(
        f"\nKendall's W among judges: {w['w']:.3f} (p={w['p_value']:.3g})"
        if w["reason"] is None
        else f"\nKendall's W among judges: n/a ({w['reason']})"
    )
