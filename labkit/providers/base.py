"""The one small interface every provider implements, and the registry that maps `kind` to it.

A provider is three things: a settings model (`ProviderSettings` subclass: what a YAML entry
of its `kind` may say), a `Provider` (builds the wire request, counts tokens, describes the
server) and a `StreamParser` (reads one response's events, classifies each, collects usage,
stop reason, ids and the provider's own timings). The measurement core (`labkit.measurement`)
owns the clock and the connections; providers never time anything themselves. Adding a
provider means adding one module and decorating its class with `@register`
(docs/adding-a-provider.md).
"""

from __future__ import annotations

import json
import os
import re
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Literal, Protocol, TypeAlias, TypeVar
from urllib.parse import urlsplit

import httpx
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    JsonValue,
    PositiveFloat,
    PositiveInt,
    ValidationInfo,
    field_validator,
)

from labkit.errors import MalformedStream, ProviderUnavailable
from labkit.provider_stats import LaterStats
from labkit.providers.logprobs import LogprobCollector
from labkit.records import (
    OutputEvents,
    OutputLogprobs,
    ProviderTimings,
    RecordError,
    RecordToolCall,
    StopReason,
    Usage,
)
from labkit.scrub import register_environment_credentials, register_secret
from labkit.tokenizers import Tokenized
from labkit.wire.connections import Connections
from labkit.wire.proxies import is_loopback, proxy_for, unusable_because
from labkit.wire.sse import SSEEvent, SSEParser

if TYPE_CHECKING:  # tools import records only; the annotation needs no runtime import
    from labkit.providers.tools import ToolFormat

__all__ = [
    "ChatRequest",
    "ClientPath",
    "EventClass",
    "ManagedServerHandle",
    "Provider",
    "ProviderSettings",
    "ResponseHeaders",
    "SDKAdapter",
    "SamplingParams",
    "StreamParser",
    "Timeouts",
    "TokenCount",
    "account_for_stream",
    "check_base_url",
    "connections_for",
    "gateway_of_comment",
    "one_choice",
    "provider_class",
    "provider_kinds",
    "register",
    "sdk_available",
    "with_root_path",
]

#: How a request is sent: `wire` (labkit's own HTTP) or `sdk` (the official SDK).
ClientPath: TypeAlias = Literal["wire", "sdk"]

#: Response headers as either HTTP stack hands them over (`httpx.Headers`, or `httpx2.Headers`
#: on the SDK path): `get` is case-insensitive and `items()` yields lower-case names.
ResponseHeaders: TypeAlias = Mapping[str, str]

#: Sampling parameters as the config and the experiments give them (`max_tokens`,
#: `temperature`, ...): user JSON, which each provider puts into its wire body.
SamplingParams: TypeAlias = dict[str, JsonValue]


def one_choice(params: dict[str, Any]) -> dict[str, Any]:
    """`params` (or an `extra_body`) unless it asks for several choices per request (`n`
    above 1): labkit measures one choice per request, and interleaved choices would mix
    their texts and halve decode per token. Raises ValueError, one line, otherwise."""
    n = params.get("n")
    if n is not None and n != 1:
        raise ValueError(
            f"n: {n!r} asks for several choices per request; labkit measures one choice per "
            "request (leave n out or set n: 1, and raise repeats for more samples)"
        )
    return params


#: What a key may hold to travel as an HTTP header value: printable ASCII (spaces inside).
_HEADER_SAFE = re.compile(r"[\x21-\x7e](?:[\x20-\x7e]*[\x21-\x7e])?")


class EventClass:
    """How the recorder treats one SSE event (plain ints: this is the per-event path)."""

    IGNORE = 0  # keep-alive ping, role-only chunk: not an event for any timing
    META = 1  # counts for first_event_ms, carries no output (message_start, usage chunk)
    OUTPUT = 2  # output that is not visible text: reasoning or tool-call delta
    TEXT = 3  # visible output text
    DONE = 4  # the stream's own terminator ([DONE], message_stop)


class Timeouts(BaseModel):
    """Request timeouts in seconds. Hitting one is recorded as `error.kind = timeout`."""

    model_config = ConfigDict(extra="forbid")

    connect: PositiveFloat = Field(default=10.0, description="TCP connect and TLS handshake.")
    read: PositiveFloat = Field(default=120.0, description="Longest wait between two reads.")
    total: PositiveFloat = Field(default=600.0, description="Whole request, stream included.")

    def for_httpx(self) -> httpx.Timeout:
        """As httpx takes them: writes under the read timeout, the pool wait under the total."""
        return httpx.Timeout(connect=self.connect, read=self.read, write=self.read, pool=self.total)


class ManagedServerHandle(Protocol):
    """A local server the runner starts before a provider's requests and stops after them
    (`ProviderSettings.managed_server`). `start` and `stop` block: the runner calls them in
    a thread."""

    @property
    def name(self) -> str:
        """What the server is called in messages (`llama-server`)."""
        ...

    @property
    def log_path(self) -> Path:
        """Where the server's output goes."""
        ...

    def start(self) -> str:
        """Set up and start the server; its base URL once it is ready."""
        ...

    def stop(self) -> None:
        """Stop the server (safe to call when it never started)."""
        ...

    def is_running(self) -> bool:
        """Whether the server process is still alive."""
        ...

    def info(self) -> dict[str, Any]:
        """Facts about the running server for the manifest."""
        ...


class ProviderSettings(BaseModel):
    """Fields every provider entry accepts. Subclasses add their own; unknown keys fail."""

    model_config = ConfigDict(extra="forbid")

    id: str = Field(min_length=1, description="Free name used in records and reports.")
    kind: str = Field(description="Which provider implementation runs this entry.")
    model: str = Field(min_length=1, description="Model name sent to the provider.")
    base_url: str | None = Field(default=None, description="API root; each kind has a default.")
    client: ClientPath = Field(
        default="wire",
        description="How this provider's requests are sent: `wire` (labkit's own HTTP) or "
        "`sdk` (the provider's official SDK, for kinds that have one). An experiment's "
        "`paths` overrides it.",
    )
    api_key_env: str | None = Field(
        default=None, description="Name of the environment variable holding the key."
    )
    base_url_env: str | None = Field(
        default=None,
        description="Name of an environment variable holding base_url; the provider is "
        "skipped when it is unset (for configs shared by people with different servers).",
    )
    timeouts: Timeouts = Field(default_factory=Timeouts)
    retries: int = Field(
        default=0,
        ge=0,
        le=10,
        description="Extra attempts after a retryable failure; each attempt is its own record.",
    )
    concurrency: PositiveInt = Field(
        default=1, description="Requests in flight at once for this provider."
    )
    transport: Literal["auto", "httpx", "lean"] = Field(
        default="auto",
        description="How the wire path reads HTTP: `httpx`, or `lean` (labkit.wire.lean: "
        "HTTP/1.1 over TCP or TLS, every read stamped by the kernel on arrival, a tenth of "
        "httpx's CPU per chunk); `auto` uses lean on an http or https URL without a proxy "
        "in load levels, for a server on this machine (a loopback base URL) and for any "
        "plain-http server (a LAN box), httpx otherwise (hosted https APIs).",
    )
    params: SamplingParams = Field(
        default_factory=dict, description="Default sampling parameters, under the experiment's."
    )
    metrics_interval_s: PositiveFloat = Field(
        default=1.0,
        description="Seconds between scrapes of the server's Prometheus /metrics during "
        "experiments, where the provider has one (`metrics_url`); an experiment's own "
        "`metrics_interval_s` overrides it.",
    )
    extra_body: dict[str, Any] = Field(
        default_factory=dict, description="Extra JSON body fields sent as they are."
    )

    #: The default API root of this kind (None: `base_url` is required).
    default_base_url: ClassVar[str | None] = None
    #: Whether this kind needs an API key to run at all.
    key_required: ClassVar[bool] = False
    #: Whether this kind's requests are served in the process (no socket, so no proxy).
    in_process: ClassVar[bool] = False

    def context_size(self) -> int | None:
        """The model's context in tokens, where this entry knows it (None: unknown)."""
        return None

    def managed_server(self, log_dir: Path) -> ManagedServerHandle | None:
        """The local server this entry wants started for the run (None: it uses one that
        already runs). `log_dir` is where its log may go."""
        return None

    def host_cpus_used(self) -> int:
        """CPU cores this entry's server takes from the measuring host while it streams: 0
        for a remote server, 1 for one on loopback (at least its own process); a managed
        server knows its threads. `workers: auto` leaves them to the server."""
        try:
            host = httpx.URL(self.resolved_base_url()).host
        except (ProviderUnavailable, httpx.InvalidURL):
            return 0
        return 1 if is_loopback(host) else 0

    @field_validator("params", "extra_body")
    @classmethod
    def _one_choice(cls, value: dict[str, Any]) -> dict[str, Any]:
        return one_choice(value)

    @field_validator("base_url")
    @classmethod
    def _url_is_sendable(cls, value: str | None) -> str | None:
        if value is not None:
            check_base_url(value)
        return value

    @field_validator("client")
    @classmethod
    def _sdk_exists(cls, value: ClientPath, info: ValidationInfo) -> ClientPath:
        kind = info.data.get("kind")
        if value == "sdk" and isinstance(kind, str) and not sdk_available(kind):
            raise ValueError(f"provider kind {kind!r} has no official SDK; use client: wire")
        return value

    @classmethod
    def answered_at(cls, entry: dict[str, Any], root: str, key_env: str) -> dict[str, Any] | None:
        """This kind's config `entry` rewritten so a server speaking its protocol at `root`
        answers it, its key (if it needs one) read from `key_env` (`labkit run --truth`
        points every provider at the truth server so); None: no stand-in speaks it."""
        return None

    def resolved_base_url(self) -> str:
        """The API root, without a trailing slash."""
        url = self.base_url
        if url is None and self.base_url_env:
            url = os.environ.get(self.base_url_env) or None
        url = url or self.default_base_url
        if not url:
            raise ProviderUnavailable(f"provider {self.id!r}: base_url is required for {self.kind}")
        if self.base_url is None and self.base_url_env:
            try:
                check_base_url(url)
            except ValueError as exc:
                raise ProviderUnavailable(
                    f"skipping provider {self.id!r}: {self.base_url_env} is not a usable base "
                    f"URL: {exc}"
                ) from None
        return url.rstrip("/")

    def check_available(self) -> str | None:
        """The API key (or None), after checking the provider can run here at all.

        Raises ProviderUnavailable naming the variable to set when a key or URL is missing,
        and when the proxy for its URL needs what this install lacks (SOCKS without socksio).
        """
        register_environment_credentials(self.base_url_env)  # before any message is made
        if self.base_url is None and self.base_url_env and not os.environ.get(self.base_url_env):
            raise ProviderUnavailable(
                f"skipping provider {self.id!r}: set {self.base_url_env} to its base URL to run it"
            )
        self._check_proxy()
        return self.resolve_api_key()

    def _check_proxy(self) -> None:
        if self.in_process:  # opens no connection: the proxy variables do not apply
            return
        try:
            proxy = proxy_for(self.resolved_base_url())
        except ProviderUnavailable:  # no URL: said when the provider is built
            return
        lacking = unusable_because(proxy) if proxy else None
        if proxy and lacking:
            raise ProviderUnavailable(
                f"skipping provider {self.id!r}: requests would go through "
                f"{proxy.describe()}, which needs {lacking}; or add the host to NO_PROXY"
            )

    def resolve_api_key(self) -> str | None:
        """The key from the named variable, stripped of surrounding whitespace and registered
        with `labkit.scrub`, so that no output can show it.

        Raises ProviderUnavailable (the provider is skipped, one line naming the variable,
        never the value) when the variable is unset or empty, on every kind, or holds
        something that cannot be sent as a header value (non-ASCII, control characters).
        """
        register_environment_credentials(self.base_url_env)  # proxy and URL credentials
        if self.api_key_env is None:
            if self.key_required:
                raise ProviderUnavailable(
                    f"provider {self.id!r} ({self.kind}) needs an API key: set api_key_env"
                )
            return None
        value = os.environ.get(self.api_key_env, "").strip()
        if not value:
            raise ProviderUnavailable(
                f"skipping provider {self.id!r}: set {self.api_key_env} to run it"
            )
        register_secret(value)
        if not _HEADER_SAFE.fullmatch(value):
            raise ProviderUnavailable(
                f"skipping provider {self.id!r}: {self.api_key_env} holds characters a key "
                "cannot have (non-ASCII or control characters inside it); export the key alone"
            )
        return value


@dataclass(slots=True)
class ChatRequest:
    """One chat request as the experiment wants it, before any provider's wire format."""

    messages: list[dict[str, str]]
    params: SamplingParams = field(default_factory=dict)
    prompt_id: str = "prompt"
    #: Close the connection after this request, so the next one measures a fresh connect.
    fresh_connection: bool = False
    #: Open a connection before `t_start` when none is ready, so the connect stays out of
    #: TTFT (`Provider.connect_ahead`; load levels with `connections: warm`).
    warm_connection: bool = False
    #: `wire` (labkit's own HTTP) or `sdk` (the provider's official SDK, see
    #: labkit.measurement.sdkpath).
    client_path: str = "wire"
    #: Alternatives per output token to collect logprobs for (`Provider.logprob_params`
    #: puts the ask into `params`); None: none collected, the parser never looks.
    top_logprobs: int | None = None
    #: Keep each output event's text and the server's own time at it (`token_view`;
    #: `Provider.event_time_params` puts the ask for server times into `params`).
    event_detail: bool = False
    #: Connect to this (host, port) instead of the URL's, the URL and its Host header kept:
    #: a vantage point's route to the same server (`labkit.wire.relay`); None: the URL's.
    route: tuple[str, int] | None = None

    @property
    def prompt_text(self) -> str:
        """All message contents joined, for size accounting (a tool turn's structured
        content as its JSON)."""
        return "\n".join(_content_text(m) for m in self.messages)


def _content_text(message: Mapping[str, Any]) -> str:
    content = message.get("content")
    if isinstance(content, str):
        return content
    rest = {k: v for k, v in message.items() if k != "role"}
    return json.dumps(rest, separators=(",", ":"))


@dataclass(frozen=True, slots=True)
class TokenCount:
    """A token count and where it came from (`tiktoken:cl100k_base`, `llamacpp:/tokenize`)."""

    tokens: int
    source: str
    #: Tokens the provider's chat template adds around the counted contents, where the
    #: provider documents them (OpenAI: 3 per message and 3 priming the reply); None: unknown.
    framing: int | None = None

    def unexplained(self, provider_tokens: int | None) -> int | None:
        """`provider_tokens` minus this count and its framing: the tokens neither explains
        (`usage.input_tokens_local_diff`); None when the provider sent no count or the
        framing is unknown."""
        if provider_tokens is None or self.framing is None:
            return None
        return provider_tokens - self.tokens - self.framing


class StreamParser(ABC):
    """Reads one response. Subclasses fill the public attributes as events arrive."""

    def __init__(self) -> None:
        self.usage = Usage()
        self.provider_timings = ProviderTimings()
        self.stop_reason_raw: str | None = None
        self.response_id: str | None = None
        self.request_id: str | None = None
        self.system_fingerprint: str | None = None
        self.rate_limits: dict[str, str] | None = None
        self.error: RecordError | None = None
        self.text_parts: list[str] = []
        #: Streamed output that is not visible text (reasoning, tool-call names and
        #: arguments), kept for `account_for_stream`, labkit's check of the output count.
        self.other_output_parts: list[str] = []
        #: Why `streamed_output_tokens` is None, when a parser knows (see `Usage`).
        self.streamed_null_reason: str | None = None
        #: The model's own tokenizer, where labkit has it offline (`Provider.count_locally`):
        #: the provider sets it in `new_parser`; None: the check uses a bytes bound.
        self.count_locally: Callable[[str], TokenCount | None] | None = None
        #: Tool calls as they stream, by their index in the reply (`add_tool_call_delta`).
        self.tool_call_parts: dict[int, list[str]] = {}
        #: Calls of hosted tools the reply made (a web search: the server runs it), whose
        #: framing and input are counted but not kept in `tool_call_parts`.
        self.hosted_calls = 0
        #: Whether the stream's terminator was seen when it is no `EventClass.DONE` event
        #: (Ollama's `done: true` line may carry text): nothing more follows, so the recorder
        #: stops reading there even if the server keeps the body open. A plain attribute,
        #: not a property: the recorder reads it after every read.
        self.ended = False

    def add_tool_call_delta(self, index: Any, call_id: Any, name: Any, arguments: Any) -> None:
        """Collect one streamed piece of tool call `index`: its id and name when they come,
        and a piece of its arguments' JSON text (values as the wire sent them: anything
        else than an index and strings is a `MalformedStream`)."""
        if type(index) is not int or index < 0:
            raise MalformedStream(f"a tool call's index is {index!r}, not a count")
        for what, value in (("id", call_id), ("name", name), ("arguments", arguments)):
            if value is not None and type(value) is not str:
                raise MalformedStream(f"a tool call's {what} is {type(value).__name__}")
        parts = self.tool_call_parts.setdefault(index, ["", "", ""])
        if call_id:
            parts[0] = call_id
        if name:
            parts[1] += name
        if arguments:
            parts[2] += arguments

    def finished_tool_calls(self) -> list[RecordToolCall] | None:
        """The reply's tool calls, in order (None: it made none)."""
        if not self.tool_call_parts:
            return None
        return [
            RecordToolCall(id=p[0] or f"call_{i}", name=p[1], arguments=p[2])
            for i, p in sorted(self.tool_call_parts.items())
        ]

    def on_headers(self, headers: ResponseHeaders) -> None:  # noqa: B027 - optional hook
        """Read identifiers and header timings from the response headers."""

    def read_rate_limits(self, headers: ResponseHeaders, prefix: str) -> None:
        """Keep the rate-limit headers starting with `prefix`, as sent (None if there are none)."""
        limits = {k: v for k, v in headers.items() if k.startswith(prefix)}
        self.rate_limits = limits or None

    @abstractmethod
    def on_event(self, event: SSEEvent) -> int:
        """Digest one event and return its `EventClass`."""

    def common_chunk(self) -> str | None:
        """The shape of this parser's common event that the wire layer may decode,
        classify and stamp for it in one call (a `labkit.wire.readpath.COMMON_CHUNKS` name),
        with exactly what `on_event` and `Measurement.event` would do with it; None (the
        default) where every event must go through `on_event`. Asked once per request,
        after `want_logprobs` and `want_event_detail`."""
        return None

    @abstractmethod
    def stop_reason(self) -> StopReason | None:
        """The normalised stop reason, from `stop_reason_raw`."""

    @property
    def output_text(self) -> str:
        """The text generated so far."""
        return "".join(self.text_parts)

    @property
    def finished(self) -> bool:
        """Whether the stream's own end was seen without its terminator: by default, once
        a stop reason arrived (some servers end there without `[DONE]`). The terminator
        itself (`EventClass.DONE`) always counts as the end."""
        return self.stop_reason_raw is not None

    def settle(self) -> None:  # noqa: B027 - optional hook
        """The stream is over (complete or not): finish reading what was deferred off the
        per-event path. Called once by the recorder, on either path, before the record is
        assembled; a malformed deferred value sets `error`."""

    def read_framing(self, framer: SSEParser, t_start_ns: int) -> None:
        """What the framing saw besides events (wire path): SSE comments before the first
        event (`: keep-alive` while a request waits: DeepSeek) become
        `provider_timings.keepalive_comments` and `keepalive_last_ms`; a gateway's own
        processing comments (`: OPENROUTER PROCESSING`) name it in `keepalive_gateway`."""
        count = framer.comments_before_first_event
        if count:
            pt = self.provider_timings
            pt.keepalive_comments = count
            pt.keepalive_last_ms = (framer.last_comment_t_ns - t_start_ns) / 1e6
            pt.keepalive_gateway = gateway_of_comment(framer.first_comment)

    def streamed_output_tokens(self, output_events: int) -> int | None:
        """How many output tokens the stream itself delivered: the count decode time is
        taken over (`usage.streamed_output_tokens`).

        The parser's reading of the reported counts (`reported_streamed_tokens`), checked
        against what the stream carried (`account_for_stream`): a count the streamed
        content cannot hold is hidden output reported as nothing, and gives None (decode
        not derived), with the record flagged and the reason in
        `usage.streamed_output_null_reason`. `output_events`: output-carrying events seen.
        """
        count = self.reported_streamed_tokens(output_events)
        if count is not None:
            count = account_for_stream(self, count)
        self.usage.streamed_output_null_reason = (
            self.streamed_null_reason if count is None and self.usage.output_tokens else None
        )
        return count

    def reported_streamed_tokens(self, output_events: int) -> int | None:
        """The streamed output count as the provider's own counts give it.

        Default: the provider's output count, as sent. A parser overrides this where the
        provider counts tokens it never streams (hidden reasoning) or streams tokens it
        does not count, setting `streamed_null_reason` when it returns None.
        """
        return self.usage.output_tokens

    # --- logprobs (asked per request: `ChatRequest.top_logprobs`) ----------------------

    #: The logprobs being collected; None until `want_logprobs` (and for a parser that cannot).
    _logprobs: LogprobCollector | None = None

    def want_logprobs(self, top_k: int) -> bool:
        """Collect each output token's logprob and `top_k` alternatives from now on; False
        where this parser cannot read any (the default). Called before the first event, so
        a parser not asked reads none and pays nothing for them."""
        return False

    def logprobs(self) -> OutputLogprobs | None:
        """The collected logprobs (the record's `logprobs`); None when none were asked."""
        collector = self._logprobs
        return collector.result() if collector is not None else None

    # --- per-event detail (asked per request: `ChatRequest.event_detail`) ----------------

    #: Each output event's text, and the server's time at it; None until `want_event_detail`.
    _event_texts: list[str] | None = None
    _event_server_ms: list[float | None] | None = None

    def want_event_detail(self) -> None:
        """Keep each output event's visible text, and the server's own time at it where
        the parser reads one (`event_server_ms`), from now on. The step wraps `on_event`
        on this parser alone: a parser not asked pays nothing."""
        texts: list[str] = []
        times: list[float | None] = []
        self._event_texts = texts
        self._event_server_ms = times
        inner = self.on_event
        parts = self.text_parts

        def on_event(event: SSEEvent) -> int:
            n = len(parts)
            cls = inner(event)
            if cls == EventClass.TEXT or cls == EventClass.OUTPUT:
                texts.append("".join(parts[n:]))
                times.append(self.event_server_ms())
            return cls

        self.on_event = on_event  # type: ignore[method-assign]

    def event_server_ms(self) -> float | None:
        """The server's own time at the output event just read (ms from the start of its
        prompt processing); None: this parser reads none (the default)."""
        return None

    def event_detail(self, keep_text: bool = True) -> OutputEvents | None:
        """The kept per-event detail (the record's `event_detail`); None when not asked.
        `server_ms` is None when no event carried a server time; `texts` is empty where
        the text is not kept (`store_text: false`)."""
        texts, times = self._event_texts, self._event_server_ms
        if texts is None or times is None:
            return None
        known = any(t is not None for t in times)
        return OutputEvents(
            texts=list(texts) if keep_text else [], server_ms=list(times) if known else None
        )


#: Gateways known by the comments they send while they wait for the upstream provider, by
#: a word of the comment (upper case) → the gateway's name in records. OpenRouter documents
#: `: OPENROUTER PROCESSING` (openrouter.ai/docs/api-reference/streaming).
GATEWAY_COMMENTS: dict[bytes, str] = {b"OPENROUTER": "openrouter"}


def gateway_of_comment(comment: bytes) -> str | None:
    """The gateway whose processing comment `comment` is (the text after the colon); None:
    a server's own keep-alive (DeepSeek's `: keep-alive`), or unknown."""
    upper = comment.upper()
    for word, gateway in GATEWAY_COMMENTS.items():
        if word in upper:
            return gateway
    return None


#: Tokens a reply's output count may hold beyond its streamed content outside tool calls:
#: special tokens counted but never streamed (end of turn; llama.cpp and vLLM count the end
#: token), a reasoning block's delimiters. A few, not dozens: a fixed allowance of 64 let a
#: short answer's hidden reasoning reported as 0 pass, and decode divide by it (issue 44).
UNSTREAMED_SPECIAL_TOKENS = 8
#: ... and per tool call the reply made: its framing (Anthropic's tool-use block, Chat
#: Completions' call wrapper) is counted, while only its name and arguments stream; a
#: hosted tool's call (a web search's query) may not stream at all.
UNSTREAMED_TOOL_CALL_TOKENS = 48
#: Slack on a count by the model's own tokenizer (a family's tokenizer, not the exact one).
LOCAL_COUNT_SLACK = 1.5


def unstreamed_allowance(parser: StreamParser) -> int:
    """The tokens `parser`'s reply may count without streaming them: the special tokens of
    any reply, and each tool call's framing (client and hosted tools)."""
    calls = len(parser.tool_call_parts) + parser.hosted_calls
    return UNSTREAMED_SPECIAL_TOKENS + UNSTREAMED_TOOL_CALL_TOKENS * calls


def account_for_stream(parser: StreamParser, count: int) -> int | None:
    """`count` if the streamed content can hold that many tokens, else None with the
    record flagged (`usage.output_count_unaccounted`).

    A token carries at least one byte of text, so the content's UTF-8 bytes bound what it
    can hold; where the model's tokenizer is at hand and that bound alone does not decide,
    its count (with `LOCAL_COUNT_SLACK`) does. Both leave `unstreamed_allowance` tokens for
    what is counted but never streamed. Runs once per record, after the stream.
    """
    usage = parser.usage
    if usage.output_tokens is None:
        return count
    parts = parser.text_parts + parser.other_output_parts
    content = "".join(parts)
    held = len(content.encode("utf-8", errors="replace"))
    allowance = unstreamed_allowance(parser)
    source = "its UTF-8 bytes"
    if count > held + allowance:
        unaccounted = True
    elif parser.count_locally is not None and count > len(content) / 3 + allowance:
        local = parser.count_locally(content)
        if local is None:
            unaccounted = False
        else:
            held = int(local.tokens * LOCAL_COUNT_SLACK)
            source = f"{local.source}: {local.tokens} tokens"
            unaccounted = count > held + allowance
    else:
        unaccounted = False
    usage.output_count_unaccounted = unaccounted
    if not unaccounted:
        return count
    reasoning = usage.reasoning_tokens
    parser.streamed_null_reason = (
        f"{count} of the {usage.output_tokens} reported output tokens were taken as streamed "
        f"(reasoning_tokens {'absent' if reasoning is None else reasoning}), but the streamed "
        f"content holds at most {held + allowance} ({source}, and {allowance} counted but "
        "never streamed): output was generated and neither streamed nor reported as reasoning"
    )
    return None


class SDKAdapter(ABC):
    """How one provider's requests are sent through its official SDK."""

    #: The SDK's package name, for messages and the manifest (`openai`, `anthropic`).
    package: str
    #: A few events of the SDK's protocol, as a server sends them: the set-up's dry run
    #: (labkit.wire.setup) has the SDK decode them, so its event models are built
    #: before the first measured request.
    dry_run_stream: ClassVar[bytes] = b""

    @abstractmethod
    def client(self, provider: Provider, *, api_key: str | None, http_client: Any) -> Any:
        """The SDK's async client on `http_client`, with the SDK's own retries off."""

    @abstractmethod
    async def open_stream(
        self, client: Any, provider: Provider, request: ChatRequest, params: dict[str, Any]
    ) -> Any:
        """Send one streaming request; return the SDK's stream object, which iterates the
        events, has ``.response.headers`` and an async ``close()``."""

    @abstractmethod
    def reader(self, parser: StreamParser) -> Callable[[Any], int]:
        """The per-event step for one stream: a function that reads one object the SDK
        yields into `parser` (the provider's wire parser, from `Provider.new_parser`) and
        returns its `EventClass`, as the parser's `on_event` does for the wire's event."""

    def consumed_by_sdk(self, event: str | None, data: str) -> Literal["end", "error"] | None:
        """Whether the SDK consumes this SSE event (its name, its data) itself instead of
        yielding it: ``"end"``, the stream's terminator it swallows (``[DONE]``); ``"error"``,
        an error event it raises on, which would stop the reading; None: yielded. The SDK
        path hands such events to the wire parser, so both paths see the same stream.
        Default: the SDK yields every event."""
        return None


class Provider(ABC):
    """One configured provider: builds requests on the connections it is handed.

    Experiments and the runner ask its capabilities, never its kind or class:
    `tokenize`/`tokenizer_name`, `count_tokens`, `count_locally`, `prompt_cache_params`,
    `exact_length_params`, `reports_server_timings`, `exclusive_slots`, `sdk`, `metrics_url`,
    `fetches_stats_later`/`stats_later`, `warm_up_request`, `logprob_params`; each defaults
    to "cannot"."""

    kind: ClassVar[str]
    settings_model: ClassVar[type[ProviderSettings]]
    #: How this kind's requests go through its official SDK (`client: sdk`,
    #: labkit.measurement.sdkpath); None: it has none.
    sdk: ClassVar[SDKAdapter | None] = None
    #: Whether an official SDK can send this kind's requests (derived from `sdk`).
    has_sdk: ClassVar[bool] = False
    #: Whether the provider reports its own prefill and decode times (`provider_timings`).
    reports_server_timings: ClassVar[bool] = False
    #: The tokenizer behind `tokenize` (`llamacpp:/tokenize`); None: `tokenize` has none.
    tokenizer_name: ClassVar[str | None] = None
    #: The server closes the connection after every streamed response whatever it
    #: advertises, so each request asks for `connection: close` (see `closes_connection`).
    closes_after_each_stream: ClassVar[bool] = False
    #: The shortest prompt the provider's prompt cache serves, in tokens, as its documents
    #: state (0: any length); None: not documented (the prompt-cache probe asks for one).
    prompt_cache_min_tokens: ClassVar[int | None] = None

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls.has_sdk = cls.sdk is not None

    def __init__(
        self,
        settings: ProviderSettings,
        *,
        api_key: str | None = None,
        pool_size: int | None = None,
        connections: Connections | None = None,
    ) -> None:
        self.settings = settings
        self._api_key = api_key
        self.server_build: str | None = None
        #: The HTTP clients this provider's requests travel on, built by the measurement
        #: core (`labkit.wire.connections`): handed in, or built here from the
        #: settings for `pool_size` requests in flight (a load level's; None: `concurrency`).
        self.connections = connections or connections_for(settings, pool_size)
        self.connections.warm_up = self.warm_up_request
        #: The client requests are built on (base URL, default headers); the measurement
        #: core decides which client sends each one.
        self.client = self.connections.client

    def warm_up_request(self) -> httpx.Request | None:
        """A cheap request whose reply opens and keeps a connection (llama.cpp `GET
        /health`), sent before a level to pre-open httpx connections; None: this provider
        knows no endpoint cheap enough."""
        return None

    @property
    def id(self) -> str:
        """The provider id from the config."""
        return self.settings.id

    def api_root(self) -> str:
        """The URL an official SDK takes as its `base_url` (the SDK adds its own paths);
        the wire path sends to the same endpoints."""
        return self.settings.resolved_base_url()

    def closes_connection(self, request: ChatRequest) -> bool:
        """Whether `request` goes out with `connection: close`: asked for a fresh
        connection, or the server closes after every stream anyway."""
        return request.fresh_connection or self.closes_after_each_stream

    @property
    def model(self) -> str:
        """The model asked for."""
        return self.settings.model

    def effective_params(self, request: ChatRequest) -> SamplingParams:
        """Provider defaults overlaid by the request's own parameters."""
        return {**self.settings.params, **request.params}

    def wire_params(self, params: dict[str, Any]) -> dict[str, Any]:
        """The parameters as this provider accepts them (the record stores these)."""
        return params

    @abstractmethod
    def build_request(self, request: ChatRequest, params: dict[str, Any]) -> httpx.Request:
        """The streaming HTTP request for this chat (headers include the key)."""

    def new_framer(self) -> SSEParser:
        """The framing of this provider's response bodies: SSE (default), or
        `labkit.wire.sse.NDJSONParser` for newline-delimited JSON streams."""
        return SSEParser()

    @abstractmethod
    def new_parser(self) -> StreamParser:
        """A fresh parser for one response."""

    def count_input_locally(self, request: ChatRequest) -> TokenCount | None:
        """A cheap local count of the prompt (no I/O), when this provider has one."""
        return None

    async def count_tokens(self, text: str) -> TokenCount | None:
        """The provider's own count of `text` as a user message (may call its API)."""
        return None

    async def tokenize(self, text: str) -> list[int] | None:
        """The model's own tokens for raw `text` (no chat template), or None when the provider
        offers no tokenizer (`tokenizer_name` names the one it uses)."""
        return None

    def count_locally(self, text: str) -> TokenCount | None:
        """An offline count of `text` with the model's own tokenizer (no I/O), where labkit
        has that tokenizer locally; None otherwise."""
        return None

    async def count_chat_prompt(self, messages: list[dict[str, str]]) -> TokenCount | None:
        """The provider's own count of a chat prompt as its usage would count it
        (`usage.input_tokens`): the messages inside the chat template's framing, counted
        without generating anything; None where the provider offers no such count. May call
        its API; raises httpx.HTTPError or ValueError when the answer is unusable."""
        return None

    def exclusive_slots(self) -> int | None:
        """How many requests the server runs at once when labkit alone uses it (a local
        server this run started: its slots), so that a request never waits in the server's
        queue while no more are in flight; None: unknown, or a server others may share."""
        return None

    def prompt_cache_params(self, enabled: bool) -> SamplingParams:
        """Request parameters that turn the provider's prompt cache on or off (empty: the
        provider has no such control, and only a unique prompt prefix avoids the cache)."""
        return {}

    def exact_length_params(self) -> SamplingParams:
        """Request parameters that make the model decode exactly `max_tokens` (ignoring its
        end-of-sequence token); empty when the provider cannot."""
        return {}

    def tool_format(self) -> ToolFormat | None:
        """How this provider takes tool definitions, calls and results (`session`
        experiments); None: it takes no tools."""
        return None

    def logprob_params(self, top_k: int) -> SamplingParams:
        """Request parameters that ask for each output token's log-probability and its
        `top_k` most likely alternatives (its parser then reads them, `want_logprobs`);
        empty when the provider cannot return them (Anthropic)."""
        return {}

    def event_time_params(self) -> SamplingParams:
        """Request parameters that ask the server for its own time on every output event
        (its parser reads it, `StreamParser.event_server_ms`); empty when it has none to
        send (every hosted API labkit knows)."""
        return {}

    def metrics_url(self) -> str | None:
        """Where the server's Prometheus metrics are scraped during experiments
        (`labkit.runner.scrape`); None: it exposes none that labkit knows of."""
        return None

    def fetches_stats_later(self) -> bool:
        """Whether the provider keeps an account of each response that can be fetched after
        the run (`stats_later`)."""
        return False

    async def stats_later(self, client: httpx.AsyncClient, response_id: str) -> LaterStats | None:
        """The provider's account of one response, asked after the run on `client` (from
        `Connections.side_client`); None: not available yet, ask again later. Raises httpx.HTTPError
        when the provider refuses."""
        return None

    async def describe(self) -> dict[str, Any]:
        """Facts about the server for the manifest (build, version); may call its API."""
        return {}

    async def tokenized(self, text: str) -> Tokenized | None:
        """How the model's own tokenizer cuts raw `text` (no chat template): ids and pieces
        where the provider gives them, a count alone where it can only count, None where
        labkit reaches no tokenizer of this model. May call the provider's API."""
        return None

    def output_tokens_locally(self, parser: StreamParser, output_events: int) -> TokenCount:
        """Output token count when the provider sent none: one token per output event."""
        return TokenCount(output_events, "events")

    async def aclose(self) -> None:
        """Close the HTTP clients."""
        await self.connections.aclose()

    def secrets(self) -> list[str]:
        """Strings that must never reach a record, a log or a message."""
        return [self._api_key] if self._api_key else []


def connections_for(
    settings: ProviderSettings,
    pool_size: int | None,
    *,
    client_factory: Callable[[], httpx.AsyncClient] | None = None,
) -> Connections:
    """The connections the measurement core builds for `settings`: a pool for `concurrency`
    requests in flight, or for `pool_size` (a load level's), on the configured transport."""
    return Connections(
        settings.resolved_base_url(),
        label=settings.id,
        timeout=settings.timeouts.for_httpx(),
        transport=settings.transport,
        pool_size=max(settings.concurrency, pool_size or 0),
        load_level=bool(pool_size),
        client_factory=client_factory,
    )


def check_base_url(url: str) -> None:
    """Raise ValueError unless `url` is an http(s) URL with a host and a possible port."""
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:  # a port that is no number, or out of range
        raise ValueError(f"not a usable URL: {exc}") from None
    if parts.scheme not in ("http", "https"):
        raise ValueError("must start with http:// or https://")
    if not parts.hostname:
        raise ValueError("has no host")
    if port == 0:
        raise ValueError("port 0 cannot be connected to")
    if any(c.isspace() or ord(c) < 32 for c in url):
        raise ValueError("contains whitespace or control characters")


def with_root_path(url: str, path: str) -> str:
    """`url` with `path` appended when it names only a server (no path), so a provider
    accepts both `http://host:8000` and `http://host:8000/v1`."""
    if urlsplit(url).path in ("", "/"):
        return url.rstrip("/") + path
    return url


_REGISTRY: dict[str, type[Provider]] = {}

P = TypeVar("P", bound=type[Provider])


def register(cls: P) -> P:
    """Class decorator: make a provider available under its `kind`."""
    if cls.kind in _REGISTRY and _REGISTRY[cls.kind] is not cls:
        raise ValueError(f"provider kind {cls.kind!r} registered twice")
    _REGISTRY[cls.kind] = cls
    return cls


def provider_class(kind: str) -> type[Provider]:
    """The class registered for `kind` (KeyError when unknown)."""
    return _REGISTRY[kind]


def provider_kinds() -> list[str]:
    """All registered kinds, sorted."""
    return sorted(_REGISTRY)


def sdk_available(kind: str) -> bool:
    """Whether providers of `kind` can be sent through an official SDK (False when unknown)."""
    cls = _REGISTRY.get(kind)
    return cls is not None and cls.has_sdk
