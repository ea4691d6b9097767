"""Color shift as an `evaluate` module: how far an edit moves the image's mean color (lower is better).

A thin shell over :func:`echo_builder.scoring.color.color_shift` (ECHO, arXiv 2510.15021, Flow 3: per-channel
256-bin histograms, bins 5..250 kept, mean level per channel, Euclidean distance between input and output).
"""

import datasets
import evaluate
import numpy as np

from echo_builder.citation import ECHO_BIBTEX, ECHO_PAPER_URL
from echo_builder.scoring.color import color_shift, pooled_color_shift

_DESCRIPTION = """\
Color shift between an edit's input image(s) and its output, in 8-bit levels (lower is better; 0 = no shift). Per
channel a 256-bin histogram, near-black and near-white bins dropped (levels 5..250 kept), the mean level per channel,
and the Euclidean distance between the input's and the output's mean RGB. The signed per-channel deltas show the
cast: the "yellow" look people complained about in GPT-4o's edits is a large drop in blue.
"""

_KWARGS_DESCRIPTION = """\
Args:
    predictions: output images (PIL images, paths or encoded bytes), one per sample.
    references: lists of input images per sample (several inputs are pooled into one histogram).
    pooled: also return the model-level shift from histograms summed over the applicable samples (the paper's
        figure; the same number as `echo-bench metrics`' summary "pooled" and its color swatch).
    applicable: optional, one flag per sample (the benchmark's `no_color_shift` flag, e.g. from
        `row["applicability"]["no_color_shift"]`): False makes the sample NaN ("not applicable") and leaves it out
        of the pooled figure; True or None (unknown) scores it.
Returns:
    color_shift: mean over samples with a value (lower is better, 8-bit levels),
    scores: per-sample magnitudes (NaN with a reason in nan_reasons),
    deltas: per-sample (R, G, B) output-minus-input mean levels,
    pooled_color_shift, pooled_deltas: when pooled=True.
Examples:
    >>> metric = evaluate.load("metrics/color_shift")
    >>> metric.compute(predictions=[output], references=[[source]])["color_shift"]
"""


@evaluate.utils.file_utils.add_start_docstrings(_DESCRIPTION, _KWARGS_DESCRIPTION)
class ColorShift(evaluate.Metric):
    def _info(self):
        return evaluate.MetricInfo(
            description=_DESCRIPTION,
            citation=ECHO_BIBTEX,
            inputs_description=_KWARGS_DESCRIPTION,
            features=datasets.Features(
                {"predictions": datasets.Image(), "references": datasets.Sequence(datasets.Image())}
            ),
            reference_urls=[ECHO_PAPER_URL],
        )

    def _compute(self, predictions, references, pooled=False, applicable=None):
        result = color_shift(references, predictions, on_image_error="nan", applicable=applicable)
        out = {
            "color_shift": result.mean(),
            "scores": result.values.tolist(),
            "nan_reasons": result.nan_reasons,
            "deltas": np.asarray(result.extras["deltas"]).tolist(),
        }
        if pooled:
            summary = pooled_color_shift(references, predictions, on_image_error="nan", applicable=applicable)
            out["pooled_color_shift"] = float(summary.magnitude)
            out["pooled_deltas"] = np.asarray(summary.deltas).tolist()
            out["pooled_n"] = summary.n_images
            out["pooled_reason"] = summary.reason
        return out
