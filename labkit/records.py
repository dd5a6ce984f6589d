"""The record contract: one `RequestRecord` per request, one JSON line each.

Field names follow ``docs/measurement.md`` (the contract that reports and outside tools
read); they change only with a note in ``docs/migrations.md``. This module is a leaf: it
imports nothing else of labkit but `labkit.figures` (the typed figures of `LabAnswer`,
itself a leaf) and nothing of HTTP.

Conventions: every duration is milliseconds (float) from one origin, ``t_start``, taken
immediately before the request is handed to the transport. A value that was not observed
is ``None`` (``null``), never ``0``.
"""

from __future__ import annotations

import json
import os
from datetime import datetime
from enum import StrEnum
from typing import Annotated, Any, Literal, TypeVar

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    ValidationInfo,
    field_validator,
    model_validator,
)

from labkit.figures import Figures, RequestStats, read_figures

__all__ = [
    "MAX_ERROR_TEXT",
    "MAX_LOGPROBS_JSON",
    "MAX_RATE_LIMIT_HEADERS",
    "MAX_RAW_JSON",
    "MAX_RECORD_JSON",
    "MAX_SERVER_TEXT",
    "MAX_TOKEN_TEXT",
    "AppTimings",
    "ClientTimings",
    "DecodeNullReason",
    "ErrorKind",
    "LabAnswer",
    "LabResults",
    "LogprobStep",
    "OutputEvents",
    "OutputLogprobs",
    "ProviderTimings",
    "RecordClock",
    "RecordError",
    "RecordToolCall",
    "RequestRecord",
    "RequestTrace",
    "StopReason",
    "TokenCandidate",
    "Usage",
    "bound_raw",
    "cut_text",
    "new_record_id",
    "validated",
]


class StopReason(StrEnum):
    """Why generation stopped, normalised across providers (the raw string is kept too)."""

    END = "end"
    LENGTH = "length"
    STOP_SEQUENCE = "stop_sequence"
    TOOL_CALL = "tool_call"
    CONTENT_FILTER = "content_filter"
    REFUSAL = "refusal"
    ERROR = "error"
    CANCELLED = "cancelled"
    UNKNOWN = "unknown"


class ErrorKind(StrEnum):
    """What went wrong with a request."""

    HTTP_STATUS = "http_status"
    TIMEOUT = "timeout"
    CONNECTION = "connection"
    STREAM_ERROR = "stream_error"
    PROTOCOL = "protocol"
    CANCELLED = "cancelled"
    LOST = "lost"
    CONFIG = "config"
    INTERNAL = "internal"


#: Why `ClientTimings.decode_ms_per_token` is null where output was streamed: a closed set,
#: extended (never renamed) as new causes are told apart; docs/measurement.md defines each.
DecodeNullReason = Literal[
    "one_output_event", "one_token", "hidden_output", "no_output", "not_read", "not_measured"
]


# --- server text: what a server sends is stored at a bounded length -------------------------
# A record keeps strings a server chose (ids, stop reasons, header values, logprob tokens,
# timing objects); each is cut to a bound at the record's construction, so a hostile or
# broken server cannot make one record arbitrarily large (docs/measurement.md, "Bounds").

#: The most characters kept of a short string a server supplied: an id, a stop reason, a
#: backend fingerprint or build, a header's name or value, a tool call's id or name.
MAX_SERVER_TEXT = 256
#: The most characters kept of an error's message (it may quote what the server sent).
MAX_ERROR_TEXT = 1000
#: The most characters kept of a logprob token's text (the longest tokens of today's
#: vocabularies, runs of spaces or punctuation, are some 128 characters).
MAX_TOKEN_TEXT = 256
#: The most rate-limit headers a record keeps (providers send 4 to 12).
MAX_RATE_LIMIT_HEADERS = 16
#: The most bytes of JSON kept of `ProviderTimings.raw`; a larger object is replaced by a
#: note of its size.
MAX_RAW_JSON = 16 * 1024
#: The most bytes of JSON of a record's `logprobs` group; steps past it are dropped
#: (`OutputLogprobs.truncated`). 2,048 steps of 20 alternatives take about 2.3 MB with
#: tokens of 5 characters, so the steps bound comes first for ordinary text.
MAX_LOGPROBS_JSON = 2_500_000
#: A record's JSON line is at most this many bytes beside its reply: `output_text`, the tool
#: calls' `arguments` and the per-event lists (`client.event_offsets_ms` and the like), which
#: grow with the reply the request asked for.
MAX_RECORD_JSON = 2_600_000


def cut_text(text: str, limit: int = MAX_SERVER_TEXT) -> str:
    """`text`, or where it is longer than `limit` characters its start and a marker saying
    it was cut and from how many characters (``…[cut from 60000 chars]``), `limit`
    characters in all: cutting again changes nothing."""
    if len(text) <= limit:
        return text
    marker = f"…[cut from {len(text)} chars]"
    if limit < 2 * len(marker):
        return text[:limit]
    return text[: limit - len(marker)] + marker


def _cut_optional(text: str | None) -> str | None:
    return None if text is None else cut_text(text)


def _cut_headers(headers: dict[str, str] | None) -> dict[str, str] | None:
    if headers is None:
        return None
    kept = list(headers.items())[:MAX_RATE_LIMIT_HEADERS]
    return {cut_text(name): cut_text(value) for name, value in kept}


def _json_bytes(value: Any) -> int:
    """The bytes of `value` as JSON (non-ASCII as UTF-8, as records are written)."""
    return len(json.dumps(value, ensure_ascii=False, default=str).encode("utf-8"))


def _cut_strings(value: Any) -> Any:
    """`value` with every string in it (keys too) cut to `MAX_SERVER_TEXT`."""
    if isinstance(value, str):
        return cut_text(value)
    if isinstance(value, dict):
        return {cut_text(str(k)): _cut_strings(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_cut_strings(v) for v in value]
    return value


def bound_raw(raw: Any) -> Any:
    """A provider's timing object as a record keeps it: its strings cut to
    `MAX_SERVER_TEXT`, and replaced by a note of its size where its JSON is still over
    `MAX_RAW_JSON` bytes."""
    if raw is None:
        return None
    kept = _cut_strings(raw)
    size = _json_bytes(kept)
    if size > MAX_RAW_JSON:
        return {"cut": f"the provider's timing object was {size} bytes of JSON, not kept"}
    return kept


#: A short string a server supplied, cut to `MAX_SERVER_TEXT` characters.
ServerText = Annotated[str, AfterValidator(lambda t: cut_text(t))]
OptionalServerText = Annotated[str | None, AfterValidator(_cut_optional)]


_M = TypeVar("_M", bound=BaseModel)


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=False)


def new_record_id() -> str:
    """A fresh `RequestRecord.record_id`: a random (version 4) UUID's 32 hex digits, as
    ``uuid.uuid4().hex`` writes them, without the `uuid.UUID` object (most of uuid4's ~3 µs,
    paid once a request)."""
    raw = bytearray(os.urandom(16))
    raw[6] = (raw[6] & 0x0F) | 0x40  # version 4
    raw[8] = (raw[8] & 0x3F) | 0x80  # the RFC 4122 variant
    return raw.hex()


def validated(model: type[_M], fields: dict[str, Any]) -> _M:
    """``model(**fields)``: the same validation and the same instance, from pydantic's
    validator at once, without its Python ``__init__`` and the keywords packed and unpacked
    (about 2 µs warm a model; a request's record builds three, cold, between streams)."""
    instance: _M = model.__pydantic_validator__.validate_python(fields)
    return instance


class RecordError(_Model):
    """A failed request's error. The record keeps every timing it reached."""

    kind: ErrorKind = Field(description="Error class; see ErrorKind.")
    message: Annotated[str, AfterValidator(lambda t: cut_text(t, MAX_ERROR_TEXT))] = Field(
        description="One-line human message, free of secrets (at most `MAX_ERROR_TEXT` characters)."
    )
    status: int | None = Field(default=None, description="HTTP status when one was received.")
    retry_after_s: float | None = Field(
        default=None, description="The provider's `retry-after` header, in seconds."
    )
    body_excerpt: str | None = Field(
        default=None, description="First bytes of the error body (at most 500 characters)."
    )


class ClientTimings(_Model):
    """What this process observed on the wire, in ms from `t_start`."""

    queue_ms: float | None = Field(
        default=None,
        description="Wait inside labkit (concurrency limit, schedule) before t_start; "
        "never part of TTFT.",
    )
    connect_ms: float | None = Field(
        default=None,
        description="TCP connect done (DNS included), ms from t_start; a connection opened "
        "just before t_start (warm load levels) gives its connect's duration instead (TLS "
        "included), outside TTFT. Null on a reused or pre-opened connection.",
    )
    new_connection: bool | None = Field(
        default=None,
        description="Whether this request opened a connection of its own (connect_ms says "
        "how long); false: it reused one opened earlier (kept alive, or pre-opened before the "
        "level's clock); null: the transport reported no connection events.",
    )
    tls_ms: float | None = Field(
        default=None, description="TLS handshake done; null for plain HTTP or reuse."
    )
    request_sent_ms: float | None = Field(
        default=None,
        description="The request's last byte (headers and body) handed to the kernel; on "
        "httpx and the SDK path, when their write of the body returned (docs/measurement.md).",
    )
    headers_ms: float | None = Field(
        default=None, description="Response status and headers received (time to first byte)."
    )
    first_event_ms: float | None = Field(
        default=None, description="First SSE event of any kind; role-only and ping excluded."
    )
    ttft_ms: float | None = Field(
        default=None,
        description="First event carrying output: text, reasoning or tool-call delta.",
    )
    ttft_text_ms: float | None = Field(
        default=None,
        description="First event carrying visible text (differs from ttft_ms for reasoning "
        "models).",
    )
    last_token_ms: float | None = Field(default=None, description="Last event carrying output.")
    e2e_ms: float | None = Field(
        default=None, description="Stream fully consumed (usage chunk and terminator included)."
    )
    decode_ms_per_token: float | None = Field(
        default=None,
        description="(last_token_ms - ttft_ms) / (usage.streamed_output_tokens - 1); null under "
        "2 tokens or 2 output events, or when the streamed count is unknown "
        "(decode_null_reason).",
    )
    output_tokens_per_s: float | None = Field(
        default=None, description="1000 / decode_ms_per_token."
    )
    event_offsets_ms: list[float] = Field(
        default_factory=list, description="Arrival offset of every output-carrying event."
    )
    event_tokens: list[int] | None = Field(
        default=None,
        description="Tokens carried by each output event when known, else null.",
    )
    itl_ms_p50: float | None = Field(
        default=None, description="Median gap between consecutive output events."
    )
    itl_ms_p99: float | None = Field(
        default=None, description="99th percentile gap between consecutive output events."
    )
    itl_ms_max: float | None = Field(
        default=None, description="Largest gap between consecutive output events."
    )
    loop_lag_ms: float | None = Field(
        default=None,
        description="Retired (null in new records; see `stamp_lateness_ms_*`). In records "
        "written before: how late labkit's event loop ran while this stream was read "
        "(self-check), the 99th percentile of the 5 ms loop-lag probe's samples over it.",
    )
    stamp_source: Literal["kernel", "user"] | None = Field(
        default=None,
        description="Where the output events' stamps come from: `kernel` (the kernel's "
        "receive time of the read, labkit.wire.lean) or `user` (when the read "
        "reached labkit's code: httpx, the SDK path); null when no event was stamped.",
    )
    stamp_lateness_ms_p50: float | None = Field(
        default=None,
        description="Median over the output events of how late their stamps are (self-check): "
        "0 for kernel stamps; for user stamps labkit's estimate from its event loop's "
        "select() times (labkit.wire.loopclock). Null where no estimate was possible.",
    )
    stamp_lateness_ms_p99: float | None = Field(
        default=None,
        description="99th percentile over the output events of the same estimate.",
    )
    stamp_lateness_ms_max: float | None = Field(
        default=None, description="The largest over the output events of the same estimate."
    )
    stamp_lateness_ms: list[float] | None = Field(
        default=None,
        description="The same estimate per output event, aligned with event_offsets_ms "
        "(what a level's p99 is pooled from).",
    )
    ttft_lateness_ms: float | None = Field(
        default=None,
        description="The same estimate for the first output event's stamp (ttft_ms).",
    )
    read_lag_ms_p50: float | None = Field(
        default=None,
        description="Median over the output events of how long labkit took to read them "
        "after their kernel stamp (kernel stamps only): what the stamps would have been "
        "late by in user space.",
    )
    read_lag_ms_p99: float | None = Field(
        default=None, description="99th percentile over the output events of the same."
    )
    decode_null_reason: DecodeNullReason | None = Field(
        default=None,
        description="Why decode_ms_per_token is null; set whenever it is null: "
        "`one_output_event` (one event carried the whole answer: no interval to divide), "
        "`one_token` (the stream delivered under 2 tokens), `hidden_output` (the provider "
        "counted output the stream never carried, so the tokens streamed are unknown: "
        "usage.streamed_output_tokens null), `no_output` (no output event arrived: an "
        "error, an empty stream or one of metadata only), `not_read` (the reply's events "
        "could not be read into counts: error says why), `not_measured` (a record imported "
        "from another client that reported no decode or no output count). Null when decode "
        "was measured.",
    )

    # -- the request path: TTFT's client-side part (issue 30) --
    send_ms: float | None = Field(
        default=None,
        description="The client side of the request path: request_sent_ms less the "
        "connection this request opened inside TTFT (TCP connect, DNS and TLS included), "
        "i.e. the client's own time from t_start to the request's last byte handed to the "
        "kernel. Null where request_sent_ms is.",
    )


class ProviderTimings(_Model):
    """What the provider reported about itself. All null where it reports nothing."""

    prefill_ms: float | None = Field(
        default=None,
        description="llama.cpp timings.prompt_ms; Ollama prompt_eval_duration (ns -> ms); Groq "
        "x_groq.usage.prompt_time and Cerebras time_info.prompt_time (s -> ms).",
    )
    prefill_tokens: int | None = Field(
        default=None,
        description="llama.cpp timings.prompt_n (excludes cached); Ollama prompt_eval_count.",
    )
    decode_ms: float | None = Field(
        default=None,
        description="llama.cpp timings.predicted_ms; Ollama eval_duration; Groq "
        "x_groq.usage.completion_time and Cerebras time_info.completion_time (s -> ms); vLLM "
        "metrics.generation_time_ms.",
    )
    decode_ms_per_token: float | None = Field(
        default=None,
        description="llama.cpp timings.predicted_per_token_ms; Ollama eval_duration/eval_count; "
        "vLLM metrics.mean_itl_ms; TGI `x-time-per-token` header (ms).",
    )
    cached_tokens: int | None = Field(
        default=None,
        description="llama.cpp timings.cache_n; OpenAI cached_tokens; Anthropic "
        "cache_read_input_tokens.",
    )
    load_ms: float | None = Field(default=None, description="Ollama load_duration.")
    processing_ms: float | None = Field(
        default=None,
        description="OpenAI `openai-processing-ms` header (server time up to the headers).",
    )
    queue_ms: float | None = Field(
        default=None,
        description="Time the request waited in the provider's queue before it was scheduled: "
        "Groq x_groq.usage.queue_time and Cerebras time_info.queue_time (s -> ms); vLLM "
        "metrics.queue_time_ms; TGI `x-queue-time` header (ms).",
    )
    server_ttft_ms: float | None = Field(
        default=None,
        description="The server's own time to first token: vLLM metrics.time_to_first_token_ms "
        "(from scheduling, queue excluded); Fireworks perf_metrics / header "
        "`fireworks-server-time-to-first-token` (s -> ms).",
    )
    server_total_ms: float | None = Field(
        default=None,
        description="The server's own time for the whole request: Groq x_groq.usage.total_time "
        "and Cerebras time_info.total_time (s -> ms); Fireworks "
        "`fireworks-server-processing-time` (s -> ms); TGI `x-total-time` (or `x-compute-time`, "
        "ms).",
    )
    inference_ms: float | None = Field(
        default=None,
        description="Prefill and decode together, where the server reports only their sum: TGI "
        "`x-inference-time` header (ms).",
    )
    server_output_tokens_per_s: float | None = Field(
        default=None,
        description="The server's own decode rate: vLLM metrics.tokens_per_second; llama.cpp "
        "timings.predicted_per_second.",
    )
    keepalive_comments: int | None = Field(
        default=None,
        description="SSE comments (`: keep-alive`) received before the first data event: "
        "DeepSeek sends them while a request waits (a queue signal). Wire path only; null "
        "when none came.",
    )
    keepalive_last_ms: float | None = Field(
        default=None,
        description="Arrival of the last of those comments, in ms from t_start (wire path).",
    )
    keepalive_gateway: str | None = Field(
        default=None,
        description="The gateway those comments came from, known by their text (`openrouter`: "
        "`: OPENROUTER PROCESSING`): the wait behind them is the gateway's, and holds the "
        "upstream provider's queue and prefill together, so it is no queue signal. Null: "
        "the server's own keep-alives (DeepSeek), or no comments (labkit extension, issue "
        "44).",
    )
    source: str | None = Field(
        default=None,
        description="Which server shape filled these fields (`groq`, `cerebras`, `fireworks`, "
        "`vllm`, `tgi`, `llamacpp`, `openai`), detected from the fields that "
        "arrived or forced by the `server:` setting (labkit extension).",
    )
    raw: dict[str, Any] | None = Field(
        default=None,
        description="The provider's timing object as received (headers under `headers`).",
    )


class AppTimings(_Model):
    """labkit's (and the SDK's) own cost, off the wire."""

    prepare_ms: float | None = Field(
        default=None,
        description="Building the request body and local token counting, before t_start.",
    )
    parse_cpu_ms: float | None = Field(
        default=None,
        description="Time spent decoding this stream's events (SSE framing, JSON, "
        "classification). Wire path only: null on the SDK path, whose decoding happens inside "
        "the SDK's iterator together with the wait for the socket and cannot be told apart "
        "from it (see cpu_ms).",
    )
    cpu_ms: float | None = Field(
        default=None,
        description="CPU time of labkit's thread (`time.thread_time_ns`) from t_start to the "
        "end of the stream: HTTP, TLS, decoding and the event loop, on either path. Under "
        "concurrency it includes the work of the other requests in flight on that thread. On "
        "the SDK path it includes labkit reading each object the SDK yields (off its "
        "attributes, no serialisation), as the wire path's includes its classification.",
    )
    client_path: Literal["wire", "sdk"] = Field(
        default="wire", description="`wire` (labkit's own HTTP) or `sdk` (the official SDK)."
    )


class Usage(_Model):
    """Token counts. Provider counts are authoritative; local counts are labkit's own."""

    input_tokens: int | None = Field(
        default=None, description="Prompt tokens as the provider reported them."
    )
    output_tokens: int | None = Field(
        default=None,
        description="Output tokens as the provider reported them (or counted locally, "
        "see output_tokens_source). Includes reasoning tokens.",
    )
    cached_input_tokens: int | None = Field(
        default=None,
        description="Prompt tokens served from the provider's cache. Included in input_tokens.",
    )
    reasoning_tokens: int | None = Field(
        default=None, description="Reasoning tokens. Included in output_tokens."
    )
    cache_write_input_tokens: int | None = Field(
        default=None,
        description="Prompt tokens written to the provider's cache (Anthropic "
        "cache_creation_input_tokens). Included in input_tokens; priced at the cache-write "
        "price (docs/pricing.md).",
    )
    input_tokens_local: int | None = Field(
        default=None, description="labkit's own count of the prompt."
    )
    tokenizer: str | None = Field(
        default=None, description="Which tokenizer gave input_tokens_local."
    )
    input_tokens_local_diff: int | None = Field(
        default=None,
        description="labkit extension: input_tokens − input_tokens_local − the chat framing "
        "the provider documents (OpenAI: 3 tokens per message, 1 per name, 3 priming the "
        "reply): the prompt tokens neither explains. 0 when the local tokenizer is the "
        "provider's; any other value is flagged (a wrong model → encoding map, a changed "
        "template). Null when either count is missing or the framing is unknown.",
    )
    output_tokens_source: Literal["provider", "local"] | None = Field(
        default=None,
        description="`provider`, or `local` when the provider sent no usage (flagged in reports).",
    )
    streamed_output_tokens: int | None = Field(
        default=None,
        description="Output tokens the stream itself delivered (visible text, streamed "
        "reasoning, tool calls): the count decode time is taken over. Smaller than "
        "output_tokens when reasoning was counted but never streamed (OpenAI reasoning "
        "models), and by one when llama.cpp or vLLM counted the end token of a reply that "
        "stopped on its own; larger when streamed reasoning is left out of output_tokens "
        "(xAI).",
    )
    # --- the stream's account of the output count (issue 24) ---
    output_count_unaccounted: bool | None = Field(
        default=None,
        description="labkit extension: true when the output count taken as streamed (the "
        "provider's output_tokens less the reasoning it reported as hidden) is more than "
        "the streamed content can hold (its tokens by the model's own tokenizer where "
        "labkit has it, else its UTF-8 bytes, plus 64 for special tokens): output was "
        "generated and neither streamed nor reported as reasoning (a gateway reporting "
        "reasoning_tokens 0 for hidden or encrypted reasoning). Then streamed_output_tokens "
        "and decode are null. False: checked and accounted for; null: no count to check.",
    )
    streamed_output_null_reason: str | None = Field(
        default=None,
        description="labkit extension: why streamed_output_tokens (and so client decode) is "
        "null while output_tokens is known: hidden output the stream cannot account for, "
        "redacted or omitted thinking without a reported thinking count, a reasoning "
        "summary of no reported count. Null when streamed_output_tokens is known.",
    )


class RecordClock(_Model):
    """How a record measured on another host maps onto the driver's clock (labkit extension;
    `labkit.clocksync`): add an offset to a time read on that host's `perf_counter_ns`."""

    offset_ns: int = Field(
        description="The host's clock offset to the driver's, estimated before the level "
        "(the shortest of repeated round trips, as NTP does)."
    )
    uncertainty_ns: int = Field(
        description="Half that round trip: the true offset is within ± this."
    )
    offset_after_ns: int | None = Field(
        default=None,
        description="The offset estimated again after the level; null when the record was "
        "written before that closing exchange.",
    )
    uncertainty_after_ns: int | None = Field(
        default=None, description="The after estimate's uncertainty; null with it."
    )


class RequestTrace(_Model):
    """The request's place in a distributed trace (labkit extension; `labkit.tracing`): the
    W3C trace context it sent, so a server's spans and logs join this record."""

    trace_id: str = Field(
        description="W3C trace id (32 hex digits): one per run, derived from `run_id`, shared "
        "by every request of the run and its run, experiment and level spans."
    )
    span_id: str = Field(
        description="This request's span id (16 hex digits, random per request): the "
        "parent-id of the `traceparent` header sent, and the span `labkit export-otel` writes."
    )
    parent_span_id: str = Field(
        description="The span this request's span belongs to: its load level's, or its "
        "experiment's outside levels (derived from run, provider, experiment and level)."
    )
    propagated: bool = Field(
        description="Whether `traceparent` and `x-request-id` were sent with the request "
        "(`tracing.headers` in the config); the ids are kept either way."
    )
    request_id_sent: str | None = Field(
        default=None,
        description="The `x-request-id` header sent (the record's `record_id`); null when "
        "nothing was sent. Servers that adopt it (vLLM) echo it back in `request_id` and put "
        "it in `response_id`.",
    )


class RecordToolCall(_Model):
    """One tool call a reply made: as the provider streamed it, or as labkit read it from
    the reply's text on a turn a grammar forced to call (labkit extension)."""

    id: ServerText = Field(
        description="The provider's call id (`call_...`, `toolu_...`); `text_N` for a call "
        "read from the text."
    )
    name: ServerText = Field(description="The function called.")
    arguments: str = Field(default="", description="Its arguments, the JSON text as streamed.")
    source: Literal["provider", "text"] = Field(
        default="provider",
        description="`provider`: the provider sent it as a call object; `text`: the provider "
        "sent text only (the call's JSON, forced by a grammar) and labkit read the call from "
        "it (`ToolFormat.calls_in_text`).",
    )


class RequestRecord(_Model):
    """One request, as measured. Serialised as one JSON line in `records.jsonl`."""

    run_id: str = Field(description="The run this record belongs to.")
    record_id: str = Field(description="Unique id of this record.")
    experiment: str = Field(description="Experiment kind (single, token_ratio, ...).")
    trial: int = Field(default=0, description="Repeat index within the experiment.")
    attempt: int = Field(default=1, description="1 for the first attempt; retries count up.")
    warmup: bool = Field(default=False, description="Warm-up request: stored, never in stats.")
    provider: str = Field(description="Provider id from the config.")
    provider_kind: str = Field(description="openai, anthropic, openai_compatible, llamacpp, ...")
    model: str = Field(description="Model asked for.")
    params: dict[str, Any] = Field(
        default_factory=dict, description="Sampling parameters actually sent."
    )
    prompt_id: str = Field(description="Which prompt.")
    prompt_chars: int = Field(description="Prompt size in characters.")
    prompt_bytes: int = Field(description="Prompt size in UTF-8 bytes.")
    started_at: datetime = Field(description="Wall clock (UTC) at t_start.")
    t_start_mono_ns: int | None = Field(
        default=None,
        description="`time.perf_counter_ns()` at t_start: this host's monotonic clock, so the "
        "records of one run (worker processes included) line up on one time axis; "
        "meaningless across hosts or reboots (labkit extension).",
    )
    host: str | None = Field(
        default=None,
        description="The host that measured this record; null: the driver's own host "
        "(labkit extension).",
    )
    clock: RecordClock | None = Field(
        default=None,
        description="Its host's clock offset to the driver's; null on the driver's host "
        "(labkit extension).",
    )
    client: ClientTimings = Field(default_factory=ClientTimings)
    provider_timings: ProviderTimings = Field(default_factory=ProviderTimings)
    app: AppTimings = Field(default_factory=AppTimings)
    usage: Usage = Field(default_factory=Usage)
    stop_reason: StopReason | None = Field(default=None, description="Normalised stop reason.")
    stop_reason_raw: OptionalServerText = Field(
        default=None, description="The provider's own string."
    )
    response_id: OptionalServerText = Field(default=None, description="Provider's response id.")
    request_id: OptionalServerText = Field(
        default=None, description="Provider's request id header (x-request-id, request-id)."
    )
    system_fingerprint: OptionalServerText = Field(default=None, description="OpenAI backend id.")
    server_build: OptionalServerText = Field(
        default=None, description="llama.cpp /props build_info."
    )
    rate_limits: Annotated[dict[str, str] | None, AfterValidator(_cut_headers)] = Field(
        default=None,
        description="Rate-limit response headers as sent, the first `MAX_RATE_LIMIT_HEADERS` "
        "(labkit extension).",
    )
    plan_key: str | None = Field(
        default=None,
        description="Which planned request this is; `labkit run --resume` skips recorded keys "
        "(labkit extension).",
    )
    tags: dict[str, str | int | float | bool] = Field(
        default_factory=dict,
        description="Experiment labels (variant, prompt length, ...) (labkit extension).",
    )
    output_text: str | None = Field(
        default=None, description="Generated text; null when `store_text: false`."
    )
    error: RecordError | None = Field(default=None, description="null, or what went wrong.")
    trace: RequestTrace | None = Field(
        default=None,
        description="The trace context sent with the request (labkit extension); null in "
        "records written before it existed and outside runs.",
    )
    tool_calls: list[RecordToolCall] | None = Field(
        default=None,
        description="The tool calls the reply made, in order; null: none (labkit extension).",
    )
    logprobs: OutputLogprobs | None = Field(
        default=None,
        description="Per output token, its log-probability and top alternatives, when the "
        "experiment asked for them and the provider gave them (null otherwise).",
    )
    event_detail: OutputEvents | None = Field(
        default=None,
        description="Per output event, its text and the server's own time at it, when the "
        "experiment asked for them (`token_view`; null otherwise).",
    )

    @model_validator(mode="after")
    def _bound_raw(self) -> RequestRecord:
        # `provider_timings` is filled in place while a stream is read, so its `raw` is
        # bounded here, where the record is made, rather than where it was assigned.
        timings = self.provider_timings
        if timings.raw is not None:
            timings.raw = bound_raw(timings.raw)
        return self

    @property
    def ok(self) -> bool:
        """True when the request completed without error."""
        return self.error is None

    def to_json_line(self) -> str:
        """One JSON line (no trailing newline), nulls included."""
        return self.model_dump_json()

    def to_json_bytes(self) -> bytes:
        """`to_json_line` as the UTF-8 bytes pydantic writes it in, before its decoding to
        a str (what a file write takes: no decoding and encoding again)."""
        return self.__pydantic_serializer__.to_json(self)

    @classmethod
    def from_json_line(cls, line: str) -> RequestRecord:
        """Parse one line of `records.jsonl`."""
        return cls.model_validate_json(line)


class LabAnswer(_Model):
    """One experiment's computed answer for one provider (an entry of `lab.json`).

    `figures` holds the numbers the answer was computed from: one typed model per
    experiment kind (`labkit.figures`, told apart by `figures.kind`), read by the run
    summary and the report. A `lab.json` from before figures were typed still loads (see
    `labkit.figures.read_figures`, docs/runs.md "lab.json" and docs/migrations.md).
    """

    experiment: str = Field(description="Experiment kind: single, token_ratio, ...")
    provider: str = Field(description="Provider id from the config.")
    model: str | None = Field(default=None, description="Model asked for.")
    question: str = Field(description="The lab question, in one sentence.")
    answer: str = Field(description="The answer in plain sentences, with the measured numbers.")
    figures: Figures | None = Field(
        default=None,
        description="The computed figures behind the answer (None: the analysis failed).",
    )
    status: Literal["ok", "partial", "failed"] = Field(
        default="ok", description="`failed` when no successful measurement was available."
    )

    @field_validator("figures", mode="before")
    @classmethod
    def _older_figures(cls, value: Any, info: ValidationInfo) -> Any:
        return read_figures(value, str(info.data.get("experiment", "")))


class LabResults(_Model):
    """The content of `lab.json`: every experiment's answer for every provider."""

    run_id: str
    answers: list[LabAnswer] = Field(default_factory=list)
    requests: list[RequestStats] | None = Field(
        default=None,
        description="Request statistics per provider × experiment × model × client path "
        "(`labkit.analysis.requests`); None in a lab.json from before they were stored.",
    )


# --- logprobs: the model's candidates per output token (a field group of its own) ----------

#: The most alternatives kept per output token (OpenAI's own ceiling for `top_logprobs`).
MAX_TOP_LOGPROBS = 20
#: The most output tokens whose logprobs a record keeps; later ones are dropped and the
#: group says `truncated`. With 20 alternatives a step is about 1 kB of JSON: 2 MB a record.
MAX_LOGPROB_STEPS = 2048


#: A logprob token's text, cut to `MAX_TOKEN_TEXT` characters.
TokenText = Annotated[str, AfterValidator(lambda t: cut_text(t, MAX_TOKEN_TEXT))]


class TokenCandidate(_Model):
    """One token the model could have produced at a step, and its log-probability."""

    token: TokenText = Field(description="The token's text as the provider sent it.")
    logprob: float = Field(description="Natural log of its probability (<= 0).")


class LogprobStep(_Model):
    """One output token: the token chosen, its log-probability, and the top alternatives."""

    token: TokenText = Field(description="The chosen token's text as the provider sent it.")
    logprob: float = Field(description="Natural log of the chosen token's probability.")
    top: list[TokenCandidate] = Field(
        default_factory=list,
        description="The most likely tokens at this step, most likely first (at most "
        "`MAX_TOP_LOGPROBS`); may include the chosen one.",
    )


class OutputLogprobs(_Model):
    """The per-token logprobs of one reply (`RequestRecord.logprobs`), asked for with
    `top_logprobs`; absent unless asked for, and bounded (`MAX_LOGPROB_STEPS` steps of at
    most `MAX_TOP_LOGPROBS` alternatives)."""

    top_k: int = Field(description="Alternatives asked for per step.")
    steps: list[LogprobStep] = Field(
        default_factory=list, description="One per output token, in order."
    )
    truncated: bool = Field(
        default=False,
        description="True when steps past `MAX_LOGPROB_STEPS` or past `MAX_LOGPROBS_JSON` "
        "bytes of JSON were dropped.",
    )

    @model_validator(mode="after")
    def _within_json_budget(self) -> OutputLogprobs:
        """Drop the steps past `MAX_LOGPROBS_JSON` bytes of JSON (an upper estimate)."""
        total = 64
        for i, step in enumerate(self.steps):
            total += _STEP_JSON + _ENTRY_JSON + _text_json_bytes(step.token)
            for alt in step.top:
                total += _ENTRY_JSON + _text_json_bytes(alt.token)
            if total > MAX_LOGPROBS_JSON:
                del self.steps[i:]
                self.truncated = True
                break
        return self


#: The JSON of one logprob entry beside its token's text, at the most: ``{"token":`` and
#: ``,"logprob":``, a float's 24 characters at the longest, the brace and a comma.
_ENTRY_JSON = 46
#: What a step adds to its entry: ``,"top":[]``.
_STEP_JSON = 9


def _text_json_bytes(text: str) -> int:
    """The bytes of `text` as a JSON string (exact for plain ASCII, the common case)."""
    if text.isascii() and text.isprintable() and '"' not in text and "\\" not in text:
        return len(text) + 2
    return _json_bytes(text)


class OutputEvents(_Model):
    """Each output event of one reply as it arrived (`RequestRecord.event_detail`), aligned
    with `client.event_offsets_ms`; absent unless asked for (`ChatRequest.event_detail`)."""

    texts: list[str] = Field(
        default_factory=list,
        description='The visible text each output event carried, in order ("" for an event '
        "of reasoning or a tool call's arguments).",
    )
    server_ms: list[float | None] | None = Field(
        default=None,
        description="The server's own time at each output event, in ms from the start of its "
        "prompt processing (llama.cpp with `timings_per_token`: `prompt_ms` + `predicted_ms` "
        "of the chunk that carried it; null where a chunk had none); null: the API reports "
        "no per-token time.",
    )


RequestRecord.model_rebuild()  # `logprobs` names a model defined after the record
