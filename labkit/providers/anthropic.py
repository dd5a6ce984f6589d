"""Anthropic Messages (`POST /messages`, `stream: true`) on labkit's own HTTP.

Wire facts (docs/providers.md): named SSE events; ``message_start`` carries the input and
cache counts, ``content_block_delta`` the output, ``message_delta`` the stop reason and the
*cumulative* output count (it replaces, never adds, and may update the input counts);
``ping`` is a keep-alive; ``error`` can arrive mid-stream; ``message_stop`` ends it. No
provider-side timings are reported.
"""

from __future__ import annotations

from typing import Any, ClassVar

import httpx
from pydantic import Field

from labkit.errors import MalformedStream
from labkit.measurement.connections import TOKENIZE, own_request
from labkit.measurement.sse import SSEEvent
from labkit.providers._wire import (
    describe,
    load_event_object,
    wire_count,
    wire_id,
    wire_object,
    wire_str,
)
from labkit.providers.anthropic_sdk import AnthropicSDK
from labkit.providers.base import (
    ChatRequest,
    EventClass,
    Provider,
    ProviderSettings,
    ResponseHeaders,
    SDKAdapter,
    StreamParser,
    TokenCount,
    register,
)
from labkit.records import ErrorKind, RecordError, StopReason
from labkit.tokenizers import Tokenized

__all__ = ["ANTHROPIC_VERSION", "AnthropicParser", "AnthropicProvider", "AnthropicSettings"]

#: The `anthropic-version` header the installed SDK sends (anthropic 2.14); a test keeps
#: this equal to `anthropic._constants.ANTHROPIC_API_VERSION`.
ANTHROPIC_VERSION = "2026-10-21"

_DEFAULT_MAX_TOKENS = 1024

_STOP_REASONS = {
    "end_turn": StopReason.END,
    "max_tokens": StopReason.LENGTH,
    "model_context_window_exceeded": StopReason.LENGTH,
    "stop_sequence": StopReason.STOP_SEQUENCE,
    "tool_use": StopReason.TOOL_CALL,
    "refusal": StopReason.REFUSAL,
    "pause_turn": StopReason.UNKNOWN,
}

# Body fields the Messages API accepts from the lab's generic params.
_PASSED_PARAMS = ("temperature", "top_p", "top_k", "max_tokens", "stop_sequences", "metadata")


class AnthropicSettings(ProviderSettings):
    """An Anthropic provider entry: the key is required."""

    api_key_env: str | None = Field(
        default="ANTHROPIC_API_KEY", description="Variable holding the key."
    )

    default_base_url: ClassVar[str | None] = "https://api.anthropic.com"
    key_required: ClassVar[bool] = True

    def resolved_base_url(self) -> str:
        """The API root without `/v1` (the SDK's and `ANTHROPIC_BASE_URL`'s convention);
        a `base_url` ending in `/v1` is accepted too, so both paths reach one endpoint."""
        return super().resolved_base_url().removesuffix("/v1")


class AnthropicParser(StreamParser):
    """Parses Messages events into text, usage, stop reason and errors.

    Output events: `text_delta` (TEXT); `thinking_delta`, `input_json_delta`, and a
    `redacted_thinking` block, whose encrypted reasoning arrives whole in its
    `content_block_start` (OUTPUT). `signature_delta`, `citations_delta` and block starts
    and stops carry no tokens (META).
    """

    def __init__(self) -> None:
        super().__init__()
        self._uncached_input = 0
        self._cache_read = 0
        self._cache_write = 0
        self._thinking_blocks = 0
        self._thinking_streamed = False
        self._thinking_redacted = False

    def on_headers(self, headers: ResponseHeaders) -> None:
        """`request-id` and the `anthropic-ratelimit-*` headers."""
        self.request_id = headers.get("request-id")
        self.read_rate_limits(headers, "anthropic-ratelimit-")

    def on_event(self, event: SSEEvent) -> int:
        """Classify one named event and collect what it carries."""
        name = event.event
        if name == "ping":
            return EventClass.IGNORE
        obj = load_event_object(event.data)
        if name is None:
            name = obj.get("type")
        return self.on_object(name, obj)

    def on_object(self, name: str | None, obj: dict[str, Any]) -> int:
        """Classify one event's JSON object by its name (`ping` never gets here); the SDK
        path calls this with the view of the SDK's event object and its `type`."""
        if name == "content_block_delta":
            delta = obj.get("delta")
            if type(delta) is not dict:
                raise MalformedStream(f"content_block_delta.delta is {describe(delta)}")
            dtype = delta.get("type")
            if dtype == "text_delta":
                text = delta.get("text")
                if type(text) is not str:
                    raise MalformedStream(f"text_delta.text is {describe(text)}, not a string")
                self.text_parts.append(text)
                return EventClass.TEXT
            if dtype == "thinking_delta":
                self._thinking_streamed = True
                return EventClass.OUTPUT
            if dtype == "input_json_delta":
                return EventClass.OUTPUT
            return EventClass.META  # signature_delta, citations_delta, future kinds
        if name == "content_block_start":
            return self._block_start(obj)
        if name == "message_start":
            message = wire_object(obj.get("message"), "message_start.message") or {}
            self.response_id = wire_id(message.get("id"), "message.id")
            self._read_usage(message.get("usage"), "message.usage")
        elif name == "message_delta":
            delta = wire_object(obj.get("delta"), "message_delta.delta") or {}
            stop = wire_str(delta.get("stop_reason"), "message_delta.delta.stop_reason")
            if stop is not None:
                self.stop_reason_raw = stop
            self._read_usage(obj.get("usage"), "message_delta.usage")
        elif name == "message_stop":
            return EventClass.DONE
        elif name == "error":
            err = obj.get("error")
            if type(err) is not dict:
                err = {"message": err}
            self.error = RecordError(
                kind=ErrorKind.STREAM_ERROR,
                message=f"error event in stream: {err.get('type')}: {err.get('message')}"[:300],
            )
        return EventClass.META

    def _block_start(self, obj: dict[str, Any]) -> int:
        block = wire_object(obj.get("content_block"), "content_block_start.content_block") or {}
        btype = block.get("type")
        if btype == "redacted_thinking":
            self._thinking_redacted = True
            return EventClass.OUTPUT
        if btype == "thinking":
            self._thinking_blocks += 1
            if block.get("thinking"):
                self._thinking_streamed = True
                return EventClass.OUTPUT
        elif btype == "text":
            text = wire_str(block.get("text"), "content_block.text")
            if text:
                self.text_parts.append(text)
                return EventClass.TEXT
        return EventClass.META

    def _read_usage(self, value: Any, where: str) -> None:
        # Anthropic's counts are cumulative: a later value replaces the earlier one. Its
        # `input_tokens` excludes cache reads and writes; the contract's `input_tokens`
        # includes them, so the three are summed.
        usage = wire_object(value, where)
        if not usage:
            return
        uncached = wire_count(usage.get("input_tokens"), f"{where}.input_tokens")
        if uncached is not None:
            self._uncached_input = uncached
        read = wire_count(usage.get("cache_read_input_tokens"), f"{where}.cache_read_input_tokens")
        if read is not None:
            self._cache_read = read
            self.usage.cached_input_tokens = read
            self.provider_timings.cached_tokens = read
        write = wire_count(
            usage.get("cache_creation_input_tokens"), f"{where}.cache_creation_input_tokens"
        )
        if write is not None:
            self._cache_write = write
        if uncached is not None or read is not None:
            self.usage.input_tokens = self._uncached_input + self._cache_read + self._cache_write
        output = wire_count(usage.get("output_tokens"), f"{where}.output_tokens")
        if output is not None:
            self.usage.output_tokens = output

    def streamed_output_tokens(self, output_events: int) -> int | None:
        """`output_tokens`, which counts thinking: streamed thinking is in the stream too.

        None when thinking was counted but not streamed (a `redacted_thinking` block, or a
        thinking block with `display: "omitted"`, whose text is empty and only its
        signature arrives): Anthropic reports no separate thinking count, so the tokens
        the stream delivered cannot be known and decode is not derived. Summarised
        thinking (Claude 4) bills the full thinking but streams a summary; it cannot be
        told apart on the wire, so its decode is taken over `output_tokens`.
        """
        hidden = self._thinking_redacted or (self._thinking_blocks and not self._thinking_streamed)
        return None if hidden else self.usage.output_tokens

    def stop_reason(self) -> StopReason | None:
        """Map Anthropic's `stop_reason`."""
        if self.stop_reason_raw is None:
            return None
        return _STOP_REASONS.get(self.stop_reason_raw, StopReason.UNKNOWN)


@register
class AnthropicProvider(Provider):
    """Anthropic's Messages API."""

    kind: ClassVar[str] = "anthropic"
    settings_model: ClassVar[type[ProviderSettings]] = AnthropicSettings
    sdk: ClassVar[SDKAdapter | None] = AnthropicSDK()

    def _headers(self) -> dict[str, str]:
        headers = {"anthropic-version": ANTHROPIC_VERSION}
        if self._api_key:
            headers["x-api-key"] = self._api_key
        return headers

    def wire_params(self, params: dict[str, Any]) -> dict[str, Any]:
        """Keep what Messages accepts; `stop` becomes `stop_sequences`; `max_tokens` is
        required, so it defaults to 1024. Others (e.g. `seed`) are not sent."""
        sent = {k: v for k, v in params.items() if k in _PASSED_PARAMS}
        if "stop" in params:
            stop = params["stop"]
            sent["stop_sequences"] = [stop] if isinstance(stop, str) else list(stop)
        sent.setdefault("max_tokens", _DEFAULT_MAX_TOKENS)
        return sent

    @staticmethod
    def _split_system(messages: list[dict[str, str]]) -> tuple[str | None, list[dict[str, str]]]:
        system = [m["content"] for m in messages if m["role"] == "system"]
        rest = [m for m in messages if m["role"] != "system"]
        return ("\n\n".join(system) if system else None), rest

    def build_request(self, request: ChatRequest, params: dict[str, Any]) -> httpx.Request:
        """A streaming Messages request; system messages go to `system`."""
        system, messages = self._split_system(request.messages)
        body: dict[str, Any] = {
            **self.settings.extra_body,
            "model": self.model,
            "messages": messages,
            **params,
            "stream": True,
        }
        if system is not None:
            body["system"] = system
        return self.client.build_request("POST", "/v1/messages", json=body, headers=self._headers())

    def new_parser(self) -> StreamParser:
        """A Messages event parser."""
        return AnthropicParser()

    async def count_tokens(self, text: str) -> TokenCount | None:
        """`POST /messages/count_tokens` for `text` as one user message."""
        resp = await own_request(
            self.client,
            "POST",
            "/v1/messages/count_tokens",
            TOKENIZE,
            json={"model": self.model, "messages": [{"role": "user", "content": text}]},
            headers=self._headers(),
        )
        resp.raise_for_status()
        return TokenCount(int(resp.json()["input_tokens"]), "anthropic:count_tokens")

    async def tokenized(self, text: str) -> Tokenized | None:
        """A count alone: `count_tokens` gives no token boundaries, and counts `text` as a
        whole one-message request, its framing included."""
        count = await self.count_tokens(text)
        if count is None:
            return None
        return Tokenized(
            count.source,
            count.tokens,
            includes_framing=True,
            note="counts only (no token boundaries); includes the message framing",
        )
