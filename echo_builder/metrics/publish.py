"""``echo-bench publish-metrics``: each ``evaluate`` module as a Hub Space, so ``evaluate.load("ORG/<name>")`` works.

A Space ``ORG/<name>`` (Gradio SDK) receives evaluate's layout: the module ``<name>.py``, the metric card
``README.md`` (its YAML front matter is the Space's: ``sdk: gradio``, ``app_file: app.py``, tags ``evaluate`` and
``metric``), ``app.py`` and ``requirements.txt``. ``evaluate.load("ORG/<name>")`` downloads ``<name>.py`` from
that Space. The upload goes through an ``huggingface_hub.HfApi`` (injectable, as :func:`echo_dataset.publish.publish`).
"""

from __future__ import annotations

import re
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from echo_builder.errors import ConfigError

__all__ = ["SPACE_FILES", "PublishedSpace", "bare_package_lines", "publish_metrics", "space_files"]

#: The files of each Space, in upload order (``{name}`` is the module's name).
SPACE_FILES = ("{name}.py", "README.md", "app.py", "requirements.txt")

_ORG = re.compile(r"^[A-Za-z0-9](?:[A-Za-z0-9._-]{0,94}[A-Za-z0-9])?$")
_PACKAGE_LINE = re.compile(r"^\s*echo[-_.]bench(?=\s*($|[\[<>=!~;@ ]))", re.IGNORECASE)


@dataclass
class PublishedSpace:
    """One module's Space: its repo id, the files it got (or would get), and the failure if it failed."""

    name: str
    repo_id: str
    files: list[str]
    url: str = ""
    error: str | None = None
    dry_run: bool = False
    extra: dict[str, Any] = field(default_factory=dict)


def _front_matter(card: str, where: str) -> dict[str, Any]:
    if not card.startswith("---\n"):
        raise ConfigError(f"{where}: the card has no YAML front matter (a '---' block with sdk: gradio)")
    end = card.find("\n---", 4)
    if end == -1:
        raise ConfigError(f"{where}: the card's YAML front matter is not closed with '---'")
    from echo_dataset.safe_yaml import YAMLReadError, load_yaml

    try:
        meta = load_yaml(card[4:end], where) or {}
    except YAMLReadError as exc:
        raise ConfigError(f"{where}: the card's YAML front matter does not parse: {exc.reason}") from None
    if not isinstance(meta, dict):
        raise ConfigError(f"{where}: the card's YAML front matter is not a mapping")
    return meta


def space_files(name: str, *, package: str | None = None) -> dict[str, bytes]:
    """The files of the Space for module ``name``: ``{file name: content}`` in :data:`SPACE_FILES` order.

    Args:
        name: a module :func:`echo_builder.metrics.path` finds (built-in or a plugin metric's own folder).
        package: replaces the ``echo-bench`` requirement line of ``requirements.txt`` (e.g. a ``git+https://``
            URL or a wheel URL) when the package is not installable by name where the Space runs.

    Raises:
        ConfigError: no such module, a file of the layout is missing, or the card's front matter is not a Space's
            (``sdk: gradio`` and ``app_file: app.py``), naming the file.
    """
    from echo_builder.metrics import path

    folder = Path(path(name))
    files: dict[str, bytes] = {}
    for pattern in SPACE_FILES:
        file = folder / pattern.format(name=name)
        if not file.is_file():
            raise ConfigError(
                f"module {name!r}: {file} is missing (an evaluate module needs {', '.join(SPACE_FILES)})"
            )
        files[file.name] = file.read_bytes()
    where = str(folder / "README.md")
    try:
        meta = _front_matter(files["README.md"].decode("utf-8"), where)
    except UnicodeDecodeError:
        raise ConfigError(f"{where}: the card is not UTF-8 text") from None
    if meta.get("sdk") != "gradio" or meta.get("app_file") != "app.py":
        raise ConfigError(f"{where}: the card's front matter must say sdk: gradio and app_file: app.py")
    if package is not None:
        package = package.strip()
        if not package or "\n" in package:
            raise ConfigError(f"--package {package!r} must be one requirement line")
        lines = files["requirements.txt"].decode("utf-8").splitlines()
        replaced = [package if _PACKAGE_LINE.match(line) else line for line in lines]
        if replaced == lines:
            replaced.insert(0, package)
        files["requirements.txt"] = ("\n".join(replaced) + "\n").encode("utf-8")
    return files


def bare_package_lines(requirements: bytes) -> list[str]:
    """The lines of a ``requirements.txt`` that install echo-bench by name from the package index (``echo-bench``,
    ``echo-bench>=0.1``, ``echo-bench[faces]``): not a direct reference (``echo-bench @ git+https://...`` or a
    wheel URL). echo-bench is not on PyPI, so a Space built from such a line fails to install it, or installs
    whatever another party publishes under that name.
    """
    lines = requirements.decode("utf-8", errors="replace").splitlines()
    return [line.strip() for line in lines if _PACKAGE_LINE.match(line) and "@" not in line.split("#")[0]]


def publish_metrics(
    org: str,
    names: Sequence[str] = (),
    *,
    api: Any = None,
    token: str | None = None,
    private: bool = False,
    dry_run: bool = False,
    package: str | None = None,
) -> list[PublishedSpace]:
    """Create (or reuse) a Gradio Space ``org/<name>`` per module and upload its files in one commit each.

    Args:
        org: the Hub user or organisation (``ORG`` of ``evaluate.load("ORG/<name>")``).
        names: modules to publish; empty: every module :func:`echo_builder.metrics.names` lists.
        api: an ``huggingface_hub.HfApi``-like object (tests pass a fake); default ``HfApi(token=...)``.
        token: Hub token; default ``$HF_TOKEN`` or the saved login. Not needed with ``api`` or ``dry_run``.
        private: create the Spaces private.
        dry_run: check every module and return the files each Space would get; contact nothing.
        package: see :func:`space_files`. Required for an upload while a module's ``requirements.txt`` installs
            echo-bench by name (:func:`bare_package_lines`; the built-in modules' do): a PEP 508 direct reference
            such as ``"echo-bench @ git+https://github.com/OWNER/echo-bench@v0.1.0"`` or a wheel URL. Passing
            ``"echo-bench"`` itself says the name is installable where the Spaces run (a private index).

    Returns:
        One :class:`PublishedSpace` per module, in ``names`` order; a Space the Hub refused has ``error`` set and
        the others are still published (each Space is its own all-or-nothing commit).

    Raises:
        ConfigError: a bad ``org``, an unknown module, a module whose layout is incomplete, or (not ``dry_run``) no
            ``package`` while a module's requirements install echo-bench by name (all before any upload).
        MissingTokenError: no ``api``, no token and not ``dry_run`` (before any network work).
    """
    from echo_builder.metrics import names as module_names
    from echo_dataset.errors import EchoDatasetError, MissingTokenError
    from echo_dataset.publish import _hub_errors, _token

    if not isinstance(org, str) or not _ORG.match(org):
        raise ConfigError(
            f"--org {org!r} must be a Hub user or organisation name (letters, digits, '-', '_', '.')"
        )
    chosen = list(dict.fromkeys(names)) or module_names()
    prepared = {name: space_files(name, package=package) for name in chosen}  # every check before any upload
    results = [
        PublishedSpace(name, f"{org}/{name}", list(files), f"https://huggingface.co/spaces/{org}/{name}")
        for name, files in prepared.items()
    ]
    if dry_run:
        for result in results:
            result.dry_run = True
        return results
    if api is None:
        resolved = _token(token)
        if not resolved:
            raise MissingTokenError(
                "publishing needs a Hugging Face token with write access: set HF_TOKEN, run `hf auth login`, "
                "or pass --token (token= in Python); nothing was uploaded"
            )
        from huggingface_hub import HfApi

        api = HfApi(token=resolved)
    if package is None:
        bare = {name: bare_package_lines(files["requirements.txt"]) for name, files in prepared.items()}
        bare = {name: lines for name, lines in bare.items() if lines}
        if bare:
            listed = ", ".join(f"{name} ({lines[0]!r})" for name, lines in bare.items())
            raise ConfigError(
                f"the requirements.txt of {listed} install echo-bench by name, and echo-bench is not on PyPI: "
                "those Spaces could not build. Pass --package with a line a Space can install, e.g. "
                "--package 'echo-bench @ git+https://github.com/OWNER/echo-bench@v0.1.0' (a release tag) or a "
                "wheel URL (spaces_app/README.md, 'Deploy to a Space'); nothing was uploaded"
            )
    for result in results:
        try:
            with tempfile.TemporaryDirectory(prefix="echo-space-") as staging:
                for file_name, content in prepared[result.name].items():
                    (Path(staging) / file_name).write_bytes(content)
                with _hub_errors(api, f"creating the Space {result.repo_id}"):
                    api.create_repo(
                        result.repo_id, repo_type="space", space_sdk="gradio", exist_ok=True, private=private
                    )
                with _hub_errors(api, f"uploading the module {result.name} to the Space {result.repo_id}"):
                    api.upload_folder(
                        folder_path=staging,
                        repo_id=result.repo_id,
                        repo_type="space",
                        commit_message=f"Upload the {result.name} evaluate module (echo-bench)",
                    )
        except EchoDatasetError as exc:
            result.error = str(exc)
    return results
