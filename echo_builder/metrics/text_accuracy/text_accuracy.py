"""Text accuracy as an `evaluate` module: OCR checks the text each output renders against its prompt (higher is
better).

A thin shell over :func:`echo_builder.scoring.text_accuracy.text_accuracy` (ECHO, arXiv 2510.15021, Flow 3
text rendering, checked character by character: 1 - character error rate of the best approximate substring match,
Sellers 1980; OCR by PP-OCRv4 through rapidocr_onnxruntime, offline).
"""

import datasets
import evaluate

from echo_builder.citation import ECHO_BIBTEX, ECHO_PAPER_URL
from echo_builder.scoring.module_inputs import LosslessImageInputs, restore
from echo_builder.scoring.text_accuracy import text_accuracy

_DESCRIPTION = """\
Text accuracy of generated images (higher is better; in [0, 1]). The strings a prompt quotes ("...", '...',
“...”, 「...」, 《...》 and other quote styles) are the text the image must show. PP-OCRv4 reads the image; both
sides are normalised (NFKC, case folding, typographic quotes and dashes to ASCII, whitespace removed); each string
scores 1 - CER of its best match anywhere in the OCR text (approximate substring matching), and a sample is the
mean over its strings. A prompt that quotes nothing is NaN ("not applicable"); an image with no legible text is 0.
"""

_KWARGS_DESCRIPTION = """\
Args:
    predictions: output images, one per sample (PIL images, numpy arrays, paths or encoded bytes).
    prompts: the prompts; their quoted spans are the required strings.
    text_field_values: optional, per sample a string or a list of strings required instead of the quoted spans.
    applicable: optional, one flag per sample (the benchmark's `text_rendering` flag): False makes it NaN.
Returns:
    text_accuracy: mean over samples with a value, scores (per sample, NaN with a reason in nan_reasons),
    matches (per sample, per required string: the OCR substring matched, the edit distance and the CER),
    ocr_text (what the OCR read), backend (the OCR engine and weights).
Examples:
    >>> import evaluate
    >>> import echo_builder.metrics
    >>> from PIL import Image, ImageDraw, ImageFont
    >>> metric = evaluate.load(echo_builder.metrics.path("text_accuracy"))
    >>> receipt = Image.new("RGB", (640, 160), "white")
    >>> ImageDraw.Draw(receipt).text((30, 40), "TOTAL $721.45", font=ImageFont.load_default(size=56), fill="black")
    >>> result = metric.compute(predictions=[receipt, receipt], prompts=['a receipt, "TOTAL $127.54"', "a cat"])
    >>> result["scores"][0], result["matches"][0][0]["distance"]  # 3 edits in 12 characters
    (0.75, 3)
    >>> result["nan_reasons"][1]
    'not applicable: the prompt asks for no verbatim text (no quoted string)'
"""


@evaluate.utils.file_utils.add_start_docstrings(_DESCRIPTION, _KWARGS_DESCRIPTION)
class TextAccuracy(LosslessImageInputs, evaluate.Metric):
    def _info(self):
        return evaluate.MetricInfo(
            description=_DESCRIPTION,
            citation=ECHO_BIBTEX,
            inputs_description=_KWARGS_DESCRIPTION,
            features=datasets.Features(
                {"predictions": datasets.Value("binary"), "prompts": datasets.Value("string")}
            ),
            reference_urls=[ECHO_PAPER_URL],
        )

    def _compute(self, predictions, prompts, text_field_values=None, applicable=None):
        result = text_accuracy(
            prompts,
            [restore(p) for p in predictions],
            text_field_values=text_field_values,
            applicable=applicable,
        )
        return {
            "text_accuracy": result.mean(),
            "scores": result.values.tolist(),
            "nan_reasons": result.nan_reasons,
            "matches": result.extras["matches"],
            "ocr_text": result.extras["ocr_text"],
            "backend": result.extras["backend"],
        }
