"""`labkit watch status FOLDER`: what a watch has done and what it will do next, read from
its folder's state (whether or not a watch runs there now)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

from labkit.errors import RunError
from labkit.watch.schedule import Schedule
from labkit.watch.state import WatchLock, WatchState, read_state

__all__ = ["status_lines"]

_ORDER = ("ok", "throttled", "failed", "partial", "missed", "running")


def _t(at: datetime | None) -> str:
    return "–" if at is None else f"{at.astimezone(UTC):%Y-%m-%d %H:%M:%S}Z"


def status_lines(folder: Path, now: datetime | None = None) -> list[str]:
    """The status of the watch in `folder`, a line per fact; RunError (one line) where the
    folder holds no watch."""
    state = read_state(folder)
    if state is None:
        raise RunError(f"{folder} holds no watch (no state.json); start one with labkit watch")
    pid = WatchLock(folder).holder()
    running = f"running (pid {pid})" if pid and pid > 0 else "running" if pid else "not running"
    if state.stopped and not pid:
        running = f"stopped: {state.stopped}"
    lines = [
        f"watch {state.watch_id} ({state.name}) in {folder}: {running}",
        f"store: {state.store}"
        + (f" (from ${state.store_env})" if state.store_env else "")
        + f"; clock: {state.clock}; a round every {state.every_s:g} s"
        + (f", jitter up to {state.jitter_s:g} s" if state.jitter_s else ""),
    ]
    lines += _done(state)
    lines += _next(state, pid, now)
    return lines


def _done(state: WatchState) -> list[str]:
    counts = state.by_status()
    total = sum(counts.values())
    by = ", ".join(f"{counts[k]} {k}" for k in _ORDER if counts.get(k))
    out = [f"rounds: {total}" + (f" ({by})" if by else "")]
    started = list(state.rounds)
    if started:
        first, last = started[0], started[-1]
        out.append(
            f"first round {first.index} at {_t(first.at)}; last round {last.index} at "
            f"{_t(last.at)}, {last.status}"
        )
        unloaded = [r.index for r in state.rounds if not r.loaded and r.status != "running"]
        if unloaded:
            out.append(f"not yet in the store: rounds {', '.join(map(str, unloaded[:10]))}")
        requests = sum(r.ok for r in started), sum(r.throttled for r in started)
        failed = sum(r.failed for r in started)
        out.append(
            f"requests: {requests[0]} ok, {requests[1]} throttled, {failed} failed; "
            f"restarts: {max(state.starts - 1, 0)}"
        )
    spent = f"spent: {state.spent_tokens:,} tokens"
    if state.budget_tokens is not None:
        left = max(state.budget_tokens - state.spent_tokens, 0)
        spent += f" of {state.budget_tokens:,} (left {left:,})"
    if state.spent_money is not None or state.budget_money is not None:
        money = state.spent_money or 0.0
        spent += f"; money {money:.4f}"
        if state.budget_money is not None:
            spent += f" of {state.budget_money:g} (left {max(state.budget_money - money, 0):.4f})"
    out.append(spent)
    for span in state.missed[-3:]:
        which = f"round {span.first}" if span.count == 1 else f"rounds {span.first}–{span.last}"
        out.append(f"missed {which} ({_t(span.at_first)}): {span.reason}")
    return out


def _next(state: WatchState, pid: int | None, now: datetime | None) -> list[str]:
    if state.stopped and not pid:
        return ["next: nothing; the watch stopped (start it again with the same command)"]
    nxt = state.next_index()
    if state.max_rounds is not None and nxt >= state.max_rounds:
        return [f"next: nothing; all {state.max_rounds} rounds are done"]
    sched = Schedule(state.watch_id, state.anchor, state.every_s, state.jitter_s)
    cut = [r for r in state.rounds if r.status == "running"]
    out = []
    if cut and not pid and state.clock == "simulated":
        out.append(f"round {cut[0].index} was cut short: the watch finishes it when started again")
    elif cut and not pid:
        by = sched.due(cut[0].index) + timedelta(seconds=sched.tolerance_s)
        out.append(
            f"round {cut[0].index} was cut short: started again by {_t(by)}, the watch "
            "finishes it; later, it closes it as partial"
        )
    if state.clock == "simulated":
        return [
            *out,
            f"next: round {nxt}, simulated {_t(sched.due(nxt))} (run at once when started)",
        ]
    now = now or datetime.now(UTC)
    index = sched.first_not_missed(nxt, now)
    due = sched.due(index)
    left = []
    if state.max_rounds is not None:
        left.append(f"{state.max_rounds - index} rounds left of {state.max_rounds}")
    when = f"round {index} at {_t(due)}"
    if not pid:
        when += " if the watch is started again before then"
        if index > nxt:
            which = f"round {nxt}" if index - 1 == nxt else f"rounds {nxt}–{index - 1}"
            when += f" ({which} would be missed)"
    return [*out, f"next: {when}" + (f"; {', '.join(left)}" if left else "")]
