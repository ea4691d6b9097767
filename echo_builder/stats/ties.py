"""OpenING's tie treatments for pairwise judging (arXiv 2411.18499, Interleaved Arena, Table 2).

OpenING reports each model's win rate four ways:

* **FDT** (Force Dividing Tie): judges are asked, when they call a tie, which side it leans to ("Tie(A)" /
  "Tie(B)"); a leaning tie counts as a full win for that side. Here the lean is the optional ``tie_lean`` column
  (1.0 = leans to model_a, 0.0 = to model_b). A tie without a lean (NaN) counts 0 for both sides but stays in
  the denominator, as OpenING's released ``tie2ABdiv`` does with a bare "Tie". Without a ``tie_lean`` column
  FDT cannot be computed and is NaN.
* **w/ Tie (.5)**: a tie is half a win for each side (ECHO's win rate).
* **w/ Tie (0)**: a tie is a comparison nobody wins.
* **w/o Tie**: ties are dropped from numerator and denominator.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from echo_builder.errors import RecordError
from echo_builder.stats.schema import TIE_LEAN_COLUMN, canonicalize_comparisons

__all__ = ["win_rates_by_tie_treatment"]


def win_rates_by_tie_treatment(comparisons: pd.DataFrame) -> pd.DataFrame:
    """Per-model win rates under OpenING's four tie treatments: FDT, ties as 0.5, ties as 0, ties dropped.

    Args:
        comparisons: a Comparisons table (any orientation); optional ``tie_lean`` column (float: 1.0 = the tie
            leans to model_a, 0.0 = to model_b, NaN = no lean; ignored on decisive rows).

    Returns:
        DataFrame with ``model``; ``fdt``, ``tie_half``, ``tie_zero``, ``no_ties`` (win rates in [0, 1], higher
        is better; ``no_ties`` is NaN for a model whose comparisons were all ties, ``fdt`` is NaN for every
        model without a ``tie_lean`` column); ``n_comparisons``, ``n_ties`` and ``n_unleaned_ties`` (ties with no
        lean, counted 0 for both sides under FDT). Sorted by ``tie_half`` (descending) then model.

    Raises:
        RecordError: a required column is missing or an outcome/lean is not 0, 0.5 or 1 (lean: 0, 1 or NaN).
    """
    df = canonicalize_comparisons(comparisons)
    o = df["outcome"].to_numpy()
    tie = o == 0.5
    has_lean = TIE_LEAN_COLUMN in df.columns
    lean = df[TIE_LEAN_COLUMN].to_numpy(dtype=float) if has_lean else np.full(len(df), np.nan)
    lean = np.where(tie, lean, np.nan)  # a lean only means something on a tie
    bad = ~np.isnan(lean) & ~np.isin(lean, (0.0, 1.0))
    if bad.any():
        raise RecordError(f"comparisons: tie_lean must be 1.0, 0.0 or NaN; row {int(np.flatnonzero(bad)[0])}")
    # model_a's points under FDT: decisive rows as they are; leaning ties go to the leaned side; others 0.
    fdt_a = np.where(tie, np.where(np.isnan(lean), 0.0, lean), o)
    fdt_b = np.where(tie, np.where(np.isnan(lean), 0.0, 1.0 - lean), 1.0 - o)
    sides = pd.DataFrame(
        {
            "model": np.concatenate(
                [df["model_a"].to_numpy(dtype=object), df["model_b"].to_numpy(dtype=object)]
            ),
            "win": np.concatenate([o == 1.0, o == 0.0]).astype(float),
            "tie": np.concatenate([tie, tie]).astype(float),
            "fdt": np.concatenate([fdt_a, fdt_b]),
            "unleaned": np.concatenate([tie & np.isnan(lean)] * 2).astype(float),
            "n": 1.0,
        }
    )
    g = sides.groupby("model", sort=True).sum()
    decisive = g["n"] - g["tie"]
    out = pd.DataFrame(
        {
            "model": g.index.astype(str),
            "fdt": (g["fdt"] / g["n"]).to_numpy() if has_lean else np.nan,
            "tie_half": ((g["win"] + 0.5 * g["tie"]) / g["n"]).to_numpy(),
            "tie_zero": (g["win"] / g["n"]).to_numpy(),
            "no_ties": np.where(decisive > 0, g["win"] / decisive.where(decisive > 0, 1.0), np.nan),
            "n_comparisons": g["n"].astype(np.int64).to_numpy(),
            "n_ties": g["tie"].astype(np.int64).to_numpy(),
            "n_unleaned_ties": g["unleaned"].astype(np.int64).to_numpy(),
        }
    )
    return out.sort_values(["tie_half", "model"], ascending=[False, True], kind="stable").reset_index(
        drop=True
    )
