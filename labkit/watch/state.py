"""A watch folder's state: `state.json` (what was done, what was spent, the schedule) and
the lock that lets one watch at a time write it.

The state is rewritten whole and atomically (`labkit.safefiles.write_new_file`) at each
step of a round: before it starts (``running``, with its run folder and nonce), when it
ends (its status and counts), and once the store holds it (``loaded``). A watch killed at
any moment finds on restart exactly which round was cut and whether the store has it.
"""

from __future__ import annotations

import fcntl
import os
from datetime import datetime
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field, ValidationError

from labkit.errors import ConfigError, RunError
from labkit.jsonlines import loads_strict
from labkit.safefiles import LockHeld, take_lock, write_new_file

__all__ = [
    "LOCK_FILE",
    "STATE_FILE",
    "MissedSpan",
    "RoundEntry",
    "WatchLock",
    "WatchState",
    "read_state",
    "write_state",
]

STATE_FILE = "state.json"
LOCK_FILE = ".watch.lock"
STATE_FORMAT = 1

RoundStatus = Literal["running", "ok", "throttled", "failed", "partial"]


class RoundEntry(BaseModel):
    """One round that started: when it stood for, how it went, whether the store has it."""

    index: int
    at: datetime = Field(description="The time the round stands for (simulated or real), UTC.")
    run_id: str = Field(description="The round's run folder, under rounds/.")
    nonce: str | None = None
    status: RoundStatus = "running"
    started_at: datetime = Field(description="Wall clock when it started.")
    ended_at: datetime | None = None
    ok: int = 0
    throttled: int = 0
    failed: int = 0
    ttft_p50_ms: float | None = None
    tokens: int = 0
    money: float | None = None
    retry_after_s: float | None = None
    loaded: bool = False
    note: str | None = None


class MissedSpan(BaseModel):
    """Rounds `first`..`last` that were due and not run (the watch was down, a round
    overran, or it was backing off after throttling)."""

    first: int
    last: int
    at_first: datetime
    at_last: datetime
    reason: str

    @property
    def count(self) -> int:
        """How many rounds the span holds."""
        return self.last - self.first + 1


class WatchState(BaseModel):
    """Everything a watch folder knows about its watch."""

    format: int = STATE_FORMAT
    watch_id: str
    name: str
    config_path: str | None = None
    clock: Literal["real", "simulated"]
    anchor: datetime = Field(description="Round 0's slot (UTC; simulated time on that clock).")
    every_s: float
    jitter_s: float = 0.0
    store: str = Field(description="The store's URL with any password removed.")
    store_env: str | None = Field(
        default=None, description="The environment variable holding the store's URL, if so."
    )
    budget_tokens: int | None = None
    budget_money: float | None = None
    max_rounds: int | None = None
    rounds: list[RoundEntry] = Field(default_factory=list)
    missed: list[MissedSpan] = Field(default_factory=list)
    spent_tokens: int = 0
    spent_money: float | None = None
    backoff_until: datetime | None = None
    throttled_streak: int = 0
    sim_now: datetime | None = Field(
        default=None, description="A simulated clock's time when the watch last stopped."
    )
    started_at: datetime | None = None
    starts: int = 0
    stopped: str | None = Field(default=None, description="Why the watch ended, if it did.")

    def next_index(self) -> int:
        """The first round neither started nor missed."""
        done = [r.index for r in self.rounds] + [m.last for m in self.missed]
        return max(done, default=-1) + 1

    def by_status(self) -> dict[str, int]:
        """Rounds by status, missed ones included."""
        out: dict[str, int] = {}
        for r in self.rounds:
            out[r.status] = out.get(r.status, 0) + 1
        missed = sum(m.count for m in self.missed)
        if missed:
            out["missed"] = missed
        return out


#: A state far larger than months of rounds is not one (read no further).
MAX_STATE_BYTES = 64 * 1024 * 1024


def read_state(folder: Path) -> WatchState | None:
    """The folder's state (None: no watch has run there); RunError, one line, if unreadable."""
    path = folder / STATE_FILE
    try:
        with path.open("rb") as fh:
            raw = fh.read(MAX_STATE_BYTES + 1)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise RunError(f"cannot read {path}: {exc.strerror or exc}") from None
    if len(raw) > MAX_STATE_BYTES:
        raise RunError(f"{path} is larger than {MAX_STATE_BYTES} bytes: not a watch state")
    try:
        state = WatchState.model_validate(loads_strict(raw.decode("utf-8"), str(path)))
    except UnicodeDecodeError:
        raise RunError(f"{path} is not a watch state this labkit reads: not UTF-8") from None
    except ConfigError as exc:
        raise RunError(f"{path} is not a watch state this labkit reads: {exc}") from None
    except (ValueError, ValidationError) as exc:
        first = str(exc).splitlines()[0][:200]
        raise RunError(f"{path} is not a watch state this labkit reads: {first}") from None
    if state.format > STATE_FORMAT:
        raise RunError(f"{path} was written by a newer labkit (format {state.format})")
    return state


def write_state(folder: Path, state: WatchState) -> None:
    """Replace the folder's state atomically."""
    write_new_file(folder / STATE_FILE, state.model_dump_json(indent=2) + "\n")


class WatchLock:
    """The watch folder's lock (``flock`` on ``.watch.lock``): one watch per folder; the
    kernel drops it when the process dies, so a killed watch never blocks its restart."""

    def __init__(self, folder: Path) -> None:
        self.path = folder / LOCK_FILE
        self._fd: int | None = None

    def acquire(self) -> None:
        """Take the lock, or RunError naming the process that holds it."""
        try:
            fd = take_lock(self.path)
        except LockHeld as held:
            by = f" (pid {held.pid})" if held.pid else ""
            raise RunError(
                f"watch folder {self.path.parent} is in use by another labkit watch{by}; "
                "stop it first, or watch into another folder (--folder)"
            ) from None
        except OSError as exc:
            raise RunError(f"cannot lock {self.path}: {exc.strerror or exc}") from None
        self._fd = fd

    def release(self) -> None:
        """Let go of the lock."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def holder(self) -> int | None:
        """The pid of a live watch holding the lock (None: no watch runs here)."""
        try:
            fd = os.open(self.path, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW)
        except OSError:
            return None
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
            except OSError:
                text = os.pread(fd, 32, 0).decode(errors="replace").strip()
                return int(text) if text.isdigit() else -1
            fcntl.flock(fd, fcntl.LOCK_UN)
            return None
        finally:
            os.close(fd)
