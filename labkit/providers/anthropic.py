"""Anthropic Messages (`POST /messages`, `stream: true`) on labkit's own HTTP.

Wire facts (docs/providers.md): named SSE events; ``message_start`` carries the input and
cache counts, ``content_block_delta`` the output, ``message_delta`` the stop reason and the
*cumulative* output count (it replaces, never adds, and may update the input counts);
``ping`` is a keep-alive; ``error`` can arrive mid-stream; ``message_stop`` ends it. No
provider-side timings are reported.
"""

from __future__ import annotations

import math
from typing import Any, ClassVar

import httpx
from pydantic import Field

from labkit.errors import MalformedStream
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
from labkit.providers.tools import AnthropicTools, ToolFormat
from labkit.records import ErrorKind, RecordError, StopReason
from labkit.tokenizers import Tokenized
from labkit.wire.connections import TOKENIZE, own_request
from labkit.wire.sse import SSEEvent

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

#: Streamed thinking of fewer characters per reported thinking token is a summary: raw
#: thinking runs at about 3.5 (Anthropic's "a token is about 3.5 English characters").
_FULL_THINKING_CHARS = 2
#: Characters per token for a summary's own tokens (the same documented rule of thumb).
_CHARS_PER_TOKEN = 3.5

# Body fields the Messages API accepts from the lab's generic params.
_PASSED_PARAMS: tuple[str, ...] = (
    "temperature", "top_p", "top_k", "max_tokens", "stop_sequences", "metadata"
)  # fmt: skip
# ... and the tools a `session` offers (`AnthropicTools`).
_PASSED_PARAMS += ("tools", "tool_choice")


class AnthropicSettings(ProviderSettings):
    """An Anthropic provider entry: the key is required."""

    api_key_env: str | None = Field(
        default="ANTHROPIC_API_KEY", description="Variable holding the key."
    )

    default_base_url: ClassVar[str | None] = "https://api.anthropic.com"
    key_required: ClassVar[bool] = True

    @classmethod
    def answered_at(cls, entry: dict[str, Any], root: str, key_env: str) -> dict[str, Any] | None:
        """The entry at `root` (the API root; the kind adds its own path), keyed by
        `key_env`."""
        kept = {k: v for k, v in entry.items() if k not in ("base_url", "base_url_env")}
        return {**kept, "base_url": root, "api_key_env": key_env}

    def resolved_base_url(self) -> str:
        """The API root without `/v1` (the SDK's and `ANTHROPIC_BASE_URL`'s convention);
        a `base_url` ending in `/v1` is accepted too, so both paths reach one endpoint."""
        return super().resolved_base_url().removesuffix("/v1")


class AnthropicParser(StreamParser):
    """Parses Messages events into text, usage, stop reason and errors.

    Output events are those that carry generated content: a non-empty `text_delta`
    (TEXT), `thinking_delta` or `input_json_delta` (OUTPUT), and, by the rule every API
    follows (docs/measurement.md, "Tool calls"), the `content_block_start` of a `tool_use`
    or `server_tool_use` block, which carries the call's generated name (OUTPUT); a call
    whose input never streamed (a call without arguments: only an empty
    `input_json_delta`, or none) has its `content_block_stop` as the output event of the
    input it generated (`{}`). The empty `input_json_delta` that opens every tool_use
    block, the empty `thinking_delta` before a signature, `signature_delta`,
    `citations_delta`, a `redacted_thinking` block (encrypted reasoning arriving whole) and
    other block starts and stops carry no streamed token (META).
    `usage.output_tokens_details.thinking_tokens` is the reasoning count.
    """

    def __init__(self) -> None:
        super().__init__()
        self._uncached_input = 0
        self._cache_read = 0
        self._cache_write = 0
        self._thinking_blocks = 0
        self._thinking_streamed = False
        self._thinking_redacted = False
        self._thinking_chars = 0
        #: Tool call blocks open without a non-empty piece of their input yet, by index.
        self._calls_without_input: set[int] = set()

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
                if not text:
                    return EventClass.META
                self.text_parts.append(text)
                return EventClass.TEXT
            if dtype == "thinking_delta":
                # An empty thinking_delta precedes the signature: no token, no output.
                thinking = _delta_text(delta, "thinking")
                if not thinking:
                    return EventClass.META
                self._thinking_streamed = True
                self._thinking_chars += len(thinking)
                self.other_output_parts.append(thinking)
                return EventClass.OUTPUT
            if dtype == "input_json_delta":
                # Every tool_use block opens with an empty partial_json.
                partial = _delta_text(delta, "partial_json")
                index = obj.get("index")
                if type(index) is int and index in self.tool_call_parts:
                    self.add_tool_call_delta(index, None, None, partial)
                if not partial:
                    return EventClass.META
                if type(index) is int:
                    self._calls_without_input.discard(index)
                self.other_output_parts.append(partial)
                return EventClass.OUTPUT
            return EventClass.META  # signature_delta, citations_delta, future kinds
        if name == "content_block_start":
            return self._block_start(obj)
        if name == "content_block_stop":
            calls = self._calls_without_input
            index = obj.get("index")
            if calls and type(index) is int and index in calls:
                # A call whose input never streamed ends here: its generated input (`{}`,
                # counted in output_tokens) is complete at this event.
                calls.discard(index)
                self.other_output_parts.append("{}")
                return EventClass.OUTPUT
            return EventClass.META
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
        if btype == "tool_use" and type(obj.get("index")) is int:
            self.add_tool_call_delta(obj["index"], block.get("id"), block.get("name"), None)
        if btype == "redacted_thinking":
            # Encrypted reasoning arriving whole: counted, but no token is streamed here.
            self._thinking_redacted = True
            return EventClass.META
        if btype == "thinking":
            self._thinking_blocks += 1
            thinking = wire_str(block.get("thinking"), "content_block.thinking")
            if thinking:
                self._thinking_streamed = True
                self._thinking_chars += len(thinking)
                self.other_output_parts.append(thinking)
                return EventClass.OUTPUT
        elif btype in ("tool_use", "server_tool_use"):
            if btype == "server_tool_use":
                self.hosted_calls += 1
            name = wire_str(block.get("name"), "content_block.name")
            if name:  # the name is generated: the block that brings it is output
                self.other_output_parts.append(name)
                index = obj.get("index")
                if type(index) is int and not block.get("input"):
                    self._calls_without_input.add(index)
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
            self.usage.cache_write_input_tokens = write
        if uncached is not None or read is not None:
            self.usage.input_tokens = self._uncached_input + self._cache_read + self._cache_write
        output = wire_count(usage.get("output_tokens"), f"{where}.output_tokens")
        if output is not None:
            self.usage.output_tokens = output
        details = wire_object(usage.get("output_tokens_details"), f"{where}.output_tokens_details")
        if details:
            thinking = wire_count(
                details.get("thinking_tokens"), f"{where}.output_tokens_details.thinking_tokens"
            )
            if thinking is not None:
                self.usage.reasoning_tokens = thinking

    def reported_streamed_tokens(self, output_events: int) -> int | None:
        """`output_tokens`, which counts thinking, less the thinking that was not streamed.

        Anthropic's `usage.output_tokens_details.thinking_tokens` counts the raw thinking.
        Thinking counted but not streamed (a `redacted_thinking` block, or a thinking block
        with `display: "omitted"`, whose text is empty and only its signature arrives) is
        taken out with it. Summarised thinking (Claude 4) streams a summary shorter than
        the raw thinking: told apart by fewer than `_FULL_THINKING_CHARS` characters per
        thinking token, it is taken out and the summary's own tokens are put back,
        estimated at Anthropic's documented 3.5 characters per token. Without
        `thinking_tokens`, hidden thinking leaves the streamed count unknown (None, decode
        not derived) and streamed thinking is taken as all of the thinking.
        """
        output = self.usage.output_tokens
        thinking = self.usage.reasoning_tokens
        hidden = self._thinking_redacted or (self._thinking_blocks and not self._thinking_streamed)
        if output is None or not (hidden or self._thinking_streamed):
            return output
        if thinking is None:
            if not hidden:
                return output
            self.streamed_null_reason = (
                "thinking was counted but not streamed (redacted or display omitted) and "
                "Anthropic sent no thinking_tokens to take it out"
            )
            return None
        streamed_thinking = 0
        if self._thinking_chars >= _FULL_THINKING_CHARS * thinking:
            streamed_thinking = thinking  # the thinking itself was streamed
        elif self._thinking_chars:
            streamed_thinking = min(thinking, math.ceil(self._thinking_chars / _CHARS_PER_TOKEN))
        return max(output - thinking, 0) + streamed_thinking

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
    #: "The minimum cacheable prompt length is 1024 tokens" for Opus and Sonnet, 2048 for
    #: Haiku, with `cache_control` marking the prefix (docs.anthropic.com, prompt caching).
    prompt_cache_min_tokens: ClassVar[int | None] = 1024

    def tool_format(self) -> ToolFormat | None:
        """Tools in its own tool-call format (`labkit.providers.tools`)."""
        return AnthropicTools()

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


def _delta_text(delta: dict[str, Any], key: str) -> str:
    """A delta's generated text (`thinking`, `partial_json`): "" when absent or empty."""
    value = delta.get(key)
    if value is None:
        return ""
    if type(value) is not str:
        raise MalformedStream(f"{delta.get('type')}.{key} is {describe(value)}, not a string")
    return value
