"""Leaderboards that travel: a GitHub-flavoured Markdown table, and a Hub dataset of results and details.

:func:`leaderboard_markdown` renders a :class:`~echo_builder.judge.leaderboard.Leaderboard` with the columns of
``echo-bench leaderboard``'s table (rank, model, win rate, its 95% interval, Bradley-Terry, Elo, comparisons,
failures, missing outputs) and the notes printed under it, for a README, a pull request or a model card.

:func:`write_results_folder` stages a judge run as a Hub dataset folder with two configs, in the way of
lmms-eval's and the Open LLM Leaderboard's result and detail datasets:

- ``results``: one row per model (rank, the leaderboard's columns, the judges, their reported snapshots and the
  judge prompt versions);
- ``details``: one row per verdict (the columns of :class:`~echo_builder.records.Verdict`);

plus ``run.json`` (the judge run's metadata, when there is one, absolute local paths reduced to their last
component) and a dataset card (``README.md``) naming the
judge snapshots and prompt versions. :func:`push_results` uploads such a folder through an ``HfApi``-like object.
``datasets.load_dataset(FOLDER_OR_REPO, "results")`` reads it back.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from echo_builder.judge.markdown import markdown_cell
from echo_builder.judge.markdown import markdown_table as _markdown_table
from echo_builder.judge.verdicts_file import read_run_meta

if TYPE_CHECKING:  # pragma: no cover
    from echo_builder.judge.leaderboard import Leaderboard
    from echo_builder.records import Verdict

__all__ = [
    "RESULTS_SPLIT",
    "RESULT_CONFIGS",
    "check_repo_id",
    "details_table",
    "leaderboard_markdown",
    "markdown_cell",
    "push_results",
    "read_run_meta",
    "results_table",
    "write_results_folder",
]

#: The two configs of a results dataset and their folders.
RESULT_CONFIGS = ("results", "details")
#: The split every config of a results dataset has (as the Open LLM Leaderboard's ``latest``).
RESULTS_SPLIT = "latest"
_SHARD = f"{RESULTS_SPLIT}-00000-of-00001.parquet"


def _number(value: Any, spec: str) -> str:
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "n/a"
    return format(value, spec)


def _interval(low: Any, high: Any) -> str:
    if low is None or high is None or any(isinstance(v, float) and not math.isfinite(v) for v in (low, high)):
        return "n/a"
    return f"[{low:.3f}, {high:.3f}]"


def criterion_columns(board: Leaderboard) -> list[str]:
    """The criteria of a per-criterion run's board (those with a ``win_rate_<criterion>`` column), in run order."""
    return [c for c in board.meta.get("criteria", []) if f"win_rate_{c}" in board.table.columns]


def leaderboard_markdown(board: Leaderboard) -> str:
    """The leaderboard as GitHub-flavoured Markdown: the ranked table, then the notes the text table prints under it
    (interval method, Bradley-Terry's virtual ties, warnings) and, when there are any, OpenING's tie treatments, judge
    failures per model and judge, and position bias per judge, each as a table; a per-criterion run adds the win
    rate per criterion (one column per criterion).

    Columns of the main table, as ``--format table``: ``#`` (rank, best first), ``model``, ``win rate`` (in [0, 1],
    ties count half), ``95% CI``, ``Bradley-Terry`` (Elo scale), ``Elo`` (online), ``comparisons``, ``failures``
    (judge failures), ``missing`` (samples without an output), and ``bootstrap 95% CI`` with ``--ci normal``.
    Undefined numbers read ``n/a``; model names are escaped (:func:`markdown_cell`).
    """
    records = board.records()
    normal = board.meta.get("ci_method") == "normal-comparisons"
    header = [
        "#",
        "model",
        "win rate",
        "95% CI",
        "Bradley-Terry",
        "Elo",
        "comparisons",
        "failures",
        "missing",
    ]
    right = [True, False, True, False, True, True, True, True, True]
    if normal:
        header.append("bootstrap 95% CI")
        right.append(False)
    rows = []
    for i, r in enumerate(records, 1):
        if r["win_rate"] is None:
            rate, interval = "n/a", "(no comparison)"
        else:
            rate, interval = _number(r["win_rate"], ".3f"), _interval(r["ci_low"], r["ci_high"])
        row = [
            str(i),
            markdown_cell(r["model"]),
            rate,
            interval,
            _number(r["bt_rating"], ".0f"),
            _number(r["elo_rating"], ".0f"),
            str(r["n_comparisons"]),
            str(r["n_failures"]),
            str(r["n_missing"]),
        ]
        if normal:
            row.append(_interval(r.get("bootstrap_ci_low"), r.get("bootstrap_ci_high")))
        rows.append(row)
    lines = _markdown_table(header, rows, right)
    notes = []
    if normal:
        notes.append(
            "95% CI: normal approximation over comparisons, win rate -+ 1.96 sd/sqrt(n) (ECHO's released code); "
            "it treats comparisons sharing a prompt as independent, so it is narrower than the bootstrap over "
            "prompts shown beside it (echo-bench's default)."
        )
    else:
        notes.append(
            f"95% CI: percentile bootstrap ({board.meta.get('n_boot', 'n/a')} replicates); "
            "Bradley-Terry on the Elo scale (mean 1000)."
        )
    if board.meta.get("bt_prior"):
        notes.append(
            f"Bradley-Terry regularised with {board.meta['bt_prior']} virtual ties per model: some model never wins "
            "or never loses (in the data or a bootstrap replicate), where the plain MLE diverges."
        )
    notes += [f"Warning: {markdown_cell(w)}" for w in board.meta.get("warnings", [])]
    for note in notes:
        lines += ["", note]
    if any(r["ties"] for r in records):
        lines += [
            "",
            "Win rate under OpenING's tie treatments (FDT: a tie counts for the side the judge leaned to):",
            "",
        ]
        lines += _markdown_table(
            ["model", "FDT", "tie=0.5", "tie=0", "dropped", "ties"],
            [
                [
                    markdown_cell(r["model"]),
                    *(_number(r[c], ".3f") for c in ("tie_fdt", "tie_half", "tie_zero", "tie_dropped")),
                    str(r["ties"]),
                ]
                for r in records
            ],
            [False, True, True, True, True, True],
        )
    criteria = criterion_columns(board)
    if criteria:
        lines += [
            "",
            "Win rate per criterion (ties count half; the ranking above uses the mean of the criteria):",
            "",
        ]
        lines += _markdown_table(
            ["model", *criteria],
            [
                [markdown_cell(r["model"]), *(_number(r[f"win_rate_{c}"], ".3f") for c in criteria)]
                for r in records
            ],
            [False, *([True] * len(criteria))],
        )
    if board.failures is not None:
        failed = board.failures[board.failures["judge_failures"] + board.failures["missing_output"] > 0]
        if not failed.empty:
            cols = ["model", "judge", "ok", "missing_output", "parse_failure", "refusal", "error"]
            lines += ["", "Judge failures and missing outputs per model and judge:", ""]
            lines += _markdown_table(
                cols,
                [[markdown_cell(v) for v in row] for row in failed[cols].itertuples(index=False)],
                [False, False, True, True, True, True, True],
            )
    if board.position_bias is not None and not board.position_bias.empty:
        bias = board.position_bias
        lines += ["", "Position bias per judge (share of pairs decided by position):", ""]
        lines += _markdown_table(
            [markdown_cell(c) for c in bias.columns],
            [
                [markdown_cell(_number(v, ".3f") if isinstance(v, float) else v) for v in row]
                for row in bias.itertuples(index=False)
            ],
            [c != "judge" for c in bias.columns],
        )
    return "\n".join(lines)


def _public(value: Any) -> Any:
    """``value`` (run metadata) as it may be published: an absolute local path (``/home/alice/builds/lumen``, which
    names the machine's user) becomes its last component (``lumen``); mappings and lists are walked."""
    if isinstance(value, dict):
        return {k: _public(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_public(v) for v in value]
    if isinstance(value, str) and (
        value.startswith(("/", "~")) or (len(value) > 2 and value[1:3] in (":\\", ":/"))
    ):
        return Path(value.replace("\\", "/")).name or value
    return value


def _public_text(text: str) -> str:
    """Free text (a verdict's error) with the user's home folder shown as ``~`` and known secrets redacted."""
    from echo_builder.secrets import redact

    home = str(Path.home())
    if len(home) > 1:
        text = text.replace(home, "~")
    return redact(text)


def _verdict_schema() -> Any:
    """Arrow schema of the ``details`` config: one column per :class:`Verdict` field, strings, float64 or int64."""
    import typing

    import pyarrow as pa

    from echo_builder.records import Verdict

    fields = []
    for name, info in Verdict.model_fields.items():
        kinds = set(typing.get_args(info.annotation)) | {info.annotation}
        kind = pa.float64() if float in kinds else pa.int64() if int in kinds else pa.string()
        fields.append(pa.field(name, kind))
    return pa.schema(fields)


def _run_facts(verdicts: Sequence[Verdict], run_meta: Mapping[str, Any] | None) -> dict[str, Any]:
    """Judges, their reported snapshots and the judge prompt versions, from the verdicts (and ``run.json``)."""
    meta = _public(dict(run_meta or {}))
    judges = sorted({v.judge for v in verdicts})
    snapshots: dict[str, set[str]] = {j: set() for j in judges}
    for v in verdicts:
        if v.judge_snapshot:
            snapshots[v.judge].add(v.judge_snapshot)
    for entry in meta.get("judges") or []:
        if isinstance(entry, dict) and isinstance(entry.get("spec"), str):
            found = entry.get("snapshots") or []
            snapshots.setdefault(entry["spec"], set()).update(s for s in found if isinstance(s, str))
    prompt_versions = {v.prompt_version for v in verdicts if v.prompt_version}
    if isinstance(meta.get("prompt_version"), str) and meta["prompt_version"]:
        prompt_versions.add(meta["prompt_version"])
    return {
        "judges": sorted(snapshots),
        "snapshots": {j: sorted(s) for j, s in sorted(snapshots.items())},
        "prompt_versions": sorted(prompt_versions),
        "judge_prompt": meta.get("judge_prompt") if isinstance(meta.get("judge_prompt"), dict) else None,
        "mode": meta.get("mode") or (verdicts[0].mode if verdicts else None),
        "benchmark": meta.get("benchmark"),
        "config": meta.get("config"),
        "run_version": meta.get("echo_bench_version"),
    }


def results_table(
    board: Leaderboard, verdicts: Sequence[Verdict], run_meta: Mapping[str, Any] | None = None
) -> Any:
    """The ``results`` config as an Arrow table: one row per model, best first.

    Columns: ``rank`` (1 = best), the leaderboard's columns
    (:data:`~echo_builder.judge.leaderboard.LEADERBOARD_COLUMNS`: win rate in [0, 1] with ``ci_low``/``ci_high``,
    Bradley-Terry on the Elo scale with its interval, ``n_comparisons``, ``n_failures``, ``n_missing``, ...), then
    ``judges`` (list of backend specs), ``judge_snapshots`` (``spec=snapshot`` strings, the model versions the judges
    reported), ``prompt_versions`` (judge prompt versions), ``mode``, ``benchmark``, ``config``, ``n_boot``,
    ``echo_bench_version`` (of the package that computed the leaderboard).
    """
    import pyarrow as pa

    from echo_builder import __version__

    facts = _run_facts(verdicts, run_meta)
    frame = board.table.reset_index(drop=True).copy()
    frame.insert(0, "rank", range(1, len(frame) + 1))
    table = pa.Table.from_pandas(frame, preserve_index=False)
    n = len(frame)
    snapshots = [f"{j}={s}" for j, found in facts["snapshots"].items() for s in found]
    extra = {
        "judges": pa.array([facts["judges"]] * n, type=pa.list_(pa.string())),
        "judge_snapshots": pa.array([snapshots] * n, type=pa.list_(pa.string())),
        "prompt_versions": pa.array([facts["prompt_versions"]] * n, type=pa.list_(pa.string())),
        "mode": pa.array([facts["mode"]] * n, type=pa.string()),
        "benchmark": pa.array([facts["benchmark"]] * n, type=pa.string()),
        "config": pa.array([facts["config"]] * n, type=pa.string()),
        "n_boot": pa.array([board.meta.get("n_boot")] * n, type=pa.int64()),
        "echo_bench_version": pa.array([__version__] * n, type=pa.string()),
    }
    for name, column in extra.items():
        table = table.append_column(name, column)
    return table


def details_table(verdicts: Sequence[Verdict]) -> Any:
    """The ``details`` config as an Arrow table: one row per verdict, the :class:`Verdict` fields as columns (text
    with known secrets redacted and the user's home folder shown as ``~``)."""
    import pyarrow as pa

    rows = []
    for v in verdicts:
        row = v.model_dump(mode="json")
        rows.append({k: _public_text(x) if isinstance(x, str) else x for k, x in row.items()})
    return pa.Table.from_pylist(rows, schema=_verdict_schema())


def _yaml_str(text: str) -> str:
    return json.dumps(text)  # a JSON string is a YAML flow scalar: no key, list or comment can hide in it


def _card(
    board: Leaderboard,
    verdicts: Sequence[Verdict],
    run_meta: Mapping[str, Any] | None,
    repo_id: str | None,
    *,
    validity: bool = False,
) -> str:
    from echo_builder import __version__

    facts = _run_facts(verdicts, run_meta)
    what = " ".join(str(x) for x in (facts["config"], facts["mode"]) if x) or "leaderboard"
    lines = [
        "---",
        f"pretty_name: {_yaml_str(f'echo-bench results: {what}')}",
        "tags:",
        "- echo-bench",
        "- evaluation",
        "- leaderboard",
        "configs:",
    ]
    for config in RESULT_CONFIGS:
        lines += [
            f"- config_name: {config}",
            "  data_files:",
            f"  - split: {RESULTS_SPLIT}",
            f"    path: {config}/{RESULTS_SPLIT}-*.parquet",
        ]
    lines += ["---", "", "# echo-bench results", ""]
    lines.append(
        "Results of an ECHO judge run (echo-bench, "
        "[arXiv 2510.15021](https://arxiv.org/abs/2510.15021)): the `results` config has one row per model, the "
        "`details` config one row per judge verdict (failures and missing outputs included), `run.json` the run's "
        "metadata."
        + (
            " `validity.md` (and `validity.json`) is the validity card: judge snapshots, prompt versions, temperature, "
            "failure, refusal and position-bias rates, agreement with humans when measured, Bradley-Terry "
            "regularisation, comparison groups, and what was not measured."
            if validity
            else ""
        )
    )
    lines += ["", "| | |", "|:---|:---|"]
    for label, value in (
        ("benchmark", facts["benchmark"]),
        ("config", facts["config"]),
        ("mode", facts["mode"]),
        ("verdicts", len(verdicts)),
        ("bootstrap replicates", board.meta.get("n_boot")),
        ("interval", board.meta.get("ci_method")),
        ("judged with echo-bench", facts["run_version"]),
        ("ranked with echo-bench", __version__),
    ):
        lines.append(f"| {label} | {markdown_cell(value) if value is not None else 'n/a'} |")
    lines += [
        "",
        "## Judges",
        "",
        "| judge | snapshots the judge reported | verdicts | failures |",
        "|:---|:---|---:|---:|",
    ]
    for judge in facts["judges"]:
        mine = [v for v in verdicts if v.judge == judge]
        failures = sum(1 for v in mine if v.status not in ("ok", "missing_output"))
        shown = ", ".join(markdown_cell(s) for s in facts["snapshots"][judge]) or "not reported"
        lines.append(f"| {markdown_cell(judge)} | {shown} | {len(mine)} | {failures} |")
    lines += ["", "## Judge prompt", ""]
    versions = ", ".join(f"`{markdown_cell(v)}`" for v in facts["prompt_versions"]) or "not recorded"
    lines.append(f"Prompt versions: {versions}.")
    identity = facts["judge_prompt"]
    if identity:
        lines += ["", "| | |", "|:---|:---|"]
        lines += [f"| {markdown_cell(k)} | {markdown_cell(v)} |" for k, v in sorted(identity.items())]
    lines += [
        "",
        "## Leaderboard",
        "",
        leaderboard_markdown(board),
        "",
        "## Load",
        "",
        "```python",
        "import datasets",
        "",
    ]
    target = repo_id or "PATH_OR_REPO"
    for config in RESULT_CONFIGS:
        lines.append(f"{config} = datasets.load_dataset({target!r}, {config!r})[{RESULTS_SPLIT!r}]")
    lines += ["```", ""]
    return "\n".join(lines)


def write_results_folder(
    board: Leaderboard,
    verdicts: Sequence[Verdict],
    folder: str | Path,
    *,
    run_meta: Mapping[str, Any] | None = None,
    repo_id: str | None = None,
    validity: Mapping[str, Any] | None = None,
) -> Path:
    """Stage a results dataset in ``folder`` (new or empty): ``results/`` and ``details/`` (one Parquet shard each,
    split :data:`RESULTS_SPLIT`), ``run.json`` (when ``run_meta`` is given), ``validity.json`` and ``validity.md``
    (when ``validity``, a :func:`echo_builder.judge.validity.validity_report`, is given; local paths reduced to
    their last component) and ``README.md`` (the card, whose YAML declares the two configs). ``repo_id`` only
    fills the card's loading example.

    Returns:
        ``folder``; ``datasets.load_dataset(str(folder), "results")`` reads it.

    Raises:
        ConfigError: ``folder`` exists and is not an empty folder (nothing is replaced), or there are no verdicts.
    """
    import pyarrow.parquet as pq

    from echo_builder.errors import ConfigError
    from echo_builder.judge.verdicts_file import RUN_FILE
    from echo_dataset.safe_io import open_atomic, write_json, write_text

    if not verdicts:
        raise ConfigError("no verdicts to publish")
    root = Path(folder)
    if root.is_symlink() or (root.exists() and (not root.is_dir() or any(root.iterdir()))):
        raise ConfigError(f"{root}: results are staged in a new or empty folder; this one is not")
    for config, table in (
        ("results", results_table(board, verdicts, run_meta)),
        ("details", details_table(verdicts)),
    ):
        (root / config).mkdir(parents=True, exist_ok=True)
        with open_atomic(root, root / config / _SHARD) as f:
            pq.write_table(table, f)
    if run_meta is not None:
        write_json(root, root / RUN_FILE, _public(dict(run_meta)), sort_keys=True)
    if validity is not None:
        from echo_builder.judge.validity import write_validity

        write_validity(root, _public(dict(validity)))
    write_text(
        root, root / "README.md", _card(board, verdicts, run_meta, repo_id, validity=validity is not None)
    )
    return root


def push_results(
    folder: str | Path,
    repo_id: str,
    *,
    api: Any = None,
    token: str | None = None,
    private: bool = False,
    commit_message: str = "Upload echo-bench results",
) -> Any:
    """Create (or reuse) the dataset repository ``repo_id`` and upload a folder written by
    :func:`write_results_folder` in one commit; Parquet shards of an earlier upload are replaced.

    Args:
        api: an ``huggingface_hub.HfApi``-like object (tests pass a fake); default ``HfApi(token=...)``.
        token: Hub token; default ``$HF_TOKEN`` or the saved login. Not needed when ``api`` is given.

    Returns:
        What ``upload_folder`` returned (a ``CommitInfo`` with the real API).

    Raises:
        InvalidHubFolderError: ``repo_id`` is not ``owner/name`` or the folder lacks its card or a config.
        MissingTokenError: no ``api`` and no token. Both are raised before any network work.
        HubError: the Hub cannot be reached or refused a request (nothing was published).
    """
    from echo_dataset.errors import InvalidHubFolderError, MissingTokenError
    from echo_dataset.publish import _hub_errors, _token

    check_repo_id(repo_id)
    root = Path(folder)
    files = ["README.md", *(f"{c}/{_SHARD}" for c in RESULT_CONFIGS)]
    missing = [f for f in files if not (root / f).is_file() or (root / f).is_symlink()]
    if missing:
        raise InvalidHubFolderError(f"{root}: not a results folder: missing {', '.join(missing)}")
    for optional in ("run.json", "validity.json", "validity.md"):
        if (root / optional).is_file() and not (root / optional).is_symlink():
            files.append(optional)
    if api is None:
        resolved = _token(token)
        if not resolved:
            raise MissingTokenError(
                "pushing results needs a Hugging Face token with write access: set HF_TOKEN (or the variable named "
                "by --token-env) or run `hf auth login`; nothing was uploaded"
            )
        from huggingface_hub import HfApi

        api = HfApi(token=resolved)
    with _hub_errors(api, f"creating the dataset repository {repo_id}"):
        api.create_repo(repo_id, repo_type="dataset", exist_ok=True, private=private)
    with _hub_errors(api, f"uploading the results to {repo_id}"):
        return api.upload_folder(
            folder_path=str(root),
            repo_id=repo_id,
            repo_type="dataset",
            commit_message=commit_message,
            allow_patterns=files,
            delete_patterns=[f"{c}/*.parquet" for c in RESULT_CONFIGS],
        )


def check_repo_id(repo_id: str) -> str:
    """``repo_id`` when it is a Hub repository id ``owner/name`` (letters, digits, ``-``, ``_``, ``.``);
    raises :class:`~echo_dataset.errors.InvalidHubFolderError` otherwise."""
    import re

    from echo_dataset.errors import InvalidHubFolderError

    if not re.fullmatch(
        r"[A-Za-z0-9][A-Za-z0-9._-]{0,95}/[A-Za-z0-9][A-Za-z0-9._-]{0,95}", repo_id or ""
    ) or (".." in repo_id or "--" in repo_id or repo_id.endswith(".git")):
        shown = (repo_id or "").encode("unicode_escape").decode("ascii")
        raise InvalidHubFolderError(
            f"repository id must look like 'owner/name' (letters, digits, -, _ and .), got {shown!r}"
        )
    return repo_id
