"""``echo-bench import echo2025``: the authors' ECHO release -> a normal benchmark folder (:mod:`echo_builder.release`)."""

from __future__ import annotations

import click

from echo_builder.commands.options import EchoGroup
from echo_builder.outlock import locks_output

__all__ = ["import_group"]


@click.group("import", cls=EchoGroup)
def import_group() -> None:
    """Import a published benchmark into an echo-bench benchmark folder."""


@import_group.command("echo2025")
@click.argument("source", required=False, default="echo-bench/echo2025")
@click.option(
    "--out", "out_dir", required=True, type=click.Path(file_okay=False), help="Benchmark folder to write."
)
@click.option(
    "--images",
    type=click.Path(file_okay=False),
    help="The authors' download-script folder (data/images_to_image/<id>/input_images/input_<k>.png and "
    "crops/input_<k>_crop_<j>.png), or the folder above its data/: local copies are used first.",
)
@click.option(
    "--assignments",
    type=click.Path(file_okay=False),
    help="Folder of the metric-assignment JSON files; they become the applicability columns (ids without an "
    "assignment stay unknown).",
)
@click.option(
    "--offline",
    is_flag=True,
    help="Download no image: use the --images copies and OUT/media only (a Hub SOURCE is still read from the Hub "
    "or its cache; set HF_HUB_OFFLINE=1 to forbid that too).",
)
@click.option("--revision", help="Hub revision (branch, tag or commit) of a Hub SOURCE.")
@click.option(
    "--media-allow",
    "media_allow",
    multiple=True,
    metavar="HOST[:PORT]|CIDR",
    help="Let the media download fetch from this non-public host, address or network (a local mirror); "
    "repeatable. Link-local and cloud-metadata addresses are never fetched.",
)
@click.option(
    "--media-url",
    "media_url_template",
    default="https://pbs.twimg.com/media/{media_id}?format=jpg&name=orig",
    show_default=True,
    help="URL of an X media id; {media_id} is replaced (point it at a mirror).",
)
@locks_output("import echo2025")
def echo2025(
    source: str,
    out_dir: str,
    images: str | None,
    assignments: str | None,
    offline: bool,
    revision: str | None,
    media_allow: tuple[str, ...],
    media_url_template: str,
) -> None:
    """Import ECHO's official release (SOURCE: a Hub id, default echo-bench/echo2025, or a local folder in the
    Hub layout) into OUT, a benchmark folder for judge, metrics, generate and the Space.

    Image tokens (X media ids, URLs) are resolved from --images first, else downloaded into OUT/media (guarded,
    content-addressed; a rerun downloads nothing twice); cells are parsed leniently and every cell not in JSON is
    counted; official ids are kept. OUT/import.json records the source, revision and every missing image.
    """
    from echo_builder.release import import_release

    report = import_release(
        source,
        out_dir,
        images=images,
        assignments=assignments,
        offline=offline,
        media_allow=media_allow,
        revision=revision,
        media_url_template=media_url_template,
        on_progress=lambda message: click.echo(message, err=True),
    )
    for line in report.summary_lines():
        click.echo(line)
    missing = sum(c.get("missing", 0) for c in report.images.values())
    if missing:
        hint = " (--offline: copy the images into --images, or run without --offline)" if offline else ""
        click.echo(
            f"note: {missing} image(s) missing{hint}; each is named in its row's media_errors and in "
            f"{out_dir}/import.json",
            err=True,
        )
    click.echo(f"benchmark: {out_dir}")
