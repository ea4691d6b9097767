"""VLM judges: single-answer grading, pairwise grading in both orders, and probability scoring.

A :class:`Judge` wraps one backend through a :class:`~echo_builder.backends.caller.ModelCaller` (cache,
concurrency, retries) and turns each call into a :class:`~echo_builder.records.Verdict`. An ensemble is simply
several judges over the same items; votes are combined later by :func:`echo_builder.stats.majority_vote`, so the
order of judges cannot matter.

Failure rules (ECHO, ``spec/ECHO.md`` Flow 2): an API error after the retry cap is status ``error``; a reply
without a valid verdict is re-asked once, then ``parse_failure``; a declined or filtered reply is ``refusal``. A
model without a usable output image gets ``missing_output`` and no judge call. All keep the raw text and the
reason; none becomes a score.
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import json
import threading
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from echo_builder.backends.base import GenerationParams, ImagePart, Message, TextPart, run_sync
from echo_builder.backends.caller import CallRequest, CallResult, ModelCaller, gather_all
from echo_builder.errors import BackendError, ConfigError, ImageError
from echo_builder.judge.images import prepare_for_judge
from echo_builder.judge.overlap import DEFAULT_PREP_WORKERS, prepare_and_call
from echo_builder.judge.parsing import parse_criteria, parse_preference, parse_rating
from echo_builder.judge.prompts import (
    CRITERIA,
    PAIRWISE,
    PROBABILITY_DIGITS,
    PROBABILITY_TRIG,
    SINGLE,
    JudgePrompt,
    render_parts,
)
from echo_builder.records import Verdict

__all__ = ["Judge", "JudgeItem", "trig_score"]

_TRIG_VALUES = {"Good": 1.0, "Medium": 0.5, "Bad": 0.0}
MISSING_PREFIX = "missing_output: "


@dataclass(frozen=True)
class JudgeItem:
    """One model output to judge.

    Attributes:
        sample_id: the benchmark sample.
        prompt: the user's prompt.
        inputs: the sample's input images (paths, bytes, PIL images or datasets image dicts); empty for
            text-to-image.
        model: the model that produced ``output``.
        output: the output image, or ``None`` when the model produced none.
        output_error: why the output is missing, when known (e.g. the generator's refusal).
        ocr_text: what an OCR engine read in ``output`` (lines joined with newlines), for a judge prompt that
            places ``{ocr_text}`` (``metrics text_rendering --ocr-evidence``); ``None``: no OCR evidence.
    """

    sample_id: str
    prompt: str
    inputs: tuple[Any, ...]
    model: str
    output: Any | None
    output_error: str | None = field(default=None, compare=False)
    ocr_text: str | None = None


def trig_score(probabilities: dict[str, float]) -> tuple[float, float]:
    """TRIGScore (TRIG-Bench, arXiv 2507.22100): Good/Medium/Bad mapped to 1/0.5/0, expectation times confidence.

    Returns ``(score in [0, 1], confidence in [0, 1])`` where confidence is the largest normalised probability.
    """
    expected = sum(_TRIG_VALUES[k] * p for k, p in probabilities.items())
    confidence = max(probabilities.values())
    return expected * confidence, confidence


class Judge:
    """One judge backend applying ECHO's protocols.

    Args:
        caller: the backend with its cache and limits; ``caller.backend.backend_id`` names the judge.
        params: generation parameters of judge calls (default: the prompt's temperature, 0 for the built-in
            prompts, and 1,024 tokens).
        short_side: images are resized to this shorter side (px); default: the prompt's (512 px and JPEG quality
            85 for the built-in prompts, as ECHO did).
        prompts: judge prompts replacing the built-in ones, by answer kind (``rating``, ``preference``,
            ``digits``, ``trig``; see :func:`echo_builder.judge.prompts.load_judge_prompt`).
    """

    def __init__(
        self,
        caller: ModelCaller,
        *,
        params: GenerationParams | None = None,
        short_side: int | None = None,
        prompts: dict[str, JudgePrompt] | None = None,
    ) -> None:
        self.caller = caller
        self.params = params
        self.short_side = short_side
        self.prompts = dict(prompts or {})
        # image memo: key -> the prepared part, or the Future of a preparation another thread is running
        self._prepared: dict[Any, ImagePart | Future[ImagePart]] = {}
        self._prepared_lock = threading.Lock()
        self._template: JudgePrompt = SINGLE

    @property
    def judge_id(self) -> str:
        return self.caller.backend.backend_id

    # -- helpers ------------------------------------------------------------------------------------------------------
    def _use(self, template: JudgePrompt) -> JudgePrompt:
        """Start a call batch with ``template`` (or the prompt given for its answer kind): clears the image memo."""
        if template in (SINGLE, PAIRWISE, PROBABILITY_DIGITS, PROBABILITY_TRIG):
            template = self.prompts.get(template.answer, template)
        self._template = template
        self._prepared.clear()
        return template

    def _params(self, template: JudgePrompt) -> GenerationParams:
        return self.params or GenerationParams(temperature=template.temperature, max_tokens=1024)

    def _request(self, template: JudgePrompt, messages: Any, stage: str) -> CallRequest:
        """One judge call: ``messages`` under ``template``'s generation settings, cached under its version."""
        return CallRequest(messages, self._params(template), stage=stage, prompt_version=template.version)

    def _image(self, image: Any, name: str) -> ImagePart:
        # Items share input images across models: prepare each once. Paths key by path, bytes by content; other
        # objects by identity, which is safe because the memo is cleared per call while the items are alive.
        # Thread-safe: preparation threads (echo_builder.judge.overlap) asking for one image wait for one result.
        if isinstance(image, (str, Path)):
            key: Any = ("path", str(image))
        elif isinstance(image, (bytes, bytearray)):
            key = ("bytes", hashlib.sha256(image).hexdigest())
        else:
            key = ("object", id(image))
        with self._prepared_lock:
            known = self._prepared.get(key)
            if known is None:
                mine: Future[ImagePart] = Future()
                self._prepared[key] = mine
        if isinstance(known, ImagePart):
            return known
        if known is not None:
            return known.result()  # another thread prepares it (re-raises its ImageError)
        t = self._template
        try:
            part = prepare_for_judge(
                image,
                short_side=self.short_side or t.short_side,
                quality=t.jpeg_quality,
                resample=t.resample,
                name=name,
            )
        except BaseException as exc:
            mine.set_exception(exc)
            with self._prepared_lock:
                self._prepared.pop(key, None)
            raise
        mine.set_result(part)
        with self._prepared_lock:
            self._prepared[key] = part
        return part

    def _messages(
        self, template: JudgePrompt, item: JudgeItem, outputs: Sequence[ImagePart]
    ) -> tuple[Message, ...]:
        inputs = [self._image(img, f"{item.sample_id} input {i}") for i, img in enumerate(item.inputs)]
        parts = render_parts(template, item.prompt, inputs, outputs, ocr_text=item.ocr_text)
        user = tuple(TextPart(p) if isinstance(p, str) else p for p in parts)
        if not template.system:
            return (Message("user", user),)
        return (Message("system", (TextPart(template.system),)), Message("user", user))

    def _base(self, item: JudgeItem, template: JudgePrompt, mode: str) -> dict[str, Any]:
        return {
            "sample_id": item.sample_id,
            "judge": self.judge_id,
            "mode": mode,
            "prompt_version": template.version,
        }

    @staticmethod
    def _usage(result: CallResult) -> dict[str, Any]:
        reply = result.reply
        if reply is None:
            return {}
        return {
            "judge_snapshot": reply.model_snapshot,
            "input_tokens": reply.usage.input_tokens,
            "output_tokens": reply.usage.output_tokens,
            "latency_s": reply.latency_s,
            "replica": reply.served_by,
        }

    def _output_part(self, item: JudgeItem) -> ImagePart | str:
        """The prepared output image, or the reason it is missing."""
        if item.output is None:
            return item.output_error or "no output image"
        try:
            return self._image(item.output, f"{item.model}/{item.sample_id}")
        except ImageError as exc:
            return f"unreadable output: {exc}"

    # -- single-answer grading ---------------------------------------------------------------------------------------
    async def asingle(
        self,
        items: Sequence[JudgeItem],
        *,
        progress: str | None = None,
        template: JudgePrompt = SINGLE,
        criterion: str = "overall",
    ) -> list[Verdict]:
        """Rate each output 1-10 (ECHO's single-answer grading). One :class:`Verdict` per item, in order.

        ``template``/``criterion`` select another rating protocol (``answer.kind: rating``), e.g.
        :data:`~echo_builder.judge.prompts.TEXT_RENDERING` or a loaded prompt file; the built-in
        :data:`~echo_builder.judge.prompts.SINGLE` is replaced by the judge's own ``rating`` prompt when given.
        """
        template = self._use(template)
        if template.answer != "rating":
            raise ConfigError(
                f"judge prompt {template.source}: answer.kind is {template.answer!r}, not 'rating'"
            )
        verdicts: list[Verdict | None] = [None] * len(items)

        def build(indexed: tuple[int, JudgeItem]) -> list[tuple[int, Verdict | CallRequest]]:
            # runs in a preparation thread while earlier items' calls are in flight
            i, item = indexed
            output = self._output_part(item)
            base = {**self._base(item, template, "single"), "model": item.model, "criterion": criterion}
            if isinstance(output, str):
                return [(i, Verdict(**base, status="missing_output", error=output))]
            try:
                messages = self._messages(template, item, [output])
            except ImageError as exc:
                return [(i, Verdict(**base, status="error", error=f"input image: {exc}"))]
            request = self._request(template, messages, f"judge-{template.name}")
            return [(i, request)]

        done = await prepare_and_call(self.caller, list(enumerate(items)), build, progress=progress)
        slots: list[int] = []
        results: list[CallResult] = []
        for i, value in done:
            if isinstance(value, Verdict):
                verdicts[i] = value
            else:
                slots.append(i)
                results.append(value)
        rating = functools.partial(
            parse_rating, low=template.low, high=template.high, pattern=_pattern(template), pick=template.pick
        )
        finished = await self._parse_with_reask(results, rating, template.reask, progress)
        for i, (result, parsed) in zip(slots, finished, strict=True):
            item = items[i]
            base = {
                **self._base(item, template, "single"),
                "model": item.model,
                "criterion": criterion,
                **self._usage(result),
            }
            verdicts[i] = self._rating_verdict(base, result, parsed)
        return [v for v in verdicts if v is not None]

    async def _parse_with_reask(
        self, results: Sequence[CallResult], parse: Any, reask_text: str, progress: str | None
    ) -> list[tuple[CallResult, Any]]:
        """Parse every reply; re-ask the unparseable ones once, all in one batch (one collective step when the
        backend is split across accelerate processes), and keep whichever answer is final."""
        return await self._parse_each_with_reask(results, [parse] * len(results), reask_text, progress)

    @staticmethod
    def _rating_verdict(base: dict[str, Any], result: CallResult, parsed: Any) -> Verdict:
        if result.reply is None:
            return Verdict(**base, status="error", error=result.error)
        if parsed.status == "ok":
            return Verdict(**base, rating=float(parsed.rating), raw_text=result.reply.text)
        return Verdict(**base, status=parsed.status, raw_text=result.reply.text, error=parsed.reason)

    def single(
        self,
        items: Sequence[JudgeItem],
        *,
        progress: str | None = None,
        template: JudgePrompt = SINGLE,
        criterion: str = "overall",
    ) -> list[Verdict]:
        """Synchronous :meth:`asingle`."""
        return run_sync(self.asingle(items, progress=progress, template=template, criterion=criterion))

    # -- per-criterion grading ----------------------------------------------------------------------------------------
    async def acriteria(
        self,
        items: Sequence[JudgeItem],
        *,
        progress: str | None = None,
        template: JudgePrompt = CRITERIA,
    ) -> list[Verdict]:
        """Rate each output 1-10 on every criterion of ``template`` in one call (answer kind ``criteria``).

        One ``single`` :class:`Verdict` per item and applicable criterion (``criterion`` = its name; an
        ``inputs_only`` criterion is not asked for a sample without input images), items in order, criteria in the
        prompt's order. The reply must hold a JSON object rating every asked criterion; an unparseable reply is
        re-asked once, then every criterion of the item gets ``parse_failure`` (a partial answer is never
        recorded). The call's token usage and latency are recorded on the item's first criterion only, so sums
        over verdicts count each call once.

        Raises:
            ConfigError: ``template`` is not a ``criteria`` prompt.
        """
        template = self._use(template)
        if template.answer != "criteria" or not template.criteria:
            raise ConfigError(
                f"judge prompt {template.source}: answer.kind is {template.answer!r}, not 'criteria'"
            )
        verdicts: list[list[Verdict]] = [[] for _ in items]

        def build(indexed: tuple[int, JudgeItem]) -> list[tuple[int, list[Verdict] | CallRequest]]:
            # runs in a preparation thread while earlier items' calls are in flight
            i, item = indexed
            names = template.applicable_criteria(len(item.inputs))
            base = {**self._base(item, template, "single"), "model": item.model}
            output = self._output_part(item)
            if isinstance(output, str):
                return [
                    (i, [Verdict(**base, criterion=c, status="missing_output", error=output) for c in names])
                ]
            try:
                messages = self._messages(template, item, [output])
            except ImageError as exc:
                error = f"input image: {exc}"
                return [(i, [Verdict(**base, criterion=c, status="error", error=error) for c in names])]
            request = self._request(template, messages, f"judge-{template.name}")
            return [(i, request)]

        slots: list[int] = []
        results: list[CallResult] = []
        for i, value in await prepare_and_call(self.caller, list(enumerate(items)), build, progress=progress):
            if isinstance(value, list):
                verdicts[i] = value
            else:
                slots.append(i)
                results.append(value)

        def parse(text: str, finish_reason: str | None, names: tuple[str, ...]) -> Any:
            return parse_criteria(text, finish_reason, criteria=names, low=template.low, high=template.high)

        by_slot = {i: template.applicable_criteria(len(items[i].inputs)) for i in slots}
        parsers = [functools.partial(parse, names=by_slot[i]) for i in slots]
        finished = await self._parse_each_with_reask(results, parsers, template.reask, progress)
        for i, (result, parsed) in zip(slots, finished, strict=True):
            base = {**self._base(items[i], template, "single"), "model": items[i].model}
            usage = self._usage(result)
            for k, name in enumerate(by_slot[i]):
                full = {**base, "criterion": name, **(usage if k == 0 else {})}
                if k and "judge_snapshot" in usage:
                    full["judge_snapshot"] = usage["judge_snapshot"]
                if result.reply is None:
                    verdicts[i].append(Verdict(**full, status="error", error=result.error))
                elif parsed.status == "ok":
                    verdicts[i].append(
                        Verdict(**full, rating=float(parsed.ratings[name]), raw_text=result.reply.text)
                    )
                else:
                    verdicts[i].append(
                        Verdict(**full, status=parsed.status, raw_text=result.reply.text, error=parsed.reason)
                    )
        return [v for group in verdicts for v in group]

    def criteria(
        self, items: Sequence[JudgeItem], *, progress: str | None = None, template: JudgePrompt = CRITERIA
    ) -> list[Verdict]:
        """Synchronous :meth:`acriteria`."""
        return run_sync(self.acriteria(items, progress=progress, template=template))

    async def _parse_each_with_reask(
        self, results: Sequence[CallResult], parsers: Sequence[Any], reask_text: str, progress: str | None
    ) -> list[tuple[CallResult, Any]]:
        """:meth:`_parse_with_reask` with one parser per result (each item asks its own criteria)."""
        parsed = [
            p(r.reply.text, r.reply.finish_reason) if r.reply else None
            for r, p in zip(results, parsers, strict=True)
        ]
        retry_slots = [i for i, p in enumerate(parsed) if p is not None and p.status == "parse_failure"]
        retries = await self.caller.acall_many(
            [_reask(results[i], reask_text) for i in retry_slots], progress=progress
        )
        out = list(zip(results, parsed, strict=True))
        for i, retry in zip(retry_slots, retries, strict=True):
            if retry.reply is not None:
                out[i] = (retry, parsers[i](retry.reply.text, retry.reply.finish_reason))
        return out

    # -- pairwise grading -----------------------------------------------------------------------------------------------
    async def apairwise(
        self, pairs: Sequence[tuple[JudgeItem, JudgeItem]], *, progress: str | None = None
    ) -> list[Verdict]:
        """Judge each pair in both orders (AB then BA). Two verdicts per pair, ``winner`` in model_a/model_b terms.

        A pair with a missing output gets ``missing_output`` verdicts (no call); the statistics decide who loses.
        The judge's ``preference`` prompt replaces the built-in one when given. A tie's lean (``[[C:A]]``, asked by
        :data:`~echo_builder.judge.prompts.PAIRWISE_LEAN`) is stored in ``tie_lean``, mapped to models like
        ``winner``.
        """
        template = self._use(PAIRWISE)
        for a, b in pairs:
            if a.sample_id != b.sample_id:
                raise ConfigError(f"pair mixes samples {a.sample_id!r} and {b.sample_id!r}")

        def build(pair: tuple[JudgeItem, JudgeItem]) -> list[tuple[dict[str, Any], Verdict | CallRequest]]:
            # runs in a preparation thread while earlier pairs' calls are in flight
            a, b = pair
            entries: list[tuple[dict[str, Any], Verdict | CallRequest]] = []
            outs = {a.model: self._output_part(a), b.model: self._output_part(b)}
            for order, (first, second) in (("AB", (a, b)), ("BA", (b, a))):
                base = {
                    **self._base(a, template, "pairwise"),
                    "model_a": a.model,
                    "model_b": b.model,
                    "order": order,
                }
                missing = {m: o for m, o in outs.items() if isinstance(o, str)}
                if missing:
                    # first line: the missing models as JSON (read back by the leaderboard); then the reasons
                    reasons = "; ".join(f"{m}: {o}" for m, o in sorted(missing.items()))
                    error = f"{MISSING_PREFIX}{json.dumps(sorted(missing))}\n{reasons}"
                    entries.append((base, Verdict(**base, status="missing_output", error=error)))
                    continue
                try:
                    messages = self._messages(template, a, [outs[first.model], outs[second.model]])
                except ImageError as exc:
                    entries.append((base, Verdict(**base, status="error", error=f"input image: {exc}")))
                    continue
                request = self._request(template, messages, "judge-pairwise")
                entries.append((base, request))
            return entries

        verdicts: list[Verdict | None] = []
        results: list[CallResult] = []
        meta: list[tuple[int, dict[str, Any]]] = []
        for base, value in await prepare_and_call(self.caller, list(pairs), build, progress=progress):
            if isinstance(value, Verdict):
                verdicts.append(value)
            else:
                meta.append((len(verdicts), base))
                results.append(value)
                verdicts.append(None)
        preference = functools.partial(parse_preference, pattern=_pattern(template), pick=template.pick)
        finished = await self._parse_with_reask(results, preference, template.reask, progress)
        for (slot, base), (result, parsed) in zip(meta, finished, strict=True):
            full = {**base, **self._usage(result)}
            if result.reply is None:
                verdicts[slot] = Verdict(**full, status="error", error=result.error)
            elif parsed.status != "ok":
                verdicts[slot] = Verdict(
                    **full, status=parsed.status, raw_text=result.reply.text, error=parsed.reason
                )
            else:
                # The judge names positions; map them back to models so the AB/BA verdicts are comparable.
                winner, lean = parsed.winner, parsed.lean
                if base["order"] == "BA":
                    winner = {"A": "B", "B": "A"}.get(winner, winner)
                    lean = {"A": "B", "B": "A"}.get(lean, lean) if lean else None
                verdicts[slot] = Verdict(**full, winner=winner, tie_lean=lean, raw_text=result.reply.text)
        return [v for v in verdicts if v is not None]

    def pairwise(
        self, pairs: Sequence[tuple[JudgeItem, JudgeItem]], *, progress: str | None = None
    ) -> list[Verdict]:
        """Synchronous :meth:`apairwise`."""
        return run_sync(self.apairwise(pairs, progress=progress))

    # -- probability scoring ------------------------------------------------------------------------------------------
    async def aprobability(
        self, items: Sequence[JudgeItem], *, scale: Literal["digits", "trig"] = "digits"
    ) -> list[Verdict]:
        """Score from next-token probabilities (Q-Align / TRIGScore style).

        ``digits``: rating = expected value of 1..9 under the normalised digit probabilities; ``trig``: TRIGScore
        in [0, 1] (:func:`trig_score`). ``confidence`` is the largest normalised probability. A backend without
        log-probabilities gives ``error`` verdicts that say so.
        """
        if getattr(self.caller, "batch", None) is not None:
            return await self._aprobability_batched(items, scale=scale)
        return await self._aprobability_overlapped(items, scale=scale)

    def _probability_setup(self, scale: str) -> tuple[Any, list[str], Any]:
        """The template, the candidate tokens and the one-token call parameters of probability scoring."""
        template = self._use(PROBABILITY_DIGITS if scale == "digits" else PROBABILITY_TRIG)
        candidates = [str(d) for d in range(1, 10)] if scale == "digits" else list(_TRIG_VALUES)
        return template, candidates, self._params(template).model_copy(update={"max_tokens": 1})

    def _probability_base(self, item: JudgeItem, template: Any, scale: str) -> dict[str, Any]:
        return {
            **self._base(item, template, "probability"),
            "model": item.model,
            "criterion": f"overall-{scale}",
        }

    @staticmethod
    def _probability_verdict(base: dict[str, Any], scores: Any, scale: str) -> Verdict:
        """The verdict of one answered call: expected digit (``digits``) or TRIGScore (``trig``)."""
        probs = scores.probabilities
        if scale == "digits":
            rating = sum(int(k) * p for k, p in probs.items())
            confidence = max(probs.values())
        else:
            rating, confidence = trig_score(probs)
        return Verdict(
            **base, rating=rating, confidence=min(1.0, confidence), judge_snapshot=scores.model_snapshot
        )

    async def _aprobability_overlapped(
        self, items: Sequence[JudgeItem], *, scale: Literal["digits", "trig"] = "digits"
    ) -> list[Verdict]:
        """Online probability scoring: image preparation overlaps the calls in a bounded pool."""
        template, candidates, params = self._probability_setup(scale)

        async def one(item: JudgeItem) -> Verdict:
            base = self._probability_base(item, template, scale)
            # image preparation runs in the bounded pool, overlapping the calls of other items
            output = await loop.run_in_executor(pool, self._output_part, item)
            if isinstance(output, str):
                return Verdict(**base, status="missing_output", error=output)
            try:
                messages = await loop.run_in_executor(pool, self._messages, template, item, [output])
                request = CallRequest(messages, params, stage="judge-prob", prompt_version=template.version)
                scores = await self.caller.acandidate_probabilities(request, candidates)
            except (BackendError, ImageError) as exc:
                return Verdict(**base, status="error", error=str(exc))
            return self._probability_verdict(base, scores, scale)

        loop = asyncio.get_running_loop()
        with ThreadPoolExecutor(max_workers=DEFAULT_PREP_WORKERS, thread_name_prefix="judge-prep") as pool:
            return await gather_all(one(item) for item in items)  # a failed cache write drops no other reply

    async def _aprobability_batched(
        self, items: Sequence[JudgeItem], *, scale: Literal["digits", "trig"] = "digits"
    ) -> list[Verdict]:
        """Batch API probability scoring: every request prepared first, one batch answers them all, then each
        verdict reads its answer from the cache."""
        from echo_builder.backends.batch import prefetch_candidates

        template, candidates, params = self._probability_setup(scale)
        prepared: list[tuple[dict[str, Any], CallRequest | Verdict]] = []
        for item in items:
            base = self._probability_base(item, template, scale)
            output = self._output_part(item)
            if isinstance(output, str):
                prepared.append((base, Verdict(**base, status="missing_output", error=output)))
                continue
            try:
                messages = self._messages(template, item, [output])
            except ImageError as exc:
                prepared.append((base, Verdict(**base, status="error", error=str(exc))))
                continue
            prepared.append(
                (base, CallRequest(messages, params, stage="judge-prob", prompt_version=template.version))
            )
        # one Batch API job answers every call: the per-call path below then hits the cache
        slots = [i for i, (_, r) in enumerate(prepared) if isinstance(r, CallRequest)]
        requests = [r for _, r in prepared if isinstance(r, CallRequest)]
        errors = await prefetch_candidates(self.caller, requests, candidates)
        failed = {i: e for i, e in zip(slots, errors, strict=True) if e is not None}

        async def one(i: int, base: dict[str, Any], request: CallRequest | Verdict) -> Verdict:
            if isinstance(request, Verdict):
                return request
            if i in failed:
                return Verdict(**base, status="error", error=failed[i])
            try:
                scores = await self.caller.acandidate_probabilities(request, candidates)
            except BackendError as exc:
                return Verdict(**base, status="error", error=str(exc))
            return self._probability_verdict(base, scores, scale)

        # a failed cache write drops no other reply
        return await gather_all(one(i, base, request) for i, (base, request) in enumerate(prepared))

    def probability(
        self, items: Sequence[JudgeItem], *, scale: Literal["digits", "trig"] = "digits"
    ) -> list[Verdict]:
        """Synchronous :meth:`aprobability`."""
        return run_sync(self.aprobability(items, scale=scale))


def _pattern(template: JudgePrompt) -> str | None:
    """``None`` for the default ``[[...]]`` form (the linear-time built-in regex), else the file's pattern."""
    from echo_builder.judge.prompts import DEFAULT_PATTERN

    return None if template.pattern == DEFAULT_PATTERN else template.pattern


def _reask(result: CallResult, text: str) -> CallRequest:
    request = result.request
    assert result.reply is not None
    return CallRequest(
        (
            *request.messages,
            Message("assistant", (TextPart(result.reply.text),)),
            Message("user", (TextPart(text),)),
        ),
        request.params,
        stage=request.stage,
        prompt_version=request.prompt_version,
    )
