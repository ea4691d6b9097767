"""Judge drift: anchor items re-scored by a later run, their agreement with the earlier run, and run merging.

A judge's reply can change when its provider updates the model behind a name, or when the prompt changes. Runs
judged months apart are only comparable when the judges still score alike, so a later run re-scores a fixed
*anchor* subset of an earlier run (``echo-bench judge --anchors N --anchor-from EARLIER_RUN``) and the merge
(``echo-bench leaderboard RUN1 RUN2 ...``) compares the two scorings per judge before it ranks the models of all
runs together.

Layout written under a later run ``RUN``:

- ``anchors/verdicts.parquet``: this run's judges' verdicts on the anchor items (never part of RUN's leaderboard);
- ``anchors/anchors.json``: the earlier run (path, :func:`run_id`), the anchor samples and models, the seed;
- ``anchors/cache/``: the anchors' own call cache, so the anchor items are really asked again even when
  ``--cache`` points at the earlier run's cache.

Anchor agreement per judge (:func:`anchor_agreement`), on the anchor items both scorings rated (status ``ok``):
Pearson's r and Kendall's tau-b of the ratings, *pair agreement* (share of pseudo-pairwise comparisons, the
higher-rated output of a sample winning, with the same outcome in both scorings: win, tie or loss; OpenING's
agreement, here between two scorings of one judge) and the *mean shift* (later minus earlier rating, in rating
points). Every statistic has a 95% percentile bootstrap interval over anchor samples (all models' items of one
sample are drawn together, as the leaderboard's intervals resample prompts).
"""

from __future__ import annotations

import hashlib
import json
import math
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from echo_builder.errors import ConfigError
from echo_builder.judge.verdicts_file import RUN_FILE, VERDICTS_FILE, read_verdicts
from echo_builder.records import Verdict

__all__ = [
    "ANCHORS_DIR",
    "ANCHORS_FILE",
    "DEFAULT_DRIFT_THRESHOLD",
    "DriftError",
    "MergedRuns",
    "anchor_agreement",
    "anchor_items",
    "drift_flag",
    "judge_identity",
    "leaderboard_from_runs",
    "merge_runs",
    "read_anchors",
    "run_id",
    "select_anchors",
]

#: Folder of a run holding its anchor verdicts, their record and their call cache.
ANCHORS_DIR = "anchors"
#: The anchor record inside :data:`ANCHORS_DIR`.
ANCHORS_FILE = "anchors.json"
#: Default ``--drift-threshold``: the least anchor *pair agreement* a changed judge may have and still merge.
#: A judge re-asked at temperature 0 with the same snapshot and prompt reproduces nearly every outcome; ECHO's
#: judges agree with each other on far fewer (tau-b with experts 0.05-0.12). 0.8 lets one pseudo-pairwise outcome
#: in five flip (win <-> tie <-> loss) before a changed judge is taken for a different judge; pair agreement is the
#: statistic the leaderboard depends on, since it ranks by those outcomes.
DEFAULT_DRIFT_THRESHOLD = 0.8
_RATING_MODES = ("single", "probability")


class DriftError(ConfigError):
    """Runs cannot be merged: a judge changed (snapshot or prompt version) and its anchor agreement is below the
    threshold or unmeasured, or a run has no anchors linking it to another run."""


def run_id(run_dir: str | Path) -> str:
    """A run's identity: the first 16 hex digits of the SHA-256 of its ``verdicts.parquet`` bytes.

    Seeds the anchor choice and lets a merge check that the anchored run is the one it merges.

    Raises:
        ConfigError: the run folder has no verdicts file.
    """
    path = Path(run_dir) / VERDICTS_FILE
    if not path.is_file():
        raise ConfigError(f"no verdicts at {str(path)!r}; run `echo-bench judge ... --out RUN` first")
    return hashlib.sha256(path.read_bytes()).hexdigest()[:16]


def _run_meta(run_dir: Path) -> dict[str, Any]:
    path = run_dir / RUN_FILE
    try:
        meta = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ConfigError(
            f"cannot read {str(path)!r} ({exc}); is {str(run_dir)!r} a judge run folder?"
        ) from exc
    if not isinstance(meta, dict):
        raise ConfigError(f"{str(path)!r} is not a JSON object")
    return meta


def select_anchors(verdicts: Sequence[Verdict], n: int, seed: str) -> tuple[list[str], list[str]]:
    """The anchor samples and models of an earlier run: ``n`` samples x all its models.

    The samples are drawn without replacement, by ``random.Random(int(seed, 16))``, from the sorted ids of the
    samples with at least one ``ok`` rating; fewer than ``n`` such samples means all of them. Rating modes only.

    Returns:
        ``(sample_ids, models)``, both sorted.

    Raises:
        ConfigError: ``n`` < 1, the run is pairwise, or it has no ``ok`` rating.
    """
    if n < 1:
        raise ConfigError(f"--anchors must be >= 1, got {n}")
    rated = [v for v in verdicts if v.mode in _RATING_MODES]
    if len(rated) != len(verdicts):
        raise ConfigError("anchors need a single or probability run (ratings); the earlier run is pairwise")
    candidates = sorted({v.sample_id for v in rated if v.status == "ok"})
    if not candidates:
        raise ConfigError("the earlier run has no ok rating to anchor on")
    chosen = random.Random(int(seed, 16)).sample(candidates, min(n, len(candidates)))
    return sorted(chosen), sorted({v.model for v in rated if v.model})


def anchor_items(
    earlier_run: str | Path, n: int, mode: str, discover_outputs: Any
) -> tuple[list[Any], dict[str, Any]]:
    """The judge items of the anchors of ``earlier_run`` and their record (written as ``anchors.json``).

    The earlier run's ``run.json`` names its benchmark, config and outputs folder; the items are :func:`select_anchors`'
    samples x models with those outputs (an output gone since is a ``missing_output`` item, left out of the
    agreement).
    ``discover_outputs`` is :func:`echo_builder.judge.run.discover_outputs` (outputs folder -> ``{model:
    {sample_id: path}}``), passed in by the judge run.

    Raises:
        ConfigError: the earlier run is unreadable, of another mode than ``mode``, or its benchmark or outputs are
            gone.
    """
    from echo_builder.judge.judging import JudgeItem
    from echo_dataset.loading import read_config

    folder = Path(earlier_run)
    meta = _run_meta(folder)
    if meta.get("mode") != mode:
        raise ConfigError(
            f"--anchor-from {folder} is a {meta.get('mode')} run; this run is {mode}: use one mode"
        )
    rid = run_id(folder)
    samples, models = select_anchors(read_verdicts(folder), n, rid)
    try:
        rows = {str(r.get("id")): r for r in read_config(meta["benchmark"], meta["config"])}
    except (KeyError, OSError, ValueError) as exc:
        raise ConfigError(
            f"--anchor-from {folder}: cannot read its benchmark config (run.json 'benchmark', 'config'): {exc}"
        ) from exc
    try:
        outputs = discover_outputs(meta.get("outputs", ""))
    except ConfigError as exc:
        raise ConfigError(
            f"--anchor-from {folder}: its outputs folder (run.json 'outputs', relative paths are read from the "
            f"current folder) cannot be read: {exc}"
        ) from exc
    items = []
    for sample_id in samples:
        if sample_id not in rows:
            raise ConfigError(f"--anchor-from {folder}: sample {sample_id!r} is no longer in its benchmark")
        row = rows[sample_id]
        inputs = tuple(img for img in (row.get("input_images") or ()) if img is not None)
        items += [
            JudgeItem(sample_id, row["prompt"], inputs, m, outputs.get(m, {}).get(sample_id)) for m in models
        ]
    record = {
        "from_run": str(folder),
        "from_run_id": rid,
        "n_requested": n,
        "samples": samples,
        "models": models,
        "seed": f"int({rid!r}, 16)",
    }
    return items, record


def read_anchors(run_dir: str | Path) -> tuple[dict[str, Any], list[Verdict]] | None:
    """``(anchors.json, anchor verdicts)`` of a run, or ``None`` when it has no anchors."""
    folder = Path(run_dir) / ANCHORS_DIR
    if not (folder / ANCHORS_FILE).is_file():
        return None
    try:
        record = json.loads((folder / ANCHORS_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ConfigError(f"cannot read {str(folder / ANCHORS_FILE)!r}: {exc}") from exc
    return record, read_verdicts(folder / VERDICTS_FILE)


def _interval(values: Any) -> tuple[float, float]:
    import numpy as np

    finite = values[np.isfinite(values)]
    if not len(finite):
        return (math.nan, math.nan)
    low, high = np.quantile(finite, [0.025, 0.975])
    return (float(low), float(high))


def _weighted_pearson(x: Any, y: Any, w: Any) -> Any:
    """Pearson's r per row of weights ``w`` (replicates x items); NaN where a side has no spread."""
    import numpy as np

    total = w.sum(axis=1, keepdims=True)
    mx = (w @ x)[:, None] / total
    my = (w @ y)[:, None] / total
    dx, dy = x[None, :] - mx, y[None, :] - my
    cov = (w * dx * dy).sum(axis=1)
    vx, vy = (w * dx * dx).sum(axis=1), (w * dy * dy).sum(axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        r = cov / np.sqrt(vx * vy)
    r[(vx <= 1e-12) | (vy <= 1e-12)] = np.nan
    return r


def anchor_agreement(
    earlier: Sequence[Verdict], later: Sequence[Verdict], *, n_boot: int = 1000, seed: int = 0
) -> dict[str, dict[str, Any]]:
    """Per judge, how the later scoring of the anchor items agrees with the earlier one.

    Args:
        earlier: the earlier run's verdicts (only the anchor items are used: those ``later`` has).
        later: the anchor verdicts (``anchors/verdicts.parquet``).
        n_boot: bootstrap replicates over anchor samples; seed: ``numpy.random.default_rng`` seed.

    Returns:
        ``{judge: row}``; a row has ``n_items`` (items both rated ok), ``n_samples``, ``pearson`` and ``kendall_tau_b``
        (in [-1, 1], 1 = same ordering), ``pair_agreement`` (in [0, 1], higher is better; ``n_pairs`` pairs),
        ``mean_shift`` (later minus earlier, rating points; > 0: the later judge is more lenient), each with
        ``*_ci`` ``[low, high]`` (95% percentile bootstrap over samples), NaN with ``reason`` when undefined
        (fewer than 3 items, a constant side, no pair).
    """
    import numpy as np

    from echo_builder.judge.leaderboard import verdict_ratings
    from echo_builder.stats import pseudo_pairwise
    from echo_builder.stats.agreement import (
        bootstrap_pair_agreement,
        pair_agreement,
        rank_correlation_bootstrap,
    )
    from echo_builder.stats.bootstrap import bootstrap_counts

    later_ratings = verdict_ratings(later)
    earlier_ratings = verdict_ratings(earlier)
    out: dict[str, dict[str, Any]] = {}
    for judge in sorted(set(later_ratings["judge"])):
        new = later_ratings[(later_ratings["judge"] == judge) & (later_ratings["status"] == "ok")]
        old = earlier_ratings[(earlier_ratings["judge"] == judge) & (earlier_ratings["status"] == "ok")]
        joined = new.merge(old, on=["sample_id", "model"], suffixes=("_new", "_old")).sort_values(
            ["sample_id", "model"]
        )
        x = joined["rating_old"].to_numpy(float)
        y = joined["rating_new"].to_numpy(float)
        samples = joined["sample_id"].tolist()
        row: dict[str, Any] = {"n_items": len(joined), "n_samples": len(set(samples)), "reason": None}
        nan2 = [math.nan, math.nan]
        if len(joined) == 0:
            row.update(
                pearson=math.nan, pearson_ci=nan2, kendall_tau_b=math.nan, kendall_tau_b_ci=nan2,
                mean_shift=math.nan, mean_shift_ci=nan2, pair_agreement=math.nan, pair_agreement_ci=nan2,
                n_pairs=0, reason=f"no anchor item rated ok by {judge} in both runs",
            )  # fmt: skip
            out[judge] = row
            continue
        index: dict[str, int] = {}
        unit = np.array([index.setdefault(s, len(index)) for s in samples])
        counts = bootstrap_counts(np.random.default_rng(seed), len(index), n_boot)[:, unit].astype(float)
        diff = y - x
        row["mean_shift"] = float(diff.mean())
        row["mean_shift_ci"] = list(_interval((counts @ diff) / counts.sum(axis=1)))
        corr = rank_correlation_bootstrap(x, y, groups=samples, n_boot=n_boot, seed=seed)
        row["kendall_tau_b"], row["kendall_tau_b_ci"] = corr.tau_b, [corr.tau_low, corr.tau_high]
        if corr.reason is None:
            row["pearson"] = float(np.corrcoef(x, y)[0, 1])
            row["pearson_ci"] = list(_interval(_weighted_pearson(x, y, counts)))
        else:
            row["pearson"], row["pearson_ci"], row["reason"] = math.nan, nan2, corr.reason
        cols = ["sample_id", "model", "judge", "rating", "status"]
        before = pseudo_pairwise(joined.rename(columns={"rating_old": "rating", "judge_old": "judge",
                                                        "status_old": "status"})[cols])  # fmt: skip
        after = pseudo_pairwise(joined.rename(columns={"rating_new": "rating", "judge_new": "judge",
                                                       "status_new": "status"})[cols])  # fmt: skip
        agree = pair_agreement(after, before)
        row["pair_agreement"], row["n_pairs"] = agree.agreement, agree.n_pairs
        row["pair_agreement_ci"] = (
            list(bootstrap_pair_agreement(after, before, n_boot=n_boot, seed=seed)) if agree.n_pairs else nan2
        )
        if agree.reason and row["reason"] is None:
            row["reason"] = f"pair agreement: {agree.reason} (one model per anchor sample?)"
        out[judge] = row
    return out


@dataclass
class MergedRuns:
    """Runs merged for one leaderboard.

    Attributes:
        verdicts: all runs' verdicts (anchor verdicts excluded).
        drift: the merge report (JSON-ready): ``runs`` (path, id, models per run), ``threshold``, ``allow_drift``,
            ``flagged`` (True when a check failed and ``allow_drift`` let it pass), ``problems`` (one line per
            failed check) and ``links`` (per anchored run: the run it anchors to and, per judge, ``changed``,
            the earlier and later ``snapshots`` and ``prompt_versions`` and the :func:`anchor_agreement` row).
        run_meta: the last run's ``run.json``.
    """

    verdicts: list[Verdict]
    drift: dict[str, Any]
    run_meta: dict[str, Any]


def judge_identity(verdicts: Sequence[Verdict], judge: str) -> tuple[list[str], list[str]]:
    """``(snapshots, prompt versions)`` a judge reported in ``verdicts`` (missing outputs left out), sorted."""
    own = [v for v in verdicts if v.judge == judge and v.status != "missing_output"]
    return (
        sorted({v.judge_snapshot for v in own if v.judge_snapshot}),
        sorted({v.prompt_version for v in own if v.prompt_version}),
    )


def _fmt(value: float) -> str:
    return "n/a" if value is None or not math.isfinite(value) else f"{value:.3f}"


def merge_runs(
    run_dirs: Sequence[str | Path],
    *,
    threshold: float = DEFAULT_DRIFT_THRESHOLD,
    allow_drift: bool = False,
    n_boot: int = 1000,
    seed: int = 0,
) -> MergedRuns:
    """Check that judge runs may be ranked together and merge their verdicts.

    Every run after the first must hold anchors (``judge --anchors N --anchor-from R``) re-scored from another run
    ``R`` of the list (matched by :func:`run_id`). Per judge the snapshots and prompt versions of the two runs are
    compared (from their verdicts) and the anchor agreement computed (:func:`anchor_agreement`). A judge whose
    snapshot or prompt version changed and whose anchor pair agreement is below ``threshold`` (or undefined) is
    drift; a run without such anchors cannot be checked.

    Args:
        run_dirs: two or more judge run folders of one benchmark config, mode and judge set, no model in two runs.
        threshold: least pair agreement in [0, 1] for a changed judge (default :data:`DEFAULT_DRIFT_THRESHOLD`).
        allow_drift: merge anyway; ``drift["flagged"]`` then says so and every output must show it.

    Raises:
        DriftError: drift or a missing anchor link, without ``allow_drift``; the message names the run, the judge,
            what changed and the anchor agreement.
        ConfigError: fewer than two runs, a run listed twice, different configs, modes or judges, a model in two
            runs, a threshold outside [0, 1], or an unreadable run.
    """
    if not 0.0 <= threshold <= 1.0:
        raise ConfigError(f"--drift-threshold must be in [0, 1], got {threshold}")
    dirs = [Path(d) for d in run_dirs]
    if len(dirs) < 2:
        raise ConfigError("merging needs at least two runs")
    ids = [run_id(d) for d in dirs]
    if len(set(ids)) != len(ids):
        raise ConfigError(f"a run is listed twice (same verdicts): {[str(d) for d in dirs]}")
    metas = [_run_meta(d) for d in dirs]
    verdicts = [read_verdicts(d) for d in dirs]
    for what in ("config", "mode"):
        values = {str(m.get(what)) for m in metas}
        if len(values) > 1:
            raise ConfigError(
                f"the runs differ in {what}: "
                + ", ".join(f"{d} {m.get(what)!r}" for d, m in zip(dirs, metas, strict=True))
            )
    judges = [sorted({v.judge for v in vs}) for vs in verdicts]
    if any(j != judges[0] for j in judges):
        raise ConfigError(
            "the runs have different judges, so their models share no judge to compare them: "
            + "; ".join(f"{d}: {', '.join(j)}" for d, j in zip(dirs, judges, strict=True))
        )
    owner: dict[str, Path] = {}
    for d, vs in zip(dirs, verdicts, strict=True):
        for model in sorted({m for v in vs for m in (v.model, v.model_a, v.model_b) if m}):
            if model in owner:
                raise ConfigError(
                    f"model {model!r} is in {owner[model]} and {d}; each model must come from one run "
                    "(drop it from one run, e.g. judge it again only where it belongs)"
                )
            owner[model] = d
    problems: list[str] = []
    links: list[dict[str, Any]] = []
    by_id = dict(zip(ids, range(len(dirs)), strict=True))
    for i in range(1, len(dirs)):
        anchors = read_anchors(dirs[i])
        earlier = by_id.get(anchors[0].get("from_run_id")) if anchors else None
        if anchors is None or earlier is None or earlier == i:
            reason = (
                "has no anchors (judge it with --anchors N --anchor-from EARLIER_RUN)"
                if anchors is None
                else f"has anchors from {anchors[0].get('from_run')!r} (id {anchors[0].get('from_run_id')}), "
                "which is not one of the runs merged (or changed since)"
            )
            problems.append(f"{dirs[i]} {reason}: its judges' drift cannot be checked")
            links.append({"run": str(dirs[i]), "anchored_to": None, "judges": {}, "reason": reason})
            continue
        record, anchor_verdicts = anchors
        agreement = anchor_agreement(verdicts[earlier], anchor_verdicts, n_boot=n_boot, seed=seed)
        rows: dict[str, Any] = {}
        for judge in judges[i]:
            snap_old, prompt_old = judge_identity(verdicts[earlier], judge)
            snap_new, prompt_new = judge_identity(list(verdicts[i]) + list(anchor_verdicts), judge)
            changed = snap_old != snap_new or prompt_old != prompt_new
            row = agreement.get(judge) or {"pair_agreement": math.nan, "reason": "no anchor verdicts"}
            pa = row.get("pair_agreement", math.nan)
            below = not (pa is not None and math.isfinite(pa) and pa >= threshold)
            rows[judge] = {
                "changed": changed,
                "snapshots": {"earlier": snap_old, "later": snap_new},
                "prompt_versions": {"earlier": prompt_old, "later": prompt_new},
                "drift": changed and below,
                **row,
            }
            if changed and below:
                what = []
                if snap_old != snap_new:
                    what.append(f"snapshot {', '.join(snap_old) or '?'} -> {', '.join(snap_new) or '?'}")
                if prompt_old != prompt_new:
                    what.append(f"prompt {', '.join(prompt_old) or '?'} -> {', '.join(prompt_new) or '?'}")
                ci = row.get("pair_agreement_ci") or [math.nan, math.nan]
                problems.append(
                    f"judge {judge} changed between {dirs[earlier]} and {dirs[i]} ({'; '.join(what)}) and its anchor "
                    f"pair agreement {_fmt(pa)} [{_fmt(ci[0])}, {_fmt(ci[1])}] over {row.get('n_pairs', 0)} pairs is "
                    f"below --drift-threshold {threshold:g} (Pearson r {_fmt(row.get('pearson', math.nan))}, "
                    f"Kendall tau-b {_fmt(row.get('kendall_tau_b', math.nan))}, mean shift "
                    f"{_fmt(row.get('mean_shift', math.nan))} on {row.get('n_items', 0)} anchor items)"
                )
        links.append(
            {
                "run": str(dirs[i]),
                "anchored_to": str(dirs[earlier]),
                "n_anchor_samples": len(record.get("samples") or []),
                "judges": rows,
            }
        )
    if problems and not allow_drift:
        raise DriftError(
            "refusing to merge: "
            + "; ".join(problems)
            + ". Re-judge the earlier run's models with the current judge, or pass --allow-drift to merge with "
            "a drift flag on every output."
        )
    drift = {
        "runs": [
            {"run": str(d), "id": rid, "models": sorted(m for m, o in owner.items() if o == d)}
            for d, rid in zip(dirs, ids, strict=True)
        ],
        "threshold": threshold,
        "statistic": "pair_agreement",
        "allow_drift": allow_drift,
        "flagged": bool(problems),
        "problems": problems,
        "links": links,
    }
    return MergedRuns([v for vs in verdicts for v in vs], drift, metas[-1])


def drift_flag(drift: Mapping[str, Any] | None) -> str | None:
    """The one-line flag every merged output shows when drift was allowed (``None`` when not flagged)."""
    if not drift or not drift.get("flagged"):
        return None
    return "DRIFT: merged with --allow-drift despite: " + "; ".join(drift["problems"])


def leaderboard_from_runs(
    run_dirs: Sequence[str | Path],
    *,
    missing: Literal["loss", "skip"] = "loss",
    n_boot: int = 1000,
    seed: int = 0,
    bootstrap_judges: bool = False,
    ci: Literal["bootstrap", "normal"] = "bootstrap",
    drift_threshold: float | None = None,
    allow_drift: bool = False,
) -> Any:
    """One :class:`~echo_builder.judge.leaderboard.Leaderboard` over several judge runs, after the drift check of
    :func:`merge_runs`.

    The ranking is exactly :func:`~echo_builder.judge.leaderboard.leaderboard_from_run` over all runs' verdicts (anchor verdicts excluded). The
    board's ``meta["drift"]`` holds the merge report; with ``allow_drift`` and a failed check the table gets
    ``drift_flagged = True`` on every row and the flag is the first of ``meta["warnings"]`` (shown by every format).
    Without a failed check ``drift_flagged`` is ``False``.

    Args:
        drift_threshold: least anchor pair agreement of a changed judge, in [0, 1] (default
            :data:`DEFAULT_DRIFT_THRESHOLD`).

    Raises:
        DriftError: a judge drifted, or a run has no anchors to check it, without ``allow_drift``.
        ConfigError: as :func:`merge_runs`.
    """
    import warnings

    from echo_builder.judge.leaderboard import _leaderboard_from_verdicts

    merged = merge_runs(
        run_dirs,
        threshold=DEFAULT_DRIFT_THRESHOLD if drift_threshold is None else drift_threshold,
        allow_drift=allow_drift,
        n_boot=n_boot,
        seed=seed,
    )
    board = _leaderboard_from_verdicts(
        merged.verdicts, missing=missing, n_boot=n_boot, seed=seed, bootstrap_judges=bootstrap_judges, ci=ci
    )
    flag = drift_flag(merged.drift)
    board.table["drift_flagged"] = flag is not None
    if flag:
        board.meta["warnings"].insert(0, flag)
        warnings.warn(flag, stacklevel=2)
    board.meta.update(
        {
            "drift": merged.drift,
            "merge": {"verdicts": merged.verdicts, "run_meta": merged.run_meta},
            "runs": [str(d) for d in run_dirs],
        }
    )
    return board
