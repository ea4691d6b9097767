"""The validity card of a leaderboard: how far its judges can be trusted, stated beside the ranking.

ECHO's judges agree only weakly with experts (Kendall tau-b 0.117 for GPT-4o, 0.083 for Gemini 2.0 Flash, 0.045
for Qwen2.5-VL-32B, not significant; the experts among themselves W = 0.49; arXiv 2510.15021, Flow 2). A ranking
is only as good as its judges, so every leaderboard output carries a card (``validity.json`` and ``validity.md``)
that says, from what the run recorded:

- the judges (backend ids) and the model snapshots they reported, their reply-changing settings;
- the judge prompt (name, version, SHA-256) and the sampling temperature (from the judge's ``-o temperature=`` when
  given, else the prompt file's ``temperature``);
- repetitions: how many times each judgment was asked (1 in an echo-bench run: replies are cached; pairwise runs
  ask each pair in both presentation orders);
- per model and judge: verdicts, missing outputs, the judge failure rate (``parse_failure`` + ``error`` over the
  judged verdicts) and refusal rate (``refusal`` over the judged verdicts);
- pairwise runs: per judge the order-flip rate (the verdict changes when A and B are swapped), the position-bias
  rate (the same *position* chosen in both orders, OpenING / Arena-Hard) and the first-position rate (share of
  decisive verdicts that chose the image shown first; 0.5 is unbiased);
- agreement with human votes, when given (:func:`echo_builder.judge.agreement.judge_human_agreement`: pair agreement
  with and without ties with 95% bootstrap intervals over prompts, Kendall tau-b of the model rankings);
- the leaderboard's Bradley-Terry regularisation (virtual ties per model; 0 = plain maximum likelihood) and its
  comparison groups (models never compared, directly or through others, are not comparable);
- anchor drift (:mod:`echo_builder.judge.drift`): for a merged leaderboard, the drift check per anchored run and
  judge (snapshot and prompt changes, anchor Pearson r, Kendall tau-b, pair agreement and mean shift with 95%
  bootstrap intervals, and the drift flag); for one run holding anchors, its anchor agreement;
- agreement with the community, when the run rated the community's own outputs (the model ``community``:
  ``echo-bench community-outputs``): per judge, AUC and pair agreement of its ratings with the verdicts in the
  replies, with 95% stratified bootstrap intervals (:func:`echo_builder.judge.community.community_agreement`);
- what is *not measured*, said so rather than left out: agreement with the community when the run rated no
  community output, and anchor drift when the run has no anchors.

Rates are in [0, 1]; ``None`` in JSON (``n/a`` in Markdown) where a rate is undefined (nothing judged).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from echo_builder.judge.validity_markdown import validity_markdown

if TYPE_CHECKING:  # pragma: no cover
    from echo_builder.judge.leaderboard import Leaderboard
    from echo_builder.records import Verdict

__all__ = [
    "VALIDITY_FORMAT",
    "VALIDITY_JSON",
    "VALIDITY_MD",
    "validity_markdown",
    "validity_report",
    "write_validity",
]

#: File names of the card in a leaderboard output folder.
VALIDITY_JSON = "validity.json"
VALIDITY_MD = "validity.md"
#: ``format`` field of ``validity.json``; bumped when a field changes meaning.
VALIDITY_FORMAT = "echo-bench-validity/1"

_FAILURES = ("parse_failure", "error")
NOT_MEASURED_COMMUNITY = (
    "not measured: the run rated no community output (write them with echo-bench community-outputs and judge "
    "them as the model 'community' in single or probability mode; human votes given with --human are reported "
    "under human_agreement)"
)
NOT_MEASURED_DRIFT = (
    "not measured: anchor drift needs anchors, an earlier run's outputs judged again by this run's judges "
    "(echo-bench judge --anchors N --anchor-from EARLIER_RUN); this run has none"
)


def _rate(part: int, whole: int) -> float | None:
    return part / whole if whole else None


def _clean(value: Any) -> Any:
    """JSON-ready: NaN and infinities become ``None``, numpy scalars Python numbers, tuples lists."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {str(k): _clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_clean(v) for v in value]
    if hasattr(value, "item") and callable(value.item):
        return _clean(value.item())
    return value if value is None or isinstance(value, (str, int, bool)) else str(value)


def _temperature(settings: Mapping[str, Any], run_meta: Mapping[str, Any]) -> dict[str, Any]:
    """The sampling temperature of a judge and where it was read from."""
    if "temperature" in settings:
        return {"value": settings["temperature"], "source": "judge option (-o temperature=)"}
    if isinstance(run_meta.get("prompt_temperature"), (int, float)):
        return {"value": run_meta["prompt_temperature"], "source": "judge prompt file"}
    identity = run_meta.get("judge_prompt")
    if isinstance(identity, dict) and identity.get("sha256"):
        from echo_builder.judge import prompts

        for builtin in (
            prompts.SINGLE,
            prompts.PAIRWISE,
            prompts.PAIRWISE_LEAN,
            prompts.CRITERIA,
            prompts.PROBABILITY_DIGITS,
            prompts.PROBABILITY_TRIG,
        ):
            if builtin.sha256 == identity["sha256"]:
                return {"value": builtin.temperature, "source": "built-in judge prompt (matched by SHA-256)"}
    return {"value": None, "source": "not recorded in run.json"}


def _judges(verdicts: Sequence[Verdict], run_meta: Mapping[str, Any]) -> list[dict[str, Any]]:
    recorded = {
        j["spec"]: j
        for j in run_meta.get("judges") or []
        if isinstance(j, dict) and isinstance(j.get("spec"), str)
    }
    counts = Counter(v.judge for v in verdicts)
    rows = []
    for spec in sorted(set(counts) | set(recorded)):
        entry = recorded.get(spec, {})
        settings = entry.get("settings") if isinstance(entry.get("settings"), dict) else {}
        snapshots = {v.judge_snapshot for v in verdicts if v.judge == spec and v.judge_snapshot}
        snapshots.update(s for s in entry.get("snapshots") or [] if isinstance(s, str))
        rows.append(
            {
                "judge": spec,
                "snapshots": sorted(snapshots),
                "settings": settings,
                "temperature": _temperature(settings, run_meta),
                "n_verdicts": counts.get(spec, 0),
            }
        )
    return rows


def _repetitions(verdicts: Sequence[Verdict]) -> dict[str, Any]:
    """How often each judgment (sample, judge, criterion, model or ordered pair) was asked."""
    keys = Counter(
        (v.sample_id, v.judge, v.criterion, v.model, v.model_a, v.model_b, v.order)
        for v in verdicts
        if v.status != "missing_output"
    )
    values = sorted(set(keys.values()))
    pairwise = any(v.mode == "pairwise" for v in verdicts)
    return {
        "per_judgment": values[0] if len(values) == 1 else values,
        "orders_per_pair": 2 if pairwise else None,
        "note": (
            "each judgment is asked once (replies are cached, a rerun repeats none), so judge sampling noise is not "
            "measured by repetition"
            + ("; each pair is judged in both presentation orders" if pairwise else "")
        ),
    }


def _failure_rows(verdicts: Sequence[Verdict]) -> list[dict[str, Any]]:
    from echo_builder.judge.verdicts_file import missing_models

    counts: dict[tuple[str, str], Counter[str]] = {}
    for v in verdicts:
        models = [v.model] if v.mode != "pairwise" else [v.model_a, v.model_b]
        for model in models:
            if model is None:
                continue
            status = v.status
            if status == "missing_output" and v.mode == "pairwise" and model not in missing_models(v):
                status = "other_missing"  # the opponent's output is missing: not this model's failure
            counts.setdefault((model, v.judge), Counter())[status] += 1
    rows = []
    for (model, judge), c in sorted(counts.items()):
        n = sum(c.values())
        judged = n - c["missing_output"] - c["other_missing"]
        failures = sum(c[s] for s in _FAILURES)
        rows.append(
            {
                "model": model,
                "judge": judge,
                "n": n,
                "n_judged": judged,
                "ok": c["ok"],
                "missing_output": c["missing_output"],
                "parse_failure": c["parse_failure"],
                "error": c["error"],
                "refusal": c["refusal"],
                "failure_rate": _rate(failures, judged),
                "refusal_rate": _rate(c["refusal"], judged),
            }
        )
    return rows


def _position_bias(verdicts: Sequence[Verdict]) -> dict[str, Any]:
    pairwise = [v for v in verdicts if v.mode == "pairwise"]
    if not pairwise:
        return {
            "available": False,
            "reason": "not applicable: single-answer ratings show one output at a time (judge with --mode pairwise)",
            "judges": [],
        }
    from echo_builder.judge.leaderboard import pairwise_comparisons

    _, table = pairwise_comparisons(pairwise, missing="skip")
    by_judge = {row["judge"]: row for row in table.to_dict(orient="records")} if not table.empty else {}
    rows = []
    for judge in sorted({v.judge for v in pairwise}):
        decisive = [v for v in pairwise if v.judge == judge and v.status == "ok" and v.winner in ("A", "B")]
        # "A" in order AB (or "B" in order BA) is the image shown first
        first = sum(1 for v in decisive if (v.order == "AB") == (v.winner == "A"))
        stats = by_judge.get(judge, {})
        both = int(stats.get("pairs_both_orders", 0))
        rows.append(
            {
                "judge": judge,
                "pairs_both_orders": both,
                "order_flips": int(stats.get("order_disagreements", 0)),
                "order_flip_rate": _rate(int(stats.get("order_disagreements", 0)), both),
                "position_consistent": int(stats.get("position_consistent", 0)),
                "position_bias_rate": _rate(int(stats.get("position_consistent", 0)), both),
                "n_decisive": len(decisive),
                "first_position_rate": _rate(first, len(decisive)),
            }
        )
    return {"available": True, "reason": None, "judges": rows}


def _human_agreement(
    run_dir: str | Path | None, human_votes: str | Path | None, n_boot: int, seed: int
) -> dict[str, Any]:
    if human_votes is None:
        return {
            "available": False,
            "reason": "not measured: no human votes given (--human VOTES)",
            "votes": None,
        }
    if run_dir is None:
        return {
            "available": False,
            "reason": "not measured: agreement needs a judge run folder",
            "votes": Path(human_votes).name,
        }
    from echo_builder.judge.agreement import judge_human_agreement

    report = judge_human_agreement(run_dir, human_votes, n_boot=n_boot, seed=seed)
    return {
        "available": True,
        "reason": None,
        "votes": Path(human_votes).name,
        "n_boot": n_boot,
        "interval": "95% percentile bootstrap over prompts",
        **report,
    }


def _anchor_drift(
    drift: Mapping[str, Any] | None, run_dir: str | Path | None, n_boot: int, seed: int
) -> dict[str, Any]:
    """The card's anchor-drift section: the merge's check, a single run's own anchors, or "not measured"."""
    if drift is not None:
        return {"available": True, "reason": None, "source": "merge", **drift}
    if run_dir is None:
        return {"available": False, "reason": NOT_MEASURED_DRIFT}
    from echo_builder.errors import ConfigError
    from echo_builder.judge.drift import anchor_agreement, read_anchors
    from echo_builder.judge.verdicts_file import read_verdicts

    anchors = read_anchors(run_dir)
    if anchors is None:
        return {"available": False, "reason": NOT_MEASURED_DRIFT}
    record, anchor_verdicts = anchors
    from echo_builder.judge.drift import judge_identity, run_id

    try:
        # the recorded path may be relative to another working folder: the id proves it is the same run
        if run_id(record.get("from_run", "")) != record.get("from_run_id"):
            raise ConfigError("changed since")
        earlier = read_verdicts(record.get("from_run", ""))
    except ConfigError:
        return {
            "available": False,
            "reason": f"not measured: the anchors' earlier run {record.get('from_run')!r} (id "
            f"{record.get('from_run_id')}) is no longer readable there, or changed since",
        }
    rows = anchor_agreement(earlier, anchor_verdicts, n_boot=n_boot, seed=seed)
    later = [*read_verdicts(run_dir), *anchor_verdicts]
    for judge, row in rows.items():
        (snap_old, prompt_old), (snap_new, prompt_new) = (
            judge_identity(earlier, judge),
            judge_identity(later, judge),
        )
        row.update(
            changed=snap_old != snap_new or prompt_old != prompt_new,
            snapshots={"earlier": snap_old, "later": snap_new},
            prompt_versions={"earlier": prompt_old, "later": prompt_new},
        )
    return {
        "available": True,
        "reason": None,
        "source": "run anchors",
        "flagged": False,
        "problems": [],
        "links": [
            {
                "run": str(run_dir),
                "anchored_to": record.get("from_run"),
                "n_anchor_samples": len(record.get("samples") or []),
                "judges": rows,
            }
        ],
    }


def _community_agreement(
    verdicts: Sequence[Verdict], run_dir: str | Path | None, n_boot: int, seed: int
) -> dict[str, Any]:
    """The card's community section: :func:`~echo_builder.judge.community.community_agreement` when the run rated
    the model ``community``; else (or when the benchmark's verdicts cannot be read) not measured, with why."""
    from echo_builder.errors import EchoError
    from echo_builder.judge.community import COMMUNITY_MODEL, community_agreement

    if not any(v.model == COMMUNITY_MODEL and v.mode != "pairwise" for v in verdicts):
        return {"available": False, "reason": NOT_MEASURED_COMMUNITY}
    if run_dir is None:
        return {
            "available": False,
            "reason": "not measured: agreement with the community needs the run folder",
        }
    from echo_dataset.errors import EchoDatasetError

    try:
        report = community_agreement(run_dir, n_boot=n_boot, seed=seed)
    except (EchoError, EchoDatasetError, OSError, ValueError) as exc:
        # the benchmark moved, is offline or damaged: the card is still written, saying why this part is missing
        return {
            "available": False,
            "reason": f"not measured: the community's verdicts could not be read ({exc})",
        }
    return {
        "available": True,
        "reason": None,
        "interval": "95% percentile bootstrap, liked and disliked outputs resampled separately",
        **report,
    }


def validity_report(
    verdicts: Sequence[Verdict],
    board: Leaderboard,
    *,
    run_meta: Mapping[str, Any] | None = None,
    run_dir: str | Path | None = None,
    human_votes: str | Path | None = None,
    n_boot: int | None = None,
    seed: int = 0,
    drift: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The validity card of a ranked judge run, as a JSON-ready dict (see the module docstring for each part).

    Args:
        verdicts: the run's verdicts (:func:`echo_builder.judge.verdicts_file.read_verdicts`).
        board: the leaderboard computed from them (:func:`echo_builder.judge.leaderboard.leaderboard_from_run`);
            its ``meta`` gives the Bradley-Terry regularisation (``bt_prior``), the comparison groups and the
            interval method.
        run_meta: the run's ``run.json`` (:func:`echo_builder.judge.results.read_run_meta`); without it the judges'
            settings and the temperature read "not recorded".
        run_dir: the run folder, needed for agreement with ``human_votes``.
        human_votes: pairwise votes with ``sample_id``, ``model_a``, ``model_b``, ``winner`` (JSON, JSONL or CSV).
        n_boot: bootstrap replicates of the agreement intervals (default: the board's ``n_boot``).
        seed: bootstrap seed.
        drift: the drift check of merged runs (:func:`echo_builder.judge.drift.merge_runs`' ``drift``), which fills
            ``anchor_drift``; without it, a ``run_dir`` holding anchors whose earlier run is still readable has its
            anchor agreement computed here (no merge check).

    Returns:
        A dict with ``format`` (:data:`VALIDITY_FORMAT`), ``echo_bench_version``, ``run`` (benchmark, config,
        mode, models, counts), ``judges`` (one row per judge: ``snapshots``, ``settings``, ``temperature``
        ``{value, source}``, ``n_verdicts``), ``prompt`` (``versions``, ``identity``), ``repetitions``, ``failures``
        (one row per model and judge: ``n``, ``n_judged``, counts per status, ``failure_rate`` and
        ``refusal_rate`` in [0, 1] or ``None``), ``position_bias``, ``human_agreement``,
        ``community_agreement``, ``anchor_drift``, ``bradley_terry`` and ``comparison_groups``. Every section that
        could not be measured has ``available: false`` and a ``reason``. NaN is ``None``.

    Raises:
        ConfigError: ``human_votes`` cannot be read, has no ``sample_id`` or shares no comparison with the run
            (from :func:`~echo_builder.judge.agreement.judge_human_agreement`).
    """
    from echo_builder import __version__

    meta = dict(run_meta or {})
    groups = [list(g) for g in board.meta.get("groups") or []]
    prior = float(board.meta.get("bt_prior") or 0.0)
    identity = meta.get("judge_prompt") if isinstance(meta.get("judge_prompt"), dict) else None
    versions = sorted({v.prompt_version for v in verdicts if v.prompt_version})
    modes = sorted({v.mode for v in verdicts})
    report = {
        "format": VALIDITY_FORMAT,
        "echo_bench_version": __version__,
        "run": {
            "benchmark": meta.get("benchmark"),
            "config": meta.get("config"),
            "mode": meta.get("mode") or (modes[0] if len(modes) == 1 else modes),
            "models": sorted({m for v in verdicts for m in (v.model, v.model_a, v.model_b) if m}),
            "n_samples": len({v.sample_id for v in verdicts}),
            "n_verdicts": len(verdicts),
            "statuses": dict(sorted(Counter(v.status for v in verdicts).items())),
        },
        "judges": _judges(verdicts, meta),
        "prompt": {
            "versions": versions,
            "identity": (
                {k: identity.get(k) for k in ("name", "version", "sha256") if k in identity}
                if identity
                else None
            ),
        },
        "repetitions": _repetitions(verdicts),
        "failures": _failure_rows(verdicts),
        "position_bias": _position_bias(verdicts),
        "human_agreement": _human_agreement(
            run_dir,
            human_votes,
            n_boot if n_boot is not None else int(board.meta.get("n_boot") or 1000),
            seed,
        ),
        "community_agreement": _community_agreement(
            verdicts, run_dir, n_boot if n_boot is not None else int(board.meta.get("n_boot") or 1000), seed
        ),
        "anchor_drift": _anchor_drift(
            drift, run_dir, n_boot if n_boot is not None else int(board.meta.get("n_boot") or 1000), seed
        ),
        "bradley_terry": {
            "virtual_ties_per_model": prior,
            "regularised": prior > 0,
            "reason": (
                "some model never wins or never loses (in the data or a bootstrap replicate): the plain maximum-"
                "likelihood fit does not exist"
                if prior > 0
                else None
            ),
        },
        "comparison_groups": {
            "n_groups": len(groups),
            "connected": len(groups) <= 1,
            "groups": groups,
        },
        "ranking": {
            "ci_method": board.meta.get("ci_method"),
            "n_boot": board.meta.get("n_boot"),
            "missing": board.meta.get("missing"),
            "bootstrap_over_judges": board.meta.get("bootstrap_over_judges"),
        },
    }
    return _clean(report)


def write_validity(
    folder: str | Path, report: Mapping[str, Any], *, root: str | Path | None = None
) -> list[Path]:
    """Write ``validity.json`` (strict JSON: no NaN) and ``validity.md`` into ``folder`` atomically.

    ``root``: the folder no link below may be followed in (default ``folder``; see :mod:`echo_dataset.safe_io`).
    Returns the two paths.
    """
    import json

    from echo_dataset.safe_io import write_text

    folder = Path(folder)
    base = Path(root) if root is not None else folder
    text = json.dumps(_clean(dict(report)), indent=2, allow_nan=False, sort_keys=False) + "\n"
    return [
        write_text(base, folder / VALIDITY_JSON, text),
        write_text(base, folder / VALIDITY_MD, validity_markdown(report)),
    ]
