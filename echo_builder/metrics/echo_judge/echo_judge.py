"""ECHO's VLM judge as an `evaluate` module: rate (prompt, input images, output image) from 1 to 10.

A thin shell over :func:`echo_builder.judge.api.grade_outputs`; the protocol (ECHO, arXiv 2510.15021, Sec. 4:
single-answer grading after MT-Bench, last ``[[N]]`` parsed, images at 512 px JPEG 85) lives in echo_builder.
"""

import datasets
import evaluate

from echo_builder.citation import ECHO_BIBTEX, ECHO_PAPER_URL
from echo_builder.judge.api import grade_outputs
from echo_builder.scoring.module_inputs import LosslessImageInputs, restore, restore_lists

_CITATION = """\
@inproceedings{echo2026,
  title={Constantly Improving Image Models Need Constantly Improving Benchmarks},
  booktitle={International Conference on Learning Representations (ICLR)},
  year={2026},
  note={arXiv:2510.15021}
}
"""

_DESCRIPTION = """\
Grades image-generation and image-editing outputs with one or more VLM judges (any echo-bench backend: an
OpenAI-compatible server such as GPT-4o or vLLM, or a local transformers model). Each judge describes a good output,
lists the output's errors, weighs prompt following, fidelity to the input images and realism equally, and rates
1-10 as [[N]]. Failures (API errors, refusals, replies without a valid rating) are reported per sample, never
turned into scores.
"""

_KWARGS_DESCRIPTION = """\
Args:
    predictions: output images, one per sample (PIL images, numpy arrays, paths or encoded bytes).
    references: the input image of each sample, or a list of input images per sample (empty lists for
        text-to-image).
    prompts: the user prompts, one per sample.
    judges: backend specs, e.g. ["openai:gpt-4o"] or ["transformers:Qwen/Qwen2.5-VL-7B-Instruct"].
    judge_options: optional {spec: {option: value}} such as {"openai:gpt-4o": {"base_url": "http://localhost:8000/v1"}}.
    cache_dir: optional folder for the call cache (reruns repeat no call).
    mode: "single" (1-10 ratings, default) or "probability" (expected 1-9 rating from token probabilities).
    judge_prompt: optional judge prompt file (YAML; docs/reproducing-echo.md) replacing the built-in prompt.
Returns:
    echo_judge: mean rating over samples with at least one valid rating (higher is better),
    scores: per-sample rating (mean over judges; NaN when every judge failed),
    statuses, raw_texts, nan_reasons: per judge and sample.
Examples:
    >>> import evaluate
    >>> import echo_builder.metrics
    >>> from PIL import Image
    >>> judge = evaluate.load(echo_builder.metrics.path("echo_judge"))
    >>> inp, out = Image.new("RGB", (64, 64), "grey"), Image.new("RGB", (64, 64), "navy")
    >>> result = judge.compute(predictions=[out], references=[inp], prompts=["Make it blue"], judges=["openai:gpt-4o"])
    >>> 1.0 <= result["echo_judge"] <= 10.0  # needs OPENAI_API_KEY (or OPENAI_BASE_URL for a local server)
    True
"""


@evaluate.utils.file_utils.add_start_docstrings(_DESCRIPTION, _KWARGS_DESCRIPTION)
class EchoJudge(LosslessImageInputs, evaluate.Metric):
    def _info(self):
        return evaluate.MetricInfo(
            description=_DESCRIPTION,
            citation=ECHO_BIBTEX,
            inputs_description=_KWARGS_DESCRIPTION,
            features=datasets.Features(
                {
                    "predictions": datasets.Value("binary"),
                    "references": datasets.Sequence(datasets.Value("binary")),
                    "prompts": datasets.Value("string"),
                }
            ),
            reference_urls=[ECHO_PAPER_URL],
        )

    def _compute(
        self,
        predictions,
        references,
        prompts,
        judges=(),
        judge_options=None,
        cache_dir=None,
        mode="single",
        judge_prompt=None,
    ):
        predictions, references = [restore(p) for p in predictions], restore_lists(references)
        report = grade_outputs(
            prompts,
            references,
            predictions,
            list(judges),
            judge_options=judge_options,
            cache_dir=cache_dir,
            mode=mode,
            judge_prompt=judge_prompt,
        )
        scores = report["ratings"]
        valid = [s for s in scores if s == s]
        reasons = [
            None if s == s else "; ".join(f"{j}: {report['errors'][j][i]}" for j in report["errors"])
            for i, s in enumerate(scores)
        ]
        return {
            "echo_judge": sum(valid) / len(valid) if valid else float("nan"),
            "scores": scores,
            "per_judge": report["per_judge"],
            "statuses": report["statuses"],
            "raw_texts": report["raw_texts"],
            "nan_reasons": reasons,
        }
