"""Shared pieces of the local setup: the result types, the cache location, and the helpers
that run logged subprocesses, lock, memoise and write files atomically."""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

from labkit.errors import SetupError

__all__ = [
    "Backend",
    "LocalSetup",
    "ModelFile",
    "ProgressCallback",
    "ServerBinary",
    "cache_dir",
    "gpu_visible",
]

Backend = Literal["cpu", "cuda"]
ProgressCallback = Callable[[str, float | None], None]
"""``progress(stage, fraction)``: a human stage name, and 0..1 or None when unknown."""


@dataclass(frozen=True)
class ServerBinary:
    """A usable ``llama-server`` executable."""

    path: Path
    backend: Backend
    source: str
    """Where it came from: ``config``, ``env``, ``path``, ``cache`` or ``built``."""


@dataclass(frozen=True)
class ModelFile:
    """A verified GGUF model file."""

    path: Path
    sha256: str
    size_bytes: int


@dataclass(frozen=True)
class LocalSetup:
    """Everything needed to start a local server: a binary and a model."""

    server: ServerBinary
    model: ModelFile


def cache_dir() -> Path:
    """labkit's cache: ``$LABKIT_CACHE_DIR``, else ``$XDG_CACHE_HOME/labkit``, else
    ``~/.cache/labkit``."""
    if explicit := os.environ.get("LABKIT_CACHE_DIR"):
        return Path(explicit).expanduser()
    if xdg := os.environ.get("XDG_CACHE_HOME"):
        return Path(xdg).expanduser() / "labkit"
    return Path.home() / ".cache" / "labkit"


def no_progress(stage: str, fraction: float | None) -> None:
    """The default progress callback: say nothing."""


# --- helpers --------------------------------------------------------------------------------


def pip_download(
    requirement: Sequence[str],
    dest: Path,
    log: Any,
    log_path: Path,
    progress: ProgressCallback,
    stage: str,
) -> Path:
    """``pip download --no-deps`` one distribution into ``dest``; return the file."""
    progress(stage, None)
    dest.mkdir(parents=True, exist_ok=True)
    cmd = [
        sys.executable,
        "-m",
        "pip",
        "download",
        "--no-deps",
        "--disable-pip-version-check",
        "--progress-bar",
        "off",
        *requirement,
        "-d",
        str(dest),
    ]
    run_logged(cmd, log, log_path, f"`pip download {requirement[-1]}`")
    files = sorted(p for p in dest.iterdir() if p.is_file())
    if len(files) != 1:
        raise SetupError(f"`pip download {requirement[-1]}` left {len(files)} files in {dest}")
    return files[0]


def run_logged(
    cmd: Sequence[str],
    log: Any,
    log_path: Path,
    what: str,
    on_line: Callable[[bytes], None] | None = None,
) -> None:
    """Run a command with its output appended to the log; SetupError quoting its tail."""
    log.write(f"\n$ {' '.join(cmd)}\n".encode())
    log.flush()
    try:
        proc = subprocess.Popen(
            cmd,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            process_group=0,  # so an interrupted build can be killed whole (make, compilers)
        )
    except OSError as exc:
        raise SetupError(f"{what} failed: cannot run {cmd[0]}: {exc}") from exc
    assert proc.stdout is not None
    tail: list[bytes] = []
    try:
        for line in proc.stdout:
            log.write(line)
            tail = [*tail[-19:], line]
            if on_line is not None:
                on_line(line)
        code = proc.wait()
    except BaseException:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        raise
    finally:
        proc.stdout.close()
        log.flush()
    if code != 0:
        last = b"".join(tail).decode(errors="replace").rstrip()
        if "No module named pip" in last:
            raise SetupError(
                f"pip is not available in {sys.executable}; install it, or pass an existing "
                "llama-server (--server / $LABKIT_LLAMA_SERVER) and model (--model)"
            )
        raise SetupError(
            f"{what} failed (exit code {code}); last lines of the log {log_path}:\n{last}"
        )


@contextlib.contextmanager
def file_lock(path: Path, progress: ProgressCallback, what: str) -> Iterator[None]:
    """An exclusive ``fcntl`` lock; tells the user when it has to wait for another process."""
    with path.open("a+b") as fh:
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            progress(f"waiting for another labkit process ({what})", None)
            fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def _probes_path() -> Path:
    return cache_dir() / "probes.json"


def read_probes() -> dict[str, Any]:
    try:
        data = json.loads(_probes_path().read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def write_probes(data: dict[str, Any]) -> None:
    """Best effort: a cache that cannot be written only costs a re-probe next time."""
    with contextlib.suppress(OSError):
        _probes_path().parent.mkdir(parents=True, exist_ok=True)
        write_atomic(_probes_path(), json.dumps(data, indent=1, sort_keys=True).encode())


def write_atomic(path: Path, data: bytes) -> None:
    """Write via a temp file in the same folder and rename it into place."""
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        os.fchmod(fd, 0o644)
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def tail_lines(text: str, lines: int) -> str:
    return "\n".join(text.strip().splitlines()[-lines:])


def now_iso() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def run_version(path: Path) -> tuple[bool, str]:
    """Run ``path --version``: (exited 0, combined output)."""
    try:
        done = subprocess.run(
            [str(path), "--version"],
            capture_output=True,
            text=True,
            errors="replace",
            timeout=60,
            check=False,
            stdin=subprocess.DEVNULL,
        )
    except (OSError, subprocess.SubprocessError) as exc:
        return False, str(exc)
    output = (done.stdout or "") + (done.stderr or "")
    if done.returncode != 0:
        return False, f"exit code {done.returncode}\n{output}"
    return True, output


def gpu_visible() -> bool:
    """True when the NVIDIA driver reports at least one GPU."""
    gpus = Path("/proc/driver/nvidia/gpus")
    with contextlib.suppress(OSError):
        if gpus.is_dir() and any(gpus.iterdir()):
            return True
    if shutil.which("nvidia-smi") is None:
        return False
    try:
        done = subprocess.run(
            ["nvidia-smi", "-L"], capture_output=True, text=True, timeout=20, check=False
        )
    except (OSError, subprocess.SubprocessError):
        return False
    return done.returncode == 0 and "GPU" in done.stdout
