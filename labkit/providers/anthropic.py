"""Anthropic Messages (`POST /messages`, `stream: true`) on labkit's own HTTP.

Wire facts (docs/providers.md): named SSE events; ``message_start`` carries the input and
cache counts, ``content_block_delta`` the output, ``message_delta`` the stop reason and the
*cumulative* output count (it replaces, never adds, and may update the input counts);
``ping`` is a keep-alive; ``error`` can arrive mid-stream; ``message_stop`` ends it. No
provider-side timings are reported.
"""

from __future__ import annotations

import json
from typing import Any, ClassVar

import httpx
from pydantic import Field

from labkit.providers.anthropic_sdk import AnthropicSDK
from labkit.providers.base import (
    ChatRequest,
    EventClass,
    Provider,
    ProviderSettings,
    ResponseHeaders,
    StreamParser,
    TokenCount,
    register,
)
from labkit.providers.sdk import SDKAdapter
from labkit.records import ErrorKind, RecordError, StopReason
from labkit.sse import SSEEvent

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
    """Parses Messages events into text, usage, stop reason and errors."""

    def __init__(self) -> None:
        super().__init__()
        self._uncached_input = 0
        self._cache_read = 0
        self._cache_write = 0

    def on_headers(self, headers: ResponseHeaders) -> None:
        """`request-id` and the `anthropic-ratelimit-*` headers."""
        self.request_id = headers.get("request-id")
        self.read_rate_limits(headers, "anthropic-ratelimit-")

    def on_event(self, event: SSEEvent) -> int:
        """Classify one named event and collect what it carries."""
        name = event.event
        if name == "ping":
            return EventClass.IGNORE
        obj = json.loads(event.data)
        if name is None:
            name = obj.get("type")
        if name == "content_block_delta":
            delta = obj["delta"]
            dtype = delta.get("type")
            if dtype == "text_delta":
                self.text_parts.append(delta["text"])
                return EventClass.TEXT
            if dtype in ("thinking_delta", "input_json_delta"):
                return EventClass.OUTPUT
            return EventClass.META  # signature_delta and future kinds carry no tokens
        if name == "message_start":
            message = obj.get("message") or {}
            self.response_id = message.get("id")
            self._read_usage(message.get("usage") or {})
        elif name == "message_delta":
            self.stop_reason_raw = (obj.get("delta") or {}).get("stop_reason")
            self._read_usage(obj.get("usage") or {})
        elif name == "message_stop":
            return EventClass.DONE
        elif name == "error":
            err = obj.get("error") or {}
            self.error = RecordError(
                kind=ErrorKind.STREAM_ERROR,
                message=f"error event in stream: {err.get('type')}: {err.get('message')}"[:300],
            )
        return EventClass.META

    def _read_usage(self, usage: dict[str, Any]) -> None:
        # Anthropic's counts are cumulative: a later value replaces the earlier one. Its
        # `input_tokens` excludes cache reads and writes; the contract's `input_tokens`
        # includes them, so the three are summed.
        if usage.get("input_tokens") is not None:
            self._uncached_input = usage["input_tokens"]
        if usage.get("cache_read_input_tokens") is not None:
            self._cache_read = usage["cache_read_input_tokens"]
            self.usage.cached_input_tokens = self._cache_read
            self.provider_timings.cached_tokens = self._cache_read
        if usage.get("cache_creation_input_tokens") is not None:
            self._cache_write = usage["cache_creation_input_tokens"]
        if "input_tokens" in usage or "cache_read_input_tokens" in usage:
            self.usage.input_tokens = self._uncached_input + self._cache_read + self._cache_write
        if usage.get("output_tokens") is not None:
            self.usage.output_tokens = usage["output_tokens"]

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
        resp = await self.client.post(
            "/v1/messages/count_tokens",
            json={"model": self.model, "messages": [{"role": "user", "content": text}]},
            headers=self._headers(),
        )
        resp.raise_for_status()
        return TokenCount(int(resp.json()["input_tokens"]), "anthropic:count_tokens")
