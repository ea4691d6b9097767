"""What the Space shows and with what: the benchmark, judge runs, model outputs, and the metrics' resources.

Settings come from command-line options (``python app.py --benchmark ...``) or, on a Hugging Face Space where the
runner starts ``python app.py`` without arguments, from environment variables (the Space's variables and
secrets): ``ECHO_BENCHMARK``, ``ECHO_RUN`` (several separated by spaces), ``ECHO_OUTPUTS``, ``ECHO_DINO_WEIGHTS``,
``ECHO_FACE_BACKEND`` (``none`` turns face identity off), ``ECHO_JUDGE`` (several separated by spaces;
``ECHO_OPENAI_BASE_URL`` / ``ECHO_OPENAI_API_KEY`` configure an ``openai:`` judge as for the CLI), ``ECHO_ANALYSIS``
(an ``echo-bench analyze --out`` folder for the Analysis tab).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = ["ENV_VARS", "SpaceSettings"]

#: Environment variable per setting (the command-line options read the same variables).
ENV_VARS = {
    "benchmark": "ECHO_BENCHMARK",
    "runs": "ECHO_RUN",
    "outputs": "ECHO_OUTPUTS",
    "dino_weights": "ECHO_DINO_WEIGHTS",
    "face_backend": "ECHO_FACE_BACKEND",
    "judges": "ECHO_JUDGE",
    "analysis": "ECHO_ANALYSIS",
}


@dataclass(frozen=True)
class SpaceSettings:
    """The Space's configuration.

    Attributes:
        benchmark: a hub-shaped benchmark folder or a Hub dataset id (required).
        runs: judge runs for the Leaderboard tab: run folders, ``verdicts.parquet`` files or Hub dataset ids of
            verdict rows; the first is shown first.
        outputs: ``<outputs>/<model>/<sample_id>.<ext>`` model outputs shown beside each sample, or ``None``.
        dino_weights: DINO ViT-S/16 weights file for structure distance (``None``: the playground says it is
            unavailable).
        face_backend: face backend for face identity (``dlib``, ``auraface``) or ``None`` for off.
        judges: VLM judge specs for text rendering in the playground (none: unavailable).
        judge_options: backend options per judge spec.
        n_boot: bootstrap replicates for the leaderboard's intervals.
        analysis: an ``echo-bench analyze --out`` folder whose report and plots the Analysis tab shows (``None``:
            no Analysis tab).
    """

    benchmark: str
    runs: tuple[str, ...] = ()
    outputs: str | None = None
    dino_weights: str | None = None
    face_backend: str | None = "dlib"
    judges: tuple[str, ...] = ()
    judge_options: dict[str, dict[str, Any]] = field(default_factory=dict)
    n_boot: int = 1000
    analysis: str | None = None

    def __post_init__(self) -> None:
        if not self.benchmark:
            raise ValueError(
                f"no benchmark: pass --benchmark PATH_OR_HUB_ID or set {ENV_VARS['benchmark']} "
                "(a hub-shaped folder <folder>/<config>/test-*.parquet, or a Hub dataset id owner/name)"
            )
        if self.n_boot < 1:
            raise ValueError(f"n_boot must be >= 1, got {self.n_boot}")

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> SpaceSettings:
        """Settings from :data:`ENV_VARS` (``os.environ`` by default). Raises ``ValueError`` without a benchmark."""
        env = os.environ if environ is None else environ
        face = env.get(ENV_VARS["face_backend"], "dlib").strip()
        return cls(
            benchmark=env.get(ENV_VARS["benchmark"], "").strip(),
            runs=tuple(env.get(ENV_VARS["runs"], "").split()),
            outputs=env.get(ENV_VARS["outputs"]) or None,
            dino_weights=env.get(ENV_VARS["dino_weights"]) or None,
            face_backend=None if face.lower() in ("", "none", "off") else face,
            judges=tuple(env.get(ENV_VARS["judges"], "").split()),
            analysis=env.get(ENV_VARS["analysis"], "").strip() or None,
        )
