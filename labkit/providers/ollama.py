"""Ollama's native chat API (`POST /api/chat`, streamed as newline-delimited JSON).

Each line is one JSON object; the last one has ``done: true`` with ``done_reason`` and the
server's own account in nanoseconds (prefill, decode, model load), read into the record's
usage and `ProviderTimings`. A local server needs no key. The official ``ollama`` Python
client gets no SDK adapter; the wire path reads the same bytes. Wire facts: docs/providers.md,
"Ollama" (from ollama/ollama `api/types.go` `ChatResponse` and `Metrics`).
"""

from __future__ import annotations

import json
from typing import Any, ClassVar

import httpx
from pydantic import Field

from labkit.errors import MalformedStream
from labkit.providers._wire import (
    describe,
    load_event_object,
    wire_count,
    wire_list,
    wire_number,
    wire_object,
    wire_str,
)
from labkit.providers.base import (
    ChatRequest,
    EventClass,
    Provider,
    ProviderSettings,
    StreamParser,
    register,
)
from labkit.providers.tools import OllamaTools, ToolFormat
from labkit.records import ErrorKind, RecordError, StopReason
from labkit.wire.connections import DESCRIBE, own_request
from labkit.wire.sse import NDJSONParser, SSEEvent, SSEParser

__all__ = ["OllamaParser", "OllamaProvider", "OllamaSettings"]

_STOP_REASONS = {
    "stop": StopReason.END,
    "length": StopReason.LENGTH,
}

#: Request fields that Ollama reads at the top level; every other parameter is a model
#: option and goes under `options`.
_TOP_LEVEL_PARAMS = frozenset({"think", "keep_alive", "format", "tools"})

#: The done object's fields that are the server's account of the request.
_TIMING_FIELDS = (
    "total_duration",
    "load_duration",
    "prompt_eval_count",
    "prompt_eval_cached_count",
    "prompt_eval_duration",
    "eval_count",
    "eval_duration",
)

_NS_PER_MS = 1_000_000


class OllamaSettings(ProviderSettings):
    """An Ollama entry: a local server at 127.0.0.1:11434 unless `base_url` says otherwise."""

    base_url: str | None = Field(
        default=None,
        description="The server root, e.g. http://127.0.0.1:11434 (a trailing /api is accepted).",
    )

    default_base_url: ClassVar[str | None] = "http://127.0.0.1:11434"
    key_required: ClassVar[bool] = False

    def resolved_base_url(self) -> str:
        """The server root; a trailing `/api` is dropped (the chat path adds it)."""
        return super().resolved_base_url().removesuffix("/api")


class OllamaParser(StreamParser):
    """Reads `/api/chat` lines: `message.content` is TEXT, `message.thinking` and
    `message.tool_calls` are OUTPUT, the `done: true` object is the terminator (DONE, or
    TEXT/OUTPUT when it still carries output) with usage, stop reason and timings.

    Counts arrive once, on the done object: `prompt_eval_count` is the prompt (cache hits
    included), `eval_count` every generated token, thinking included; both are taken as
    they are. Thinking is streamed, so the stream delivers all of `eval_count`.
    """

    def __init__(self) -> None:
        super().__init__()
        self._tool_called = False

    def on_event(self, event: SSEEvent) -> int:
        """Classify one line; the done object's counts and durations are read here too."""
        obj = load_event_object(event.data)
        message = obj.get("message")
        cls = EventClass.IGNORE
        if message is not None:
            if type(message) is not dict:
                raise MalformedStream(f"message is {describe(message)}, not an object")
            content = message.get("content")
            if content:
                if type(content) is not str:
                    raise MalformedStream(f"message.content is {describe(content)}, not a string")
                self.text_parts.append(content)
                cls = EventClass.TEXT
            thinking = message.get("thinking")
            if thinking:
                if type(thinking) is not str:
                    raise MalformedStream(f"message.thinking is {describe(thinking)}, not a string")
                self.other_output_parts.append(thinking)
                if cls < EventClass.OUTPUT:
                    cls = EventClass.OUTPUT
            tool_calls = wire_list(message.get("tool_calls"), "message.tool_calls")
            if tool_calls:  # whole calls, each a generated name and arguments
                self._tool_called = True
                self.other_output_parts.append(repr(tool_calls))
                for call in tool_calls:  # arguments as an object
                    function = call.get("function") if type(call) is dict else None
                    if type(function) is dict:
                        # Newer servers send the call's own `id`; older ones none.
                        sent_id = call.get("id")
                        self.add_tool_call_delta(
                            len(self.tool_call_parts),
                            sent_id or f"call_{len(self.tool_call_parts)}",
                            function.get("name"),
                            json.dumps(function.get("arguments") or {}, default=str),
                        )
                if cls < EventClass.OUTPUT:
                    cls = EventClass.OUTPUT
        error = obj.get("error")
        if error:
            text = error if type(error) is str else describe(error)
            self.error = RecordError(
                kind=ErrorKind.STREAM_ERROR, message=f"error event in stream: {text}"[:300]
            )
            return EventClass.META
        done = obj.get("done")
        if done is None or done is False:
            return cls
        if done is not True:
            raise MalformedStream(f"done is {describe(done)}, not a boolean")
        self.ended = True  # the `done: true` line is the stream's last
        self._read_done(obj)
        return cls if cls != EventClass.IGNORE else EventClass.DONE

    def _read_done(self, obj: dict[str, Any]) -> None:
        """The final object: stop reason, token counts and the server's durations."""
        self.stop_reason_raw = wire_str(obj.get("done_reason"), "done_reason") or None
        prompt = wire_count(obj.get("prompt_eval_count"), "prompt_eval_count")
        cached = wire_count(obj.get("prompt_eval_cached_count"), "prompt_eval_cached_count")
        output = wire_count(obj.get("eval_count"), "eval_count")
        prefill_ns = wire_number(obj.get("prompt_eval_duration"), "prompt_eval_duration")
        decode_ns = wire_number(obj.get("eval_duration"), "eval_duration")
        load_ns = wire_number(obj.get("load_duration"), "load_duration")
        wire_number(obj.get("total_duration"), "total_duration")
        u, pt = self.usage, self.provider_timings
        u.input_tokens = prompt
        u.output_tokens = output
        if cached is not None:
            u.cached_input_tokens = cached
            pt.cached_tokens = cached
        if prompt is not None:
            # Tokens the server evaluated: cache hits are inside prompt_eval_count.
            pt.prefill_tokens = max(prompt - (cached or 0), 0)
        if prefill_ns is not None:
            pt.prefill_ms = prefill_ns / _NS_PER_MS
        if decode_ns is not None:
            pt.decode_ms = decode_ns / _NS_PER_MS
            if output:
                pt.decode_ms_per_token = decode_ns / _NS_PER_MS / output
        if load_ns is not None:
            pt.load_ms = load_ns / _NS_PER_MS
        raw = {k: obj[k] for k in _TIMING_FIELDS if k in obj}
        pt.raw = raw or None

    @property
    def finished(self) -> bool:
        """Whether the `done: true` object arrived."""
        return self.ended

    def stop_reason(self) -> StopReason | None:
        """`done_reason` mapped (a done object without one, from servers before it existed,
        is a natural end); a turn that called a tool ends with `stop`, which is `tool_call`
        here. None until the done object arrived."""
        if not self.ended:
            return None
        raw = self.stop_reason_raw or "stop"
        if self._tool_called and raw == "stop":
            return StopReason.TOOL_CALL
        return _STOP_REASONS.get(raw, StopReason.UNKNOWN)


@register
class OllamaProvider(Provider):
    """An Ollama server's native `/api/chat`, with its own prefill, decode and load times."""

    kind: ClassVar[str] = "ollama"
    settings_model: ClassVar[type[ProviderSettings]] = OllamaSettings

    reports_server_timings: ClassVar[bool] = True

    def tool_format(self) -> ToolFormat | None:
        """Tools in its own tool-call format (`labkit.providers.tools`)."""
        return OllamaTools()

    def wire_params(self, params: dict[str, Any]) -> dict[str, Any]:
        """Ollama's names: `max_tokens` is `num_predict`, a single `stop` string becomes a
        list; the rest keep their names (`temperature`, `seed`, `top_p`, `top_k`, ...)."""
        sent = dict(params)
        if "max_tokens" in sent:
            sent["num_predict"] = sent.pop("max_tokens")
        stop = sent.get("stop")
        if isinstance(stop, str):
            sent["stop"] = [stop]
        return sent

    def build_request(self, request: ChatRequest, params: dict[str, Any]) -> httpx.Request:
        """A streaming `/api/chat` request: model options under `options`, the request-level
        fields (`think`, `keep_alive`, `format`, `tools`) beside them."""
        options = {k: v for k, v in params.items() if k not in _TOP_LEVEL_PARAMS}
        top = {k: v for k, v in params.items() if k in _TOP_LEVEL_PARAMS}
        extra = dict(self.settings.extra_body)
        extra_options = extra.pop("options", None)
        if isinstance(extra_options, dict):
            options = {**extra_options, **options}
        body: dict[str, Any] = {
            **extra,
            "model": self.model,
            "messages": request.messages,
            **top,
            "stream": True,
        }
        if options:
            body["options"] = options
        return self.client.build_request(
            "POST", "/api/chat", json=body, headers=self.request_headers()
        )

    def request_headers(self) -> dict[str, str]:
        """``Authorization: Bearer KEY`` where the entry names a key (`api_key_env`): the
        hosted API (ollama.com) and an authenticating proxy in front of a server read it; a
        local server ignores it. No key, no header."""
        return {"authorization": f"Bearer {self._api_key}"} if self._api_key else {}

    def new_framer(self) -> SSEParser:
        """Newline-delimited JSON, not SSE."""
        return NDJSONParser()

    def new_parser(self) -> StreamParser:
        """An `/api/chat` line parser."""
        return OllamaParser()

    async def describe(self) -> dict[str, Any]:
        """`GET /api/version`: the server's version; sets `server_build`."""
        resp = await own_request(
            self.client, "GET", "/api/version", DESCRIBE, headers=self.request_headers()
        )
        resp.raise_for_status()
        version = wire_object(resp.json(), "/api/version") or {}
        self.server_build = wire_str(version.get("version"), "version")
        return {"version": self.server_build}
