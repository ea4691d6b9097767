"""Judge prompts as files: built-in files reproduce the old requests byte for byte, user files are checked field by
field, interleaved layouts, first/last parse rules, image settings, and the prompt's identity in runs."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
from click.testing import CliRunner
from PIL import Image

from echo_builder.cli import cli
from echo_builder.errors import ConfigError
from echo_builder.judge.prompts import (
    PAIRWISE,
    PROBABILITY_DIGITS,
    PROBABILITY_TRIG,
    SINGLE,
    TEXT_RENDERING,
    builtin_prompt,
    load_judge_prompt,
    render_parts,
)
from tests.golden.make_protocol_bodies import GOLDEN, capture
from tests.helpers.benchmark import make_benchmark, make_outputs

# SHA-256 of each built-in prompt's parsed content. Editing a built-in file changes its hash: bump its version in
# the file (so caches miss cleanly) and update the hash here.
BUILTIN_HASHES = {
    "single": ("echo-single-v1", "20e3ee245f9a01b9021ccb895cb41723c2d556f7ac3effc729250d261ac14141"),
    "pairwise": ("echo-pairwise-v1", "ea3e3f28011268b22a620a5adbee283be6ba6eaf7dd2636607f953daef0ac308"),
    "probability-digits": (
        "echo-prob-digits-v1",
        "86656e567c6b9e563b64db7b413d463366156d792bc589a5239ab637425bdf82",
    ),
    "probability-trig": (
        "echo-prob-trig-v1",
        "7991c81fda960bd336b94af5d3ee0fdb22fc1cf309c0c321061db84909a8e9b5",
    ),
    "text-rendering": ("echo-text-v1", "fbc4e2ad498a3752ea3bc6348e43d7bf6d4fd4dd0a0e2768554768f7a8e447a8"),
}


def test_builtin_prompts_are_files_with_pinned_versions():
    """A built-in prompt is a shipped YAML file; its content hash is pinned to its version (edit -> bump)."""
    import echo_builder.judge

    folder = Path(echo_builder.judge.__file__).parent / "prompt_files"
    assert {p.stem for p in folder.glob("*.yaml")} == set(BUILTIN_HASHES)
    for name, (version, digest) in BUILTIN_HASHES.items():
        prompt = builtin_prompt(name)
        assert (prompt.version, prompt.sha256, prompt.source) == (version, digest, "built-in"), name
    assert (SINGLE.answer, PAIRWISE.answer, PROBABILITY_DIGITS.answer, PROBABILITY_TRIG.answer) == (
        "rating",
        "preference",
        "digits",
        "trig",
    )
    assert TEXT_RENDERING.answer == "rating" and SINGLE.pick == "last" and SINGLE.layout == "before_text"
    assert (SINGLE.short_side, SINGLE.resample, SINGLE.jpeg_quality, SINGLE.temperature) == (
        512,
        "lanczos",
        85,
        0.0,
    )


def test_builtin_prompt_files_send_byte_identical_requests():
    """Regression (prompts moved to YAML files): every protocol's request bodies equal those of the code before."""
    golden = json.loads(GOLDEN.read_text())
    captured = capture()
    assert set(captured) == set(golden)
    for name, bodies in captured.items():
        digests = [hashlib.sha256(b.encode()).hexdigest() for b in bodies]
        assert digests == [g["sha256"] for g in golden[name]], name
