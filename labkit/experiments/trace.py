"""`trace`: replay a request trace — arrival times and input/output lengths — on its
absolute schedule.

Two formats:

- Mooncake JSONL (``.jsonl``): one object a line with ``timestamp`` (ms since the trace's
  start), ``input_length``, ``output_length`` and ``hash_ids`` (one id per block of
  ``block_tokens`` = 512 prompt tokens; requests sharing leading ids share that prefix);
- CSV (``.csv``): a header ``timestamp,input_tokens,output_tokens``, timestamps in
  ``time_unit`` (ms by default).

Request ``i`` is sent at ``(timestamp_i - timestamp_0) / speedup`` after the replay starts,
on the absolute clock (`labkit.pacing.open_loop`: a late send never delays the next), bounded
by ``max_requests`` and ``duration_s``. Prompts are built to the stated lengths with load's
synthetic words, calibrated with the provider's token counter; a Mooncake block's text is
the same wherever its hash id appears (so the prefix cache sees the trace's sharing), and
new for every replay pass. Outputs decode exactly ``output_length`` tokens where the
provider can. The answer's figures are one load level (`TraceFigures.replay`), cache hits included.
"""

from __future__ import annotations

import csv
import gc
import json
import secrets
import time
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any, ClassVar, Literal

from pydantic import Field, NonNegativeInt, PositiveFloat, PositiveInt

from labkit.errors import ConfigError
from labkit.experiments.base import ExperimentSettings, PlannedRequest, register_experiment
from labkit.experiments.common import latest_pass
from labkit.experiments.load import Level, level_figures
from labkit.experiments.paced import PacedExperiment, RequestDriver, SendFn
from labkit.experiments.prefill_decode import filler_text
from labkit.figures import TraceFigures
from labkit.pacing import open_loop
from labkit.providers.base import ChatRequest, Provider, ProviderSettings
from labkit.records import ErrorKind, LabAnswer, RequestRecord
from labkit.wording import trace_answer

__all__ = ["TraceEntry", "TraceExperiment", "TraceSettings", "read_trace"]

_DEFAULT_TOKENS_PER_WORD = 1.3
_NS = 1_000_000_000
_UNCAPPED_CONNECTIONS = 1024
_DEFAULT_HEADER_TOKENS = 6
_WARMUP_PROMPT = filler_text(16)
_LABEL = "trace"


@dataclass(frozen=True, slots=True)
class TraceEntry:
    """One request of a trace: when it arrives and how long its prompt and answer are."""

    timestamp_ms: float
    input_tokens: int
    output_tokens: int
    hash_ids: tuple[int, ...] = ()


def read_trace(path: Path, time_unit: Literal["ms", "s"] = "ms") -> list[TraceEntry]:
    """The entries of a Mooncake JSONL or a `timestamp,input_tokens,output_tokens` CSV
    trace, in arrival order (ConfigError naming the line for anything else)."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"trace {path}: {exc.strerror or exc}") from exc
    scale = 1000.0 if time_unit == "s" else 1.0
    entries: list[TraceEntry] = []
    if path.suffix.lower() == ".csv":
        rows = csv.DictReader(text.splitlines())
        need = {"timestamp", "input_tokens", "output_tokens"}
        if not need <= set(rows.fieldnames or []):
            raise ConfigError(f"trace {path}: the CSV header must name {', '.join(sorted(need))}")
        for n, row in enumerate(rows, start=2):
            entries.append(
                _entry(path, n, row["timestamp"], row["input_tokens"], row["output_tokens"], scale)
            )
    else:
        for n, line in enumerate(text.splitlines(), start=1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as exc:
                raise ConfigError(f"trace {path}:{n}: not JSON ({exc.msg})") from exc
            if not isinstance(obj, dict):
                raise ConfigError(f"trace {path}:{n}: not a JSON object")
            entry = _entry(
                path,
                n,
                obj.get("timestamp"),
                obj.get("input_length"),
                obj.get("output_length"),
                scale,
            )
            hash_ids = obj.get("hash_ids") or []
            if not isinstance(hash_ids, list) or not all(isinstance(h, int) for h in hash_ids):
                raise ConfigError(f"trace {path}:{n}: hash_ids must be a list of integers")
            entries.append(
                TraceEntry(
                    entry.timestamp_ms, entry.input_tokens, entry.output_tokens, tuple(hash_ids)
                )
            )
    if not entries:
        raise ConfigError(f"trace {path}: no requests")
    return sorted(entries, key=lambda e: e.timestamp_ms)


def _entry(path: Path, line: int, ts: Any, n_in: Any, n_out: Any, scale: float) -> TraceEntry:
    try:
        timestamp = float(ts)
        inputs, outputs = int(n_in), int(n_out)
    except (TypeError, ValueError) as exc:
        raise ConfigError(
            f"trace {path}:{line}: timestamp, input and output lengths must be numbers"
        ) from exc
    if timestamp < 0 or inputs < 1 or outputs < 1:
        raise ConfigError(
            f"trace {path}:{line}: a timestamp >= 0 and lengths >= 1 (got {ts}, {n_in}, {n_out})"
        )
    return TraceEntry(timestamp * scale, inputs, outputs)


class TraceSettings(ExperimentSettings):
    """A trace file and how to replay it."""

    kind: Literal["trace"] = "trace"
    path: Path = Field(
        description="The trace: Mooncake `.jsonl` or `.csv` (relative: to the working directory)."
    )
    time_unit: Literal["ms", "s"] = Field(
        default="ms", description="CSV timestamps' unit (Mooncake's are ms)."
    )
    speedup: PositiveFloat = Field(
        default=1.0, description="Replay this many times faster than recorded (0.5: slower)."
    )
    max_requests: PositiveInt | None = Field(
        default=None, description="Replay only the first this many requests."
    )
    duration_s: PositiveFloat | None = Field(
        default=None, description="Stop sending after this many seconds of replay."
    )
    max_concurrency: PositiveInt | None = Field(
        default=None, description="Cap on requests in flight (waits count as queue)."
    )
    block_tokens: PositiveInt = Field(default=512, description="Tokens per Mooncake hash block.")
    warmup: NonNegativeInt = Field(default=1, description="Warm-up requests before the replay.")
    repeats: PositiveInt = Field(default=1, description="Unused: the trace sets the requests.")
    params: dict[str, Any] = Field(default_factory=lambda: {"temperature": 0})


@register_experiment
class TraceExperiment(PacedExperiment):
    """A trace replayed open loop: latency percentiles and cache hits, as one load level."""

    kind: ClassVar[str] = "trace"
    settings_model: ClassVar[type[ExperimentSettings]] = TraceSettings
    question: ClassVar[str] = (
        "Replaying a recorded trace's arrivals and lengths, what TTFT, decode speed and "
        "throughput does the provider give, and how many prompt tokens does it serve from "
        "its cache?"
    )

    def __init__(self, settings: ExperimentSettings, index: int = 0) -> None:
        super().__init__(settings, index)
        self._tokens_per_word = _DEFAULT_TOKENS_PER_WORD
        self._header_tokens = _DEFAULT_HEADER_TOKENS
        self._warmup_tokens: int | None = None
        self._framing_tokens = 0
        self._exact: dict[str, Any] = {}
        self._path = "wire"

    @property
    def _s(self) -> TraceSettings:
        assert isinstance(self.settings, TraceSettings)
        return self.settings

    @cached_property
    def entries(self) -> list[TraceEntry]:
        """The trace's requests that the bounds let through (`duration_s` at send time)."""
        entries = read_trace(self._s.path, self._s.time_unit)
        return entries[: self._s.max_requests] if self._s.max_requests else entries

    def offsets_ns(self) -> list[int]:
        """Each request's due time from the replay's start, time-scaled."""
        t0 = self.entries[0].timestamp_ms
        return [round((e.timestamp_ms - t0) / self._s.speedup * 1e6) for e in self.entries]

    def level(self) -> Level:
        """The replay as one rate level: the trace's mean rate, time-scaled."""
        offsets = self.offsets_ns()
        span_s = offsets[-1] / _NS
        rate = (len(offsets) - 1) / span_s if span_s > 0 else float(len(offsets))
        return Level(0, "rate", round(rate, 3))

    def validate_for(self, settings: ProviderSettings) -> None:
        """The trace must read, and its longest request fit the provider's context."""
        limit = settings.context_size()
        longest = max(e.input_tokens + e.output_tokens for e in self.entries)
        if limit is not None and longest > limit:
            raise ConfigError(
                f"{self.name}: a trace request of {longest} tokens does not fit provider "
                f"{settings.id!r}'s context of {limit}; raise the context size or bound "
                "max_requests"
            )

    def connections_needed(self) -> int:
        """Requests in flight at most: the cap, else (at most) every request at once."""
        return self._s.max_concurrency or min(len(self.entries), _UNCAPPED_CONNECTIONS)

    def planned_per_path(self, provider: Provider) -> int | None:
        """Warm-ups only: the replay is counted when it starts."""
        return self._s.warmup

    async def prepare(self, provider: Provider) -> None:
        """Calibrate words per token, and a block header's tokens, with the provider's
        counter; take its length switch."""
        self._exact = provider.exact_length_params()
        self._path = self.paths_for(provider)[0]

        async def count(text: str) -> int | None:
            try:
                counted = await provider.count_tokens(text)
            except Exception:
                return None
            return counted.tokens if counted is not None and counted.tokens > 0 else None

        words = await count(filler_text(400))
        if words is not None:
            self._tokens_per_word = words / 400
            self._header_tokens = await count("[123456:000789] ") or _DEFAULT_HEADER_TOKENS
            self._warmup_tokens = await count(_WARMUP_PROMPT)
            # Words join into tokens a little differently inside a long prompt: one built
            # prompt, counted, corrects the rate.
            target = 4 * self._s.block_tokens
            sample = TraceEntry(0.0, target, 1, (0, 1))
            built = await count(self.prompt(sample, 0, "123456"))
            if built is not None:
                self._tokens_per_word *= built / target

    def plan(self, provider: Provider) -> list[PlannedRequest]:
        """Only the warm-ups: the replay is paced by `drive`."""
        return self.warmups("trace-warmup", _WARMUP_PROMPT)

    def prompt(self, entry: TraceEntry, i: int, salt: str) -> str:
        """A prompt of about `entry.input_tokens` tokens as the provider counts its input
        (the chat template the warm-ups showed included): its hash blocks' texts (the same
        for the same id within a pass), then words of its own for any rest."""
        parts: list[str] = []
        remaining = entry.input_tokens - self._framing_tokens
        for block in entry.hash_ids:
            if remaining <= 0:
                break
            n = min(self._s.block_tokens, remaining)
            parts.append(f"[{salt}:{block:06d}] " + filler_text(self._words(n), block))
            remaining -= n
        if remaining > 0 or not parts:
            parts.append(f"[{salt}/{i:06d}] " + filler_text(self._words(remaining), i))
        return " ".join(parts)

    def _words(self, tokens: int) -> int:
        """Filler words for a piece of `tokens` tokens that opens with a header."""
        return max(1, round((tokens - self._header_tokens) / self._tokens_per_word))

    def learn_framing(self, warmups: list[RequestRecord]) -> None:
        """The tokens the provider's chat template adds to a prompt: a warm-up's input
        tokens less its counted prompt (0 without a warm-up or a count)."""
        seen = [
            r.usage.input_tokens
            for r in warmups
            if r.warmup and r.error is None and r.usage.input_tokens is not None
        ]
        if seen and self._warmup_tokens is not None:
            self._framing_tokens = max(0, min(seen) - self._warmup_tokens)

    def request(self, i: int, run: str) -> PlannedRequest:
        """Request `i` of the replay."""
        entry = self.entries[i]
        params = {**self._s.params, "max_tokens": entry.output_tokens, **self._exact}
        messages = [{"role": "user", "content": self.prompt(entry, i, run)}]
        if self._s.system:
            messages.insert(0, {"role": "system", "content": self._s.system})
        req = ChatRequest(messages, params, f"trace-{i}")
        req.client_path = self._path
        tags: dict[str, str | int | float | bool] = {
            "level": _LABEL,
            "mode": "rate",
            "level_run": run,
            "target_input_tokens": entry.input_tokens,
            "target_output_tokens": entry.output_tokens,
            "trace_ms": entry.timestamp_ms,
            "path": self._path,
        }
        return PlannedRequest(key=f"{self.name}/{i}", request=req, trial=i, tags=tags)

    async def drive(self, provider: Provider, driver: RequestDriver) -> None:
        """Replay the trace once; on resume, again only if no pass completed."""
        self.learn_framing(driver.previous())
        previous = latest_pass([r for r in driver.previous() if not r.warmup])
        cut = any(r.error is not None and r.error.kind == ErrorKind.CANCELLED for r in previous)
        if previous and not cut:
            driver.message(f"{self.name}: the trace was already replayed, skipped")
            return
        driver.expect(len(self.entries))
        gc.collect()
        # Digits only, fixed width: every header of every pass counts the same tokens.
        job = {"run": f"{secrets.randbelow(10**6):06d}"}
        await self.run_share(provider, job, (0, 1), time.perf_counter_ns(), driver.send)

    def restore(self, job: dict[str, Any]) -> None:
        """Nothing to restore: the replay runs in the runner's process."""

    async def run_share(
        self,
        provider: Provider,
        job: dict[str, Any],
        share: tuple[int, int],
        t0_ns: int,
        send: SendFn,
    ) -> None:
        """Send every `share[1]`-th request from `share[0]` at its due time."""
        k, of = share
        run = str(job["run"])
        arrivals = [(i, off) for i, off in enumerate(self.offsets_ns()) if i % of == k]
        provider.reserve(self.connections_needed())
        deadline = None if self._s.duration_s is None else t0_ns + int(self._s.duration_s * _NS)
        await open_loop(
            arrivals,
            t0_ns,
            lambda i: self.request(i, run),
            send,
            max_in_flight=self._s.max_concurrency,
            deadline_ns=deadline,
        )

    def analyze(self, provider_id: str, model: str, records: list[RequestRecord]) -> LabAnswer:
        """The replay's latest pass as one load level, with the provider's cache hits."""
        recs = latest_pass([r for r in records if not r.warmup])
        row = level_figures(self.level(), recs, "trace")
        figures = TraceFigures(trace=self._s.path.name, speedup=self._s.speedup, replay=row)
        if not row.ok:
            return self.answer(provider_id, model, "No trace request succeeded.", figures, "failed")
        status: Literal["ok", "partial", "failed"] = "ok" if not row.failed else "partial"
        return self.answer(
            provider_id,
            model,
            trace_answer(self._s.path.name, self._s.speedup, row),
            figures,
            status,
        )
