"""Face identity as an `evaluate` module: is the person in the input still the person in the output?

A thin shell over :func:`echo_builder.scoring.faces.face_identity` (ECHO, arXiv 2510.15021, Flow 3: the largest
cosine similarity over all (input face, output face) pairs).
"""

import datasets
import evaluate

from echo_builder.citation import ECHO_BIBTEX, ECHO_PAPER_URL
from echo_builder.scoring.faces import face_identity
from echo_builder.scoring.module_inputs import LosslessImageInputs, restore, restore_lists

_DESCRIPTION = """\
Face identity preservation (higher is better; cosine similarity in [-1, 1]). Every face in the input images and in
the output is detected and embedded; the score is the largest cosine similarity over all (input face, output face)
pairs. No face in the inputs: not applicable (NaN). A face in the inputs but none in the output: a failure scored 0
by default, with the reason. Backends: "dlib" (128-d ResNet descriptor, offline) and "auraface" (SCRFD detector and
an ArcFace-style 512-d recogniser, as in the paper). Scores compare only within one backend.
"""

_KWARGS_DESCRIPTION = """\
Args:
    predictions: output images, one per sample (PIL images, numpy arrays, paths or encoded bytes; never
        re-encoded).
    references: the input image of each sample, or a list of input images per sample.
    backend: "dlib" (default) or "auraface"; model_dir: folder with the backend's model files.
    no_face_in_output_score: the score when the inputs have a face and the output none (default 0.0).
Returns:
    face_identity: mean over samples with a value (higher is better),
    scores, nan_reasons, notes (per sample), backend (the id to report with every value).
Examples:
    >>> import evaluate
    >>> import echo_builder.metrics
    >>> import numpy as np
    >>> metric = evaluate.load(echo_builder.metrics.path("face_identity"))
    >>> wall = np.full((64, 64, 3), 200, np.uint8)  # no face in the input: not applicable
    >>> result = metric.compute(predictions=[wall], references=[wall], backend="dlib")
    >>> result["scores"], result["nan_reasons"][0] is not None
    ([nan], True)
"""


@evaluate.utils.file_utils.add_start_docstrings(_DESCRIPTION, _KWARGS_DESCRIPTION)
class FaceIdentity(LosslessImageInputs, evaluate.Metric):
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
            reference_urls=[ECHO_PAPER_URL],
        )

    def _compute(self, predictions, references, backend="dlib", model_dir=None, no_face_in_output_score=0.0):
        predictions, references = [restore(p) for p in predictions], restore_lists(references)
        options = {"model_dir": model_dir} if model_dir else {}
        result = face_identity(
            references,
            predictions,
            backend=backend,
            no_face_in_output_score=no_face_in_output_score,
            on_image_error="nan",
            **options,
        )
        return {
            "face_identity": result.mean(),
            "scores": result.values.tolist(),
            "nan_reasons": result.nan_reasons,
            "notes": list(result.extras.get("notes", [])),
            "backend": result.extras.get("backend"),
        }
