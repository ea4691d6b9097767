"""The ECHO benchmark as data: ``Features`` per config, the hub-shaped folder writer, loaders and publishing.

It imports no model code (no torch, transformers or API SDK) and nothing from ``echo_builder``: dependencies point
``echo_builder`` -> ``echo_dataset``, so a dataset user can depend on this package alone.
"""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("echo-bench")
except PackageNotFoundError:  # a source tree that was not installed
    __version__ = "0.0.0+unknown"

__all__ = ["CONFIG_NAMES", "SPLIT", "__version__"]

#: The dataset's configs, as in ECHO's release; each has the single split :data:`SPLIT`.
CONFIG_NAMES = ("image_to_image", "text_to_image", "analysis")
SPLIT = "test"
