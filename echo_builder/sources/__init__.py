"""Source adapters: platform exports -> :class:`~echo_builder.records.Post` (the ``collect`` stage of Flow 1).

One adapter per input format, each in its own module and registered by name:

- ``x_api``: X API v2 responses (``data`` + ``includes``), :mod:`echo_builder.sources.x_api`
- ``x_graphql``: X web GraphQL responses (conversations, searches, timelines), :mod:`echo_builder.sources.x_graphql`
- ``reddit``: Reddit NDJSON dumps and API listings, :mod:`echo_builder.sources.reddit`
- ``bluesky``: Bluesky ``getPostThread`` threads (and post lists, feeds), :mod:`echo_builder.sources.bluesky`
- ``twscrape``: twscrape's ``Tweet`` model as JSON Lines, :mod:`echo_builder.sources.twscrape`
- ``collection``: community prompt collections (``cases/<n>/case.yml``), :mod:`echo_builder.sources.collection`
- ``jsonl``: JSON Lines of ``Post`` (this package's own format), :mod:`echo_builder.sources.jsonl`

Typical use::

    from echo_builder.sources import read_posts
    report = read_posts(["exports/x", "exports/reddit_comments.ndjson"])
    report.posts      # each post once, deterministic order
    report.problems   # RecordProblem(file, location, reason, level) for skipped records and notes
    print(report.summary())

Files may be compressed (``.zst``, ``.gz``, ``.bz2``, ``.xz``: decompressed on the fly, :mod:`.streams`), and
JSON Lines and large top-level lists are streamed record by record; ``build --prefilter`` reads only the posts
matching the keywords and their threads (:mod:`.prefilter`). Formats are detected from the content (the first record of a file; a folder with ``cases/`` is a collection);
``format=`` forces one. Bad records never raise: they are reported and skipped. A new format is one module of
this package with a :class:`SourceAdapter` subclass decorated with ``@register_source(order=N)``: the registry
finds the package's modules itself (``pkgutil``, less :data:`~echo_builder.sources.base.HELPER_MODULES`), and
``order`` is the format's place in the detection order (the built-ins are 10, 20, ... 70 in the order listed
above), whatever order the modules are imported in; nothing is added here. A separate package adds one through the
``echo_bench.sources`` entry-point group (``name = "module:Class"``, see ``docs/extending.md``); plugin formats are
detected after the built-ins, and a plugin that fails to load, or whose detection raises, is reported and passed
over, never fatal. The registry is :data:`SOURCES` (an :class:`echo_builder.registry.Registry` of kind
``"source"``).
"""

from echo_builder.sources.base import (
    SOURCES,
    Document,
    FileContext,
    RecordProblem,
    SourceAdapter,
    SourceInfo,
    get_source,
    list_sources,
    register_source,
    registered_sources,
)

# Re-exported for convenience (the public names of earlier versions). Registration does not depend on these
# imports: the registry discovers every built-in module, and the detection order is each adapter's `order`.
from echo_builder.sources.bluesky import BlueskySource
from echo_builder.sources.collection import CollectionSource
from echo_builder.sources.jsonl import JsonlSource, write_jsonl
from echo_builder.sources.reader import FileSummary, SourceReport, detect_format, read_posts
from echo_builder.sources.reddit import RedditSource
from echo_builder.sources.twscrape import TwscrapeSource
from echo_builder.sources.x_api import XApiSource
from echo_builder.sources.x_graphql import XGraphqlSource

__all__ = [
    "SOURCES",
    "BlueskySource",
    "CollectionSource",
    "Document",
    "FileContext",
    "FileSummary",
    "JsonlSource",
    "RecordProblem",
    "RedditSource",
    "SourceAdapter",
    "SourceInfo",
    "SourceReport",
    "TwscrapeSource",
    "XApiSource",
    "XGraphqlSource",
    "detect_format",
    "get_source",
    "list_sources",
    "read_posts",
    "register_source",
    "registered_sources",
    "write_jsonl",
]
