"""From verdicts or votes to a leaderboard: win rates with bootstrap intervals, Bradley-Terry, failures, plots.

Single-answer and probability runs: ratings -> pseudo-pairwise comparisons per judge -> majority vote across
judges -> win rates with 95% intervals by bootstrap over prompts, Bradley-Terry (Elo scale) with its own
bootstrap, the head-to-head matrix, and per model and judge the failure counts (ECHO Flow 2).

Pairwise runs: each pair was judged in both orders; agreeing orders give the outcome, disagreeing orders a tie,
and the share of pairs where the judge chose the same *position* both times is its position-bias rate (OpenING,
Arena-Hard). OpenING's tie treatments are reported too.
"""

from __future__ import annotations

import fnmatch
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import pandas as pd

from echo_builder.errors import ConfigError, RecordError
from echo_builder.judge.verdicts_file import missing_models, read_verdicts
from echo_builder.records import Verdict

__all__ = [
    "CI_METHODS",
    "LEADERBOARD_COLUMNS",
    "TIE_TREATMENT_COLUMNS",
    "Leaderboard",
    "groups_warning",
    "leaderboard_from_comparisons",
    "leaderboard_from_ratings",
    "leaderboard_from_run",
    "leaderboard_from_votes",
    "missing_models",
    "pairwise_comparisons",
    "verdict_criteria",
    "verdict_ratings",
]

_OUTCOME = {"A": 1.0, "B": 0.0, "tie": 0.5}
#: Columns of ``Leaderboard.table``, in order (rates in [0, 1], ratings on the Elo scale, counts).
LEADERBOARD_COLUMNS = (
    "model",
    "win_rate",
    "ci_low",
    "ci_high",
    "ci_method",
    "bt_rating",
    "bt_ci_low",
    "bt_ci_high",
    "elo_rating",
    "n_comparisons",
    "wins",
    "ties",
    "losses",
    "n_failures",
    "n_missing",
    "tie_fdt",
    "tie_half",
    "tie_zero",
    "tie_dropped",
    "comparison_group",
    "bt_virtual_ties",
)
#: ``ci_method`` values: the interval in ``ci_low``/``ci_high``. ``bootstrap-prompts`` (default): percentile
#: bootstrap over prompts; ``normal-comparisons``: ``win_rate -+ 1.96 * sd / sqrt(n)`` over the model's comparisons,
#: as ECHO's released code computed it (then the bootstrap interval stays beside it in ``bootstrap_ci_low``/``_high``).
CI_METHODS = {"bootstrap": "bootstrap-prompts", "normal": "normal-comparisons"}
#: OpenING's tie treatments (:func:`echo_builder.stats.win_rates_by_tie_treatment`) as leaderboard columns.
TIE_TREATMENT_COLUMNS = {
    "fdt": "tie_fdt",
    "tie_half": "tie_half",
    "tie_zero": "tie_zero",
    "no_ties": "tie_dropped",
}
#: virtual ties per model used only when the Bradley-Terry MLE does not exist (a model never wins or never loses)
BT_FALLBACK_PRIOR = 0.1


@dataclass
class Leaderboard:
    """A ranked table plus everything shown beside it.

    Attributes:
        table: one row per model, best first, columns :data:`LEADERBOARD_COLUMNS`: ``model``, ``win_rate`` in
            [0, 1] (higher is better; ties count half), ``ci_low``/``ci_high`` (95% interval: bootstrap over
            prompts by default, or the normal approximation over comparisons), ``ci_method`` (which one: a value of
            :data:`CI_METHODS`; with ``normal-comparisons`` two more columns, ``bootstrap_ci_low`` and
            ``bootstrap_ci_high``, keep the bootstrap interval beside it),
            ``bt_rating`` (Bradley-Terry, Elo scale, mean 1000), ``bt_ci_low``/``bt_ci_high``, ``elo_rating``
            (online Elo, Chatbot Arena's K=4, over the comparisons in order: by vote order for votes, by sample
            id for a run; order-dependent, shown for comparison with arena boards), ``n_comparisons``, ``wins``,
            ``ties``, ``losses``, ``n_failures`` (judge failures on this model's outputs, all judges),
            ``n_missing`` (samples without an output), the win rate under OpenING's tie treatments (``tie_fdt``:
            forced decision, a tie counts for the side the judge leaned to, NaN without leans; ``tie_half``: a tie
            is half a win; ``tie_zero``: a tie is no win; ``tie_dropped``: ties left out),
            ``comparison_group`` (1-based index into ``meta["groups"]``: models in different groups were never
            compared, directly or through others, so their numbers are not comparable), ``bt_virtual_ties``
            (virtual ties per model added to the Bradley-Terry fit; 0 = the plain MLE; > 0 when some model never
            wins or never loses, where the MLE does not exist).
        head_to_head: row model's win rate against column model.
        failures: per model and judge, counts per status (single-answer runs).
        position_bias: per judge, the share of pairs judged by position (pairwise runs).
        tie_treatments: win rates under OpenING's tie treatments (pairwise runs and votes).
        tradeoff: TRIG trade-off map (:func:`echo_builder.stats.tradeoff_map`) between score dimensions, when a
            run has at least two (criteria x criteria per model for a per-criterion run, else one per judge and
            criterion; ratings rescaled to [0, 1]).
        criteria: per-criterion win rates of a per-criterion run (``judge --criteria``): ``criterion``,
            ``model``, ``win_rate`` in [0, 1] (higher is better, ties half), ``ci_low``/``ci_high`` (95%
            bootstrap over prompts), ``n_comparisons``; also in the table as ``win_rate_<criterion>`` columns.
    """

    table: pd.DataFrame
    head_to_head: pd.DataFrame
    failures: pd.DataFrame | None = None
    position_bias: pd.DataFrame | None = None
    tie_treatments: pd.DataFrame | None = None
    tradeoff: pd.DataFrame | None = None
    criteria: pd.DataFrame | None = None
    meta: dict[str, Any] = field(default_factory=dict)

    def records(self) -> list[dict[str, Any]]:
        """The table as JSON-ready objects (NaN becomes ``None``)."""
        frame = self.table.astype(object).where(self.table.notna(), None)
        return frame.to_dict(orient="records")

    def write_plots(self, folder: str | Path) -> list[Path]:
        """Write ``win_rates.png``, ``bradley_terry.png`` and ``head_to_head.png`` into ``folder``."""
        from echo_builder.stats import plot_head_to_head, plot_win_rates

        folder = Path(folder)
        bt = self.table.rename(
            columns={"bt_rating": "rating", "bt_ci_low": "ci_low_bt", "bt_ci_high": "ci_high_bt"}
        )
        bt = bt[["model", "rating", "ci_low_bt", "ci_high_bt"]].rename(
            columns={"ci_low_bt": "ci_low", "ci_high_bt": "ci_high"}
        )
        title = self.meta.get("title", "")
        ranked = self.table.dropna(subset=["win_rate"])
        written = [
            plot_win_rates(ranked, folder / "win_rates.png", title=f"Win rate (95% CI) {title}".strip()),
            plot_win_rates(
                bt.dropna(subset=["rating"]),
                folder / "bradley_terry.png",
                value="rating",
                title=f"Bradley-Terry {title}".strip(),
            ),
            plot_head_to_head(
                self.head_to_head, folder / "head_to_head.png", title=f"Head to head {title}".strip()
            ),
        ]
        if self.tradeoff is not None and not self.tradeoff.empty:
            from echo_builder.stats import plot_tradeoff_heatmap

            written.append(
                plot_tradeoff_heatmap(
                    self.tradeoff,
                    folder / "tradeoff.png",
                    title="Trade-offs between criteria (TRIG)"
                    if len(self.meta.get("criteria", [])) > 1
                    else "Trade-offs (TRIG)",
                )
            )
        return written


def verdict_criteria(verdicts: Sequence[Verdict]) -> list[str]:
    """The criteria of a run's single/probability verdicts, in order of first appearance (``["overall"]`` for a
    one-score run)."""
    return list(dict.fromkeys(v.criterion for v in verdicts if v.mode != "pairwise"))


def verdict_ratings(verdicts: Sequence[Verdict]) -> pd.DataFrame:
    """Single/probability verdicts as a Ratings table (``sample_id``, ``model``, ``judge``, ``rating``, ``status``).

    A per-criterion run (several criteria per output, ``judge --criteria``) gives one row per (sample, model, judge):
    ``rating`` is the mean of its criteria's ok ratings (the criteria weigh equally, as in ECHO's single-answer
    prompt); with none ok, the status of its first criterion (``missing_output`` or the judge failure). Filter the
    verdicts to one ``criterion`` first for that criterion's ratings.
    """
    columns = ["sample_id", "model", "judge", "rating", "status"]
    rows = [
        {"sample_id": v.sample_id, "model": v.model, "judge": v.judge, "rating": v.rating, "status": v.status}
        for v in verdicts
        if v.mode != "pairwise"
    ]
    frame = pd.DataFrame(rows, columns=columns).astype({"rating": float})
    if len(verdict_criteria(verdicts)) < 2:
        return frame
    keys = ["sample_id", "model", "judge"]
    ok = frame[frame["status"] == "ok"].groupby(keys, sort=False)["rating"].mean()
    first = frame.groupby(keys, sort=False)["status"].first()
    out = first.to_frame().join(ok, how="left").reset_index()
    out.loc[out["rating"].notna(), "status"] = "ok"
    return out[columns]


def pairwise_comparisons(
    verdicts: Sequence[Verdict], *, missing: Literal["loss", "skip"] = "loss"
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Both-order pairwise verdicts -> (Comparisons per judge, position-bias table per judge).

    Per (sample, judge, pair): both orders valid and agreeing -> that outcome; disagreeing -> tie (0.5); one order
    failed -> the other order's outcome; both failed -> the judge abstains. A missing output loses
    (``missing="loss"``; both missing tie) or the comparison is skipped.

    When any verdict carries a ``tie_lean`` (the ``pairwise-lean`` prompt), the comparisons get a ``tie_lean``
    column for OpenING's forced-decision (FDT) treatment: each valid order's forced decision is its winner, or for a
    tie its lean (1.0 = model_a, 0.0 = model_b); a tied comparison leans to a side when every order that made a
    forced decision chose that side, else NaN (orders that disagree, or no lean). Without any lean there is no
    ``tie_lean`` column and FDT is NaN.
    """
    groups: dict[tuple[str, str, str, str], dict[str, Verdict]] = {}
    for v in verdicts:
        if v.mode == "pairwise" and v.order is not None:
            groups.setdefault((v.sample_id, v.judge, v.model_a or "", v.model_b or ""), {})[v.order] = v
    rows, bias = [], {}
    has_lean = any(v.tie_lean is not None for by_order in groups.values() for v in by_order.values())
    nan = float("nan")
    for (sample, judge, a, b), by_order in sorted(groups.items()):
        stats = bias.setdefault(
            judge,
            {
                "judge": judge,
                "pairs_both_orders": 0,
                "position_consistent": 0,
                "order_disagreements": 0,
                "abstained": 0,
            },
        )
        absent = {m for v in by_order.values() for m in missing_models(v)}
        if absent:
            if missing == "skip":
                continue
            outcome = 0.5 if {a, b} <= absent else (0.0 if a in absent else 1.0)
            rows.append((sample, judge, a, b, outcome, nan))
            continue
        valid = {o: v for o, v in by_order.items() if v.status == "ok" and v.winner is not None}
        ok = {o: _OUTCOME[v.winner] for o, v in valid.items()}  # type: ignore[index]
        if not ok:
            stats["abstained"] += 1
            continue
        forced = {_forced(v) for v in valid.values()} - {None}
        lean = forced.pop() if len(forced) == 1 else nan
        if len(ok) == 2:
            stats["pairs_both_orders"] += 1
            if ok["AB"] != ok["BA"]:
                stats["order_disagreements"] += 1
                # "A" in both orders (or "B" in both) means the judge followed the position, not the image
                if {ok["AB"], ok["BA"]} == {0.0, 1.0}:
                    stats["position_consistent"] += 1
                rows.append((sample, judge, a, b, 0.5, lean))
                continue
        outcome = next(iter(ok.values()))
        rows.append((sample, judge, a, b, outcome, lean if outcome == 0.5 else nan))
    columns = ["sample_id", "judge", "model_a", "model_b", "outcome", "tie_lean"]
    comparisons = pd.DataFrame(rows, columns=columns).astype({"tie_lean": float})
    if not has_lean:
        comparisons = comparisons.drop(columns="tie_lean")
    table = pd.DataFrame(list(bias.values()))
    if not table.empty:
        table["position_bias_rate"] = table["position_consistent"] / table["pairs_both_orders"].where(
            table["pairs_both_orders"] > 0
        )
    return comparisons, table


def _forced(v: Verdict) -> float | None:
    """A pairwise verdict's forced decision in model_a terms: 1.0 / 0.0 for a winner or a leaning tie, else None."""
    if v.winner in ("A", "B"):
        return _OUTCOME[v.winner]
    return None if v.tie_lean is None else _OUTCOME[v.tie_lean]


def leaderboard_from_comparisons(
    comparisons: pd.DataFrame,
    *,
    n_boot: int = 1000,
    seed: int = 0,
    title: str = "",
    over_judges: bool = False,
    ci: Literal["bootstrap", "normal"] = "bootstrap",
) -> Leaderboard:
    """Leaderboard from a Comparisons table with one judge (e.g. majority-voted) or human votes.

    ``ci="normal"`` puts the normal approximation over comparisons (:func:`echo_builder.stats.normal_win_rates`,
    ECHO's released code) in ``ci_low``/``ci_high`` and keeps the bootstrap interval in ``bootstrap_ci_low`` /
    ``bootstrap_ci_high``; ``ci_method`` says which is which.
    """
    from echo_builder.stats import (
        bootstrap_bradley_terry,
        bootstrap_win_rates,
        elo_ratings,
        head_to_head,
        normal_win_rates,
        win_rates_by_tie_treatment,
    )

    if ci not in CI_METHODS:
        raise ConfigError(f"unknown interval method {ci!r}; use {' or '.join(CI_METHODS)}")
    if comparisons.empty:
        raise ConfigError(
            "no comparisons to rank: every comparison failed, was skipped or there is one model"
        )
    wins = bootstrap_win_rates(comparisons, n_boot=n_boot, seed=seed, over_judges=over_judges)
    columns = list(LEADERBOARD_COLUMNS)
    if ci == "normal":
        normal = normal_win_rates(comparisons).set_index("model")
        wins["bootstrap_ci_low"], wins["bootstrap_ci_high"] = wins["ci_low"], wins["ci_high"]
        wins["ci_low"] = wins["model"].map(normal["ci_low"])
        wins["ci_high"] = wins["model"].map(normal["ci_high"])
        columns += ["bootstrap_ci_low", "bootstrap_ci_high"]
    wins["ci_method"] = CI_METHODS[ci]
    prior = _bt_prior(comparisons)
    try:
        bt = bootstrap_bradley_terry(comparisons, n_boot=n_boot, seed=seed, prior=prior)
    except RecordError:
        # With few prompts a bootstrap replicate can leave a model without a win (or a loss), where the MLE does
        # not exist; a small prior of virtual ties keeps every replicate finite instead of failing the board.
        prior = BT_FALLBACK_PRIOR
        bt = bootstrap_bradley_terry(comparisons, n_boot=n_boot, seed=seed, prior=prior)
    bt = bt.rename(columns={"rating": "bt_rating", "ci_low": "bt_ci_low", "ci_high": "bt_ci_high"})
    table = wins.merge(bt[["model", "bt_rating", "bt_ci_low", "bt_ci_high"]], on="model", how="left")
    elo = elo_ratings(comparisons).rename(columns={"rating": "elo_rating"})
    table = table.merge(elo[["model", "elo_rating"]], on="model", how="left")
    ties = win_rates_by_tie_treatment(comparisons)
    table = table.merge(
        ties[["model", *TIE_TREATMENT_COLUMNS]].rename(columns=TIE_TREATMENT_COLUMNS), on="model", how="left"
    )
    table["n_failures"] = 0
    table["n_missing"] = 0
    groups = _connected_groups(comparisons)
    group_of = {m: i for i, group in enumerate(groups, 1) for m in group}
    table["comparison_group"] = table["model"].map(group_of).astype("Int64")
    table["bt_virtual_ties"] = float(prior)
    meta = {
        "title": title,
        "n_boot": n_boot,
        "bt_prior": prior,
        "bootstrap_over_judges": over_judges,
        "ci_method": CI_METHODS[ci],
        "groups": groups,
        "warnings": [],
    }
    if len(groups) > 1:
        meta["warnings"].append(groups_warning(groups))
        warnings.warn(meta["warnings"][-1], stacklevel=2)
    return Leaderboard(table[columns], head_to_head(comparisons), tie_treatments=ties, meta=meta)


def groups_warning(groups: Sequence[Sequence[str]]) -> str:
    """The one-line warning shown (table, notes, JSON) when models form groups never compared with each other."""
    return (
        f"the models form {len(groups)} groups that were never compared with each other "
        f"({'; '.join(', '.join(g) for g in groups)}); win rates and ratings are comparable only within "
        "a group: rank each group separately (e.g. --models PATTERN)"
    )


def _connected_groups(comparisons: pd.DataFrame) -> list[list[str]]:
    """Models grouped by who was compared with whom (connected components of the comparison graph)."""
    parent: dict[str, str] = {}

    def find(m: str) -> str:
        parent.setdefault(m, m)
        while parent[m] != m:
            parent[m] = parent[parent[m]]
            m = parent[m]
        return m

    for a, b in zip(comparisons["model_a"], comparisons["model_b"], strict=True):
        parent[find(a)] = find(b)
    groups: dict[str, list[str]] = {}
    for m in sorted(parent):
        groups.setdefault(find(m), []).append(m)
    return sorted(groups.values())


def _bt_prior(comparisons: pd.DataFrame) -> float:
    """0 (plain MLE) unless some model never wins or never loses, where the MLE does not exist and a tiny
    prior keeps ratings finite instead of failing the whole leaderboard."""
    from echo_builder.stats.schema import canonicalize_comparisons

    df = canonicalize_comparisons(comparisons)
    points: dict[str, list[float]] = {}
    for a, b, o in zip(df["model_a"], df["model_b"], df["outcome"], strict=True):
        points.setdefault(a, []).append(o)
        points.setdefault(b, []).append(1.0 - o)
    degenerate = any(min(p) == max(p) and p[0] in (0.0, 1.0) for p in points.values())
    return BT_FALLBACK_PRIOR if degenerate else 0.0


def leaderboard_from_run(
    run_dir: str | Path,
    *,
    missing: Literal["loss", "skip"] = "loss",
    n_boot: int = 1000,
    seed: int = 0,
    bootstrap_judges: bool = False,
    ci: Literal["bootstrap", "normal"] = "bootstrap",
    criterion: str | None = None,
) -> Leaderboard:
    """Leaderboard of a judge run folder (``verdicts.parquet``), any mode, any number of judges.

    By default several judges are combined per comparison by strict majority and the bootstrap resamples prompts.
    With ``bootstrap_judges=True`` the judges' comparisons are pooled instead and the bootstrap resamples judges as
    well as prompts, so the interval also reflects which judges were chosen (ECHO Flow 2, "optionally over judges").
    ``ci``: as :func:`leaderboard_from_comparisons`.

    A per-criterion run (``judge --criteria``) is ranked on the mean of the criteria (:func:`verdict_ratings`),
    with one win rate per criterion beside it (:attr:`Leaderboard.criteria`, ``win_rate_<criterion>`` columns)
    and the TRIG trade-off map over criteria x criteria per model; ``criterion`` ranks on that criterion alone.

    Raises:
        ConfigError: no verdicts, or ``criterion`` is not one the run rated (the message lists those it did).
    """
    verdicts = read_verdicts(run_dir)
    if not verdicts:
        raise ConfigError(f"{run_dir}: the run has no verdicts")
    if criterion is not None:
        rated = verdict_criteria(verdicts)
        if criterion not in rated:
            raise ConfigError(
                f"{run_dir}: no verdicts for criterion {criterion!r}; the run rated: {', '.join(rated) or 'none'}"
                + (" (a pairwise run has one overall verdict)" if not rated else "")
            )
        verdicts = [v for v in verdicts if v.criterion == criterion]
    return _leaderboard_from_verdicts(
        verdicts, missing=missing, n_boot=n_boot, seed=seed, bootstrap_judges=bootstrap_judges, ci=ci
    )


def _leaderboard_from_verdicts(
    verdicts: Sequence[Verdict],
    *,
    missing: Literal["loss", "skip"],
    n_boot: int,
    seed: int,
    bootstrap_judges: bool,
    ci: Literal["bootstrap", "normal"],
) -> Leaderboard:
    from echo_builder.stats import failure_counts, majority_vote, pseudo_pairwise, win_rates_by_tie_treatment

    pairwise = [v for v in verdicts if v.mode == "pairwise"]
    failures = position_bias = ties = None
    if pairwise:
        per_judge, position_bias = pairwise_comparisons(pairwise, missing=missing)
        ties = win_rates_by_tie_treatment(per_judge) if not per_judge.empty else None
        fails = pd.DataFrame(
            [(m, v.judge, v.status) for v in pairwise if v.status != "ok" for m in (v.model_a, v.model_b)],
            columns=["model", "judge", "status"],
        )
    else:
        ratings = verdict_ratings(verdicts)
        per_judge = pseudo_pairwise(ratings, missing=missing)
        failures = failure_counts(ratings)
        fails = ratings[ratings["status"] != "ok"][["model", "judge", "status"]]
    judges = sorted({v.judge for v in verdicts})
    if bootstrap_judges:
        board = leaderboard_from_comparisons(
            per_judge,
            n_boot=n_boot,
            seed=seed,
            title=f"({', '.join(judges)}, pooled)",
            over_judges=True,
            ci=ci,
        )
    else:
        combined = majority_vote(per_judge) if per_judge["judge"].nunique() > 1 else per_judge
        board = leaderboard_from_comparisons(
            combined, n_boot=n_boot, seed=seed, title=f"({', '.join(judges)})", ci=ci
        )
    judge_fail = fails[fails["status"] != "missing_output"].groupby("model").size()
    # missing outputs are per model and sample; every judge records them, so count distinct samples
    missing_rows = [
        (v.sample_id, m)
        for v in verdicts
        if v.status == "missing_output"
        for m in ((v.model,) if v.mode != "pairwise" else missing_models(v))
    ]
    missing_per_model = pd.Series([m for _, m in set(missing_rows)], dtype=object).value_counts()
    # a model whose every comparison failed or abstained still gets its row: it must not vanish from the board
    all_models = {m for v in verdicts for m in (v.model, v.model_a, v.model_b) if m}
    absent = sorted(all_models - set(board.table["model"]))
    if absent:
        filler = pd.DataFrame({"model": absent, "n_comparisons": 0, "wins": 0, "ties": 0, "losses": 0})
        board.table = pd.concat([board.table, filler], ignore_index=True)
        board.table[["n_comparisons", "wins", "ties", "losses"]] = board.table[
            ["n_comparisons", "wins", "ties", "losses"]
        ].astype(int)
        board.table["ci_method"] = board.meta["ci_method"]
    board.table["n_failures"] = board.table["model"].map(judge_fail).fillna(0).astype(int)
    board.table["n_missing"] = board.table["model"].map(missing_per_model).fillna(0).astype(int)
    board.table["bt_virtual_ties"] = float(board.meta["bt_prior"])
    board.failures, board.position_bias = failures, position_bias
    if ties is not None:  # pairwise: the judges' own comparisons, before the majority vote
        board.tie_treatments = ties
        by_model = ties.set_index("model").rename(columns=TIE_TREATMENT_COLUMNS)
        for column in TIE_TREATMENT_COLUMNS.values():
            board.table[column] = board.table["model"].map(by_model[column])
    if not pairwise:
        board.tradeoff = _rating_tradeoff(verdicts)
        criteria = verdict_criteria(verdicts)
        if len(criteria) > 1:
            board.criteria = _criterion_win_rates(
                verdicts,
                criteria,
                missing=missing,
                n_boot=n_boot,
                seed=seed,
                bootstrap_judges=bootstrap_judges,
            )
            wide = board.criteria.pivot(index="model", columns="criterion", values="win_rate")
            for name in criteria:
                board.table[f"win_rate_{name}"] = board.table["model"].map(wide[name])
            board.meta["criteria"] = criteria
            board.meta["ranked_on"] = "mean of the criteria ratings"
        else:
            board.meta["criteria"] = criteria
    board.meta.update(
        {"judges": judges, "mode": "pairwise" if pairwise else verdicts[0].mode, "missing": missing}
    )
    return board


def _criterion_win_rates(
    verdicts: Sequence[Verdict],
    criteria: Sequence[str],
    *,
    missing: Literal["loss", "skip"],
    n_boot: int,
    seed: int,
    bootstrap_judges: bool,
) -> pd.DataFrame:
    """Per criterion, the win rates (pseudo-pairwise per judge, majority vote across judges unless pooled,
    bootstrap over prompts): long table ``criterion``, ``model``, ``win_rate``, ``ci_low``, ``ci_high``,
    ``n_comparisons`` (criteria in run order, models best first)."""
    from echo_builder.stats import bootstrap_win_rates, majority_vote, pseudo_pairwise

    frames = []
    for name in criteria:
        per_judge = pseudo_pairwise(
            verdict_ratings([v for v in verdicts if v.criterion == name]), missing=missing
        )
        if per_judge.empty:
            continue
        if not bootstrap_judges and per_judge["judge"].nunique() > 1:
            per_judge = majority_vote(per_judge)
        wins = bootstrap_win_rates(per_judge, n_boot=n_boot, seed=seed, over_judges=bootstrap_judges)
        wins.insert(0, "criterion", name)
        frames.append(wins[["criterion", "model", "win_rate", "ci_low", "ci_high", "n_comparisons"]])
    columns = ["criterion", "model", "win_rate", "ci_low", "ci_high", "n_comparisons"]
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=columns)


def _rating_tradeoff(verdicts: Sequence[Verdict]) -> pd.DataFrame | None:
    """TRIG trade-off map, ratings rescaled to [0, 1]; ``None`` when the run has a single dimension. A run with
    several criteria has one dimension per criterion (criteria x criteria per model; several judges' scores are
    averaged per sample), any other run one per (judge, criterion). Metric scores from ``echo-bench metrics`` can
    join as further dimensions."""
    from echo_builder.stats import tradeoff_map

    by_criterion = len(verdict_criteria(verdicts)) > 1
    rows = [
        {
            "model": v.model,
            "sample_id": v.sample_id,
            "dimension": v.criterion if by_criterion else f"{v.judge} {v.criterion}",
            "score": _unit_scale(v),
        }
        for v in verdicts
        if v.mode != "pairwise" and v.status == "ok" and v.rating is not None
    ]
    if not rows:
        return None
    wide = pd.DataFrame(rows).pivot_table(index=["model", "sample_id"], columns="dimension", values="score")
    order = {d: i for i, d in enumerate(dict.fromkeys(r["dimension"] for r in rows))}
    dimensions = sorted(wide.columns, key=lambda d: order[d]) if by_criterion else list(wide.columns)
    if len(dimensions) < 2:
        return None
    return tradeoff_map(wide.reset_index(), dimensions, threshold=0.5)


def _unit_scale(v: Verdict) -> float:
    """A rating on [0, 1]: 1-10 ratings and 1-9 expected digits are rescaled; TRIGScores already are."""
    assert v.rating is not None
    if v.mode == "probability":
        return v.rating if v.criterion.endswith("trig") else (v.rating - 1.0) / 8.0
    return (v.rating - 1.0) / 9.0


def leaderboard_from_votes(
    path: str | Path,
    *,
    models: Sequence[str] = (),
    n_boot: int = 1000,
    seed: int = 0,
    ci: Literal["bootstrap", "normal"] = "bootstrap",
) -> Leaderboard:
    """Leaderboard from human pairwise votes (``model_a``, ``model_b``, ``winner``; JSON, JSONL or CSV).

    ``models`` are shell-style patterns (``*_generation``); when given, only votes between two matching models
    are kept. Each vote is one bootstrap unit, as in Chatbot Arena.
    """
    from echo_builder.stats import elo_ratings, load_votes, votes_to_comparisons

    votes = load_votes(path)
    if models:
        keep = votes["model_a"].map(lambda m: _matches(m, models)) & votes["model_b"].map(
            lambda m: _matches(m, models)
        )
        votes = votes[keep].reset_index(drop=True)
        if votes.empty:
            raise ConfigError(f"no vote is between two models matching {list(models)}")
    comparisons = votes_to_comparisons(votes)
    board = leaderboard_from_comparisons(comparisons, n_boot=n_boot, seed=seed, title="(human votes)", ci=ci)
    # online Elo follows the votes' own order (tstamp, else file order), as the arenas compute it
    elo = elo_ratings(votes).set_index("model")["rating"]
    board.table["elo_rating"] = board.table["model"].map(elo)
    board.meta.update({"votes": str(path), "n_votes": len(votes)})
    return board


def _matches(model: str, patterns: Sequence[str]) -> bool:
    return any(fnmatch.fnmatchcase(model, p) for p in patterns)


def leaderboard_from_ratings(
    path: str | Path,
    *,
    missing: Literal["loss", "skip"] = "loss",
    n_boot: int = 1000,
    seed: int = 0,
    ci: Literal["bootstrap", "normal"] = "bootstrap",
) -> Leaderboard:
    """Leaderboard from per-sample scores in a CSV file, e.g. ECHO's released ``question_id,model,score`` files.

    Read by :func:`echo_builder.judge.ratings_file.read_ratings_csv`; then exactly as a single-answer run:
    pseudo-pairwise per sample (higher score wins, equal scores tie), majority vote when a ``judge`` column names
    several judges, win rates with ``ci`` intervals, Bradley-Terry, failures and missing outputs per model.

    Raises:
        ConfigError / RecordError: the file cannot be read, lacks a column, or repeats a (sample, model, judge).
    """
    from echo_builder.judge.ratings_file import read_ratings_csv

    verdicts = read_ratings_csv(path)
    board = _leaderboard_from_verdicts(
        verdicts, missing=missing, n_boot=n_boot, seed=seed, bootstrap_judges=False, ci=ci
    )
    board.meta.update({"ratings": str(path)})
    return board
