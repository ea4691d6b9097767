"""Text rendering as an `evaluate` module: a VLM judge proofreads the text in each output (higher is better).

A thin shell over :func:`echo_builder.scoring.text.text_rendering` (ECHO, arXiv 2510.15021, Flow 3).
"""

import datasets
import evaluate

from echo_builder.citation import ECHO_BIBTEX, ECHO_PAPER_URL
from echo_builder.judge.prompts import load_judge_prompt
from echo_builder.scoring.module_inputs import LosslessImageInputs, restore
from echo_builder.scoring.text import text_rendering

_DESCRIPTION = """\
Text rendering quality judged by a VLM (higher is better; in [0, 1]). The judge reads all text in the output,
lists spelling, punctuation, grammar, missing-character and cropping errors; text the prompt asks for verbatim must
match exactly, free text must be coherent and fit. It rates 1-10 as [[N]] (the last one counts), reported as
(N - 1) / 9. Judge failures are NaN with their reason, never a score.
"""

_KWARGS_DESCRIPTION = """\
Args:
    predictions: output images, one per sample (PIL images, numpy arrays, paths or encoded bytes).
    prompts: the prompts (what text was asked for).
    judges: backend specs, e.g. ["openai:gpt-4o"]; judge_options: {spec: {option: value}}; cache_dir: call cache.
    judge_prompt: optional judge prompt file (YAML, answer.kind rating; docs/reproducing-echo.md).
    ocr_evidence: True shows the judge each output's OCR text (PP-OCRv4, the ocr extra) beside the image, marked
        as machine OCR that may be wrong (prompt echo-text-ocr-v1).
Returns:
    text_rendering: mean over samples with a value, scores, nan_reasons, ratings (raw 1-10 per judge), backend
    (judges, prompt version and, with OCR evidence, the OCR engine), ocr_text (what the judge was shown, or None).
Examples:
    >>> import evaluate
    >>> import echo_builder.metrics
    >>> from PIL import Image, ImageDraw
    >>> metric = evaluate.load(echo_builder.metrics.path("text_rendering"))
    >>> poster = Image.new("RGB", (160, 60), "white")
    >>> ImageDraw.Draw(poster).text((10, 20), "SALE", fill="black")
    >>> result = metric.compute(predictions=[poster], prompts=['a poster that says "SALE"'], judges=["openai:gpt-4o"])
    >>> 0.0 <= result["text_rendering"] <= 1.0  # needs OPENAI_API_KEY (or OPENAI_BASE_URL for a local server)
    True
"""


@evaluate.utils.file_utils.add_start_docstrings(_DESCRIPTION, _KWARGS_DESCRIPTION)
class TextRendering(LosslessImageInputs, evaluate.Metric):
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

    def _compute(
        self,
        predictions,
        prompts,
        judges=(),
        judge_options=None,
        cache_dir=None,
        judge_prompt=None,
        ocr_evidence=False,
    ):
        predictions = [restore(p) for p in predictions]
        template = load_judge_prompt(judge_prompt) if judge_prompt is not None else None
        result = text_rendering(
            prompts,
            predictions,
            list(judges),
            judge_options=judge_options,
            cache_dir=cache_dir,
            template=template,
            ocr_evidence=bool(ocr_evidence),
        )
        return {
            "text_rendering": result.mean(),
            "scores": result.values.tolist(),
            "nan_reasons": result.nan_reasons,
            "ratings": result.extras["ratings"],
            "backend": result.extras["backend"],
            "ocr_text": result.extras["ocr_text"],
        }
