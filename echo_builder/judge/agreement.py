"""Agreement between a judge run and human pairwise votes (ECHO Flow 2, "Agreement with humans").

For each judge and for the judges' majority vote: pair agreement with humans on the comparisons both rated
(with ties as a third label, and without ties as in OpenING's "w/o Tie"), and Kendall tau-b between the judge's
and the humans' model win rates. Kendall's W measures how alike the judges rank the models among themselves.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd

from echo_builder.errors import ConfigError

__all__ = ["judge_human_agreement"]


def _per_judge_comparisons(run_dir: str | Path) -> pd.DataFrame:
    from echo_builder.judge.leaderboard import pairwise_comparisons, verdict_ratings
    from echo_builder.judge.verdicts_file import read_verdicts
    from echo_builder.stats import pseudo_pairwise

    verdicts = read_verdicts(run_dir)
    pairwise = [v for v in verdicts if v.mode == "pairwise"]
    if pairwise:
        return pairwise_comparisons(pairwise)[0]
    return pseudo_pairwise(verdict_ratings(verdicts))


def judge_human_agreement(
    run_dir: str | Path, human_votes: str | Path, *, n_boot: int = 1000, seed: int = 0
) -> dict[str, Any]:
    """Agreement report of every judge (and their majority) in ``run_dir`` with the votes in ``human_votes``.

    The votes need a ``sample_id`` column naming the benchmark sample each vote is about. Returns a dict with
    ``judges`` (one row per judge: ``n_pairs``, ``pair_agreement``, ``pair_agreement_no_ties`` in [0, 1], each with
    a 95% percentile bootstrap interval over prompts (``pair_agreement_ci_low``/``_ci_high``,
    ``pair_agreement_no_ties_ci_low``/``_ci_high``; ``n_boot`` replicates, seeded with ``seed``; NaN when no
    comparison is shared), ``tau_b`` in [-1, 1] with ``tau_p``, ``tau_reason`` and a 95% bootstrap interval over
    prompts (``tau_ci_low``/``tau_ci_high``, :func:`echo_builder.stats.bootstrap_rank_agreement`; NaN when no
    replicate defines tau-b)) and ``kendalls_w`` among the judges.
    Raises :class:`ConfigError` when the votes have no ``sample_id`` column or share no comparison with the run.
    """
    from echo_builder.stats import (
        bootstrap_pair_agreement,
        bootstrap_rank_agreement,
        kendalls_w,
        load_votes,
        majority_vote,
        model_rank_agreement,
        pair_agreement,
        votes_to_comparisons,
        win_rates,
    )

    votes = load_votes(human_votes)
    if "sample_id" not in votes.columns:
        raise ConfigError(f"{human_votes}: votes need a sample_id column to be matched with judge verdicts")
    human = votes_to_comparisons(votes.astype({"sample_id": str}), id_column="sample_id")
    # several humans may vote on one comparison: their majority is the human verdict
    human = majority_vote(human.assign(judge=[f"human-{i}" for i in range(len(human))]), judge_name="human")
    per_judge = _per_judge_comparisons(run_dir)
    judges = sorted(per_judge["judge"].unique())
    tables = {j: per_judge[per_judge["judge"] == j] for j in judges}
    if len(judges) > 1:
        tables["majority"] = majority_vote(per_judge)
    human_rates = win_rates(human).set_index("model")["win_rate"]
    rows = []
    for name, table in tables.items():
        with_ties = pair_agreement(table, human, with_ties=True)
        without = pair_agreement(table, human, with_ties=False)
        tau = model_rank_agreement(win_rates(table).set_index("model")["win_rate"], human_rates)
        low, high = bootstrap_pair_agreement(table, human, with_ties=True, n_boot=n_boot, seed=seed)
        low_nt, high_nt = bootstrap_pair_agreement(table, human, with_ties=False, n_boot=n_boot, seed=seed)
        tau_low, tau_high = bootstrap_rank_agreement(table, human, n_boot=n_boot, seed=seed)
        rows.append(
            {
                "judge": name,
                "n_pairs": with_ties.n_pairs,
                "pair_agreement": with_ties.agreement,
                "pair_agreement_ci_low": low,
                "pair_agreement_ci_high": high,
                "pair_agreement_no_ties": without.agreement,
                "pair_agreement_no_ties_ci_low": low_nt,
                "pair_agreement_no_ties_ci_high": high_nt,
                "tau_b": tau.tau,
                "tau_ci_low": tau_low,
                "tau_ci_high": tau_high,
                "tau_p": tau.p_value,
                "tau_reason": tau.reason,
                "n_models": tau.n,
            }
        )
    if all(r["n_pairs"] == 0 for r in rows):
        raise ConfigError(
            f"the votes in {human_votes} share no (sample_id, model pair) with the run {run_dir}"
        )
    rates = pd.DataFrame({j: win_rates(tables[j]).set_index("model")["win_rate"] for j in judges}).T.dropna(
        axis=1
    )
    w = kendalls_w(rates.to_numpy()) if len(judges) > 1 and rates.shape[1] > 1 else None
    return {
        "judges": rows,
        "kendalls_w": (
            w._asdict()
            if w is not None
            else {
                "w": float("nan"),
                "chi2": float("nan"),
                "p_value": float("nan"),
                "reason": "needs at least two judges and two models",
            }
        ),
    }
