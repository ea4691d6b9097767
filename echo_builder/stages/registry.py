"""The curation stages of ``echo-bench build``, declared: :data:`STAGES` and :class:`StageDefinition`.

Every stage is one :class:`StageDefinition` in its own module (``echo_builder/stages/<name>.py`` declares the
built-ins, a plugin package declares its own): its name and version, where it runs (``after`` another stage), what
it reads from and writes to the shared :class:`StageContext`, the stage files it writes under ``OUT/stages/``, the
fields of its entry in ``report.json``, whether it calls a model, and the function that runs it. The pipeline
(:func:`echo_builder.pipeline.build`) iterates :func:`stage_order`: timing (``run_stats.json``), the stage files
(written atomically), progress (``on_stage``) and the report entry are handled once, in that loop, for every
stage alike. Resuming needs nothing per stage: each model call goes through the build's call cache, so a rerun
repeats no completed call.

A plugin declares a stage through the ``echo_bench.stages`` entry point::

    [project.entry-points."echo_bench.stages"]
    word_count = "echo_word_count:STAGE"        # a StageDefinition named "word_count"

A plugin stage that cannot be used (not a :class:`StageDefinition`, a bad field, ``after`` naming no stage, a
``reads`` field that no earlier stage writes, a stage file another stage writes) is reported
(:func:`echo_builder.registry.plugin_problems`) and left out; the build runs without it. A plugin stage that
raises while running fails the build with a :class:`StageError` naming it (``--skip-stage NAME`` leaves it out).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from echo_builder.errors import ConfigError, EchoError
from echo_builder.registry import BUILT_IN, Entry, Registry

if TYPE_CHECKING:
    from echo_builder.pipeline import BuildConfig

__all__ = [
    "CONTEXT_FIELDS",
    "RESERVED_FILES",
    "STAGES",
    "NoPostsError",
    "StageContext",
    "StageDefinition",
    "StageError",
    "StageOutput",
    "builtin_order",
    "declare_stage",
    "stage_order",
]

#: What a stage may read from or write to the :class:`StageContext` (``reads`` / ``writes``).
CONTEXT_FIELDS = ("posts", "problems", "selected", "trees", "samples", "failures", "run_stats", "extra")
#: Context fields that exist (empty) before the first stage runs.
_INITIAL_FIELDS = frozenset({"failures", "run_stats", "extra"})
#: Files under ``OUT/stages/`` the pipeline itself writes after the last stage (or that hold the salt).
RESERVED_FILES = frozenset({"samples.jsonl", "failures.jsonl", "salt", "salt.tmp"})
#: The keys every report entry has (``name`` is added by the pipeline).
REQUIRED_REPORT_FIELDS = ("in", "out", "failures")

_NAME = re.compile(r"[a-z][a-z0-9_]{0,63}")
_FILE = re.compile(r"[a-z0-9][a-z0-9_.-]{0,95}\.jsonl")


class StageError(EchoError):
    """A plugin stage failed while running, or returned something other than a :class:`StageOutput`.

    Attributes:
        stage: the name of the plugin stage at fault (what ``--skip-stage`` takes), ``None`` when unknown.
    """

    def __init__(self, message: str, stage: str | None = None) -> None:
        super().__init__(message)
        self.stage = stage


class NoPostsError(ConfigError):
    """The collect stage read no post at all: nothing to build (the pipeline removes a folder it just made)."""


@dataclass
class StageContext:
    """What the stages of one build share; each stage reads and replaces the fields it declares.

    Attributes:
        config: the build's :class:`~echo_builder.pipeline.BuildConfig` (read-only by convention).
        out: the build folder.
        caller: the model caller (:class:`~echo_builder.backends.caller.ModelCaller`), ``None`` with ``rules``.
        store_root: the content-addressed media store (``OUT/media`` unless ``--media-store``).
        prepared: what each stage's ``prepare`` returned, by stage name (checked options, parsed files).
        posts: every post read from the sources (collect).
        problems: the sources' problems, one dict per file or record (collect).
        selected: the posts still in the running (query, then relevance).
        trees: reply trees, one per selected root post (threads).
        samples: the benchmark samples (extract, then each later stage replaces them with its output).
        failures: records a stage could not process (``StageFailure``); written to ``stages/failures.jsonl``.
        run_stats: what legitimately differs between runs (downloads vs store hits): ``run_stats.json`` only.
        extra: free space for plugin stages to hand data to later plugin stages (never written by the pipeline).
    """

    config: BuildConfig
    out: Path
    caller: Any = None
    store_root: Path = Path()
    prepared: dict[str, Any] = field(default_factory=dict)
    posts: list[Any] = field(default_factory=list)
    problems: list[dict[str, Any]] = field(default_factory=list)
    selected: list[Any] = field(default_factory=list)
    trees: list[Any] = field(default_factory=list)
    samples: list[Any] = field(default_factory=list)
    failures: list[Any] = field(default_factory=list)
    run_stats: dict[str, Any] = field(default_factory=dict)
    extra: dict[str, Any] = field(default_factory=dict)

    def progress(self, stage: str) -> str | None:
        """The progress-bar label for ``stage`` (``None`` when the build shows no progress)."""
        return stage if self.config.progress else None


@dataclass
class StageOutput:
    """What a stage hands back to the pipeline.

    Attributes:
        report: the stage's entry in ``report.json`` without ``name``: ``in``, ``out`` and ``failures`` (ints:
            records in, records out, records that failed) plus the stage's own fields (JSON values).
        files: stage file name (one of the definition's ``files``) -> rows (pydantic models or dicts), written to
            ``OUT/stages/<name>`` as JSON lines, atomically, after the stage returns.
    """

    report: dict[str, Any]
    files: Mapping[str, Sequence[Any]] = field(default_factory=dict)


@dataclass(frozen=True)
class StageDefinition:
    """One curation stage, declared once.

    Attributes:
        name: the stage's name in ``report.json``, progress output and ``--skip-stage`` (``[a-z][a-z0-9_]*``).
        version: the stage's version (its prompt template's for model stages: it is part of the call-cache key);
            a model stage's version is recorded in ``report.json`` under ``versions.prompts``, a plugin stage's
            under ``versions.plugin_stages``.
        run: ``run(context) -> StageOutput``; reads and replaces the :class:`StageContext` fields it declares.
        after: the stage it runs right after (``None`` only for the first built-in stage, ``collect``). Several
            stages after the same one run in declaration order, plugins before the built-in ones, and an optional
            built-in stage before a built-in one that always runs.
        reads: the context fields it reads (:data:`CONTEXT_FIELDS`); each must be written by an earlier stage.
        writes: the context fields it replaces or appends to.
        files: the stage files it writes under ``OUT/stages/`` (``NAME.jsonl`` by default).
        report_fields: the fields of its report entry besides ``in``, ``out`` and ``failures`` (documentation and
            ``echo-bench`` listings; a stage may add fields whose names depend on the data, such as media sources).
        calls_model: it sends requests through the model caller when the backend is a model (each one cached).
        prepare: ``prepare(config) -> value`` checks the stage's options and reads its files before anything is
            written (raise :class:`~echo_builder.errors.ConfigError`); the value is ``context.prepared[name]``.
        skippable: ``--skip-stage NAME`` may leave it out (plugin stages; the built-ins feed each other).
        description: one line for listings.
        when: ``when(config) -> bool`` makes the stage **optional**: it runs only in a build whose
            :class:`~echo_builder.pipeline.BuildConfig` it returns true for (the ``safety`` stage runs only with
            ``nsfw_check``). ``None`` (the default): the stage always runs. An optional stage writes nothing and
            has no report entry in a build it is off for, so such a build's files are those of a build without it.
        extra: the pip extra its dependencies come from (``"nsfw"``), ``None`` for core.
    """

    name: str
    version: str
    run: Callable[[StageContext], StageOutput]
    after: str | None
    reads: tuple[str, ...] = ()
    writes: tuple[str, ...] = ()
    files: tuple[str, ...] | None = None
    report_fields: tuple[str, ...] = ()
    calls_model: bool = False
    prepare: Callable[[BuildConfig], Any] | None = None
    skippable: bool = False
    description: str = ""
    when: Callable[[BuildConfig], bool] | None = None
    extra: str | None = None

    @property
    def optional(self) -> bool:
        """The stage runs only in builds its ``when`` predicate accepts."""
        return self.when is not None

    def enabled(self, config: BuildConfig) -> bool:
        """Whether a build with ``config`` runs this stage (always, unless it is optional and ``when`` says no)."""
        return self.when is None or bool(self.when(config))

    def __post_init__(self) -> None:
        if self.files is None:
            object.__setattr__(self, "files", (f"{self.name}.jsonl",))
        for attr in ("reads", "writes", "files", "report_fields"):
            value = getattr(self, attr)
            if isinstance(value, str) or not isinstance(value, Sequence):
                raise ConfigError(f"stage {self.name!r}: {attr} must be a tuple of strings, got {value!r}")
            object.__setattr__(self, attr, tuple(value))
        self.check()

    def check(self) -> None:
        """Raise :class:`ConfigError` when a field is invalid (what :func:`declare_stage` and plugins get)."""
        if not isinstance(self.name, str) or not _NAME.fullmatch(self.name):
            raise ConfigError(
                f"a stage name must match [a-z][a-z0-9_]* (at most 64 characters), got {self.name!r}"
            )
        if not isinstance(self.version, str) or not self.version.strip():
            raise ConfigError(
                f"stage {self.name!r}: version must be a non-empty string, got {self.version!r}"
            )
        if not callable(self.run):
            raise ConfigError(f"stage {self.name!r}: run must be callable, got {self.run!r}")
        if self.when is not None and not callable(self.when):
            raise ConfigError(f"stage {self.name!r}: when must be callable or None, got {self.when!r}")
        if self.prepare is not None and not callable(self.prepare):
            raise ConfigError(f"stage {self.name!r}: prepare must be callable or None, got {self.prepare!r}")
        if self.after is not None and (not isinstance(self.after, str) or not self.after):
            raise ConfigError(f"stage {self.name!r}: after must name a stage, got {self.after!r}")
        for attr in ("reads", "writes"):
            unknown = [f for f in getattr(self, attr) if f not in CONTEXT_FIELDS]
            if unknown:
                raise ConfigError(
                    f"stage {self.name!r}: {attr} names {unknown}, not context fields ({', '.join(CONTEXT_FIELDS)})"
                )
        for name in self.files or ():
            if not isinstance(name, str) or not _FILE.fullmatch(name) or name in RESERVED_FILES:
                raise ConfigError(
                    f"stage {self.name!r}: stage file {name!r} must be a plain NAME.jsonl (lowercase letters, "
                    f"digits, '_', '.', '-'), not one of {sorted(RESERVED_FILES)}"
                )
        taken = [
            f for f in self.report_fields if f in ("name", *REQUIRED_REPORT_FIELDS) or not isinstance(f, str)
        ]
        if taken:
            raise ConfigError(f"stage {self.name!r}: report_fields may not redeclare {taken}")


def _adopt(name: str, loaded: Any, origin: str) -> tuple[Entry[StageDefinition], StageDefinition]:
    """A plugin's entry point must load a :class:`StageDefinition` whose ``after`` names a stage."""
    if not isinstance(loaded, StageDefinition):
        raise ConfigError(
            f"expected an echo_builder.stages.registry.StageDefinition, got {type(loaded).__name__}"
        )
    loaded.check()
    if loaded.after is None:
        raise ConfigError("a plugin stage must say after which stage it runs (after='threads', ...)")
    return _entry(loaded, origin), loaded


def _entry(definition: StageDefinition, origin: str) -> Entry[StageDefinition]:
    run = definition.run
    target = f"{getattr(run, '__module__', None) or '?'}:{getattr(run, '__qualname__', definition.name)}"
    fields: dict[str, Any] = {
        "version": definition.version,
        "after": definition.after,
        "reads": definition.reads,
        "writes": definition.writes,
        "files": definition.files,
        "report_fields": definition.report_fields,
        "calls_model": definition.calls_model,
        "skippable": definition.skippable,
    }
    if definition.optional:  # listed only for optional stages: the other entries stay as they were
        fields["optional"] = True
    return Entry(definition.name, target, definition.description, definition.extra, origin, fields)


#: The modules of this package that declare no stage (discovery does not import them; the stage modules do).
HELPER_MODULES = ("base", "media_http", "media_policy", "registry")

#: Every stage. The built-ins are the modules of this package (found by :func:`~echo_builder.registry.discover_modules`
#: without importing them, imported once before the registry is first read), each calling :func:`declare_stage`;
#: a new built-in stage is one new module here. The modules' order is irrelevant (``after`` decides where each
#: stage runs).
STAGES: Registry[StageDefinition] = Registry(
    "stage", adopt=_adopt, package=__package__, helpers=HELPER_MODULES
)


def declare_stage(definition: StageDefinition) -> StageDefinition:
    """Register a built-in stage (call it at the bottom of the stage's module). Re-importing the module (tests)
    refreshes the definition; another stage of the same name raises :class:`ConfigError`."""
    STAGES.add(_entry(definition, BUILT_IN), definition)  # same target (a reload): replaced in place
    return definition


def _reject(entry: Entry[StageDefinition], reason: str) -> None:
    """Leave a plugin stage out of the build and report why (as the registry reports a broken plugin)."""
    value = STAGES.entry_point_value(entry.name) or entry.target
    STAGES.remove(entry.name)
    STAGES._problem(STAGES.group, entry.name, value, entry.origin, reason)


def _ordered(definitions: list[StageDefinition], builtin: set[str]) -> tuple[list[StageDefinition], set[str]]:
    """Stages in run order, and the names that are not reachable from the first stage."""
    children: dict[str | None, list[StageDefinition]] = {}
    for definition in definitions:
        children.setdefault(definition.after, []).append(definition)
    order: list[StageDefinition] = []
    seen: set[str] = set()

    def visit(definition: StageDefinition) -> None:
        # iterative along the built-in chain (no deep recursion), plugins first at each stage
        stack = [definition]
        while stack:
            current = stack.pop()
            if current.name in seen:
                continue
            seen.add(current.name)
            order.append(current)
            kids = children.get(current.name, [])
            plugins = [k for k in kids if k.name not in builtin]
            # an optional built-in stage (``expand`` after ``relevance``) runs before its non-optional sibling
            # (``threads``), whatever order the modules were imported in
            builtins = sorted((k for k in kids if k.name in builtin), key=lambda k: not k.optional)
            # pushed in reverse: plugins run first (in declaration order), then the built-in successor
            stack.extend(reversed([*plugins, *builtins]))

    for root in children.get(None, []):
        visit(root)
    return order, {d.name for d in definitions} - seen


def stage_order(config: BuildConfig | None = None, *, optional: bool = False) -> list[StageDefinition]:
    """Every usable stage (built-ins and plugins) in the order ``build`` runs them.

    Args:
        config: with a build's config, the optional stages it enables are included
            (:meth:`StageDefinition.enabled`).
        optional: include every optional stage (what exists, for listings), whatever ``config`` says.
            Without either, the optional stages are left out: the order of a build that enables none.

    A plugin stage whose ``after`` names no usable stage, that reads a context field no earlier stage writes, or
    that writes a stage file an earlier stage writes, is reported and removed (:func:`plugin_problems`).
    """
    while True:
        entries = STAGES.entries()
        builtin = {e.name for e in entries if e.builtin}
        definitions = [STAGES.get(e.name) for e in entries]
        order, unreachable = _ordered(definitions, builtin)
        by_name = {e.name: e for e in entries}
        bad: list[tuple[Entry[StageDefinition], str]] = []
        for name in sorted(unreachable):
            if name in builtin:
                raise ConfigError(
                    f"the built-in stage {name!r} runs after {by_name[name].fields['after']!r}, "
                    "which is not a stage"
                )
            after = by_name[name].fields["after"]
            why = (
                "is not a registered stage"
                if after not in by_name
                else "forms a cycle of 'after' declarations"
            )
            bad.append(
                (by_name[name], f"after={after!r} {why}; registered: {', '.join(d.name for d in order)}")
            )
        available = set(_INITIAL_FIELDS)
        files: dict[str, str] = {}
        for definition in order:
            missing = [f for f in definition.reads if f not in available]
            clash = [f for f in definition.files or () if f in files]
            if definition.name not in builtin and (missing or clash):
                reason = (
                    f"it reads {missing}, which no stage before it (after={definition.after!r}) writes"
                    if missing
                    else f"its stage file {clash[0]!r} is written by the stage {files[clash[0]]!r}"
                )
                bad.append((by_name[definition.name], reason))
                continue
            available.update(definition.writes)
            files.update({f: definition.name for f in definition.files or ()})
        if not bad:
            return [
                d for d in order if not d.optional or optional or (config is not None and d.enabled(config))
            ]
        for entry, reason in bad:
            _reject(entry, reason)


def builtin_order(config: BuildConfig | None = None, *, optional: bool = False) -> list[StageDefinition]:
    """The built-in stages in run order: what a build runs with no plugin installed (with ``config``: the
    optional stages it enables included; ``optional=True``: every optional stage included)."""
    return [d for d in stage_order(config, optional=optional) if STAGES.entry(d.name).builtin]


def active_stages(skip: Sequence[str] = (), config: BuildConfig | None = None) -> list[StageDefinition]:
    """The stages a build runs: :func:`stage_order` (the optional stages ``config`` enables included) less
    ``skip``.

    Raises:
        ConfigError: ``skip`` names an unknown stage, or one that cannot be skipped (the built-ins).
    """
    if isinstance(skip, str):
        raise ConfigError(f"skip_stages must be a list of stage names, got {skip!r}")
    order = stage_order(config)
    names = {d.name: d for d in order}
    for name in skip:
        if name not in names and name in STAGES and STAGES.get(name).optional:
            raise ConfigError(
                f"the optional stage {name!r} does not run in this build: there is nothing to skip "
                f"({STAGES.get(name).description})"
            )
        if name not in names:
            broken = [p for p in STAGES.problems() if p.name == name]
            raise ConfigError(
                f"unknown stage {name!r}; registered (in run order): {', '.join(names)}"
                + (f" ({broken[0]})" if broken else "")
            )
        if not names[name].skippable:
            skippable = [d.name for d in order if d.skippable]
            raise ConfigError(
                f"the stage {name!r} cannot be skipped (later stages need what it writes); skippable: "
                + (", ".join(skippable) or "none (only plugin stages are)")
            )
    return [d for d in order if d.name not in set(skip)]
