"""What every community-driven metric returns and declares about itself.

Behaviour as data (PRACTICES.md 4): each metric declares its direction, range and unit once in a
:class:`MetricSpec`; cards, reports, the CLI and the Space read them from :data:`METRIC_SPECS`. Each metric
function returns a :class:`MetricResult`: one float per sample, NaN exactly where the metric does not apply or
failed, with the reason beside it (never 0 in place of "not applicable").
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

__all__ = [
    "METRIC_SPECS",
    "NO_INPUT_IMAGES",
    "OUTPUT_MISSING",
    "MetricResult",
    "MetricSpec",
    "as_image_list",
    "check_on_image_error",
    "not_applicable_mask",
    "register_metric_spec",
]

#: NaN reasons shared by the image metrics, so reports can count them across metrics.
NO_INPUT_IMAGES = "not applicable: the sample has no input images"
OUTPUT_MISSING = "output image missing"


def check_on_image_error(value: str) -> None:
    """Raise :class:`~echo_builder.errors.ConfigError` unless ``value`` is ``"raise"`` or ``"nan"``."""
    if value not in ("raise", "nan"):
        from echo_builder.errors import ConfigError

        raise ConfigError(f"on_image_error must be 'raise' or 'nan', got {value!r}")


def not_applicable_mask(applicable: Any, n: int) -> list[bool]:
    """One "skip as not applicable" flag per sample from an applicability column (``None``: none skipped).

    Only a boolean ``False`` skips a sample; ``True``, ``None`` or a missing value (unknown) means computed.

    Raises:
        ConfigError: ``applicable`` does not hold ``n`` flags.
    """
    if applicable is None:
        return [False] * n
    if len(applicable) != n:
        from echo_builder.errors import ConfigError

        raise ConfigError(f"applicable needs one flag per sample: got {len(applicable)} for {n}")
    return [isinstance(flag, (bool, np.bool_)) and not flag for flag in applicable]


def as_image_list(item: Any) -> list[Any]:
    """A sample's input(s) as a list: lists and tuples hold several images (``None`` entries dropped), ``None``
    holds none, anything else is one image."""
    if item is None:
        return []
    if isinstance(item, (list, tuple)):
        return [image for image in item if image is not None]
    return [item]


@dataclass(frozen=True)
class MetricSpec:
    """Declared properties of a metric.

    Attributes:
        name: the metric's name (also its ``echo_builder/metrics/<name>/`` folder).
        higher_is_better: direction of the score.
        low, high: the score's range (``-inf``/``inf`` when unbounded).
        unit: what one unit of the score means.
        source: the paper section or reference implementation the definition follows.
    """

    name: str
    higher_is_better: bool
    low: float
    high: float
    unit: str
    source: str


@dataclass
class MetricResult:
    """Per-sample values of one metric.

    Attributes:
        values: float64 array of shape (n,); NaN where ``nan_reasons`` says why.
        nan_reasons: n entries, ``None`` where the value is a number.
        extras: metric-specific per-sample arrays or lists of length n (e.g. per-channel deltas), and
            per-run information (e.g. the backend id of a face model).
    """

    values: np.ndarray
    nan_reasons: list[str | None]
    extras: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.values = np.asarray(self.values, dtype=np.float64)
        if self.values.ndim != 1 or len(self.nan_reasons) != len(self.values):
            raise ValueError("values must be 1-D with one nan_reason per value")
        for value, reason in zip(self.values, self.nan_reasons, strict=True):
            if np.isnan(value) != (reason is not None):
                raise ValueError("a value is NaN exactly when it has a reason")

    def mean(self) -> float:
        """Mean over the non-NaN values (NaN when there is none)."""
        finite = self.values[~np.isnan(self.values)]
        return float(finite.mean()) if finite.size else float("nan")


METRIC_SPECS: dict[str, MetricSpec] = {}


def register_metric_spec(spec: MetricSpec) -> MetricSpec:
    """Add ``spec`` to :data:`METRIC_SPECS` (a second spec under the same name is an error)."""
    if spec.name in METRIC_SPECS and METRIC_SPECS[spec.name] != spec:
        raise ValueError(f"metric {spec.name!r} is already declared")
    METRIC_SPECS[spec.name] = spec
    return spec
