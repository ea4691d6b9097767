"""Statistics for ranking image models: ECHO Flow 2 (arXiv 2510.15021), from judge ratings or votes to rankings.

Pipeline: ratings -> :func:`pseudo_pairwise` -> :func:`majority_vote` (judge ensemble) -> :func:`win_rates`,
:func:`head_to_head`, :func:`bootstrap_win_rates` (intervals over prompts), :func:`bradley_terry` and
:func:`bootstrap_bradley_terry` (Elo scale); human arena votes enter through :func:`load_votes` and
:func:`votes_to_comparisons`, and :func:`elo_ratings` reproduces an arena's online Elo. Agreement with humans
(:func:`kendall_tau_b`, :func:`pair_agreement`, :func:`kendalls_w`), rank correlation of two per-sample scores
with bootstrap intervals (:func:`rank_correlation_bootstrap`), OpenING's tie treatments
(:func:`win_rates_by_tie_treatment`) and TRIG's trade-off maps (:func:`tradeoff_map`) complete it; plots write
PNGs. The table formats are documented in :mod:`echo_builder.stats.schema`.

Only numpy, pandas and scipy.sparse are imported here; scipy.stats and matplotlib load inside the functions
that use them.
"""

from echo_builder.stats.agreement import (
    KendallW,
    PairAgreement,
    RankAgreement,
    RankCorrelation,
    TauResult,
    bootstrap_pair_agreement,
    bootstrap_rank_agreement,
    kendall_tau_b,
    kendalls_w,
    model_rank_agreement,
    pair_agreement,
    rank_correlation_bootstrap,
    sample_rank_agreement,
)
from echo_builder.stats.bootstrap import bootstrap_win_rates
from echo_builder.stats.bradley_terry import bootstrap_bradley_terry, bradley_terry
from echo_builder.stats.elo import elo_ratings
from echo_builder.stats.ensemble import majority_vote
from echo_builder.stats.normal import normal_win_rates
from echo_builder.stats.plots import plot_head_to_head, plot_tradeoff_heatmap, plot_win_rates
from echo_builder.stats.pseudo_pairwise import failure_counts, pseudo_pairwise
from echo_builder.stats.schema import (
    COMPARISON_COLUMNS,
    JUDGE_FAILURE_STATUSES,
    RATING_COLUMNS,
    RATING_STATUSES,
    TIE_LABELS,
    VOTE_COLUMNS,
    WINNER_LABELS,
    canonicalize_comparisons,
)
from echo_builder.stats.ties import win_rates_by_tie_treatment
from echo_builder.stats.tradeoff import RELATIONS, tradeoff_map, tradeoff_matrix
from echo_builder.stats.votes import load_votes, votes_to_comparisons
from echo_builder.stats.win_rates import head_to_head, win_rates

__all__ = [
    "COMPARISON_COLUMNS",
    "JUDGE_FAILURE_STATUSES",
    "RATING_COLUMNS",
    "RATING_STATUSES",
    "RELATIONS",
    "TIE_LABELS",
    "VOTE_COLUMNS",
    "WINNER_LABELS",
    "KendallW",
    "PairAgreement",
    "RankAgreement",
    "RankCorrelation",
    "TauResult",
    "bootstrap_bradley_terry",
    "bootstrap_pair_agreement",
    "bootstrap_rank_agreement",
    "bootstrap_win_rates",
    "bradley_terry",
    "canonicalize_comparisons",
    "elo_ratings",
    "failure_counts",
    "head_to_head",
    "kendall_tau_b",
    "kendalls_w",
    "load_votes",
    "majority_vote",
    "model_rank_agreement",
    "normal_win_rates",
    "pair_agreement",
    "plot_head_to_head",
    "plot_tradeoff_heatmap",
    "plot_win_rates",
    "pseudo_pairwise",
    "rank_correlation_bootstrap",
    "sample_rank_agreement",
    "tradeoff_map",
    "tradeoff_matrix",
    "votes_to_comparisons",
    "win_rates",
    "win_rates_by_tie_treatment",
]
