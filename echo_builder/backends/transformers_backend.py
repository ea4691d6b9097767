"""``transformers:<hub id or local path>``: a local vision-language model as judge or curator.

Loads ``AutoProcessor`` + ``AutoModelForImageTextToText`` (Qwen2.5-VL, Qwen2-VL, LLaVA, Idefics, Gemma 3, ...),
renders conversations with the processor's chat template, and generates in left-padded batches. Next-token
probabilities of candidate answers (``"1"``..``"9"``, ``"Good"``/``"Medium"``/``"Bad"``) come from one forward pass.

Devices go through ``accelerate``: a single process uses ``PartialState().device`` (CUDA, MPS or CPU), or
``device_map="auto"`` to shard a large model over the visible GPUs. Under ``accelerate launch --num_processes K``
each process holds a replica, takes its share of every batch (``split_between_processes``) and the results are
gathered back in input order (``gather_object``), so callers see exactly what a single process would return.
"""

from __future__ import annotations

import asyncio
import hashlib
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from echo_builder.backends import register_backend
from echo_builder.backends.base import (
    Backend,
    Call,
    CandidateScores,
    GenerationParams,
    ImagePart,
    Message,
    Reply,
    TokenLogprob,
    Usage,
    invalid_options,
    normalise_candidates,
)
from echo_builder.errors import BackendError, ConfigError, MissingDependencyError, PermanentBackendError

__all__ = ["TransformersBackend", "TransformersConfig"]


class TransformersConfig(BaseModel):
    """Options of the ``transformers:`` backend (unknown keys are an error).

    Attributes:
        dtype: ``auto``, ``float32``, ``bfloat16`` or ``float16``.
        device_map: ``None`` puts the whole model on this process's device; ``"auto"`` shards it over all GPUs
            (one process only).
        batch_size: conversations per forward pass.
        revision: Hub revision (branch, tag or commit) when the target is a Hub id.
        trust_remote_code: allow custom model code from the Hub (off by default).
        attn_implementation: e.g. ``sdpa`` or ``flash_attention_2``; ``None`` lets transformers choose.
    """

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

    dtype: str = "auto"
    device_map: str | None = None
    batch_size: int = Field(default=8, ge=1, le=1024)
    revision: str | None = None
    trust_remote_code: bool = False
    attn_implementation: str | None = None


def _require() -> tuple[Any, Any]:
    try:
        import torch
        import transformers
    except ImportError as exc:
        raise MissingDependencyError(
            exc.name or "transformers", "judge-local", "the transformers: backend"
        ) from None
    return torch, transformers


def _partial_state() -> Any:
    """accelerate's process state; on a machine without an accelerator, CPU processes launched together
    (``accelerate launch --multi_gpu --num_processes K`` with no GPU) still form one gloo group."""
    torch, _ = _require()
    from accelerate import PartialState

    mps = getattr(torch.backends, "mps", None)
    has_accelerator = torch.cuda.is_available() or bool(mps and mps.is_available())
    return PartialState(cpu=not has_accelerator)


def _processor_frame(image_processor: Any, width: int, height: int) -> tuple[int, int]:
    """The size a Qwen2-VL-style image processor resizes a ``width`` x ``height`` image to (else unchanged)."""
    patch = getattr(image_processor, "patch_size", None)
    merge = getattr(image_processor, "merge_size", None)
    size = getattr(image_processor, "size", None) or {}
    min_pixels = getattr(image_processor, "min_pixels", None) or size.get("shortest_edge")
    max_pixels = getattr(image_processor, "max_pixels", None) or size.get("longest_edge")
    if not (
        isinstance(patch, int) and isinstance(merge, int) and isinstance(min_pixels, int) and max_pixels
    ) or not getattr(image_processor, "do_resize", True):
        return width, height
    from transformers.models.qwen2_vl.image_processing_qwen2_vl import smart_resize

    new_height, new_width = smart_resize(
        height, width, factor=patch * merge, min_pixels=min_pixels, max_pixels=int(max_pixels)
    )
    return int(new_width), int(new_height)


@register_backend(order=20, extra="judge-local")
class TransformersBackend(Backend):
    """A local VLM through transformers. The model loads on first use; see :class:`TransformersConfig`."""

    name = "transformers"
    description = (
        "local vision-language model via transformers (AutoModelForImageTextToText), multi-GPU via accelerate"
    )
    native_batching = True

    def __init__(self, target: str, **options: Any) -> None:
        super().__init__(target)
        try:
            self.config = TransformersConfig(**options)
        except ValidationError as exc:
            from echo_builder.backends import MODEL_BACKEND_OPTIONS

            raise invalid_options(
                self.backend_id, exc, [*TransformersConfig.model_fields, *MODEL_BACKEND_OPTIONS]
            ) from None
        _require()
        self._model: Any = None
        self._processor: Any = None
        self._snapshot: str | None = None
        self._load_lock = threading.Lock()
        self._run_lock = threading.Lock()  # one forward pass at a time per model
        self._collective_lock = (
            threading.Lock()
        )  # distributed batches must reach every process in the same order

    def cache_settings(self) -> dict[str, Any]:
        """Options that change the weights or the numerics of a reply, when not the defaults: ``revision`` (other
        weights under the same id), ``dtype`` and ``attn_implementation``. Part of every cache key."""
        c = self.config
        chosen = {"revision": c.revision, "dtype": c.dtype if c.dtype != "auto" else None}
        chosen["attn_implementation"] = c.attn_implementation
        return {k: v for k, v in chosen.items() if v is not None}

    # -- loading ------------------------------------------------------------------------------------------------------
    def _load(self) -> None:
        with self._load_lock:
            if self._model is not None:
                return
            torch, transformers = _require()
            kwargs: dict[str, Any] = {
                "revision": self.config.revision,
                "trust_remote_code": self.config.trust_remote_code,
            }
            dtype = self.config.dtype
            if dtype != "auto":
                if not isinstance(getattr(torch, dtype, None), torch.dtype):
                    raise ConfigError(f"{self.backend_id}: unknown dtype {dtype!r}")
                dtype = getattr(torch, dtype)
            try:
                processor = transformers.AutoProcessor.from_pretrained(self.target, **kwargs)
                model_kwargs = dict(kwargs, dtype=dtype)
                if self.config.device_map is not None:
                    model_kwargs["device_map"] = self.config.device_map
                if self.config.attn_implementation is not None:
                    model_kwargs["attn_implementation"] = self.config.attn_implementation
                model = transformers.AutoModelForImageTextToText.from_pretrained(self.target, **model_kwargs)
            except OSError as exc:
                raise ConfigError(
                    f"{self.backend_id}: cannot load model or processor from {self.target!r} ({exc}). Give a local "
                    "folder with the saved model and processor, or a Hub id while online."
                ) from None
            if self.config.device_map is None:
                model = model.to(_partial_state().device)
            model.eval()
            tokenizer = getattr(processor, "tokenizer", processor)
            tokenizer.padding_side = "left"  # decoder-only batched generation needs left padding
            if tokenizer.pad_token is None:
                tokenizer.pad_token = tokenizer.eos_token
            self._processor, self._model = processor, model
            self._snapshot = self._compute_snapshot(model)

    def _compute_snapshot(self, model: Any) -> str:
        commit = getattr(model.config, "_commit_hash", None)
        path = Path(self.target)
        if path.is_dir():
            digest = hashlib.sha256()
            for f in sorted(path.iterdir()):
                if f.is_file():
                    digest.update(f"{f.name}:{f.stat().st_size}\n".encode())
                    if f.suffix == ".json":
                        digest.update(f.read_bytes())
            return f"{path.name}@{digest.hexdigest()[:12]}"
        return f"{self.target}@{commit or self.config.revision or 'unknown'}"

    @property
    def model_snapshot(self) -> str | None:
        return self._snapshot

    def vision_frame(self, width: int, height: int) -> tuple[int, int]:
        """(width, height) the model sees: for Qwen2-VL-style image processors (``patch_size``, ``merge_size``,
        min/max pixels) the image after their own resize to multiples of ``patch_size * merge_size`` within the
        pixel budget, which is the frame Qwen2.5-VL writes ``pixels`` boxes in; unchanged for other processors.
        Loads the model on first use."""
        self._load()
        return _processor_frame(getattr(self._processor, "image_processor", None), width, height)

    # -- rendering ------------------------------------------------------------------------------------------------------
    def _render(self, messages: Sequence[Message]) -> tuple[str, list[Any]]:
        conversation: list[dict[str, Any]] = []
        images: list[Any] = []
        for m in messages:
            parts: list[dict[str, Any]] = []
            for p in m.content:
                if isinstance(p, ImagePart):
                    parts.append({"type": "image"})
                    images.append(p.to_pil())
                else:
                    parts.append({"type": "text", "text": p.text})
            conversation.append({"role": m.role, "content": parts})
        text = self._processor.apply_chat_template(conversation, add_generation_prompt=True, tokenize=False)
        return text, images

    def _encode(self, batch: Sequence[Sequence[Message]]) -> Any:
        texts, images = [], []
        for messages in batch:
            text, imgs = self._render(messages)
            texts.append(text)
            images.extend(imgs)
        inputs = self._processor(text=texts, images=images or None, padding=True, return_tensors="pt")
        return inputs.to(self._model.device)

    # -- generation -------------------------------------------------------------------------------------------------------
    def _generate_group(self, calls: Sequence[Call]) -> list[Reply]:
        """Generate for calls sharing one :class:`GenerationParams`, in batches of ``batch_size``."""
        torch, _ = _require()
        params = calls[0][1]
        tokenizer = getattr(self._processor, "tokenizer", self._processor)
        out: list[Reply] = []
        for start in range(0, len(calls), self.config.batch_size):
            chunk = calls[start : start + self.config.batch_size]
            t0 = time.perf_counter()
            inputs = self._encode([m for m, _ in chunk])
            gen_kwargs: dict[str, Any] = {
                "max_new_tokens": params.max_tokens,
                "do_sample": params.temperature > 0,
                "pad_token_id": tokenizer.pad_token_id,
                "return_dict_in_generate": True,
                "output_scores": params.logprobs,
            }
            if params.temperature > 0:
                gen_kwargs["temperature"] = params.temperature
                if params.top_p is not None:
                    gen_kwargs["top_p"] = params.top_p
                torch.manual_seed(params.seed if params.seed is not None else 0)
            if params.stop:
                gen_kwargs["stop_strings"] = list(params.stop)
                gen_kwargs["tokenizer"] = tokenizer
            with torch.inference_mode():
                generated = self._model.generate(**inputs, **gen_kwargs)
            prompt_len = inputs["input_ids"].shape[1]
            new_tokens = generated.sequences[:, prompt_len:]
            latency = (time.perf_counter() - t0) / len(chunk)
            step_logprobs = (
                torch.log_softmax(torch.stack(generated.scores, dim=1).float(), dim=-1)
                if params.logprobs
                else None
            )
            for row in range(len(chunk)):
                out.append(self._reply(row, new_tokens, inputs, step_logprobs, params, tokenizer, latency))
        return out

    def _reply(
        self,
        row: int,
        new_tokens: Any,
        inputs: Any,
        step_logprobs: Any,
        params: GenerationParams,
        tokenizer: Any,
        latency: float,
    ) -> Reply:
        ids = new_tokens[row].tolist()
        eos_ids = self._model.generation_config.eos_token_id
        eos_set = set(eos_ids if isinstance(eos_ids, list) else [eos_ids] if eos_ids is not None else [])
        eos_set.add(tokenizer.pad_token_id)
        length = next((i for i, t in enumerate(ids) if t in eos_set), len(ids))
        finish = "stop" if length < len(ids) or len(ids) < params.max_tokens else "length"
        text = tokenizer.decode(ids[:length], skip_special_tokens=True)
        if params.stop:
            cut = [text.find(s) for s in params.stop if s in text]
            if cut:
                text, finish = text[: min(cut)], "stop"
        logprobs = None
        if step_logprobs is not None:
            k = max(params.top_logprobs, 1)
            entries = []
            for step in range(length):
                dist = step_logprobs[row, step]
                top_v, top_i = dist.topk(k)
                entries.append(
                    TokenLogprob(
                        token=tokenizer.decode([ids[step]]),
                        logprob=float(dist[ids[step]]),
                        top=tuple(
                            (tokenizer.decode([i]), float(v))
                            for v, i in zip(top_v.tolist(), top_i.tolist(), strict=True)
                        ),
                    )
                )
            logprobs = tuple(entries)
        return Reply(
            text=text,
            finish_reason=finish,
            usage=Usage(input_tokens=int(inputs["attention_mask"][row].sum()), output_tokens=length),
            logprobs=logprobs,
            logprobs_status="ok" if params.logprobs else "not_requested",
            backend_id=self.backend_id,
            model_snapshot=self._snapshot,
            latency_s=latency,
        )

    def _generate_local(self, calls: Sequence[Call]) -> list[Reply | BackendError]:
        self._load()
        results: list[Reply | BackendError | None] = [None] * len(calls)
        groups: dict[GenerationParams, list[int]] = {}
        for i, (_, params) in enumerate(calls):
            groups.setdefault(params, []).append(i)
        with self._run_lock:
            for indices in groups.values():
                try:
                    replies: list[Reply | BackendError] = list(
                        self._generate_group([calls[i] for i in indices])
                    )
                except (RuntimeError, ValueError) as exc:  # e.g. out of memory, a malformed chat template
                    err = PermanentBackendError(f"generation failed: {exc}", backend_id=self.backend_id)
                    replies = [err] * len(indices)
                for i, reply in zip(indices, replies, strict=True):
                    results[i] = reply
        return [r for r in results if r is not None]

    def generate_distributed(self, calls: Sequence[Call]) -> list[Reply | BackendError]:
        """Run ``calls`` split across ``accelerate`` processes and return every result, in order, on every process.

        In a single process this is plain batched generation. Every process must pass the same ``calls``.
        """
        from accelerate.utils import gather_object

        state = _partial_state()
        if state.num_processes == 1:
            return self._generate_local(calls)
        indices = list(range(len(calls)))
        with self._collective_lock:
            with state.split_between_processes(indices) as mine:
                local = list(zip(mine, self._generate_local([calls[i] for i in mine]), strict=True))
            gathered = gather_object(local)
        by_index = dict(gathered)
        return [by_index[i] for i in indices]

    async def agenerate(self, messages: Sequence[Message], params: GenerationParams) -> Reply:
        reply = (await self.agenerate_batch([(messages, params)]))[0]
        if isinstance(reply, BackendError):
            raise reply
        return reply

    async def agenerate_batch(self, calls: Sequence[Call]) -> list[Reply | BackendError]:
        return await asyncio.to_thread(self.generate_distributed, calls)

    # -- candidate scoring ----------------------------------------------------------------------------------------------
    def _candidate_logprobs(self, messages: Sequence[Message], candidates: Sequence[str]) -> CandidateScores:
        torch, _ = _require()
        self._load()
        tokenizer = getattr(self._processor, "tokenizer", self._processor)
        first_ids: dict[str, int] = {}
        for cand in candidates:
            ids = tokenizer.encode(cand, add_special_tokens=False)
            if not ids:
                raise ConfigError(f"candidate {cand!r} encodes to no token")
            first_ids[cand] = ids[0]
        clashes = {t for t in first_ids.values() if list(first_ids.values()).count(t) > 1}
        if clashes:
            shared = sorted(c for c, t in first_ids.items() if t in clashes)
            raise ConfigError(
                f"candidates {shared} start with the same token; next-token scoring cannot tell them apart"
            )
        with self._run_lock, torch.inference_mode():
            inputs = self._encode([messages])
            logits = self._model(**inputs).logits[0, -1].float()
        logp = torch.log_softmax(logits, dim=-1)
        return normalise_candidates(
            {c: float(logp[t]) for c, t in first_ids.items()}, self.backend_id, self._snapshot
        )

    async def acandidate_probabilities(
        self, messages: Sequence[Message], candidates: Sequence[str], params: GenerationParams | None = None
    ) -> CandidateScores:
        """Next-token probabilities of ``candidates`` (each scored by its first token), normalised to sum to 1.

        Raises :class:`ConfigError` when two candidates share their first token.
        """
        return await asyncio.to_thread(self._candidate_logprobs, messages, candidates)

    async def aclose(self) -> None:
        self._model = None
        self._processor = None
