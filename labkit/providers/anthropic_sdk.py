"""The `anthropic` SDK's Messages stream."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Literal

from labkit.providers.base import ChatRequest, Provider, SDKAdapter, StreamParser
from labkit.providers.sdk import NamedEventReader, read_by_type

__all__ = ["AnthropicSDK"]


class AnthropicSDK(SDKAdapter):
    """`AsyncAnthropic.messages.create(stream=True)`; events are named by their `type`."""

    package = "anthropic"
    dry_run_stream = (
        b"event: message_start\n"
        b'data: {"type":"message_start","message":{"id":"set-up","type":"message",'
        b'"role":"assistant","model":"set-up","content":[],"stop_reason":null,'
        b'"usage":{"input_tokens":1,"output_tokens":1}}}\n\n'
        b"event: content_block_start\n"
        b'data: {"type":"content_block_start","index":0,'
        b'"content_block":{"type":"text","text":""}}\n\n'
        b"event: content_block_delta\n"
        b'data: {"type":"content_block_delta","index":0,'
        b'"delta":{"type":"text_delta","text":"ok"}}\n\n'
        b"event: content_block_stop\n"
        b'data: {"type":"content_block_stop","index":0}\n\n'
        b"event: message_delta\n"
        b'data: {"type":"message_delta","delta":{"stop_reason":"end_turn"},'
        b'"usage":{"output_tokens":1}}\n\n'
        b"event: message_stop\n"
        b'data: {"type":"message_stop"}\n\n'
    )

    def client(self, provider: Provider, *, api_key: str | None, http_client: Any) -> Any:
        """An `AsyncAnthropic` at the API root (the SDK adds `/v1` itself)."""
        import anthropic

        return anthropic.AsyncAnthropic(
            api_key=api_key or "none",
            base_url=provider.api_root(),
            max_retries=0,
            http_client=http_client,
        )

    async def open_stream(
        self, client: Any, provider: Provider, request: ChatRequest, params: dict[str, Any]
    ) -> Any:
        """System messages go to `system`; `max_tokens` is required (wire_params sets it)."""
        system = "\n\n".join(m["content"] for m in request.messages if m["role"] == "system")
        messages = [m for m in request.messages if m["role"] != "system"]
        body = dict(params)
        max_tokens = body.pop("max_tokens")
        kwargs: dict[str, Any] = {}
        if system:
            kwargs["system"] = system
        if provider.closes_connection(request):
            kwargs["extra_headers"] = {"connection": "close"}
        # anthropic 2.x takes sampling parameters only as body fields.
        return await client.messages.create(
            model=provider.model,
            messages=messages,
            max_tokens=max_tokens,
            stream=True,
            extra_body={**provider.settings.extra_body, **body} or None,
            **kwargs,
        )

    def reader(self, parser: StreamParser) -> Callable[[Any], int]:
        """Each event into the Messages parser's `on_object`, named by its `type` (the SSE
        event name the wire carries; the SDK drops `ping` itself)."""
        if not isinstance(parser, NamedEventReader):
            raise TypeError(f"Messages events need a parser of named events, not {parser!r}")
        return read_by_type(parser.on_object)

    def consumed_by_sdk(self, event: str | None, data: str) -> Literal["end", "error"] | None:
        """An `error` event, on which the SDK raises its status error (anthropic
        `_streaming.AsyncStream`); the end, `message_stop`, it yields."""
        return "error" if event == "error" else None
