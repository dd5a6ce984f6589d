"""The one schedule of labkit's fake server: when each event is sent and what the reply is.

`TruthSchedule` is the setting of the truth server (`labkit fake-server`) and of the
in-process fake provider (`kind: fake`, whose ``schedule:`` it is, as `FakeSchedule`); every
field can be overridden per request (a URL segment ``KEY=VALUE`` or a line of the
per-request file). `plan` turns it and one request into a `Plan`: the wait from the start of
service to the first output event, the gaps between output events and the tokens each
carries. Both servers plan with it, so a schedule means the same in-process and on a socket.
The older names ``ttft_ms``, ``interval_ms`` and ``keepalive_interval_ms`` are still read.
"""

from __future__ import annotations

import contextlib
import random
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from pydantic import AliasChoices, BaseModel, ConfigDict, Field, ValidationError, model_validator

from labkit.errors import ConfigError
from labkit.jsonlines import JsonLine, iter_json_lines, one_line

__all__ = [
    "LAB_SCHEDULE",
    "Plan",
    "ServerTimings",
    "TruthSchedule",
    "load_request_schedules",
    "plan",
]

#: The server whose own timings a reply carries, in its documented shape (`server_timings`).
ServerTimings = Literal[
    "none", "openai", "groq", "cerebras", "fireworks", "vllm", "tgi", "llamacpp", "deepseek"
]
#: The shape of llama-server's ``timings`` (and of its other endpoints' answers).
CPP_SHAPE: str = "llamacpp"
#: The shape with OpenAI's ``openai-processing-ms`` header.
PROCESSING_HEADER_SHAPE: str = "openai"


#: Limits on what a schedule (or one request's override of it) may ask for: the server
#: builds a reply's whole timetable when it starts serving it, and one request must not be
#: able to take the server's memory or hold its loop. A wait of any kind (ms).
MAX_WAIT_MS = 3_600_000.0
#: Tokens of one reply (the schedule's `tokens`, or `max_tokens` with ignore_eos).
MAX_REPLY_TOKENS = 131_072
#: Bytes one event is padded to.
MAX_EVENT_BYTES = 1_048_576
#: The prefix cache's capacity (tokens).
MAX_CACHE_TOKENS = 10_000_000
#: Tool calls: the tool steps of a session, and the calls of one reply.
MAX_TOOL_CALLS = 1_024
MAX_PARALLEL_TOOL_CALLS = 128
#: Lines of a per-request schedule file.
MAX_SCHEDULES = 100_000
#: The shortest keep-alive period (ms): a shorter one would plan a comment per microsecond.
MIN_KEEPALIVE_MS = 1.0


def _ms(default: float, description: str, *aliases: str) -> Any:
    """A non-negative, finite number of milliseconds, at most `MAX_WAIT_MS`."""
    alias = AliasChoices(*aliases) if aliases else None
    return Field(
        default=default,
        ge=0,
        le=MAX_WAIT_MS,
        allow_inf_nan=False,
        description=description,
        validation_alias=alias,
    )


class TruthSchedule(BaseModel):
    """When each token is sent, how the reply ends, and what can go wrong."""

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    # --- timing ---
    first_token_ms: float = _ms(
        50.0,
        "The fixed part of the wait for token 1, from the start of service.",
        "first_token_ms",
        "ttft_ms",
    )
    token_interval_ms: float = _ms(
        10.0,
        "Time per output token (with tokens_per_event k, an event every k intervals).",
        "token_interval_ms",
        "interval_ms",
    )
    tokens: int = Field(
        default=16,
        ge=0,
        le=MAX_REPLY_TOKENS,
        description="Tokens per reply (capped by max_tokens).",
    )
    tokens_per_event: int = Field(
        default=1, ge=1, le=MAX_REPLY_TOKENS, description="Tokens carried by each event."
    )
    jitter_ms: float = _ms(0.0, "Random ± jitter on every wait (seeded by the server's seed).")
    prefill_ms_per_token: float = _ms(0.0, "Token 1 later by this per prompt token.")
    keepalive_ms: float = _ms(
        0.0,
        "`: keep-alive` SSE comment period before token 1 (0: none; DeepSeek's shape sends "
        "them during its queue every 100 ms by default).",
        "keepalive_ms",
        "keepalive_interval_ms",
    )
    event_bytes: int = Field(
        default=0,
        ge=0,
        le=MAX_EVENT_BYTES,
        description="Pad each Chat event to about this many bytes (0: none).",
    )
    slots: int | None = Field(
        default=None,
        ge=0,
        le=65_536,
        description="Requests served at once; the rest wait, in arrival order, for a free slot "
        "before their first token's wait starts (null or 0: no limit).",
    )
    frontend_ms: float = _ms(
        0.0,
        "A front end's delay between reading the request and the server's clock starting: "
        "nothing is sent during it and no timing the server reports holds it.",
    )

    chat_template: bool = Field(
        default=False,
        description="Frame a chat prompt's messages in a ChatML template (<|im_start|>role, "
        "the text, <|im_end|>; then the assistant's turn): the tokens the server counts, "
        "which /apply-template shows. Off: the messages' texts, one per line.",
    )

    # --- the prefix cache ---
    cache_tokens: int = Field(
        default=0,
        ge=0,
        le=MAX_CACHE_TOKENS,
        description="The prefix cache's capacity in tokens (0: no cache): a prompt's prefix "
        "shared with an earlier request's prompt and reply is cached, the least recently used "
        "evicted first.",
    )
    cache_ttl_s: float = Field(
        default=0.0,
        ge=0,
        le=MAX_WAIT_MS / 1000,
        allow_inf_nan=False,
        description="A cache entry's lifetime after its last use, in seconds (0: no limit).",
    )
    cached_ms_per_token: float = _ms(
        0.0, "Token 1 later by this per cached prompt token (the rest: prefill_ms_per_token)."
    )
    cache_min_tokens: int = Field(
        default=0,
        ge=0,
        le=MAX_CACHE_TOKENS,
        description="The shortest prompt the prefix cache reads or keeps, in tokens (0: any), "
        "as a hosted API's documented minimum (OpenAI and most Anthropic models 1,024).",
    )
    cache_replicas: int = Field(
        default=1,
        ge=1,
        le=1_024,
        description="Replicas behind the server, each with a prefix cache of its own "
        "(`labkit.truth.routing`): a request with a `prompt_cache_key` goes to the replica its "
        "key hashes to, one without to the next replica in turn (1: one cache).",
    )
    queue_ms: float = _ms(
        0.0,
        "A wait before service starts, reported as the server's queue time (before the "
        "headers, except in DeepSeek's shape, which sends them first and keep-alive comments "
        "during it).",
    )

    # --- hidden reasoning ---
    reasoning_tokens: int = Field(
        default=0,
        ge=0,
        le=MAX_REPLY_TOKENS,
        description="Hidden reasoning: a request that asks for reasoning (Chat "
        "`reasoning_effort`, Responses `reasoning.effort`, other than none) is thought about "
        "for this many tokens before its first visible token, at reasoning_ms_per_token each; "
        "they are never streamed and are counted in the usage (Chat "
        "`completion_tokens_details.reasoning_tokens`, Responses "
        "`output_tokens_details.reasoning_tokens`), as OpenAI's reasoning models do (0: off).",
    )
    reasoning_ms_per_token: float | None = Field(
        default=None,
        ge=0,
        le=MAX_WAIT_MS,
        allow_inf_nan=False,
        description="Time per hidden reasoning token (null: token_interval_ms, the visible "
        "decode pace).",
    )

    # --- the reply's end ---
    finish_reason: str = Field(
        default="stop",
        min_length=1,
        max_length=64,
        description="Chat finish_reason of a reply not capped.",
    )
    usage: bool = Field(default=True, description="Send the usage (Chat: the usage chunk).")
    end_token: bool = Field(
        default=False,
        description="A reply that stops on its own ends with an end token, decoded one token "
        "interval after the last output event and counted in the usage but never streamed "
        "(as llama.cpp and vLLM count it).",
    )

    # --- sampling ---
    sampling: bool = Field(
        default=False,
        description="Each output token is drawn from a known next-token distribution over "
        "`candidates` tokens (fixed by the prompt and the step) at the request's temperature "
        "(0: the likeliest), seeded by the request's seed (none: the server's own draws). "
        "Off: the scripted words.",
    )
    candidates: int = Field(
        default=5, ge=1, le=20, description="Candidate tokens of each sampling step."
    )
    # --- batch-dependent selection (`labkit.truth.batch`) ---
    batch_flip_above: int = Field(
        default=0,
        ge=0,
        le=65_536,
        description="With sampling, a temperature-0 request read while more than this many "
        "requests are held by the server (itself counted, at most `slots`) has its near-tie "
        "steps flipped to the second candidate, as kernels that are not batch-invariant do "
        "(0: off, every batch decodes alike).",
    )
    batch_flip_margin: float = Field(
        default=0.1,
        ge=0,
        le=1,
        allow_inf_nan=False,
        description="A near-tie: a step whose top two probabilities differ by less than this.",
    )
    batch_flip_p: float = Field(
        default=0.5,
        ge=0,
        le=1,
        allow_inf_nan=False,
        description="The chance that a near-tie step of a request in a large batch flips "
        "(the server's seeded draws).",
    )

    # --- a different model behind one name (`labkit.truth.model_variant`) ---
    tokenizer: Literal["pieces", "thirds"] = Field(
        default="pieces",
        description="How prompts are counted: `pieces`, the server's own tokenizer; "
        "`thirds`, another tokenizer's counts (non-space runs in pieces of at most three "
        "characters), as a different model behind the same name would count them.",
    )
    model_salt: int = Field(
        default=0,
        ge=0,
        le=2**31 - 1,
        description="With sampling or logprobs, not 0: every next-token distribution is "
        "another model's (drawn from the truth server's table under another key).",
    )
    logit_noise: float = Field(
        default=0.0,
        ge=0,
        le=10,
        allow_inf_nan=False,
        description="A seeded Gaussian of this standard deviation added to each candidate's "
        "logit, fixed per prompt and step: the same model's numbers from another server.",
    )

    # --- failures ---
    fail: Literal["none", "http_status", "stream_error", "drop"] = Field(
        default="none", description="Failure to inject."
    )
    fail_status: int = Field(default=500, ge=400, le=599, description="Status for http_status.")
    fail_after_tokens: int = Field(
        default=0,
        ge=0,
        le=MAX_REPLY_TOKENS,
        description="Tokens sent before a stream_error or drop.",
    )
    retry_after_s: float | None = Field(
        default=None,
        ge=0,
        le=MAX_WAIT_MS / 1000,
        allow_inf_nan=False,
        description="retry-after on an http_status.",
    )

    # --- the provider's own account ---
    server_timings: ServerTimings = Field(
        default="none",
        description="Which server's own timings the reply carries, in its documented shape.",
    )

    # --- tool calls ---
    tool_calls: int = Field(
        default=0,
        ge=0,
        le=MAX_TOOL_CALLS,
        description="A request offering `tools` (and no `tool_choice: none`) is answered with "
        "tool calls while its history holds fewer than this many tool results, then with "
        "text: a session of this many tool steps (a request forcing a call always gets one).",
    )
    parallel_tool_calls: int = Field(
        default=1,
        ge=1,
        le=MAX_PARALLEL_TOOL_CALLS,
        description="Tool calls in one reply (their arguments share its events).",
    )

    @model_validator(mode="after")
    def _keepalive_period(self) -> TruthSchedule:
        if 0 < self.keepalive_ms < MIN_KEEPALIVE_MS:
            raise ValueError(f"keepalive_ms must be 0 (none) or at least {MIN_KEEPALIVE_MS:g} ms")
        return self

    def decode_ms(self, events: int) -> float:
        """The scripted time from the first output event to the last (no jitter)."""
        return max(events - 1, 0) * self.token_interval_ms * self.tokens_per_event

    def with_overrides(self, overrides: Mapping[str, Any]) -> TruthSchedule:
        """This schedule with `overrides` (its field names, or the older aliases; values may
        be strings, as a URL segment gives them) applied; ConfigError on an unknown name or
        a value of the wrong kind."""
        if not overrides:
            return self
        named = {_ALIASES.get(k, k): v for k, v in overrides.items()}
        try:
            return TruthSchedule.model_validate({**self.model_dump(), **named})
        except ValidationError as exc:
            unknown = [str(e["loc"][0]) for e in exc.errors() if e["type"] == "extra_forbidden"]
            if unknown:
                known = ", ".join(sorted(TruthSchedule.model_fields))
                shown = [k if len(k) <= 40 else k[:40] + "..." for k in sorted(unknown)[:3]]
                more = f" and {len(unknown) - 3} more" if len(unknown) > 3 else ""
                raise ConfigError(f"unknown schedule keys {shown}{more}; known: {known}") from None
            if exc.errors()[0]["loc"]:
                raise ConfigError(f"bad schedule value for {one_line(exc)}") from None
            raise ConfigError(
                f"bad schedule: {one_line(exc).removeprefix('Value error, ')}"
            ) from None


#: The older names of settings, still read, and the settings they name.
#: The lab's truth server: every mechanism the lessons are about, on a schedule a learner's
#: 2-core host serves quickly (`labkit run --truth`). A prompt token costs 1 ms to read cold
#: and 0.02 ms from the cache, a generated token 4 ms; a 2 ms front end no timing reports.
LAB_SCHEDULE: dict[str, Any] = {
    "first_token_ms": 8.0,
    "prefill_ms_per_token": 1.0,
    "cached_ms_per_token": 0.02,
    "cache_tokens": 100_000,
    "token_interval_ms": 4.0,
    "jitter_ms": 0.3,
    "frontend_ms": 2.0,
    "tokens": 12,
    "chat_template": True,
    "end_token": True,
    "sampling": True,
    "candidates": 5,
    "server_timings": CPP_SHAPE,
    "slots": 1,
    # only requests asking for reasoning think (the `thinking` experiment's); others: as before
    "reasoning_tokens": 96,
}

_ALIASES = {
    "ttft_ms": "first_token_ms",
    "interval_ms": "token_interval_ms",
    "keepalive_interval_ms": "keepalive_ms",
}


@dataclass(frozen=True)
class Plan:
    """One response's timing: first output event `first_ms` after service starts, then
    `gaps_ms[i]` between event i and i + 1; event i carries `event_tokens[i]` tokens."""

    first_ms: float
    gaps_ms: list[float] = field(default_factory=list)
    event_tokens: list[int] = field(default_factory=list)
    capped: bool = False  # ended by a length: the request's max_tokens, or ignore_eos
    #: An end token after the output (counted, not streamed), `end_gap_ms` after the last
    #: output event (after the start of service when there is none: then at `first_ms`).
    end_token: bool = False
    end_gap_ms: float = 0.0
    #: Hidden reasoning before the first output event, inside `first_ms`: its tokens (never
    #: streamed, counted in the usage) and the time they took.
    reasoning_tokens: int = 0
    thinking_ms: float = 0.0

    @property
    def output_tokens(self) -> int:
        """Tokens streamed (or in the body)."""
        return sum(self.event_tokens)

    @property
    def decode_ms(self) -> float:
        """From the first output event to the last token decoded (the end token included)."""
        return sum(self.gaps_ms) + (self.end_gap_ms if self.event_tokens else 0.0)


def plan(
    schedule: TruthSchedule,
    prompt_tokens: int,
    max_tokens: int | None,
    rng: random.Random,
    cached_tokens: int = 0,
    ignore_eos: bool = False,
    reasoning: bool = False,
) -> Plan:
    """The timing of one response under `schedule` (overrides already applied): token 1
    after the fixed part, each uncached prompt token's prefill and each cached one's read
    (the whole wait at most `MAX_WAIT_MS`), then, when `reasoning` is asked and the schedule
    has `reasoning_tokens`, the hidden thinking, each reasoning token jittered. `ignore_eos`:
    the reply never stops on its own: `max_tokens` long (else `tokens`; at most
    `MAX_REPLY_TOKENS`), ended by that length."""
    n = schedule.tokens
    capped = bool(max_tokens) and max_tokens is not None and max_tokens < n
    if schedule.end_token and max_tokens == n and n:
        capped = True  # the end token would be one past max_tokens: a length stop
    if ignore_eos:
        capped, n = True, min(max_tokens, MAX_REPLY_TOKENS) if max_tokens else n
    elif capped and max_tokens is not None:
        n = max_tokens
    per = schedule.tokens_per_event
    sizes = [per] * (n // per) + ([n % per] if n % per else [])

    def jittered(ms: float) -> float:
        if not schedule.jitter_ms:
            return ms
        return max(0.0, ms + rng.uniform(-schedule.jitter_ms, schedule.jitter_ms))

    prefill = schedule.prefill_ms_per_token * (prompt_tokens - cached_tokens)
    first = jittered(
        min(
            schedule.first_token_ms + prefill + schedule.cached_ms_per_token * cached_tokens,
            MAX_WAIT_MS,
        )
    )
    thought = schedule.reasoning_tokens if reasoning else 0
    pace = schedule.reasoning_ms_per_token
    pace = schedule.token_interval_ms if pace is None else pace
    thinking = min(sum(jittered(pace) for _ in range(thought)), MAX_WAIT_MS - first)
    first += thinking
    gaps = [jittered(schedule.token_interval_ms * per) for _ in sizes[1:]]
    end_token = schedule.end_token and not capped
    end_gap = jittered(schedule.token_interval_ms) if end_token and sizes else 0.0
    return Plan(
        first_ms=first,
        gaps_ms=gaps,
        event_tokens=sizes,
        capped=capped,
        end_token=end_token,
        end_gap_ms=end_gap,
        reasoning_tokens=thought,
        thinking_ms=thinking,
    )


def load_request_schedules(path: Path, base: TruthSchedule) -> list[TruthSchedule]:
    """The per-request schedules of a JSON Lines file: one object of overrides per line
    (``{"first_token_ms": 120, "tokens": 40}``), used in the order requests arrive, cycling;
    at most `MAX_SCHEDULES`. ConfigError, one line naming ``file:line``, for a bad line."""
    with contextlib.closing(iter_json_lines(path, "schedule file", max_line_bytes=65_536)) as lines:
        return _schedules(path, lines, base)


def _schedules(path: Path, lines: Iterator[JsonLine], base: TruthSchedule) -> list[TruthSchedule]:
    out: list[TruthSchedule] = []
    for line in lines:
        where = f"{path}:{line.number}"
        if not isinstance(line.value, dict):
            raise ConfigError(f"{where}: not a JSON object")
        if len(out) >= MAX_SCHEDULES:
            raise ConfigError(f"{where}: more than labkit's limit of {MAX_SCHEDULES} schedules")
        try:
            out.append(base.with_overrides(line.value))
        except ConfigError as exc:
            raise ConfigError(f"{where}: {exc}") from None
    if not out:
        raise ConfigError(f"the schedule file {path} has no schedules")
    return out
