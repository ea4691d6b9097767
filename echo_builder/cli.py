"""The ``echo-bench`` command line.

The group and its error handling live here; the subcommands live in :mod:`echo_builder.commands` (curation:
``collect``, ``build``, ``publish``, ``diff``, ``import echo2025``; model outputs: ``generate``; evaluation: ``judge``, ``leaderboard``, ``agreement``,
``community-outputs``, ``export-pairs``, ``metrics``; analysis: ``analyze``; tools: ``backends``, ``cache``, ``plugins``; the tour: ``demo``). Heavy imports happen inside the command that
needs them, so ``echo-bench --help`` is instant.
"""

from __future__ import annotations

import logging
import sqlite3
from typing import Any

import click

from echo_builder import __version__
from echo_builder.commands.agreement import agreement, community_outputs, export_pairs
from echo_builder.commands.analysis import analyze
from echo_builder.commands.backends import backends, cache
from echo_builder.commands.collect import collect
from echo_builder.commands.curation import build, diff, publish
from echo_builder.commands.demo import demo
from echo_builder.commands.estimate import estimate
from echo_builder.commands.evaluation import judge, metrics, publish_metrics
from echo_builder.commands.generation import generate
from echo_builder.commands.leaderboard import leaderboard
from echo_builder.commands.options import EchoGroup
from echo_builder.commands.plugins import plugins
from echo_builder.commands.release import import_group
from echo_builder.errors import EchoError
from echo_builder.input_files import is_utf8
from echo_builder.secrets import protect_logging, redact
from echo_dataset.errors import EchoDatasetError
from echo_dataset.safe_io import describe_os_error

__all__ = ["cli", "main"]


def _out_option(args: list[str]) -> str | None:
    """The ``--out`` value among a command line's arguments (to name the folder an error without a path hit)."""
    for i, arg in enumerate(args):
        if arg == "--out" and i + 1 < len(args):
            return args[i + 1]
        if arg.startswith("--out="):
            return arg.split("=", 1)[1]
    return None


def _one_line(text: str) -> str:
    """An error message as one line (a multi-line message would read as several errors)."""
    return " ".join(text.split("\n")).strip()


def _silence_stdout() -> None:
    """Point standard output at the null device, so flushing it at exit cannot raise a second broken pipe."""
    import os
    import sys

    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):  # not a real file (a test runner's buffer): nothing to do
        pass


def _usage_error(exc: click.UsageError) -> None:
    """A usage error as one line like every other error (click's own form is three), naming where the usage is
    explained."""
    where = exc.ctx.command_path if exc.ctx is not None else "echo-bench"
    click.echo(f"error: {redact(_one_line(exc.format_message()))} (see '{where} --help')", err=True)


class _Group(EchoGroup):
    """Turns expected errors into one clear line and exit code 1 instead of a traceback, and shows library
    warnings (e.g. dropped self-battle votes) as one-line notes."""

    def make_context(
        self, info_name: str | None, args: list[str], parent: click.Context | None = None, **extra: Any
    ) -> click.Context:
        # the group's own options (echo-bench --bogus, -V -V): the same one-line usage error as a command's
        try:
            return super().make_context(info_name, args, parent=parent, **extra)
        except click.exceptions.NoArgsIsHelpError:
            raise  # `echo-bench` alone: the help
        except click.UsageError as exc:
            _usage_error(exc)
            raise click.exceptions.Exit(exc.exit_code) from None

    def invoke(self, ctx: click.Context) -> Any:
        import warnings

        from pydantic import ValidationError

        def note(message: Warning | str, category: type[Warning], *args: Any, **kwargs: Any) -> None:
            click.echo(f"note: {message}", err=True)

        # the subcommand's arguments, read before they are consumed (to name --out in an error without a path)
        protected = ctx._protected_args if hasattr(ctx, "_protected_args") else ctx.protected_args
        arguments = [*protected, *ctx.args]
        for argument in arguments:
            if not is_utf8(argument):
                shown = argument.encode("utf-8", "surrogateescape").decode("utf-8", "replace")
                click.echo(
                    f"error: argument {shown!r} is not valid UTF-8 text; give names and paths in UTF-8 (rename "
                    "a file or folder whose name is not)",
                    err=True,
                )
                ctx.exit(1)
        previous = warnings.showwarning
        warnings.showwarning = note  # type: ignore[assignment]
        try:
            return super().invoke(ctx)
        except BrokenPipeError:
            # the reader went away (`echo-bench leaderboard ... | head`): nothing to report, and no one to read it
            _silence_stdout()
            ctx.exit(0)
        except (EchoError, EchoDatasetError, FileNotFoundError, NotADirectoryError) as exc:
            click.echo(f"error: {redact(_one_line(str(exc)))}", err=True)
            ctx.exit(1)
        except OSError as exc:  # a read-only folder, a full disk...: the path and the reason, no traceback
            where = exc.filename or _out_option(arguments)
            message = describe_os_error(exc, where, action="access" if exc.filename else "write in")
            click.echo(f"error: {redact(_one_line(message))}", err=True)
            ctx.exit(1)
        except sqlite3.Error as exc:  # the call cache's database (full disk, read-only, locked)
            click.echo(f"error: the call cache failed: {redact(_one_line(str(exc)))}", err=True)
            ctx.exit(1)
        except click.UsageError as exc:
            _usage_error(exc)
            ctx.exit(exc.exit_code)
        except click.ClickException as exc:  # e.g. publish's: the same "error: ..." line as everywhere
            click.echo(f"error: {redact(exc.format_message())}", err=True)
            ctx.exit(exc.exit_code)
        except ValidationError as exc:
            problems = "; ".join(
                f"{'.'.join(map(str, e['loc'])) or 'value'}: {e['msg']}" for e in exc.errors()
            )
            click.echo(f"error: invalid option: {redact(problems)}", err=True)
            ctx.exit(1)
        finally:
            warnings.showwarning = previous


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 110})
@click.version_option(__version__, "--version", "-V", prog_name="echo-bench")
@click.option("-v", "--verbose", count=True, help="More log output (-v info, -vv debug).")
@click.option(
    "--plugin-timeout",
    metavar="SECONDS",
    help="Deadline of each call of plugin code (a plugin metric's computation, a plugin source format's detection "
    "and each record it reads, a plugin stage's run); one that does not return in time is abandoned and recorded "
    "as that plugin's failure. Default: $ECHO_PLUGIN_TIMEOUT_S, else 300; 0: none.",
)
@click.option(
    "--plugin-import-timeout",
    metavar="SECONDS",
    help="Deadline of each plugin's import when a registry is first read; a plugin whose import hangs is left out "
    "and reported (echo-bench plugins). Default: $ECHO_PLUGIN_IMPORT_TIMEOUT_S, else 30; 0: none.",
)
def cli(verbose: int, plugin_timeout: str | None, plugin_import_timeout: str | None) -> None:
    """echo-bench: build living image-generation benchmarks from social-media posts and rank models on them.

    Implements ECHO (arXiv 2510.15021): curation of posts into text-to-image, image-to-image and analysis splits,
    VLM-judge win rates with bootstrap intervals, and community-driven metrics.
    """
    from echo_builder.plugin_deadline import (
        call_timeout,
        import_timeout,
        parse_timeout,
        reset_timeouts,
        set_timeouts,
    )

    reset_timeouts()  # each invocation starts from the environment (tests run many in one process)
    for value, option, key in (
        (plugin_timeout, "--plugin-timeout", "call"),
        (plugin_import_timeout, "--plugin-import-timeout", "imports"),
    ):
        if value is not None:
            try:
                set_timeouts(**{key: parse_timeout(value, option)})
            except EchoError as exc:
                raise click.UsageError(str(exc)) from None
    try:  # a bad ECHO_PLUGIN_TIMEOUT_S / ECHO_PLUGIN_IMPORT_TIMEOUT_S: one line now, not one per plugin later
        call_timeout(), import_timeout()
    except EchoError as exc:
        raise click.UsageError(str(exc)) from None
    level = logging.WARNING - 10 * min(verbose, 2)
    logging.basicConfig(level=level, format="%(levelname)s %(name)s: %(message)s")
    protect_logging()  # keys in URLs or replies never reach a log line, whichever library logs them


for _command in (
    backends,
    cache,
    collect,
    build,
    publish,
    diff,
    import_group,
    judge,
    leaderboard,
    agreement,
    community_outputs,
    export_pairs,
    metrics,
    publish_metrics,
    demo,
    generate,
    plugins,
    analyze,
    estimate,
):
    cli.add_command(_command)


def main() -> None:
    """Console-script entry point."""
    cli(prog_name="echo-bench")


if __name__ == "__main__":
    main()
