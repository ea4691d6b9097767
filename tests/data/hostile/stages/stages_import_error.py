"""A plugin whose module fails to import."""

import echo_no_such_dependency  # noqa: F401

STAGE = None
