"""The ECHO benchmark as data: ``Features`` per config, the hub-shaped folder writer, loaders and publishing.

It imports no model code (no torch, transformers or API SDK) and nothing from ``echo_builder``: dependencies point
``echo_builder`` -> ``echo_dataset``, so a dataset user can depend on this package alone.
"""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("echo-bench")
except PackageNotFoundError:  # a source tree that was not installed
    __version__ = "0.0.0+unknown"

__all__ = [
    "CONFIG_NAMES",
    "SPLIT",
    "__version__",
    "features_for",
    "iter_config",
    "load_config",
    "pseudonymize",
    "read_config",
    "write_hub_folder",
]

#: The dataset's configs, as in ECHO's release; each has the single split :data:`SPLIT`.
CONFIG_NAMES = ("image_to_image", "text_to_image", "analysis")
SPLIT = "test"


# Lazy attributes: ``import echo_dataset`` stays light (no datasets / pyarrow import) for judge and metrics.
_LAZY = {
    "features_for": "echo_dataset.features",
    "iter_config": "echo_dataset.loading",
    "load_config": "echo_dataset.loading",
    "read_config": "echo_dataset.loading",
    "pseudonymize": "echo_dataset.pseudonym",
    "write_hub_folder": "echo_dataset.writer",
}


def __getattr__(name: str):
    if name in _LAZY:
        from importlib import import_module

        return getattr(import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'echo_dataset' has no attribute {name!r}")
