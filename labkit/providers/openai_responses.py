"""OpenAI's Responses API (`POST /responses`, `stream: true`) on labkit's own HTTP.

Wire facts (openai-python ``types/responses/``: `ResponseStreamEvent` and its members;
https://platform.openai.com/docs/api-reference/responses-streaming): named SSE events whose
data repeats the name as ``type``; no ``[DONE]``. ``response.created`` carries the response
id; output arrives as ``response.output_text.delta`` (visible text),
``response.refusal.delta``, ``response.reasoning_summary_text.delta`` (a summary of hidden
reasoning), ``response.reasoning_text.delta`` (reasoning itself, from servers that stream
it), ``response.function_call_arguments.delta``; the stream ends with one of
``response.completed``, ``response.incomplete`` (``incomplete_details.reason``:
``max_output_tokens``, ``content_filter``) or ``response.failed`` (``response.error``), whose
``response.usage`` (``input_tokens``, ``output_tokens``, ``input_tokens_details.cached_tokens``,
``output_tokens_details.reasoning_tokens``) is the only usage sent. An ``error`` event
(``code``, ``message``) can arrive at any point. Headers as for Chat Completions
(``x-request-id``, ``openai-processing-ms``, ``x-ratelimit-*``).

Requests: system messages become ``instructions``, the others ``input``; ``max_tokens`` is
sent as ``max_output_tokens``; only parameters the API accepts are sent (``seed`` and
``stop`` are not: it has neither).
"""

from __future__ import annotations

import contextlib
from typing import Any, ClassVar

import httpx

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
from labkit.providers.base import (
    ChatRequest,
    EventClass,
    ProviderSettings,
    ResponseHeaders,
    SDKAdapter,
    StreamParser,
    TokenCount,
    register,
)
from labkit.providers.openai import OpenAIProvider, OpenAISettings
from labkit.providers.openai_responses_sdk import OpenAIResponsesSDK, split_instructions
from labkit.records import ErrorKind, RecordError, StopReason

__all__ = ["OpenAIResponsesParser", "OpenAIResponsesProvider"]

#: Request body fields of the Responses API that the lab's params may set.
_PASSED_PARAMS = frozenset(
    {
        "temperature",
        "top_p",
        "max_output_tokens",
        "reasoning",
        "text",
        "tools",
        "tool_choice",
        "parallel_tool_calls",
        "max_tool_calls",
        "store",
        "metadata",
        "truncation",
        "service_tier",
        "top_logprobs",
        "include",
        "prompt_cache_key",
        "prompt_cache_retention",
        "safety_identifier",
        "user",
        "stream_options",
    }
)

#: Delta events whose `delta` is output that is not visible text.
_OUTPUT_DELTAS = frozenset(
    {
        "response.function_call_arguments.delta",
        "response.custom_tool_call_input.delta",
        "response.mcp_call_arguments.delta",
        "response.code_interpreter_call_code.delta",
    }
)
_TERMINAL = frozenset({"response.completed", "response.incomplete", "response.failed"})
_TOOL_ITEMS = frozenset({"function_call", "custom_tool_call"})

_INCOMPLETE_REASONS = {
    "max_output_tokens": StopReason.LENGTH,
    "content_filter": StopReason.CONTENT_FILTER,
}


class OpenAIResponsesParser(StreamParser):
    """Parses Responses events into text, usage, stop reason and errors.

    TEXT: `response.output_text.delta`, `response.refusal.delta`. OUTPUT: reasoning text,
    reasoning summaries, function-call arguments (and the other tool-input deltas). Every
    other event (`response.created`, item and part starts and ends, `*.done`) is META; the
    three terminal events are DONE. Usage comes once, on the terminal event's `response`.
    """

    def __init__(self) -> None:
        super().__init__()
        self._reasoning_streamed = False
        self._summary_streamed = False
        self._refused = False
        self._tool_called = False

    def on_headers(self, headers: ResponseHeaders) -> None:
        """Request id, server processing time and rate-limit headers (as Chat Completions)."""
        self.request_id = headers.get("x-request-id")
        processing = headers.get("openai-processing-ms")
        if processing:
            with contextlib.suppress(ValueError):
                self.provider_timings.processing_ms = float(processing)
        self.read_rate_limits(headers, "x-ratelimit-")

    def on_event(self, event: SSEEvent) -> int:
        """Classify one event and collect what it carries."""
        obj = load_event_object(event.data)
        return self.on_object(event.event or obj.get("type"), obj)

    def on_object(self, name: str | None, obj: dict[str, Any]) -> int:
        """Classify one event's JSON object by its name; the SDK path calls this with the
        view of the SDK's event object and its `type`."""
        if name == "response.output_text.delta":
            delta = _delta(obj, name)
            if not delta:
                return EventClass.META
            self.text_parts.append(delta)
            return EventClass.TEXT
        if name == "response.reasoning_summary_text.delta":
            if not _delta(obj, name):
                return EventClass.META
            self._summary_streamed = True
            return EventClass.OUTPUT
        if name == "response.reasoning_text.delta":
            if not _delta(obj, name):
                return EventClass.META
            self._reasoning_streamed = True
            return EventClass.OUTPUT
        if name in _OUTPUT_DELTAS:
            if not _delta(obj, name):
                return EventClass.META
            self._tool_called = True
            return EventClass.OUTPUT
        if name == "response.refusal.delta":
            delta = _delta(obj, name)
            if not delta:
                return EventClass.META
            self.text_parts.append(delta)
            self._refused = True
            return EventClass.TEXT
        if name in _TERMINAL:
            self._read_response(obj, name)
            return EventClass.DONE
        if name == "response.created":
            response = wire_object(obj.get("response"), f"{name}.response") or {}
            self.response_id = wire_id(response.get("id"), "response.id")
        elif name == "response.output_item.added":
            item = wire_object(obj.get("item"), f"{name}.item") or {}
            if item.get("type") in _TOOL_ITEMS:
                self._tool_called = True
        elif name == "error":
            err = obj.get("error")
            self.error = _stream_error(err if type(err) is dict else obj)
        return EventClass.META

    def _read_response(self, obj: dict[str, Any], name: str) -> None:
        """The terminal event's response: status, why it is incomplete, error, usage."""
        response = wire_object(obj.get("response"), f"{name}.response") or {}
        if self.response_id is None:
            self.response_id = wire_id(response.get("id"), "response.id")
        status = wire_str(response.get("status"), "response.status")
        if name == "response.incomplete":
            details = wire_object(response.get("incomplete_details"), "incomplete_details")
            reason = details and wire_str(details.get("reason"), "incomplete_details.reason")
            self.stop_reason_raw = reason or status or "incomplete"
        elif name == "response.failed":
            self.stop_reason_raw = status or "failed"
            err = wire_object(response.get("error"), "response.error")
            self.error = _stream_error(err or {"message": "response.failed"})
        else:
            self.stop_reason_raw = status or "completed"
        usage = wire_object(response.get("usage"), "response.usage")
        if usage:
            self._read_usage(usage)

    def _read_usage(self, usage: dict[str, Any]) -> None:
        # Sent once, on the terminal event: it is the whole count, never added to.
        u = self.usage
        u.input_tokens = wire_count(usage.get("input_tokens"), "usage.input_tokens")
        u.output_tokens = wire_count(usage.get("output_tokens"), "usage.output_tokens")
        details = wire_object(usage.get("input_tokens_details"), "usage.input_tokens_details")
        if details:
            cached = wire_count(
                details.get("cached_tokens"), "usage.input_tokens_details.cached_tokens"
            )
            u.cached_input_tokens = cached
            self.provider_timings.cached_tokens = cached
        out_details = wire_object(usage.get("output_tokens_details"), "usage.output_tokens_details")
        if out_details:
            u.reasoning_tokens = wire_count(
                out_details.get("reasoning_tokens"),
                "usage.output_tokens_details.reasoning_tokens",
            )

    def streamed_output_tokens(self, output_events: int) -> int | None:
        """The output tokens the stream delivered.

        `output_tokens` counts reasoning, streamed or not. Reasoning that never arrived as
        `response.reasoning_text.delta` is taken out (gpt-5, o-series). None when hidden
        reasoning came with a streamed summary: the summary's deltas are output events of
        no reported count, interleaved with hidden reasoning, so decode is not derived.
        """
        u = self.usage
        output, reasoning = u.output_tokens, u.reasoning_tokens
        if output is None or not reasoning or self._reasoning_streamed:
            return output
        if self._summary_streamed:
            return None
        return max(output - reasoning, 0)

    def stop_reason(self) -> StopReason | None:
        """`completed` is `end` (`tool_call` after a function call, `refusal` after a
        refusal); `incomplete` maps its reason; `failed` is `error`."""
        raw = self.stop_reason_raw
        if raw is None:
            return None
        if raw == "completed":
            if self._tool_called:
                return StopReason.TOOL_CALL
            return StopReason.REFUSAL if self._refused else StopReason.END
        if raw == "failed":
            return StopReason.ERROR
        return _INCOMPLETE_REASONS.get(raw, StopReason.UNKNOWN)


def _delta(obj: dict[str, Any], name: str) -> str:
    delta = obj.get("delta")
    if type(delta) is not str:
        raise MalformedStream(f"{name}.delta is {describe(delta)}, not a string")
    return delta


def _stream_error(err: dict[str, Any]) -> RecordError:
    code = err.get("code") or err.get("type")
    message = err.get("message") or "no message"
    text = f"{code}: {message}" if code else str(message)
    return RecordError(kind=ErrorKind.STREAM_ERROR, message=f"error event in stream: {text}"[:300])


@register
class OpenAIResponsesProvider(OpenAIProvider):
    """OpenAI's Responses API: the key is required, as for `openai`."""

    kind: ClassVar[str] = "openai_responses"
    settings_model: ClassVar[type[ProviderSettings]] = OpenAISettings
    sdk: ClassVar[SDKAdapter | None] = OpenAIResponsesSDK()

    def wire_params(self, params: dict[str, Any]) -> dict[str, Any]:
        """`max_tokens` becomes `max_output_tokens`; parameters the API does not accept
        (`seed`, `stop`, penalties) are not sent."""
        sent = {k: v for k, v in params.items() if k in _PASSED_PARAMS}
        if "max_tokens" in params:
            sent["max_output_tokens"] = params["max_tokens"]
        return sent

    def build_request(self, request: ChatRequest, params: dict[str, Any]) -> httpx.Request:
        """A streaming Responses request: system messages go to `instructions`."""
        instructions, messages = split_instructions(request.messages)
        body: dict[str, Any] = {
            **self.settings.extra_body,
            "model": self.model,
            "input": messages,
            **params,
            "stream": True,
        }
        if instructions is not None:
            body["instructions"] = instructions
        return self.client.build_request(
            "POST", "/responses", json=body, headers=self.request_headers()
        )

    def new_parser(self) -> StreamParser:
        """A Responses event parser."""
        return OpenAIResponsesParser()

    def chat_framing_tokens(self, request: ChatRequest) -> int | None:
        """Unknown: OpenAI documents the chat format's per-message tokens for Chat
        Completions only, and here the system text travels as `instructions`."""
        return None

    async def count_tokens(self, text: str) -> TokenCount | None:
        """`POST /responses/input_tokens` for `text` as the input."""
        resp = await own_request(
            self.client,
            "POST",
            "/responses/input_tokens",
            TOKENIZE,
            json={"model": self.model, "input": text},
            headers=self.request_headers(),
        )
        resp.raise_for_status()
        return TokenCount(int(resp.json()["input_tokens"]), "openai:responses/input_tokens")
