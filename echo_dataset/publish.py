"""Publish a hub-shaped ECHO folder to the Hugging Face Hub (through an injectable ``HfApi``).

Everything that can be wrong is checked before any network work: the folder (each config's Parquet and the
README), the token, and, with ``check_pseudonymized=True`` (the default), that the folder was written with
pseudonymized handles.
"""

from __future__ import annotations

import contextlib
import json
import os
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from echo_dataset import CONFIG_NAMES, SPLIT
from echo_dataset.errors import EchoDatasetError, HubError, InvalidHubFolderError, MissingTokenError
from echo_dataset.writer import ECHO_METADATA_KEY

__all__ = ["publish", "upload_patterns", "uses_public_salt", "validate_hub_folder"]


def validate_hub_folder(folder: str | Path, *, require_pseudonymized: bool = False) -> list[Path]:
    """The folder's Parquet files; raises :class:`InvalidHubFolderError` when a config or the README is missing."""
    import pyarrow.parquet as pq

    root = Path(folder)
    if not root.is_dir():
        raise InvalidHubFolderError(
            f"{str(root)!r} is not a folder; write it with echo_dataset.write_hub_folder"
        )
    problems = []
    files: list[Path] = []
    for config in CONFIG_NAMES:
        found = sorted((root / config).glob(f"{SPLIT}-*.parquet"))
        if not found:
            problems.append(f"{config}/{SPLIT}-*.parquet")
        files += found
    if not (root / "README.md").is_file():
        problems.append("README.md")
    if problems:
        raise InvalidHubFolderError(
            f"{str(root)!r} is not a complete ECHO dataset folder: missing {', '.join(problems)}; "
            "write it with echo_dataset.write_hub_folder"
        )
    for path in [root / "README.md", *(root / c for c in CONFIG_NAMES), *files]:
        if path.is_symlink():  # a link would upload a file from elsewhere on the machine
            raise InvalidHubFolderError(
                f"{path} is a symbolic link; publish uploads only files inside {str(root)!r}, never through a "
                "link: rewrite the folder with echo_dataset.write_hub_folder"
            )
    if require_pseudonymized:
        for file in files:
            meta = pq.read_schema(file).metadata or {}
            if not json.loads(meta.get(ECHO_METADATA_KEY, b"{}")).get("pseudonymized"):
                raise InvalidHubFolderError(
                    f"{file} was not written with pseudonymized handles; rebuild it (echo-bench build pseudonymizes "
                    "by default; write_hub_folder(..., pseudonymize=True) in Python), or publish it knowingly "
                    "with --skip-pseudonym-check (check_pseudonymized=False in Python)"
                )
    return files


def _token(token: str | None) -> str | None:
    if token:
        return token
    if os.environ.get("HF_TOKEN"):
        return os.environ["HF_TOKEN"]
    try:
        from huggingface_hub import get_token
    except ImportError:  # pragma: no cover - huggingface_hub comes with datasets
        return None
    return get_token()


def publish(
    folder: str | Path,
    repo_id: str,
    *,
    api: Any = None,
    token: str | None = None,
    private: bool = False,
    check_pseudonymized: bool = True,
    commit_message: str = "Upload ECHO benchmark (echo-bench)",
    pseudonymize: bool | None = None,
    version: str | None = None,
) -> Any:
    """Create (or reuse) the dataset repo ``repo_id`` and upload ``folder`` to it in one commit.

    Args:
        folder: a folder written by :func:`echo_dataset.writer.write_hub_folder`.
        repo_id: ``owner/name`` on the Hub.
        api: an ``huggingface_hub.HfApi``-like object (tests pass a fake); default: a new ``HfApi(token=...)``.
        token: Hub token; default ``$HF_TOKEN`` or the saved login (``huggingface_hub.get_token()``). Not needed
            when ``api`` is given (it carries its own authentication).
        private: create the repo private.
        check_pseudonymized: refuse a folder whose Parquet files were written without pseudonymized handles.
            Pseudonymization happens when writing (``write_hub_folder(..., pseudonymize=True)``, the default);
            publishing only checks it and never changes a file, so the uploaded files are exactly the files on
            disk. ``False`` skips the check (CLI: ``--skip-pseudonym-check``).
        commit_message: the upload's commit message.
        pseudonymize: deprecated name of ``check_pseudonymized`` (it never pseudonymized anything); emits a
            ``DeprecationWarning``.
        version: tag the uploaded commit ``v<version>`` on the dataset repo (``create_tag`` with the commit's
            revision), so ``load_dataset(repo_id, revision="v1.1.0")`` reads that version. ``MAJOR.MINOR.PATCH``;
            when the card records a ``version`` (``build --version`` / ``--previous``), it must be the same.

    Returns:
        What ``upload_folder`` returned (a ``CommitInfo`` with the real API).

    Raises:
        InvalidHubFolderError: the folder is incomplete or not pseudonymized, or ``version`` is malformed or
            differs from the card's (before any network work).
        MissingTokenError: no ``api`` and no token (before any network work).
        HubError: the Hub cannot be reached (unresolvable or unreachable host, TLS failure) or refused a request;
            the message names the host and the step.
    """
    if pseudonymize is not None:
        warnings.warn(
            "publish(pseudonymize=...) is deprecated: it only checks the folder; use check_pseudonymized=...",
            DeprecationWarning,
            stacklevel=2,
        )
        check_pseudonymized = pseudonymize
    validate_hub_folder(folder, require_pseudonymized=check_pseudonymized)
    if version is not None:
        from echo_dataset.versioning import card_version, check_version

        try:
            version = check_version(version)
            recorded = card_version(folder)
        except EchoDatasetError as exc:
            raise InvalidHubFolderError(str(exc)) from None
        if recorded is not None and recorded != version:
            raise InvalidHubFolderError(
                f"--version {version} differs from the version in {folder}/README.md ({recorded}); nothing was "
                "uploaded"
            )
    if "/" not in repo_id or repo_id.count("/") != 1 or not all(repo_id.split("/")):
        raise InvalidHubFolderError(f"repo_id must look like 'owner/name', got {repo_id!r}")
    if api is None:
        resolved = _token(token)
        if not resolved:
            raise MissingTokenError(
                "publishing needs a Hugging Face token with write access: set HF_TOKEN, run "
                "`hf auth login`, or pass --token (token= in Python); nothing was uploaded"
            )
        from huggingface_hub import HfApi

        api = HfApi(token=resolved)
    with _hub_errors(api, f"creating the dataset repository {repo_id}"):
        api.create_repo(repo_id, repo_type="dataset", exist_ok=True, private=private)
    # Only the dataset goes up: a build folder also holds stages/*.jsonl with the raw posts and real handles,
    # the call cache and the media store, which must never be published. Shards of an earlier upload that this
    # one does not replace are deleted, so a config never mixes two builds.
    with _hub_errors(api, f"uploading {folder} to {repo_id}"):
        result = api.upload_folder(
            folder_path=str(folder),
            repo_id=repo_id,
            repo_type="dataset",
            commit_message=commit_message,
            allow_patterns=upload_patterns(folder),
            delete_patterns=[f"{config}/*.parquet" for config in CONFIG_NAMES],
        )
    if version is not None:
        # the tag names the commit just made (CommitInfo.oid), not whatever the branch points to later
        with _hub_errors(api, f"tagging the upload of {repo_id} as v{version}"):
            api.create_tag(
                repo_id,
                tag=f"v{version}",
                tag_message=f"ECHO benchmark version {version}",
                revision=getattr(result, "oid", None),
                repo_type="dataset",
            )
    return result


_NETWORK_MODULES = frozenset({"httpx", "httpx2", "httpcore", "requests", "urllib3", "huggingface_hub", "ssl"})


@contextlib.contextmanager
def _hub_errors(api: Any, step: str) -> Iterator[None]:
    """Network and Hub failures (an unresolvable or unreachable host, a refused request) as one
    :class:`HubError` naming the host and the step; the Hub commit is all-or-nothing, so nothing was published."""
    try:
        yield
    except EchoDatasetError:
        raise
    except Exception as exc:
        modules = {c.__module__.split(".")[0] for c in type(exc).__mro__}
        if not (isinstance(exc, OSError | TimeoutError) or modules & _NETWORK_MODULES):
            raise
        endpoint = getattr(api, "endpoint", None) or os.environ.get("HF_ENDPOINT") or "https://huggingface.co"
        host = urlsplit(str(endpoint)).hostname or str(endpoint)
        reason = " ".join(str(exc).split()) or type(exc).__name__
        raise HubError(
            f"the Hugging Face Hub at {host} failed while {step}: {reason} ({type(exc).__name__}); nothing was "
            "published: check the network, HF_ENDPOINT and the token, then run publish again"
        ) from None


def upload_patterns(folder: str | Path) -> list[str]:
    """The files of ``folder`` that :func:`publish` uploads: ``README.md`` and each config's Parquet shards,
    as POSIX paths relative to the folder (no other file of a build folder leaves the machine)."""
    root = Path(folder)
    return ["README.md", *(p.relative_to(root).as_posix() for p in validate_hub_folder(root))]


def uses_public_salt(folder: str | Path) -> bool:
    """Whether any Parquet file of ``folder`` records pseudonyms made with the public default salt
    (``{"public_salt": true}`` in its metadata, as :func:`echo_dataset.writer.write_hub_folder` writes it)."""
    import pyarrow.parquet as pq

    for file in sorted(Path(folder).glob(f"*/{SPLIT}-*.parquet")):
        meta = pq.read_schema(file).metadata or {}
        if json.loads(meta.get(ECHO_METADATA_KEY, b"{}")).get("public_salt"):
            return True
    return False
