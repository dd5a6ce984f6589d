"""`labkit watch` on a scripted clock: the schedule and its jitter, rounds missed while the
watch was down (recorded, never run late in a burst), a round cut by a kill finished or
closed as partial and stored once, an overrunning round, throttling's back-off, the
budgets, the status command and the config's `watch:` section."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from labkit.analysis.throttle import throttled_error
from labkit.config import LabConfig, parse_config
from labkit.errors import ConfigError, RunError
from labkit.records import ErrorKind, RecordError
from labkit.store import LoadResult, RoundInfo
from labkit.watch import (
    SIM_TIME_HEADER,
    ManualClock,
    RoundOutcome,
    RoundPlan,
    Schedule,
    SimulatedClock,
    Watch,
    WatchState,
    read_state,
    round_config,
    status_lines,
)

pytestmark = pytest.mark.unit

T0 = datetime(2026, 1, 5, tzinfo=UTC)


def _config(tmp_path: Path, **watch: Any) -> LabConfig:
    return parse_config(
        {
            "name": "probe",
            "output_dir": str(tmp_path),
            "providers": [{"id": "p", "kind": "fake", "model": "m"}],
            "experiments": [
                {"kind": "single", "prompt_cache": "as_sent", "system": "Be brief."},
                {"kind": "single", "prompt_cache": "as_sent"},
            ],
            "watch": {"every": "10m", **watch},
        }
    )


class Killed(BaseException):
    """Stands for SIGKILL in the middle of a round: nothing after it runs."""


@dataclass
class Script:
    """A round runner that takes scripted time and gives scripted outcomes."""

    clock: ManualClock
    duration_s: float = 30.0
    outcomes: dict[int, RoundOutcome] = field(default_factory=dict)
    kill_at: int | None = None
    ran: list[RoundPlan] = field(default_factory=list)
    finished: list[int] = field(default_factory=list)
    closed: list[int] = field(default_factory=list)
    folders: set[str] = field(default_factory=set)
    root: Path = Path("/nonexistent")

    def run_dir(self, plan: RoundPlan) -> Path:
        return self.root / plan.run_id

    async def run(self, plan: RoundPlan) -> RoundOutcome:
        self.ran.append(plan)
        path = self.run_dir(plan)
        path.mkdir(parents=True)
        (path / "manifest.json").write_text("{}")
        self.clock.advance(self.duration_s / 2)
        if plan.index == self.kill_at:
            raise Killed
        self.clock.advance(self.duration_s / 2)
        return self.outcomes.get(plan.index, RoundOutcome(status="ok", ok=2, tokens=100))

    async def finish(self, plan: RoundPlan) -> RoundOutcome:
        self.finished.append(plan.index)
        self.clock.advance(self.duration_s / 2)
        return RoundOutcome(status="ok", ok=2, tokens=100)

    async def close_partial(self, plan: RoundPlan) -> RoundOutcome | None:
        self.closed.append(plan.index)
        return RoundOutcome(status="partial", ok=1, tokens=50)


@dataclass
class FakeStore:
    """Counts each run loaded, as an idempotent store would refuse to double it."""

    loads: list[tuple[str, RoundInfo | None]] = field(default_factory=list)
    url: str = "fake"

    def load_run(self, run_dir: Path, round_info: RoundInfo | None = None) -> LoadResult:
        self.loads.append((run_dir.name, round_info))
        return LoadResult(run_id=run_dir.name, added=1, already=0)

    def close(self) -> None:
        pass


def _watch(
    config: LabConfig, folder: Path, clock: ManualClock, script: Script, store: FakeStore
) -> tuple[Watch, list[str]]:
    lines: list[str] = []
    script.root = folder / "rounds"
    watch = Watch(
        config,
        folder,
        clock=clock,
        rounds=script,
        store=lambda url: store,  # type: ignore[arg-type,return-value]
        on_line=lines.append,
    )
    return watch, lines


def _run(watch: Watch) -> Any:
    return asyncio.run(watch.run())


def test_jitter_is_seeded_per_round_and_stays_inside_the_period() -> None:
    s = Schedule("w-1", T0, 600.0, 60.0)
    again = Schedule("w-1", T0, 600.0, 60.0)
    dues = [s.due(i) for i in range(50)]
    assert dues == [again.due(i) for i in range(50)]  # a restart keeps the schedule
    offsets = [(d - T0).total_seconds() - 600 * i for i, d in enumerate(dues)]
    assert all(0 <= o < 60 for o in offsets) and len(set(offsets)) == 50
    assert Schedule("w-2", T0, 600.0, 60.0).due(3) != dues[3]
    # Missed: more than a quarter period late; the first round still on time from a moment.
    assert not s.missed(0, dues[0] + timedelta(seconds=150))
    assert s.missed(0, dues[0] + timedelta(seconds=151))
    later = T0 + timedelta(days=3, seconds=7)
    first = s.first_not_missed(0, later)
    assert s.missed(first - 1, later) and not s.missed(first, later)


def test_rounds_run_at_their_slots_one_line_each_and_each_is_stored_once(
    tmp_path: Path,
) -> None:
    clock = ManualClock(T0)
    script, store = Script(clock), FakeStore()
    watch, lines = _watch(_config(tmp_path, rounds=4), tmp_path / "w", clock, script, store)
    result = _run(watch)
    assert result.stopped == "4 rounds done (watch.rounds)"
    assert [p.index for p in script.ran] == [0, 1, 2, 3]
    assert [p.at for p in script.ran] == [T0 + timedelta(minutes=10 * i) for i in range(4)]
    assert len({p.nonce for p in script.ran}) == 4  # a fresh nonce per round
    assert [info.index for _, info in store.loads if info] == [0, 1, 2, 3]
    round_lines = [line for line in lines if line.startswith("round ")]
    assert len(round_lines) == 4
    assert "requests 2 ok, 0 throttled, 0 failed" in round_lines[0]
    assert "spent 100 tokens" in round_lines[0] and "next 2026-01-05 00:10:00Z" in round_lines[0]
    assert round_lines[-1].endswith("last round")
    state = read_state(tmp_path / "w")
    assert state is not None and state.spent_tokens == 400 and state.by_status() == {"ok": 4}


def test_a_watch_killed_mid_round_and_restarted_on_time_finishes_that_round(
    tmp_path: Path,
) -> None:
    clock = ManualClock(T0)
    folder = tmp_path / "w"
    script, store = Script(clock, kill_at=2), FakeStore()
    watch, _ = _watch(_config(tmp_path, rounds=5), folder, clock, script, store)
    with pytest.raises(Killed):
        _run(watch)
    state = read_state(folder)
    assert state is not None and state.rounds[-1].status == "running"
    clock.advance(60)  # restarted a minute later: round 2 is still on time
    again = Script(clock)
    watch, lines = _watch(_config(tmp_path, rounds=5), folder, clock, again, store)
    _run(watch)
    assert again.finished == [2] and [p.index for p in again.ran] == [3, 4]
    assert sorted(info.index for _, info in store.loads if info) == [0, 1, 2, 3, 4]
    assert any("finishing it now" in line for line in lines)


def test_a_round_killed_before_its_manifest_is_made_again_under_its_name(tmp_path: Path) -> None:
    start = datetime(2026, 1, 5, tzinfo=UTC)
    clock = SimulatedClock(start)
    folder = tmp_path / "w"
    cfg = _config(tmp_path, every="1h", rounds=3, clock={"kind": "simulated", "start": start})
    script, store = Script(clock, kill_at=1), FakeStore()
    watch, _ = _watch(cfg, folder, clock, script, store)
    with pytest.raises(Killed):
        _run(watch)
    cut = folder / "rounds" / script.ran[-1].run_id
    (cut / "manifest.json").unlink()  # killed before the manifest was written
    (cut / ".lock").touch()
    again = Script(SimulatedClock(start))
    watch, _ = _watch(cfg, folder, again.clock, again, store)
    _run(watch)
    assert [p.index for p in again.ran] == [1, 2] and again.finished == []
    assert again.ran[0].run_id == cut.name  # the same slot, the same folder name
    assert sorted(info.index for _, info in store.loads if info) == [0, 1, 2]


def test_rounds_due_while_the_watch_was_down_are_missed_not_run_in_a_burst(
    tmp_path: Path,
) -> None:
    clock = ManualClock(T0)
    folder = tmp_path / "w"
    script, store = Script(clock, kill_at=1), FakeStore()
    watch, _ = _watch(_config(tmp_path, rounds=12), folder, clock, script, store)
    with pytest.raises(Killed):
        _run(watch)
    clock.advance(47 * 60)  # down 47 minutes: rounds 1 (cut) to 5 are past
    again = Script(clock)
    watch, lines = _watch(_config(tmp_path, rounds=12), folder, clock, again, store)
    restart = clock.now()
    _run(watch)
    assert again.closed == [1] and again.finished == []  # too late to finish: partial
    state = read_state(folder)
    assert state is not None
    assert [(m.first, m.last, m.reason) for m in state.missed] == [
        (2, 5, "the watch was not running")
    ]
    assert again.ran[0].index == 6 and again.ran[0].at == T0 + timedelta(minutes=60)
    assert again.ran[0].at > restart  # waited for its slot
    assert state.by_status() == {"ok": 7, "partial": 1, "missed": 4}
    indices = [info.index for _, info in store.loads if info]
    assert sorted(indices) == sorted(set(indices)) == [0, 1, 6, 7, 8, 9, 10, 11]
    assert any("rounds 2–5 missed" in line for line in lines)


def test_a_round_that_overruns_its_period_makes_the_next_one_missed(tmp_path: Path) -> None:
    clock = ManualClock(T0)
    script, store = Script(clock, duration_s=16 * 60), FakeStore()
    watch, _ = _watch(_config(tmp_path, rounds=4), tmp_path / "w", clock, script, store)
    _run(watch)
    state = read_state(tmp_path / "w")
    assert state is not None
    assert [p.index for p in script.ran] == [0, 2]
    assert [(m.first, m.reason) for m in state.missed] == [
        (1, "the previous round overran"),
        (3, "the previous round overran"),
    ]


def test_a_throttled_round_backs_off_for_its_retry_after_then_the_watch_goes_on(
    tmp_path: Path,
) -> None:
    clock = ManualClock(T0)
    throttled = RoundOutcome(status="throttled", ok=1, throttled=1, retry_after_s=25 * 60)
    script, store = Script(clock, outcomes={1: throttled}), FakeStore()
    watch, lines = _watch(_config(tmp_path, rounds=7), tmp_path / "w", clock, script, store)
    _run(watch)
    state = read_state(tmp_path / "w")
    assert state is not None
    # Round 1 ends at 00:10:30; retry-after 25 min: rounds 2 (00:20) and 3 (00:30) wait.
    assert [p.index for p in script.ran] == [0, 1, 4, 5, 6]
    assert [(m.first, m.last, m.reason) for m in state.missed] == [
        (2, 3, "backing off after throttling")
    ]
    assert "throttled" in next(line for line in lines if line.startswith("round 1 "))
    assert [info.status for _, info in store.loads if info][1] == "throttled"


def test_throttled_rounds_without_retry_after_back_off_longer_each_time(tmp_path: Path) -> None:
    clock = ManualClock(T0)
    hit = RoundOutcome(status="throttled", throttled=2)
    script = Script(clock, outcomes={i: hit for i in range(20)})
    watch, _ = _watch(_config(tmp_path, rounds=12), tmp_path / "w", clock, script, FakeStore())
    _run(watch)
    # k-th throttled round in a row: (2^(k-1) - 1) periods skipped: 0, 1, 3, ...
    assert [p.index for p in script.ran] == [0, 1, 3, 7]


def test_the_token_budget_stops_the_watch_with_one_line_saying_so(tmp_path: Path) -> None:
    clock = ManualClock(T0)
    script = Script(clock)
    watch, lines = _watch(
        _config(tmp_path, budget={"tokens": 350}), tmp_path / "w", clock, script, FakeStore()
    )
    result = _run(watch)
    assert [p.index for p in script.ran] == [0, 1, 2]  # a 4th would pass 350
    assert result.stopped is not None and result.stopped.startswith("token budget")
    assert lines[-1] == (
        "watch stopped: token budget nearly spent: 300 of 350 tokens, and a round takes about 100"
    )


def test_the_money_budget_stops_the_watch_in_the_price_tables_currency(tmp_path: Path) -> None:
    clock = ManualClock(T0)
    costly = {i: RoundOutcome(status="ok", ok=2, tokens=10, money=0.75) for i in range(9)}
    script = Script(clock, outcomes=costly)
    cfg = _config(tmp_path, budget={"money": 2})
    cfg = cfg.model_copy(update={"prices": _prices()})
    watch, lines = _watch(cfg, tmp_path / "w", clock, script, FakeStore())
    _run(watch)
    assert [p.index for p in script.ran] == [0, 1]  # a third would make 2.25 of 2
    assert lines[-1] == (
        "watch stopped: money budget nearly spent: 1.5000 of 2 EUR, and a round costs about 0.7500"
    )
    assert "spent 20 tokens (1.5000 EUR)" in lines[-2]
    state = read_state(tmp_path / "w")
    assert state is not None and state.spent_money == 1.5


def _prices() -> list[Any]:
    from labkit.pricing import PriceEntry

    return [PriceEntry(model="m", date=T0, currency="EUR", input=1.0, output=2.0)]


def test_a_simulated_clock_runs_rounds_back_to_back_and_resumes_its_time(tmp_path: Path) -> None:
    start = datetime(2026, 1, 5, tzinfo=UTC)
    clock = SimulatedClock(start)
    cfg = _config(tmp_path, every="1h", rounds=3, clock={"kind": "simulated", "start": start})
    script, store = Script(clock, duration_s=7200), FakeStore()  # longer than a period
    watch, _ = _watch(cfg, tmp_path / "w", clock, script, store)
    _run(watch)
    assert [p.at for p in script.ran] == [start + timedelta(hours=h) for h in range(3)]
    assert all(p.simulated for p in script.ran)
    state = read_state(tmp_path / "w")
    assert state is not None and not state.missed  # simulated time never misses a round
    cfg5 = _config(tmp_path, every="1h", rounds=5, clock={"kind": "simulated", "start": start})
    clock2 = SimulatedClock(start)  # a restart: the state says where simulated time was
    again = Script(clock2)
    watch, _ = _watch(cfg5, tmp_path / "w", clock2, again, store)
    _run(watch)
    assert [p.at for p in again.ran] == [start + timedelta(hours=h) for h in (3, 4)]


def test_one_watch_per_folder_and_a_changed_schedule_is_refused(tmp_path: Path) -> None:
    clock = ManualClock(T0)
    folder = tmp_path / "w"
    watch, _ = _watch(_config(tmp_path, rounds=1), folder, clock, Script(clock), FakeStore())
    folder.mkdir()
    watch._lock.acquire()
    try:
        other, _ = _watch(_config(tmp_path, rounds=1), folder, clock, Script(clock), FakeStore())
        with pytest.raises(RunError, match="in use by another labkit watch"):
            _run(other)
    finally:
        watch._lock.release()
    _run(watch)
    changed, _ = _watch(
        _config(tmp_path, every="5m", rounds=2), folder, clock, Script(clock), FakeStore()
    )
    with pytest.raises(RunError, match=r"was watched with every = 600\.0"):
        _run(changed)


def test_status_says_what_was_done_and_what_comes_next(tmp_path: Path) -> None:
    clock = ManualClock(T0)
    folder = tmp_path / "w"
    script = Script(clock, kill_at=3)
    watch, _ = _watch(
        _config(tmp_path, rounds=10, budget={"tokens": 5000}), folder, clock, script, FakeStore()
    )
    with pytest.raises(Killed):
        _run(watch)
    text = "\n".join(status_lines(folder, now=T0 + timedelta(minutes=31)))
    assert "not running" in text
    assert "rounds: 4 (3 ok, 1 running)" in text
    assert "spent: 300 tokens of 5,000 (left 4,700)" in text
    assert "round 3 was cut short: started again by 2026-01-05 00:32:30Z" in text
    assert "next: round 4 at 2026-01-05 00:40:00Z if the watch is started again" in text
    later = "\n".join(status_lines(folder, now=T0 + timedelta(minutes=75)))
    assert "next: round 8 at 2026-01-05 01:20:00Z" in later and "rounds 4–7 would be" in later
    with pytest.raises(RunError, match="holds no watch"):
        status_lines(tmp_path / "nothing")


def test_a_round_config_carries_its_nonce_tags_and_simulated_time(tmp_path: Path) -> None:
    cfg = _config(tmp_path, keep_cache=["single#1"])
    plan = RoundPlan(index=7, at=T0, run_id="r", nonce="abcd1234", simulated=True)
    rc = round_config(cfg, plan, "probe-1a2b", tmp_path / "rounds")
    assert rc.experiments[0].system == "Probe abcd1234. Be brief."
    assert rc.experiments[1].system is None  # keep_cache: sent as written
    tags = {"watch_id": "probe-1a2b", "watch_round": 7, "watch_nonce": "abcd1234"}
    assert rc.request_tags == tags
    assert rc.request_headers == {SIM_TIME_HEADER: str(int(T0.timestamp()))}
    real = round_config(cfg, RoundPlan(7, T0, "r", "n", simulated=False), "w", tmp_path)
    assert real.request_headers == {}


@pytest.mark.parametrize(
    ("watch", "message"),
    [
        ({"every": "10m", "jitter": "10m"}, "jitter must be less than every"),
        ({"every": "ten"}, "expected a duration"),
        ({"clock": "simulated"}, "a simulated clock needs start"),
        ({"store": "a.duckdb", "store_env": "X"}, "give store or store_env, not both"),
        ({"budget": {"tokens": 0}}, "budget.tokens"),
    ],
)
def test_a_bad_watch_section_is_one_clear_error(watch: dict[str, Any], message: str) -> None:
    data = {
        "name": "w",
        "providers": [{"id": "p", "kind": "fake", "model": "m"}],
        "experiments": [{"kind": "single"}],
        "watch": watch,
    }
    with pytest.raises(ConfigError, match=message):
        parse_config(data)


def test_a_config_sets_only_labkit_headers_and_a_store_url_with_a_password_is_refused() -> None:
    base = {
        "name": "w",
        "providers": [{"id": "p", "kind": "fake", "model": "m"}],
        "experiments": [{"kind": "single"}],
    }
    with pytest.raises(ConfigError, match="only X-Labkit-"):
        parse_config({**base, "request_headers": {"Authorization": "Bearer x"}})
    with pytest.raises(ConfigError, match="credentials go in environment variables"):
        parse_config({**base, "watch": {"store": "postgresql://u:hunter2@db/x"}})
    with pytest.raises(ConfigError, match="keep_cache: no experiment named 'nope'"):
        Watch(
            parse_config({**base, "watch": {"keep_cache": ["nope"]}}),
            Path("/nonexistent"),
        )
    with pytest.raises(ConfigError, match="needs a price table"):
        Watch(parse_config({**base, "watch": {"budget": {"money": 5}}}), Path("/nonexistent"))


def test_rate_limits_and_quotas_are_throttled_and_other_errors_are_failures() -> None:
    def err(kind: ErrorKind, status: int | None, message: str) -> RecordError:
        return RecordError(kind=kind, status=status, message=message)

    assert throttled_error(err(ErrorKind.HTTP_STATUS, 429, "HTTP 429"))
    assert throttled_error(err(ErrorKind.HTTP_STATUS, 403, "HTTP 403: insufficient_quota"))
    assert throttled_error(err(ErrorKind.STREAM_ERROR, None, "rate_limit_error: slow down"))
    assert not throttled_error(err(ErrorKind.HTTP_STATUS, 403, "HTTP 403: forbidden"))
    assert not throttled_error(err(ErrorKind.HTTP_STATUS, 500, "HTTP 500: rate limit"))
    assert not throttled_error(err(ErrorKind.TIMEOUT, None, "rate limit"))
    assert not throttled_error(None)


def test_state_survives_a_round_trip(tmp_path: Path) -> None:
    state = WatchState(
        watch_id="w", name="n", clock="real", anchor=T0, every_s=60.0, store="s.duckdb"
    )
    from labkit.watch.state import write_state

    write_state(tmp_path, state)
    assert read_state(tmp_path) == state
    (tmp_path / "state.json").write_text("{not json")
    with pytest.raises(RunError, match="is not a watch state"):
        read_state(tmp_path)


@pytest.mark.parametrize(
    "content",
    [
        b"\xff\xfe not UTF-8",
        b"[" * 100_000 + b"]" * 100_000,
        b'{"format": NaN}',
        b'{"format": 1e999}',
        b'"a string"',
        b"",
    ],
    ids=["not-utf8", "deep", "nan", "huge-number", "wrong-type", "empty"],
)
def test_a_hostile_state_file_is_one_line(tmp_path: Path, content: bytes) -> None:
    (tmp_path / "state.json").write_bytes(content)
    with pytest.raises(RunError, match="is not a watch state") as caught:
        read_state(tmp_path)
    assert "\n" not in str(caught.value)


def test_a_state_file_too_large_is_refused_unread(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import labkit.watch.state as state_module

    monkeypatch.setattr(state_module, "MAX_STATE_BYTES", 16)
    (tmp_path / "state.json").write_bytes(b'{"format": 1, "padding": "' + b"x" * 64 + b'"}')
    with pytest.raises(RunError, match="larger than 16 bytes"):
        read_state(tmp_path)
