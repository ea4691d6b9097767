"""``diffusers:<hub id or local path>``: any diffusers text-to-image or image-editing pipeline.

The pipeline is loaded with ``DiffusionPipeline.from_pretrained`` (its class comes from ``model_index.json``) and
moved to this process's device (``cuda:<local rank>`` under ``accelerate launch``, else CUDA, MPS or CPU). The task
follows the sample and the pipeline's class:

- a sample without input images goes to a text-to-image pipeline: the loaded one when its ``__call__`` takes no
  ``image`` (or takes an optional one, as Flux Kontext does), else ``AutoPipelineForText2Image.from_pipe``;
- a sample with input images goes to a pipeline whose ``__call__`` takes ``image``: the loaded one (an edit or
  image-to-image pipeline), else ``AutoPipelineForImage2Image.from_pipe`` (Stable Diffusion ->
  ``StableDiffusionImg2ImgPipeline``, sharing the weights). One input image is passed as ``image=<PIL>``, several
  as a list (multi-image edit pipelines such as Qwen-Image-Edit-Plus), or only the first with
  ``input_images=first``.

Samples are batched (``batch_size`` per pipeline call), each with its own CPU ``torch.Generator`` seeded with the
sample's seed, so a sample's starting noise does not depend on its batch (its pixels may, by float rounding: rare
values move by one level between batch shapes). Image-to-image batches group samples whose inputs
have the same sizes. A pipeline whose safety checker flags an image (``nsfw_content_detected``) gives ``nsfw``.
Options (``-o KEY=VALUE``) are :class:`DiffusersConfig`'s; an option the pipeline's ``__call__`` does not take is
not passed and is listed under ``ignored_options`` in the manifest.
"""

from __future__ import annotations

import inspect
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from echo_builder.backends.base import invalid_options
from echo_builder.errors import ConfigError, MissingDependencyError
from echo_builder.generate import register_generator
from echo_builder.generate.base import GenerationRequest, GenerationResult, Generator
from echo_builder.secrets import get_logger, redact

__all__ = ["DiffusersConfig", "DiffusersGenerator"]

log = get_logger(__name__)


class DiffusersConfig(BaseModel):
    """Options of the ``diffusers:`` generator (unknown keys are an error).

    Attributes:
        dtype: weights dtype; ``auto`` is bfloat16 on a CUDA device that supports it, float16 on other CUDA and
            MPS devices, float32 on CPU.
        steps: ``num_inference_steps`` in [1, 10000]; ``None`` keeps the pipeline's default.
        guidance_scale: classifier-free guidance scale in [0, 1000]; ``None`` keeps the pipeline's default.
        height, width: output size in pixels for text-to-image, in [8, 16384] (``None``: the pipeline's default).
        strength: image-to-image strength in (0, 1] (how far from the input image), when the pipeline takes it.
        negative_prompt: the negative prompt, when the pipeline takes one.
        batch_size: samples per pipeline call, in [1, 1024]. Numbers must be finite (nan/inf are refused).
        input_images: ``all`` passes every input image (a list when there are several); ``first`` only the first.
        device: ``cuda:1``, ``cpu``, ...; ``None`` uses the process's accelerate device.
        revision, variant: passed to ``from_pretrained`` (e.g. ``variant=fp16``).
        call_kwargs: further keyword arguments for every pipeline call (e.g. ``{"max_sequence_length": 256}``).
    """

    # numbers are finite and bounded: nan/inf or a 10**9-pixel side fail here, not mid-run on the GPU
    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

    dtype: Literal["auto", "float32", "float16", "bfloat16"] = "auto"
    steps: int | None = Field(default=None, ge=1, le=10_000)
    guidance_scale: float | None = Field(default=None, ge=0.0, le=1_000.0)
    height: int | None = Field(default=None, ge=8, le=16_384)
    width: int | None = Field(default=None, ge=8, le=16_384)
    strength: float | None = Field(default=None, gt=0.0, le=1.0)
    negative_prompt: str | None = None
    batch_size: int = Field(default=1, ge=1, le=1024)
    input_images: Literal["all", "first"] = "all"
    device: str | None = None
    revision: str | None = None
    variant: str | None = None
    call_kwargs: dict[str, Any] = Field(default_factory=dict)


def _require() -> tuple[Any, Any]:
    try:
        import diffusers
        import torch
    except ImportError as exc:
        raise MissingDependencyError(
            exc.name or "diffusers", "generate", "the diffusers: generator"
        ) from None
    return torch, diffusers


def _takes(pipe: Any, argument: str) -> bool:
    return argument in inspect.signature(pipe.__call__).parameters


def _requires(pipe: Any, argument: str) -> bool:
    parameter = inspect.signature(pipe.__call__).parameters.get(argument)
    return parameter is not None and parameter.default is inspect.Parameter.empty


@register_generator(order=10, extra="generate")
class DiffusersGenerator(Generator):
    """A local diffusers pipeline. Nothing loads until :meth:`load`; see :class:`DiffusersConfig` for options."""

    name = "diffusers"
    description = (
        "any diffusers text-to-image or image-editing pipeline (hub id or local folder), batched, multi-GPU"
    )
    runtime_options = frozenset({"batch_size", "device"})

    def __init__(self, target: str, **options: Any) -> None:
        super().__init__(target)
        try:
            self.config = DiffusersConfig(**options)
        except ValidationError as exc:
            raise invalid_options(self.spec, exc, list(DiffusersConfig.model_fields)) from None
        self._pipe: Any = None
        self._variants: dict[str, Any] = {}  # "text" / "image" -> pipeline, or the reason there is none
        self._device: Any = None
        self._dtype: Any = None
        self._ignored: dict[str, list[str]] = {}

    @property
    def batch_size(self) -> int:
        return self.config.batch_size

    def parameters(self) -> dict[str, Any]:
        return self.config.model_dump(mode="json")

    def info(self) -> dict[str, Any]:
        if self._pipe is None:
            return {}
        variants = {k: type(v).__name__ for k, v in self._variants.items() if not isinstance(v, str)}
        return {
            "pipeline_class": type(self._pipe).__name__,
            "task_pipelines": variants,
            "model_path": str(getattr(self._pipe.config, "_name_or_path", self.target)),
            "device": str(self._device),
            "dtype": str(self._dtype).removeprefix("torch."),
            "ignored_options": {k: v for k, v in self._ignored.items() if v},
        }

    # -- loading ---------------------------------------------------------------------------------------------
    def _resolve_device(self, torch: Any) -> Any:
        if self.config.device:
            return torch.device(self.config.device)
        from echo_builder.generate.distributed import accelerate_state

        try:
            return accelerate_state().device
        except (
            ImportError
        ):  # accelerate is part of the generate extra, but a plain CUDA/CPU choice still works
            return torch.device("cuda" if torch.cuda.is_available() else "cpu")

    def _resolve_dtype(self, torch: Any, device: Any) -> Any:
        if self.config.dtype != "auto":
            return getattr(torch, self.config.dtype)
        if device.type == "cuda":
            return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
        if device.type == "mps":
            return torch.float16
        return torch.float32

    def load(self) -> None:
        """Load the pipeline onto the device.

        Raises:
            ConfigError: the local folder does not exist, or the pipeline cannot be loaded (unknown Hub id,
                offline without a cached copy, not a diffusers folder).
            MissingDependencyError: diffusers or torch is not installed.
        """
        if self._pipe is not None:
            return
        torch, diffusers = _require()
        local = Path(self.target).expanduser()
        if not local.exists() and self.target.startswith(("/", ".", "~")):
            raise ConfigError(f"{self.spec}: no such folder {str(local)!r}")
        if local.is_dir() and not (local / "model_index.json").is_file():
            raise ConfigError(
                f"{self.spec}: {str(local)!r} is not a diffusers pipeline folder (no model_index.json); "
                "save one with pipeline.save_pretrained(folder)"
            )
        self._device = self._resolve_device(torch)
        self._dtype = self._resolve_dtype(torch, self._device)
        # newer diffusers take `dtype` and deprecate `torch_dtype`; older ones only know `torch_dtype`
        from diffusers.utils import deprecation_utils

        dtype_key = (
            "dtype" if hasattr(deprecation_utils, "_TORCH_DTYPE_DEPRECATION_MESSAGE") else "torch_dtype"
        )
        kwargs: dict[str, Any] = {dtype_key: self._dtype}
        if self.config.revision:
            kwargs["revision"] = self.config.revision
        if self.config.variant:
            kwargs["variant"] = self.config.variant
        try:
            pipe = diffusers.DiffusionPipeline.from_pretrained(
                str(local) if local.exists() else self.target, **kwargs
            )
        except Exception as exc:  # diffusers raises OSError, ValueError, EnvironmentError, hub errors...
            raise ConfigError(
                f"cannot load diffusers pipeline {self.target!r}: {redact(f'{type(exc).__name__}: {exc}')}"
            ) from None
        pipe = pipe.to(self._device)
        pipe.set_progress_bar_config(disable=True)
        self._pipe = pipe

    def _variant(self, kind: Literal["text", "image"]) -> Any:
        """The pipeline for samples without (``text``) or with (``image``) input images, or a reason string."""
        if kind in self._variants:
            return self._variants[kind]
        pipe = self._pipe
        takes_image = _takes(pipe, "image")
        if kind == "text" and not _requires(pipe, "image"):
            chosen: Any = pipe
        elif kind == "image" and takes_image:
            chosen = pipe
        else:
            import diffusers

            auto = (
                diffusers.AutoPipelineForText2Image
                if kind == "text"
                else diffusers.AutoPipelineForImage2Image
            )
            try:
                chosen = auto.from_pipe(pipe)
                chosen.set_progress_bar_config(disable=True)
            except Exception as exc:  # no counterpart registered for this pipeline class
                task = "text-to-image" if kind == "text" else "image-to-image"
                chosen = (
                    f"{type(pipe).__name__} has no {task} counterpart ({type(exc).__name__}: {exc}); "
                    + (
                        "this pipeline needs input images"
                        if kind == "text"
                        else "use an image-editing or image-to-image pipeline for samples with input images"
                    )
                )
        self._variants[kind] = chosen
        return chosen

    def _call_kwargs(self, pipe: Any, kind: str) -> dict[str, Any]:
        c = self.config
        wanted = {
            "num_inference_steps": c.steps,
            "guidance_scale": c.guidance_scale,
            "negative_prompt": c.negative_prompt,
            "strength": c.strength if kind == "image" else None,
            "height": c.height if kind == "text" else None,
            "width": c.width if kind == "text" else None,
            **c.call_kwargs,
        }
        parameters = inspect.signature(pipe.__call__).parameters
        accepts_any = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values())
        kwargs, ignored = {}, []
        for key, value in wanted.items():
            if value is None:
                continue
            if key in parameters or (accepts_any and key in c.call_kwargs):
                kwargs[key] = value
            else:
                ignored.append(key)
        self._ignored[type(pipe).__name__] = sorted(ignored)
        return kwargs

    # -- generation ------------------------------------------------------------------------------------------
    def generate_batch(self, requests: Sequence[GenerationRequest]) -> list[GenerationResult]:
        self.load()
        results: list[GenerationResult | None] = [None] * len(requests)
        groups: dict[tuple[Any, ...], list[int]] = {}
        for i, request in enumerate(requests):
            images = self._images(request)
            if not images:
                key: tuple[Any, ...] = ("text",)
            elif len(images) > 1:
                key = ("image", "single", i)  # a list of inputs per sample: one sample per call
            else:
                key = ("image", images[0].size)
            groups.setdefault(key, []).append(i)
        for key, indices in groups.items():
            for result, i in zip(
                self._run_group(key[0], [requests[i] for i in indices]), indices, strict=True
            ):
                results[i] = result
        return [r for r in results if r is not None]

    def _images(self, request: GenerationRequest) -> list[Any]:
        images = list(request.input_images)
        return images[:1] if self.config.input_images == "first" else images

    def _run_group(self, kind: str, requests: list[GenerationRequest]) -> list[GenerationResult]:
        pipe = self._variant(kind)  # type: ignore[arg-type]
        if isinstance(pipe, str):
            return [GenerationResult("error", message=pipe) for _ in requests]
        try:
            return self._call(pipe, kind, requests)
        except Exception as exc:
            if len(requests) == 1:
                message = f"{type(pipe).__name__} failed: {type(exc).__name__}: {exc}"
                if len(self._images(requests[0])) > 1:
                    message += (
                        f" (the sample has several input images; if {type(pipe).__name__} takes one, use "
                    )
                    message += "-o input_images=first)"
                return [GenerationResult("error", message=redact(message))]
            # isolate the sample that breaks the batch: the others still get their images
            return [r for request in requests for r in self._run_group(kind, [request])]

    def _call(self, pipe: Any, kind: str, requests: list[GenerationRequest]) -> list[GenerationResult]:
        import torch

        generators = [torch.Generator(device="cpu").manual_seed(r.seed) for r in requests]
        kwargs = self._call_kwargs(pipe, kind)
        if kind == "image":
            images = [self._images(r) for r in requests]
            kwargs["image"] = [imgs[0] if len(imgs) == 1 else imgs for imgs in images]
            if len(requests) == 1:
                kwargs["image"] = kwargs["image"][0]
        start = time.perf_counter()
        with torch.inference_mode():
            out = pipe(
                prompt=[r.prompt for r in requests],
                generator=generators if len(generators) > 1 else generators[0],
                num_images_per_prompt=1,
                output_type="pil",
                **kwargs,
            )
        seconds = (time.perf_counter() - start) / len(requests)
        images = list(getattr(out, "images", None) or [])
        if len(images) != len(requests):
            raise RuntimeError(f"pipeline returned {len(images)} images for {len(requests)} prompts")
        flags = getattr(out, "nsfw_content_detected", None) or [False] * len(requests)
        details = {"pipeline": type(pipe).__name__}
        return [
            GenerationResult(
                "nsfw",
                message="the pipeline's safety checker flagged the image",
                seconds=seconds,
                details=details,
            )
            if flagged
            else GenerationResult("ok", image=image, seconds=seconds, details=details)
            for image, flagged in zip(images, flags, strict=True)
        ]

    def close(self) -> None:
        self._pipe = None
        self._variants.clear()
