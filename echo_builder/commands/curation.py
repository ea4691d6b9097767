"""``echo-bench build`` and ``echo-bench publish``: curation into a Hub-ready dataset."""

from __future__ import annotations

import json
import sys
from typing import Any

import click

from echo_builder.commands.options import (
    MAX_CONCURRENCY,
    ByteSize,
    EchoCommand,
    Number,
    RegistryChoice,
    RegistryHelpOption,
    batch_options,
    call_limit_options,
    cost_options,
    nsfw_options,
    parse_options,
    run_config_option,
    run_config_record,
)
from echo_builder.outlock import locks_output
from echo_builder.secrets import protect_logging, redact, register_secret

__all__ = ["build", "diff", "publish"]


class SourcePath(click.Path):
    """A source argument: an existing file or folder, or an ``hf:<repo>[:config]`` dataset reference."""

    def __init__(self) -> None:
        super().__init__(exists=True)

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if isinstance(value, str) and value.startswith("hf:"):
            return value
        return super().convert(value, param, ctx)


@click.command(cls=EchoCommand)
@click.argument("sources", nargs=-1, required=True, type=SourcePath())
@click.option(
    "--out", "out_dir", required=True, type=click.Path(file_okay=False), help="Build folder to write."
)
@click.option(
    "--backend",
    cls=RegistryHelpOption,
    registry_kind="backend",
    default="rules",
    show_default=True,
    help="rules (no model) or an LLM spec <backend>:<model> such as openai:gpt-4o for relevance and extraction. "
    "Backends: {names}.",
)
@click.option(
    "--base-url",
    help="Server URL for an openai: backend; give it once (replicas, several --base-url, are a judge option).",
)
@click.option(
    "-o", "--option", "options", multiple=True, metavar="KEY=VALUE", help="Backend option; repeatable."
)
@click.option("--target-model", help="The image model the benchmark is about, e.g. 'GPT-4o'.")
@click.option(
    "--launch-date", help="The target model's launch date (YYYY-MM-DD), for time-windowed keywords."
)
@click.option(
    "--keywords",
    "keywords_file",
    type=click.Path(exists=True, dir_okay=False),
    help="Keyword list: JSON, a list of terms or of objects with the keys term (required), window_days, "
    'before_days (or {"keywords": [...]}), or text: one term per line, optional TAB/| window in days.',
)
@click.option(
    "--format",
    "source_format",
    type=RegistryChoice("source"),
    help="Force a source format instead of auto-detection (plugin formats included; see 'echo-bench plugins').",
)
@click.option(
    "--prefilter",
    is_flag=True,
    help="Read only the posts matching the keywords (and their time windows) and the threads around them, in two "
    "streaming passes: memory bounded by the posts kept, not the size of the sources. For dumps of millions of "
    "posts (a Reddit .zst archive); needs --keywords or --target-model.",
)
@click.option(
    "--hf-columns",
    "hf_columns",
    metavar="FIELD=COLUMN,...",
    help="For hf:<repo>[:config] sources (a datasets-loadable prompt collection): which column holds what, e.g. "
    "prompt=text,id=uid,image=image_url. Fields: prompt (default: a prompt/text/caption/instruction column), id, "
    "url, author, title, image, needs_input_image.",
)
@click.option(
    "--threshold",
    default=4,
    show_default=True,
    type=Number(int, 1, 5),
    help="Keep posts whose relevance score (1-5, by the LLM or the rules baseline) is at least this.",
)
@click.option(
    "--concurrency",
    default=8,
    show_default=True,
    type=Number(int, 1, MAX_CONCURRENCY),
    help=f"Model calls in flight, 1-{MAX_CONCURRENCY}.",
)
@call_limit_options
@click.option(
    "--cache", "cache_dir", type=click.Path(file_okay=False), help="Call cache folder (default OUT/cache)."
)
@click.option(
    "--resume", is_flag=True, help="Continue a build in OUT; completed model calls are not repeated."
)
@click.option("--offline", is_flag=True, help="Download no image: use only those already in the media store.")
@click.option(
    "--media-allow",
    "media_allow",
    multiple=True,
    metavar="HOST[:PORT]|CIDR",
    help="Let the media stage fetch from this non-public host, address or network (a local mirror, e.g. "
    "127.0.0.1:8000 or 10.0.0.0/8); repeatable. Link-local and cloud-metadata addresses are never fetched.",
)
@click.option(
    "--allow-private-media",
    is_flag=True,
    hidden=True,
    help="Deprecated: the same as --media-allow 127.0.0.0/8 --media-allow ::1 (loopback only).",
)
@click.option(
    "--pseudonymize/--no-pseudonymize",
    default=True,
    show_default=True,
    help="Replace account identifiers (handles, user ids, DIDs) in the dataset's text, URLs and author fields.",
)
@click.option(
    "--salt-file",
    metavar="FILE",  # checked by the build (one 'error:' line naming the file), not by click
    help="File holding the pseudonym salt (at least 16 characters), to give several builds the same pseudonyms. "
    "Default: a random salt per build. Either way it is kept in OUT/stages/salt (reused by --resume), never in "
    "the dataset nor in what publish uploads.",
)
@click.option(
    "--previous",
    metavar="DATASET",
    help="Refresh this earlier version (a dataset or build folder, or a Hub dataset id): samples found again keep "
    "their ids, published samples outside the new collection window are carried over unchanged, removed ones "
    "are recorded with a reason (takedown, filtered, deleted, missing) in OUT/changes.json; the card gets a "
    "Version section. See docs/dataset.md#versions.",
)
@click.option(
    "--version",
    "dataset_version",
    metavar="X.Y.Z",
    help="The dataset's version for the card. Default with --previous: its version with the minor number bumped "
    "(1.0.0 when it has none); without --previous: no version.",
)
@click.option(
    "--takedowns",
    metavar="FILE",
    help="Sample ids (echo-...) or post ids (x:123) to remove, one a line (# comments); recorded as takedowns.",
)
@click.option(
    "--license",
    "license_id",
    metavar="ID",
    default="other",
    show_default=True,
    help="The card's license (a Hub license id). The default 'other' claims no rights: the card states that the "
    "posts and images remain their authors' and are shared for research evaluation. Set an open license such as "
    "cc-by-4.0 only if you hold the rights to grant it.",
)
@click.option(
    "--max-shard-size",
    "max_shard_size",
    type=ByteSize(),
    default="500MB",
    show_default=True,
    help="Split a config's Parquet file into shards test-0000K-of-0000N.parquet past this size (e.g. 200MB, "
    "1GB; as datasets' push_to_hub max_shard_size). The analysis config of a full ECHO build is tens of GB.",
)
@click.option(
    "--skip-stage",
    "skip_stages",
    multiple=True,
    metavar="NAME",
    help="Leave out this plugin stage (installed through the echo_bench.stages entry point); repeatable. The "
    "built-in stages always run.",
)
@nsfw_options(
    "Screen every dataset row's images for NSFW content (the optional safety stage) and fill has_nsfw: "
    "'nudenet' (NudeNet's detector shipped in its wheel, offline on CPU; pip install 'echo-bench[nsfw]') or a VLM "
    "spec such as openai:gpt-4o. Per-image detections go to OUT/stages/safety.jsonl, the detector and threshold "
    "to report.json and the card. Default: no screening (has_nsfw stays null).",
    "Checker option; repeatable. nudenet: classes=A,B (the NudeNet classes that flag); a VLM: prompt_file=FILE "
    "(a prompt of format echo-bench-nsfw-prompt/1) and its backend's options (base_url, ...).",
)
@click.option(
    "--feedback-verdicts",
    is_flag=True,
    help="Label each community_feedback reply's verdict on the output it answers (positive, negative, mixed, "
    "not_a_verdict; the optional feedback_verdict stage) with the build's backend and the versioned prompt "
    "prompt_files/feedback-verdict.yaml, or the keyword lexicon with --backend rules. Written to "
    "OUT/stages/feedback_verdict.jsonl; read by `echo-bench agreement RUN --community`.",
)
@click.option(
    "--expand",
    "expand",
    multiple=True,
    type=click.Choice(["x", "bluesky", "reddit"]),
    help="Fetch the kept posts' missing ancestors and replies from this platform before threads (the optional "
    "expand stage, ECHO's conversation fetching), recursively for the posts found; repeatable. Credentials from "
    "the environment as collect reads them (docs/collect.md). Every page is cached in OUT/expand/: a rerun makes "
    "no request. Default: no request, only the posts in the files are linked.",
)
@click.option(
    "--expand-depth",
    type=Number(int, 1),
    default=8,
    show_default=True,
    help="Rounds of expansion: round 1 fetches around the kept posts, round 2 around what round 1 found, ...",
)
@click.option(
    "--expand-max-tree",
    type=Number(int, 1),
    default=500,
    show_default=True,
    help="The most posts expansion adds to one conversation.",
)
@click.option(
    "--expand-max-requests",
    type=Number(int, 0),
    default=1000,
    show_default=True,
    help="The most pages expansion fetches per platform (cached pages count, so a resumed build stops at the "
    "same place). X bills every post read.",
)
@click.option(
    "--expand-max-wait",
    "expand_max_wait_s",
    type=Number(float, 0),
    default=900.0,
    show_default=True,
    help="Seconds expansion may wait for rate limits, in all (one wait is capped at 3600 s, however far off the "
    "platform's reset header says); past it expansion stops with what it has and the build goes on.",
)
@click.option(
    "--expand-archive",
    is_flag=True,
    help="X: search conversations in the full archive (Pro or Enterprise access) instead of the last 7 days.",
)
@click.option(
    "--expand-base-url",
    metavar="URL",
    help="Send expansion requests to another API host (a proxy, or a test server).",
)
@batch_options
@cost_options
@run_config_option
@locks_output("build")
def build(
    sources: tuple[str, ...],
    out_dir: str,
    backend: str,
    base_url: str | None,
    options: tuple[str, ...],
    target_model: str | None,
    launch_date: str | None,
    keywords_file: str | None,
    max_shard_size: int,
    source_format: str | None,
    prefilter: bool,
    hf_columns: str | None,
    threshold: int,
    concurrency: int,
    timeout_s: float,
    max_attempts: int,
    cache_dir: str | None,
    resume: bool,
    offline: bool,
    media_allow: tuple[str, ...],
    allow_private_media: bool,
    pseudonymize: bool,
    salt_file: str | None,
    previous: str | None,
    dataset_version: str | None,
    takedowns: str | None,
    license_id: str,
    skip_stages: tuple[str, ...],
    nsfw_check: str | None,
    nsfw_threshold: float | None,
    nsfw_options: tuple[str, ...],
    expand: tuple[str, ...],
    expand_depth: int,
    expand_max_tree: int,
    expand_max_requests: int,
    expand_max_wait_s: float,
    expand_archive: bool,
    expand_base_url: str | None,
    batch: bool = False,
    batch_retry: str = "online",
    batch_poll_s: float = 30.0,
    max_cost: float | None = None,
    prices_file: str | None = None,
    feedback_verdicts: bool = False,
) -> None:
    """Curate posts from SOURCES (export files or folders) into benchmark samples.

    SOURCES may be compressed (.zst, .gz, .bz2, .xz, read on the fly) and as large as the disk: use --prefilter for
    dumps of millions of posts. hf:<repo>[:config] loads a datasets prompt collection (see --hf-columns).

    Stages: collect, query, relevance, expand (only with --expand), threads, extract, media, roles, templates, screenshots, tier,
    applicability, safety (only with --nsfw-check), feedback_verdict (only with --feedback-verdicts), and any installed plugin stage in its declared place. Writes OUT/stages/*.jsonl, OUT/report.json and the dataset itself: OUT/<config>/*.parquet
    with OUT/README.md, readable with datasets.load_dataset(OUT, "text_to_image") and ready for `publish`.
    """
    from echo_builder.pipeline import BuildConfig
    from echo_builder.pipeline import build as run_build
    from echo_builder.sources.hf import parse_hf_columns

    if allow_private_media:
        click.echo(
            "note: --allow-private-media is deprecated and now allows loopback only (127.0.0.0/8, ::1); "
            "name a local mirror with --media-allow HOST[:PORT] or CIDR instead",
            err=True,
        )
    from echo_builder.backends import check_spec

    check_spec(backend)  # an unknown or incomplete spec is refused before the build starts
    opts = parse_options(options)
    if base_url:
        opts["base_url"] = base_url
    config = BuildConfig(
        sources=list(sources),
        out_dir=out_dir,
        backend=backend,
        backend_options=opts,
        target_model=target_model,
        launch_date=launch_date,
        keywords_file=keywords_file,
        max_shard_bytes=max_shard_size,
        source_format=source_format,
        prefilter=prefilter,
        hf_columns=parse_hf_columns(hf_columns),
        relevance_threshold=threshold,
        concurrency=concurrency,
        timeout_s=timeout_s,
        max_attempts=max_attempts,
        cache_dir=cache_dir,
        resume=resume,
        offline=offline,
        media_allow=media_allow,
        allow_private_media=allow_private_media,
        pseudonymize=pseudonymize,
        salt_file=salt_file,
        previous=previous,
        version=dataset_version,
        takedowns=takedowns,
        license=license_id,
        skip_stages=skip_stages,
        nsfw_check=nsfw_check,
        nsfw_threshold=nsfw_threshold,
        nsfw_options=parse_options(nsfw_options),
        feedback_verdicts=feedback_verdicts,
        expand=expand,
        expand_depth=expand_depth,
        expand_max_tree=expand_max_tree,
        expand_max_requests=expand_max_requests,
        expand_options={
            "max_wait_s": expand_max_wait_s,
            **({"archive": True} if expand_archive else {}),
            **({"base_url": expand_base_url} if expand_base_url else {}),
        },
        batch=batch,
        batch_retry=batch_retry,
        batch_poll_s=batch_poll_s,
        max_cost_usd=max_cost,
        prices_file=prices_file,
    )
    if not expand and (expand_archive or expand_base_url):
        raise click.UsageError("--expand-archive and --expand-base-url need --expand")
    if nsfw_check is None and (nsfw_threshold is not None or nsfw_options):
        raise click.UsageError("--nsfw-threshold and --nsfw-option need --nsfw-check")
    header_shown = False

    def show(entry: dict[str, Any]) -> None:
        nonlocal header_shown
        if not header_shown:  # printed with the first finished stage, so a failed start prints only the error
            click.echo(f"{'stage':<22} {'in':>8} {'out':>8} {'failures':>8}")
            header_shown = True
        click.echo(f"{entry['name']:<22} {entry['in']:>8} {entry['out']:>8} {entry['failures']:>8}")

    result = run_build(config, on_stage=show)
    _record_run_config(result.out_dir)
    stages = {entry["name"]: entry for entry in result.report["stages"]}
    _show_source_problems(stages["collect"], result.out_dir)
    expansion_errors = (result.report.get("expansion") or {}).get("errors") or []
    if expansion_errors:  # the build went on without those posts: say why here, not only in report.json
        click.echo(
            f"\nwarning: reply-tree expansion stopped early ({len(expansion_errors)} error(s)):", err=True
        )
        for error in expansion_errors[:10]:
            click.echo(f"  {error}", err=True)
        if len(expansion_errors) > 10:
            click.echo(
                f"  ... and {len(expansion_errors) - 10} more in report.json's expansion.errors", err=True
            )
    configs = stages["applicability"]["configs"]
    click.echo(
        f"\nsamples: {stages['extract']['out']} extracted; configs: "
        + ", ".join(f"{name} {n}" for name, n in configs.items())
        + f", dropped {stages['applicability']['dropped']}; report: {result.out_dir / 'report.json'}"
    )
    refresh = result.report.get("refresh")
    if refresh is not None:
        counts = refresh["counts"]
        reasons = ", ".join(f"{k} {v}" for k, v in counts["removed_by_reason"].items())
        click.echo(
            f"version {refresh['version']}: added {counts['added']}, kept {counts['kept']}, carried over "
            f"{counts['carried']}, removed {counts['removed']}"
            + (f" ({reasons})" if reasons else "")
            + f"; changes: {result.out_dir / 'changes.json'}"
        )
    if offline:
        from echo_builder.stages.media import OFFLINE_MISS

        missed = sum(OFFLINE_MISS in error for sample in result.samples for error in sample.media_errors)
        if missed:
            click.echo(
                f"note: {missed} image(s) were not in the media store and --offline downloads nothing; those "
                f"samples lack their images (see {result.out_dir / 'stages' / 'failures.jsonl'}). Copy an "
                f"earlier build's media/ folder into {result.out_dir}, or build without --offline.",
                err=True,
            )
    dead = [
        n for n in ("relevance", "extract") if stages[n]["in"] and stages[n]["failures"] == stages[n]["in"]
    ]
    if dead:
        click.echo(
            f"error: every model call of {' and '.join(dead)} failed; see {result.out_dir / 'stages' / 'failures.jsonl'}",
            err=True,
        )
        sys.exit(1)


def _show_source_problems(collect: dict[str, Any], out: Any) -> None:
    """After the stage table: every source file with errors (count and first reason) and every file of a given
    folder that was not read, on stderr; the build goes on with the good files, so this is the place a user sees
    that part of the input was lost."""
    bad = collect.get("files_with_errors") or []
    skipped = collect.get("skipped_files") or []
    if bad:
        click.echo(
            f"\nwarning: {len(bad)} of {collect.get('files', len(bad))} source files had errors (records or the "
            f"whole file skipped; all in {out}/stages/collect_problems.jsonl):",
            err=True,
        )
        for entry in bad[:20]:
            click.echo(f"  {entry['file']}: {entry['errors']} error(s); first: {entry['first']}", err=True)
        if len(bad) > 20:
            click.echo(f"  ... and {len(bad) - 20} more files", err=True)
    if skipped:
        shown = ", ".join(map(str, skipped[:10])) + (
            f" and {len(skipped) - 10} more" if len(skipped) > 10 else ""
        )
        click.echo(
            f"note: {len(skipped)} file(s) in the given folders are not a source format and were not read "
            f"(.json, .jsonl, .ndjson, optionally .zst/.gz/.bz2/.xz): {shown}",
            err=True,
        )


def _record_run_config(out: Any) -> None:
    """With ``--run-config``, add what the file gave (:func:`run_config_record`) to ``OUT/report.json`` under
    ``run_config``; without it the report is left exactly as the build wrote it."""
    import json
    from pathlib import Path

    from echo_dataset.safe_io import write_text

    record = run_config_record()
    path = Path(out) / "report.json"
    if record is None or not path.is_file() or path.is_symlink():
        return
    report = json.loads(path.read_text(encoding="utf-8"))
    report["run_config"] = record
    text = json.dumps(report, indent=2, ensure_ascii=False, sort_keys=True, default=str)
    write_text(out, path, redact(text) + "\n")


@click.command(cls=EchoCommand)
@click.argument("directory", type=click.Path(exists=True, file_okay=False))
@click.option("--repo-id", required=True, help="Hub dataset repository, owner/name.")
@click.option("--private", is_flag=True, help="Create the repository as private.")
@click.option("--token", envvar="HF_TOKEN", help="Hub token (default: $HF_TOKEN or the saved login).")
@click.option(
    "--skip-pseudonym-check",
    is_flag=True,
    help="Upload even a dataset built with --no-pseudonymize. By default publish refuses it; publish itself "
    "never changes a file (pseudonymization happens at build time).",
)
# deprecated spellings: --no-pseudonymize for --skip-pseudonym-check; --pseudonymize, the default check
@click.option("--no-pseudonymize", "old_skip", is_flag=True, hidden=True)
@click.option("--pseudonymize", "old_check", is_flag=True, hidden=True)
@click.option(
    "--version",
    "dataset_version",
    metavar="X.Y.Z",
    help="Tag the uploaded commit vX.Y.Z on the dataset repo (load it with revision='vX.Y.Z'); must match the "
    "card's version when it records one (build --version / --previous).",
)
def publish(
    directory: str,
    repo_id: str,
    private: bool,
    token: str | None,
    skip_pseudonym_check: bool,
    old_skip: bool,
    old_check: bool,
    dataset_version: str | None,
) -> None:
    """Upload a built dataset folder (every config's Parquet and the card) to the Hub in one commit.

    Only README.md and each config's Parquet files are uploaded: the raw stage files, the pseudonym salt
    (OUT/stages/salt), the call cache and the media store stay on this machine.
    """
    from echo_dataset.errors import EchoDatasetError
    from echo_dataset.publish import publish as run_publish
    from echo_dataset.publish import uses_public_salt

    if old_skip:
        click.echo(
            "warning: --no-pseudonymize is deprecated (publish never pseudonymizes, it only checks); "
            "use --skip-pseudonym-check",
            err=True,
        )
        skip_pseudonym_check = True
    if old_check:
        click.echo(
            "warning: --pseudonymize is deprecated; publish checks pseudonymization by default", err=True
        )
    register_secret(token)  # a --token given on the command line is hidden like $HF_TOKEN
    protect_logging()
    try:
        result = run_publish(
            directory,
            repo_id,
            token=token,
            private=private,
            check_pseudonymized=not skip_pseudonym_check,
            version=dataset_version,
        )
    except EchoDatasetError as exc:
        raise click.ClickException(redact(str(exc))) from None
    click.echo(f"published {directory} to https://huggingface.co/datasets/{repo_id} ({result})")
    if dataset_version is not None:
        click.echo(f"tagged v{dataset_version.strip()}: load it with revision='v{dataset_version.strip()}'")
    if uses_public_salt(directory):
        click.echo(
            "warning: the pseudonyms were made with the public default salt, so anyone can recompute the "
            "pseudonym of a known handle; `echo-bench build` uses a private salt per build",
            err=True,
        )


@click.command("diff", cls=EchoCommand)
@click.argument("old")
@click.argument("new")
@click.option(
    "--old-analysis",
    type=click.Path(exists=True, file_okay=False),
    help="`echo-bench analyze` folder of OLD: with --new-analysis, adds the task and failure-category shifts.",
)
@click.option(
    "--new-analysis",
    type=click.Path(exists=True, file_okay=False),
    help="`echo-bench analyze` folder of NEW (see --old-analysis).",
)
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["table", "json"]),
    default="table",
    show_default=True,
    help="Output.",
)
@click.option(
    "--max-ids", default=20, show_default=True, type=click.IntRange(min=0), help="Ids listed per list."
)
def diff(
    old: str, new: str, old_analysis: str | None, new_analysis: str | None, fmt: str, max_ids: int
) -> None:
    """Compare two versions of a benchmark (dataset folders or Hub ids) by sample id: rows per config, added and
    removed ids, ids that changed config, the card versions and, with both analysis folders, how the shares of
    task and failure categories shifted (new share minus old share)."""
    from echo_dataset.errors import EchoDatasetError
    from echo_dataset.loading import BenchmarkNotFoundError
    from echo_dataset.versioning import diff_datasets, read_labels, render_diff

    if (old_analysis is None) != (new_analysis is None):
        raise click.UsageError("--old-analysis and --new-analysis go together")
    try:
        labels = (
            (read_labels(old_analysis), read_labels(new_analysis)) if old_analysis and new_analysis else None
        )
        result = diff_datasets(
            old,
            new,
            old_labels=labels[0] if labels else None,
            new_labels=labels[1] if labels else None,
        )
    except (EchoDatasetError, BenchmarkNotFoundError) as exc:
        raise click.ClickException(str(exc)) from None
    if fmt == "json":
        click.echo(json.dumps(result, indent=2, sort_keys=True))
    else:
        click.echo(render_diff(result, max_ids=max_ids))
