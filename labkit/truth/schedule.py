"""When the truth server sends each event of a response: the schedules it can follow.

A `TruthSchedule` is the server's setting; `plan` turns it, one request's overrides (a URL
segment ``KEY=VALUE`` or a line of the per-request file) and the request's prompt size and
``max_tokens`` into a `Plan`: the wait from the start of service to the first output event,
the gaps between output events, and how many tokens each event carries. The shapes real
servers have are settings: a prefill that grows with the prompt (``prefill_ms_per_token``),
bursts of several tokens per event (``tokens_per_event``), ``: keep-alive`` comments while
the first token is awaited (``keepalive_ms``), random jitter on every wait (``jitter_ms``,
seeded) and slots that queue the requests beyond them (``slots``, applied by the server).
"""

from __future__ import annotations

import json
import math
import random
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from labkit.errors import ConfigError

__all__ = ["Plan", "TruthSchedule", "load_request_schedules", "plan"]


@dataclass(frozen=True)
class TruthSchedule:
    """The truth server's schedule; every field can be overridden per request."""

    ttft_ms: float = 50.0
    interval_ms: float = 2.0
    tokens: int = 100
    event_bytes: int = 0
    jitter_ms: float = 0.0
    prefill_ms_per_token: float = 0.0
    tokens_per_event: int = 1
    keepalive_ms: float = 0.0
    slots: int = 0

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if not math.isfinite(value) or value < 0:
                raise ConfigError(f"schedule {f.name} must be a finite number >= 0 (got {value})")
        if self.tokens_per_event < 1:
            raise ConfigError("schedule tokens_per_event must be at least 1")

    def with_overrides(self, overrides: Mapping[str, Any]) -> TruthSchedule:
        """This schedule with `overrides` (names of its fields) applied; ConfigError on an
        unknown name or a value of the wrong kind."""
        kinds = {f.name: (int if f.type in ("int", int) else float) for f in fields(self)}
        unknown = set(overrides) - set(kinds)
        if unknown:
            raise ConfigError(
                f"unknown schedule keys {sorted(unknown)}; known: {', '.join(sorted(kinds))}"
            )
        try:
            values: dict[str, Any] = {k: kinds[k](v) for k, v in overrides.items()}
        except (TypeError, ValueError) as exc:
            raise ConfigError(f"bad schedule value: {exc}") from None
        return replace(self, **values)


@dataclass(frozen=True)
class Plan:
    """One response's timing: first output event `first_ms` after service starts, then
    `gaps_ms[i]` between event i and i + 1; event i carries `event_tokens[i]` tokens."""

    first_ms: float
    gaps_ms: list[float] = field(default_factory=list)
    event_tokens: list[int] = field(default_factory=list)
    capped: bool = False  # ended by the request's max_tokens

    @property
    def output_tokens(self) -> int:
        """Tokens in the whole response."""
        return sum(self.event_tokens)


def plan(
    schedule: TruthSchedule,
    prompt_tokens: int,
    max_tokens: int | None,
    rng: random.Random,
) -> Plan:
    """The timing of one response under `schedule` (overrides already applied)."""
    n = schedule.tokens
    capped = bool(max_tokens) and max_tokens is not None and max_tokens < n
    if capped and max_tokens is not None:
        n = max_tokens
    per = schedule.tokens_per_event
    sizes = [per] * (n // per) + ([n % per] if n % per else [])

    def jittered(ms: float) -> float:
        if not schedule.jitter_ms:
            return ms
        return max(0.0, ms + rng.uniform(-schedule.jitter_ms, schedule.jitter_ms))

    first = jittered(schedule.ttft_ms + schedule.prefill_ms_per_token * prompt_tokens)
    gaps = [jittered(schedule.interval_ms * per) for _ in sizes[1:]]
    return Plan(first_ms=first, gaps_ms=gaps, event_tokens=sizes, capped=capped)


def load_request_schedules(path: Path, base: TruthSchedule) -> list[TruthSchedule]:
    """The per-request schedules of a JSON Lines file: one object of overrides per line
    (``{"ttft_ms": 120, "tokens": 40}``), used in the order requests arrive, cycling."""
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        raise ConfigError(f"cannot read the schedule file {path}: {exc.strerror or exc}") from None
    out: list[TruthSchedule] = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as exc:
            raise ConfigError(f"{path} line {number} is not JSON: {exc.msg}") from None
        if not isinstance(obj, dict):
            raise ConfigError(f"{path} line {number} is not a JSON object")
        try:
            out.append(base.with_overrides(obj))
        except ConfigError as exc:
            raise ConfigError(f"{path} line {number}: {exc}") from None
    if not out:
        raise ConfigError(f"the schedule file {path} has no schedules")
    return out
