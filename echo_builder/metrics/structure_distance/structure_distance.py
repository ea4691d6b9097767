"""Structure distance as an `evaluate` module: how much an edit changes the image's layout (lower is better).

A thin shell over :func:`echo_builder.scoring.structure.structure_distance` (ECHO, arXiv 2510.15021, Flow 3;
Splice's structure loss: DINO ViT-S/16 last-block keys, cosine self-similarity, mean squared difference).
"""

import datasets
import evaluate

from echo_builder.citation import ECHO_BIBTEX, ECHO_PAPER_URL
from echo_builder.scoring.module_inputs import LosslessImageInputs, restore, restore_lists
from echo_builder.scoring.structure import structure_distance

_DESCRIPTION = """\
Structure distance between an edit's input image and its output (lower is better; 0 = same structure). Both
images are resized to 224x224 and passed through DINO ViT-S/16; the keys of the last block's attention (all heads,
CLS included: 197 x 384) give a cosine self-similarity matrix per image, and the distance is the mean squared
difference of the two matrices (Splice's structure loss). With several inputs the worst (max) is kept, as the paper.
"""

_KWARGS_DESCRIPTION = """\
Args:
    predictions: output images, one per sample (PIL images, numpy arrays, paths or encoded bytes; never
        re-encoded).
    references: the input image of each sample, or a list of input images per sample.
    weights: None (timm's vit_small_patch16_224.dino from the Hub), a local weights file, or "random:<seed>".
    reduction: "max" (default), "min" or "first" over several inputs.
    batch_size: images per forward pass (default 16).
Returns:
    structure_distance: mean over samples with a value (lower is better),
    scores: per-sample distances, nan_reasons: why a value is NaN.
Examples:
    >>> import evaluate
    >>> import echo_builder.metrics
    >>> import numpy as np
    >>> metric = evaluate.load(echo_builder.metrics.path("structure_distance"))
    >>> photo = np.random.default_rng(0).integers(0, 256, (64, 64, 3), dtype=np.uint8)
    >>> result = metric.compute(predictions=[photo], references=[photo], weights="random:0")  # use DINO weights
    >>> result["scores"]
    [0.0]
"""


@evaluate.utils.file_utils.add_start_docstrings(_DESCRIPTION, _KWARGS_DESCRIPTION)
class StructureDistance(LosslessImageInputs, evaluate.Metric):
    def _info(self):
        return evaluate.MetricInfo(
            description=_DESCRIPTION,
            citation=ECHO_BIBTEX,
            inputs_description=_KWARGS_DESCRIPTION,
            features=datasets.Features(
                {
                    "predictions": datasets.Value("binary"),
                    "references": datasets.Sequence(datasets.Value("binary")),
                }
            ),
            reference_urls=[ECHO_PAPER_URL, "https://arxiv.org/abs/2201.00424"],
        )

    def _compute(self, predictions, references, weights=None, reduction="max", batch_size=16):
        predictions, references = [restore(p) for p in predictions], restore_lists(references)
        result = structure_distance(
            references,
            predictions,
            weights=weights,
            reduction=reduction,
            batch_size=batch_size,
            on_image_error="nan",
        )
        return {
            "structure_distance": result.mean(),
            "scores": result.values.tolist(),
            "nan_reasons": result.nan_reasons,
        }
