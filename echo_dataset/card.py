"""The dataset card: Hub YAML front matter plus a body rendered from ``echo_dataset/templates/echo_card.md.tmpl``.

The template is a :class:`string.Template` (``$name`` placeholders; jinja2 is not a dependency of echo-bench),
and every table is rendered here, so the template stays plain Markdown. Statistics come from a ``card_context``
dict, usually :func:`card_context_from_report` of a build's ``report.json``; keys that are absent print as
"not recorded".
"""

from __future__ import annotations

import json
import string
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from echo_dataset import CONFIG_NAMES, SPLIT, __version__
from echo_dataset.citation import ECHO_BIBTEX
from echo_dataset.errors import EchoDatasetError
from echo_dataset.features import COLUMN_DOCS

__all__ = [
    "DEFAULT_LICENSE",
    "DEFAULT_LICENSE_NAME",
    "DEFAULT_TEMPLATE",
    "DEFAULT_TERMS",
    "card_context_from_report",
    "front_matter",
    "nsfw_line",
    "render_card",
    "version_section",
]

DEFAULT_TEMPLATE = Path(__file__).resolve().parent / "templates" / "echo_card.md.tmpl"
#: The card's default ``license``: the builder does not own the posts and images, so it claims no open license.
DEFAULT_LICENSE = "other"
#: ``license_name`` of the default: the terms are stated in the card's License section (:data:`DEFAULT_TERMS`).
DEFAULT_LICENSE_NAME = "echo-research-evaluation"
#: The terms the card states under ``license: other``.
DEFAULT_TERMS = (
    "`other` (no open license is granted). The posts, prompts and images were published on social media by "
    "their authors, who keep every right in them; the builder of this dataset does not own them and grants no "
    "license to them. This collection is shared for research evaluation of image models (benchmarking and "
    "analysis), as in ECHO (arXiv 2510.15021); each row links its source posts. Reuse beyond that, and any "
    "redistribution of the images, is subject to the authors' rights and the platforms' terms of service. "
    "Authors can ask for removal of their content through the dataset's discussion page."
)
_UNKNOWN = "not recorded"


def card_context_from_report(report: Mapping[str, Any], **extra: Any) -> dict[str, Any]:
    """A card context from a build's ``report.json`` (keys of ``extra`` win)."""
    versions = report.get("versions") or {}
    context: dict[str, Any] = {
        "target_model": report.get("target_model"),
        "backend": report.get("backend"),
        "backend_snapshots": report.get("backend_snapshots") or [],
        "backend_settings": report.get("backend_settings") or {},
        "prompt_versions": versions.get("prompts") or {},
        "package_version": versions.get("package") or report.get("echo_bench_version"),
        "stages": [
            {k: s.get(k) for k in ("name", "in", "out", "failures")} for s in report.get("stages") or ()
        ],
        "cost": report.get("cost"),
    }
    screening = next((s for s in report.get("stages") or () if s.get("name") == "safety"), None)
    if screening is not None:  # the optional NSFW screening stage ran (build --nsfw-check)
        context["nsfw_screening"] = {k: screening.get(k) for k in ("detector", "threshold", "flagged")}
    context.update(extra)
    return context


def nsfw_line(screening: Mapping[str, Any] | None) -> str | None:
    """The card's provenance line for the NSFW screening, e.g. ``- NSFW screening: `nudenet-3.4.2:320n@...`,
    threshold 0.6; rows flagged (`has_nsfw` true): 2``; ``None`` when no screening ran."""
    if not screening:
        return None
    flagged = screening.get("flagged")
    return (
        f"- NSFW screening: `{screening.get('detector') or _UNKNOWN}`, threshold {screening.get('threshold')}"
        + (f"; rows flagged (`has_nsfw` true): {flagged}" if flagged is not None else "")
    )


def front_matter(
    context: Mapping[str, Any],
    *,
    dataset_info: Sequence[Mapping[str, Any]] | None = None,
    counts: Mapping[str, int] | None = None,
) -> dict[str, Any]:
    """The Hub metadata: license (with ``license_name`` for ``other``), task categories, pretty name, one
    ``configs`` entry per config and, when given, ``dataset_info`` (features and split sizes per config, as
    ``datasets`` writes it).

    With ``counts`` (rows per config), a config of 0 rows is not declared: ``datasets`` cannot load an empty
    split (``Instruction "test" corresponds to no data``). When no config has rows, ``configs`` is left out.
    """
    license_id = context.get("license") or DEFAULT_LICENSE
    declared = [c for c in CONFIG_NAMES if counts is None or counts.get(c, 0) > 0]
    meta: dict[str, Any] = {"license": license_id}
    if license_id == "other":
        meta["license_name"] = context.get("license_name") or DEFAULT_LICENSE_NAME
    meta |= {
        "pretty_name": context.get("pretty_name") or "ECHO benchmark",
        "task_categories": ["text-to-image", "image-to-image"],
        "tags": ["benchmark", "image-generation", "image-editing", "echo-bench"],
    }
    if context.get("version"):  # a versioned (refreshed) build, see echo_dataset.versioning
        meta["version"] = str(context["version"])
    if declared:
        meta["configs"] = [
            {"config_name": c, "data_files": [{"split": SPLIT, "path": f"{c}/{SPLIT}-*.parquet"}]}
            for c in declared
        ]
    if dataset_info:
        meta["dataset_info"] = [dict(i) for i in dataset_info]
    return meta


def _table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    def cell(v: Any) -> str:
        # "<" and ">" as entities: Markdown renderers (the Hub's included) take "<url or media id>" for an HTML tag
        # and drop it from the cell
        if v is None:
            return _UNKNOWN
        text = str(v).replace("|", "\\|").replace("\n", " ")
        return text.replace("<", "&lt;").replace(">", "&gt;")

    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in rows]
    return "\n".join(lines)


def _window(context: Mapping[str, Any]) -> str:
    window = context.get("collection_window")
    if isinstance(window, str):
        return window
    if window and all(window):
        return f"{window[0]} to {window[1]}"
    return _UNKNOWN


def _cost_line(cost: Mapping[str, Any]) -> str:
    """The card's "Curation cost" text from ``report.json``'s ``cost``."""
    tokens = f"{cost.get('input_tokens', 0):,} input and {cost.get('output_tokens', 0):,} output tokens"
    price = cost.get("price") or {}
    if cost.get("usd") is None or not price:
        return f"not priced (no price for the backend's model); {tokens}"
    return (
        f"{cost['usd']:.2f} USD for {tokens}, at the list prices of `{price.get('entry')}` as of "
        f"{price.get('date')} ({price.get('source')})"
    )


def version_section(context: Mapping[str, Any]) -> str | None:
    """The card's "Version" section of a versioned build (``context["version"]``), else ``None``.

    ``context`` keys read: ``version`` (``X.Y.Z``), ``collection_window``, ``previous_version`` and
    ``previous_source`` (the dataset refreshed), ``changes`` (``{added, kept, carried, removed}`` counts and
    ``removed_by_reason``, as ``changes.json`` of ``build --previous`` holds them).
    """
    version = context.get("version")
    if not version:
        return None
    lines = ["## Version", "", f"Version **{version}**, posts collected {_window(context)}."]
    if context.get("previous_source"):
        lines[-1] += (
            f" Refreshed from `{context['previous_source']}`"
            + (f" (version {context['previous_version']})" if context.get("previous_version") else "")
            + ": sample ids are hashes of their source post ids, so a sample keeps its id across versions."
        )
    changes = context.get("changes")
    if changes:
        lines += [
            "",
            _table(
                ("samples", "count"),
                [
                    ("added (new in this collection window)", changes.get("added")),
                    ("kept (found again, rebuilt)", changes.get("kept")),
                    ("carried over unchanged (outside this window)", changes.get("carried")),
                    ("removed", changes.get("removed")),
                ],
            ),
        ]
        reasons = changes.get("removed_by_reason") or {}
        if reasons:
            lines += [
                "",
                "Removed by reason: " + ", ".join(f"{k} {v}" for k, v in sorted(reasons.items())) + ".",
            ]
    return "\n".join(lines)


def render_card(
    context: Mapping[str, Any],
    *,
    counts: Mapping[str, int],
    template: str | Path | None = None,
    dataset_info: Sequence[Mapping[str, Any]] | None = None,
) -> str:
    """The full README.md: YAML front matter and the rendered body.

    Args:
        context: run statistics: ``target_model``, ``collection_window`` (``(first, last)`` or a string),
            ``backend``, ``backend_snapshots``, ``prompt_versions`` (name -> version), ``package_version``,
            ``stages`` (``[{name, in, out, failures}]``), ``dropped`` (Trash/Discard count), ``license``,
            ``license_name``, ``license_note``, ``pretty_name``, ``description``, ``pseudonymized``,
            ``public_salt`` (whether pseudonyms used the public default salt), ``nsfw_screening``
            (``{detector, threshold, flagged}`` of the optional safety stage; see :func:`nsfw_line`),
            ``cost`` (``report.json``'s ``cost``: ``usd``, ``input_tokens``, ``output_tokens``, ``price``; shown as
            "Curation cost").
        counts: rows per config.
        template: a template file; default ``echo_dataset/templates/echo_card.md.tmpl``.
        dataset_info: per-config ``dataset_info`` YAML entries (see :func:`front_matter`).
    """
    path = Path(template) if template is not None else DEFAULT_TEMPLATE
    if not path.is_file():
        raise EchoDatasetError(
            f"dataset card template {str(path)!r} not found; pass template= with a card template of your own"
        )
    backend = context.get("backend")
    rows = [(c, counts.get(c, 0)) for c in CONFIG_NAMES]
    empty = [c for c in CONFIG_NAMES if not counts.get(c, 0)]
    empty_note = (
        f"\n\nNo rows in this build: {', '.join(f'`{c}`' for c in empty)}. An empty config is not declared in the "
        "metadata above (`datasets` cannot load a split of no rows), so `load_dataset` does not offer it; its "
        "empty Parquet file is kept, and `echo_dataset.load_config` reads it as an empty dataset."
        if empty
        else ""
    )
    if context.get("dropped") is not None:
        rows.append(("dropped (Trash / Discard)", context["dropped"]))
    stages = context.get("stages") or []
    snapshots = ", ".join(f"`{s}`" for s in context.get("backend_snapshots") or ()) or _UNKNOWN
    settings = ", ".join(
        f"`{k}={json.dumps(v, sort_keys=True)}`"
        for k, v in sorted((context.get("backend_settings") or {}).items())
    )
    prompts = ", ".join(f"{k} `{v}`" for k, v in sorted((context.get("prompt_versions") or {}).items()))
    provenance = "\n".join(
        [
            f"- Curation backend: `{backend}`" if backend else f"- Curation backend: {_UNKNOWN}",
            f"- Backend snapshots: {snapshots}",
            *(
                []
                if backend == "rules"
                else [f"- Generation settings: {settings or 'defaults (temperature 0)'}"]
            ),
            f"- Prompt versions: {prompts or _UNKNOWN}",
            *(
                []
                if backend == "rules" or not context.get("cost")
                else [f"- Curation cost: {_cost_line(context['cost'])}"]
            ),
            f"- echo-bench version: {context.get('package_version') or __version__}",
            *filter(None, [nsfw_line(context.get("nsfw_screening"))]),
        ]
    )
    baseline = ""
    if backend == "rules":
        baseline = (
            "\n> **Note:** this dataset was curated by echo-bench's `rules` baseline (keyword and structure rules,"
            " no language or vision model), not by the LLM/VLM pipeline of the paper. Expect lower precision.\n"
        )
    license_id = context.get("license") or DEFAULT_LICENSE
    pseudonymized = context.get("pseudonymized", True)
    body = string.Template(path.read_text(encoding="utf-8")).safe_substitute(
        citation=ECHO_BIBTEX,
        pretty_name=context.get("pretty_name") or "ECHO benchmark",
        description=context.get("description")
        or "Prompts, input images and community outputs of an image model, collected from social media.",
        package_version=context.get("package_version") or __version__,
        target_model=context.get("target_model") or _UNKNOWN,
        collection_window=_window(context),
        baseline_note=baseline,
        config_table=_table(("config", "rows"), rows) + empty_note,
        stage_table=_table(
            ("stage", "in", "out", "failures"),
            [(s.get("name"), s.get("in"), s.get("out"), s.get("failures")) for s in stages],
        )
        if stages
        else _UNKNOWN,
        provenance=provenance,
        column_table=_table(("column", "meaning"), [(f"`{k}`", v) for k, v in COLUMN_DOCS.items()]),
        privacy_note=(
            "Account identifiers (handles, user ids and Bluesky DIDs in mentions, author fields, post, profile "
            "and media URLs) are replaced by stable pseudonyms `user_<8 hex>`"
            + (
                " made with the public default salt: anyone can recompute the pseudonym of a known handle."
                if context.get("public_salt")
                else " made with a private salt that is not part of this dataset."
            )
            if pseudonymized
            else "Handles were **not** pseudonymized."
        )
        + " Images and text remain the property of their authors; ask for removal through the dataset's"
        " discussion page.",
        license_note=context.get("license_note")
        or (
            DEFAULT_TERMS
            if license_id == "other"
            else f"`{license_id}`, as chosen by the builder of this dataset. The posts, prompts and images were "
            "published by their authors on social media, who keep their rights in them."
        ),
    )
    section = version_section(context)
    if section is not None:  # only a versioned build has it: other cards stay as they were
        head, sep, tail = body.partition("\n## Configs")
        body = f"{head}\n{section}\n{sep}{tail}" if sep else f"{body.rstrip()}\n\n{section}\n"
    meta = yaml.safe_dump(
        front_matter(context, dataset_info=dataset_info, counts=counts), sort_keys=False, allow_unicode=True
    )
    return f"---\n{meta}---\n\n{body.strip()}\n"
