"""text_rendering: the VLM judge of rendered text through the loopback server."""

from __future__ import annotations

import math

import pytest
from PIL import Image

from echo_builder.errors import ConfigError
from echo_builder.scoring import METRIC_SPECS
from echo_builder.scoring.text import normalise_rating, text_rendering


def test_scripted_ratings_are_parsed_normalised_and_failures_recorded(openai_server, tmp_path):
    def reply(body):
        text = body["messages"][1]["content"][-1]["text"]
        assert "Read out every piece of text" in text  # the text-rendering protocol, not the overall one
        if "OPEN" in text:
            return 'The sign reads "OPEM": one wrong letter. Provisional [[9]]; final [[7]]'
        if "SALE" in text:
            return "I'm sorry, I can't help with that."
        return "Perfect text. [[10]]"

    openai_server.reply = reply
    outputs = [Image.new("RGB", (64, 64), c) for c in ((200, 0, 0), (0, 200, 0), (0, 0, 200))] + [None]
    result = text_rendering(
        ["a shop sign that says OPEN", "a poster that says SALE", "a banner with the word HELLO", "a card"],
        outputs,
        ["openai:judge"],
        judge_options={"openai:judge": {"base_url": openai_server.base_url}},
        cache_dir=tmp_path / "cache",
    )
    assert result.values[0] == pytest.approx((7 - 1) / 9) and result.values[2] == 1.0
    assert math.isnan(result.values[1]) and "refusal" in result.nan_reasons[1]
    assert math.isnan(result.values[3]) and "missing_output" in result.nan_reasons[3]
    assert result.extras["ratings"]["openai:judge"][:1] == [7.0]
    assert result.mean() == pytest.approx(((7 - 1) / 9 + 1.0) / 2)
    assert METRIC_SPECS["text_rendering"].higher_is_better


def test_normalisation_and_errors():
    assert (normalise_rating(1), normalise_rating(10), normalise_rating(5.5)) == (0.0, 1.0, 0.5)
    with pytest.raises(ConfigError, match="at least one judge"):
        text_rendering(["p"], [None], [])
    with pytest.raises(ConfigError, match="differ in length"):
        text_rendering(["p", "q"], [None], ["openai:x"])
