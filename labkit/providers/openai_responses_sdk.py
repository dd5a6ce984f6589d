"""The `openai` SDK's Responses stream (`client.responses.create(stream=True)`)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from labkit.providers.base import ChatRequest, Provider, StreamParser
from labkit.providers.openai_sdk import OpenAISDK
from labkit.providers.sdk import NamedEventReader, read_by_type

__all__ = ["OpenAIResponsesSDK", "split_instructions"]


def split_instructions(
    messages: list[dict[str, str]],
) -> tuple[str | None, list[dict[str, str]]]:
    """System messages joined as `instructions`, and the other messages as `input` (the
    Responses body on both paths)."""
    system = [m["content"] for m in messages if m.get("role") == "system"]
    rest = [m for m in messages if m.get("role") != "system"]  # tool items have no role
    return ("\n\n".join(system) if system else None), rest


class OpenAIResponsesSDK(OpenAISDK):
    """`AsyncOpenAI.responses.create(stream=True)` on the same client as Chat Completions;
    each event is named by its `type`."""

    dry_run_stream = (
        b"event: response.created\n"
        b'data: {"type":"response.created","sequence_number":0,"response":{"id":"set-up",'
        b'"object":"response","created_at":0,"status":"in_progress","model":"set-up",'
        b'"output":[]}}\n\n'
        b"event: response.output_text.delta\n"
        b'data: {"type":"response.output_text.delta","sequence_number":1,"item_id":"m",'
        b'"output_index":0,"content_index":0,"delta":"ok","logprobs":[]}\n\n'
        b"event: response.completed\n"
        b'data: {"type":"response.completed","sequence_number":2,"response":{"id":"set-up",'
        b'"object":"response","created_at":0,"status":"completed","model":"set-up",'
        b'"output":[],"usage":{"input_tokens":1,"output_tokens":1,"total_tokens":2}}}\n\n'
    )

    async def open_stream(
        self, client: Any, provider: Provider, request: ChatRequest, params: dict[str, Any]
    ) -> Any:
        """The same body as the wire path: system messages as `instructions`, the rest as
        `input`, parameters and extras as body fields."""
        instructions, messages = split_instructions(request.messages)
        kwargs: dict[str, Any] = {}
        if instructions is not None:
            kwargs["instructions"] = instructions
        if provider.closes_connection(request):
            kwargs["extra_headers"] = {"connection": "close"}
        return await client.responses.create(
            model=provider.model,
            input=messages,
            stream=True,
            extra_body={**provider.settings.extra_body, **params} or None,
            **kwargs,
        )

    def reader(self, parser: StreamParser) -> Callable[[Any], int]:
        """Each event into the Responses parser's `on_object`, named by its `type` (the
        SSE event name the wire carries)."""
        if not isinstance(parser, NamedEventReader):
            raise TypeError(f"Responses events need a parser of named events, not {parser!r}")
        return read_by_type(parser.on_object)
