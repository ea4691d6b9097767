"""``echo-bench backends list|ping`` and ``echo-bench cache stats``."""

from __future__ import annotations

import json
import sys
import time

import click

from echo_builder.commands.options import MAX_TIMEOUT_S, EchoGroup, Number, parse_options
from echo_builder.errors import EchoError

__all__ = ["backends", "cache"]


@click.group(cls=EchoGroup)
def backends() -> None:
    """List and check LLM/VLM backends."""


@backends.command("list")
def backends_list() -> None:
    """Show every registered backend (built-in or plugin), where it comes from and the extra that provides it."""
    from echo_builder.backends import list_backends

    rows = [(b.name, b.origin, b.extra or "core", " ".join(b.description.split())) for b in list_backends()]
    header = ("backend", "origin", "install")
    widths = [max([len(header[i]), *(len(r[i]) for r in rows)]) for i in range(3)]
    for row in (header, *rows):
        click.echo(
            "  ".join(f"{row[i]:<{widths[i]}}" for i in range(3))
            + "  "
            + (row[3] if row is not header else "description")
        )
    click.echo("\nSpecs look like 'openai:gpt-4o', 'transformers:Qwen/Qwen2.5-VL-7B-Instruct' or 'rules'.")
    click.echo("Plugin backends and plugins that failed to load: echo-bench plugins.")


@backends.command("ping")
@click.argument("spec")
@click.option(
    "--base-url", help="OpenAI-compatible server URL (default: $ECHO_OPENAI_BASE_URL or $OPENAI_BASE_URL)."
)
@click.option(
    "-o", "--option", "options", multiple=True, metavar="KEY=VALUE", help="Backend option; repeatable."
)
@click.option(
    "--timeout",
    "timeout_s",
    default=60.0,
    show_default=True,
    type=Number(float, 0, MAX_TIMEOUT_S, low_open=True, unit="seconds"),
    help=f"Seconds before giving up, in (0, {MAX_TIMEOUT_S:g}].",
)
def backends_ping(spec: str, base_url: str | None, options: tuple[str, ...], timeout_s: float) -> None:
    """Send one tiny request to SPEC and print its latency and model snapshot."""
    from echo_builder.backends import GenerationParams, create_backend, user_message
    from echo_builder.backends.caller import CallRequest, ModelCaller, RetryPolicy

    opts = parse_options(options)
    if base_url:
        opts["base_url"] = base_url
    backend = create_backend(spec, **opts)
    if (
        not backend.answers_prompts
    ):  # the rules baseline runs locally and answers no prompts: nothing to reach
        click.echo(f"{backend.backend_id}: offline baseline, always available (no model to ping)")
        return
    caller = ModelCaller(
        backend, timeout_s=timeout_s, retry=RetryPolicy(max_attempts=2, initial_backoff_s=0.5)
    )
    request = CallRequest(
        (user_message("Reply with the single word: pong"),), GenerationParams(max_tokens=8), stage="ping"
    )
    start = time.perf_counter()
    try:
        result = caller.call(request)
    except EchoError:
        raise
    except (
        Exception
    ) as exc:  # a backend bug (a plugin's, raising outside BackendError): a failed ping, no traceback
        elapsed = time.perf_counter() - start
        click.echo(
            f"{backend.backend_id}: FAILED after {elapsed:.2f} s: the backend raised {type(exc).__name__}: {exc}",
            err=True,
        )
        sys.exit(1)
    elapsed = time.perf_counter() - start
    if result.reply is None:
        click.echo(f"{backend.backend_id}: FAILED after {elapsed:.2f} s: {result.error}", err=True)
        sys.exit(1)
    click.echo(f"backend:   {backend.backend_id}")
    click.echo(f"snapshot:  {result.reply.model_snapshot or 'not reported'}")
    click.echo(f"latency:   {elapsed * 1000:.0f} ms")
    click.echo(f"reply:     {result.reply.text.strip()[:80]!r}")


@click.group(cls=EchoGroup)
def cache() -> None:
    """Inspect the model-call cache."""


@cache.command("stats")
@click.argument("directory", type=click.Path(exists=True, file_okay=False))
@click.option("--format", "fmt", type=click.Choice(["table", "json"]), default="table", show_default=True)
def cache_stats(directory: str, fmt: str) -> None:
    """Entries, size on disk, hits/misses, tokens and wall time per backend of the cache in DIRECTORY."""
    from echo_builder.cache import CallCache

    with CallCache(directory, read_only=True) as store:
        stats = store.stats()
    if fmt == "json":
        click.echo(json.dumps(stats.to_dict(), indent=2))
        return
    click.echo(f"cache:   {stats.path}")
    click.echo(f"entries: {stats.entries:,}")
    click.echo(f"size:    {stats.size_bytes / 1e6:.2f} MB")
    if stats.backends:
        header = f"{'backend':<40} {'entries':>8} {'hits':>8} {'misses':>8} {'in tok':>10} {'out tok':>10} {'wall s':>9}"
        click.echo("\n" + header)
        for name, b in sorted(stats.backends.items()):
            click.echo(
                f"{name:<40} {b.entries:>8,} {b.hits:>8,} {b.misses:>8,} {b.input_tokens:>10,} "
                f"{b.output_tokens:>10,} {b.wall_time_s:>9.1f}"
            )
    if stats.stages:
        click.echo("\nentries per stage: " + ", ".join(f"{k}={v:,}" for k, v in sorted(stats.stages.items())))
