"""ECHO's win rate as an `evaluate` module: pseudo-pairwise win rates with bootstrap intervals over prompts.

A thin shell over :func:`echo_builder.judge.api.win_rate_report` (ECHO, arXiv 2510.15021, Sec. 4; ``spec/ECHO.md``
Flow 2): per prompt and model pair the higher score wins, equal scores tie; several judges are combined by strict
majority; a missing output loses by default; 95% intervals resample prompts, not comparisons.
"""

import math

import datasets
import evaluate
import pandas as pd

from echo_builder.citation import ECHO_BIBTEX, ECHO_PAPER_URL
from echo_builder.judge.api import win_rate_report

_CITATION = """\
@inproceedings{echo2026,
  title={Constantly Improving Image Models Need Constantly Improving Benchmarks},
  booktitle={International Conference on Learning Representations (ICLR)},
  year={2026},
  note={arXiv:2510.15021}
}
"""

_DESCRIPTION = """\
Win rate of each model against every other model on the same prompts, from per-sample scores (any scale, higher
is better): win 1, tie 0.5, loss 0, averaged over all of a model's comparisons; with 95% bootstrap intervals over
prompts and Bradley-Terry ratings on the Elo scale. Missing scores (NaN) are missing outputs and lose by default.
"""

_KWARGS_DESCRIPTION = """\
Args:
    model: model name per row.
    sample_id: prompt / sample id per row (strings or integers; compared as text).
    score: the model's score on that sample (NaN = no output).
    judge: optional list with the judge name of each row (several judges are combined by majority vote).
    missing: "loss" (default) or "skip".
    n_boot: bootstrap replicates (default 1000); seed: random seed (default 0).
    ci: "bootstrap" (default, over prompts) or "normal" (mean +- 1.96 sd / sqrt(n) over comparisons, as ECHO's
        released code; docs/reproducing-echo.md).
Returns:
    win_rate, ci_low, ci_high, bt_rating, n_comparisons, n_missing: dicts keyed by model; models: best first;
    ci_method: which interval ci_low/ci_high hold.
Examples:
    >>> import evaluate
    >>> import echo_builder.metrics
    >>> wr = evaluate.load(echo_builder.metrics.path("win_rate"))
    >>> wr.compute(model=["a", "b"], sample_id=["1", "1"], score=[7, 4])["win_rate"]
    {'a': 1.0, 'b': 0.0}
    >>> wr.compute(model=["a", "b"], sample_id=[1, 1], score=[3, 4])["win_rate"]
    {'b': 1.0, 'a': 0.0}
"""


@evaluate.utils.file_utils.add_start_docstrings(_DESCRIPTION, _KWARGS_DESCRIPTION)
class WinRate(evaluate.Metric):
    def _info(self):
        return evaluate.MetricInfo(
            description=_DESCRIPTION,
            citation=ECHO_BIBTEX,
            inputs_description=_KWARGS_DESCRIPTION,
            features=datasets.Features(
                {
                    "model": datasets.Value("string"),
                    "sample_id": datasets.Value("string"),
                    "score": datasets.Value("float64"),
                }
            ),
            reference_urls=[ECHO_PAPER_URL],
        )

    def add_batch(self, *, predictions=None, references=None, **kwargs):
        """Add rows (``model``, ``sample_id``, ``score``...); integer sample ids are taken as text.\n"""
        if kwargs.get("sample_id") is not None:  # integer ids (as many datasets have) are ids too
            kwargs["sample_id"] = [None if s is None else str(s) for s in kwargs["sample_id"]]
        return super().add_batch(predictions=predictions, references=references, **kwargs)

    def add(self, *, prediction=None, reference=None, **kwargs):
        """Add one row; an integer sample id is taken as text.\n"""
        if kwargs.get("sample_id") is not None:
            kwargs["sample_id"] = str(kwargs["sample_id"])
        return super().add(prediction=prediction, reference=reference, **kwargs)

    def _compute(
        self, model, sample_id, score, judge=None, missing="loss", n_boot=1000, seed=0, ci="bootstrap"
    ):
        scores = [math.nan if s is None else float(s) for s in score]
        ratings = pd.DataFrame(
            {
                "sample_id": sample_id,
                "model": model,
                "judge": judge if judge is not None else ["scores"] * len(model),
                "rating": scores,
                "status": ["missing_output" if math.isnan(s) else "ok" for s in scores],
            }
        )
        return win_rate_report(ratings, missing=missing, n_boot=n_boot, seed=seed, ci=ci)
