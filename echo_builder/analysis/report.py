"""Writing the analysis: ``analysis.md`` (from the same numbers as ``analysis.json``) and the plots.

The Markdown report is rendered from the JSON document after its floats are rounded (:func:`rounded`), so every
number in ``analysis.md`` is the one in ``analysis.json``, written the same way. Quotes are users' words from the
dataset (already pseudonymised at build time); any account left in them (``@handle``, a post or profile URL with a
handle, a DID) is masked as ``user`` (:func:`mask_accounts`), and Markdown/HTML control
characters are escaped so a quote cannot change the report's layout.

Plots use matplotlib's object API with the Agg canvas (no display, no global state) and are written atomically
inside the output folder.
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any

__all__ = ["PLOTS", "mask_accounts", "render_markdown", "rounded", "write_plots"]

#: Decimal places kept in analysis.json (and so in analysis.md).
DECIMALS = 4
#: The plot files written, by key.
PLOTS = {
    "failures": "plots/failure_categories.png",
    "tasks": "plots/task_counts.png",
    "diversity": "plots/diversity.png",
    "activity": "plots/activity.png",
}
_PSEUDONYM = re.compile(r"user_[0-9a-f]{8}\b")


def mask_accounts(text: str) -> str:
    """``text`` with every account identifier masked as ``user``: ``@alice`` -> ``@user``,
    ``https://x.com/alice/status/1`` -> ``https://x.com/user/status/1``, Bluesky profiles, DIDs, Reddit's ``u/name``
    (the identifiers :func:`echo_dataset.pseudonym.pseudonymize_text` finds). Pseudonyms a build already wrote
    (``user_1a2b3c4d``) are kept, so a benchmark imported with real handles and a pseudonymised build both give a
    report without a real account in it."""
    from echo_dataset.pseudonym import pseudonymize_text

    kept = set(_PSEUDONYM.findall(text))
    return _PSEUDONYM.sub(lambda m: m[0] if m[0] in kept else "user", pseudonymize_text(text))


def rounded(value: Any) -> Any:
    """``value`` with every float rounded to :data:`DECIMALS` places (nan and infinities become ``None``)."""
    if isinstance(value, bool) or value is None or isinstance(value, (int, str)):
        return value
    if isinstance(value, float):
        return round(value, DECIMALS) if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: rounded(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [rounded(v) for v in value]
    if hasattr(value, "item"):  # numpy scalars
        return rounded(value.item())
    return value


def quote(text: str, limit: int = 200) -> str:
    """A user's words made safe for the report: one line, handles masked, Markdown and HTML escaped."""
    one = mask_accounts(" ".join(str(text).split()))
    if len(one) > limit:
        one = one[: limit - 1] + "…"
    for char in ("\\", "`", "*", "[", "]", "|", "#"):
        one = one.replace(char, "\\" + char)
    return one.replace("<", "&lt;").replace(">", "&gt;")


def _n(value: Any) -> str:
    """A number as JSON writes it (``n/a`` for ``None``)."""
    if value is None:
        return "n/a"
    if isinstance(value, bool):
        return str(value).lower()
    return repr(value) if isinstance(value, float) else str(value)


def _ci(pair: Any) -> str:
    if not pair or pair[0] is None:
        return "n/a"
    return f"{_n(pair[0])} – {_n(pair[1])}"


def _cell(text: Any) -> str:
    return quote(str(text), 120)


def render_markdown(doc: dict[str, Any]) -> str:
    """The readable report of a (rounded) analysis document."""
    lines: list[str] = []
    add = lines.append
    meta = doc["input"]
    add("# Community analysis")
    add("")
    add(
        f"Input `{_cell(meta['source'])}`; target model {_cell(meta['target_model'] or 'unknown')}; labeller "
        f"`{_cell(doc['labeller']['backend'])}` (prompts {', '.join(doc['labeller']['prompt_versions'].values())}). "
        "What each number means and its source: docs/analysis.md."
    )
    add("")
    add("| config | samples | feedback texts |")
    add("|---|---:|---:|")
    for config, counts in meta["configs"].items():
        add(f"| {config} | {_n(counts['samples'])} | {_n(counts['feedback'])} |")
    if meta["problems"]:
        add("")
        add(f"Input problems: {_n(meta['n_problems'])} (listed in analysis.json, input.problems).")

    fail = doc["failures"]
    add("")
    add("## Failures observed by users (ECHO Fig. 4)")
    add("")
    add(
        f"Texts labelled: {_n(fail['summary']['items'])}; with at least one failure: "
        f"{_n(fail['summary']['with_failure'])}; labeller failures (left unlabelled): {_n(fail['summary']['failures'])}."
    )
    add("")
    add("| category | kind | texts | samples | metric |")
    add("|---|---|---:|---:|---|")
    for row in fail["categories"]:
        metric = f"`{row['metric']}`" if row["metric"] else "no metric yet"
        name = row["category"] + ("" if row["in_taxonomy"] else " (open)")
        add(f"| {_cell(name)} | {row['kind']} | {_n(row['items'])} | {_n(row['samples'])} | {metric} |")
    uncovered = [r["category"] for r in fail["categories"] if not r["metric"]]
    if uncovered:
        add("")
        add("Complaints no metric measures yet: " + ", ".join(_cell(c) for c in uncovered) + ".")
    folded = [r for r in fail["categories"] if r.get("given_as")]
    if folded:
        add("")
        add("Open categories (outside the taxonomy), with the names the labeller gave them:")
        add("")
        for row in folded:
            add(f"- {_cell(row['category'])}: " + ", ".join(f'"{_cell(g)}"' for g in row["given_as"]))
    _examples(lines, fail["categories"])
    _failed(lines, fail["failed_items"])

    beh = doc["behaviours"]
    add("")
    add("## How users interact (ECHO Fig. 5)")
    add("")
    add("| behaviour | texts | samples |")
    add("|---|---:|---:|")
    for row in beh["categories"]:
        add(f"| {_cell(row['category'])} | {_n(row['items'])} | {_n(row['samples'])} |")
    _examples(lines, beh["categories"])

    tasks = doc["tasks"]
    add("")
    add("## Tasks")
    add("")
    add(
        f"Prompts labelled: {_n(tasks['summary']['items'])}; without a task: {_n(tasks['summary']['unlabelled'])}; "
        f"labeller failures (left unlabelled): {_n(tasks['summary']['failures'])}."
    )
    add("")
    present = list(meta["configs"])
    add("| task | new in ECHO | prompts | " + " | ".join(present) + " |")
    add("|---|---|---:|" + "---:|" * len(present))
    for row in tasks["tasks"]:
        new = "yes" if row["new_task"] else "no"
        counts = " | ".join(_n(row["by_config"].get(c)) for c in present)
        add(f"| {_cell(row['task'])} | {new} | {_n(row['items'])} | {counts} |")
    _examples(lines, tasks["tasks"], key="task")
    _failed(lines, tasks["failed_items"])

    div = doc["diversity"]
    add("")
    add("## Prompt diversity and fluency (ECHO Fig. 3)")
    add("")
    add(
        f"Subset statistics at a common size of {_n(div['sample_size'])} prompts ({_n(div['n_boot'])} subsets)."
    )
    smaller = [r["name"] for r in div["sets"] if r["sample_size"] is None]
    if smaller:
        add(
            "Smaller than the common size, so without a value at it (n/a): "
            + ", ".join(_cell(n) for n in smaller)
            + "."
        )
    add("")
    add(
        "| prompt set | prompts | unique first bigrams | at common size | interval | distinct-1 | distinct-2 | "
        "mean words | interval |"
    )
    add("|---|---:|---:|---:|---|---:|---:|---:|---|")
    for row in div["sets"]:
        at = row["at_sample_size"]["unique_first_bigrams"]
        add(
            f"| {_cell(row['name'])} | {_n(row['n_prompts'])} | {_n(row['unique_first_bigrams'])} | {_n(at['mean'])} | "
            f"{_ci(at['ci'])} | {_n(row['distinct_1'])} | {_n(row['distinct_2'])} | {_n(row['mean_words'])} | "
            f"{_ci(row['mean_words_ci'])} |"
        )
    flu = doc["fluency"]
    add("")
    if flu["model"] is None:
        add(f"Perplexity: not computed ({_cell(flu['reason'])}).")
    else:
        add(f"Perplexity under `{_cell(flu['model'])}` (lower is more fluent):")
        add("")
        add(
            "| prompt set | prompts scored | cut to the context | tokens | perplexity | mean prompt perplexity | "
            "interval |"
        )
        add("|---|---:|---:|---:|---:|---:|---|")
        for row in flu["sets"]:
            add(
                f"| {_cell(row['name'])} | {_n(row['n_scored'])} | {_n(row['truncated'])} | {_n(row['tokens'])} | "
                f"{_n(row['perplexity'])} | {_n(row['mean_prompt_perplexity'])} | "
                f"{_ci(row['mean_prompt_perplexity_ci'])} |"
            )

    act = doc["activity"]
    add("")
    add("## Activity over time (ECHO Fig. 5)")
    add("")
    add(f"Day 0 is the {act['reference']} ({_cell(act['origin'] or 'n/a')}); peak day {_n(act['peak_day'])}.")
    add("")
    add("| day | date | samples |")
    add("|---:|---|---:|")
    for row in act["days"]:
        if row["samples"]:
            add(f"| {_n(row['day'])} | {row['date']} | {_n(row['samples'])} |")
    if act["undated"]:
        add("")
        add(
            "Samples without a readable date: "
            + ", ".join(f"{k} {_n(v)}" for k, v in act["undated"].items())
            + "."
        )
    add("")
    add("## Plots")
    add("")
    for name, path in doc["plots"].items():
        add(f"![{name}]({path})")
    add("")
    return "\n".join(lines)


def _examples(lines: list[str], rows: list[dict[str, Any]], key: str = "category") -> None:
    shown = [r for r in rows if r.get("examples")]
    if not shown:
        return
    lines.append("")
    lines.append("Examples (the labeller's evidence, then the text):")
    lines.append("")
    for row in shown:
        for ex in row["examples"]:
            lines.append(
                f"- **{_cell(row[key])}** ({ex['config']}): \u201c{quote(ex['evidence'])}\u201d — {quote(ex['text'])}"
            )


def _failed(lines: list[str], failed: list[dict[str, Any]]) -> None:
    if not failed:
        return
    lines.append("")
    lines.append("Texts the labeller failed on (kept unlabelled):")
    lines.append("")
    for entry in failed[:20]:
        lines.append(f"- {_cell(entry['item_id'])}: {quote(entry['reason'])}")


# -- plots ---------------------------------------------------------------------------------------------------------
def _figure(width: float, height: float) -> Any:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height), dpi=110, layout="constrained")
    FigureCanvasAgg(fig)
    return fig


def _save(fig: Any, root: Path, relative: str) -> None:
    from echo_dataset.safe_io import open_atomic

    with open_atomic(root, root / relative, "wb") as f:
        fig.savefig(f, format="png")


_PLAIN = {"parse_math": False}


def _whole_numbers(axis: Any) -> None:
    """Ticks at whole numbers only: counts and days have no halves."""
    from matplotlib.ticker import MaxNLocator

    axis.set_major_locator(MaxNLocator(integer=True))


def write_plots(doc: dict[str, Any], root: Path) -> dict[str, str]:
    """Draw the four plots of ``doc`` into ``root/plots``; returns ``{key: relative path}`` of those written
    (a plot with nothing to show is not written)."""
    written: dict[str, str] = {}
    cats = doc["failures"]["categories"]
    if cats:
        fig = _figure(7, 0.45 * len(cats) + 1.2)
        ax = fig.add_subplot()
        names = [c["category"] for c in cats][::-1]
        counts = [c["items"] for c in cats][::-1]
        colors = ["#2b7bba" if c["metric"] else "#d95f02" for c in cats][::-1]
        ax.barh(range(len(names)), counts, color=colors)
        ax.set_yticks(range(len(names)), names, **_PLAIN)
        ax.set_xlabel("feedback texts")
        _whole_numbers(ax.xaxis)
        ax.set_title("Failure categories (blue: a metric measures it; orange: no metric yet)", fontsize=9)
        _save(fig, root, PLOTS["failures"])
        written["failures"] = PLOTS["failures"]
    tasks = doc["tasks"]["tasks"]
    if tasks:
        fig = _figure(7, 0.45 * len(tasks) + 1.2)
        ax = fig.add_subplot()
        names = [t["task"] for t in tasks][::-1]
        ax.barh(
            range(len(names)),
            [t["items"] for t in tasks][::-1],
            color=["#1b9e77" if t["new_task"] else "#999999" for t in tasks][::-1],
        )
        ax.set_yticks(range(len(names)), names, **_PLAIN)
        ax.set_xlabel("prompts")
        _whole_numbers(ax.xaxis)
        ax.set_title("Tasks (green: new tasks ECHO surfaced)", fontsize=9)
        _save(fig, root, PLOTS["tasks"])
        written["tasks"] = PLOTS["tasks"]
    sets = doc["diversity"]["sets"]
    if sets:
        flu = {r["name"]: r for r in doc["fluency"]["sets"]}
        panels = 3 if flu else 2
        fig = _figure(3.2 * panels, 3.4)
        names = [s["name"] for s in sets]
        size = doc["diversity"]["sample_size"]
        for panel, (stat, title, color) in enumerate(
            (
                ("unique_first_bigrams", f"unique first bigrams per {size} prompts", "#2b7bba"),
                ("distinct_2", f"distinct-2 per {size} prompts", "#7570b3"),
            ),
            1,
        ):
            # both at the common size (full-set values grow or shrink with a set's size); a set smaller than
            # --sample-size has no value there: no bar rather than a 0
            ax = fig.add_subplot(1, panels, panel)
            at = [s["at_sample_size"][stat] for s in sets]
            means = [math.nan if a["mean"] is None else a["mean"] for a in at]
            err = [
                [0.0 if a["mean"] is None else max(a["mean"] - a["ci"][0], 0) for a in at],
                [0.0 if a["mean"] is None else max(a["ci"][1] - a["mean"], 0) for a in at],
            ]
            ax.bar(range(len(names)), means, yerr=err, color=color, capsize=3)
            ax.set_xticks(range(len(names)), names, rotation=60, ha="right", fontsize=7, **_PLAIN)
            ax.set_title(title, fontsize=9)
        if flu:
            ax = fig.add_subplot(1, panels, 3)
            # a set without a perplexity gets no bar (a 0 would read as the most fluent)
            values = [(flu.get(n) or {}).get("perplexity") for n in names]
            ax.bar(range(len(names)), [math.nan if v is None else v for v in values], color="#e7298a")
            ax.set_xticks(range(len(names)), names, rotation=60, ha="right", fontsize=7, **_PLAIN)
            ax.set_title("perplexity (lower: more fluent)", fontsize=9)
        _save(fig, root, PLOTS["diversity"])
        written["diversity"] = PLOTS["diversity"]
    days = doc["activity"]["days"]
    if days:
        fig = _figure(7, 3)
        ax = fig.add_subplot()
        ax.bar([d["day"] for d in days], [d["samples"] for d in days], color="#66a61e")
        ax.set_xlabel(f"days since the {doc['activity']['reference']}")
        ax.set_ylabel("samples")
        _whole_numbers(ax.xaxis)
        _whole_numbers(ax.yaxis)
        ax.set_title("Activity over time", fontsize=9)
        _save(fig, root, PLOTS["activity"])
        written["activity"] = PLOTS["activity"]
    return written
