"""One registry per kind of extension: metric, source format, backend, generator, curation stage.

Every kind keeps its entries in a :class:`Registry`: the name users type, a one-line description, the pip extra
that provides its dependencies, kind-specific fields (a metric's spec and applicability flag, a stage's inputs),
and the object itself, either already imported or named by an import path (``"package.module:attribute"``) and
imported on first use, so listing what exists never imports ``torch`` or ``openai``.

Built-ins declare themselves in their own module (one module per metric, source, backend, generator or stage),
and each registry finds its package's modules itself (:func:`discover_modules`, ``pkgutil`` over the package folder,
nothing imported until the registry is first read): adding a built-in is one new module, with no import to add
anywhere. A package's modules that declare nothing (``base.py``, ``run.py``, ...) are named in the registry's
``helpers`` and never imported by discovery. Where a kind's order matters (the default metric order, the source
auto-detection order) each built-in declares its ``order`` number; the import order plays no part.
Third-party packages add entries through Python entry points, one group per kind (:data:`ENTRY_POINT_GROUPS`)::

    # the plugin's pyproject.toml
    [project.entry-points."echo_bench.metrics"]
    brightness_shift = "echo_brightness:METRIC"

Each entry point is loaded the first time its registry is read; what it loads is handed to the registry's
``adopt`` function (a metric definition, a ``SourceAdapter`` or ``Backend`` subclass, ...). A plugin that fails to
import or declares something invalid is reported (a warning, :func:`plugin_problems`, ``echo-bench plugins``) and
left out; it never stops the package or another plugin from working. A plugin may not replace a built-in: a
name clash is such a problem too. Each import (and adoption) runs in a daemon thread under the plugin import
deadline (:mod:`echo_builder.plugin_deadline`, ``ECHO_PLUGIN_IMPORT_TIMEOUT_S``, 30 s by default): a plugin whose
import never returns is such a problem too, and every command that reads the registry goes on without it.

The pattern follows the plugin registries of pytest (``pytest11``), timm (``register_model``) and lmms-eval's
task registry: declaration next to the implementation, discovery by entry point, lazy import.
"""

from __future__ import annotations

import dataclasses
import importlib
import importlib.util
import logging
import pkgutil
import sys
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from importlib import metadata
from types import MappingProxyType
from typing import Any, Generic, TypeVar

from echo_builder.errors import ConfigError, EchoError, MissingDependencyError
from echo_builder.plugin_deadline import PluginTimeoutError, call_with_deadline

__all__ = [
    "ENTRY_POINT_GROUPS",
    "Entry",
    "PluginProblem",
    "Registry",
    "all_registries",
    "discover_modules",
    "plugin_problems",
    "reload_plugins",
    "spec_class_adopter",
    "spec_class_decorator",
]

log = logging.getLogger(__name__)

T = TypeVar("T")

#: Entry-point group of each kind of extension.
ENTRY_POINT_GROUPS = {
    "metric": "echo_bench.metrics",
    "source": "echo_bench.sources",
    "backend": "echo_bench.backends",
    "generator": "echo_bench.generators",
    "stage": "echo_bench.stages",
}

BUILT_IN = "built-in"


@dataclass(frozen=True)
class PluginProblem:
    """A plugin entry point that could not be used, and why (shown by ``echo-bench plugins``)."""

    group: str
    name: str
    value: str  # the entry point's "module:attribute"
    distribution: str  # "package 1.0" or "" when unknown
    reason: str

    def __str__(self) -> str:
        where = f" from {self.distribution}" if self.distribution else ""
        return f"plugin {self.name!r} ({self.group} = {self.value}{where}) not loaded: {self.reason}"


@dataclass(frozen=True)
class Entry(Generic[T]):
    """One registered extension.

    Attributes:
        name: what users type (``color_shift``, ``openai``, ``x_api``).
        target: the implementation as ``"module:attribute"``; imported on first :meth:`Registry.get`.
        description: one line for listings and ``--help``.
        extra: the pip extra that provides its dependencies (``pip install -e ".[extra]"``), ``None`` for core.
        origin: ``"built-in"`` or the plugin's distribution (``"echo-brightness 0.1"``).
        fields: kind-specific declarations (read with ``entry.fields[...]`` or :meth:`get_field`).
        order: the built-in's position among its kind's built-ins, lower first (the metrics' default order and
            row order, the sources' detection order); built-ins without one follow the numbered ones in
            declaration order. Plugins ignore it: they always come after the built-ins, by name.
    """

    name: str
    target: str
    description: str = ""
    extra: str | None = None
    origin: str = BUILT_IN
    fields: Mapping[str, Any] = field(default_factory=dict)
    order: float | None = None

    @property
    def builtin(self) -> bool:
        return self.origin == BUILT_IN

    def get_field(self, key: str, default: Any = None) -> Any:
        return self.fields.get(key, default)


def discover_modules(package: str, helpers: Iterable[str] = ()) -> tuple[str, ...]:
    """The modules of ``package`` that declare built-ins: every plain module of its folder (``pkgutil``, nothing
    imported) except ``__init__``, subpackages and the ``helpers`` (module names without the package prefix, e.g.
    ``("base", "run")``), as full dotted names sorted by name.

    ``package`` must be importable (it is being imported when a registry of its own is created; its folder is read
    from ``__path__`` then). Raises :class:`ConfigError` when ``package`` is not a package or a helper names no
    module of it (a renamed helper would otherwise be imported as a declaring module without notice).
    """
    module = sys.modules.get(package)
    locations = getattr(module, "__path__", None) if module is not None else None
    if locations is None:
        spec = importlib.util.find_spec(package)
        locations = spec.submodule_search_locations if spec is not None else None
    if not locations:
        raise ConfigError(f"{package!r} is not a package: no built-in modules to discover")
    found = sorted(m.name for m in pkgutil.iter_modules(list(locations)) if not m.ispkg)
    unknown = sorted(set(helpers) - set(found))
    if unknown:
        raise ConfigError(f"helper modules {unknown} of {package} do not exist; modules: {', '.join(found)}")
    skip = set(helpers)
    return tuple(f"{package}.{name}" for name in found if name not in skip)


class Registry(Generic[T]):
    """Name -> :class:`Entry` for one kind: built-ins by their ``order`` (then in declaration order), then plugins
    by name.

    Args:
        kind: ``"metric"``, ``"source"``, ``"backend"``, ``"generator"`` or ``"stage"`` (a key of
            :data:`ENTRY_POINT_GROUPS`), used in messages and to find the entry-point group.
        adopt: turns what a plugin's entry point loads into ``(entry, object)``; raises to reject it.
            ``None`` accepts only objects with a ``name`` attribute equal to the entry point's name.
        builtins: modules imported (once) before the first lookup so that modules declaring built-ins with the
            :meth:`register` decorator have run, e.g. ``("echo_builder.stages.base",)``.
        package: a package whose modules are discovered (:func:`discover_modules`) and imported after
            ``builtins`` before the first lookup: each declares its own entries.
        helpers: the modules of ``package`` that declare nothing and are not imported by discovery.

    A built-in module that fails to import raises :class:`ImportError` naming it (built-ins are echo-bench's own
    code: a broken one is a bug to see, unlike a broken plugin, which is reported and left out).
    """

    def __init__(
        self,
        kind: str,
        *,
        adopt: Callable[[str, Any, str], tuple[Entry[T], T]] | None = None,
        builtins: tuple[str, ...] = (),
        package: str | None = None,
        helpers: Iterable[str] = (),
    ) -> None:
        if kind not in ENTRY_POINT_GROUPS:
            raise ValueError(f"unknown registry kind {kind!r}")
        self.kind = kind
        self.group = ENTRY_POINT_GROUPS[kind]
        self._adopt = adopt
        self._builtin_modules = builtins
        self.package = package
        self.helpers: frozenset[str] = frozenset(helpers)
        self._entries: dict[str, Entry[T]] = {}
        self._objects: dict[str, T] = {}
        self._problems: list[PluginProblem] = []
        self._points: dict[str, str] = {}  # plugin name -> its entry point's "module:attribute"
        self._plugins_loaded = False
        self._plugins_done = threading.Event()  # set once the entry points are read (every plugin tried)
        self._loader: int | None = None  # the thread reading the entry points right now
        self._builtins_imported = False
        self._importing_builtins = False
        self._lock = threading.RLock()
        _REGISTRIES[kind] = self

    # ------------------------------------------------------------------------------------------- declaring

    def declare(
        self,
        name: str,
        target: str,
        *,
        description: str = "",
        extra: str | None = None,
        origin: str = BUILT_IN,
        order: float | None = None,
        **fields: Any,
    ) -> Entry[T]:
        """Declare an entry by import path without importing it. Raises :class:`ConfigError` on a name clash or
        an ``order`` another built-in has."""
        entry: Entry[T] = Entry(
            name, target, description, extra, origin, MappingProxyType(dict(fields)), order
        )
        self._add(entry, None)
        return entry

    def add(self, entry: Entry[T], obj: T | None = None) -> Entry[T]:
        """Add a prepared entry (and its object when already imported). Raises :class:`ConfigError` on a clash."""
        self._add(entry, obj)
        return entry

    def register(
        self,
        obj: T | None = None,
        *,
        description: str | None = None,
        extra: str | None = None,
        order: float | None = None,
        **fields: Any,
    ) -> Any:
        """Decorator (bare or with arguments): register ``obj`` under its ``name`` attribute.

        ``description`` defaults to ``obj.description``; ``order`` places a built-in (:attr:`Entry.order`).
        Raises :class:`ConfigError` when the name is empty or already taken by another object, or another
        built-in has the same ``order``.
        """

        def decorate(value: T) -> T:
            name = getattr(value, "name", "")
            if not name or not isinstance(name, str):
                raise ConfigError(
                    f"{getattr(value, '__qualname__', value)!r} has no `name`; set it before registering"
                )
            target = f"{value.__module__}:{value.__qualname__}" if hasattr(value, "__qualname__") else ""
            text = description if description is not None else str(getattr(value, "description", "") or "")
            existing = self._entries.get(name)
            if existing is not None and existing.target == target:
                # re-import of the declaring module (tests reload): keep the declaration, refresh the object
                self._objects[name] = value
                return value
            entry: Entry[T] = Entry(
                name, target, text, extra, BUILT_IN, MappingProxyType(dict(fields)), order
            )
            self._add(entry, value)
            return value

        return decorate(obj) if obj is not None else decorate

    def _add(self, entry: Entry[T], obj: T | None) -> None:
        with self._lock:
            existing = self._entries.get(entry.name)
            if existing is not None and (existing.target != entry.target or not entry.target):
                raise ConfigError(
                    f"a {self.kind} named {entry.name!r} is already registered "
                    f"({existing.target or existing.origin}); choose another name"
                )
            if entry.order is not None and entry.builtin:
                if (
                    isinstance(entry.order, bool)
                    or not isinstance(entry.order, (int, float))
                    or entry.order != entry.order
                ):
                    raise ConfigError(
                        f"the {self.kind} {entry.name!r}: order must be a number, got {entry.order!r}"
                    )
                same = [
                    e.name
                    for e in self._entries.values()
                    if e.builtin and e.order == entry.order and e.name != entry.name
                ]
                if same:
                    raise ConfigError(
                        f"the built-in {self.kind}s {same[0]!r} and {entry.name!r} both declare order "
                        f"{entry.order}; give each its own position"
                    )
            if existing is not None and existing.origin != entry.origin:
                del self._entries[entry.name]  # adopted as a plugin: listed among the plugins, by name
            self._entries[entry.name] = entry
            if obj is not None:
                self._objects[entry.name] = obj

    def remove(self, name: str) -> None:
        """Forget ``name`` (tests and plugin reloading)."""
        with self._lock:
            self._entries.pop(name, None)
            self._objects.pop(name, None)
            self._points.pop(name, None)

    # --------------------------------------------------------------------------------------------- reading

    def builtin_modules(self) -> tuple[str, ...]:
        """The modules imported before the first lookup: ``builtins``, then the discovered modules of
        ``package`` (sorted by name; the import order decides nothing, :attr:`Entry.order` does)."""
        discovered = discover_modules(self.package, self.helpers) if self.package else ()
        return (*self._builtin_modules, *discovered)

    def import_builtins(self) -> None:
        """Import the :meth:`builtin_modules` (once; no plugin is loaded), so every built-in is declared.

        Raises:
            ImportError: naming the built-in module that failed to import and why (its exception is chained).
        """
        if self._builtins_imported:
            return
        with self._lock:
            # a built-in module that reads the registry while it is imported gets what is declared so far
            if self._builtins_imported or self._importing_builtins:
                return
            self._importing_builtins = True
            try:
                for module in self.builtin_modules():
                    try:
                        importlib.import_module(module)
                    except Exception as exc:
                        raise ImportError(
                            f"echo-bench's built-in {self.kind} module {module} failed to import: "
                            f"{type(exc).__name__}: {exc}",
                            name=module,
                        ) from exc
                self._builtins_imported = True
            finally:
                self._importing_builtins = False

    def _ready(self) -> None:
        if self._builtins_imported and self._plugins_done.is_set():
            return
        from echo_builder.plugin_deadline import in_plugin_import

        me = threading.get_ident()
        with self._lock:
            self.import_builtins()
            load = not self._plugins_loaded
            if load:
                self._plugins_loaded = True
                self._loader = me
        if load:
            # each plugin is imported in a worker thread under a deadline (echo_builder.plugin_deadline): the lock
            # is not held meanwhile, so a plugin that declares itself while imported can take it
            try:
                self._load_plugins()
            finally:
                self._loader = None
                self._plugins_done.set()
        elif self._loader not in (None, me) and not in_plugin_import():
            # another thread is reading the entry points: wait for it (its imports are bounded by the deadline);
            # the loading thread itself and a plugin being imported get what is declared so far
            self._plugins_done.wait()

    def __contains__(self, name: object) -> bool:
        self._ready()
        return name in self._entries

    def __iter__(self) -> Iterator[Entry[T]]:
        return iter(self.entries())

    def __len__(self) -> int:
        self._ready()
        return len(self._entries)

    def _ordered(self) -> list[Entry[T]]:
        """Built-ins by ``order`` (unnumbered ones after, in declaration order), then the others as added."""
        rank = {name: i for i, name in enumerate(self._entries)}
        return sorted(
            self._entries.values(),
            key=lambda e: (not e.builtin, e.order is None, e.order or 0, rank[e.name]),
        )

    def names(self) -> list[str]:
        """Registered names: built-ins by ``order`` (then declaration order), then plugins by name."""
        return [e.name for e in self.entries()]

    def entries(self) -> list[Entry[T]]:
        """Registered entries in :meth:`names` order."""
        self._ready()
        with self._lock:
            return self._ordered()

    def entry(self, name: str) -> Entry[T]:
        """The entry ``name``; :class:`ConfigError` listing the registered names otherwise."""
        self._ready()
        try:
            return self._entries[name]
        except KeyError:
            raise ConfigError(self.unknown_message(name)) from None

    def unknown_message(self, name: str) -> str:
        known = ", ".join(e.name for e in self._ordered()) or "none"
        hint = ""
        broken = [p for p in self._problems if p.name == name]
        if broken:
            hint = f" ({broken[0]})"
        return f"unknown {self.kind} {name!r}; registered: {known}{hint}"

    def get(self, name: str) -> T:
        """The object registered as ``name``, importing its module on first use.

        Raises:
            ConfigError: ``name`` is not registered.
            MissingDependencyError: importing it needs an optional extra that is not installed.
        """
        entry = self.entry(name)
        obj = self._objects.get(name)
        if obj is not None:
            return obj
        module_name, _, attribute = entry.target.partition(":")
        try:
            module = importlib.import_module(module_name)
        except ImportError as exc:
            if entry.extra and getattr(exc, "name", None) and not str(exc.name).startswith(module_name):
                raise MissingDependencyError(str(exc.name), entry.extra, f"the {self.kind} {name!r}") from exc
            raise
        obj = module
        for part in attribute.split(".") if attribute else ():
            obj = getattr(obj, part)
        with self._lock:
            self._objects[name] = obj  # type: ignore[assignment]
        return obj  # type: ignore[return-value]

    def construct(self, name: str, *args: Any, **kwargs: Any) -> Any:
        """``self.get(name)(*args, **kwargs)``: create an instance of a registered class.

        A plugin's constructor that fails with anything but an echo-bench error or a pydantic ``ValidationError``
        (its options model) raises :class:`ConfigError` naming the entry, its distribution and the failure, so
        the CLI shows one ``error:`` line instead of a traceback; built-ins raise as they do.
        """
        factory = self.get(name)
        entry = self._entries[name]
        try:
            return factory(*args, **kwargs)  # type: ignore[operator]
        except EchoError:
            raise
        except Exception as exc:
            # an options model's error stays as it is: the CLI shows it as an invalid option
            from pydantic import ValidationError

            if entry.builtin or isinstance(exc, ValidationError):
                raise
            raise ConfigError(
                f"the {self.kind} {name!r} from {entry.origin} failed to start: {type(exc).__name__}: {exc}"
            ) from exc

    def entry_point_value(self, name: str) -> str | None:
        """The ``"module:attribute"`` of the entry point that loaded the plugin ``name`` (``None`` for a built-in):
        what a problem found later (a stage's ``after``) reports, as the loading problems do."""
        return self._points.get(name)

    def problems(self) -> list[PluginProblem]:
        """The plugins of this kind that could not be used."""
        self._ready()
        return list(self._problems)

    # --------------------------------------------------------------------------------------------- plugins

    def _load_plugins(self) -> None:
        try:
            points = sorted(metadata.entry_points(group=self.group), key=lambda ep: ep.name)
        except Exception as exc:  # a corrupt installed distribution must not stop the package
            self._problem(self.group, "*", "", "", f"entry points could not be read: {exc}")
            return
        for point in points:
            dist = getattr(point, "dist", None)
            distribution = f"{dist.name} {dist.version}" if dist is not None else ""
            existing = self._entries.get(point.name)
            if (
                existing is not None
                and existing.origin == BUILT_IN
                and not self._same_object(existing, point)
            ):
                self._problem(
                    self.group,
                    point.name,
                    point.value,
                    distribution,
                    f"the name is taken by echo-bench's built-in {self.kind}; choose another name",
                )
                continue
            try:
                # the import and the adoption (a plugin's own code: its module, a class's constructor) run in a
                # daemon thread under the plugin import deadline: one that hangs is abandoned, not waited for
                entry, obj = call_with_deadline(
                    lambda point=point, origin=distribution or point.value: self._adopt_plugin(
                        point.name, point.load(), origin
                    ),
                    what=f"its import ({point.value})",
                    imports=True,
                )
                if not entry.target:  # an adopted declaration knows no import path: the entry point's is it
                    entry = dataclasses.replace(entry, target=point.value)
                if entry.name != point.name:
                    raise ConfigError(
                        f"the entry point is named {point.name!r} but declares {entry.name!r}; use one name"
                    )
                self._add(entry, obj)
                self._points[entry.name] = point.value
            except PluginTimeoutError as exc:
                # an import that hangs: abandoned at its deadline, reported like a failure
                reason = str(exc).removeprefix("its ")
                self._problem(self.group, point.name, point.value, distribution, reason)
            except (Exception, SystemExit) as exc:
                # any failure of third-party code is that plugin's problem only: a module that calls sys.exit()
                # while being imported included (KeyboardInterrupt still stops the program)
                self._problem(
                    self.group, point.name, point.value, distribution, f"{type(exc).__name__}: {exc}"
                )

    def _load_point(self, point: Any) -> Any:
        """``point.load()`` (the plugin's import) in a daemon thread, under the plugin import deadline.

        Raises:
            PluginTimeoutError: the import did not return in time; it was abandoned (its module may stay half
                imported: :meth:`_same_object` never imports it in the caller's thread).
        """
        return call_with_deadline(point.load, what=f"its import ({point.value})", imports=True)

    def _same_object(self, existing: Entry[T], point: Any) -> bool:
        """Whether an entry point names the very object already registered under its name: a plugin class that
        also carries its kind's ``register_*`` decorator, registered when another entry point of the same
        distribution imported the module first. That is the plugin itself, not a clash with a built-in."""
        if existing.target.startswith("echo_builder."):  # echo-bench's own: never taken over by a plugin
            return False
        if existing.target == point.value:
            return True
        module_name = point.value.partition(":")[0].strip()
        if not existing.target or module_name not in sys.modules:  # a clash is decided without importing it
            return False
        try:
            loaded = self._load_point(point)
        except (Exception, SystemExit):
            return False
        return existing.target == f"{getattr(loaded, '__module__', '')}:{getattr(loaded, '__qualname__', '')}"

    def _adopt_plugin(self, name: str, loaded: Any, origin: str) -> tuple[Entry[T], T]:
        if self._adopt is not None:
            entry, obj = self._adopt(name, loaded, origin)
            return entry, obj
        declared = getattr(loaded, "name", None)
        if declared != name:
            raise ConfigError(f"expected an object with name = {name!r}, got {declared!r}")
        target = f"{loaded.__module__}:{getattr(loaded, '__qualname__', '')}"
        entry: Entry[T] = Entry(name, target, str(getattr(loaded, "description", "") or ""), None, origin)
        return entry, loaded

    def _problem(self, group: str, name: str, value: str, distribution: str, reason: str) -> None:
        problem = PluginProblem(group, name, value, distribution, reason)
        self._problems.append(problem)
        log.warning("%s", problem)

    def reload_plugins(self) -> None:
        """Forget every plugin entry and problem and read the entry points again on the next lookup."""
        with self._lock:
            for name in [n for n, e in self._entries.items() if e.origin != BUILT_IN]:
                self.remove(name)
            self._problems.clear()
            self._points.clear()
            self._plugins_loaded = False
            self._plugins_done.clear()


_REGISTRIES: dict[str, Registry[Any]] = {}

#: Modules whose import creates each kind's registry and declares its built-ins.
_REGISTRY_MODULES = {
    "metric": "echo_builder.scoring.registry",
    "source": "echo_builder.sources",
    "backend": "echo_builder.backends",
    "generator": "echo_builder.generate",
    "stage": "echo_builder.stages.registry",
}


def spec_class_adopter(
    base: type, public_name: str, kind: str
) -> Callable[[str, Any, str], tuple[Entry[Any], Any]]:
    """The ``adopt`` of a registry of classes created from ``<name>:<target>`` specs (backends, generators).

    The entry point's object must be a concrete subclass of ``base`` (``public_name`` is how messages name it,
    e.g. ``echo_builder.backends.Backend``) whose ``name`` equals the entry point's name and holds no ``:`` or
    whitespace (a spec could never name it). The entry carries ``needs_target`` in its fields.

    Raises (from the returned function):
        ConfigError: any of these rules is broken (the registry reports it as that plugin's problem).
    """
    import inspect

    def adopt(name: str, loaded: Any, origin: str) -> tuple[Entry[Any], Any]:
        if not (isinstance(loaded, type) and issubclass(loaded, base)):
            raise ConfigError(f"expected a subclass of {public_name}, got {type(loaded).__name__} {loaded!r}")
        if inspect.isabstract(loaded):
            missing = ", ".join(sorted(getattr(loaded, "__abstractmethods__", ())))
            raise ConfigError(f"{loaded.__qualname__} is abstract (does not implement {missing})")
        if not name or ":" in name or any(c.isspace() for c in name):
            raise ConfigError(
                f"{name!r} cannot be a {kind} name: a spec is <name>:<target>, so no ':' or spaces"
            )
        if loaded.name != name:
            raise ConfigError(
                f"{loaded.__qualname__}.name is {loaded.name!r}; set it to the entry point's name {name!r}"
            )
        entry: Entry[Any] = Entry(
            name,
            f"{loaded.__module__}:{loaded.__qualname__}",
            str(loaded.description or ""),
            None,
            origin,
            MappingProxyType({"needs_target": bool(loaded.needs_target)}),
        )
        return entry, loaded

    return adopt


def all_registries() -> dict[str, Registry[Any]]:
    """Every kind's registry (importing the modules that declare them), in :data:`ENTRY_POINT_GROUPS` order."""
    for kind, module in _REGISTRY_MODULES.items():
        if kind not in _REGISTRIES:
            try:
                importlib.import_module(module)
            except ImportError:  # a kind not present in this version of the package
                continue
    return {kind: _REGISTRIES[kind] for kind in ENTRY_POINT_GROUPS if kind in _REGISTRIES}


def plugin_problems() -> list[PluginProblem]:
    """Every plugin of every kind that could not be used."""
    return [problem for registry in all_registries().values() for problem in registry.problems()]


def reload_plugins() -> None:
    """Read every kind's entry points again (after installing a plugin in a running process, and in tests)."""
    for registry in all_registries().values():
        registry.reload_plugins()


def spec_class_decorator(registry: Registry[Any], base: type, kind: str) -> Callable[..., Any]:
    """The ``register_<kind>`` class decorator of a registry of classes created from specs (backends, generators):
    bare (``@register_backend``) or with arguments (``@register_backend(order=10, extra="judge-local")``), it
    registers the class under its ``name`` with ``needs_target`` in the entry's fields.

    Raises (from the decorator):
        ConfigError: the class is not a subclass of ``base`` or has no ``name``, the name is taken by another
            class, or another built-in has the same ``order``.
    """

    def register(cls: type | None = None, *, order: float | None = None, extra: str | None = None) -> Any:
        def decorate(klass: type) -> type:
            if not isinstance(klass, type) or not issubclass(klass, base):
                raise ConfigError(f"register_{kind} takes a {base.__name__} subclass, got {klass!r}")
            if not getattr(klass, "name", ""):
                raise ConfigError(
                    f"{klass.__qualname__} has no `name`; set the class attribute before registering"
                )
            registry.register(
                klass, order=order, extra=extra, needs_target=bool(getattr(klass, "needs_target", False))
            )
            return klass

        return decorate(cls) if cls is not None else decorate

    return register
