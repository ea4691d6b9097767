"""``query``: broad keyword queries over collected posts (ECHO Flow 1, "query").

Keywords match case-insensitively on word boundaries (``gpt-4o`` matches "GPT-4o's" but not "gpt-4omni"), in the
post text and the alt text of its media. A keyword may be time-windowed relative to the target model's launch
date: ECHO allowed generic words such as "openai" only within two weeks of the launch and narrower ones after. The
stage reports the yield of each keyword (posts matched, posts matched by it alone).

Posts from curated prompt collections (platform ``collection``) are not social-media search results: they skip the
query and are counted as ``curated``.
"""

from __future__ import annotations

import re
import warnings
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, fields
from datetime import date, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

from echo_builder.errors import ConfigError
from echo_builder.records import Post
from echo_builder.stages.registry import StageContext, StageDefinition, StageOutput, declare_stage

__all__ = [
    "KEYWORD_KEYS",
    "Keyword",
    "QueryResult",
    "default_keywords",
    "load_keywords",
    "parse_launch_date",
    "run_query",
]


@dataclass(frozen=True)
class Keyword:
    """A search term. ``window_days``: only posts from the launch date to ``window_days`` days after it match
    (``None``: any time). ``before_days`` allows that many days before the launch (teasers, leaks)."""

    term: str
    window_days: int | None = None
    before_days: int = 0

    def __post_init__(self) -> None:
        if not isinstance(self.term, str) or not self.term.strip():
            raise ConfigError(f"a keyword needs a non-empty term, got {self.term!r}")
        for name, value in (("window_days", self.window_days), ("before_days", self.before_days)):
            if value is None and name == "window_days":
                continue
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ConfigError(
                    f"keyword {self.term!r}: {name} must be a whole number of days >= 0, got {value!r}"
                )

    def pattern(self) -> re.Pattern[str]:
        # \b fails next to non-word characters such as "-" or "+", so spell out "not preceded/followed by a letter
        # or digit" instead; inner whitespace matches any run of whitespace.
        body = r"\s+".join(re.escape(part) for part in self.term.split())
        return re.compile(rf"(?<![^\W_]){body}(?![^\W_])", re.IGNORECASE)


#: The keys of a keyword object in a JSON keywords file: the fields of :class:`Keyword`, ``term`` required.
KEYWORD_KEYS: tuple[str, ...] = tuple(f.name for f in fields(Keyword))


def _keyword_keys() -> str:
    """The accepted keys in words, for error messages: ``'term' (required), 'window_days', 'before_days'``."""
    return ", ".join(f"{key!r}" + (" (required)" if key == "term" else "") for key in KEYWORD_KEYS)


def default_keywords(target_model: str | None) -> list[Keyword]:
    """The target model's name (and its spelling without spaces or hyphens), any time."""
    if not target_model:
        return []
    variants = {target_model.strip(), re.sub(r"[\s\-]+", "", target_model.strip())}
    return [Keyword(v) for v in sorted(variants) if v]


def load_keywords(path: str | Path) -> list[Keyword]:
    """Keywords from a file: JSON (a list of terms or of objects with the keys :data:`KEYWORD_KEYS`, ``[{"term",
    "window_days", "before_days"}]``, or ``{"keywords": [...]}``) or text, one term per line with an optional tab- or
    ``|``-separated window in days; ``#`` starts a comment.

    Raises :class:`ConfigError` naming the file and line (or entry) of a malformed keyword (an object without
    ``term`` or with a key that is not a :class:`Keyword` field, which would otherwise be ignored silently; the
    message lists the accepted keys), and for a file that holds none.
    """
    from echo_builder.input_files import parse_json, read_text

    path = Path(path)
    text = read_text(path, f"keywords file {path}")
    out: list[Keyword] = []
    if path.suffix.lower() == ".json":
        data = parse_json(text, f"keywords file {path}")
        # errors name keys only when they look like names, and values only by their kind: a JSON file that is no
        # keyword file (credentials, a config) never has its content printed
        from echo_dataset.safe_yaml import kind_of, shown_key

        def keys_of(mapping: dict[str, Any]) -> str:
            return ", ".join(shown_key(k) or f"key {n}" for n, k in enumerate(mapping, 1)) or "none"

        if isinstance(data, dict):
            if "keywords" not in data:
                raise ConfigError(
                    f"{path}: expected a list of keywords or {{'keywords': [...]}}, got an object with the keys "
                    f"{keys_of(data)}"
                )
            data = data["keywords"]
        if not isinstance(data, list):
            raise ConfigError(f"{path}: expected a list of keywords, got {kind_of(data)}")
        for i, entry in enumerate(data):
            entry = {"term": entry} if isinstance(entry, str) else entry
            if not isinstance(entry, dict) or "term" not in entry:
                shown = (
                    f"an object with the keys {keys_of(entry)}" if isinstance(entry, dict) else kind_of(entry)
                )
                raise ConfigError(
                    f"{path}: keyword {i} must be a term or an object with the keys {_keyword_keys()}; got {shown}"
                )
            unknown = [shown_key(k) or f"key {n}" for n, k in enumerate(entry, 1) if k not in KEYWORD_KEYS]
            if unknown:
                raise ConfigError(
                    f"{path}: keyword {i}: unknown key {', '.join(unknown)}; the keys are {_keyword_keys()}"
                )
            try:
                out.append(Keyword(**entry))
            except ConfigError as exc:
                raise ConfigError(f"{path}: keyword {i}: {exc}") from None
    else:
        for number, line in enumerate(text.splitlines(), 1):
            line = line.split("#", 1)[0].strip()
            if not line:
                continue
            window = None
            parts = re.split(r"\t|\|", line, maxsplit=1)
            if len(parts) == 2 and parts[1].strip():
                try:
                    window = int(parts[1].strip())
                except ValueError:
                    # the text is not quoted: a file that is no keyword list never has a line printed
                    raise ConfigError(
                        f"{path}:{number}: window (after the tab or '|') must be a whole number of days"
                    ) from None
            try:
                out.append(Keyword(parts[0].strip(), window))
            except ConfigError as exc:
                raise ConfigError(f"{path}:{number}: {exc}") from None
    if not out:
        raise ConfigError(f"{path} holds no keyword")
    return out


@dataclass
class QueryResult:
    """Posts that matched at least one keyword (or are curated), with each kept post's matching terms.

    Attributes:
        kept: matching posts, in input order.
        matches: post id -> the terms it matched (empty tuple for curated posts).
        yield_per_keyword: term -> ``{"matched": n, "only": n}`` (``only``: matched by no other term).
        curated: posts passed through because they come from a curated collection.
        outside_window: matches dropped because the post fell outside the term's time window (or has no date).
    """

    kept: list[Post]
    matches: dict[str, tuple[str, ...]]
    yield_per_keyword: dict[str, dict[str, int]] = field(default_factory=dict)
    curated: int = 0
    outside_window: int = 0


def _in_window(post: Post, keyword: Keyword, launch: datetime | None) -> bool:
    if keyword.window_days is None or launch is None:
        return True
    if post.created_at is None:
        return False
    start = _shift(launch, -keyword.before_days)
    return start <= post.created_at <= _shift(launch, keyword.window_days)


_LATEST = datetime.max.replace(tzinfo=timezone.utc)
_EARLIEST = datetime.min.replace(tzinfo=timezone.utc)


def _shift(moment: datetime, days: int) -> datetime:
    """``moment`` plus ``days`` days, clamped to the datetime range (a window of 3,000,000 days means "any time
    after", not an OverflowError)."""
    try:
        return moment + timedelta(days=days)
    except OverflowError:
        return _LATEST if days > 0 else _EARLIEST


def parse_launch_date(launch_date: date | datetime | str | None) -> datetime | None:
    if launch_date is None:
        return None
    if isinstance(launch_date, str):
        try:
            launch_date = date.fromisoformat(launch_date)
        except ValueError:
            raise ConfigError(f"launch date must be YYYY-MM-DD, got {launch_date!r}") from None
    if isinstance(launch_date, datetime):
        return launch_date if launch_date.tzinfo else launch_date.replace(tzinfo=timezone.utc)
    return datetime(launch_date.year, launch_date.month, launch_date.day, tzinfo=timezone.utc)


def run_query(
    posts: Iterable[Post], keywords: Sequence[Keyword], *, launch_date: date | datetime | str | None = None
) -> QueryResult:
    """Keep the posts matching any keyword within its window. With no keywords every post is kept.

    Raises :class:`ConfigError` for a windowed keyword without a launch date.
    """
    launch = parse_launch_date(launch_date)
    if launch is None and any(k.window_days is not None for k in keywords):
        raise ConfigError(
            "time-windowed keywords need the target model's launch date (--launch-date YYYY-MM-DD)"
        )
    compiled = [(k, k.pattern()) for k in keywords]
    result = QueryResult(
        kept=[], matches={}, yield_per_keyword={k.term: {"matched": 0, "only": 0} for k in keywords}
    )
    for post in posts:
        if post.platform == "collection":
            result.kept.append(post)
            result.matches[post.id] = ()
            result.curated += 1
            continue
        if not compiled:
            result.kept.append(post)
            result.matches[post.id] = ()
            continue
        haystack = "\n".join([post.text, *(m.alt_text or "" for m in post.media)])
        hits = []
        for keyword, pattern in compiled:
            if pattern.search(haystack):
                if _in_window(post, keyword, launch):
                    hits.append(keyword.term)
                else:
                    result.outside_window += 1
        if hits:
            result.kept.append(post)
            result.matches[post.id] = tuple(hits)
            for term in hits:
                result.yield_per_keyword[term]["matched"] += 1
            if len(hits) == 1:
                result.yield_per_keyword[hits[0]]["only"] += 1
    return result


QUERY_VERSION = "query-v1"


def prepare_query(config: Any) -> tuple[list[Keyword], datetime | None]:
    """The keywords (``config.keywords_file``, else the target model's name) and the parsed launch date.

    Raises :class:`ConfigError` for an unreadable keyword file, a bad date, or windowed keywords without a date;
    warns when there is no keyword at all (every post is kept).
    """
    keywords = (
        load_keywords(config.keywords_file) if config.keywords_file else default_keywords(config.target_model)
    )
    if not keywords:
        warnings.warn(
            "no --target-model and no --keywords: the query stage keeps every post (only relevance filters them)",
            stacklevel=4,
        )
    launch = parse_launch_date(config.launch_date)
    if launch is None and any(k.window_days is not None for k in keywords):
        raise ConfigError(
            "time-windowed keywords need the target model's launch date (--launch-date YYYY-MM-DD)"
        )
    return keywords, launch


def run_query_stage(context: StageContext) -> StageOutput:
    """``context.posts`` matching the keywords -> ``context.selected``."""
    keywords, launch = context.prepared["query"]
    queried = run_query(context.posts, keywords, launch_date=launch)
    context.selected = queried.kept
    return StageOutput(
        {
            "in": len(context.posts),
            "out": len(queried.kept),
            "failures": 0,
            "keywords": [k.term for k in keywords],
            "yield_per_keyword": queried.yield_per_keyword,
            "curated": queried.curated,
            "outside_window": queried.outside_window,
        },
        files={
            "query.jsonl": [{"post_id": p.id, "matched": list(queried.matches[p.id])} for p in queried.kept]
        },
    )


STAGE = declare_stage(
    StageDefinition(
        name="query",
        version=QUERY_VERSION,
        run=run_query_stage,
        after="collect",
        reads=("posts",),
        writes=("selected",),
        report_fields=("keywords", "yield_per_keyword", "curated", "outside_window"),
        prepare=prepare_query,
        description="keep the posts matching the keywords (time-windowed around the launch date)",
    )
)
