"""The watch: rounds on a schedule, each loaded into the store, until a budget, a round
cap or a signal stops it; a killed watch restarted with the same command goes on.

Every step is saved in `state.json` before the next (`Watch`), so a restart finishes a round
cut short while it is still on time (else closes it as ``partial``), loads what the store
lacks and records the rounds whose time passed as missed, never run late in a burst. After a
throttled round the watch backs off: the rounds due within the longest ``retry-after`` the
provider gave (or, without one, within ``every × (2^(k−1) − 1)`` after the k-th throttled
round in a row, at most 8 periods) are missed, "backing off". Restarts, throttling and the
budget: docs/watch.md.
"""

from __future__ import annotations

import os
import re
import secrets
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

from labkit.config import LabConfig
from labkit.errors import ConfigError, LabkitError, RunError
from labkit.filenames import safe_filename
from labkit.store import RoundInfo, Store, open_store, redact_url
from labkit.watch.rounds import (
    RoundOutcome,
    RoundPlan,
    RoundRunner,
    RunRounds,
    new_nonce,
    round_run_id,
    unknown_keep_cache,
)
from labkit.watch.schedule import Clock, Schedule, SimulatedClock, WallClock
from labkit.watch.state import (
    MissedSpan,
    RoundEntry,
    WatchLock,
    WatchState,
    read_state,
    write_state,
)

__all__ = ["STORE_FILE", "Watch", "WatchResult", "default_folder", "resolve_store_url"]

#: The store's file in the watch folder when the config names none.
STORE_FILE = "watch.duckdb"
#: Rounds a watch backs off at most after throttling with no retry-after.
MAX_BACKOFF_PERIODS = 8

Line = Callable[[str], None]
_DIGITS = re.compile(r"\d+")


@dataclass
class WatchResult:
    """How a watch process ended."""

    state: WatchState
    stopped: str | None
    rounds_run: int


def default_folder(config: LabConfig) -> Path:
    """`<output_dir>/watch-<name>`."""
    return config.output_dir / f"watch-{safe_filename(config.name, max_len=40)}"


def resolve_store_url(config: LabConfig, folder: Path, override: str | None = None) -> str:
    """The store's URL: `override` (--store), the config's `store` or `store_env`
    variable, else the DuckDB file in the watch folder."""
    if override:
        return override
    w = config.watch
    if w is not None and w.store_env is not None:
        value = os.environ.get(w.store_env, "").strip()
        if not value:
            raise ConfigError(f"watch.store_env: the variable {w.store_env} is not set")
        return value
    if w is not None and w.store is not None:
        return w.store
    return str(folder / STORE_FILE)


def _fmt_time(at: datetime) -> str:
    return f"{at.astimezone(UTC):%Y-%m-%d %H:%M:%S}Z"


class Watch:
    """One watch folder's watch: `run` goes on until it stops.

    One step at a time, each saved in `state.json` before the next. On start: take the
    folder's lock, read the state (or begin one: the watch id, round 0's slot) and finish
    what a killed watch left (`_recover`). Before each round: stop at the round cap or a
    spent budget (or one the next round would overspend, at the rounds' average), record the
    rounds whose time passed as missed (`_skip_missed`), sleep until the next is due. The
    round: state ``running`` (its folder and nonce), the run, its status and counts, the
    store load (idempotent: the store keys records by id), ``loaded``; then its one line:
    index, time, status, requests ok / throttled / failed, TTFT p50, spend so far, the next
    round's time.
    """

    def __init__(
        self,
        config: LabConfig,
        folder: Path,
        *,
        store_url: str | None = None,
        clock: Clock | None = None,
        rounds: RoundRunner | None = None,
        store: Callable[[str], Store] = open_store,
        on_line: Line | None = None,
        config_path: str | None = None,
    ) -> None:
        if config.watch is None:
            raise ConfigError(
                "this config has no watch: section (every, store, budget…); see docs/watch.md"
            )
        self.config = config
        self.settings = config.watch
        self.folder = folder
        self.store_url = resolve_store_url(config, folder, store_url)
        self.open_store = store
        self.on_line = on_line or (lambda line: None)
        self.config_path = config_path
        unknown = unknown_keep_cache(config)
        if unknown:
            raise ConfigError(f"watch.keep_cache: no experiment named {unknown[0]!r}")
        if self.settings.budget.money is not None and not config.price_table():
            raise ConfigError("watch.budget.money needs a price table (prices:, docs/pricing.md)")
        simulated = self.settings.clock.kind == "simulated"
        if clock is None:
            start = self.settings.clock.start
            clock = SimulatedClock(start) if simulated and start is not None else WallClock()
        self.clock = clock
        self._rounds = rounds
        self._lock = WatchLock(folder)
        self._said: set[str] = set()
        self.state: WatchState | None = None

    # -- state ----------------------------------------------------------------------------

    def _begin_state(self) -> WatchState:
        w = self.settings
        now = self.clock.now()
        anchor = now.replace(microsecond=0)
        return WatchState(
            watch_id=f"{safe_filename(self.config.name, max_len=24)}-{secrets.token_hex(2)}",
            name=self.config.name,
            config_path=self.config_path,
            clock=w.clock.kind,
            anchor=anchor,
            every_s=w.every,
            jitter_s=w.jitter_s,
            store=redact_url(self.store_url),
            store_env=w.store_env,
        )

    def _check_same(self, state: WatchState) -> None:
        """The folder's watch must be this config's: its name, schedule and clock."""
        w = self.settings
        if state.name != self.config.name:
            raise RunError(
                f"{self.folder} holds the watch of {state.name!r}, not {self.config.name!r}; "
                "watch into another folder (--folder)"
            )
        for what, was, now in (
            ("every", state.every_s, w.every),
            ("jitter", state.jitter_s, w.jitter_s),
            ("clock", state.clock, w.clock.kind),
        ):
            if was != now:
                raise RunError(
                    f"{self.folder} was watched with {what} = {was}, the config now says {now}; "
                    "restore it to go on, or watch into another folder (--folder)"
                )

    def _save(self) -> None:
        assert self.state is not None
        if self.clock.simulated:
            self.state.sim_now = self.clock.now()
        write_state(self.folder, self.state)

    @property
    def schedule(self) -> Schedule:
        """The folder's schedule."""
        s = self.state
        assert s is not None
        return Schedule(s.watch_id, s.anchor, s.every_s, s.jitter_s)

    def _runner(self) -> RoundRunner:
        if self._rounds is None:
            assert self.state is not None
            self._rounds = RunRounds(self.config, self.folder / "rounds", self.state.watch_id)
        return self._rounds

    # -- the watch ------------------------------------------------------------------------

    async def run(self) -> WatchResult:
        """Run rounds until the watch stops; the lock is held throughout."""
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise RunError(f"cannot create watch folder {self.folder}: {exc.strerror}") from None
        self._lock.acquire()
        try:
            return await self._run()
        finally:
            self._lock.release()

    async def _run(self) -> WatchResult:
        state = read_state(self.folder)
        if state is None:
            state = self._begin_state()
            fresh = True
        else:
            self._check_same(state)
            fresh = False
            if state.clock == "simulated" and state.sim_now is not None:
                await self.clock.sleep_until(state.sim_now)
        self.state = state
        w = self.settings
        state.budget_tokens, state.budget_money = w.budget.tokens, w.budget.money
        state.max_rounds = w.rounds
        state.store, state.store_env = redact_url(self.store_url), w.store_env
        state.config_path = self.config_path or state.config_path
        state.started_at = datetime.now(UTC)
        state.starts += 1
        state.stopped = None
        self._save()
        self.on_line(
            f"watch {state.watch_id}: {'started' if fresh else 'resumed'} in {self.folder}; "
            f"store {state.store}; a round every {_dur(state.every_s)}"
            + (f" (jitter up to {_dur(state.jitter_s)})" if state.jitter_s else "")
            + (" on a simulated clock" if self.clock.simulated else "")
        )
        await self._recover()
        ran = 0
        reason = "the watch was not running"
        while True:
            stop = self._stop_reason()
            if stop is not None:
                state.stopped = stop
                self._save()
                self.on_line(f"watch stopped: {stop}")
                return WatchResult(state, stop, ran)
            index = self._skip_missed(reason)
            if state.max_rounds is not None and index >= state.max_rounds:
                continue  # the cap is reached by missed rounds: said at the loop's top
            due = self.schedule.due(index)
            await self.clock.sleep_until(due)
            if not self.clock.simulated and self.schedule.missed(index, self.clock.now()):
                reason = "the host was late to wake"
                continue
            await self._round(index)
            ran += 1
            reason = "the previous round overran"

    def _skip_missed(self, reason: str) -> int:
        """Record the rounds too late to run now (and those inside a back-off) as missed;
        the next round's index."""
        state = self.state
        assert state is not None
        first = state.next_index()
        if self.clock.simulated:
            index = first
        else:
            index = self.schedule.first_not_missed(first, self.clock.now())
        if state.max_rounds is not None:
            index = min(index, max(state.max_rounds, first))
        self._miss(first, index - 1, reason)
        if state.backoff_until is not None:
            start = index
            while self.schedule.due(index) < state.backoff_until and (
                state.max_rounds is None or index < state.max_rounds
            ):
                index += 1
            self._miss(start, index - 1, "backing off after throttling")
            state.backoff_until = None
        self._save()
        return index

    def _miss(self, first: int, last: int, reason: str) -> None:
        if last < first:
            return
        assert self.state is not None
        span = MissedSpan(
            first=first,
            last=last,
            at_first=self.schedule.due(first),
            at_last=self.schedule.due(last),
            reason=reason,
        )
        self.state.missed.append(span)
        which = f"round {first}" if first == last else f"rounds {first}–{last}"
        self.on_line(
            f"{which} missed ({_fmt_time(span.at_first)}"
            + (f" to {_fmt_time(span.at_last)}" if last > first else "")
            + f"): {reason}"
        )

    def _stop_reason(self) -> str | None:
        s = self.state
        assert s is not None
        done = s.next_index()
        if s.max_rounds is not None and done >= s.max_rounds:
            return f"{s.max_rounds} rounds done (watch.rounds)"
        started = [r for r in s.rounds if r.status != "running"]
        if s.budget_tokens is not None:
            avg = s.spent_tokens / len(started) if started else 0.0
            if s.spent_tokens >= s.budget_tokens:
                return (
                    f"token budget spent: {s.spent_tokens:,} of {s.budget_tokens:,} tokens "
                    f"in {len(started)} rounds"
                )
            if avg and s.spent_tokens + avg > s.budget_tokens:
                return (
                    f"token budget nearly spent: {s.spent_tokens:,} of {s.budget_tokens:,} "
                    f"tokens, and a round takes about {avg:,.0f}"
                )
        if s.budget_money is not None:
            spent = s.spent_money or 0.0
            avg_m = spent / len(started) if started else 0.0
            unit = self._currency()
            if spent >= s.budget_money:
                return f"money budget spent: {spent:.4f} of {s.budget_money:g} {unit}"
            if avg_m and spent + avg_m > s.budget_money:
                return (
                    f"money budget nearly spent: {spent:.4f} of {s.budget_money:g} {unit}, "
                    f"and a round costs about {avg_m:.4f}"
                )
        return None

    def _currency(self) -> str:
        currencies = {e.currency for e in self.config.price_table().entries}
        return currencies.pop() if len(currencies) == 1 else "(price table currency)"

    # -- one round ------------------------------------------------------------------------

    def _plan(self, index: int, at: datetime, nonce: str | None = None) -> RoundPlan:
        assert self.state is not None
        return RoundPlan(
            index=index,
            at=at,
            run_id=round_run_id(index, at, self.state.watch_id),
            nonce=nonce or new_nonce(),
            simulated=self.clock.simulated,
        )

    async def _round(self, index: int) -> None:
        state = self.state
        assert state is not None
        at = self.schedule.due(index) if self.clock.simulated else self.clock.now()
        plan = self._plan(index, at)
        entry = RoundEntry(
            index=index,
            at=at,
            run_id=plan.run_id,
            nonce=plan.nonce,
            started_at=datetime.now(UTC),
        )
        state.rounds.append(entry)
        self._save()
        outcome = await self._runner().run(plan)
        self._ended(entry, outcome)

    def _ended(self, entry: RoundEntry, outcome: RoundOutcome) -> None:
        state = self.state
        assert state is not None
        entry.status = outcome.status
        entry.ended_at = datetime.now(UTC)
        entry.ok, entry.throttled, entry.failed = outcome.ok, outcome.throttled, outcome.failed
        entry.ttft_p50_ms = outcome.ttft_p50_ms
        entry.tokens, entry.money = outcome.tokens, outcome.money
        entry.retry_after_s, entry.note = outcome.retry_after_s, outcome.note
        state.spent_tokens += outcome.tokens
        if outcome.money is not None:
            state.spent_money = (state.spent_money or 0.0) + outcome.money
        if outcome.status == "throttled":
            state.throttled_streak += 1
            state.backoff_until = self._backoff_until(entry, outcome)
        else:
            state.throttled_streak = 0
        self._save()
        for message in outcome.messages:
            said = _DIGITS.sub("#", message)  # a server's new port each round is no news
            if said not in self._said:
                self._said.add(said)
                self.on_line(f"  {message}")
        self._load(entry)
        self.on_line(self._line(entry))

    def _backoff_until(self, entry: RoundEntry, outcome: RoundOutcome) -> datetime | None:
        state = self.state
        assert state is not None
        end = self.clock.now()
        if outcome.retry_after_s is not None:
            wait = outcome.retry_after_s
        else:
            periods = min(2 ** (state.throttled_streak - 1) - 1, MAX_BACKOFF_PERIODS)
            wait = periods * state.every_s
        return end + timedelta(seconds=wait) if wait > 0 else None

    def _load(self, entry: RoundEntry) -> None:
        """Put a finished round into the store; on failure it is kept for the next try."""
        state = self.state
        assert state is not None
        if entry.status == "running" or entry.loaded:
            return
        run_dir = self.folder / "rounds" / entry.run_id
        if not (run_dir / "manifest.json").exists():
            entry.loaded = True  # nothing was made: nothing to load
            self._save()
            return
        info = RoundInfo(
            watch_id=state.watch_id,
            index=entry.index,
            at=entry.at,
            status=entry.status,
            nonce=entry.nonce,
        )
        try:
            store = self.open_store(self.store_url)
            try:
                store.load_run(run_dir, info)
            finally:
                store.close()
        except LabkitError as exc:
            self.on_line(f"round {entry.index}: not stored yet ({exc}); tried again next round")
            return
        entry.loaded = True
        self._save()

    async def _recover(self) -> None:
        """Finish or close the round a killed watch cut, and load what the store lacks."""
        state = self.state
        assert state is not None
        for entry in state.rounds:
            if entry.status != "running":
                continue
            plan = self._plan(entry.index, entry.at, entry.nonce)
            plan.run_id = entry.run_id
            runner = self._runner()
            if not (runner.run_dir(plan) / "manifest.json").exists():
                _remove_unbegun(runner.run_dir(plan))
                state.rounds.remove(entry)  # never began: planned again (or missed)
                self._save()
                break
            on_time = self.clock.simulated or not self.schedule.missed(
                entry.index, self.clock.now()
            )
            if on_time:
                self.on_line(f"round {entry.index}: cut short by a stop; finishing it now")
                outcome = await runner.finish(plan)
            else:
                closed = await runner.close_partial(plan)
                outcome = closed or RoundOutcome(status="partial", note="cut short")
                self.on_line(f"round {entry.index}: cut short and too late to finish: partial")
            self._ended(entry, outcome)
            break  # one round at most is ever running
        for entry in state.rounds:
            if not entry.loaded and entry.status != "running":
                self._load(entry)

    def _line(self, entry: RoundEntry) -> str:
        state = self.state
        assert state is not None
        ttft = (
            f"TTFT p50 {entry.ttft_p50_ms:.1f} ms"
            if entry.ttft_p50_ms is not None
            else ("TTFT p50 –")
        )
        spent = f"spent {state.spent_tokens:,} tokens"
        if state.spent_money is not None:
            spent += f" ({state.spent_money:.4f} {self._currency()})"
        nxt = state.next_index()
        if state.max_rounds is not None and nxt >= state.max_rounds:
            after = "last round"
        else:
            after = f"next {_fmt_time(self.schedule.due(nxt))}"
        note = f" ({entry.note})" if entry.note else ""
        stored = "" if entry.loaded else " · not stored yet"
        return (
            f"round {entry.index} · {_fmt_time(entry.at)} · {entry.status}{note} · requests "
            f"{entry.ok} ok, {entry.throttled} throttled, {entry.failed} failed · {ttft} · "
            f"{spent} · {after}{stored}"
        )


def _remove_unbegun(path: Path) -> None:
    """A round folder killed between its making and its manifest holds no record: it goes,
    so the round can be made again under its name."""
    if not path.is_dir() or path.is_symlink():
        return
    names = {p.name for p in path.iterdir()}
    records = path / "records.jsonl"
    if names <= {".lock", ".reserve", "records.jsonl"} and (
        not records.exists() or records.stat().st_size == 0
    ):
        shutil.rmtree(path, ignore_errors=True)


def _dur(seconds: float) -> str:
    """`600` → ``10m``; `90` → ``90s``; `5400` → ``1.5h``."""
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size and (seconds / size) == round(seconds / size, 2):
            return f"{seconds / size:g}{unit}"
    return f"{seconds:g}s"
