"""Start, watch and stop a local ``llama-server``; hand back its base URL.

Two ways to run it: `ManagedServer`, a child of this process for the length of a run that
never outlives us, and ``labkit.local.detached``, a server that outlives the CLI call that
started it (``labkit server start|status|stop``). This module knows nothing of experiments
or providers.
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import weakref
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import TracebackType
from typing import IO, Any

import httpx

from labkit.errors import ServerError
from labkit.local.install import LocalSetup

__all__ = [
    "HOST",
    "STOP_TIMEOUT_S",
    "ManagedServer",
    "free_port",
    "gpu_name",
    "port_is_free",
    "server_command",
    "wait_healthy",
]

HOST = "127.0.0.1"
STOP_TIMEOUT_S = 10.0
_PR_SET_PDEATHSIG = 1
_BIND_RETRIES = 3


def server_command(
    setup: LocalSetup,
    *,
    port: int,
    ctx_size: int = 4096,
    slots: int = 1,
    threads: int | None = None,
    gpu_layers: int | None = None,
    extra_args: Sequence[str] = (),
) -> list[str]:
    """The ``llama-server`` command line labkit uses (``ctx_size`` is per slot).

    llama-server splits ``-c`` across its ``-np`` slots, so labkit passes
    ``-c ctx_size * slots``: every slot gets ``ctx_size`` tokens.
    """
    if ctx_size < 1 or slots < 1:
        raise ServerError(f"ctx_size and slots must be positive (got {ctx_size}, {slots})")
    if gpu_layers is None:
        gpu_layers = 99 if setup.server.backend == "cuda" else 0
    cmd = [
        str(setup.server.path),
        "-m", str(setup.model.path),
        "--host", HOST,
        "--port", str(port),
        "-c", str(ctx_size * slots),
        "-np", str(slots),
        "-ngl", str(gpu_layers),
        "--metrics",
    ]  # fmt: skip
    if threads is None and setup.server.backend == "cpu":
        threads = default_threads()
    if threads is not None:
        cmd += ["-t", str(threads)]
    return [*cmd, *extra_args]


def default_threads() -> int:
    """CPU threads for a local llama-server: every core but one.

    The client that measures the server runs on the same host. With every core busy
    decoding, its event loop waits for a CPU and its stamps come late (a few ms on 2 cores,
    flagged client-bound); one core left free keeps the measurement clean.
    """
    return max(1, (os.cpu_count() or 2) - 1)


class ManagedServer:
    """A ``llama-server`` child process bound to 127.0.0.1, stopped when we are done.

    It never outlives us: ``stop()`` on exit of the ``with`` block, on ``KeyboardInterrupt``,
    from an ``atexit`` hook, and, should Python be killed outright, the kernel sends the
    server SIGTERM (``PR_SET_PDEATHSIG``, Linux).

    Use as a context manager (``with ManagedServer(setup) as server: server.base_url``) or
    call ``start()``/``stop()`` yourself, from any thread (``asyncio.to_thread`` is fine).
    """

    def __init__(
        self,
        setup: LocalSetup,
        *,
        ctx_size: int = 4096,
        slots: int = 1,
        threads: int | None = None,
        gpu_layers: int | None = None,
        port: int | None = None,
        log_path: Path | None = None,
        startup_timeout_s: float = 120.0,
        extra_args: Sequence[str] = (),
    ) -> None:
        """Configure the server; nothing starts before ``start()``."""
        self.setup = setup
        self.ctx_size = ctx_size
        self.slots = slots
        if threads is None and setup.server.backend == "cpu":
            threads = default_threads()
        self.threads = threads
        self.gpu_layers = gpu_layers
        self.startup_timeout_s = startup_timeout_s
        self.extra_args = tuple(extra_args)
        self._requested_port = port
        self._port: int | None = None
        self._log_path = log_path
        self._owns_log = log_path is None
        self._proc: subprocess.Popen[bytes] | None = None
        self._log_file: IO[bytes] | None = None
        self._props: dict[str, Any] | None = None

    # -- lifecycle ---------------------------------------------------------------------------

    def start(self) -> str:
        """Start the server and wait until ``/health`` is ok; return the base URL (no /v1).

        Raises ServerError when the port is taken, the process exits, or it is not ready in
        ``startup_timeout_s``. Whatever happens (Ctrl-C included), no process is left behind.
        """
        if self.is_running():
            return self.base_url
        self.stop()
        attempts = 1 if self._requested_port is not None else _BIND_RETRIES
        for attempt in range(1, attempts + 1):
            port = self._requested_port or free_port()
            if self._requested_port is not None and not port_is_free(port):
                raise ServerError(f"port {port} on {HOST} is already in use")
            try:
                self._launch(port)
                self._wait_ready()
                return self.base_url
            except ServerError as exc:
                self.stop(keep_log=True)
                if "couldn't bind" in str(exc):
                    if attempt < attempts:  # lost a race for a free port: try another one
                        continue
                    raise ServerError(f"port {port} on {HOST} is already in use") from None
                raise
            except BaseException:
                self.stop(keep_log=True)
                raise
        raise AssertionError("unreachable")

    def stop(self, *, keep_log: bool = False) -> None:
        """Terminate the server (SIGTERM, then SIGKILL after 10 s) and wait for it. Idempotent.

        A temporary log (no ``log_path`` given) is deleted when the server was still healthy,
        and kept after a crash or with ``keep_log``, since error messages point to it.
        """
        proc, self._proc = self._proc, None
        crashed = proc is not None and proc.poll() is not None
        if proc is not None:
            _terminate(proc)
            _RUNNING.discard(self)
        if self._log_file is not None:
            self._log_file.close()
            self._log_file = None
            if self._owns_log and not (crashed or keep_log) and self._log_path is not None:
                with contextlib.suppress(OSError):
                    self._log_path.unlink()
                self._log_path = None

    def is_running(self) -> bool:
        """True while the server process is alive."""
        return self._proc is not None and self._proc.poll() is None

    def check_alive(self) -> None:
        """Raise ServerError when the server was started and has since exited."""
        if self._proc is None:
            raise ServerError("llama-server is not running (it was never started or stopped)")
        code = self._proc.poll()
        if code is not None:
            raise ServerError(
                f"llama-server exited with code {code} during the run; see {self.log_path}"
                f"\n{_log_tail(self.log_path)}"
            )

    def __enter__(self) -> ManagedServer:
        """Start the server."""
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        """Stop the server."""
        self.stop()

    # -- facts ---------------------------------------------------------------------------------

    @property
    def base_url(self) -> str:
        """``http://127.0.0.1:PORT`` (OpenAI-compatible endpoints are under ``/v1``)."""
        if self._port is None:
            raise ServerError("llama-server has not been started")
        return f"http://{HOST}:{self._port}"

    @property
    def pid(self) -> int | None:
        """The server's process id while it runs."""
        return self._proc.pid if self._proc is not None else None

    @property
    def port(self) -> int | None:
        """The port in use (chosen at ``start()`` when none was given)."""
        return self._port

    @property
    def log_path(self) -> Path:
        """Where the server's stdout and stderr go."""
        if self._log_path is None:
            fd, name = tempfile.mkstemp(prefix="labkit-llama-server-", suffix=".log")
            os.close(fd)
            self._log_path = Path(name)
        return self._log_path

    def props(self) -> dict[str, Any]:
        """The server's ``GET /props`` (fetched once per start)."""
        self.check_alive()
        if self._props is None:
            self._props = _get_json(f"{self.base_url}/props")
        return self._props

    def info(self) -> dict[str, Any]:
        """What the run manifest records about the server."""
        props = self.props()
        settings = props.get("default_generation_settings") or {}
        backend = self.setup.server.backend
        return {
            "build_info": props.get("build_info"),
            "backend": backend,
            "gpu_name": gpu_name() if backend == "cuda" else None,
            "binary": str(self.setup.server.path),
            "binary_source": self.setup.server.source,
            "model_path": str(self.setup.model.path),
            "model_sha256": self.setup.model.sha256,
            "model_size_bytes": self.setup.model.size_bytes,
            "slots": props.get("total_slots"),
            "ctx_size": self.ctx_size,
            "ctx_size_server": settings.get("n_ctx") if isinstance(settings, dict) else None,
            "gpu_layers": self._gpu_layers(),
            "threads": self.threads,
            "port": self._port,
            "pid": self.pid,
            "log_path": str(self.log_path),
        }

    # -- internals -----------------------------------------------------------------------------

    def _gpu_layers(self) -> int:
        if self.gpu_layers is not None:
            return self.gpu_layers
        return 99 if self.setup.server.backend == "cuda" else 0

    def _launch(self, port: int) -> None:
        cmd = server_command(
            self.setup,
            port=port,
            ctx_size=self.ctx_size,
            slots=self.slots,
            threads=self.threads,
            gpu_layers=self.gpu_layers,
            extra_args=self.extra_args,
        )
        self._props = None
        self._port = port
        self._log_file = self.log_path.open("wb")
        # Hold Ctrl-C back while forking: a KeyboardInterrupt inside Popen would lose track of
        # the child (or be swallowed by an at-fork hook). It is delivered right after.
        log_file = self._log_file

        def spawn() -> subprocess.Popen[bytes]:
            mask = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
            try:
                return subprocess.Popen(
                    cmd,
                    stdin=subprocess.DEVNULL,
                    stdout=log_file,
                    stderr=subprocess.STDOUT,
                    process_group=0,  # Ctrl-C reaches Python only; Python then stops the server
                    preexec_fn=_die_with_parent(os.getpid(), mask),
                )
            finally:
                signal.pthread_sigmask(signal.SIG_SETMASK, mask)

        try:
            self._proc = _in_long_lived_thread(spawn)
            _RUNNING.add(self)
        except (OSError, subprocess.SubprocessError) as exc:
            raise ServerError(f"cannot start {cmd[0]}: {exc}") from exc

    def _wait_ready(self) -> None:
        proc = self._proc
        assert proc is not None
        wait_healthy(
            self.base_url,
            self.startup_timeout_s,
            exited=lambda: None if proc.poll() is None else f"exited with code {proc.returncode}",
            log_path=self.log_path,
        )


# --- shared helpers ---------------------------------------------------------------------------


def wait_healthy(
    base_url: str,
    timeout_s: float,
    *,
    exited: Callable[[], str | None],
    log_path: Path,
) -> None:
    """Poll ``/health`` until it says ok; ServerError when the process exits or time runs out.

    ``exited()`` returns None while the process runs, else how it ended ("exited with code 3").
    """
    deadline = time.monotonic() + timeout_s
    with httpx.Client(trust_env=False, timeout=2.0) as client:
        while True:
            ended = exited()
            if ended is not None:
                raise ServerError(
                    f"llama-server {ended} while starting; last lines of "
                    f"{log_path}:\n{_log_tail(log_path)}"
                )
            with contextlib.suppress(httpx.HTTPError, ValueError):
                response = client.get(f"{base_url}/health")
                if response.status_code == 200 and response.json().get("status") == "ok":
                    return
            if time.monotonic() > deadline:
                raise ServerError(
                    f"llama-server did not become ready within {timeout_s:g} s; see {log_path}"
                    f"\n{_log_tail(log_path)}"
                )
            time.sleep(0.05)


def _get_json(url: str) -> dict[str, Any]:
    try:
        with httpx.Client(trust_env=False, timeout=10.0) as client:
            response = client.get(url)
            response.raise_for_status()
            data = response.json()
    except (httpx.HTTPError, ValueError) as exc:
        raise ServerError(f"GET {url} failed: {exc}") from exc
    if not isinstance(data, dict):
        raise ServerError(f"GET {url} returned {type(data).__name__}, expected an object")
    return data


_SPAWNER: ThreadPoolExecutor | None = None
_SPAWNER_LOCK = threading.Lock()


def _in_long_lived_thread(spawn: Callable[[], subprocess.Popen[bytes]]) -> subprocess.Popen[bytes]:
    """Run ``spawn`` in a thread that lives as long as the process.

    Linux sends the parent-death signal when the *thread* that forked the child exits, so a
    server started from a short-lived worker (``asyncio.to_thread``) would be killed with it.
    The main thread forks directly; any other thread hands the fork to one dedicated thread.
    """
    global _SPAWNER
    if threading.current_thread() is threading.main_thread():
        return spawn()
    with _SPAWNER_LOCK:
        if _SPAWNER is None:
            _SPAWNER = ThreadPoolExecutor(max_workers=1, thread_name_prefix="labkit-spawn")
    return _SPAWNER.submit(spawn).result()


def _die_with_parent(parent_pid: int, mask: set[int | signal.Signals]) -> Callable[[], None]:
    """A ``preexec_fn`` asking the kernel to SIGTERM the child when this thread exits (and
    restoring the signal mask the parent had before it blocked SIGINT for the fork).

    Linux delivers it when the *thread* that forked exits: see ``_in_long_lived_thread``.
    """

    def preexec() -> None:
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)
        if sys.platform.startswith("linux"):
            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
            if os.getppid() != parent_pid:  # the parent died before prctl took effect
                os.kill(os.getpid(), signal.SIGTERM)

    return preexec


def _terminate(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM, wait, SIGKILL; always reaps the process, even on a second Ctrl-C."""
    if proc.poll() is not None:
        return
    try:
        proc.terminate()
        proc.wait(timeout=STOP_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    except BaseException:
        proc.kill()
        proc.wait()
        raise


def port_is_free(port: int) -> bool:
    """True when ``port`` on 127.0.0.1 can be bound."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((HOST, port))
        except OSError:
            return False
    return True


def free_port() -> int:
    """A TCP port on HOST that was free a moment ago (the kernel's choice)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((HOST, 0))
        port: int = sock.getsockname()[1]
    return port


def _log_tail(path: Path, lines: int = 15) -> str:
    try:
        text = path.read_bytes()[-20_000:].decode(errors="replace")
    except OSError:
        return "(no log)"
    kept = [line for line in text.splitlines() if line.strip()][-lines:]
    return "\n".join(kept) or "(the log is empty)"


def gpu_name() -> str | None:
    """The first GPU's name from ``nvidia-smi``, or None."""
    try:
        done = subprocess.run(
            ["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=20,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    names = done.stdout.strip().splitlines()
    return names[0].strip() if done.returncode == 0 and names else None


# --- never leave an orphan ----------------------------------------------------------------------

_RUNNING: weakref.WeakSet[ManagedServer] = weakref.WeakSet()


@atexit.register
def _stop_all() -> None:
    for server in list(_RUNNING):
        with contextlib.suppress(Exception):
            server.stop()
