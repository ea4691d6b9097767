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

import contextlib
from pathlib import Path
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
        {
            "timeout_s": config.timeout_s,
            "max_attempts": config.max_attempts,
            "concurrency": config.concurrency,
        }
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


def _error_text(exc: BaseException, name: str) -> str:
    text = str(exc)
    return text if name in text else f"{name}: {type(exc).__name__}: {text}"


def _screen_all(checker: Any, images: list[tuple[Path, str]], bar: Any) -> list[tuple[Any, str | None]]:
    """``(result, None)`` or ``(None, error)`` per image: a failure is confined to its image (a corrupt file, a
    failed call, an unusable answer), except a missing dependency. A checker with ``check_many`` (a VLM: its
    calls run concurrently) screens them all at once, one that has only ``check`` one by one."""
    if hasattr(checker, "check_many"):
        outcomes = checker.check_many([path for path, _ in images], names=[name for _, name in images])
        bar.update(len(images))
        return [
            (None, _error_text(o, name)) if isinstance(o, BaseException) else (o, None)
            for o, (_, name) in zip(outcomes, images, strict=True)
        ]
    results: list[tuple[Any, str | None]] = []
    for path, name in images:
        try:
            results.append((checker.check(path, name=name), None))
        except MissingDependencyError:
            raise
        except Exception as exc:  # one image that cannot be screened is recorded; the stage goes on
            results.append((None, _error_text(exc, name)))
        bar.update(1)
    return results


def _images(sample: Any) -> list[tuple[str, int, Any]]:
    """``(role, index, MediaRef)`` of every downloaded image of ``sample``: inputs, then outputs."""
    return [
        (role, index, ref)
        for role, refs in (("input", sample.input_images), ("output", sample.output_images))
        for index, ref in enumerate(refs)
        if ref.path
    ]


def run_safety_stage(context: StageContext) -> StageOutput:
    """Screen the images of every sample that becomes a dataset row and set ``has_nsfw`` (see the module)."""
    from tqdm.auto import tqdm

    from echo_builder.dataset_rows import route

    checker = context.prepared["safety"]
    # the images to screen: those of the samples that become rows (Trash / Discard are not), each once
    # (sample ids are made unique only after the last stage: the samples are matched by position)
    todo = [_images(s) if route(s) is not None else [] for s in context.samples]
    unique: dict[str, tuple[Path, str]] = {}
    for sample, images in zip(context.samples, todo, strict=True):
        sample_id = sample.id
        for role, index, ref in images:
            key = ref.sha256 or f"path:{ref.path}"
            unique.setdefault(
                key, (context.store_root / ref.path, f"{sample_id} {role} image {index + 1} ({ref.path})")
            )
    with contextlib.ExitStack() as stack:
        if getattr(checker, "uses_call_cache", False) and checker.caller.cache is None:
            # a VLM's calls join the build's call cache (the one the build's model caller holds, or the same
            # folder opened here with the rules backend): a resumed build repeats none
            cache = getattr(context.caller, "cache", None)
            if cache is None:
                from echo_builder.cache import CallCache

                config = context.config
                cache = CallCache(
                    config.cache_dir or context.out / "cache", root=None if config.cache_dir else context.out
                )
                stack.callback(cache.close)
            checker.caller.cache = cache
            stack.callback(setattr, checker.caller, "cache", None)  # callbacks run last-in, first-out
        if getattr(context.config, "batch", False) and getattr(checker, "uses_call_cache", False):
            from echo_builder.backends.batch import batch_settings
            from echo_builder.backends.openai_backend import OpenAIBackend

            # --batch: an openai: VLM checker's calls go into one Batch API job too (another checker runs as is)
            if isinstance(checker.caller.backend, OpenAIBackend) and checker.caller.batch is None:
                config = context.config
                checker.caller.batch = batch_settings(
                    context.out, retry=config.batch_retry, poll_s=config.batch_poll_s
                )
                stack.callback(setattr, checker.caller, "batch", None)
        label = context.progress("safety")
        bar = stack.enter_context(
            tqdm(total=len(unique), desc=label, unit="img", disable=True if label is None else None)
        )
        memo = dict(zip(unique, _screen_all(checker, list(unique.values()), bar), strict=True))
        detector = checker.detector_id

    rows: list[dict[str, Any]] = []
    samples = []
    flagged = unknown = 0
    for sample, images in zip(context.samples, todo, strict=True):
        if not images:  # dropped (not in the dataset) or nothing downloaded: has_nsfw stays as it was
            samples.append(sample)
            continue
        flags: list[bool | None] = []
        errors: list[str] = []
        for role, index, ref in images:
            result, error = memo[ref.sha256 or f"path:{ref.path}"]
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
                    "flagged": flags[-1],
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
    context.samples = samples
    screened = sum(1 for images in todo if images)
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
