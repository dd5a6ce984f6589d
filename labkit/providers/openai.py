"""OpenAI Chat Completions (`POST /chat/completions`, `stream: true`) on labkit's own HTTP.

Wire facts this module relies on (docs/providers.md): SSE ``data:`` lines without event
names, ending with ``data: [DONE]``; usage only when ``stream_options.include_usage`` is
set, in one extra chunk with ``choices: []``; the first chunk is often role-only; errors can
arrive inside a 200 stream as an object with an ``error`` key. What compatible servers add
(reasoning fields, Mistral's content parts, Groq's ``x_groq``, usage on every chunk) is
described on `OpenAIChatParser`; every wire value is type-checked where it is read
(`labkit.providers._wire`), a wrong one raising `MalformedStream`.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any, ClassVar, cast

import httpx
from pydantic import Field

from labkit.errors import MalformedStream
from labkit.providers._wire import (
    describe,
    load_event_object,
    wire_count,
    wire_id,
    wire_number,
    wire_object,
    wire_str,
)
from labkit.providers.base import (
    ChatRequest,
    EventClass,
    Provider,
    ProviderSettings,
    ResponseHeaders,
    SamplingParams,
    SDKAdapter,
    StreamParser,
    TokenCount,
    register,
    with_root_path,
)
from labkit.providers.logprobs import LogprobCollector
from labkit.providers.openai_sdk import OpenAISDK
from labkit.providers.server_timings import (
    BODY_READERS,
    SERVER_BODY_KEYS,
    read_groq_usage,
    read_llamacpp,
    read_timing_headers,
)
from labkit.providers.tools import OpenAIChatTools, ToolFormat
from labkit.records import ErrorKind, RecordError, StopReason
from labkit.tokenizers import Tokenized, tokenizer_for_model
from labkit.wire.client import MeasuredClient, chat_body_key
from labkit.wire.readpath import CHAT_CONTENT
from labkit.wire.sse import SSEEvent

__all__ = ["OpenAIChatParser", "OpenAIProvider", "OpenAISettings"]

#: Servers whose output count includes the end token they sampled but never stream.
_END_TOKEN_COUNTERS = frozenset({"llamacpp", "vllm"})

_STOP_REASONS = {
    "stop": StopReason.END,
    "length": StopReason.LENGTH,
    "tool_calls": StopReason.TOOL_CALL,
    "function_call": StopReason.TOOL_CALL,
    "content_filter": StopReason.CONTENT_FILTER,
    "error": StopReason.ERROR,  # OpenRouter: a stream cut by an upstream error
}


class OpenAISettings(ProviderSettings):
    """An OpenAI provider entry: the key is required."""

    api_key_env: str | None = Field(
        default="OPENAI_API_KEY", description="Variable holding the key."
    )
    organization: str | None = Field(default=None, description="OpenAI-Organization header.")

    default_base_url: ClassVar[str | None] = "https://api.openai.com/v1"
    key_required: ClassVar[bool] = True

    @classmethod
    def answered_at(cls, entry: dict[str, Any], root: str, key_env: str) -> dict[str, Any] | None:
        """The entry at `root` (the API root; the kind adds its own path), keyed by
        `key_env`."""
        kept = {k: v for k, v in entry.items() if k not in ("base_url", "base_url_env")}
        return {**kept, "base_url": root, "api_key_env": key_env}

    def resolved_base_url(self) -> str:
        """The API root; a bare server URL gets `/v1`, as the SDK's convention has it."""
        return with_root_path(super().resolved_base_url(), "/v1")


class OpenAIChatParser(StreamParser):
    """Parses Chat Completions chunks, and the shapes OpenAI-compatible servers add.

    Classification: an event is output only when it carries generated content. Visible
    text (`content` as a string or as Mistral's list of parts, `refusal`) is TEXT;
    reasoning (`reasoning_content`: DeepSeek, vLLM, xAI; `reasoning`: OpenRouter, Ollama,
    Groq; `reasoning_details` items with text: OpenRouter; Mistral's `thinking` parts) and
    tool-call names and argument pieces are OUTPUT; role-only chunks, empty deltas (`""`
    content, reasoning_details with only a signature or encrypted data, a tool call with
    `""` arguments), usage chunks and keep-alives are not.

    Usage replaces, never adds: it is cumulative whether it comes once at the end (OpenAI,
    `include_usage`) or on every chunk (vLLM `continuous_usage_stats`). Without top-level
    `usage`, Groq's `x_groq.usage` or a choice's own `usage` (Moonshot) is read. A chunk
    with both `error` and `usage` (OpenRouter ending a cut stream) keeps both. A
    `finish_reason` marks the stream as finished, so a server that closes without `[DONE]`
    (Perplexity) is not truncated.

    Server timings (`labkit.providers.server_timings`) are detected by their chunk key, one
    dict lookup each, or only the one `server` names. llama.cpp's per-token `timings` (with
    `timings_per_token`, cumulative on every chunk) are only kept by reference on token
    chunks and read on the next chunk that carries no output (finish, usage) or in
    `settle`: reading them costs more than the rest of the chunk.
    """

    def __init__(self, server: str = "auto") -> None:
        super().__init__()
        self._server = server
        self._body_keys = SERVER_BODY_KEYS.get(server, ())
        self._reads_timings = server in ("auto", "llamacpp")
        self._reads_groq = server in ("auto", "groq")
        self._pending_timings: dict[str, Any] | None = None
        self._usage_seen = False
        self._reasoning_streamed = False
        self._refused = False
        self._total_tokens: int | None = None
        self._last_tool_index: int | None = None  # the tool call the last delta went to
        self._other_choice: int | None = None  # the first choice index > 0 that arrived

    def on_headers(self, headers: ResponseHeaders) -> None:
        """Request id, server processing time and rate-limit headers."""
        self.request_id = headers.get("x-request-id")
        processing = headers.get("openai-processing-ms")
        if processing:
            with contextlib.suppress(ValueError):
                self.provider_timings.processing_ms = float(processing)
                self.provider_timings.source = "openai"
        if self._server in ("auto", "tgi", "fireworks"):
            read_timing_headers(self.provider_timings, headers, self._server)
        self.read_rate_limits(headers, "x-ratelimit-")

    def common_chunk(self) -> str | None:
        """The plain content chunk (`labkit.wire.readpath.CHAT_CONTENT`), which `on_chunk`
        reads as text and nothing else, while this parser's `on_event` and `on_chunk` are
        this class's own: not where a subclass or a per-request step (logprobs, event
        detail) replaced either."""
        steps = self.__dict__
        if (
            "on_event" in steps
            or "on_chunk" in steps
            or type(self).on_event is not _OWN_ON_EVENT
            or type(self).on_chunk is not _OWN_ON_CHUNK
        ):
            return None
        return CHAT_CONTENT

    def on_event(self, event: SSEEvent) -> int:
        """Classify one event: `[DONE]`, or a chunk (`on_chunk`)."""
        data = event.data
        if data == "[DONE]":
            return EventClass.DONE
        return self.on_chunk(load_event_object(data))

    def on_chunk(self, obj: dict[str, Any]) -> int:
        """Classify one chunk's JSON object; collect text, finish reason, usage and
        identifiers. The SDK path calls this with the view of the SDK's chunk object."""
        cls = EventClass.IGNORE
        err = obj.get("error")
        if err:
            self.error = _stream_error(err)
            cls = EventClass.META
        if self.response_id is None:  # the first non-empty id (Azure's first chunk has "")
            self.response_id = wire_id(obj.get("id"), "chunk id") or None
        fingerprint = obj.get("system_fingerprint")
        if fingerprint is not None and fingerprint != self.system_fingerprint:
            self.system_fingerprint = wire_str(fingerprint, "system_fingerprint")
        usage = obj.get("usage")
        if usage is not None:
            self._read_usage(usage, "usage")
            cls = EventClass.META
        groq = obj.get("x_groq")
        if groq is not None:
            groq = wire_object(groq, "x_groq")
            groq_usage = wire_object(groq.get("usage"), "x_groq.usage") if groq else None
            if groq_usage is not None:
                if usage is None:
                    self._read_usage(groq_usage, "x_groq.usage")
                    cls = EventClass.META
                if self._reads_groq:
                    read_groq_usage(self.provider_timings, groq_usage)
        choices = obj.get("choices")
        if choices:
            if type(choices) is not list:
                raise MalformedStream(f"choices is {describe(choices)}, not an array")
            for choice in choices:
                if type(choice) is not dict:
                    raise MalformedStream(f"a choice is {describe(choice)}, not an object")
                if choice.get("index"):
                    self._another_choice(choice.get("index"))
                    continue  # never merged into choice 0's text, tool calls and count
                delta = choice.get("delta")
                if delta:
                    if type(delta) is not dict:
                        raise MalformedStream(f"delta is {describe(delta)}, not an object")
                    content = delta.get("content")
                    if len(delta) == 1 and type(content) is str:  # the common chunk
                        if content:
                            self.text_parts.append(content)
                            cls = EventClass.TEXT
                    else:
                        got = self._read_delta(delta)
                        if got > cls:
                            cls = got
                choice_usage = choice.get("usage")
                if choice_usage is not None and usage is None:  # Moonshot: on the last choice
                    self._read_usage(choice_usage, "choices[].usage")
                    if cls < EventClass.META:
                        cls = EventClass.META
                finish = choice.get("finish_reason")
                if finish is not None:
                    if type(finish) is not str:
                        raise MalformedStream(f"finish_reason is {describe(finish)}, not a string")
                    if finish:
                        self.stop_reason_raw = finish
                        if cls < EventClass.META:
                            cls = EventClass.META
        for key in self._body_keys:
            value = obj.get(key)
            if value is not None:
                BODY_READERS[key](self.provider_timings, value)
        if self._reads_timings:
            timings = obj.get("timings")
            if timings is not None:
                if type(timings) is not dict:
                    raise MalformedStream(f"timings is {describe(timings)}, not an object")
                if cls >= EventClass.OUTPUT:  # a token chunk: read once, later
                    self._pending_timings = timings
                else:
                    self._pending_timings = None
                    self._read_timings(timings)
        return cls

    def _another_choice(self, index: Any) -> None:
        """A choice other than the first: labkit reads one choice per request (configs
        refuse `n` > 1, `labkit.providers.base.one_choice`), so a stream carrying another
        is recorded as a protocol error naming it, its deltas left unread: merged, the
        choices would interleave their texts and their tokens would halve decode."""
        if type(index) is not int or index < 0:
            raise MalformedStream(f"a choice's index is {describe(index)}, not a count")
        if self._other_choice is None:
            self._other_choice = index

    def _read_timings(self, timings: dict[str, Any]) -> None:
        """llama.cpp's `timings` object into `provider_timings`."""
        read_llamacpp(self.provider_timings, timings)

    #: The per-token `timings` object `event_server_ms` last read (a chunk without one
    #: leaves `_pending_timings` as the last chunk's: that one is not read twice).
    _timings_seen: dict[str, Any] | None = None

    def event_server_ms(self) -> float | None:
        """llama.cpp's own time at the token chunk just read, with `timings_per_token`:
        its cumulative `prompt_ms` + `predicted_ms` (ms from the start of the prompt's
        processing); None when the chunk carried no `timings`."""
        timings = self._pending_timings
        if timings is None or timings is self._timings_seen:
            return None
        self._timings_seen = timings
        prompt = wire_number(timings.get("prompt_ms"), "timings.prompt_ms")
        predicted = wire_number(timings.get("predicted_ms"), "timings.predicted_ms")
        if prompt is None and predicted is None:
            return None
        return (prompt or 0.0) + (predicted or 0.0)

    def settle(self) -> None:
        """Read the last token chunk's `timings` when no later chunk replaced them; a
        stream that carried several choices becomes a protocol error (`_another_choice`)."""
        if self._other_choice is not None and self.error is None:
            self.error = RecordError(
                kind=ErrorKind.PROTOCOL,
                message=f"the stream carried choice {self._other_choice} besides choice 0: "
                "labkit reads one choice per request (n > 1, or a server answering with "
                "several); their texts, tool calls and token counts were not merged",
            )
        timings = self._pending_timings
        if timings is not None:
            self._pending_timings = None
            try:
                self._read_timings(timings)
            except MalformedStream as exc:
                if self.error is None:
                    self.error = RecordError(kind=ErrorKind.PROTOCOL, message=str(exc)[:300])

    def _read_delta(self, delta: dict[str, Any]) -> int:
        """The class of one choice's delta; visible text goes to `text_parts`."""
        cls = EventClass.IGNORE
        content = delta.get("content")
        if content:
            if type(content) is str:
                self.text_parts.append(content)
                cls = EventClass.TEXT
            elif type(content) is list:
                cls = self._read_content_parts(content)
            else:
                raise MalformedStream(
                    f"delta.content is {describe(content)}, not a string or an array of parts"
                )
        refusal = delta.get("refusal")
        if refusal:
            if type(refusal) is not str:
                raise MalformedStream(f"delta.refusal is {describe(refusal)}, not a string")
            self.text_parts.append(refusal)
            self._refused = True
            cls = EventClass.TEXT
        reasoning = delta.get("reasoning_content") or delta.get("reasoning")
        if reasoning:
            if type(reasoning) is not str:
                raise MalformedStream(f"delta reasoning is {describe(reasoning)}, not a string")
            self._reasoning_streamed = True
            self.other_output_parts.append(reasoning)
            if cls < EventClass.OUTPUT:
                cls = EventClass.OUTPUT
        details = delta.get("reasoning_details")
        if details:
            if type(details) is not list:
                raise MalformedStream(
                    f"delta.reasoning_details is {describe(details)}, not an array"
                )
            if self._read_reasoning_details(details, reasoning) and cls < EventClass.OUTPUT:
                cls = EventClass.OUTPUT
        tool_calls = delta.get("tool_calls")
        if tool_calls:
            if type(tool_calls) is not list:
                raise MalformedStream(f"delta.tool_calls is {describe(tool_calls)}, not an array")
            if self._read_tool_calls(tool_calls) and cls < EventClass.OUTPUT:
                cls = EventClass.OUTPUT
        else:
            legacy = delta.get("function_call")
            carried = bool(legacy) and self._read_function(legacy, "delta.function_call")
            if carried and cls < EventClass.OUTPUT:
                cls = EventClass.OUTPUT
        return cls

    def _read_reasoning_details(self, details: list[Any], reasoning: Any) -> bool:
        """OpenRouter's `reasoning_details` items; whether one carries generated text.

        `reasoning.text` (`text`) and `reasoning.summary` (`summary`) carry text when it is
        not empty; an item with only a `signature`, or `reasoning.encrypted` (`data`,
        reasoning that arrives whole and unreadable), carries no streamed token. The text
        usually repeats `delta.reasoning`, which is then not kept twice.
        """
        carried = False
        for item in details:
            if type(item) is not dict:
                raise MalformedStream(f"a reasoning_details item is {describe(item)}")
            text = item.get("text") or item.get("summary")
            if not text:
                continue
            if type(text) is not str:
                raise MalformedStream(f"a reasoning_details item's text is {describe(text)}")
            carried = True
            self._reasoning_streamed = True
            if not reasoning:
                self.other_output_parts.append(text)
        return carried

    def _read_tool_calls(self, tool_calls: list[Any]) -> bool:
        """Whether a `tool_calls` delta carries generated content: a function name or a
        non-empty piece of its arguments (a chunk with only an index and `""` does not)."""
        carried = False
        for call in tool_calls:
            if type(call) is not dict:
                raise MalformedStream(f"a tool call is {describe(call)}, not an object")
            function = call.get("function") or call.get("custom") or {}
            if function and self._read_function(function, "tool_calls[].function"):
                carried = True
            arguments = function.get("arguments", function.get("input"))
            call_id, name, index = call.get("id"), function.get("name"), call.get("index")
            if index is None:
                if not (call_id or name or arguments):
                    continue  # only a provider's metadata (Gemini's thought signature): no call
                index = self._unindexed_call(call_id)
            self._last_tool_index = index
            self.add_tool_call_delta(index, call_id, name, arguments)
        return carried

    def _unindexed_call(self, call_id: Any) -> int:
        """The index of a tool-call delta sent without one (Gemini's OpenAI-compatible
        endpoint): the call with its id, or a new call after the others when the id is
        new; without an id, the call the previous delta went to (its next piece)."""
        parts = self.tool_call_parts
        if call_id:
            for index, (known_id, _, _) in parts.items():
                if known_id == call_id:
                    return index
            return max(parts, default=-1) + 1
        return self._last_tool_index if self._last_tool_index is not None else 0

    def _read_function(self, function: Any, where: str) -> bool:
        """A function call's `name` and `arguments` (a custom tool's `input`) pieces."""
        if type(function) is not dict:
            raise MalformedStream(f"{where} is {describe(function)}, not an object")
        carried = False
        for key in ("name", "arguments", "input"):
            piece = function.get(key)
            if piece:
                if type(piece) is not str:
                    raise MalformedStream(f"{where}.{key} is {describe(piece)}, not a string")
                self.other_output_parts.append(piece)
                carried = True
        return carried

    def _read_content_parts(self, parts: list[Any]) -> int:
        """Mistral's content as a list of parts: `text` parts are visible text, `thinking`
        parts (a list of text chunks) are reasoning; other kinds carry no tokens."""
        cls = EventClass.IGNORE
        for part in parts:
            if type(part) is not dict:
                raise MalformedStream(f"a delta.content part is {describe(part)}, not an object")
            kind = part.get("type")
            if kind == "text":
                text = part.get("text")
                if text:
                    if type(text) is not str:
                        raise MalformedStream(f"a text part's text is {describe(text)}")
                    self.text_parts.append(text)
                    cls = EventClass.TEXT
            elif kind == "thinking":
                thinking = part.get("thinking")
                if thinking:
                    if type(thinking) is not list and type(thinking) is not str:
                        raise MalformedStream(f"a thinking part's thinking is {describe(thinking)}")
                    text = thinking if isinstance(thinking, str) else _thinking_text(thinking)
                    if text:  # a list of only empty text chunks carries nothing
                        self._reasoning_streamed = True
                        self.other_output_parts.append(text)
                        if cls < EventClass.OUTPUT:
                            cls = EventClass.OUTPUT
        return cls

    def want_logprobs(self, top_k: int) -> bool:
        """Read each choice's `logprobs.content` from now on (`labkit.providers.logprobs`).
        The reading step replaces `on_chunk` on this parser alone, so a parser not asked
        runs the plain `on_chunk`, without a lookup more."""
        self._logprobs = LogprobCollector(top_k)
        self.on_chunk = self._on_chunk_with_logprobs  # type: ignore[method-assign]
        return True

    def _on_chunk_with_logprobs(self, obj: dict[str, Any]) -> int:
        """`on_chunk`, after reading the chunk's logprobs into the collector: the visible
        text's tokens only (llama.cpp puts a token's logprobs on the chunk it produced,
        reasoning and tool-call arguments too; those steps are not kept)."""
        collector = self._logprobs
        choices = obj.get("choices")
        if collector is not None and type(choices) is list:
            for choice in choices:
                if type(choice) is dict:
                    logprobs = choice.get("logprobs")
                    if logprobs is not None and not _carries_other_output(choice.get("delta")):
                        collector.add_chat(logprobs)
        return OpenAIChatParser.on_chunk(self, obj)

    def _read_usage(self, value: Any, where: str) -> None:
        usage = wire_object(value, where)
        if usage is None:
            return
        self._usage_seen = True
        u = self.usage
        prompt = wire_count(usage.get("prompt_tokens"), f"{where}.prompt_tokens")
        if prompt is not None:
            u.input_tokens = prompt
        completion = wire_count(usage.get("completion_tokens"), f"{where}.completion_tokens")
        if completion is not None:
            u.output_tokens = completion
        total = wire_count(usage.get("total_tokens"), f"{where}.total_tokens")
        if total is not None:
            self._total_tokens = total
        details = wire_object(usage.get("prompt_tokens_details"), f"{where}.prompt_tokens_details")
        cached = details.get("cached_tokens") if details else None
        if cached is None:  # DeepSeek reports cache hits at the top level
            cached = usage.get("prompt_cache_hit_tokens")
        cached = wire_count(cached, f"{where} cached tokens")
        if cached is not None:
            u.cached_input_tokens = cached
            self.provider_timings.cached_tokens = cached
        out_details = wire_object(
            usage.get("completion_tokens_details"), f"{where}.completion_tokens_details"
        )
        if out_details:
            reasoning = wire_count(
                out_details.get("reasoning_tokens"),
                f"{where}.completion_tokens_details.reasoning_tokens",
            )
            if reasoning is not None:
                u.reasoning_tokens = reasoning

    def reported_streamed_tokens(self, output_events: int) -> int | None:
        """The output tokens the stream delivered, from the reported counts.

        OpenAI counts reasoning inside `completion_tokens`, streamed or not: reasoning that
        never arrived as deltas (gpt-5, o-series) is taken out. xAI leaves reasoning out of
        `completion_tokens` (`total_tokens = prompt + completion + reasoning`): streamed
        reasoning is added in, hidden reasoning was never counted there to begin with.
        llama.cpp and vLLM count the end-of-generation token a reply that stopped on its
        own ends with, and never stream it: it is taken out (`_counts_end_token`).
        """
        u = self.usage
        output, reasoning = u.output_tokens, u.reasoning_tokens
        if output is None:
            return None
        # the end token and hidden reasoning both out (a server counting both: issue 45)
        end = 1 if output > 0 and self._counts_end_token() else 0
        if not reasoning:
            return output - end
        total, prompt = self._total_tokens, u.input_tokens
        outside = total is not None and prompt is not None and total == prompt + output + reasoning
        if outside:
            return (output + reasoning if self._reasoning_streamed else output) - end
        if not self._reasoning_streamed:
            return max(output - end - reasoning, 0)
        return output - end

    def _counts_end_token(self) -> bool:
        """Whether `completion_tokens` holds an end token the stream never carried: the
        reply stopped on its own (`finish_reason` stop, no tool call) on a server that
        counts the end token it sampled (llama.cpp: `predicted_n` and `completion_tokens`
        are the content chunks + 1, measured on llama-server b0.3.36; vLLM:
        `len(output.token_ids)`, EOS included), known from the server's own timings or the
        entry's `server:`."""
        if self.stop_reason_raw != "stop" or self.tool_call_parts or self._refused:
            return False
        server = self.provider_timings.source or self._server
        return server in _END_TOKEN_COUNTERS

    def stop_reason(self) -> StopReason | None:
        """Map `finish_reason` to the contract's reasons; an answer that was a refusal
        (`delta.refusal`, which OpenAI ends with `stop`) is `refusal`, one that called
        tools and ended `stop` is `tool_call`."""
        raw = self.stop_reason_raw
        if raw is None:
            return None
        if self._refused and raw == "stop":
            return StopReason.REFUSAL
        if raw == "stop" and self.tool_call_parts:
            # A reply that called tools and ended "stop": OpenAI's forced tool_choice, and
            # Gemini's OpenAI-compatible stream for any tool call.
            return StopReason.TOOL_CALL
        return _STOP_REASONS.get(raw, StopReason.UNKNOWN)


#: `OpenAIChatParser`'s own reading steps as defined (`common_chunk` offers its shape only
#: while a parser's steps are these: not a subclass's, nor one replaced afterwards).
_OWN_ON_EVENT = OpenAIChatParser.on_event
_OWN_ON_CHUNK = OpenAIChatParser.on_chunk


def _thinking_text(chunks: list[Any]) -> str:
    """The text of Mistral's `thinking` chunks (`{"type": "text", "text": ...}`)."""
    texts = []
    for chunk in chunks:
        text = chunk.get("text") if type(chunk) is dict else chunk
        if text:
            if type(text) is not str:
                raise MalformedStream(f"a thinking chunk's text is {describe(text)}")
            texts.append(text)
    return "".join(texts)


#: Delta keys of generated output that is not visible text (reasoning, tool calls).
_OTHER_OUTPUT_KEYS = (
    "tool_calls",
    "function_call",
    "reasoning_content",
    "reasoning",
    "reasoning_details",
)


def _carries_other_output(delta: Any) -> bool:
    """Whether a delta carries reasoning or a tool call and no visible text: the tokens
    its logprobs are for are not the reply's text."""
    if type(delta) is not dict or delta.get("content"):
        return False
    return any(delta.get(key) for key in _OTHER_OUTPUT_KEYS)


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
    #: Which server timing shapes the parser reads when the settings name no `server:`.
    default_server: ClassVar[str] = "openai"
    #: "Caching is enabled for prompts containing 1024 tokens or more", in 128-token steps
    #: (platform.openai.com/docs/guides/prompt-caching).
    prompt_cache_min_tokens: ClassVar[int | None] = 1024

    def tool_format(self) -> ToolFormat | None:
        """Tools in its own tool-call format (`labkit.providers.tools`)."""
        return OpenAIChatTools()

    def wire_params(self, params: dict[str, Any]) -> dict[str, Any]:
        """OpenAI's current models take `max_completion_tokens` instead of `max_tokens`."""
        if "max_tokens" in params:
            params = dict(params)
            params["max_completion_tokens"] = params.pop("max_tokens")
        return params

    def logprob_params(self, top_k: int) -> SamplingParams:
        """`logprobs` and `top_logprobs` (Chat Completions; vLLM and llama.cpp take them
        as they are)."""
        return {"logprobs": True, "top_logprobs": top_k}

    def request_headers(self) -> dict[str, str]:
        """Authorization and optional organization headers."""
        headers = {}
        if self._api_key:
            headers["authorization"] = f"Bearer {self._api_key}"
        # Only OpenAI's own settings have the field: a name missing from a pydantic model
        # raises inside its __getattr__, ~3 µs a request for the other servers' settings.
        org = self.settings.__dict__.get("organization")
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
        client = self.client
        # A load level sends the same prompt and parameters again and again: a client that
        # keeps bodies (`MeasuredClient.keeps_bodies`) keeps the body's encoding by what
        # varies in it (the rest is this provider's own, but an `extra_body`).
        key = None
        if not self.settings.extra_body and getattr(client, "keeps_bodies", False):
            key = chat_body_key(request.messages, params)
        if key is not None:
            return cast(MeasuredClient, client).build_request(
                "POST",
                self.chat_path,
                json=body,
                headers=self.request_headers(),
                body_key=(self.chat_path, self.model, key),
            )
        return client.build_request(
            "POST", self.chat_path, json=body, headers=self.request_headers()
        )

    def server(self) -> str:
        """The `server:` hint of the settings, or this kind's default."""
        return str(getattr(self.settings, "server", None) or self.default_server)

    def new_parser(self) -> StreamParser:
        """A Chat Completions chunk parser reading the server's timing shapes, checking
        the output count with the model's offline tokenizer where there is one."""
        parser = OpenAIChatParser(self.server())
        parser.count_locally = self.count_locally
        return parser

    def count_input_locally(self, request: ChatRequest) -> TokenCount | None:
        """tiktoken count of the message contents with the model's encoding (offline), and
        the chat framing around them (`chat_framing_tokens`); None for a model of no
        OpenAI family."""
        tokenizer = tokenizer_for_model(self.model)
        if tokenizer is None:
            return None
        n = sum(tokenizer.count(m["content"]) for m in request.messages)
        return TokenCount(n, tokenizer.label, framing=self.chat_framing_tokens(request))

    def chat_framing_tokens(self, request: ChatRequest) -> int | None:
        """The tokens OpenAI's chat format adds to the contents: 3 per message, 1 more per
        `name`, and 3 priming the reply (OpenAI cookbook, "How to count tokens with
        tiktoken", `num_tokens_from_messages`)."""
        named = sum(1 for m in request.messages if m.get("name"))
        return 3 * len(request.messages) + named + 3

    def count_locally(self, text: str) -> TokenCount | None:
        """tiktoken count of `text`, where the model's encoding ships offline."""
        return self.count_input_locally(ChatRequest([{"role": "user", "content": text}]))

    async def count_tokens(self, text: str) -> TokenCount | None:
        """Chat Completions has no counting endpoint: tiktoken where it applies."""
        return self.count_input_locally(ChatRequest([{"role": "user", "content": text}]))

    async def describe(self) -> dict[str, Any]:
        """Nothing to report; builds the model's offline encoding now (about a second, off
        the event loop), so that the first request's `prepare_ms` does not pay for it."""
        await asyncio.to_thread(tokenizer_for_model, self.model)
        return {}

    async def tokenized(self, text: str) -> Tokenized | None:
        """The model's encoding's ids and pieces (offline tiktoken), for OpenAI's models."""
        tokenizer = tokenizer_for_model(self.model)
        return tokenizer.tokenize(text) if tokenizer is not None else None
