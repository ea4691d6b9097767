"""PNG plots: win rates with intervals, the head-to-head matrix, and TRIG trade-off heat maps.

matplotlib is imported inside each function (importing :mod:`echo_builder.stats` stays light) and used through
its object API with the Agg canvas, so no pyplot state or global backend is touched and nothing needs a display.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from echo_builder.errors import ConfigError
from echo_builder.stats.schema import require_columns
from echo_builder.stats.tradeoff import tradeoff_matrix

__all__ = ["plot_head_to_head", "plot_tradeoff_heatmap", "plot_win_rates"]

_ABBREV = {"synergy": "S", "bottleneck": "B", "tilt": "T", "dispersion": "D", "undetermined": "?"}
#: text properties for labels made from data: model names are shown as written; "$...$" in a name is not mathtext
#: (matplotlib would render it as a formula, or fail to draw the figure on an unknown command such as "$\x$")
_PLAIN = {"parse_math": False}


def _figure(width: float, height: float):
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height), dpi=120, layout="constrained")
    FigureCanvasAgg(fig)
    return fig


def _save(fig, path: str | Path) -> Path:
    """Save ``fig`` as PNG atomically, never through a symbolic link at ``path`` (see echo_dataset.safe_io)."""
    from echo_dataset.safe_io import open_atomic

    path = Path(path)
    with open_atomic(path.parent, path) as f:
        fig.savefig(f, format="png", bbox_inches="tight")
    return path


def plot_win_rates(
    table: pd.DataFrame, path: str | Path, *, value: str = "win_rate", title: str | None = None
) -> Path:
    """Dot plot of one score per model with its interval, best model on top.

    Args:
        table: columns ``model`` and ``value``; with ``ci_low`` and ``ci_high`` the interval is drawn as error
            bars (e.g. :func:`bootstrap_win_rates` or :func:`bootstrap_bradley_terry` output).
        path: where to write the PNG (parent folders are created).
        value: the column to plot (``win_rate`` in [0, 1] with a dashed line at 0.5, or ``rating``).
        title: figure title.

    Returns:
        The PNG's path.

    Raises:
        RecordError: a required column is missing.
    """
    require_columns(table, ("model", value), "table")
    df = table.sort_values(value, ascending=True, kind="stable")  # ascending: best ends up at the top
    y = np.arange(len(df))
    x = df[value].to_numpy(dtype=float)
    fig = _figure(6.5, 0.45 * len(df) + 1.2)
    ax = fig.add_subplot()
    if {"ci_low", "ci_high"} <= set(df.columns):
        err = np.vstack([x - df["ci_low"].to_numpy(dtype=float), df["ci_high"].to_numpy(dtype=float) - x])
        ax.errorbar(x, y, xerr=err, fmt="o", color="tab:blue", ecolor="0.4", capsize=3)
    else:
        ax.plot(x, y, "o", color="tab:blue")
    if value == "win_rate":
        ax.axvline(0.5, color="0.6", linestyle="--", linewidth=1)
        ax.set_xlim(0.0, 1.0)
    ax.set_yticks(y, df["model"].astype(str).tolist(), **_PLAIN)
    ax.set_xlabel(value.replace("_", " "))
    ax.grid(axis="x", alpha=0.3)
    if title:
        ax.set_title(title, **_PLAIN)
    return _save(fig, path)


def plot_head_to_head(matrix: pd.DataFrame, path: str | Path, *, title: str | None = None) -> Path:
    """Heat map of a :func:`head_to_head` matrix: row model's win rate against the column model.

    Args:
        matrix: square DataFrame of win rates in [0, 1] (NaN = not compared, left blank).
        path: where to write the PNG.
        title: figure title.

    Returns:
        The PNG's path.

    Raises:
        ConfigError: ``matrix`` is not square.
    """
    if matrix.shape[0] != matrix.shape[1]:
        raise ConfigError(f"head-to-head matrix must be square, got shape {matrix.shape}")
    values = matrix.to_numpy(dtype=float)
    n = len(matrix)
    fig = _figure(0.7 * n + 2.5, 0.6 * n + 1.8)
    ax = fig.add_subplot()
    image = ax.imshow(np.ma.masked_invalid(values), cmap="RdBu", vmin=0.0, vmax=1.0)
    for i in range(n):
        for j in range(n):
            if np.isfinite(values[i, j]):
                color = "white" if abs(values[i, j] - 0.5) > 0.3 else "black"  # readable on dark cells
                ax.text(j, i, f"{values[i, j]:.2f}", ha="center", va="center", fontsize=8, color=color)
    labels = [str(m) for m in matrix.index]
    ax.set_xticks(range(n), [str(m) for m in matrix.columns], rotation=45, ha="right", **_PLAIN)
    ax.set_yticks(range(n), labels, **_PLAIN)
    ax.set_xlabel("opponent")
    ax.set_ylabel("model (row wins against column)")
    fig.colorbar(image, ax=ax, label="win rate")
    if title:
        ax.set_title(title, **_PLAIN)
    return _save(fig, path)


def plot_tradeoff_heatmap(
    tmap: pd.DataFrame, path: str | Path, *, models: Sequence[str] | None = None, title: str | None = None
) -> Path:
    """TRIG-style trade-off heat maps: per model, Spearman rho per dimension pair, cells labelled by relation.

    Args:
        tmap: output of :func:`tradeoff_map`.
        path: where to write the PNG.
        models: which models, one panel each (default: all, sorted).
        title: figure title.

    Returns:
        The PNG's path. Cells show rho on a blue (-1) to red (+1) scale and the relation's initial: S synergy,
        B bottleneck, T tilt, D dispersion, ? undetermined.

    Raises:
        ConfigError: an unknown model, or no model to draw.
    """
    names = list(models) if models is not None else sorted(tmap["model"].unique())
    if not names:
        raise ConfigError("no model to draw")
    rhos = [tradeoff_matrix(tmap, m, "rho") for m in names]
    rels = [tradeoff_matrix(tmap, m, "relation") for m in names]
    n_dim = len(rhos[0])
    side = 0.7 * n_dim + 1.8
    fig = _figure(side * len(names) + 1.2, side)
    axes = fig.subplots(1, len(names), squeeze=False)[0]
    image = None
    for ax, name, rho, rel in zip(axes, names, rhos, rels, strict=True):
        values = rho.to_numpy(dtype=float)
        image = ax.imshow(np.ma.masked_invalid(values), cmap="RdBu_r", vmin=-1.0, vmax=1.0)
        for i in range(n_dim):
            for j in range(n_dim):
                if i != j:
                    label = _ABBREV.get(str(rel.iloc[i, j]), "?")
                    num = "" if not np.isfinite(values[i, j]) else f"\n{values[i, j]:.2f}"
                    dark = np.isfinite(values[i, j]) and abs(values[i, j]) > 0.6
                    ax.text(
                        j,
                        i,
                        label + num,
                        ha="center",
                        va="center",
                        fontsize=7,
                        color="white" if dark else "black",
                    )
        ax.set_xticks(range(n_dim), list(rho.columns), rotation=45, ha="right")
        ax.set_yticks(range(n_dim), list(rho.index))
        ax.set_title(str(name), **_PLAIN)
    fig.colorbar(image, ax=list(axes), label="Spearman rho")
    if title:
        fig.suptitle(title, **_PLAIN)
    return _save(fig, path)
