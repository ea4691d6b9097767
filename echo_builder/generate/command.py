"""``command:<command line>``: your own program makes the image (models with their own code).

The command line is split like a POSIX shell would (``shlex.split``; no shell runs it). For every sample the
program is started once and receives one JSON object on stdin::

    {"sample_id": "echo-1a2b", "prompt": "make the sky pink", "input_images": ["/tmp/.../input_1.png"],
     "seed": 123456789, "output_path": "/tmp/.../output.png"}

``input_images`` are PNG files (the sample's inputs, in order; empty for text-to-image). The program writes an
image (PNG preferred; any format PIL reads is converted) to ``output_path`` and exits 0. Anything else is a
per-sample failure, never a crash of the run:

- exit status != 0, or exit 0 without a readable image at ``output_path``: ``error`` with the exit status and the
  end of stderr;
- no image within ``timeout_s``: the program is killed, ``error``;
- to report a refusal or a safety block instead of an error, print as the last line of stdout a JSON object
  ``{"status": "refused" | "nsfw" | "error", "message": "..."}`` and write no image (any exit status).

Programs run in the current working directory with the current environment plus ``env``; ``concurrency``
programs run at once. Temporary files are removed after each sample.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import tempfile
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from echo_builder.backends.base import invalid_options
from echo_builder.errors import ConfigError, ImageError
from echo_builder.generate import register_generator
from echo_builder.generate.base import (
    MAX_PNG_ICC_BYTES,
    STATUSES,
    GenerationRequest,
    GenerationResult,
    Generator,
)
from echo_builder.secrets import redact

__all__ = ["CommandConfig", "CommandGenerator"]

_STDERR_TAIL = 800  # characters of stderr kept in a failure message


class CommandConfig(BaseModel):
    """Options of the ``command:`` generator (unknown keys are an error).

    Attributes:
        timeout_s: seconds one sample may take before the program is killed, in (0, 86400].
        concurrency: programs running at once (1-64).
        env: extra environment variables for the program.
    """

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

    timeout_s: float = Field(default=600.0, gt=0, le=86_400.0)
    concurrency: int = Field(default=1, ge=1, le=64)
    env: dict[str, str] = Field(default_factory=dict)


@register_generator(order=30)
class CommandGenerator(Generator):
    """Runs a program per sample (see the module docstring for the protocol and :class:`CommandConfig`)."""

    name = "command"
    description = "your own program: one JSON request on stdin, a PNG written to output_path"
    runtime_options = frozenset({"timeout_s", "concurrency"})

    def __init__(self, target: str, **options: Any) -> None:
        super().__init__(target)
        try:
            self.config = CommandConfig(**options)
        except ValidationError as exc:
            raise invalid_options(self.spec, exc, list(CommandConfig.model_fields)) from None
        try:
            self.argv = shlex.split(target)
        except ValueError as exc:
            raise ConfigError(f"cannot split the command line {target!r}: {exc}") from None
        if not self.argv:
            raise ConfigError("command: needs a command line after ':', e.g. 'command:python my_model.py'")

    @property
    def batch_size(self) -> int:
        return self.config.concurrency

    def parameters(self) -> dict[str, Any]:
        return {**self.config.model_dump(mode="json"), "argv": self.argv}

    def load(self) -> None:
        """Check the program exists. Raises :class:`ConfigError` naming it when it does not."""
        program = self.argv[0]
        found = shutil.which(program)
        if found is None and (os.sep not in program or not Path(program).is_file()):
            raise ConfigError(f"{self.spec}: program {program!r} not found (not on PATH and not a file)")

    def info(self) -> dict[str, Any]:
        return {"program": shutil.which(self.argv[0]) or self.argv[0]}

    def generate_batch(self, requests: Sequence[GenerationRequest]) -> list[GenerationResult]:
        if len(requests) == 1 or self.config.concurrency == 1:
            return [self._one(r) for r in requests]
        with ThreadPoolExecutor(max_workers=min(self.config.concurrency, len(requests))) as pool:
            return list(pool.map(self._one, requests))

    def _one(self, request: GenerationRequest) -> GenerationResult:
        start = time.perf_counter()
        with tempfile.TemporaryDirectory(prefix="echo-bench-command-") as tmp:
            folder = Path(tmp)
            inputs = []
            for i, image in enumerate(request.input_images, 1):
                path = folder / f"input_{i}.png"
                icc = image.info.get("icc_profile")  # a profile a PNG reader would refuse is left out
                keep = icc if isinstance(icc, bytes) and len(icc) < MAX_PNG_ICC_BYTES else None
                image.save(path, format="PNG", icc_profile=keep)
                inputs.append(str(path))
            output = folder / "output.png"
            payload = {
                "sample_id": request.sample_id,
                "prompt": request.prompt,
                "input_images": inputs,
                "seed": request.seed,
                "output_path": str(output),
            }
            try:
                done = subprocess.run(
                    self.argv,
                    input=json.dumps(payload),
                    capture_output=True,
                    text=True,
                    timeout=self.config.timeout_s,
                    env={**os.environ, **self.config.env},
                )
            except subprocess.TimeoutExpired:
                return self._result(
                    "error", f"no image within {self.config.timeout_s:g} s; the program was killed", start
                )
            except OSError as exc:
                return self._result("error", f"cannot start {self.argv[0]!r}: {exc}", start)
            reported = _reported_status(done.stdout)
            details = {"exit_status": done.returncode}
            if done.returncode == 0 and output.is_file():
                try:
                    from echo_builder.generate.base import png_bytes

                    image = png_bytes(output.read_bytes())
                except ImageError as exc:
                    return self._result(
                        "error", f"the program wrote an unreadable image: {exc}", start, details
                    )
                return GenerationResult(
                    "ok", image=image, seconds=time.perf_counter() - start, details=details
                )
            if reported is not None:
                return self._result(reported[0], reported[1], start, details)
            tail = done.stderr.strip()[-_STDERR_TAIL:]
            if done.returncode != 0:
                message = f"the program exited with status {done.returncode}"
            else:
                message = "the program exited 0 but wrote no image to output_path"
            return self._result("error", message + (f"; stderr: {tail}" if tail else ""), start, details)

    @staticmethod
    def _result(
        status: str, message: str, start: float, details: dict[str, Any] | None = None
    ) -> GenerationResult:
        return GenerationResult(
            status,  # type: ignore[arg-type]
            message=redact(message),
            seconds=time.perf_counter() - start,
            details=details or {},
        )


def _reported_status(stdout: str) -> tuple[str, str] | None:
    """``(status, message)`` from a last stdout line like ``{"status": "refused", "message": "..."}``."""
    lines = [line for line in stdout.strip().splitlines() if line.strip()]
    if not lines:
        return None
    try:
        value = json.loads(lines[-1])
    except json.JSONDecodeError:
        return None
    if not isinstance(value, dict) or value.get("status") not in set(STATUSES) - {"ok", "missing_input"}:
        return None
    return str(value["status"]), str(value.get("message") or "reported by the program")
