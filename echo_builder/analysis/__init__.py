"""ECHO's analysis half: what the community complains about, which tasks it tries, how diverse and fluent its
prompts are, and when it posts (``echo-bench analyze``).

One module per concern:

- :mod:`~echo_builder.analysis.taxonomy`: the failure taxonomy (ECHO Fig. 4) and user behaviours (Fig. 5), each
  category with the metric that measures it or none yet; rules lexicon or LLM labeller (``labelling``);
- :mod:`~echo_builder.analysis.tasks`: a task label per prompt, new tasks flagged;
- :mod:`~echo_builder.analysis.diversity`: unique first bigrams, distinct-n, length (Fig. 3);
- :mod:`~echo_builder.analysis.fluency`: perplexity under a causal LM (Fig. 3);
- :mod:`~echo_builder.analysis.activity`: samples per day relative to the launch date (Fig. 5);
- :mod:`~echo_builder.analysis.inputs`: reading builds, benchmarks and reference prompt sets;
- :mod:`~echo_builder.analysis.report`: ``analysis.md`` and the plots; :mod:`~echo_builder.analysis.run` ties
  them together (:func:`run_analysis`).
"""

from __future__ import annotations

__all__ = ["run_analysis"]


def __getattr__(name: str):  # lazy: importing the package stays light
    if name == "run_analysis":
        from echo_builder.analysis.run import run_analysis

        return run_analysis
    raise AttributeError(name)
