"""Shared checks of the analysis tests: numbers in analysis.md against analysis.json, independent counts."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

_NUMBER = re.compile(r"(?<![\w.:/-])-?\d+(?:\.\d+)?(?![\w.:/-]|\.\d)")


def json_numbers(value: Any) -> set[float]:
    """Every number anywhere in a JSON document (bools excluded)."""
    out: set[float] = set()
    if isinstance(value, bool) or value is None:
        return out
    if isinstance(value, (int, float)):
        out.add(float(value))
    elif isinstance(value, dict):
        for v in value.values():
            out |= json_numbers(v)
    elif isinstance(value, list):
        for v in value:
            out |= json_numbers(v)
    return out


def md_numbers(markdown: str) -> list[tuple[str, float]]:
    """The numbers of analysis.md's tables and summary sentences (headings, quotes and paths left out)."""
    found = []
    for line in markdown.splitlines():
        if line.startswith(("#", "- ", "![", "Input ")) or set(line) <= set("|-: "):
            continue
        for cell in line.split("|"):
            if cell.strip().count("-") == 2 and re.fullmatch(r"\s*\d{4}-\d{2}-\d{2}\s*", cell):
                continue  # a date
            for match in _NUMBER.finditer(cell):
                found.append((line, float(match[0])))
    return found


def assert_md_matches_json(out: Path, doc: dict[str, Any]) -> None:
    """Every number printed in analysis.md is a number of analysis.json, written the same way."""
    markdown = (out / "analysis.md").read_text(encoding="utf-8")
    numbers = json_numbers(doc)
    found = md_numbers(markdown)
    assert found, "no number found in analysis.md"
    missing = [(line, n) for line, n in found if n not in numbers]
    assert not missing, missing[:5]
    assert_md_tables_equal_json(markdown, doc)


def independent_first_bigrams(prompts: list[str]) -> int:
    """Unique first bigrams counted here, without the package: lowercase, split on non-alphanumerics."""
    starts = set()
    for prompt in prompts:
        tokens = [t for t in re.split(r"[\W_]+", prompt.lower()) if t]
        if len(tokens) >= 2:
            starts.add((tokens[0], tokens[1]))
    return len(starts)


def md_row(markdown: str, first_cell: str) -> list[str]:
    """The cells of the first table row of analysis.md whose first cell is ``first_cell``."""
    for line in markdown.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if line.startswith("|") and cells and cells[0] == first_cell:
            return cells
    raise AssertionError(f"no row {first_cell!r} in analysis.md")


def _tables(markdown: str) -> dict[str, list[list[list[str]]]]:
    """analysis.md's tables by section (the text before the first ``## `` heading is section ``""``), each a list
    of body rows of stripped cells."""
    sections: dict[str, list[list[list[str]]]] = {"": []}
    current, table = "", None
    for line in markdown.splitlines():
        if line.startswith("## "):
            current, table = line[3:], None
            sections[current] = []
        elif line.startswith("|"):
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            if table is None:  # the header row
                table = []
                sections[current].append(table)
            elif not set(line) <= set("|-: "):
                table.append(cells)
        else:
            table = None
    return sections


def _same(cell: str, value: Any) -> bool:
    if value is None:
        return cell == "n/a"
    if isinstance(value, list):
        return cell == ("n/a" if value[0] is None else f"{_plain(value[0])} – {_plain(value[1])}")
    return cell == _plain(value)


def _plain(value: Any) -> str:
    return "n/a" if value is None else repr(value) if isinstance(value, float) else str(value)


def assert_md_tables_equal_json(markdown: str, doc: dict[str, Any]) -> None:
    """Row by row and cell by cell, every table of analysis.md holds the numbers of the matching JSON entries, in
    the JSON's order (a stricter check than "every number is somewhere in the JSON")."""
    tables = _tables(markdown)
    bad: list[tuple[str, str, Any]] = []

    def check(where: str, cell: str, value: Any) -> None:
        if not _same(cell, value):
            bad.append((where, cell, value))

    configs = doc["input"]["configs"]
    (inputs,) = tables[""]
    assert len(inputs) == len(configs)
    for row, (config, counts) in zip(inputs, configs.items(), strict=True):
        check(config, row[1], counts["samples"])
        check(config, row[2], counts["feedback"])
    fail = doc["failures"]
    section = tables["Failures observed by users (ECHO Fig. 4)"][0]
    assert len(section) == len(fail["categories"])
    for row, cat in zip(section, fail["categories"], strict=True):
        check(cat["category"], row[2], cat["items"])
        check(cat["category"], row[3], cat["samples"])
        assert row[4] == (f"`{cat['metric']}`" if cat["metric"] else "no metric yet"), (row, cat["metric"])
    s = fail["summary"]
    assert (
        f"Texts labelled: {s['items']}; with at least one failure: {s['with_failure']}; labeller failures "
        f"(left unlabelled): {s['failures']}." in markdown
    )
    section = tables["How users interact (ECHO Fig. 5)"][0]
    assert len(section) == len(doc["behaviours"]["categories"])
    for row, cat in zip(section, doc["behaviours"]["categories"], strict=True):
        check(cat["category"], row[1], cat["items"])
        check(cat["category"], row[2], cat["samples"])
    tasks = doc["tasks"]
    section = tables["Tasks"][0]
    assert len(section) == len(tasks["tasks"])
    for row, task in zip(section, tasks["tasks"], strict=True):
        check(task["task"], row[2], task["items"])
        for cell, config in zip(row[3:], configs, strict=True):
            check(f"{task['task']}/{config}", cell, task["by_config"].get(config))
    t = tasks["summary"]
    assert (
        f"Prompts labelled: {t['items']}; without a task: {t['unlabelled']}; labeller failures (left unlabelled): "
        f"{t['failures']}." in markdown
    )
    div = tables["Prompt diversity and fluency (ECHO Fig. 3)"]
    assert len(div[0]) == len(doc["diversity"]["sets"])
    for row, st in zip(div[0], doc["diversity"]["sets"], strict=True):
        at = st["at_sample_size"]["unique_first_bigrams"]
        values = [st["n_prompts"], st["unique_first_bigrams"], at["mean"], at["ci"], st["distinct_1"]]
        values += [st["distinct_2"], st["mean_words"], st["mean_words_ci"]]
        for cell, value in zip(row[1:], values, strict=True):
            check(st["name"], cell, value)
    if doc["fluency"]["model"] is not None:
        assert len(div[1]) == len(doc["fluency"]["sets"])
        for row, st in zip(div[1], doc["fluency"]["sets"], strict=True):
            values = [
                st["n_scored"],
                st["truncated"],
                st["tokens"],
                st["perplexity"],
                st["mean_prompt_perplexity"],
            ]
            for cell, value in zip(row[1:], [*values, st["mean_prompt_perplexity_ci"]], strict=True):
                check(f"perplexity {st['name']}", cell, value)
    else:
        assert len(div) == 1
    days = [d for d in doc["activity"]["days"] if d["samples"]]
    (activity,) = tables["Activity over time (ECHO Fig. 5)"]
    assert len(activity) == len(days)
    for row, day in zip(activity, days, strict=True):
        check("day", row[0], day["day"])
        assert row[1] == day["date"]
        check(f"day {day['day']}", row[2], day["samples"])
    assert not bad, bad[:5]
