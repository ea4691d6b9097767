"""Agreement of a judge with the community's own verdicts on the target model's outputs (``echo-bench agreement
RUN --community``).

ECHO's curated replies say whether the community liked the output a post shows ("amazing result", "it changed
her face"). The build's optional ``feedback_verdict`` stage (:mod:`echo_builder.stages.feedback_verdict`) labels
each reply; an output's community verdict is :func:`~echo_builder.stages.feedback_verdict.sample_verdict` of its
replies' labels. When a judge run rated those community outputs (judged as a model, ``community`` by default:
:func:`write_community_outputs` lays them out for ``echo-bench judge``), the outputs the community called
``positive`` and ``negative`` form a judge-validation set, and per judge (and criterion):

- **AUC**: the probability that the judge rates a community-liked output above a disliked one, ties counting
  one half: the Mann-Whitney U statistic of the liked outputs' ratings divided by ``n_positive * n_negative``
  (``scipy.stats.mannwhitneyu``; Hanley & McNeil 1982). 0.5 is chance, 1 perfect, below 0.5 reversed.
- **Pair agreement**: over the (liked, disliked) pairs the judge rates differently, the share where the liked
  output is rated higher (ties left out, as OpenING's "w/o tie" agreement); ``tie_rate`` is the share of pairs it
  rates equal. Without ties it equals the AUC.
- 95% percentile bootstrap intervals of both, resampling the liked and the disliked outputs separately
  (stratified, so every replicate has both), ``n_boot`` replicates seeded with ``seed``; ``n_positive``,
  ``n_negative``, ``n_pairs``; the two-sided Mann-Whitney p-value against "no association".

Labels come from the benchmark's ``stages/feedback_verdict.jsonl`` (a build folder made with
``--feedback-verdicts``), matched to the rows by row id and reply position (the dataset's pseudonymized URLs
differ from the file's), else by reply text; a reply the file lacks (or a benchmark without the file, such as a Hub dataset) is labelled by the rules lexicon,
and the report counts which labeller decided how many replies.
"""

from __future__ import annotations

import json
import math
from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from echo_builder.errors import ConfigError

__all__ = [
    "COMMUNITY_MODEL",
    "ENSEMBLE",
    "auc_and_pair_agreement",
    "community_agreement",
    "community_verdicts",
    "write_community_outputs",
]

#: The model name a run gives the community's outputs (``<outputs>/community/<sample_id>.png``).
COMMUNITY_MODEL = "community"
#: The row name of the judges' ensemble (each output's mean rating over the judges that rated it).
ENSEMBLE = "ensemble (mean rating)"


def _level_counts(pos: np.ndarray, neg: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Rating levels (sorted unique values) and one-hot matrices mapping each output to its level."""
    levels = np.unique(np.concatenate([pos, neg]))
    return (
        levels,
        (pos[:, None] == levels[None, :]).astype(np.float64),
        (neg[:, None] == levels[None, :]).astype(np.float64),
    )


def _from_counts(p: np.ndarray, n: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(concordant, discordant, tied) pair counts from per-level counts ``p``, ``n`` of shape (..., k)."""
    below = np.cumsum(n, axis=-1) - n  # negatives rated strictly lower than each level
    above = n.sum(axis=-1, keepdims=True) - below - n
    return (p * below).sum(-1), (p * above).sum(-1), (p * n).sum(-1)


def auc_and_pair_agreement(
    positive: Sequence[float], negative: Sequence[float], *, n_boot: int = 1000, seed: int = 0
) -> dict[str, Any]:
    """AUC and pair agreement of ratings of community-liked (``positive``) vs disliked (``negative``) outputs.

    Args:
        positive / negative: the judge's ratings (any real scale, higher = better) of each liked / disliked
            output; NaN is not allowed. Both need at least one rating.
        n_boot: stratified percentile-bootstrap replicates (>= 10); seed: their seed.

    Returns:
        ``n_positive``, ``n_negative``, ``n_pairs`` (their product), ``auc`` in [0, 1] (ties count 1/2),
        ``pair_agreement`` in [0, 1] over the untied pairs (NaN when every pair is tied), ``tie_rate`` in [0, 1],
        ``mann_whitney_p`` (two-sided), and ``auc_ci_low``/``auc_ci_high``, ``pair_agreement_ci_low``/
        ``pair_agreement_ci_high`` (95% percentile intervals; replicates with only tied pairs are left out of the
        pair-agreement interval).

    Raises:
        ConfigError: an empty side, a NaN rating or ``n_boot < 10``.
    """
    from scipy.stats import mannwhitneyu

    from echo_builder.stats.bootstrap import bootstrap_counts

    pos = np.asarray(positive, dtype=np.float64)
    neg = np.asarray(negative, dtype=np.float64)
    if pos.size == 0 or neg.size == 0:
        raise ConfigError(
            f"AUC needs ratings of liked and disliked outputs, got {pos.size} liked and {neg.size} disliked"
        )
    if np.isnan(pos).any() or np.isnan(neg).any():
        raise ConfigError("a rating is NaN: leave unrated outputs out before computing the AUC")
    if n_boot < 10:
        raise ConfigError(f"n_boot must be at least 10, got {n_boot}")
    pairs = pos.size * neg.size
    test = mannwhitneyu(pos, neg, alternative="two-sided")
    u = float(test.statistic)
    p_value = float(test.pvalue) if np.ptp(np.r_[pos, neg]) else 1.0  # all ratings equal: no evidence at all
    _, one_pos, one_neg = _level_counts(pos, neg)
    conc, disc, tied = _from_counts(one_pos.sum(0), one_neg.sum(0))
    rng = np.random.default_rng(seed)
    boot_p = bootstrap_counts(rng, pos.size, n_boot) @ one_pos  # (n_boot, k): liked outputs per level
    boot_n = bootstrap_counts(rng, neg.size, n_boot) @ one_neg
    b_conc, b_disc, b_tied = _from_counts(boot_p, boot_n)
    b_auc = (b_conc + 0.5 * b_tied) / pairs
    strict = b_conc + b_disc
    b_pair = b_conc[strict > 0] / strict[strict > 0]
    auc = (conc + 0.5 * tied) / pairs
    if not math.isclose(auc, u / pairs, rel_tol=1e-9, abs_tol=1e-12):  # the identity AUC = U / (n1 n2)
        raise AssertionError(f"AUC {auc} disagrees with Mann-Whitney U / pairs {u / pairs}")
    nan = float("nan")
    return {
        "n_positive": int(pos.size),
        "n_negative": int(neg.size),
        "n_pairs": int(pairs),
        "auc": float(auc),
        "auc_ci_low": float(np.percentile(b_auc, 2.5)),
        "auc_ci_high": float(np.percentile(b_auc, 97.5)),
        "pair_agreement": float(conc / (conc + disc)) if conc + disc else nan,
        "pair_agreement_ci_low": float(np.percentile(b_pair, 2.5)) if b_pair.size else nan,
        "pair_agreement_ci_high": float(np.percentile(b_pair, 97.5)) if b_pair.size else nan,
        "tie_rate": float(tied / pairs),
        "mann_whitney_p": p_value,
    }


class _StageLabels:
    """The labels of a build's ``stages/feedback_verdict.jsonl``, looked up per dataset reply.

    A reply is found by its row id and position (``sample_id``, ``index``): the dataset pseudonymizes the handles
    in ``post_url`` (and in mentions in the text), which the stage file, written before, keeps. Where a position is
    ambiguous (two samples whose id was made unique after the stage) or absent, a reply whose text is in the file
    with one verdict only is matched by text; anything else is left to the rules lexicon.
    """

    def __init__(self, rows: list[dict[str, Any]]) -> None:
        self.by_position: dict[tuple[str, int], list[tuple[str, str]]] = {}
        self.by_text: dict[str, set[str]] = {}
        for row in rows:
            key = (str(row["sample_id"]), int(row["index"]))
            self.by_position.setdefault(key, []).append((str(row["feedback"]), str(row["verdict"])))
            self.by_text.setdefault(str(row["feedback"]), set()).add(str(row["verdict"]))

    def __bool__(self) -> bool:
        return bool(self.by_position)

    def get(self, sample_id: str, index: int, feedback: str) -> str | None:
        candidates = self.by_position.get((sample_id, index), [])
        if len(candidates) == 1:
            return candidates[0][1]
        same = {verdict for text, verdict in candidates if text == feedback}
        if len(same) == 1:
            return same.pop()
        by_text = self.by_text.get(feedback, set())
        return next(iter(by_text)) if len(by_text) == 1 else None


def _stage_labels(benchmark: str | Path) -> tuple[_StageLabels, str | None]:
    """The labels of ``<benchmark>/stages/feedback_verdict.jsonl`` (empty when the benchmark has no such file), and
    the labeller named in its ``report.json``.

    Raises:
        ConfigError: a line that is not a feedback-verdict record, or an unknown verdict (the line is named).
    """
    from echo_builder.stages.feedback_verdict import FEEDBACK_VERDICT_FILE, VERDICTS

    path = Path(benchmark) / "stages" / FEEDBACK_VERDICT_FILE
    if not path.is_file():
        return _StageLabels([]), None
    rows: list[dict[str, Any]] = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
            record = {k: row[k] for k in ("sample_id", "index", "feedback", "verdict")}
            int(record["index"])
        except (ValueError, KeyError, TypeError) as exc:
            raise ConfigError(f"{path}, line {number}: not a feedback-verdict record ({exc!r})") from None
        if record["verdict"] not in VERDICTS:
            raise ConfigError(
                f"{path}, line {number}: unknown verdict {record['verdict']!r}; expected one of {VERDICTS}"
            )
        rows.append(record)
    labeller = None
    report = Path(benchmark) / "report.json"
    if report.is_file():
        try:
            stages = json.loads(report.read_text(encoding="utf-8")).get("stages", [])
            labeller = next((s.get("labeller") for s in stages if s.get("name") == "feedback_verdict"), None)
        except (ValueError, AttributeError):
            labeller = None
    return _StageLabels(rows), labeller


def community_verdicts(benchmark: str | Path, config: str) -> tuple[dict[str, str], dict[str, Any]]:
    """Each row's community verdict in ``config`` of ``benchmark``, and where the labels came from.

    Returns:
        ``{sample_id: verdict}`` for every row (``not_a_verdict`` when it has no judging reply), and
        ``{"items", "from_stage_file", "from_rules", "labeller", "outputs": {verdict: count}}``.

    Raises:
        BenchmarkNotFoundError: no such benchmark or config; ConfigError: a damaged stage file.
    """
    from echo_builder.stages.feedback_verdict import (
        RULES_VERSION,
        VERDICTS,
        rules_feedback_verdict,
        sample_verdict,
    )
    from echo_dataset.loading import read_config

    stage, labeller = _stage_labels(benchmark)
    verdicts: dict[str, str] = {}
    from_stage = from_rules = 0
    for row in read_config(benchmark, config, columns=["id", "community_feedback"]):
        labels = []
        for index, item in enumerate(row.get("community_feedback") or []):
            text = str(item.get("feedback") or "")
            label = stage.get(str(row["id"]), index, text) if stage else None
            if label is not None:
                labels.append(label)
                from_stage += 1
            else:
                labels.append(rules_feedback_verdict(text))
                from_rules += 1
        verdicts[str(row["id"])] = sample_verdict(labels)
    counts = Counter(verdicts.values())
    return verdicts, {
        "items": from_stage + from_rules,
        "from_stage_file": from_stage,
        "from_rules": from_rules,
        "labeller": labeller if from_stage else RULES_VERSION if from_rules else None,
        "outputs": {v: counts.get(v, 0) for v in VERDICTS},
    }


def community_agreement(
    run_dir: str | Path,
    benchmark: str | Path | None = None,
    *,
    config: str | None = None,
    model: str = COMMUNITY_MODEL,
    n_boot: int = 1000,
    seed: int = 0,
) -> dict[str, Any]:
    """How each judge's ratings of the community outputs in ``run_dir`` agree with the community's verdicts.

    Args:
        run_dir: a single or probability judge run (``echo-bench judge``) that rated ``model``'s outputs.
        benchmark / config: where the community verdicts come from (default: what ``RUN/run.json`` records).
        model: the name the run gave the community's outputs.
        n_boot / seed: bootstrap replicates and seed (:func:`auc_and_pair_agreement`).

    Returns:
        ``model``, ``benchmark``, ``config``, ``labels`` (see :func:`community_verdicts`), ``n_boot``, ``seed``
        and ``judges``: one row per (judge, criterion), and with several judges one row :data:`ENSEMBLE` per
        criterion (each output's mean rating over the judges that rated it), with :func:`auc_and_pair_agreement`'s
        fields plus
        ``n_unrated`` (liked or disliked outputs without an ok rating, left out), or with ``reason`` (and NaN
        numbers) when one side has no rated output. Repeated ratings of one output are averaged.

    Raises:
        ConfigError: no run.json to default from, a pairwise run, or no verdict of ``model`` in the run.
    """
    from echo_builder.judge.verdicts_file import read_run_meta, read_verdicts

    found = read_run_meta(run_dir)
    meta = found or {}
    benchmark = benchmark if benchmark is not None else meta.get("benchmark")
    config = config if config is not None else meta.get("config")
    if not benchmark or not config:
        if found is None:
            raise ConfigError(
                f"{run_dir}: no run.json, so not an `echo-bench judge --out` folder (or one copied without it); "
                "give a judge run, or --benchmark and --config"
            )
        raise ConfigError(
            f"{run_dir}: run.json does not name the benchmark and config; give --benchmark and --config"
        )
    verdicts = read_verdicts(run_dir)
    if verdicts and all(v.mode == "pairwise" for v in verdicts):
        raise ConfigError(
            f"{run_dir} is a pairwise run: community agreement needs ratings of the community outputs "
            "(judge them with --mode single or probability)"
        )
    mine = [v for v in verdicts if v.mode != "pairwise" and v.model == model]
    if not mine:
        models = sorted({v.model for v in verdicts if v.model})
        raise ConfigError(
            f"{run_dir} has no rating of the model {model!r} (models: {', '.join(models) or 'none'}); judge the "
            f"community's outputs as that model (echo-bench community-outputs) or name it with --community-model"
        )
    labels, provenance = community_verdicts(benchmark, str(config))
    ratings: dict[tuple[str, str], dict[str, list[float]]] = {}
    for v in mine:
        per = ratings.setdefault((v.judge, v.criterion), {})
        per.setdefault(v.sample_id, [])
        if v.status == "ok" and v.rating is not None and math.isfinite(v.rating):
            per[v.sample_id].append(float(v.rating))
    by_criterion: dict[str, list[dict[str, list[float]]]] = {}
    for (_, criterion), per in sorted(ratings.items()):
        by_criterion.setdefault(criterion, []).append(per)
    tables = sorted(ratings.items())
    for criterion, pers in by_criterion.items():
        if len(pers) > 1:  # the judges' ensemble: each output's mean over the judges that rated it
            ensemble = {
                sample_id: [float(np.mean(p[sample_id])) for p in pers if p.get(sample_id)]
                for sample_id in sorted({s for p in pers for s in p})
            }
            tables.append(
                ((ENSEMBLE, criterion), {k: [float(np.mean(v))] if v else [] for k, v in ensemble.items()})
            )
    rows = []
    for (judge, criterion), per in tables:
        pos, neg, unrated = [], [], 0
        for sample_id, verdict in labels.items():
            if verdict not in ("positive", "negative"):
                continue
            values = per.get(sample_id) or []
            if not values:
                unrated += 1
                continue
            (pos if verdict == "positive" else neg).append(float(np.mean(values)))
        row: dict[str, Any] = {"judge": judge, "criterion": criterion, "n_unrated": unrated, "reason": None}
        if pos and neg:
            row.update(auc_and_pair_agreement(pos, neg, n_boot=n_boot, seed=seed))
        else:
            nan = float("nan")
            row.update(
                {
                    "n_positive": len(pos),
                    "n_negative": len(neg),
                    "n_pairs": 0,
                    **dict.fromkeys(
                        (
                            "auc",
                            "auc_ci_low",
                            "auc_ci_high",
                            "pair_agreement",
                            "pair_agreement_ci_low",
                            "pair_agreement_ci_high",
                            "tie_rate",
                            "mann_whitney_p",
                        ),
                        nan,
                    ),
                    "reason": f"needs rated outputs the community liked and disliked, got {len(pos)} liked and "
                    f"{len(neg)} disliked",
                }
            )
        rows.append(row)
    return {
        "model": model,
        "benchmark": str(benchmark),
        "config": str(config),
        "labels": provenance,
        "n_boot": n_boot,
        "seed": seed,
        "judges": rows,
    }


def write_community_outputs(
    benchmark: str | Path, config: str, outputs_dir: str | Path, *, model: str = COMMUNITY_MODEL
) -> dict[str, int]:
    """Write the first output image of every row of ``config`` as ``<outputs_dir>/<model>/<id>.<ext>``, so that
    ``echo-bench judge --outputs OUTPUTS_DIR`` rates the community's outputs beside the models'.

    The image bytes are written as stored (extension from their format: ``png``, ``jpg``, ``webp``, ``gif``);
    rows without a downloaded output image are skipped and counted. Returns ``{"written", "skipped"}``.

    Raises:
        ConfigError: ``model`` is not a plain folder name, or ``<outputs_dir>/<model>`` already holds files.
        echo_dataset.loading.BenchmarkNotFoundError: the benchmark or config does not exist (nothing is written).
    """
    import io
    import itertools

    from PIL import Image, UnidentifiedImageError

    from echo_dataset.loading import iter_config
    from echo_dataset.safe_io import check_inside

    if not model or model in (".", "..") or "/" in model or "\\" in model:
        raise ConfigError(f"the community model name must be a plain folder name, got {model!r}")
    folder = Path(outputs_dir) / model
    if folder.is_dir() and any(folder.iterdir()):
        raise ConfigError(f"{folder} already holds files; choose another --out or --model")
    check_inside(outputs_dir, folder)
    rows = iter_config(benchmark, config, columns=["id", "output_images"])
    first = next(rows, None)  # a missing benchmark or config fails here, before any folder is made
    folder.mkdir(parents=True, exist_ok=True)
    extensions = {"PNG": "png", "JPEG": "jpg", "WEBP": "webp", "GIF": "gif"}
    written = skipped = 0
    for row in itertools.chain([first] if first is not None else [], rows):
        images = [
            img for img in row.get("output_images") or [] if isinstance(img, Mapping) and img.get("bytes")
        ]
        if not images:
            skipped += 1
            continue
        data = images[0]["bytes"]
        try:
            with Image.open(io.BytesIO(data)) as image:
                ext = extensions.get(image.format or "")
        except (UnidentifiedImageError, OSError):
            ext = None
        if ext is None:
            skipped += 1
            continue
        target = folder / f"{row['id']}.{ext}"
        check_inside(outputs_dir, target)
        target.write_bytes(data)
        written += 1
    return {"written": written, "skipped": skipped}
