"""No llama-server outlives the Python process that started it, however that process ends."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

import labkit.local
from labkit.local import LocalSetup, ManagedServer
from tests.support.processes import children_of, pid_alive, wait_gone
from tests.support.signals import default_sigint

pytestmark = pytest.mark.e2e

_CHILD = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    from labkit.local import ManagedServer, ensure_setup

    setup = ensure_setup(Path(sys.argv[2]), Path(sys.argv[3]))
    mode, log = sys.argv[1], Path(sys.argv[4])
    if mode == "use":
        with ManagedServer(setup, ctx_size=512, log_path=log) as server:
            print(server.pid, flush=True)
            time.sleep(120)
    elif mode == "start":
        print("starting", flush=True)
        ManagedServer(setup, ctx_size=512, log_path=log).start()
        time.sleep(120)
    elif mode == "exit":
        server = ManagedServer(setup, ctx_size=512, log_path=log)
        server.start()
        print(server.pid, flush=True)
        sys.exit(0)  # no stop(): the atexit hook must do it
    """
)
_REPO = Path(labkit.local.__file__).resolve().parents[2]


def _spawn(mode: str, setup: LocalSetup, log: Path) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": str(_REPO)}
    args = [mode, str(setup.server.path), str(setup.model.path), str(log)]
    return subprocess.Popen(
        [sys.executable, "-c", _CHILD, *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        preexec_fn=default_sigint,  # the Ctrl-C tests interrupt it, also from a background job
    )


def _server_pid(child: subprocess.Popen[str]) -> int:
    assert child.stdout is not None
    line = child.stdout.readline().strip()
    assert line.isdigit(), (
        f"child said {line!r}; stderr: {child.stderr.read() if child.stderr else ''}"
    )
    return int(line)


def _finish(child: subprocess.Popen[str]) -> str:
    """Wait for the child to end (it must, within 30 s); return its stderr."""
    try:
        _, err = child.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        child.kill()
        _, err = child.communicate()
        raise AssertionError(f"the child did not exit; stderr:\n{err}") from None
    return err


def test_ctrl_c_while_in_use_stops_the_server(local_setup: LocalSetup, tmp_path: Path) -> None:
    child = _spawn("use", local_setup, tmp_path / "server.log")
    pid = _server_pid(child)
    assert pid_alive(pid)
    child.send_signal(signal.SIGINT)
    _finish(child)
    assert wait_gone(pid)


def test_ctrl_c_during_start_stops_the_server(local_setup: LocalSetup, tmp_path: Path) -> None:
    child = _spawn("start", local_setup, tmp_path / "server.log")
    assert child.stdout is not None and child.stdout.readline().strip() == "starting"
    deadline = time.monotonic() + 30
    binary = str(local_setup.server.path)
    while not (kids := [k for k in children_of(child.pid) if _argv0(k) == binary]):
        assert time.monotonic() < deadline and child.poll() is None, "no server was started"
        time.sleep(0.005)
    child.send_signal(signal.SIGINT)  # the model is still loading: we are inside start()
    err = _finish(child)
    assert "KeyboardInterrupt" in err
    assert wait_gone(kids[0])


def test_sigkill_of_the_parent_takes_the_server_down(
    local_setup: LocalSetup, tmp_path: Path
) -> None:
    child = _spawn("use", local_setup, tmp_path / "server.log")
    pid = _server_pid(child)
    child.kill()  # no Python cleanup at all: only PR_SET_PDEATHSIG can stop the server
    _finish(child)
    assert wait_gone(pid)


def test_exit_without_stop_is_cleaned_up_at_exit(local_setup: LocalSetup, tmp_path: Path) -> None:
    child = _spawn("exit", local_setup, tmp_path / "server.log")
    pid = _server_pid(child)
    _finish(child)
    assert child.returncode == 0
    assert not pid_alive(pid)


def _argv0(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0].decode()
    except OSError:
        return ""


def test_a_server_started_from_a_short_lived_thread_survives_it(
    local_setup: LocalSetup, tmp_path: Path
) -> None:
    """The parent-death signal follows the forking *thread*: asyncio.to_thread must be safe."""
    server = ManagedServer(local_setup, ctx_size=512)
    worker = threading.Thread(target=server.start)
    worker.start()
    worker.join()
    try:
        time.sleep(0.3)
        assert server.is_running()
        server.check_alive()
    finally:
        server.stop()
