"""Structured-output parsing: repair of the common defects, schema validation, raw text kept on failure."""

from __future__ import annotations

import pytest
from pydantic import BaseModel

from echo_builder.errors import StructuredOutputError
from echo_builder.structured import extract_json, parse_structured


class Rating(BaseModel):
    score: int
    note: str | None = None


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('{"score": 4}', {"score": 4}),
        ('```json\n{"score": 4, "note": "ok"}\n```', {"score": 4, "note": "ok"}),
        ('```\n{"score": 4}\n```', {"score": 4}),
        ('Here you go:\n{"score": 4, "note": "fine",}\nHope that helps!', {"score": 4, "note": "fine"}),
        ('{"score": 4, "tags": ["a", "b",],}', {"score": 4, "tags": ["a", "b"]}),
        ("{'score': 4}", {"score": 4}),
        ('[{"score": 1}, {"score": 2}]', [{"score": 1}, {"score": 2}]),
        ('{"score": 5, "note": "has a } brace"}', {"score": 5, "note": "has a } brace"}),
    ],
)
def test_repairs(text, expected):
    assert extract_json(text) == expected


@pytest.mark.parametrize("text", ["", "   ", "I cannot help with that.", "score: four"])
def test_no_json_is_an_error_with_the_raw_text(text):
    with pytest.raises(StructuredOutputError) as info:
        extract_json(text)
    assert info.value.raw_text == text


def test_schema_validation():
    assert parse_structured('```json\n{"score": "3"}\n```', Rating) == Rating(score=3)
    with pytest.raises(StructuredOutputError, match="score: Field required") as info:
        parse_structured('{"rating": 3}', Rating)
    assert info.value.raw_text == '{"rating": 3}'
    with pytest.raises(StructuredOutputError, match="valid integer"):
        parse_structured('{"score": "high"}', Rating)
