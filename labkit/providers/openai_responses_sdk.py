"""The `openai` SDK's Responses stream (`client.responses.create(stream=True)`)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from labkit.providers.openai_sdk import OpenAISDK
from labkit.providers.sdk import read_by_type

if TYPE_CHECKING:
    from labkit.providers.base import ChatRequest, Provider, StreamParser

__all__ = ["OpenAIResponsesSDK"]


class OpenAIResponsesSDK(OpenAISDK):
    """`AsyncOpenAI.responses.create(stream=True)` on the same client as Chat Completions;
    each event is named by its `type`."""

    async def open_stream(
        self, client: Any, provider: Provider, request: ChatRequest, params: dict[str, Any]
    ) -> Any:
        """The same body as the wire path: system messages as `instructions`, the rest as
        `input`, parameters and extras as body fields."""
        from labkit.providers.openai_responses import split_instructions

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
        from labkit.providers.openai_responses import OpenAIResponsesParser

        if not isinstance(parser, OpenAIResponsesParser):
            raise TypeError(f"Responses events need an OpenAIResponsesParser, not {parser!r}")
        return read_by_type(parser.on_object)
