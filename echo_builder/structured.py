"""Parse a model's JSON answer, repairing the common defects, and validate it against a schema.

Models wrap JSON in code fences, put prose around it, leave trailing commas or single quotes. We first try the
text as-is, then the content of a fenced block, then hand the text to ``json_repair`` (a maintained parser for
broken JSON). The result is validated with a pydantic model; a failure raises
:class:`~echo_builder.errors.StructuredOutputError` carrying the raw text so nothing is lost.
"""

from __future__ import annotations

import json
import re
from typing import Any, TypeVar

from pydantic import BaseModel, RootModel, ValidationError

from echo_builder.errors import StructuredOutputError

__all__ = ["extract_json", "parse_structured", "reask_message"]

M = TypeVar("M", bound=BaseModel)

_FENCE = re.compile(r"```(?:json|JSON)?\s*\n?(.*?)```", re.DOTALL)


def extract_json(text: str) -> Any:
    """Best-effort JSON value from a model reply.

    Returns the parsed object, array or scalar. Raises :class:`StructuredOutputError` when the reply holds no JSON
    object or array at all (plain prose is not silently turned into an empty value).
    """
    stripped = text.strip()
    if not stripped:
        raise StructuredOutputError("the reply is empty", text)
    try:
        return json.loads(stripped)
    except json.JSONDecodeError:
        pass
    fenced = _FENCE.search(stripped)
    if fenced:
        try:
            return json.loads(fenced.group(1))
        except json.JSONDecodeError:
            stripped = fenced.group(1).strip()
    start = min((i for i in (stripped.find("{"), stripped.find("[")) if i >= 0), default=-1)
    if start < 0:
        raise StructuredOutputError("the reply contains no JSON object or array", text)
    import json_repair

    try:
        value = json_repair.loads(stripped[start:])
    except Exception as exc:  # json_repair raises assorted errors on hopeless input
        raise StructuredOutputError(f"JSON could not be repaired: {exc}", text) from None
    if value in ("", None, [], {}) and stripped[start:].strip() not in ("[]", "{}"):
        raise StructuredOutputError("the JSON in the reply is unreadable", text)
    return value


def parse_structured(text: str, schema: type[M]) -> M:
    """Parse ``text`` into an instance of ``schema`` (a pydantic model).

    Raises :class:`StructuredOutputError` (with the raw text) when no JSON is found or validation fails. A JSON
    object that names none of the schema's fields is invalid too, even when every field has a default: a reply
    such as ``{"result": "ok"}`` answers a different question, and accepting it would silently turn it into an
    all-defaults answer (no images assigned, no flags) instead of a re-ask or a counted failure.
    """
    value = extract_json(text)
    try:
        parsed = schema.model_validate(value)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in err['loc']) or '<root>'}: {err['msg']}" for err in exc.errors()[:5]
        )
        raise StructuredOutputError(f"schema {schema.__name__} not satisfied: {problems}", text) from None
    if isinstance(value, dict) and not isinstance(parsed, RootModel):
        expected = {
            name
            for field_name, info in schema.model_fields.items()
            for name in (field_name, info.alias)
            if name
        }
        if expected and not expected & set(value):
            found = ", ".join(sorted(map(str, value))[:5]) or "an empty object"
            raise StructuredOutputError(
                f"schema {schema.__name__} not satisfied: the reply has none of its fields "
                f"({', '.join(sorted(expected))}); found {found}",
                text,
            )
    return parsed


def reask_message(reason: str, schema: type[BaseModel]) -> str:
    """The follow-up user turn sent once after an invalid structured reply."""
    return (
        f"Your previous reply could not be used: {reason}. Reply again with only one JSON object, no prose and no "
        f"code fences, matching this JSON schema:\n{json.dumps(schema.model_json_schema(), sort_keys=True)}"
    )
