"""Example budgets for the hypothesis property tests, under the profile that ``tests/conftest.py`` loads.

CI runs the ``ci`` profile: derandomised (the same examples every run, so the suite cannot flip) with each test's
own budget. ``python -m bench.properties`` runs the ``long`` profile: fresh random examples and
:data:`LONG_FACTOR` times the budget, to look for what the fixed examples miss.
"""

from __future__ import annotations

import os

PROFILE_VARIABLE = "ECHO_HYPOTHESIS_PROFILE"
LONG_FACTOR = 25


def profile_name() -> str:
    """``"ci"`` (the default) or ``"long"``, from ``$ECHO_HYPOTHESIS_PROFILE``."""
    return os.environ.get(PROFILE_VARIABLE, "ci")


def examples(n: int) -> int:
    """A test's ``max_examples``: ``n`` under the ``ci`` profile, ``n * LONG_FACTOR`` under ``long``."""
    return n * LONG_FACTOR if profile_name() == "long" else n
