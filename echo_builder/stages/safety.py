"""``safety``: the optional NSFW screening stage, which fills ``has_nsfw`` of every dataset row with images.

It runs last (after ``applicability``) and only in a build with ``nsfw_check`` set (``echo-bench build
--nsfw-check nudenet|<VLM spec>``); without it the build runs and writes exactly what it did before, and
``has_nsfw`` stays null. The checker (:func:`echo_builder.safety.create_checker`) screens each downloaded input and
output image of every sample that becomes a dataset row (Trash / Discard samples are not screened); an image held
by several samples is screened once (same SHA-256). A row's ``has_nsfw`` is:

- ``True`` when at least one of its images is flagged (a detection of an NSFW class at or above the threshold);
- ``False`` when every image was screened and none is flagged;
- ``None`` when no image of the row was downloaded, or when an image could not be screened and none is flagged
  (the image's error is in ``stages/safety.jsonl`` and ``stages/failures.jsonl``; one bad image never stops the
  stage).

``stages/safety.jsonl`` holds one line per screened image: ``sample_id``, ``role`` (``input`` / ``output``),
``index`` (0-based position in the row's image column), ``path`` (in the media store), ``sha256``, ``flagged``
(bool, or null on error), ``detections`` (every raw detection: ``class``, ``score`` in [0, 1], ``box`` as
``[x, y, width, height]`` pixels, or null for a VLM) and ``error``. The report entry records the ``detector`` id
(NudeNet version and weights digest, or the VLM and prompt version) and the ``threshold``; the dataset card gets
an "NSFW screening" line from them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from echo_builder.errors import MissingDependencyError
from echo_builder.stages.base import StageFailure
from echo_builder.stages.registry import StageContext, StageDefinition, StageOutput, declare_stage

if TYPE_CHECKING:
    from echo_builder.pipeline import BuildConfig

__all__ = ["SAFETY_VERSION", "prepare_safety", "row_verdict", "run_safety_stage", "screening_settings"]

SAFETY_VERSION = "safety-v1"


def screening_settings(config: BuildConfig) -> dict[str, Any]:
    """What ``build.json`` records of the screening (a resumed build must screen the same way): the checker
    (``nudenet``, the VLM spec, or an injected checker's ``detector_id``) and the threshold (``None``: its
    default)."""
    spec = config.nsfw_check
    checker = (
        spec.strip() if isinstance(spec, str) else str(getattr(spec, "detector_id", type(spec).__name__))
    )
    return {"checker": checker, "threshold": config.nsfw_threshold}


def prepare_safety(config: BuildConfig) -> Any:
    """The checker of ``config`` (:func:`echo_builder.safety.create_checker`), made before anything is written.

    Raises:
        ConfigError: an unknown checker, a bad threshold or option.
        MissingDependencyError: ``nudenet`` (``pip install 'echo-bench[nsfw]'``) or a backend's extra is missing.
    """
    from echo_builder.safety import create_checker

    limits = (
        {"timeout_s": config.timeout_s, "max_attempts": config.max_attempts}
        if isinstance(config.nsfw_check, str) and config.nsfw_check.strip() != "nudenet"
        else {}
    )
    return create_checker(
        config.nsfw_check, threshold=config.nsfw_threshold, options=config.nsfw_options, **limits
    )


def row_verdict(flags: list[bool | None]) -> bool | None:
    """A row's ``has_nsfw`` from its images' verdicts (``None``: not screened): any ``True`` -> ``True``; all
    ``False`` -> ``False``; otherwise (an error, or no image) ``None``."""
    if any(f is True for f in flags):
        return True
    if flags and all(f is False for f in flags):
        return False
    return None


def _screen(checker: Any, path: Any, name: str) -> tuple[Any, str | None]:
    """(result, None) or (None, error): a failure is confined to its image, except a missing dependency."""
    try:
        return checker.check(path, name=name), None
    except MissingDependencyError:
        raise
    except Exception as exc:  # one image that cannot be screened (a corrupt file, a failed call) is recorded
        text = str(exc)
        return None, text if name in text else f"{name}: {type(exc).__name__}: {text}"


def run_safety_stage(context: StageContext) -> StageOutput:
    """Screen the images of every sample that becomes a dataset row and set ``has_nsfw`` (see the module)."""
    from tqdm.auto import tqdm

    from echo_builder.dataset_rows import route
    from echo_builder.safety import VlmNsfwChecker

    checker = context.prepared["safety"]
    release: Callable[[], None] = lambda: None  # noqa: E731
    if isinstance(checker, VlmNsfwChecker) and checker.caller.cache is None:
        # the VLM's calls join the build's call cache: a resumed build repeats none
        from echo_builder.cache import CallCache

        config = context.config
        cache = CallCache(
            config.cache_dir or context.out / "cache", root=None if config.cache_dir else context.out
        )
        checker.caller.cache = cache

        def release() -> None:
            checker.caller.cache = None
            cache.close()

    memo: dict[str, tuple[Any, str | None]] = {}
    rows: list[dict[str, Any]] = []
    samples = []
    screened = flagged = unknown = 0
    todo = [
        (
            s,
            [
                (role, i, ref)
                for role, refs in (("input", s.input_images), ("output", s.output_images))
                for i, ref in enumerate(refs)
                if ref.path
            ],
        )
        for s in context.samples
    ]
    bar = tqdm(
        total=sum(len(images) for s, images in todo if route(s) is not None),
        desc=context.progress("safety"),
        unit="img",
        disable=True if context.progress("safety") is None else None,
    )
    try:
        for sample, images in todo:
            if route(sample) is None or not images:  # dropped (not in the dataset) or nothing to screen
                samples.append(sample)
                continue
            screened += 1
            flags: list[bool | None] = []
            errors: list[str] = []
            for role, index, ref in images:
                name = f"{sample.id} {role} image {index + 1} ({ref.path})"
                key = ref.sha256 or f"path:{ref.path}"
                if key not in memo:
                    memo[key] = _screen(checker, context.store_root / ref.path, name)
                result, error = memo[key]
                bar.update(1)
                flags.append(None if result is None else bool(result.flagged))
                if error is not None:
                    errors.append(error)
                rows.append(
                    {
                        "sample_id": sample.id,
                        "role": role,
                        "index": index,
                        "path": ref.path,
                        "sha256": ref.sha256,
                        "flagged": None if result is None else bool(result.flagged),
                        "detections": [] if result is None else result.detections,
                        "error": error,
                    }
                )
            verdict = row_verdict(flags)
            flagged += verdict is True
            if verdict is None:
                unknown += 1
                context.failures.append(StageFailure("safety", sample.id, "; ".join(errors)))
            samples.append(sample.model_copy(update={"has_nsfw": verdict}))
        detector = checker.detector_id
    finally:
        bar.close()
        release()
    context.samples = samples
    return StageOutput(
        {
            "in": screened,
            "out": screened - unknown,
            "failures": unknown,
            "detector": detector,
            "threshold": checker.threshold,
            "images": len(memo),
            "image_errors": sum(1 for _, error in memo.values() if error is not None),
            "flagged": flagged,
        },
        files={"safety.jsonl": rows},
    )


SAFETY_STAGE = declare_stage(
    StageDefinition(
        name="safety",
        version=SAFETY_VERSION,
        run=run_safety_stage,
        after="applicability",
        reads=("samples",),
        writes=("samples", "failures"),
        report_fields=("detector", "threshold", "images", "image_errors", "flagged"),
        prepare=prepare_safety,
        when=lambda config: config.nsfw_check is not None,
        extra="nsfw",
        description="NSFW screening (--nsfw-check nudenet|<VLM spec>): has_nsfw of every row with images",
    )
)
