"""The metric math: community-driven metrics as plain functions on images (ECHO Flow 3).

Heavy models (DINO through timm, face models through dlib or onnxruntime, OCR through rapidocr_onnxruntime) load
lazily inside the scorer that needs them; importing this package imports none of them.
"""

# The metric modules declare their specs on import; they import no heavy model code at module level.
# Import order is the metrics' declaration order (the default order of `echo-bench metrics` and its rows).
from echo_builder.scoring import color, structure, faces, text, text_accuracy  # noqa: I001
from echo_builder.scoring.base import METRIC_SPECS, MetricResult, MetricSpec, register_metric_spec

__all__ = [
    "METRIC_SPECS",
    "MetricResult",
    "MetricSpec",
    "color",
    "faces",
    "register_metric_spec",
    "structure",
    "text",
    "text_accuracy",
]
