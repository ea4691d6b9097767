"""Exceptions raised by :mod:`echo_dataset`.

Everything it raises on purpose derives from :class:`EchoDatasetError` (``echo_dataset`` cannot import
``echo_builder.errors``: dependencies point the other way). Messages say what was expected, what was found and what
to do next.
"""

from __future__ import annotations

__all__ = ["EchoDatasetError", "HubError", "InvalidHubFolderError", "MissingTokenError", "RowError"]


class EchoDatasetError(Exception):
    """Root of every error :mod:`echo_dataset` raises on purpose."""


class RowError(EchoDatasetError, ValueError):
    """A row does not fit the dataset's columns (unknown config, duplicate id, bad value)."""


class InvalidHubFolderError(EchoDatasetError, ValueError):
    """A folder is not a complete hub-shaped ECHO dataset (a config's Parquet or the README is missing)."""


class MissingTokenError(EchoDatasetError, RuntimeError):
    """Publishing needs a Hugging Face token and none was found."""


class HubError(EchoDatasetError, RuntimeError):
    """The Hugging Face Hub could not be reached or refused a request (the message names the host)."""
