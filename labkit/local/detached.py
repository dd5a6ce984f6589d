"""A detached ``llama-server`` for manual use: ``labkit server start|status|stop``.

Unlike `ManagedServer`, this server outlives the CLI call that started it (its own session,
no parent-death signal). It is found again through the state file ``<cache>/server.json``,
which also holds the process's start time so a reused pid is never taken for our server:
a pid is signalled only when its start time (``/proc/PID/stat``) and command line both
confirm it is the server that was started.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import httpx

from labkit.errors import ServerError
from labkit.local.install import LocalSetup, cache_dir
from labkit.local.server import (
    HOST,
    STOP_TIMEOUT_S,
    free_port,
    port_is_free,
    server_command,
    wait_healthy,
)

__all__ = ["ServerState", "server_status", "start_detached", "state_file", "stop_detached"]

# --- detached server (labkit server start|status|stop) -------------------------------------------


@dataclass
class ServerState:
    """A detached server, as written to ``<cache>/server.json``."""

    pid: int
    port: int
    base_url: str
    log_path: str
    model_path: str
    model_sha256: str
    binary: str
    backend: str
    ctx_size: int
    slots: int
    started_at: str
    proc_start: int | None = None
    """The process start time (``/proc/PID/stat`` field 22): tells a recycled pid apart."""
    healthy: bool = field(default=False, compare=False)
    """Filled in by ``server_status()``: whether ``/health`` answered ok (not stored)."""


def state_file() -> Path:
    """Where the detached server's state lives."""
    return cache_dir() / "server.json"


def start_detached(
    setup: LocalSetup,
    *,
    port: int | None = None,
    ctx_size: int = 4096,
    slots: int = 1,
    threads: int | None = None,
    gpu_layers: int | None = None,
    log_path: Path | None = None,
    startup_timeout_s: float = 120.0,
    extra_args: Sequence[str] = (),
) -> ServerState:
    """Start a server that outlives this process, wait until it is healthy, record its state.

    Raises ServerError when one is already running, the port is taken or it fails to start.
    """
    current = server_status()
    if current is not None:
        raise ServerError(
            f"a labkit server is already running at {current.base_url} (pid {current.pid}); "
            "stop it first with `labkit server stop`"
        )
    if port is not None and not port_is_free(port):
        raise ServerError(f"port {port} on {HOST} is already in use")
    chosen = port or free_port()
    log = log_path or cache_dir() / "server.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    cmd = server_command(
        setup,
        port=chosen,
        ctx_size=ctx_size,
        slots=slots,
        threads=threads,
        gpu_layers=gpu_layers,
        extra_args=extra_args,
    )
    pid = _spawn_detached(cmd, log)
    state = ServerState(
        pid=pid,
        port=chosen,
        base_url=f"http://{HOST}:{chosen}",
        log_path=str(log),
        model_path=str(setup.model.path),
        model_sha256=setup.model.sha256,
        binary=str(setup.server.path),
        backend=setup.server.backend,
        ctx_size=ctx_size,
        slots=slots,
        started_at=datetime.now(UTC).isoformat(timespec="seconds"),
        proc_start=_proc_start(pid),
    )
    try:
        wait_healthy(
            state.base_url,
            startup_timeout_s,
            exited=lambda: None if _pid_alive(pid) else "exited",
            log_path=log,
        )
    except BaseException:
        _kill_pid(pid)
        raise
    _write_state(state)
    state.healthy = True
    return state


def server_status() -> ServerState | None:
    """The detached server if it is still alive (``healthy`` tells whether /health is ok).

    A state file left by a server that has died (its pid gone, or another process now) is
    removed; one whose pid cannot be confirmed either way is kept for `stop_detached` to say so.
    """
    state = _read_state()
    if state is None:
        return None
    problem = _identity_problem(state) if _pid_alive(state.pid) else (False, "exited")
    if problem is not None:
        if not problem[0]:
            with contextlib.suppress(OSError):
                state_file().unlink()
        return None
    try:
        with httpx.Client(trust_env=False, timeout=2.0) as client:
            response = client.get(f"{state.base_url}/health")
        state.healthy = response.status_code == 200 and response.json().get("status") == "ok"
    except (httpx.HTTPError, ValueError):
        state.healthy = False
    return state


def stop_detached() -> ServerState | None:
    """Stop the detached server; return what was stopped, or None when none was running.

    Raises ServerError, without signalling anything, when the recorded pid is alive but
    cannot be confirmed to be that server (the state file is removed when the pid is
    certainly another process now).
    """
    state = _read_state()
    if state is None:
        return None
    if not _pid_alive(state.pid):
        with contextlib.suppress(OSError):
            state_file().unlink()
        return None
    problem = _identity_problem(state)
    if problem is not None:
        unconfirmed, why = problem
        if not unconfirmed:
            with contextlib.suppress(OSError):
                state_file().unlink()
            raise ServerError(
                f"not stopping pid {state.pid}: it is not the labkit server ({why}); the server "
                f"it recorded is gone, so {state_file()} was removed"
            )
        raise ServerError(
            f"not stopping pid {state.pid}: cannot confirm it is the labkit server ({why}); "
            f"if it is, stop it yourself and delete {state_file()}"
        )
    _kill_pid(state.pid)
    with contextlib.suppress(OSError):
        state_file().unlink()
    return state


def _spawn_detached(cmd: Sequence[str], log: Path) -> int:
    """Start ``cmd`` in a new session, reparented to init (a double fork through ``sh``), so
    no process of ours has to reap it; return its pid."""
    launcher = '"$@" </dev/null >>"$LABKIT_SERVER_LOG" 2>&1 & echo $!'
    env = {**os.environ, "LABKIT_SERVER_LOG": str(log)}
    with log.open("ab") as fh:
        fh.write(f"\n# labkit server start {datetime.now(UTC).isoformat()}\n".encode())
    try:
        done = subprocess.run(
            ["/bin/sh", "-c", launcher, "sh", *cmd],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            env=env,
            start_new_session=True,
            check=True,
            timeout=30,
        )
        return int(done.stdout.decode().strip().splitlines()[-1])
    except (OSError, subprocess.SubprocessError, ValueError, IndexError) as exc:
        raise ServerError(f"cannot start {cmd[0]}: {exc}") from exc


def _pid_alive(pid: int) -> bool:
    """True when ``pid`` exists and is not a zombie."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True  # no /proc: trust kill(0)
    return stat.rsplit(")", 1)[-1].split()[0] not in ("Z", "X")


def _identity_problem(state: ServerState) -> tuple[bool, str] | None:
    """Why `state.pid` is not confirmed as the server we started: (True: it cannot be told,
    False: it is another process; and why), or None when start time and command line match."""
    if state.proc_start is None:
        return True, "the state file records no start time"
    started = _proc_start(state.pid)
    if started is None:
        return True, f"/proc/{state.pid}/stat cannot be read"
    if started != state.proc_start:
        return False, "it started at another time: the pid was reused"
    argv = _cmdline(state.pid)
    if argv is None:
        return True, f"/proc/{state.pid}/cmdline cannot be read"
    if not argv or argv[0] != state.binary or str(state.port) not in argv:
        return False, f"its command line is {' '.join(argv)[:80]!r}"
    return None


def _cmdline(pid: int) -> list[str] | None:
    """A process's argv from /proc, or None when it cannot be read."""
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return None
    return [a.decode(errors="replace") for a in raw.split(b"\0")[:-1]]


def _proc_start(pid: int) -> int | None:
    """A process's start time in clock ticks since boot, or None without /proc."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        return int(stat.rsplit(")", 1)[-1].split()[19])
    except (OSError, ValueError, IndexError):
        return None


def _kill_pid(pid: int) -> None:
    """SIGTERM, wait up to 10 s, then SIGKILL and wait up to 10 s more."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, sig)
        deadline = time.monotonic() + STOP_TIMEOUT_S
        while _pid_alive(pid):
            if time.monotonic() > deadline:
                break
            time.sleep(0.05)
        else:
            return
    raise ServerError(f"llama-server (pid {pid}) did not exit after SIGKILL")


def _read_state() -> ServerState | None:
    try:
        data = json.loads(state_file().read_text())
        data.pop("healthy", None)
        return ServerState(**data)
    except (OSError, ValueError, TypeError):
        return None


def _write_state(state: ServerState) -> None:
    path = state_file()
    path.parent.mkdir(parents=True, exist_ok=True)
    data = asdict(state)
    data.pop("healthy", None)
    tmp = path.with_name(f".{path.name}.{os.getpid()}")
    tmp.write_text(json.dumps(data, indent=2))
    os.replace(tmp, path)
