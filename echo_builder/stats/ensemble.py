"""Judge ensemble by majority vote per comparison (ECHO Flow 2: GPT-4o, Gemini 2.0 Flash and Qwen2.5-VL-32B).

The reference code compared side labels (``"A"``/``"B"``) with model names, so no vote ever matched and its
"ensemble" silently became the first judge alone. Here votes are counted on canonical outcomes, which name no
side label at all, and the result cannot depend on judge order.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from echo_builder.errors import RecordError
from echo_builder.stats.schema import canonicalize_comparisons

__all__ = ["majority_vote"]


def majority_vote(comparisons: pd.DataFrame, *, judge_name: str = "majority") -> pd.DataFrame:
    """Combine several judges' verdicts per (sample_id, model_a, model_b) by strict majority (ECHO Flow 2).

    The outcome given by more than half of the judges that voted on a comparison wins; with no strict majority
    the comparison is a tie (0.5). Judges that abstained (no row, e.g. after a judge failure) do not count
    towards the half: two of three voting judges preferring A make A win; one for A, one for B and one tie make a
    tie.

    Args:
        comparisons: a Comparisons table (columns ``sample_id``, ``judge``, ``model_a``, ``model_b``,
            ``outcome``); any orientation, it is canonicalised first. At most one row per judge and comparison.
        judge_name: value written to the result's ``judge`` column.

    Returns:
        A canonical Comparisons table with one row per (sample_id, model_a, model_b), ``judge`` = ``judge_name``,
        plus ``n_judges`` (int, judges that voted) and ``votes_a`` / ``votes_b`` / ``votes_tie`` (int counts).
        Invariant to the order of judges and rows.

    Raises:
        RecordError: a required column is missing, an outcome is invalid, or one judge has two rows for the same
            comparison.
    """
    df = canonicalize_comparisons(comparisons)
    key = ["sample_id", "model_a", "model_b"]
    dup = df.duplicated([*key, "judge"])
    if dup.any():
        first = df.loc[dup, [*key, "judge"]].iloc[0].tolist()
        raise RecordError(f"comparisons: judge voted twice on (sample_id, model_a, model_b, judge) = {first}")
    outcome = df["outcome"].to_numpy()
    votes = df[key].assign(
        votes_a=(outcome == 1.0).astype(np.int64),
        votes_b=(outcome == 0.0).astype(np.int64),
        votes_tie=(outcome == 0.5).astype(np.int64),
    )
    agg = votes.groupby(key, sort=True).sum().reset_index()
    n = (agg["votes_a"] + agg["votes_b"] + agg["votes_tie"]).to_numpy()
    a, b = agg["votes_a"].to_numpy(), agg["votes_b"].to_numpy()
    agg["outcome"] = np.where(2 * a > n, 1.0, np.where(2 * b > n, 0.0, 0.5))
    agg["judge"] = judge_name
    agg["n_judges"] = n
    cols = [
        "sample_id",
        "judge",
        "model_a",
        "model_b",
        "outcome",
        "n_judges",
        "votes_a",
        "votes_b",
        "votes_tie",
    ]
    return agg[cols]
