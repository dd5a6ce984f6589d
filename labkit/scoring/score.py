"""A client's error against the truth log: per request, per metric, with intervals.

A client request is matched to the truth by id where the client kept one the server knows,
otherwise by time (in the order of their starts, each takes the earliest unmatched truth the
server read at or after its start, ``TIME_SLACK_MS`` earlier allowed); each row says which
(``matched_by``). A figure's error is the client's value − the true value, timed from S, the
client's start on the host's monotonic clock (`METRICS`; each one's truth: docs/score.md,
"labkit score"). Each metric's errors are summarised by their median and p99 with
distribution-free intervals (`labkit.analysis.stats.quantile`) and their largest value.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field
from typing import Any

from labkit.analysis.stats import quantile
from labkit.figures import Quantile
from labkit.scoring.peers import ClientRequest, ClientResults
from labkit.truth.log import TruthLog, TruthRequest

__all__ = ["METRICS", "TIME_SLACK_MS", "MetricScore", "Score", "ScoreMetric", "score"]

#: How much earlier than a client's start the server may have read its request (a wall
#: clock converted to the monotonic one is known to about this).
TIME_SLACK_MS = 2.0
#: A request the server read this long after the client's start is not the client's.
TIME_WINDOW_MS = 60_000.0


@dataclass(frozen=True)
class ScoreMetric:
    """One scored figure: its name, what it is, its unit."""

    name: str
    title: str
    unit: str


METRICS: list[ScoreMetric] = [
    ScoreMetric("request_start", "request start (client start − server read)", "ms"),
    ScoreMetric("ttft", "TTFT", "ms"),
    ScoreMetric("itl", "inter-token latency (mean per request)", "ms"),
    ScoreMetric("decode", "decode (first to last output)", "ms"),
    ScoreMetric("e2e", "end-to-end", "ms"),
    ScoreMetric("output_tokens", "output tokens", "tokens"),
    ScoreMetric("input_tokens", "input tokens", "tokens"),
    ScoreMetric("event_stamp", "output event stamp (per event)", "ms"),
]


@dataclass(frozen=True)
class MetricScore:
    """One metric's errors over the matched requests (or events)."""

    metric: ScoreMetric
    p50: Quantile
    p99: Quantile
    #: The error of largest magnitude, with its sign (-9.87 ms, not the signed maximum).
    max: float | None
    mean: float | None

    @property
    def n(self) -> int:
        """Values the figures are over."""
        return self.p50.n


@dataclass
class Score:
    """A client scored against a truth log."""

    client: str
    truth: str
    rows: list[dict[str, Any]]
    metrics: list[MetricScore]
    matched_by: dict[str, int]
    unmatched_client: int
    unmatched_truth: int
    failed: int
    not_measured: list[str] = field(default_factory=list)

    def metric(self, name: str) -> MetricScore:
        """The score of metric `name`."""
        return next(m for m in self.metrics if m.metric.name == name)


def _start_ns(req: ClientRequest, truth: TruthLog) -> float | None:
    if req.start_mono_ns is not None:
        return req.start_mono_ns
    if req.start_wall_ns is not None:
        return truth.mono_from_wall(req.start_wall_ns)
    return None


def _match(
    results: ClientResults, truth: TruthLog
) -> list[tuple[ClientRequest, TruthRequest | None, str | None]]:
    by_id: dict[str, TruthRequest] = {}
    for t in truth.requests:
        by_id[t.id] = t
        if t.client_request_id:
            by_id.setdefault(t.client_request_id, t)
    taken: set[str] = set()
    pairs: dict[int, tuple[TruthRequest | None, str | None]] = {}
    for req in results.requests:
        known = by_id.get(req.request_id) if req.request_id else None
        if known is not None and known.id not in taken:
            taken.add(known.id)
            pairs[req.index] = (known, "id")
    free = sorted((t for t in truth.requests if t.id not in taken), key=lambda t: t.t_read_ns)
    reads = [t.t_read_ns for t in free]
    used = [False] * len(free)
    by_start = sorted(
        (r for r in results.requests if r.index not in pairs and _start_ns(r, truth) is not None),
        key=lambda r: _start_ns(r, truth) or 0.0,
    )
    for req in by_start:
        start = _start_ns(req, truth)
        assert start is not None
        k = bisect.bisect_left(reads, start - TIME_SLACK_MS * 1e6)
        while k < len(free) and used[k]:
            k += 1
        if k < len(free) and reads[k] - start <= TIME_WINDOW_MS * 1e6:
            used[k] = True
            pairs[req.index] = (free[k], "time")
    return [(r, *pairs.get(r.index, (None, None))) for r in results.requests]


def _true_values(t: TruthRequest, start: float | None) -> dict[str, float | None]:
    ev = t.events_ns
    first, last = (ev[0], ev[-1]) if ev else (None, None)
    decode = (last - first) / 1e6 if first is not None and last is not None else None
    itl = decode / (t.output_tokens - 1) if decode is not None and t.output_tokens > 1 else None
    return {
        "request_start": None if start is None else 0.0,
        "ttft": None if start is None or first is None else (first - start) / 1e6,
        "itl": itl,
        "decode": decode,
        "e2e": None if start is None else (t.t_end_ns - start) / 1e6,
        "output_tokens": float(t.output_tokens),
        "input_tokens": float(t.prompt_tokens),
    }


def _client_values(req: ClientRequest, t: TruthRequest, start: float | None) -> dict[str, Any]:
    return {
        "request_start": None if start is None else (start - t.t_read_ns) / 1e6,
        "ttft": req.ttft_ms,
        "itl": req.itl_ms,
        "decode": req.decode_ms,
        "e2e": req.e2e_ms,
        "output_tokens": req.output_tokens,
        "input_tokens": req.input_tokens,
    }


def _largest(values: list[float]) -> float | None:
    """The value of largest magnitude, sign kept: an error of -9.87 ms is larger than one of
    +0.18 ms (None for no values)."""
    return max(values, key=abs) if values else None


def _summary(metric: ScoreMetric, values: list[float]) -> MetricScore:
    return MetricScore(
        metric,
        quantile(values, 0.5),
        quantile(values, 0.99),
        _largest(values),
        sum(values) / len(values) if values else None,
    )


def score(results: ClientResults, truth: TruthLog) -> Score:
    """Match `results` to `truth` and state the client's error per request and metric."""
    rows: list[dict[str, Any]] = []
    errors: dict[str, list[float]] = {m.name: [] for m in METRICS}
    matched_by = {"id": 0, "time": 0}
    unmatched = failed = 0
    matched_truth: set[str] = set()
    for req, t, how in _match(results, truth):
        row: dict[str, Any] = {"index": req.index, "request_id": req.request_id, "ok": req.ok}
        if not req.ok:
            failed += 1
        if t is None or how is None:
            unmatched += 1
            row.update(matched_by=None, truth_id=None)
            rows.append(row)
            continue
        matched_truth.add(t.id)
        matched_by[how] += 1
        row.update(matched_by=how, truth_id=t.id)
        start = _start_ns(req, truth)
        true, seen = _true_values(t, start), _client_values(req, t, start)
        for name, client_value in seen.items():
            true_value = true[name]
            error = None
            if req.ok and client_value is not None and true_value is not None:
                error = float(client_value) - true_value
                errors[name].append(error)
            row[name] = client_value
            row[f"{name}_true"] = true_value
            row[f"{name}_error"] = error
        stamps = req.event_stamps_ns
        if req.ok and stamps is not None and len(stamps) == len(t.events_ns):
            event_errors = [(c - s) / 1e6 for c, s in zip(stamps, t.events_ns, strict=True)]
            errors["event_stamp"] += event_errors
            row["event_stamp_error_max"] = _largest(event_errors)
        rows.append(row)
    metrics = [_summary(m, errors[m.name]) for m in METRICS]
    not_measured = [m.metric.name for m in metrics if m.n == 0]
    return Score(
        client=results.label,
        truth=str(truth.path),
        rows=rows,
        metrics=metrics,
        matched_by=matched_by,
        unmatched_client=unmatched,
        unmatched_truth=len(truth.requests) - len(matched_truth),
        failed=failed,
        not_measured=not_measured,
    )
