"""The ``evaluate`` modules that ship inside the package, and where to find them.

One folder per module (``echo_builder/metrics/<name>/``: ``<name>.py``, a metric card ``README.md`` whose YAML
front matter is the Hub Space's, ``app.py``, ``requirements.txt``), the layout of huggingface/evaluate's own
metrics. They are package data, so they load from any working directory after ``pip install echo-bench``::

    import evaluate, echo_builder.metrics as m
    color = evaluate.load(m.path("color_shift"))

Modules: the community-driven metrics of the metric registry (``color_shift``, ``structure_distance``,
``face_identity``, ``text_rendering``, and any plugin metric that declares its own module folder), plus
``echo_judge`` (the VLM judge) and ``win_rate`` (the ranking statistic). ``echo-bench publish-metrics`` pushes
them to the Hub as Spaces, so that ``evaluate.load("ORG/<name>")`` works online.
"""

from __future__ import annotations

from pathlib import Path

from echo_builder.errors import ConfigError

__all__ = ["MODULES_DIR", "names", "path"]

#: The folder holding the built-in modules (inside the installed package).
MODULES_DIR = Path(__file__).resolve().parent


def _builtin_names() -> list[str]:
    return sorted(p.name for p in MODULES_DIR.iterdir() if p.is_dir() and (p / f"{p.name}.py").is_file())


def names() -> list[str]:
    """Every module :func:`path` finds: the built-in folders, then plugin metrics that declare a module folder."""
    from echo_builder.scoring.registry import metric_definitions

    found = _builtin_names()
    for definition in metric_definitions():
        if definition.module is not None and definition.name not in found:
            found.append(definition.name)
    return found


def path(name: str) -> str:
    """The folder of the ``evaluate`` module ``name``: a string ``evaluate.load`` accepts.

    Args:
        name: a built-in module (``color_shift``, ``structure_distance``, ``face_identity``, ``text_rendering``,
            ``echo_judge``, ``win_rate``) or a registered plugin metric whose definition names its module folder.

    Returns:
        An absolute folder path holding ``<name>.py``.

    Raises:
        ConfigError: no module of that name (the message lists the ones there are), or a metric registered
            without an ``evaluate`` module.
    """
    if not isinstance(name, str) or not name or "/" in name or "\\" in name or name.startswith("."):
        raise ConfigError(f"{name!r} is not a metric module name; choose from {', '.join(names())}")
    folder = MODULES_DIR / name
    if (folder / f"{name}.py").is_file():
        return str(folder)
    from echo_builder.scoring.registry import METRICS

    if name in METRICS:
        module = METRICS.get(name).module
        if module is not None and (Path(module) / f"{name}.py").is_file():
            return str(Path(module).resolve())
        raise ConfigError(
            f"the metric {name!r} declares no evaluate module folder (its definition's `module`)"
        )
    raise ConfigError(f"no evaluate module named {name!r}; choose from {', '.join(names())}")
