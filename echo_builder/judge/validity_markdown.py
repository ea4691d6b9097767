"""The validity card as Markdown (``validity.md``), rendered from :func:`echo_builder.judge.validity.validity_report`.

Every number shown is the one in ``validity.json``, formatted to three decimals; ``n/a`` where the JSON holds
``None``; sections that were not measured print their reason as a sentence.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

__all__ = ["validity_markdown"]


def _fmt(value: Any, spec: str = ".3f") -> str:
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "n/a"
    return (
        format(value, spec) if isinstance(value, (int, float)) and not isinstance(value, bool) else str(value)
    )


def _sentence(reason: str) -> str:
    """A section's reason as a sentence: ``not measured: ...`` becomes ``Not measured: ....``."""
    return reason[:1].upper() + reason[1:] + ("" if reason.endswith(".") else ".")


def _interval(low: Any, high: Any) -> str:
    return "n/a" if low is None or high is None else f"[{low:.3f}, {high:.3f}]"


def validity_markdown(report: Mapping[str, Any]) -> str:
    """The card as GitHub-flavoured Markdown (``validity.md``): one section per part of :func:`validity_report`,
    "not measured" sections included with their reason. Names are escaped for table cells."""
    from echo_builder.judge.markdown import markdown_cell
    from echo_builder.judge.markdown import markdown_table as _markdown_table

    run = report["run"]
    lines = ["# Validity card", ""]
    lines.append(
        "How far this leaderboard's judges can be trusted. VLM judges agree only weakly with people (ECHO, "
        "arXiv 2510.15021: Kendall tau-b 0.117, 0.083 and 0.045 against experts), so read the ranking with this card."
    )
    lines += ["", "| | |", "|:---|:---|"]
    for label, value in (
        ("benchmark", run.get("benchmark")),
        ("config", run.get("config")),
        ("mode", run.get("mode")),
        ("models", ", ".join(run.get("models") or [])),
        ("samples", run.get("n_samples")),
        ("verdicts", run.get("n_verdicts")),
        ("card format", report.get("format")),
        ("echo-bench", report.get("echo_bench_version")),
    ):
        lines.append(
            f"| {label} | {markdown_cell(_fmt(value, 'd') if isinstance(value, int) else _fmt(value))} |"
        )

    lines += ["", "## Judges", ""]
    lines += _markdown_table(
        ["judge", "snapshots reported", "temperature", "temperature from", "settings", "verdicts"],
        [
            [
                markdown_cell(j["judge"]),
                ", ".join(markdown_cell(s) for s in j["snapshots"]) or "not reported",
                _fmt(j["temperature"]["value"], "g"),
                markdown_cell(j["temperature"]["source"]),
                markdown_cell(", ".join(f"{k}={v}" for k, v in sorted(j["settings"].items())) or "-"),
                str(j["n_verdicts"]),
            ]
            for j in report["judges"]
        ],
        [False, False, True, False, False, True],
    )
    prompt = report["prompt"]
    lines += ["", "## Judge prompt", ""]
    versions = ", ".join(f"`{markdown_cell(v)}`" for v in prompt["versions"]) or "not recorded"
    lines.append(f"Prompt versions: {versions}.")
    if prompt["identity"]:
        lines.append(
            "Prompt file: "
            + ", ".join(f"{k} `{markdown_cell(v)}`" for k, v in prompt["identity"].items() if v is not None)
            + "."
        )
    rep = report["repetitions"]
    lines += ["", "## Repetitions", "", f"Judgments per item: {rep['per_judgment']}; {rep['note']}."]

    lines += ["", "## Failures and refusals per model and judge", ""]
    lines.append(
        "Failure rate: parse failures and errors over the judged verdicts; refusal rate: refusals over the judged "
        "verdicts; missing outputs are not judged. Failures are counted, never scored."
    )
    lines.append("")
    lines += _markdown_table(
        [
            "model",
            "judge",
            "verdicts",
            "judged",
            "missing",
            "parse failures",
            "errors",
            "refusals",
            "failure rate",
            "refusal rate",
        ],
        [
            [
                markdown_cell(r["model"]),
                markdown_cell(r["judge"]),
                str(r["n"]),
                str(r["n_judged"]),
                str(r["missing_output"]),
                str(r["parse_failure"]),
                str(r["error"]),
                str(r["refusal"]),
                _fmt(r["failure_rate"]),
                _fmt(r["refusal_rate"]),
            ]
            for r in report["failures"]
        ],
        [False, False, True, True, True, True, True, True, True, True],
    )

    bias = report["position_bias"]
    lines += ["", "## Position bias", ""]
    if not bias["available"]:
        lines.append(_sentence(bias["reason"]))
    else:
        lines.append(
            "Order flip rate: share of pairs judged in both orders whose verdict changed when A and B were swapped; "
            "position-bias rate: share where the judge chose the same position both times; first-position rate: "
            "share of decisive verdicts choosing the image shown first (0.5 is unbiased)."
        )
        lines.append("")
        lines += _markdown_table(
            [
                "judge",
                "pairs (both orders)",
                "order flip rate",
                "position-bias rate",
                "decisive verdicts",
                "first-position rate",
            ],
            [
                [
                    markdown_cell(r["judge"]),
                    str(r["pairs_both_orders"]),
                    _fmt(r["order_flip_rate"]),
                    _fmt(r["position_bias_rate"]),
                    str(r["n_decisive"]),
                    _fmt(r["first_position_rate"]),
                ]
                for r in bias["judges"]
            ],
            [False, True, True, True, True, True],
        )

    human = report["human_agreement"]
    lines += ["", "## Agreement with humans", ""]
    if not human["available"]:
        lines.append(_sentence(human["reason"]))
    else:
        lines.append(
            f"Votes: `{markdown_cell(human['votes'])}`; pair agreement with a {human['interval']} "
            f"({human['n_boot']} replicates); Kendall tau-b between the judge's and the humans' model win rates, with "
            "its interval from the same resampling."
        )
        lines.append("")
        lines += _markdown_table(
            [
                "judge",
                "pairs",
                "agreement (ties)",
                "95% CI",
                "agreement (no ties)",
                "95% CI",
                "tau-b",
                "95% CI",
                "p",
            ],
            [
                [
                    markdown_cell(r["judge"]),
                    str(r["n_pairs"]),
                    _fmt(r["pair_agreement"]),
                    _interval(r["pair_agreement_ci_low"], r["pair_agreement_ci_high"]),
                    _fmt(r["pair_agreement_no_ties"]),
                    _interval(r["pair_agreement_no_ties_ci_low"], r["pair_agreement_no_ties_ci_high"]),
                    _fmt(r["tau_b"]),
                    _interval(r.get("tau_ci_low"), r.get("tau_ci_high")),
                    _fmt(r["tau_p"]),
                ]
                for r in human["judges"]
            ],
            [False, True, True, False, True, False, True, False, True],
        )
        w = human.get("kendalls_w") or {}
        lines += [
            "",
            f"Kendall's W among the judges: {_fmt(w.get('w'))}"
            + (f" ({markdown_cell(w['reason'])})." if w.get("reason") else "."),
        ]
    lines += ["", "## Agreement with the community", ""]
    community = report["community_agreement"]
    if not community["available"]:
        lines.append(_sentence(community["reason"]))
    else:
        outputs = community["labels"]["outputs"]
        lines += [
            f"The run rated the community's own outputs (model `{markdown_cell(community['model'])}`); the replies "
            f"liked {outputs['positive']} and disliked {outputs['negative']} of them ({outputs['mixed']} mixed, "
            f"{outputs['not_a_verdict']} without a verdict). AUC: the chance a judge rates a liked output above a "
            "disliked one (ties count 1/2; 0.5 is chance). Pair agreement: the same over the untied pairs. "
            f"Intervals: {community['interval']}.",
            "",
        ]
        lines += _markdown_table(
            ["judge", "criterion", "liked", "disliked", "AUC", "95% CI", "pair agreement", "95% CI", "ties"],
            [
                [
                    markdown_cell(r["judge"]),
                    markdown_cell(r["criterion"]),
                    str(r["n_positive"]),
                    str(r["n_negative"]),
                    _fmt(r["auc"]),
                    _interval(r["auc_ci_low"], r["auc_ci_high"]),
                    _fmt(r["pair_agreement"]),
                    _interval(r["pair_agreement_ci_low"], r["pair_agreement_ci_high"]),
                    _fmt(r["tie_rate"]),
                ]
                for r in community["judges"]
            ],
            [False, False, True, True, True, False, True, False, True],
        )
    lines += ["", "## Anchor drift", "", *_drift_lines(report["anchor_drift"])]

    bt = report["bradley_terry"]
    lines += ["", "## Bradley-Terry and comparison groups", ""]
    if bt["regularised"]:
        lines.append(
            f"Bradley-Terry regularised with {_fmt(bt['virtual_ties_per_model'], 'g')} virtual ties per model: "
            f"{bt['reason']}."
        )
    else:
        lines.append("Bradley-Terry: plain maximum-likelihood fit (no virtual ties).")
    groups = report["comparison_groups"]
    if groups["connected"]:
        lines.append("All models are connected by comparisons: one comparison group.")
    else:
        lines.append(
            f"The models form {groups['n_groups']} groups never compared with each other; compare numbers only "
            "within a group:"
        )
        lines += [""] + [
            f"{i}. {', '.join(markdown_cell(m) for m in g)}" for i, g in enumerate(groups["groups"], 1)
        ]
    ranking = report["ranking"]
    lines += [
        "",
        f"Intervals: `{markdown_cell(_fmt(ranking.get('ci_method')))}`, {_fmt(ranking.get('n_boot'), 'd')} "
        f"bootstrap replicates; a missing output: `{markdown_cell(_fmt(ranking.get('missing')))}`.",
        "",
    ]
    return "\n".join(lines)


def _drift_lines(section: Mapping[str, Any]) -> list[str]:
    """Markdown of the anchor-drift section: the flag, then one table row per anchored run and judge."""
    from echo_builder.judge.markdown import markdown_cell
    from echo_builder.judge.markdown import markdown_table as _markdown_table

    if not section.get("available"):
        return [_sentence(section["reason"])]
    lines: list[str] = []
    if section.get("flagged"):
        lines += [
            "**DRIFT: merged with --allow-drift despite failed checks:**",
            "",
            *[f"- {markdown_cell(p)}" for p in section.get("problems", [])],
            "",
        ]
    elif section.get("source") == "merge":
        lines += [
            f"Runs merged after the drift check (threshold: anchor pair agreement >= "
            f"{_fmt(section.get('threshold'), 'g')} for a judge whose snapshot or prompt version changed).",
            "",
        ]
    rows = []
    for link in section.get("links", []):
        for judge, r in (link.get("judges") or {}).items():
            rows.append(
                [
                    markdown_cell(f"{link.get('run')} vs {link.get('anchored_to')}"),
                    markdown_cell(judge),
                    "n/a" if r.get("changed") is None else ("yes" if r["changed"] else "no"),
                    _fmt(r.get("n_items"), "d"),
                    f"{_fmt(r.get('pearson'))} {_interval(*(r.get('pearson_ci') or [None, None]))}",
                    f"{_fmt(r.get('kendall_tau_b'))} {_interval(*(r.get('kendall_tau_b_ci') or [None, None]))}",
                    f"{_fmt(r.get('pair_agreement'))} {_interval(*(r.get('pair_agreement_ci') or [None, None]))}",
                    f"{_fmt(r.get('mean_shift'), '+.3f')} {_interval(*(r.get('mean_shift_ci') or [None, None]))}",
                ]
            )
    if rows:
        lines += _markdown_table(
            [
                "runs (later vs earlier)",
                "judge",
                "changed",
                "anchor items",
                "Pearson r",
                "Kendall tau-b",
                "pair agreement",
                "mean shift",
            ],
            rows,
            [False, False, False, True, True, True, True, True],
        )
        lines += [
            "",
            "Intervals: 95% percentile bootstrap over anchor samples; mean shift = later - earlier rating.",
        ]
    return lines
