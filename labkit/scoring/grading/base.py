"""What a graded answer is made of: checks of its figures and facts against the truth.

A figure is *covered* when its stated 95% interval, widened by the tolerance of what the
truth server cannot see (the loopback's transit and a stamp's lateness: `TOLERANCE`), holds
the true value; a figure stated without an interval is graded on its value within the
tolerance. A fact is right or wrong. Each kind's grader (`register_grader`) turns one
answer, its records and their truth into checks.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from statistics import median
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from labkit.figures import Estimate, Mean, Quantile
from labkit.records import LabAnswer, RequestRecord
from labkit.truth.log import TruthLog, TruthRequest

__all__ = [
    "TOLERANCE",
    "Check",
    "Grade",
    "Grader",
    "Truth",
    "fact",
    "figure",
    "grader_for",
    "register_grader",
    "true_decode_ms_per_token",
    "true_outside_ms",
    "true_ttft_ms",
]

#: What the truth server cannot see, by unit: a one-way loopback transit and a stamp's
#: lateness (ms), the same at both ends of a decode interval spread over its tokens
#: (ms/token), a probability printed to two places, and exact counts.
TOLERANCE: dict[str, float] = {
    "ms": 1.0,
    "ms/token": 0.1,
    "ratio": 0.0,
    "tokens": 0.0,
    "p": 0.006,
    "count": 0.0,
}


class Check(BaseModel):
    """One stated figure or fact of one answer, beside the truth."""

    model_config = ConfigDict(extra="forbid")

    answer: str = Field(description="`experiment · provider`: the answer it belongs to.")
    kind: Literal["figure", "fact"]
    name: str
    stated: str = Field(description="What the answer states, as it states it.")
    true: str = Field(description="The true value or fact, from the truth log.")
    value: float | None = None
    lo: float | None = None
    hi: float | None = None
    true_value: float | None = None
    unit: str = ""
    tolerance: float | None = None
    bound: Literal["lower"] | None = Field(
        default=None,
        description="`lower`: the truth log sees only part of the figure, so its value is a "
        "lower bound of the true one, and the check asks only that the stated interval "
        "(widened by the tolerance) reach it.",
    )
    ok: bool | None = Field(
        description="figure: the interval (widened by the tolerance) holds the truth; fact: "
        "it is right. None: not gradable (`why`)."
    )
    why: str | None = None


class Grade(BaseModel):
    """A lab run graded against a truth log (`labkit score TRUTH RUN` on a lab run)."""

    model_config = ConfigDict(extra="forbid")

    run: str
    truth: str
    checks: list[Check] = Field(default_factory=list)
    not_graded: list[str] = Field(
        default_factory=list, description="Answers no grader reads, and why."
    )
    matched: int = Field(description="Measured records matched to a truth request.")
    unmatched: int = Field(description="Measured records the truth log has no request for.")

    @property
    def wrong(self) -> list[Check]:
        """The checks that failed: an interval that missed the truth, a wrong fact."""
        return [c for c in self.checks if c.ok is False]


class Truth:
    """The truth log, looked up by a record's response id (or the request id it sent)."""

    def __init__(self, log: TruthLog, run_records: list[RequestRecord] | None = None) -> None:
        self.log = log
        #: Every record of the graded run: what a grader comparing providers reads.
        self.run_records: list[RequestRecord] = run_records or []
        self._by_id: dict[str, TruthRequest] = {}
        for t in log.requests:
            self._by_id.setdefault(t.id, t)
            if t.client_request_id:
                self._by_id.setdefault(t.client_request_id, t)

    def of(self, record: RequestRecord) -> TruthRequest | None:
        """The truth request a record was answered by (None: none in the log)."""
        for key in (record.response_id, record.request_id):
            if key and key in self._by_id:
                return self._by_id[key]
        return None

    def pairs(self, records: Iterable[RequestRecord]) -> list[tuple[RequestRecord, TruthRequest]]:
        """The measured, successful records with the truth request of each."""
        out = []
        for r in records:
            if r.warmup or r.error is not None:
                continue
            t = self.of(r)
            if t is not None:
                out.append((r, t))
        return out


#: A kind's grader: one answer, its records and the truth, to checks.
Grader = Callable[[LabAnswer, list[RequestRecord], Truth], list[Check]]
_GRADERS: dict[str, Grader] = {}


def register_grader(kind: str) -> Callable[[Grader], Grader]:
    """Register `fn` as the grader of experiment `kind` (one per kind)."""

    def add(fn: Grader) -> Grader:
        if kind in _GRADERS:
            raise ValueError(f"a grader for {kind!r} registered twice")
        _GRADERS[kind] = fn
        return fn

    return add


def grader_for(kind: str) -> Grader | None:
    """The grader of `kind`, where one is registered."""
    return _GRADERS.get(kind)


def true_ttft_ms(record: RequestRecord, t: TruthRequest) -> float | None:
    """The true time to first token: the server's send of the first output event, on the
    monotonic clock both share, less the record's start (None: no event or no start)."""
    if not t.events_ns or record.t_start_mono_ns is None:
        return None
    return (t.events_ns[0] - record.t_start_mono_ns) / 1e6


def true_outside_ms(record: RequestRecord, t: TruthRequest) -> float | None:
    """The true network and front end up to the first output event's send: the record's
    start to that send, less labkit's own send (only the client knows it) and the queue and
    prefill the server spent (None: no event, no start or no prefill planned).

    A stamp's lateness is labkit's own time *after* the send, so it is not in this span and
    is not taken from it; the server's delay beyond its planned prefill, which it reports
    nowhere, is front end and stays in it.
    """
    ttft = true_ttft_ms(record, t)
    if ttft is None or t.prefill_ms is None:
        return None
    return ttft - true_send_ms(record, t) - t.queue_ms - t.prefill_ms


def true_send_ms(record: RequestRecord, t: TruthRequest) -> float:
    """labkit's own send as far as the truth bounds it: the record's `send_ms`, but never
    past the server's read of the whole request (its last byte was handed over before),
    less the connection the request opened inside its window."""
    c = record.client
    send = c.send_ms or 0.0
    if record.t_start_mono_ns is None or c.request_sent_ms is None:
        return send
    connection = c.request_sent_ms - send
    read = (t.t_read_ns - record.t_start_mono_ns) / 1e6 - connection
    return max(0.0, min(send, read))


def true_decode_ms_per_token(t: TruthRequest) -> float | None:
    """The true time per token after the first event: the first to the last output event's
    send over the tokens the later events carried (None: fewer than two events)."""
    if len(t.events_ns) < 2:
        return None
    after_first = sum(t.event_tokens[1:])
    return (t.events_ns[-1] - t.events_ns[0]) / 1e6 / after_first if after_first else None


def _bounds(stated: Quantile | Mean | Estimate | float | None) -> tuple[float | None, ...]:
    if stated is None:
        return None, None, None
    if isinstance(stated, int | float):
        return float(stated), None, None
    return stated.value, stated.lo, stated.hi


def _text(value: float | None, unit: str) -> str:
    if value is None:
        return "n/a"
    suffix = "" if unit in ("count", "ratio", "p") else f" {unit}"
    return f"{value:.4g}{suffix}"


def figure(
    answer: str,
    name: str,
    stated: Quantile | Mean | Estimate | float | None,
    truth: float | None,
    unit: str,
    tolerance: float | None = None,
    bound: Literal["lower"] | None = None,
) -> Check:
    """A stated figure beside its true value: covered when the truth lies in the stated
    interval widened by `tolerance` (default `TOLERANCE[unit]`), or, without an interval,
    within the tolerance of the value. With `bound="lower"` the truth is only a lower bound
    of the true value (the log sees part of it): the interval need only reach it."""
    tol = TOLERANCE.get(unit, 0.0) if tolerance is None else tolerance
    value, lo, hi = _bounds(stated)
    shown = _text(value, unit) + (
        f" [{_text(lo, unit)} to {_text(hi, unit)}]" if lo is not None and hi is not None else ""
    )
    true = ("at least " if bound == "lower" else "") + _text(truth, unit)
    why: str | None
    if value is None or truth is None or math.isnan(truth):
        why = "not stated" if value is None else "no true value in the log"
        return Check(
            answer=answer, kind="figure", name=name, stated=shown, true=true, value=value, lo=lo,
            hi=hi, true_value=truth, unit=unit, tolerance=tol, bound=bound, ok=None, why=why,
        )  # fmt: skip
    if bound == "lower":
        top = (hi if hi is not None else value) + tol
        ok = truth <= top
        why = None if ok else f"below the truth's lower bound by {truth - top:.3g} {unit}"
    else:
        low = (lo if lo is not None else value) - tol
        high = (hi if hi is not None else (math.inf if lo is not None else value)) + tol
        ok = low <= truth <= high
        why = None
        if not ok:
            off = truth - value
            why = f"off by {off:+.3g} {unit}" + ("" if lo is not None else " (no interval stated)")
    return Check(
        answer=answer, kind="figure", name=name, stated=shown, true=true, value=value, lo=lo,
        hi=hi, true_value=truth, unit=unit, tolerance=tol, bound=bound, ok=ok, why=why,
    )  # fmt: skip


def fact(answer: str, name: str, stated: object, true: object, why: str | None = None) -> Check:
    """A stated fact beside the true one: right when they are equal."""
    ok = stated == true
    return Check(
        answer=answer,
        kind="fact",
        name=name,
        stated=str(stated),
        true=str(true),
        ok=ok,
        why=None if ok else why,
    )


def median_of(values: Sequence[float | None]) -> float | None:
    """The median of the known values (None: none)."""
    known = [v for v in values if v is not None]
    return float(median(known)) if known else None


def mean_of(values: Sequence[float | None]) -> float | None:
    """The mean of the known values (None: none)."""
    known = [v for v in values if v is not None]
    return sum(known) / len(known) if known else None
