"""The Leaderboard tab's data: a judge run (folder or Hub dataset of verdicts) ranked with intervals and plots.

A run is one of:

- a run folder written by ``echo-bench judge --out RUN`` (``verdicts.parquet``, ``run.json``);
- a ``verdicts.parquet`` file;
- a Hub dataset id (or a local data folder) whose one split holds verdict rows in the ``verdicts.parquet`` shape
  (one :class:`~echo_builder.records.Verdict` per row), read with ``datasets.load_dataset``.

The ranking itself is :func:`echo_builder.judge.leaderboard.leaderboard_from_run` (strict majority across judges,
95% bootstrap intervals over prompts, Bradley-Terry on the Elo scale, failure and missing counts), and the plots
are :meth:`~echo_builder.judge.leaderboard.Leaderboard.write_plots`; nothing is recomputed here.
"""

from __future__ import annotations

import json
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import pandas as pd

from echo_builder.errors import ConfigError
from echo_builder.judge.leaderboard import LEADERBOARD_COLUMNS, Leaderboard, leaderboard_from_run
from echo_builder.judge.verdicts_file import RUN_FILE, VERDICTS_FILE

__all__ = ["PAPER_COLUMNS", "TABLE_COLUMNS", "LeaderboardView", "RunSource", "display_table", "paper_table"]

#: Columns of the leaderboard table as shown (rounded: win rates to 3 decimals, ratings to 1).
TABLE_COLUMNS = ("rank", *LEADERBOARD_COLUMNS)
_PLOT_CAPTIONS = {
    "win_rates.png": "Win rate with 95% bootstrap interval over prompts",
    "bradley_terry.png": "Bradley-Terry rating (Elo scale) with 95% interval",
    "head_to_head.png": "Head to head: row model's win rate against the column model",
    "tradeoff.png": "Trade-offs between score dimensions per model (TRIG): criteria x criteria for a per-criterion "
    "run, else judges and criteria",
}


#: Columns of the "from the paper" table as shown (win rates rounded to 3 decimals).
PAPER_COLUMNS = (
    "model",
    "your_win_rate",
    "your_ci_low",
    "your_ci_high",
    "paper_model",
    "paper_win_rate",
    "paper_source",
)


def paper_table(board: Leaderboard | None, config: str | None) -> pd.DataFrame:
    """ECHO's published win rates beside the run's, for the run's config
    (:func:`echo_builder.judge.published.paper_comparison`): the run's models first (matched to the paper's by
    name), then the paper's models that the run lacks; every paper number is labelled ``from the paper``. With no
    run (``board`` None) the paper's numbers alone; an empty frame for a config the paper did not rank."""
    from echo_builder.judge.published import paper_comparison

    frame = paper_comparison(board.table if board is not None else None, config)
    for column in ("your_win_rate", "your_ci_low", "your_ci_high", "paper_win_rate"):
        frame[column] = frame[column].astype(float).round(3)
    return frame[list(PAPER_COLUMNS)].reset_index(drop=True)


def display_table(board: Leaderboard) -> pd.DataFrame:
    """The leaderboard table as shown: ``rank`` first (1 = best), win rates rounded to 3 decimals (also OpenING's
    four tie treatments ``tie_fdt``, ``tie_half``, ``tie_zero``, ``tie_dropped``), ratings to 1; a per-criterion run
    adds one ``win_rate_<criterion>`` column per criterion at the end.

    A model with no valid comparison keeps its row with empty scores (it must not vanish from the board).
    """
    table = board.table.copy()
    table.insert(0, "rank", range(1, len(table) + 1))
    criteria = [f"win_rate_{c}" for c in board.meta.get("criteria", []) if f"win_rate_{c}" in table.columns]
    rates = ("win_rate", "ci_low", "ci_high", "tie_fdt", "tie_half", "tie_zero", "tie_dropped", *criteria)
    for column in rates:
        if column in table.columns:
            table[column] = table[column].astype(float).round(3)
    for column in ("bt_rating", "bt_ci_low", "bt_ci_high"):
        table[column] = table[column].astype(float).round(1)
    return table[[c for c in (*TABLE_COLUMNS, *criteria) if c in table.columns]].reset_index(drop=True)


@dataclass
class LeaderboardView:
    """Everything the Leaderboard tab shows for one run.

    Attributes:
        summary: Markdown: what was judged (benchmark, config, judges, mode) and how to read the table.
        table: :func:`display_table` of the board.
        failures: per model and judge, counts per verdict status (single-answer runs; empty otherwise).
        position_bias: per judge, the position-bias rate (pairwise runs; empty otherwise).
        plots: (PNG path, caption) for each plot written.
        board: the :class:`~echo_builder.judge.leaderboard.Leaderboard` itself.
        paper: :func:`paper_table` for the run's config (ECHO's published win rates beside the run's).
        validity: the run's validity card as Markdown (:func:`echo_builder.judge.validity.validity_markdown`: judge
            snapshots, prompt versions, temperature, failure, refusal and position-bias rates, Bradley-Terry
            regularisation, comparison groups, and what is not measured), as ``echo-bench leaderboard`` writes it.
    """

    summary: str
    table: pd.DataFrame
    failures: pd.DataFrame
    position_bias: pd.DataFrame
    plots: list[tuple[str, str]]
    board: Leaderboard
    paper: pd.DataFrame | None = None
    validity: str = ""


class RunSource:
    """One judge run to rank, read lazily and cached per ``missing`` setting.

    Args:
        source: a run folder, a ``verdicts.parquet`` file, or a Hub dataset id / local data folder of verdict rows.
        n_boot: bootstrap replicates (1,000 by default, as the CLI).
        seed: bootstrap seed (the same seed gives the same intervals as ``echo-bench leaderboard``).
        work_dir: where plots (and verdicts read from a dataset) are written; a new temporary folder by default.
    """

    def __init__(
        self, source: str | Path, *, n_boot: int = 1000, seed: int = 0, work_dir: str | Path | None = None
    ) -> None:
        self.source = str(source)
        self.n_boot = n_boot
        self.seed = seed
        self.work_dir = Path(work_dir) if work_dir else Path(tempfile.mkdtemp(prefix="echo-space-run-"))
        self._lock = threading.Lock()
        self._run_dir: Path | None = None
        self._views: dict[str, LeaderboardView] = {}

    @property
    def name(self) -> str:
        """A short label: the run folder's name, or the dataset id."""
        path = Path(self.source)
        if path.is_file():
            return path.parent.name or path.name
        return path.name if path.is_dir() else self.source

    def run_dir(self) -> Path:
        """A folder holding ``verdicts.parquet`` for this source (the run folder itself when it is one).

        Raises:
            ConfigError: the source is neither a run folder, a verdicts file nor a loadable dataset of verdicts.
        """
        if self._run_dir is not None:
            return self._run_dir
        path = Path(self.source).expanduser()
        if path.is_dir() and (path / VERDICTS_FILE).is_file():
            self._run_dir = path
        elif path.is_file() and path.suffix == ".parquet":
            self._run_dir = self._materialise(pd.read_parquet(path))
        else:
            self._run_dir = self._materialise(self._load_dataset())
        return self._run_dir

    def _load_dataset(self) -> pd.DataFrame:
        try:
            import datasets
        except ImportError:  # pragma: no cover - datasets is a core dependency
            raise ConfigError(
                f"{self.source!r} is not a run folder; reading it as a dataset needs `datasets`"
            ) from None
        try:
            loaded = datasets.load_dataset(self.source)
        except Exception as exc:
            raise ConfigError(
                f"{self.source!r} is not a run folder (no {VERDICTS_FILE}) and could not be loaded as a dataset of "
                f"verdicts: {exc}"
            ) from None
        splits = list(loaded)
        split = next((s for s in ("train", "test") if s in splits), splits[0])
        return loaded[split].to_pandas()

    def _materialise(self, frame: pd.DataFrame) -> Path:
        from echo_builder.records import Verdict

        missing = [c for c in ("sample_id", "judge") if c not in frame.columns]
        if missing:
            raise ConfigError(
                f"{self.source!r} does not hold verdict rows: columns {missing} are missing "
                f"(expected the {VERDICTS_FILE} shape: {', '.join(Verdict.model_fields)})"
            )
        folder = self.work_dir / "verdicts"
        folder.mkdir(parents=True, exist_ok=True)
        frame.to_parquet(folder / VERDICTS_FILE, index=False)
        return folder

    def run_info(self) -> dict[str, Any]:
        """The run's ``run.json`` (what was judged and how), or ``{}`` when the source has none."""
        path = self.run_dir() / RUN_FILE
        try:
            return json.loads(path.read_text()) if path.is_file() else {}
        except (OSError, json.JSONDecodeError):
            return {}

    def view(self, missing: Literal["loss", "skip"] = "loss") -> LeaderboardView:
        """The ranked run (computed once per ``missing`` setting). Raises :class:`ConfigError` for a bad run."""
        if missing not in ("loss", "skip"):
            raise ConfigError(f"missing must be 'loss' or 'skip', got {missing!r}")
        with self._lock:
            if missing not in self._views:
                self._views[missing] = self._compute(missing)
            return self._views[missing]

    def _compute(self, missing: Literal["loss", "skip"]) -> LeaderboardView:
        import warnings

        with warnings.catch_warnings():  # the disconnected-groups warning is shown in the summary instead
            warnings.filterwarnings("ignore", message="the models form", category=UserWarning)
            board = leaderboard_from_run(self.run_dir(), missing=missing, n_boot=self.n_boot, seed=self.seed)
        plot_dir = self.work_dir / f"plots-{missing}"
        written = board.write_plots(plot_dir)
        plots = [(str(p), _PLOT_CAPTIONS.get(p.name, p.stem)) for p in written]
        failures = board.failures if board.failures is not None else pd.DataFrame()
        bias = board.position_bias if board.position_bias is not None else pd.DataFrame()
        groups = board.meta.get("groups") or []
        notes = (
            [
                f"The models form {len(groups)} groups never compared with each other "
                f"({'; '.join(', '.join(g) for g in groups)}): compare win rates only within a group."
            ]
            if len(groups) > 1
            else []
        )
        info = self.run_info()
        from echo_builder.judge.validity import validity_markdown, validity_report
        from echo_builder.judge.verdicts_file import read_verdicts

        card = validity_report(
            read_verdicts(self.run_dir()),
            board,
            run_meta=info or None,
            run_dir=self.run_dir(),
            seed=self.seed,
        )
        paper = paper_table(board, info.get("config"))
        if not paper.empty:
            notes.append(_paper_note(info.get("config")))
        return LeaderboardView(
            summary=_summary(board, info, self.name, missing, notes),
            table=display_table(board),
            failures=failures.reset_index(drop=True),
            position_bias=bias.reset_index(drop=True),
            plots=plots,
            board=board,
            paper=paper,
            validity=validity_markdown(card),
        )


def _paper_note(config: str | None) -> str:
    from echo_builder.judge.published import PAPER_LABEL

    return (
        f"Beside this run: ECHO's published win rates on `{config}`, {PAPER_LABEL} (table below). They come from "
        "another judge setup and other models and opponents: compare orderings and rough gaps, not digits."
    )


def _summary(board: Leaderboard, info: dict[str, Any], name: str, missing: str, notes: list[str]) -> str:
    meta = board.meta
    judges = ", ".join(f"`{j}`" for j in meta.get("judges", [])) or "unknown"
    lines = [f"**Run** `{name}`"]
    if info.get("config") or info.get("benchmark"):
        lines.append(f"benchmark `{info.get('benchmark', '?')}`, config `{info.get('config', '?')}`")
    lines.append(f"judges {judges}; mode `{meta.get('mode', '?')}`")
    missing_text = "loses that comparison" if missing == "loss" else "is skipped"
    body = [
        " · ".join(lines),
        "",
        f"Win rate: mean over a model's comparisons (each prompt x each opponent; win 1, tie 0.5, loss 0), higher "
        f"is better, with a 95% bootstrap interval over prompts ({meta.get('n_boot', '?')} replicates). Several "
        "judges are combined per comparison by strict majority (no majority: a tie). Bradley-Terry ratings are on "
        f"the Elo scale (mean 1000). A missing output {missing_text}; judge failures are counted beside each model "
        "(`n_failures`), never scored (ECHO, arXiv 2510.15021, Flow 2).",
    ]
    if meta.get("mode") == "pairwise":
        body.append(
            "\nTies under OpenING's four treatments: `tie_fdt` (forced decision: a tie counts for the side the judge "
            "leaned to; empty when the judge gave no leans), `tie_half` (a tie is half a win), `tie_zero` (no win), "
            "`tie_dropped` (ties left out)."
        )
    criteria = [c for c in meta.get("criteria", []) if f"win_rate_{c}" in board.table.columns]
    if criteria:
        body.append(
            f"\nPer-criterion run ({', '.join(f'`{c}`' for c in criteria)}): `win_rate` ranks on the mean of the "
            "criteria ratings; `win_rate_<criterion>` is the win rate on that criterion alone. The trade-off map "
            "below is criteria x criteria per model."
        )
    body += [f"\n> {note}" for note in notes]
    return "\n".join(body)
