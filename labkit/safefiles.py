"""Files written into a folder that may have come from anywhere (a run folder unpacked from
an archive can hold symbolic links: `report.md` pointing at a file of yours). labkit replaces
what is there and never writes through a link; and the exclusive lock a run or watch folder
holds (a leaf module: imports only labkit.errors).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import tempfile
from pathlib import Path

from labkit.errors import RunError

__all__ = ["LockHeld", "report_subfolder", "take_lock", "write_new_file"]


_UMASK = os.umask(0o022)
os.umask(_UMASK)


def write_new_file(path: Path, data: bytes | str) -> None:
    """Write `path` as a new file: a fresh temporary file beside it (created exclusively,
    so not a planted link), renamed over it. A link at `path` is replaced, never followed."""
    payload = data.encode("utf-8") if isinstance(data, str) else data
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        os.fchmod(fd, 0o666 & ~_UMASK)  # as an ordinary new file (mkstemp makes it 0600)
        with os.fdopen(fd, "wb") as f:
            f.write(payload)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def report_subfolder(folder: Path) -> Path:
    """`folder`, after checking it is not a symbolic link (RunError, one line, if it is)."""
    if folder.is_symlink():
        raise RunError(
            f"{folder} is a symbolic link; labkit writes no file through a link (remove it and "
            "run the report again)"
        )
    return folder


class LockHeld(Exception):
    """Another process holds the lock; `pid` is the one it wrote there (None: unreadable)."""

    def __init__(self, pid: int | None) -> None:
        super().__init__(f"held by pid {pid}" if pid else "held by another process")
        self.pid = pid


def take_lock(path: Path) -> int:
    """Open `path` (created if missing, never through a link) and take its exclusive
    ``flock`` without waiting; returns the open descriptor, which holds the lock until it is
    closed (the kernel drops it when the process dies), with this process's pid written in
    it for the message of the next one. Raises `LockHeld` when another process holds it,
    OSError when the file cannot be opened or locked."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as exc:
        holder = os.pread(fd, 32, 0).decode(errors="replace").strip()
        os.close(fd)
        if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
            raise LockHeld(int(holder) if holder.isdigit() else None) from None
        raise
    with contextlib.suppress(OSError):  # who holds it, for the message above; best effort
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    return fd
