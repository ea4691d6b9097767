"""``echo-bench agreement | community-outputs | export-pairs``: how far a judge can be trusted (agreement with
human votes, with the community's verdicts, between two metrics) and the data to check or train one."""

from __future__ import annotations

from pathlib import Path

import click

from echo_builder.commands.leaderboard import _strict_json
from echo_builder.commands.options import MAX_N_BOOT, MAX_SEED, VOTES_FILE_HELP, EchoCommand, Number

__all__ = ["agreement", "community_outputs", "export_pairs"]


@click.command(cls=EchoCommand)
@click.argument("run", required=False, type=click.Path(exists=True))
@click.option(
    "--human",
    type=click.Path(exists=True, dir_okay=False),
    help=f"With RUN: human pairwise votes with sample_id, model_a, model_b, winner ({VOTES_FILE_HELP}).",
)
@click.option(
    "--metrics",
    "metrics_dirs",
    multiple=True,
    type=click.Path(exists=True, file_okay=False),
    metavar="METRICS_DIR",
    help="Instead of RUN: the --out folder of an echo-bench metrics run; repeatable (e.g. one folder with "
    "text_accuracy, one with text_rendering from a judge).",
)
@click.option(
    "--between",
    nargs=2,
    metavar="METRIC METRIC",
    help="With --metrics: the two metrics to compare per output (model, sample), e.g. text_rendering "
    "text_accuracy.",
)
@click.option(
    "--community",
    is_flag=True,
    help="With RUN: agreement of each judge's ratings of the community's outputs (the model --community-model) "
    "with the community's verdicts in their replies (build --feedback-verdicts; else the rules lexicon): AUC and "
    "pair agreement with 95% bootstrap intervals, n.",
)
@click.option(
    "--benchmark",
    help="--community: the benchmark build folder with the verdicts (default: the one RUN/run.json records).",
)
@click.option(
    "--config", "config_name", help="--community: the config (default: the one RUN/run.json records)."
)
@click.option(
    "--community-model",
    default="community",
    show_default=True,
    help="--community: the model name the run gave the community's outputs (echo-bench community-outputs).",
)
@click.option(
    "--n-boot",
    default=1000,
    show_default=True,
    type=Number(int, 10, MAX_N_BOOT),
    help="--human: bootstrap replicates of the pair-agreement and tau-b intervals (resampling prompts); --metrics: "
    "of the rank-correlation intervals (resampling samples); --community: of the AUC and pair-agreement intervals "
    "(resampling liked and disliked outputs).",
)
@click.option(
    "--seed",
    default=0,
    show_default=True,
    type=Number(int, 0, MAX_SEED),
    help="Bootstrap seed (--human, --metrics, --community); equal seeds give equal intervals.",
)
@click.option("--format", "fmt", type=click.Choice(["table", "json"]), default="table", show_default=True)
def agreement(
    run: str | None,
    human: str | None,
    metrics_dirs: tuple[str, ...],
    between: tuple[str, str] | None,
    n_boot: int,
    seed: int,
    fmt: str,
    community: bool = False,
    benchmark: str | None = None,
    config_name: str | None = None,
    community_model: str = "community",
) -> None:
    """Agreement of a judge RUN with --human votes (pair agreement with and without ties, with 95% bootstrap
    intervals over prompts, Kendall tau-b of the model rankings, Kendall's W among the judges), with the community's
    verdicts on its outputs: RUN --community (AUC and pair agreement with 95% bootstrap intervals; see
    docs/judging.md), or of two metrics per sample: --metrics DIR --between A B (Kendall tau-b and Spearman rho
    with 95% bootstrap intervals over samples, pooled and per model, and the pairs dropped as NaN by reason)."""
    if not community and (benchmark or config_name or community_model != "community"):
        raise click.UsageError("--benchmark, --config and --community-model apply to --community only")
    if community:
        if human or metrics_dirs or between or not run:
            raise click.UsageError("--community takes a judge RUN only (not --human, --metrics or --between)")
        _community_agreement(run, benchmark, config_name, community_model, n_boot, seed, fmt)
        return
    if metrics_dirs or between:
        if run or human:
            raise click.UsageError("give RUN --human FILE, or --metrics DIR --between A B, not both")
        if not metrics_dirs or not between:
            raise click.UsageError("--metrics DIR and --between METRIC METRIC go together")
        _metric_agreement(metrics_dirs, between, n_boot, seed, fmt)
        return
    if not run or not human:
        raise click.UsageError("give RUN --human FILE (judge vs humans) or --metrics DIR --between A B")
    from echo_builder.judge.agreement import judge_human_agreement

    report = judge_human_agreement(run, human, n_boot=n_boot, seed=seed)
    if fmt == "json":
        click.echo(_strict_json(report))
        return
    click.echo(f"95% bootstrap intervals over prompts ({report['n_boot']} replicates, seed {report['seed']})")
    click.echo(
        f"{'judge':<40} {'pairs':>6} {'agree (ties)':>12} {'95% CI':<16} {'agree (no ties)':>15} {'tau-b':>7} "
        f"{'p':>7}"
    )
    for row in report["judges"]:
        low, high = row["pair_agreement_ci_low"], row["pair_agreement_ci_high"]
        interval = f"[{low:.3f}, {high:.3f}]" if low == low and high == high else "n/a"  # NaN: nothing shared
        click.echo(
            f"{row['judge']:<40} {row['n_pairs']:>6} {row['pair_agreement']:>12.3f} {interval:<16} "
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


def _community_agreement(
    run: str, benchmark: str | None, config: str | None, model: str, n_boot: int, seed: int, fmt: str
) -> None:
    """``agreement RUN --community``: print :func:`~echo_builder.judge.community.community_agreement`."""
    import math

    from echo_builder.judge.community import community_agreement

    report = community_agreement(run, benchmark, config=config, model=model, n_boot=n_boot, seed=seed)
    if fmt == "json":
        click.echo(_strict_json(report))
        return

    def number(value: float) -> str:
        return f"{value:6.3f}" if math.isfinite(value) else f"{'n/a':>6}"

    def interval(low: float, high: float) -> str:
        return f"[{low:.3f}, {high:.3f}]" if math.isfinite(low) and math.isfinite(high) else "n/a"

    labels = report["labels"]
    outputs = labels["outputs"]
    click.echo(
        f"community verdicts on {report['config']} of {report['benchmark']} (model {report['model']!r}): "
        f"{outputs['positive']} liked, {outputs['negative']} disliked, {outputs['mixed']} mixed, "
        f"{outputs['not_a_verdict']} without a verdict; {labels['items']} replies labelled "
        f"({labels['from_stage_file']} by the build's feedback_verdict stage"
        + (f" [{labels['labeller']}]" if labels["from_stage_file"] and labels["labeller"] else "")
        + f", {labels['from_rules']} by the rules lexicon)"
    )
    click.echo(
        f"95% stratified bootstrap intervals over outputs ({report['n_boot']} replicates, seed {report['seed']})"
    )
    click.echo(
        f"{'judge':<32} {'criterion':<14} {'liked':>5} {'disl.':>5} {'AUC':>6} {'95% CI':<17} "
        f"{'pair agr.':>9} {'95% CI':<17} {'ties':>6} {'unrated':>7}"
    )
    for row in report["judges"]:
        click.echo(
            f"{row['judge'][:32]:<32} {row['criterion'][:14]:<14} {row['n_positive']:>5} {row['n_negative']:>5} "
            f"{number(row['auc'])} {interval(row['auc_ci_low'], row['auc_ci_high']):<17} "
            f"{number(row['pair_agreement']):>9} "
            f"{interval(row['pair_agreement_ci_low'], row['pair_agreement_ci_high']):<17} "
            f"{number(row['tie_rate']):>6} {row['n_unrated']:>7}"
        )
        if row["reason"]:
            click.echo(f"  undefined: {row['reason']}")


@click.command("community-outputs", cls=EchoCommand)
@click.option("--benchmark", required=True, help="Benchmark folder (or Hub dataset id).")
@click.option("--config", "config_name", required=True, help="Config whose rows' output images to write.")
@click.option(
    "--out",
    "out_dir",
    required=True,
    type=click.Path(file_okay=False),
    help="Outputs folder (judge --outputs).",
)
@click.option(
    "--model", default="community", show_default=True, help="Model folder name to write them under."
)
def community_outputs(benchmark: str, config_name: str, out_dir: str, model: str) -> None:
    """Write the community's output image of each row (the target model's output the post showed) as
    OUT/<model>/<sample_id>.<ext>, so that `echo-bench judge --outputs OUT` rates it beside the models' outputs
    and `echo-bench agreement RUN --community` measures the judge against the community's verdicts."""
    from echo_builder.judge.community import write_community_outputs

    counts = write_community_outputs(benchmark, config_name, out_dir, model=model)
    click.echo(
        f"wrote {counts['written']} community outputs to {Path(out_dir) / model} "
        f"({counts['skipped']} rows without a readable output image skipped)"
    )


def _metric_agreement(
    metrics_dirs: tuple[str, ...], between: tuple[str, str], n_boot: int, seed: int, fmt: str
) -> None:
    """``agreement --metrics DIR --between A B``: print the report of
    :func:`~echo_builder.judge.agreement.metric_agreement`."""
    import math

    from echo_builder.judge.agreement import metric_agreement

    report = metric_agreement(metrics_dirs, between, n_boot=n_boot, seed=seed)
    if fmt == "json":
        click.echo(_strict_json(report))
        return

    def number(value: float, width: int = 6) -> str:
        return f"{value:{width}.3f}" if math.isfinite(value) else f"{'n/a':>{width}}"

    def interval(low: float, high: float) -> str:
        return f"[{low:.3f}, {high:.3f}]" if math.isfinite(low) and math.isfinite(high) else "n/a"

    first, second = report["between"]
    click.echo(f"{first} vs {second}, per output (model, sample); 95% bootstrap intervals over samples")
    click.echo(
        f"{'models':<28} {'n':>5} {'samples':>7} {'tau-b':>6} {'95% CI':<17} {'rho':>6} {'95% CI':<17}"
    )
    for label, row in [("all (pooled)", report["pooled"])] + [(r["model"], r) for r in report["per_model"]]:
        click.echo(
            f"{label[:28]:<28} {row['n']:>5} {row['n_groups']:>7} {number(row['tau_b'])} "
            f"{interval(row['tau_low'], row['tau_high']):<17} {number(row['rho'])} "
            f"{interval(row['rho_low'], row['rho_high']):<17}"
        )
        if row["reason"]:
            click.echo(f"  undefined: {row['reason']}")
        elif row["n_degenerate"]:
            click.echo(
                f"  {row['n_degenerate']} of {row['n_boot']} replicates had a constant side (left out)"
            )
    click.echo(
        f"\noutputs: {report['n_outputs']}, paired: {report['pooled']['n']}, dropped: {report['n_dropped']}"
    )
    for reason, count in report["dropped"].items():
        click.echo(f"  dropped x{count}: {reason}")
    directions = report["higher_is_better"]
    if len({d for d in directions.values() if d is not None}) > 1:
        click.echo(
            "\nnote: one metric is higher-is-better and the other lower-is-better, so agreement shows as a "
            "negative correlation"
        )


@click.command("export-pairs", cls=EchoCommand)
@click.argument("run", type=click.Path(exists=True, file_okay=False))
@click.option(
    "--out", "out_dir", required=True, type=click.Path(file_okay=False), help="Export folder to write."
)
@click.option("--benchmark", help="Benchmark folder or Hub id (default: the one RUN/run.json records).")
@click.option("--config", "config_name", help="Config (default: the one RUN/run.json records).")
@click.option(
    "--outputs",
    type=click.Path(file_okay=False),
    help="Model outputs folder <model>/<sample_id>.png (default: the one RUN/run.json records).",
)
@click.option(
    "--human",
    "human_votes",
    type=click.Path(exists=True, dir_okay=False),
    help=f"Human pairwise votes with sample_id, model_a, model_b, winner ({VOTES_FILE_HELP}): exported as source "
    "'human'.",
)
@click.option("--link", is_flag=True, help="Hard-link output images instead of copying them.")
def export_pairs(
    run: str,
    out_dir: str,
    benchmark: str | None,
    config_name: str | None,
    outputs: str | None,
    human_votes: str | None,
    link: bool,
) -> None:
    """Export preference pairs for training a judge: OUT/pairs.jsonl (prompt, input images, image A, image B,
    preferred a/b/tie, chosen/rejected, source judge_majority or human, vote counts) plus OUT/images/ and
    OUT/README.md (the layout; loads with datasets.load_dataset("json", ...)). A pair whose image is missing is
    listed in OUT/skipped.jsonl and left out. Community votes are not a source yet."""
    from echo_builder.judge.pairs import PAIRS_FILE, SKIPPED_FILE
    from echo_builder.judge.pairs import export_pairs as run_export

    result = run_export(
        run,
        out_dir,
        benchmark=benchmark,
        outputs=outputs,
        config=config_name,
        human_votes=human_votes,
        link=link,
    )
    counts = ", ".join(f"{source} {n}" for source, n in result.n_pairs.items())
    click.echo(f"wrote {result.out_dir / PAIRS_FILE}: pairs per source: {counts}; {result.n_images} images")
    click.echo("community votes: not a source yet (no community vote data is collected)")
    if result.skipped:
        click.echo(
            f"skipped {len(result.skipped)} pair(s), listed in {result.out_dir / SKIPPED_FILE}:", err=True
        )
        for item in result.skipped[:10]:
            click.echo(f"  {item['id']}: {item['reason']}", err=True)
        if len(result.skipped) > 10:
            click.echo(f"  ... and {len(result.skipped) - 10} more", err=True)
