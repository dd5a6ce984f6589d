"""How the SDK adapters read what an official SDK yields, into the wire path's own parsers.

The SDKs hand over pydantic models they built from each event's JSON. An adapter
(`SDKAdapter`, `labkit.providers.base`; the SDK path, `labkit.measurement.sdkpath`, asks it
only what is the provider's own) feeds them to the same parser state the wire path fills,
through the parser's own core (the method the wire path calls after `json.loads`), with
`model_view` of each object, read off the model's attributes without serialising anything.
One parser, so both paths count and classify alike. The SDK packages are imported inside the
adapters' methods, so importing a provider never imports its SDK.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol, runtime_checkable

from pydantic import BaseModel

from labkit.errors import MalformedStream

__all__ = ["ChunkReader", "NamedEventReader", "model_view", "read_by_type"]

#: The types of JSON's scalars: a value of one of these is taken as it is.
_SCALARS = frozenset({str, int, float, bool, type(None)})
#: The SDK model classes met so far, so that a nested model is known by a set lookup.
_MODEL_TYPES: set[type] = set()


@runtime_checkable
class ChunkReader(Protocol):
    """A parser whose core reads one unnamed event's JSON object (Chat Completions chunks)."""

    def on_chunk(self, obj: dict[str, Any]) -> int:
        """Classify one chunk's object; its `EventClass`."""
        ...


@runtime_checkable
class NamedEventReader(Protocol):
    """A parser whose core reads one named event's JSON object (Messages, Responses)."""

    def on_object(self, name: str, obj: dict[str, Any]) -> int:
        """Classify one event's object by its name; its `EventClass`."""
        ...


def model_view(model: Any) -> dict[str, Any]:
    """The JSON object an SDK model was built from, as the wire parsers read it.

    The fields that arrived (`model_fields_set`, by field name, as `model_dump` names them),
    the keys the SDK's types do not declare (`model_extra`: reasoning fields, Groq's
    `x_groq`, llama.cpp's `timings`, as received) and nested models as views of their own,
    in plain dicts and lists. Values are the SDK's, by reference: nothing is copied or
    serialised, and what the SDK coerced while building the model (lax mode) stays coerced.

    An event whose JSON is no object (a string, a number, an array) reaches user code as it
    is, not as a model: `MalformedStream`, worded as the wire parsers word it.
    """
    try:
        values = model.__dict__
        names = model.__pydantic_fields_set__
    except AttributeError:
        raise MalformedStream(
            f"event data is a JSON {type(model).__name__}, not an object"
        ) from None
    extra = model.__pydantic_extra__
    if extra:
        names = names - extra.keys()  # a validated model counts its extra keys as set
    view = {}
    for name in names:
        value = values[name]
        kind = type(value)
        if kind in _SCALARS:
            view[name] = value
        elif kind in _MODEL_TYPES:
            view[name] = model_view(value)
        elif kind is list:  # `choices`: a list of models, on every chunk
            view[name] = [model_view(v) if type(v) in _MODEL_TYPES else _plain(v) for v in value]
        else:
            view[name] = _plain(value)
    if extra:
        view.update(extra)  # as received: the SDKs' extra keys are untyped
    return view


def _plain(value: Any) -> Any:
    """A value with the models inside it as views (lists and dicts walked)."""
    kind = type(value)
    if kind in _SCALARS:
        return value
    if kind is list:
        return [v if type(v) in _SCALARS else _plain(v) for v in value]
    if isinstance(value, BaseModel):
        _MODEL_TYPES.add(kind)
        return model_view(value)
    if kind is dict:
        return {k: v if type(v) in _SCALARS else _plain(v) for k, v in value.items()}
    return value


def read_by_type(on_object: Callable[[str, dict[str, Any]], int]) -> Callable[[Any], int]:
    """A `SDKAdapter.reader` step for SDKs whose events carry the SSE event name as their
    `type` (Anthropic Messages, OpenAI Responses): each event's view into `on_object`."""

    def read(event: Any) -> int:
        view = model_view(event)
        return on_object(str(view.get("type")), view)

    return read
