"""The `openai` SDK's Chat Completions stream, for OpenAI and every server that speaks it."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any, Literal

from labkit.providers.base import ChatRequest, Provider, SDKAdapter, StreamParser
from labkit.providers.sdk import ChunkReader, model_view

__all__ = ["OpenAISDK"]


class OpenAISDK(SDKAdapter):
    """`AsyncOpenAI.chat.completions.create(stream=True)`, asking for usage like the wire."""

    package = "openai"
    dry_run_stream = (
        b'data: {"id":"set-up","object":"chat.completion.chunk","created":0,"model":"set-up",'
        b'"choices":[{"index":0,"delta":{"role":"assistant","content":"ok"},'
        b'"finish_reason":"stop"}],"usage":{"prompt_tokens":1,"completion_tokens":1,'
        b'"total_tokens":2}}\n\ndata: [DONE]\n\n'
    )

    def client(self, provider: Provider, *, api_key: str | None, http_client: Any) -> Any:
        """An `AsyncOpenAI` at the provider's `/v1` root."""
        import openai

        return openai.AsyncOpenAI(
            api_key=api_key or "none",
            base_url=provider.api_root(),
            max_retries=0,
            http_client=http_client,
        )

    async def open_stream(
        self, client: Any, provider: Provider, request: ChatRequest, params: dict[str, Any]
    ) -> Any:
        """The same body as the wire path: sampling parameters and extras as body fields."""
        close = provider.closes_connection(request)
        return await client.chat.completions.create(
            model=provider.model,
            messages=request.messages,
            stream=True,
            stream_options={"include_usage": True},
            extra_body={**provider.settings.extra_body, **params} or None,
            extra_headers={"connection": "close"} if close else None,
        )

    def reader(self, parser: StreamParser) -> Callable[[Any], int]:
        """Each `ChatCompletionChunk` into the Chat Completions parser's `on_chunk` (the SDK
        swallows `[DONE]` and raises on an error chunk before yielding it)."""
        if not isinstance(parser, ChunkReader):
            raise TypeError(f"the openai SDK's chunks need a parser of chunks, not {parser!r}")
        on_chunk = parser.on_chunk

        def read(chunk: Any) -> int:
            return on_chunk(model_view(chunk))

        return read

    def consumed_by_sdk(self, event: str | None, data: str) -> Literal["end", "error"] | None:
        """`[DONE]`, which the SDK swallows, and an event whose data is an object with an
        `error`, on which it raises `APIError` (openai `_streaming.AsyncStream`, legacy mode)."""
        if data.startswith("[DONE]"):
            return "end"
        if '"error"' in data:  # only then can the object have an `error` key
            try:
                obj = json.loads(data)
            except ValueError:
                return None  # the SDK's own json.loads raises: left to it
            if isinstance(obj, dict) and obj.get("error"):
                return "error"
        return None
