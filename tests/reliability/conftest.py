"""Fixtures of the reliability suite."""

from __future__ import annotations

import pytest


@pytest.fixture
def fast_retries():
    """Retry waits of 2-20 ms instead of 1-60 s for in-process ``build`` and ``judge`` runs (attempt counts,
    timeouts and ``Retry-After`` handling unchanged): see :func:`tests.helpers.reliability.fast_retries`."""
    from tests.helpers.reliability import fast_retries as patched

    with patched() as policy:
        yield policy
