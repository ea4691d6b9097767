"""``echo-bench leaderboard``: win rates with intervals from judge runs or votes, their validity card, the
by-task and joined tables, and ``--push-to-hub``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click

from echo_builder.commands.options import (
    MAX_N_BOOT,
    MAX_SEED,
    VOTES_FILE_HELP,
    EchoCommand,
    Number,
)

#: echo_builder.judge.drift.DEFAULT_DRIFT_THRESHOLD, repeated so the CLI loads without the judge package (a test
#: checks they are equal)
DEFAULT_DRIFT_THRESHOLD = 0.8

__all__ = ["leaderboard"]


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
