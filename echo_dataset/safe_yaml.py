"""Reading YAML that somebody else wrote: the one loader behind every YAML file echo-bench reads.

Run-config files, judge prompt files, curation and analysis prompt files, price files, dataset and metric cards'
front matter, prompt-collection cases: each is read with :func:`load_yaml`, which

- uses a safe loader (libyaml's ``CSafeLoader`` when PyYAML has it, else ``SafeLoader``): plain data only, never a
  Python object (``!!python/object/apply:os.system`` is refused, not run). libyaml refuses a ``"\\ud83d"`` escape
  (a lone surrogate) that PyYAML's own safe loader reads; such a document is read by the latter, so the text can be
  repaired like any other input;
- composes the document into nodes first and measures it before building anything: a document whose aliases
  expand to more than ``max_nodes`` values (a "billion laughs" alias bomb: 360 bytes for 387 million strings),
  an alias that refers to itself (a recursive structure, which every later walk would loop on) or nesting deeper
  than ``max_depth`` levels is refused, so the expansion is never built nor walked (every later step of the
  caller, printing included, sees at most ``max_nodes`` values);
- refuses a mapping key given twice when ``unique_keys`` is set (PyYAML keeps the last one silently);
- raises one :class:`YAMLReadError` naming the file (``where``) and the line, and never echoing the file's
  content: no scalar value, no line of the file (PyYAML's own message quotes the offending line), a tag or a key
  only when it is short and identifier-like (:func:`shown_key`), else only its position.

It lives here, below :mod:`echo_builder`, so that :mod:`echo_dataset` (cards' front matter) uses it too; callers
that raise their own error type pass it as ``error`` (``echo_builder.errors.ConfigError``, a source's
``BadRecord``).
"""

from __future__ import annotations

import re
from typing import Any

import yaml

from echo_dataset.errors import EchoDatasetError

__all__ = ["MAX_DEPTH", "MAX_NODES", "YAMLReadError", "kind_of", "load_yaml", "shown_key", "shown_keys"]

#: the most values (scalars, sequences and mappings, each alias counted at its full expanded size) a document may
#: expand to: far above any prompt file, run config, price list, card or case (a few hundred at most)
MAX_NODES = 100_000
#: the deepest nesting accepted (a prompt file or a run config is 3-4 levels deep)
MAX_DEPTH = 64

_CLoader = getattr(yaml, "CSafeLoader", None)
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_.-]{0,39}")
_TAG = re.compile(r"(?:tag:yaml\.org,2002:|!{1,2})[A-Za-z0-9_.:/-]{1,60}")
_TOKEN = re.compile(r"<[a-z ]{1,40}>")
_QUOTED = re.compile(r"'((?:[^'\\\n]|\\.){0,200})'|\"((?:[^\"\\\n]|\\.){0,200})\"")


class YAMLReadError(EchoDatasetError, ValueError):
    """A YAML document that cannot be read safely: ``where`` (the file), ``reason`` (what is wrong, with the line;
    never the file's content) and ``line`` (1-based, ``None`` when unknown). ``str()`` is ``"{where}: {reason}"``."""

    def __init__(self, where: str, reason: str, line: int | None = None) -> None:
        self.where = where
        self.reason = reason
        self.line = line
        super().__init__(f"{where}: {reason}")


def shown_key(key: Any) -> str | None:
    """``repr(key)`` when it is safe to show in an error message (a short identifier-like string such as an
    option or field name, or a small integer), else ``None``: the caller names its position instead, so that a
    file that is not what was expected (``/etc/shadow`` given as a prompt file) never has a line printed."""
    if isinstance(key, str) and _IDENTIFIER.fullmatch(key):
        return repr(key)
    if isinstance(key, int) and not isinstance(key, bool) and -(10**9) < key < 10**9:
        return repr(key)
    return None


def shown_keys(keys: Any, limit: int = 20) -> str:
    """The keys (or a CSV header's column names) for an error message: each by :func:`shown_key`, else by its
    position (``key 3``); at most ``limit``, then how many more. A header is a file's first line: this never
    prints it unless it is made of names."""
    keys = list(keys or ())
    shown = [shown_key(k) or f"key {n}" for n, k in enumerate(keys[:limit], start=1)]
    more = f" and {len(keys) - limit} more" if len(keys) > limit else ""
    return (", ".join(shown) or "none") + more


def kind_of(value: Any) -> str:
    """What a YAML value is, in words, for "expected a mapping, got a string" (never the value itself)."""
    import datetime as dt

    if value is None:
        return "nothing (an empty document or null)"
    if isinstance(value, bool):
        return "true/false"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, (list, tuple)):
        return "a list"
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, (bytes, bytearray)):
        return "binary data"
    if isinstance(value, (dt.date, dt.datetime)):
        return "a date"
    return f"a {type(value).__name__}"


def _quoted(match: re.Match[str]) -> str:
    text = match.group(1) if match.group(1) is not None else match.group(2)
    safe = (
        len(text) <= 1
        or (text.startswith("\\") and len(text) <= 6)  # one escaped character: '\t', '\x00', '\u2028'
        or _IDENTIFIER.fullmatch(text)
        or _TAG.fullmatch(text)
        or _TOKEN.fullmatch(text)
    )
    return match.group(0) if safe else "'...'"


def _problem(exc: yaml.YAMLError) -> str:
    """PyYAML's problem text without content from the file: quoted parts shown only when they are a single
    character, an identifier, a tag or a token name (PyYAML's ``str(exc)`` also quotes the offending line, which
    is never used)."""
    problem = getattr(exc, "problem", None) or (str(exc).splitlines() or ["invalid YAML"])[0]
    context = getattr(exc, "context", None)
    # "expected a single document in the stream" + "but found another document"
    if context and str(problem).startswith("but "):
        problem = f"{context} {problem}"
    problem = " ".join(str(problem).split())[:300]
    return _QUOTED.sub(_quoted, problem)


def _line(mark: Any) -> int | None:
    line = getattr(mark, "line", None)
    return line + 1 if isinstance(line, int) else None


def _loader_class(base: type, unique_keys: bool) -> type:
    class Loader(base):  # type: ignore[misc, valid-type]
        pass

    if unique_keys:

        def mapping(loader: Any, node: Any, deep: bool = False) -> Any:
            seen: set[Any] = set()
            for position, (key_node, _) in enumerate(node.value, start=1):
                key = loader.construct_object(key_node, deep=deep)
                try:
                    duplicate = key in seen
                    seen.add(key)
                except TypeError:  # a list or mapping as key: the caller refuses it as a key that is no name
                    continue
                if duplicate:
                    shown = shown_key(key)
                    what = f"key {shown}" if shown else f"key {position} of the mapping"
                    raise yaml.constructor.ConstructorError(
                        None, None, f"{what} is given twice", key_node.start_mark
                    )
            return loader.construct_mapping(node, deep=deep)

        Loader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, mapping)
    return Loader


_LOADERS: dict[tuple[bool, bool], type] = {}


def _loader(c: bool, unique_keys: bool) -> type:
    key = (c, unique_keys)
    if key not in _LOADERS:
        _LOADERS[key] = _loader_class(
            _CLoader if c and _CLoader is not None else yaml.SafeLoader, unique_keys
        )
    return _LOADERS[key]


def _children(node: Any) -> list[Any]:
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    if isinstance(node, yaml.MappingNode):
        return [n for pair in node.value for n in pair]
    return []


def _measure(root: Any, where: str, max_nodes: int, max_depth: int) -> None:
    """Refuse a node graph that expands to more than ``max_nodes`` values, nests deeper than ``max_depth`` or
    holds a cycle, without expanding it: each distinct node is visited once (aliases share their node), its
    expanded size and height computed from its children's (iterative: no recursion limit)."""
    size: dict[int, int] = {}
    height: dict[int, int] = {}
    visiting: set[int] = set()
    distinct = 0
    stack: list[tuple[Any, bool]] = [(root, False)]
    while stack:
        node, finished = stack.pop()
        key = id(node)
        if finished:
            children = _children(node)
            visiting.discard(key)
            size[key] = 1 + sum(size[id(c)] for c in children)
            height[key] = 1 + max((height[id(c)] for c in children), default=0)
            line = _line(node.start_mark)
            if height[key] > max_depth:
                raise YAMLReadError(
                    where,
                    f"not valid YAML: nested too deeply (more than {max_depth} levels, line {line})",
                    line,
                )
            if size[key] > max_nodes:
                why = "(alias bomb?)" if distinct <= max_nodes else "(too many to be this kind of file)"
                raise YAMLReadError(
                    where,
                    f"YAML expands to more than {max_nodes:,} values {why}; refused at line {line}",
                    line,
                )
            continue
        if key in size:
            continue
        if key in visiting:
            line = _line(node.start_mark)
            raise YAMLReadError(
                where,
                f"not valid here: a YAML alias at line {line} refers to itself (a recursive structure)",
                line,
            )
        visiting.add(key)
        distinct += 1
        if distinct > max_nodes:
            line = _line(node.start_mark)
            raise YAMLReadError(
                where,
                f"YAML holds more than {max_nodes:,} values (too many to be this kind of file), line {line}",
                line,
            )
        stack.append((node, True))
        stack.extend((c, False) for c in reversed(_children(node)) if id(c) not in size)


def _load(text: str, where: str, loader_class: type, max_nodes: int, max_depth: int) -> Any:
    loader = loader_class(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        _measure(node, where, max_nodes, max_depth)
        return loader.construct_document(node)
    finally:
        loader.dispose()


def load_yaml(
    text: str | bytes,
    where: str,
    *,
    max_nodes: int = MAX_NODES,
    max_depth: int = MAX_DEPTH,
    unique_keys: bool = False,
    error: type[Exception] | None = None,
) -> Any:
    """The one YAML document of ``text`` as plain Python data (``None`` for an empty document), read safely (see
    the module docstring).

    Args:
        text: the document; bytes are decoded as UTF-8 (a leading byte-order mark dropped).
        where: names the file in every error (``"judge prompt p.yaml"``, ``"--run-config run.yaml"``).
        max_nodes: the most values the document may expand to, aliases counted at their expanded size.
        max_depth: the deepest nesting accepted.
        unique_keys: refuse a mapping key given twice.
        error: the exception type raised (called with the message, ``"{where}: {reason}"``); default
            :class:`YAMLReadError`, which also carries ``reason`` and ``line``.

    Raises:
        YAMLReadError (or ``error``): not UTF-8, not valid YAML (with the line and PyYAML's problem, any content
            quoted in it left out), more than one document, too many values, too deep, recursive, a key twice.
    """
    try:
        return _load_checked(text, where, max_nodes, max_depth, unique_keys)
    except YAMLReadError as exc:
        if error is None or isinstance(exc, error):
            raise
        raise error(str(exc)) from None


def _load_checked(text: str | bytes, where: str, max_nodes: int, max_depth: int, unique_keys: bool) -> Any:
    if isinstance(text, bytes):
        try:
            text = text.decode("utf-8-sig")
        except UnicodeDecodeError as exc:
            raise YAMLReadError(
                where,
                f"not UTF-8 text (byte 0x{text[exc.start]:02x} at offset {exc.start}); save it as UTF-8",
            ) from None
    try:
        try:
            return _load(text, where, _loader(True, unique_keys), max_nodes, max_depth)
        except yaml.YAMLError as exc:
            # libyaml refuses a "\uD83D" escape (a lone surrogate) that PyYAML's own safe loader reads
            if _CLoader is None or "Unicode character escape" not in str(getattr(exc, "problem", "") or exc):
                raise
            return _load(text, where, _loader(False, unique_keys), max_nodes, max_depth)
    except RecursionError:  # PyYAML's own composer recurses per level; libyaml stops at 1,000 levels itself
        raise YAMLReadError(
            where, f"not valid YAML: nested too deeply (more than {max_depth} levels)"
        ) from None
    except yaml.YAMLError as exc:
        problem = _problem(exc)
        if "maximum nesting depth" in problem:  # libyaml's own limit
            line = _line(getattr(exc, "problem_mark", None))
            raise YAMLReadError(
                where, f"not valid YAML: nested too deeply (more than {max_depth} levels, line {line})", line
            ) from None
        mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
        line = _line(mark)
        at = f" at line {line}, column {mark.column + 1}" if line is not None else ""
        raise YAMLReadError(where, f"not valid YAML{at}: {problem}", line) from None
