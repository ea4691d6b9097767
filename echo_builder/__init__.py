"""echo-bench's engine: curation stages, model backends, judging, statistics and metric math.

Implements ECHO ("Constantly Improving Image Models Need Constantly Improving Benchmarks", ICLR 2026,
arXiv 2510.15021). Importing this package is cheap: torch, transformers and API SDKs load only inside the backend
or scorer that needs them.
"""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("echo-bench")
except PackageNotFoundError:  # running from a source tree that was not installed
    __version__ = "0.0.0+unknown"

__all__ = ["__version__"]
