"""Agent sessions as jobs: each session's completion time and its critical-path split.

Walking each agent's turns in order from its start (tags ``agent``, ``step``, ``agent_t0_ns``,
``tool_ms``, ``subagents``), a session's time splits into tool time, the provider's queue,
prefill and decode, and labkit's own time around them, a fan-out's wait being the slowest
sub-agent's own path: the terms add up to the session's time from its start to its last answer
read. A session is complete only when its main agent ended with an answer (`session_end`). The
terms, the tags and the endings: docs/measurement.md, "Sessions".
"""

from __future__ import annotations

from collections import defaultdict

from labkit.analysis.requests import cached_tokens
from labkit.analysis.selection import latest_pass
from labkit.analysis.stats import median
from labkit.figures.session import (
    CriticalPath,
    SessionEnd,
    SessionFigures,
    SessionRow,
    SessionStep,
)
from labkit.records import RequestRecord, StopReason
from labkit.timing import percentile

__all__ = ["agent_path", "session_end", "session_figures", "session_steps", "turn_split"]


def turn_split(record: RequestRecord) -> CriticalPath:
    """One turn's time, send to stream end, as provider queue, prefill and decode."""
    e2e = _e2e(record)
    ttft = record.client.ttft_ms
    first = e2e if ttft is None else min(ttft, e2e)
    queue = min(record.provider_timings.queue_ms or 0.0, first)
    return CriticalPath(provider_queue_ms=queue, prefill_ms=first - queue, decode_ms=e2e - first)


def _e2e(record: RequestRecord) -> float:
    c = record.client
    for value in (c.e2e_ms, c.last_token_ms, c.ttft_ms, c.headers_ms):
        if value is not None:
            return value
    return 0.0


def _stream_end_ns(record: RequestRecord) -> int:
    return int(record.t_start_mono_ns or 0) + int(_e2e(record) * 1e6)


def _end_ns(record: RequestRecord) -> int:
    """When labkit had the turn's reply in hand (`read_ns`), else the stream's end."""
    read = record.tags.get("read_ns")
    return int(read) if isinstance(read, int) else _stream_end_ns(record)


def session_steps(records: list[RequestRecord]) -> dict[str, list[RequestRecord]]:
    """One session's turns per agent, in order: per step the last record of the latest
    pass (a failed try and its retry are separate steps)."""
    by_agent: dict[str, dict[int, RequestRecord]] = defaultdict(dict)
    for r in sorted(latest_pass(records, "session_run"), key=lambda r: r.started_at):
        if r.t_start_mono_ns is None or not isinstance(r.tags.get("step"), int):
            continue
        by_agent[str(r.tags.get("agent", "0"))][int(r.tags["step"])] = r
    return {a: [steps[k] for k in sorted(steps)] for a, steps in by_agent.items()}


def agent_path(agent: str, agents: dict[str, list[RequestRecord]]) -> tuple[CriticalPath, int, int]:
    """`agent`'s critical path, its start and its end (ns, the host's monotonic clock)."""
    turns = agents.get(agent, [])
    if not turns:
        return CriticalPath(), 0, 0
    t0 = int(turns[0].tags.get("agent_t0_ns", turns[0].t_start_mono_ns or 0))
    path = CriticalPath()
    t = t0
    for r in turns:
        start = int(r.t_start_mono_ns or t)
        gap = (start - t) / 1e6
        tool = float(r.tags.get("tool_ms", 0.0))
        children = [
            a
            for a, recs in agents.items()
            if recs
            and recs[0].tags.get("parent") == agent
            and recs[0].tags.get("joins_step") == r.tags.get("step")
        ]
        if children:
            spans = [agent_path(c, agents) for c in children]
            slowest = max(spans, key=lambda s: s[2])
            path = path.plus(slowest[0])
            path = path.plus(CriticalPath(labkit_ms=gap - slowest[0].total_ms))
        else:
            path = path.plus(CriticalPath(tool_ms=tool, labkit_ms=gap - tool))
        path = path.plus(turn_split(r))
        path = path.plus(CriticalPath(labkit_ms=(_end_ns(r) - _stream_end_ns(r)) / 1e6))
        t = _end_ns(r)
    return path, t0, t


def session_end(last: RequestRecord) -> SessionEnd:
    """How a session ended, from its main agent's last turn: `answer` only when that turn
    succeeded, called no tool (`final`) and stopped on its own. A replayed trace's turns
    are sent at their recorded lengths (`trace_calls` tagged), so there `length` is the
    trace's own end, not a cut."""
    if last.error is not None:
        return "failed"
    if not last.tags.get("final"):
        return "step_limit"
    if last.stop_reason == StopReason.LENGTH and "trace_calls" not in last.tags:
        return "length"
    if last.stop_reason in (StopReason.CONTENT_FILTER, StopReason.REFUSAL):
        return "refused"
    return "answer"


def _cached_share(r: RequestRecord) -> float | None:
    cached = cached_tokens(r)
    total = r.usage.input_tokens
    return cached / total if cached is not None and total else None


def _p(values: list[float], q: float) -> float | None:
    return percentile(sorted(values), q) if values else None


def session_figures(
    records: list[RequestRecord], slo_ms: float | None = None, source: str = "generated"
) -> SessionFigures:
    """Every session's row and turns, the critical path summed over the sessions one run
    measured, completion percentiles, per-call times and goodput under `slo_ms`."""
    by_session: dict[int, list[RequestRecord]] = defaultdict(list)
    for r in records:
        if not r.warmup and isinstance(r.tags.get("session"), int) and "agent" in r.tags:
            by_session[int(r.tags["session"])].append(r)
    rows: list[SessionRow] = []
    steps: list[SessionStep] = []
    total = CriticalPath()
    starts: list[int] = []
    ends: list[int] = []
    for session in sorted(by_session):
        agents = session_steps(by_session[session])
        if "0" not in agents:
            continue
        path, t0, t_end = agent_path("0", agents)
        turns = [r for recs in agents.values() for r in recs]
        ok = [r for r in turns if r.error is None]
        root_last = agents["0"][-1]
        resumed = any(r.tags.get("resumed") for r in turns)
        ended = session_end(root_last)
        complete = ended == "answer"
        duration = (t_end - t0) / 1e6
        meets = None if slo_ms is None else complete and duration <= slo_ms
        rows.append(
            SessionRow(
                session=session,
                complete=complete,
                ended=ended,
                resumed=resumed,
                steps=len(turns),
                failed_steps=len(turns) - len(ok),
                agents=len(agents),
                tool_calls=sum(int(r.tags.get("calls", 0)) for r in ok),
                input_tokens=sum(r.usage.input_tokens or 0 for r in ok),
                output_tokens=sum(r.usage.output_tokens or 0 for r in ok),
                duration_ms=duration,
                critical=path,
                meets_slo=meets,
            )
        )
        if not resumed:
            total = total.plus(path)
            starts.append(t0)
            ends.append(t_end)
        for r in turns:
            calls = int(r.tags.get("calls", 0))
            start = (int(r.t_start_mono_ns or t0) - t0) / 1e6
            steps.append(
                SessionStep(
                    session=session,
                    agent=str(r.tags["agent"]),
                    step=int(r.tags["step"]),
                    ok=r.error is None,
                    start_ms=start,
                    end_ms=start + _e2e(r),
                    tool_ms=float(r.tags.get("tool_ms", 0.0)),
                    tool_calls=calls,
                    subagents=int(r.tags.get("subagents", 0)),
                    input_tokens=r.usage.input_tokens,
                    output_tokens=r.usage.output_tokens,
                    cached_share=_cached_share(r),
                    tool_call_first_ms=r.client.ttft_ms if calls else None,
                    tool_call_args_ms=r.client.last_token_ms if calls else None,
                    compacted=bool(r.tags.get("compacted", False)),
                )
            )
    done = [row for row in rows if row.complete and not row.resumed]
    incomplete: dict[str, int] = defaultdict(int)
    for row in rows:
        if not row.complete and row.ended is not None:
            incomplete[row.ended] += 1
    span_s = (max(ends) - min(starts)) / 1e9 if starts and max(ends) > min(starts) else None
    good = [row for row in done if row.meets_slo is not False]
    return SessionFigures(
        source=source,
        sessions=rows,
        steps=steps,
        critical=total,
        incomplete=dict(incomplete),
        completion_ms_p50=_p([r.duration_ms for r in done], 50),
        completion=median([r.duration_ms for r in done]) if done else None,
        completion_ms_p90=_p([r.duration_ms for r in done], 90),
        steps_p50=_p([float(r.steps) for r in rows], 50),
        tool_call_first_ms_p50=_p(
            [s.tool_call_first_ms for s in steps if s.tool_call_first_ms is not None], 50
        ),
        tool_call_args_ms_p50=_p(
            [s.tool_call_args_ms for s in steps if s.tool_call_args_ms is not None], 50
        ),
        cached_share_p50=_p([s.cached_share for s in steps if s.cached_share is not None], 50),
        slo_ms=slo_ms,
        queue_reported=any(
            r.provider_timings.queue_ms is not None for recs in by_session.values() for r in recs
        ),
        goodput_sessions_per_s=len(good) / span_s if span_s else None,
    )
