"""The truth log: what the truth server knows about every request it served.

JSON Lines. The first line anchors the clock: ``{"truth_log": 1, "mono_ns", "wall_ns", ...}``
(the server's monotonic and wall clocks read together, so a client that stamps on the wall
clock can be put on the monotonic one). Every other line is one finished request, a
`TruthRequest`. Times are CLOCK_MONOTONIC nanoseconds of the host (`time.perf_counter_ns`).
"""

from __future__ import annotations

import contextlib
import json
from array import array
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, overload

from pydantic import BaseModel, ConfigDict, Field, GetCoreSchemaHandler, ValidationError
from pydantic_core import core_schema

from labkit.errors import ConfigError
from labkit.jsonlines import RawLine, iter_lines, one_line

__all__ = ["TruthLog", "TruthRequest", "TruthStep", "TruthToolCall", "read_truth_log"]


class Candidates(Sequence[tuple[str, float]]):
    """A step's candidates, ``(token, probability)`` pairs likeliest first, held compactly
    (the tokens in one tuple, the probabilities in one array of doubles: a truth log holds
    one per output token, and pairs of Python objects cost three times more)."""

    __slots__ = ("_probabilities", "_tokens")

    def __init__(self, pairs: Iterable[tuple[str, float]]) -> None:
        tokens, probabilities = [], array("d")
        for token, probability in pairs:
            tokens.append(token)
            probabilities.append(probability)
        self._tokens = tuple(tokens)
        self._probabilities = probabilities

    def __len__(self) -> int:
        return len(self._tokens)

    @overload
    def __getitem__(self, index: int) -> tuple[str, float]: ...
    @overload
    def __getitem__(self, index: slice) -> Sequence[tuple[str, float]]: ...
    def __getitem__(self, index: int | slice) -> Any:
        if isinstance(index, slice):
            return list(zip(self._tokens[index], self._probabilities[index], strict=True))
        return self._tokens[index], self._probabilities[index]

    def __iter__(self) -> Iterator[tuple[str, float]]:
        return zip(self._tokens, self._probabilities, strict=True)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Sequence):
            return NotImplemented
        return list(self) == [tuple(p) for p in other]

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"Candidates({list(self)!r})"

    @classmethod
    def __get_pydantic_core_schema__(cls, source: Any, handler: GetCoreSchemaHandler) -> Any:
        pairs = core_schema.list_schema(
            core_schema.tuple_schema(
                [core_schema.str_schema(), core_schema.float_schema(allow_inf_nan=False)]
            )
        )
        return core_schema.no_info_after_validator_function(
            cls,
            core_schema.union_schema([core_schema.is_instance_schema(cls), pairs]),
            serialization=core_schema.plain_serializer_function_ser_schema(
                lambda c: [list(p) for p in c]
            ),
        )


@dataclass(frozen=True, slots=True)
class TruthStep:
    """One output token the server drew, and the distribution it drew it from: the
    candidates (the token among them) with their true probabilities, likeliest first.
    (A slotted dataclass: a log holds many, and a model instance costs five times more.)"""

    token: str
    candidates: Candidates

    @property
    def probability(self) -> float:
        """The drawn token's probability."""
        return dict(self.candidates)[self.token]


class TruthToolCall(BaseModel):
    """A tool call the server made: its id, the tool's name and the arguments (JSON text)."""

    id: str
    name: str
    arguments: str


class TruthRequest(BaseModel):
    """One request as the server saw it and sent it."""

    model_config = ConfigDict(extra="ignore", allow_inf_nan=False)

    id: str = Field(description="The response id: x-request-id header and the stream's id.")
    client_request_id: str | None = Field(
        default=None, description="The client's own x-request-id (or x-correlation-id), if sent."
    )
    traceparent: str | None = Field(default=None, description="The W3C traceparent sent.")
    api: str = Field(description="chat, completions, responses or messages.")
    stream: bool
    model: str
    status: int | None = Field(
        default=200, description="The HTTP status sent (None: the connection was cut first)."
    )
    fail: str | None = Field(
        default=None, description="The scripted failure served: http_status, stream_error, drop."
    )
    t_read_ns: int = Field(description="The request read whole (clock after its last recv).")
    t_admit_ns: int | None = Field(
        default=None,
        description="The server's clock started: its queue from here (older logs: absent, "
        "= t_read_ns).",
    )
    frontend_ms: float = Field(
        default=0.0,
        description="The front end's delay: read to the server's clock starting, in no timing "
        "the server reports (t_admit_ns − t_read_ns, as scheduled).",
    )
    t_start_ns: int = Field(description="Service started (a slot granted); = t_read_ns unqueued.")
    t_headers_ns: int | None = Field(
        default=None, description="The response's status line and headers sent."
    )
    events_ns: list[int] = Field(description="Clock right before each output event's send.")
    events_sent_ns: list[int] = Field(description="Clock right after each output event's send.")
    event_tokens: list[int] = Field(description="Tokens each output event carried.")
    comments_ns: list[int] = Field(default_factory=list, description="Keep-alive comments sent.")
    t_end_ns: int = Field(description="Clock right before the end of the response was sent.")
    prompt_tokens: int = Field(description="The server's count (spaces in the request body).")
    cached_tokens: int = Field(
        default=0, description="Prompt tokens read from the prefix cache (0: none, no cache)."
    )
    output_tokens: int = Field(description="Output tokens sent (streamed, or in the body).")
    end_token: bool = Field(
        default=False, description="An end token ended the reply: counted, never sent."
    )
    usage_output_tokens: int | None = Field(
        default=None,
        description="Output tokens the server counts, as its usage reports them: the sent ones "
        "and the end token (None: a failed reply; older logs: absent, = output_tokens).",
    )
    capped: bool = Field(description="Ended by a length: max_tokens, or ignore_eos.")
    finish_reason: str | None = Field(
        default=None,
        description="How the reply ended, in Chat's words (stop, length, tool_calls, ...); "
        "None for a failed one.",
    )
    tool_calls: list[TruthToolCall] = Field(default_factory=list, description="Calls made.")
    temperature: float | None = Field(default=None, description="The request's temperature.")
    seed: int | None = Field(default=None, description="The request's seed.")
    token_ms: list[float] | None = Field(
        default=None,
        description="The server's own time at each output event sent, ms from the start of "
        "service, as its per-token `timings` reported it (`prompt_ms` + `predicted_ms`); "
        "None: the request asked for none (llama.cpp's `timings_per_token`).",
    )
    steps: list[TruthStep] = Field(
        default_factory=list,
        description="Each output token's draw (with sampling, or logprobs asked): the token "
        "and its candidates' true probabilities.",
    )
    batch: int | None = Field(
        default=None,
        description="The batch the request decoded in, as the schedule's batch flips count it "
        "(`labkit.truth.batch.batch_seen`; None: not counted, the schedule flips nothing).",
    )
    flipped_steps: list[int] = Field(
        default_factory=list,
        description="The steps (0-based) whose token that batch flipped to the second "
        "candidate: `steps` holds the token sent.",
    )
    model_variant: str | None = Field(
        default=None,
        description="What model the schedule served under the name asked for "
        "(`labkit.truth.model_variant.variant_label`): None, the truth server's own; else "
        "e.g. `tokenizer=thirds, model_salt=7`.",
    )
    queue_ms: float = Field(
        default=0.0, description="The wait for service: t_start_ns − t_admit_ns, in ms."
    )
    prefill_ms: float | None = Field(
        default=None, description="Service start to the first output event, as planned (ms)."
    )
    decode_ms: float | None = Field(
        default=None, description="First output event to the last, as planned (ms)."
    )
    reasoning_tokens: int = Field(
        default=0,
        description="Hidden reasoning tokens thought before the first output event: never "
        "sent, counted in the usage (0: none; older logs: absent).",
    )
    thinking_ms: float | None = Field(
        default=None,
        description="The true time of the hidden reasoning, inside prefill_ms (None: none).",
    )
    reported: dict[str, Any] | None = Field(
        default=None,
        description="The server's own timings as the reply carried them: `headers` and the "
        "last chunk's `fields` (None: the schedule's server_timings is none).",
    )


@dataclass(frozen=True)
class TruthLog:
    """A whole truth log: the clock anchor and the requests in the order they finished."""

    path: Path
    mono_ns: int
    wall_ns: int
    requests: list[TruthRequest]
    #: The server's schedule, as its first line gives it (empty: an older log).
    schedule: dict[str, Any] = field(default_factory=dict)

    def mono_from_wall(self, wall_ns: float) -> float:
        """A wall-clock time (ns since the epoch) on the server's monotonic clock."""
        return wall_ns - self.wall_ns + self.mono_ns


def read_truth_log(path: Path | str) -> TruthLog:
    """Read a truth log a line at a time (memory: the requests kept, never the file's text);
    one clear `ConfigError` line, naming the file and line, when `path` is not one. A last
    line cut mid-write (a server killed while writing it) is left out."""
    path = Path(path)
    with contextlib.closing(iter_lines(path, "truth log", last_may_be_cut=True)) as lines:
        anchor = _anchor(path, lines)
        mono_ns, wall_ns = anchor.get("mono_ns"), anchor.get("wall_ns")
        if not (_whole(mono_ns) and _whole(wall_ns)):
            raise ConfigError(
                f"{path}:1: the clock anchor's mono_ns and wall_ns must be whole numbers of ns"
            )
        requests = []
        for line in lines:
            try:
                requests.append(TruthRequest.model_validate_json(line.data))
            except ValidationError as exc:
                if line.cut:
                    break
                raise ConfigError(
                    f"{path}:{line.number}: not a truth record: {one_line(exc)}"
                ) from None
    schedule = anchor.get("schedule")
    assert isinstance(mono_ns, int) and isinstance(wall_ns, int)
    return TruthLog(
        path, mono_ns, wall_ns, requests, schedule if isinstance(schedule, dict) else {}
    )


def _anchor(path: Path, lines: Iterator[RawLine]) -> dict[str, Any]:
    """The clock anchor, the first line (one clear line if it is not one)."""
    try:
        first = next(lines, None)
        anchor = json.loads(first.data) if first is not None and first.number == 1 else None
    except (ConfigError, ValueError, RecursionError):
        anchor = None
    if not isinstance(anchor, dict) or anchor.get("truth_log") != 1:
        raise ConfigError(
            f"{path} is not a truth log (its first line is not the clock anchor "
            "`labkit fake-server` writes)"
        )
    return anchor


def _whole(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)
