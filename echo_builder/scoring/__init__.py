"""The metric math: community-driven metrics as plain functions on images (ECHO Flow 3).

Each built-in metric is one module of this package that declares itself with
:func:`~echo_builder.scoring.registry.declare_metric` (its definition, import path and ``order``, the position in
the default metric order). The registry :data:`~echo_builder.scoring.registry.METRICS` finds those modules itself
(``pkgutil`` over this folder, less :data:`~echo_builder.scoring.registry.HELPER_MODULES`); importing this package
imports them so :data:`METRIC_SPECS` is complete. A new metric is one new module plus its tests, no edit here.

Heavy models (DINO through timm, face models through dlib or onnxruntime, OCR through rapidocr_onnxruntime) load
lazily inside the scorer that needs them; importing this package imports none of them.
"""

from echo_builder.scoring.base import METRIC_SPECS, MetricResult, MetricSpec, register_metric_spec
from echo_builder.scoring.registry import METRICS

# Declares every built-in metric (their modules import no heavy model code at module level); plugins load later,
# when the registry is first read. The order of the metrics is their declared `order`, not the import order.
METRICS.import_builtins()

__all__ = [
    "METRIC_SPECS",
    "MetricResult",
    "MetricSpec",
    "register_metric_spec",
]
