"""Shared pieces of the response models: the base model, times, money, error bodies."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, WithJsonSchema


class Out(BaseModel):
    """Base of every response model: unknown keys are an error, not silently dropped."""

    model_config = ConfigDict(extra="forbid")


# ISO 8601 UTC, e.g. "2026-01-11T00:00:00Z" (render.iso); fields take `IsoTime | None`, as
# render.iso gives None for an unknown time.
IsoTime = Annotated[str, WithJsonSchema({"type": "string", "format": "date-time"})]
# Money is a Decimal rendered as a string, never a float.
Money = Annotated[
    str,
    WithJsonSchema(
        {
            "type": "string",
            "description": "US dollars, a decimal number as a string",
            "examples": ["9.83"],
        }
    ),
]


class Message(Out):
    """An error answer: what went wrong, safe to show."""

    detail: str


# FastAPI answers 400 "There was an error parsing the body" for a body it cannot read as JSON
# (bytes that are not UTF-8, say), on every route that takes one.
UNREADABLE_BODY: dict[int | str, dict[str, Any]] = {
    400: {"model": Message, "description": "The body could not be read as JSON"}
}

__all__ = ["UNREADABLE_BODY", "IsoTime", "Message", "Money", "Out"]
