"""Online Elo over arena votes, in time order, as Chatbot Arena's ``compute_online_elo`` computed it.

For each vote in order: E_a = 1 / (1 + 10^((R_b - R_a) / scale)), S_a = 1 (model_a won), 0 (model_b won) or
0.5 (either tie label); R_a += k (S_a - E_a) and R_b += k ((1 - S_a) - (1 - E_a)). Every model starts at
``base``. Online Elo depends on vote order and is noisy with small k; prefer :func:`bradley_terry` for rankings
and use this to reproduce arena-style boards.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from echo_builder.errors import ConfigError
from echo_builder.stats.schema import encode_labels, require_columns
from echo_builder.stats.votes import votes_to_comparisons

__all__ = ["elo_ratings"]


def elo_ratings(
    votes: pd.DataFrame, *, k: float = 4.0, scale: float = 400.0, base: float = 1000.0
) -> pd.DataFrame:
    """Online Elo ratings in timestamp order (Chatbot Arena's Elo notebook, K=4, scale 400, start 1000).

    Args:
        votes: a Votes table (``model_a``, ``model_b``, ``winner``) or a Comparisons table (``outcome`` from
            model_a's side). Rows are processed in ``tstamp`` order when that column exists (stable, so equal
            stamps keep row order), else in row order. Self-battles are dropped (with a warning) for votes.
        k: the K-factor, rating points moved per unit of surprise.
        scale: Elo points per factor of 10 in the odds.
        base: the starting rating of every model.

    Returns:
        DataFrame with ``model``, ``rating`` (float; higher is better) and ``n_votes`` (int), sorted by rating
        (descending) then model.

    Raises:
        RecordError: required columns missing or bad labels/outcomes.
        ConfigError: ``k`` < 0 or ``scale`` <= 0.
    """
    if not k >= 0 or not scale > 0:
        raise ConfigError(f"need k >= 0 and scale > 0, got k={k!r}, scale={scale!r}")
    if "winner" in votes.columns:
        require_columns(votes, ("model_a", "model_b", "winner"), "votes")
        # Keep file order through the canonical sort: rank rows before converting and sort back by it.
        ordered = votes.reset_index(drop=True)
        if "tstamp" in ordered.columns:
            ordered = ordered.sort_values("tstamp", kind="stable").reset_index(drop=True)
        comp = votes_to_comparisons(ordered)
        comp = comp.assign(_row=comp["sample_id"].astype(int)).sort_values("_row", kind="stable")
    else:
        require_columns(votes, ("model_a", "model_b", "outcome"), "comparisons")
        comp = votes.sort_values("tstamp", kind="stable") if "tstamp" in votes.columns else votes
    s = pd.to_numeric(comp["outcome"]).to_numpy(dtype=float)
    models, (ia, ib) = encode_labels(comp["model_a"], comp["model_b"])
    rating = np.full(len(models), float(base))
    for i, j, score in zip(ia.tolist(), ib.tolist(), s.tolist(), strict=True):  # sequential by definition
        expected = 1.0 / (1.0 + 10.0 ** ((rating[j] - rating[i]) / scale))
        rating[i] += k * (score - expected)
        rating[j] -= k * (score - expected)
    n_votes = np.bincount(ia, minlength=len(models)) + np.bincount(ib, minlength=len(models))
    out = pd.DataFrame({"model": models.tolist(), "rating": rating, "n_votes": n_votes})
    return out.sort_values(["rating", "model"], ascending=[False, True], kind="stable").reset_index(drop=True)
