"""OpenAI's Responses API (`POST /responses`, `stream: true`) on labkit's own HTTP.

Named SSE events whose data repeats the name as ``type``, no ``[DONE]``: output arrives as
``*.delta`` events and the stream ends with ``response.completed``, ``response.incomplete``
or ``response.failed``, whose ``response.usage`` is the only usage sent. Requests send
system messages as ``instructions`` and only the parameters the API accepts. Wire facts and
every event type with its class and source: docs/providers.md, "OpenAI Responses".
"""

from __future__ import annotations

import contextlib
import json
from typing import Any, ClassVar

import httpx

from labkit.errors import MalformedStream
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
    SamplingParams,
    SDKAdapter,
    StreamParser,
    TokenCount,
    register,
)
from labkit.providers.logprobs import LogprobCollector
from labkit.providers.openai import OpenAIProvider, OpenAISettings
from labkit.providers.openai_responses_sdk import OpenAIResponsesSDK, split_instructions
from labkit.providers.tools import ResponsesTools, ToolFormat
from labkit.records import ErrorKind, RecordError, StopReason
from labkit.wire.connections import TOKENIZE, own_request
from labkit.wire.sse import SSEEvent

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

#: Where the event catalogue below was read: openai-python's `ResponseStreamEvent` union.
CATALOGUE_SOURCE = "openai/openai-python src/openai/types/responses/response_stream_event.py"

#: Visible text: kept as the record's output text.
_TEXT_DELTAS = frozenset({"response.output_text.delta", "response.refusal.delta"})
#: Generated output that is not visible text: reasoning, and what the model writes into a
#: tool call (client tools' arguments, input, command; hosted tools' code and arguments).
_OUTPUT_DELTAS = frozenset(
    {
        "response.reasoning_text.delta",
        "response.reasoning_summary_text.delta",
        "response.function_call_arguments.delta",
        "response.custom_tool_call_input.delta",
        "response.shell_call_command.delta",
        "response.mcp_call_arguments.delta",
        "response.code_interpreter_call_code.delta",
        "response.audio.delta",
    }
)
#: Deltas that carry no generated token: what a hosted tool produced (a shell's stdout and
#: stderr), or a transcript repeating the audio's own tokens.
_NOT_OUTPUT_DELTAS = frozenset(
    {"response.shell_call_output_content.delta", "response.audio.transcript.delta"}
)
#: Deltas that write a client-executed item: they open it as a client call by their own.
_CLIENT_TOOL_DELTAS = frozenset(
    {
        "response.function_call_arguments.delta",
        "response.custom_tool_call_input.delta",
        "response.shell_call_command.delta",
    }
)
_TERMINAL = frozenset({"response.completed", "response.incomplete", "response.failed"})
#: Progress events the parser knows: they count for `first_event_ms`, carry no token.
_PROGRESS = frozenset(
    {
        "response.created",
        "response.queued",
        "response.in_progress",
        "response.output_item.added",
        "response.output_item.done",
        "response.content_part.added",
        "response.content_part.done",
        "response.output_text.done",
        "response.output_text.annotation.added",
        "response.refusal.done",
        "response.reasoning_text.done",
        "response.reasoning_summary_part.added",
        "response.reasoning_summary_part.done",
        "response.reasoning_summary_text.done",
        "response.function_call_arguments.done",
        "response.custom_tool_call_input.done",
        "response.shell_call_command.added",
        "response.shell_call_command.done",
        "response.shell_call_output_content.done",
        "response.mcp_call_arguments.done",
        "response.mcp_call.in_progress",
        "response.mcp_call.completed",
        "response.mcp_call.failed",
        "response.mcp_list_tools.in_progress",
        "response.mcp_list_tools.completed",
        "response.mcp_list_tools.failed",
        "response.code_interpreter_call.in_progress",
        "response.code_interpreter_call.interpreting",
        "response.code_interpreter_call.completed",
        "response.code_interpreter_call_code.done",
        "response.file_search_call.in_progress",
        "response.file_search_call.searching",
        "response.file_search_call.completed",
        "response.web_search_call.in_progress",
        "response.web_search_call.searching",
        "response.web_search_call.completed",
        "response.image_generation_call.in_progress",
        "response.image_generation_call.generating",
        "response.image_generation_call.partial_image",
        "response.image_generation_call.completed",
        "response.audio.done",
        "response.audio.transcript.done",
        "error",
    }
)
#: Output items the client must execute: a response that ends with one of these and no
#: output for it is the client's turn (`tool_call`). Hosted tools (`web_search_call`,
#: `file_search_call`, `code_interpreter_call`, `mcp_call`, `image_generation_call`,
#: `tool_search_call`) ran on the server and are not.
CLIENT_TOOL_ITEMS = frozenset(
    {
        "function_call",
        "custom_tool_call",
        "apply_patch_call",
        "local_shell_call",
        "shell_call",
        "computer_call",
    }
)
#: Client calls with a name and streamed arguments, as a session sends them back
#: (`finished_tool_calls`); the other client calls are taken whole from their item.
_CALL_ITEMS = frozenset({"function_call", "custom_tool_call"})
#: The deltas that stream such a call's arguments (a shell's command deltas are not JSON:
#: its call is taken whole from its item).
_CALL_ARGUMENT_DELTAS = frozenset(
    {"response.function_call_arguments.delta", "response.custom_tool_call_input.delta"}
)
#: An output item that answers a client tool call inside the same response (the server
#: ran it: a hosted shell's `shell_call_output`).
_TOOL_OUTPUT_ITEMS = frozenset(f"{item}_output" for item in CLIENT_TOOL_ITEMS)

_INCOMPLETE_REASONS = {
    "max_output_tokens": StopReason.LENGTH,
    "content_filter": StopReason.CONTENT_FILTER,
}


def event_class(name: str) -> str:
    """The class of a Responses event type as this parser treats it: `output`,
    `progress`, `terminal` or `ignored` (documented in docs/providers.md). An unknown
    ``*.delta`` is `output` when its `delta` is text (decided per event); any other unknown
    event is `progress`."""
    if name in _TEXT_DELTAS or name in _OUTPUT_DELTAS:
        return "output"
    if name in _TERMINAL:
        return "terminal"
    if name in _NOT_OUTPUT_DELTAS or name in _PROGRESS:
        return "progress"
    return "output" if name.endswith(".delta") else "progress"


class OpenAIResponsesParser(StreamParser):
    """Parses Responses events into text, usage, stop reason and errors.

    An event is output only when it carries generated content: a non-empty text delta
    (`response.output_text.delta`, `response.refusal.delta`: TEXT) or reasoning and
    tool-input delta (OUTPUT), the `response.output_item.added` that opens a function or
    custom tool call with its generated name (OUTPUT, the rule of every API), and the
    `response.output_item.done` of a client call none of whose input streamed (the call
    arrives whole there: OUTPUT); an unknown ``*.delta`` event whose `delta` is a non-empty
    string is OUTPUT by that rule (and its type kept in `unknown_event_types`), never
    dropped. Every other event (`response.created`, item and part starts and ends,
    `*.done`, hosted tools' progress) is META; the three terminal events are DONE. Usage
    comes once, on the terminal event's `response`. `completed` is `tool_call` only when a
    client-executed item (`CLIENT_TOOL_ITEMS`) is left without its output.
    """

    def __init__(self) -> None:
        super().__init__()
        self._reasoning_streamed = False
        self._summary_streamed = False
        self._refused = False
        #: Client tool calls of this response not answered inside it: output index → call id.
        self._client_calls: dict[int | None, str | None] = {}
        #: Output indexes whose content arrived as deltas.
        self._streamed_items: set[int | None] = set()
        #: Event types outside the catalogue that arrived, each once.
        self.unknown_event_types: set[str] = set()

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
        return self.on_object(event.event or wire_str(obj.get("type"), "event type"), obj)

    def on_object(self, name: str | None, obj: dict[str, Any]) -> int:
        """Classify one event's JSON object by its name; the SDK path calls this with the
        view of the SDK's event object and its `type`."""
        if name == "response.output_text.delta":
            delta = _delta(obj, name)
            if not delta:
                return EventClass.META
            self.text_parts.append(delta)
            return EventClass.TEXT
        if name in _OUTPUT_DELTAS:
            delta = _delta(obj, name)
            if not delta:
                return EventClass.META
            if name == "response.reasoning_summary_text.delta":
                self._summary_streamed = True
            elif name == "response.reasoning_text.delta":
                self._reasoning_streamed = True
            index = _output_index(obj)
            self._streamed_items.add(index)
            if name in _CLIENT_TOOL_DELTAS:
                self._client_calls.setdefault(index, None)
            if name in _CALL_ARGUMENT_DELTAS and index in self.tool_call_parts:
                self.add_tool_call_delta(index, None, None, delta)
            self.other_output_parts.append(delta)
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
            self._read_item(item, obj)
            kind = _item_type(item)
            if kind is not None and kind.endswith("_call") and kind not in CLIENT_TOOL_ITEMS:
                self.hosted_calls += 1  # a hosted tool's call: counted, its input unstreamed
            if kind in _CALL_ITEMS:
                call_name = wire_str(item.get("name"), f"{name}.item.name")
                if call_name:
                    # The call's generated name opens it: an output event, as on every API
                    # (docs/measurement.md, "Tool calls").
                    self.other_output_parts.append(call_name)
                    return EventClass.OUTPUT
        elif name == "response.output_item.done":
            item = wire_object(obj.get("item"), f"{name}.item") or {}
            self._read_item(item, obj)
            if _item_type(item) in CLIENT_TOOL_ITEMS and (
                _output_index(obj) not in self._streamed_items
            ):
                # A call that arrives whole (an apply_patch diff, a computer action): the
                # item carries the generated call, so it is the output event.
                self.other_output_parts.append(repr(item))
                return EventClass.OUTPUT
        elif name == "error":
            err = obj.get("error")
            self.error = _stream_error(err if type(err) is dict else obj)
        elif name not in _PROGRESS and name not in _NOT_OUTPUT_DELTAS and name is not None:
            return self._unknown(name, obj)
        return EventClass.META

    def _read_item(self, item: dict[str, Any], event: dict[str, Any]) -> None:
        """Keep client tool calls open until an output item answers them (by `call_id`)."""
        kind = _item_type(item)
        if kind in CLIENT_TOOL_ITEMS:
            call_id = item.get("call_id")
            index = _output_index(event)
            self._client_calls[index] = None if call_id is None else str(call_id)
            if kind in _CALL_ITEMS and index is not None:
                self._capture_call(index, item)
            elif kind is not None and index is not None:
                self._capture_whole_call(index, kind, item)
        elif kind in _TOOL_OUTPUT_ITEMS:
            answered = item.get("call_id")
            for key, call_id in list(self._client_calls.items()):
                if call_id is not None and call_id == answered:
                    del self._client_calls[key]

    def _capture_call(self, index: int, item: dict[str, Any]) -> None:
        """A function or custom tool call for `finished_tool_calls`: its id and name when
        the item opens, its arguments from the item only where none were streamed."""
        if index not in self.tool_call_parts:
            self.add_tool_call_delta(index, item.get("call_id"), item.get("name"), None)
        if index not in self._streamed_items and not self.tool_call_parts[index][2]:
            whole = item.get("arguments", item.get("input"))
            self.add_tool_call_delta(index, None, None, whole)

    def _capture_whole_call(self, index: int, kind: str, item: dict[str, Any]) -> None:
        """Any other client call (apply_patch, shell, computer) for `finished_tool_calls`:
        named by its tool (the item type less `_call`), its arguments the JSON of the item's
        `operation` or `action` (keys sorted, so every client path writes the same text),
        from the latest form of the item (the one that opens it may still be empty)."""
        payload = item.get("operation", item.get("action"))
        self.tool_call_parts.pop(index, None)
        arguments = None if payload is None else json.dumps(payload, sort_keys=True)
        self.add_tool_call_delta(index, item.get("call_id"), kind.removesuffix("_call"), arguments)

    def _unknown(self, name: str, obj: dict[str, Any]) -> int:
        """An event outside the catalogue: a ``*.delta`` whose `delta` is non-empty text is
        generated output (a new tool's arguments, say); anything else is progress."""
        self.unknown_event_types.add(name)
        delta = obj.get("delta") if name.endswith(".delta") else None
        if type(delta) is str and delta:
            self._streamed_items.add(_output_index(obj))
            self.other_output_parts.append(delta)
            return EventClass.OUTPUT
        return EventClass.META

    def want_logprobs(self, top_k: int) -> bool:
        """Read `response.output_text.delta`'s `logprobs` from now on (as Chat
        Completions' parser: `on_object` is replaced on this parser alone)."""
        self._logprobs = LogprobCollector(top_k)
        self.on_object = self._on_object_with_logprobs  # type: ignore[method-assign]
        return True

    def _on_object_with_logprobs(self, name: str | None, obj: dict[str, Any]) -> int:
        """`on_object`, after reading a text delta's logprobs into the collector."""
        collector = self._logprobs
        if collector is not None and name == "response.output_text.delta":
            collector.add_entries(obj.get("logprobs"), f"{name}.logprobs")
        return OpenAIResponsesParser.on_object(self, name, obj)

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
        output = response.get("output")
        if type(output) is list and output:  # the whole response: what the client must run
            self._client_calls.clear()
            for index, item in enumerate(output):
                if type(item) is dict:
                    self._read_item(item, {"output_index": index})

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

    def reported_streamed_tokens(self, output_events: int) -> int | None:
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
            self.streamed_null_reason = (
                "hidden reasoning streamed as a summary: the summary's tokens have no "
                "reported count"
            )
            return None
        return max(output - reasoning, 0)

    def stop_reason(self) -> StopReason | None:
        """`completed` is `end`: `tool_call` when a client-executed item is left for the
        client (hosted tools that ran and were answered are not), `refusal` after a
        refusal; `incomplete` maps its reason; `failed` is `error`."""
        raw = self.stop_reason_raw
        if raw is None:
            return None
        if raw == "completed":
            if self._client_calls:
                return StopReason.TOOL_CALL
            return StopReason.REFUSAL if self._refused else StopReason.END
        if raw == "failed":
            return StopReason.ERROR
        return _INCOMPLETE_REASONS.get(raw, StopReason.UNKNOWN)


def _output_index(obj: dict[str, Any]) -> int | None:
    """An event's `output_index` (None when absent)."""
    index = obj.get("output_index")
    if index is None or type(index) is int:
        return index
    raise MalformedStream(f"output_index is {describe(index)}, not an integer")


def _item_type(item: dict[str, Any]) -> str | None:
    """An output item's `type`."""
    return wire_str(item.get("type"), "item.type")


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

    def tool_format(self) -> ToolFormat | None:
        """Tools in its own tool-call format (`labkit.providers.tools`)."""
        return ResponsesTools()

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

    def logprob_params(self, top_k: int) -> SamplingParams:
        """`include: ["message.output_text.logprobs"]` and `top_logprobs`."""
        return {"include": ["message.output_text.logprobs"], "top_logprobs": top_k}

    def new_parser(self) -> StreamParser:
        """A Responses event parser, checking the output count with the model's offline
        tokenizer where there is one."""
        parser = OpenAIResponsesParser()
        parser.count_locally = self.count_locally
        return parser

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
