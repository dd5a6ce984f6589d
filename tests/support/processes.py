"""The tests' one process helper (no psutil: /proc and signals only): find live processes
by parent, command line or environment, wait for one to go, fake a server binary."""

from __future__ import annotations

import os
import stat
import time
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class LiveProcess:
    """One live process of this host, as /proc shows it."""

    pid: int
    parent: int
    cmdline: str  # the arguments joined by spaces

    def __str__(self) -> str:
        return f"{self.pid} {self.cmdline[:120]}"


def processes(
    *, parent: int | None = None, cmdline_has: str | None = None, environ_has: str | None = None
) -> list[LiveProcess]:
    """Live processes (not zombies, not this one) matching every filter given: a parent pid,
    a substring of the command line, an exact ``NAME=value`` entry of the environment.

    A process that exits mid-scan, or whose environment this user may not read, is skipped.
    """
    found: list[LiveProcess] = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            text = (entry / "stat").read_text()
            state, ppid = text[text.rindex(")") + 2 :].split()[:2]
            if state in ("Z", "X") or (parent is not None and int(ppid) != parent):
                continue
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ")
            if cmdline_has is not None and cmdline_has.encode() not in cmdline:
                continue
            if environ_has is not None:
                environ = (entry / "environ").read_bytes().split(b"\0")
                if environ_has.encode() not in environ:
                    continue
        except OSError:
            continue
        found.append(
            LiveProcess(int(entry.name), int(ppid), cmdline.decode(errors="replace").strip())
        )
    return found


def pid_alive(pid: int) -> bool:
    """True when ``pid`` exists and is not a zombie (no psutil)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[-1].split()[0]
    except OSError:
        return False
    return state not in ("Z", "X")


def wait_gone(pid: int, timeout_s: float = 60.0) -> bool:
    """Wait until ``pid`` has exited; True when it did in time."""
    deadline = time.monotonic() + timeout_s
    while pid_alive(pid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def children_of(pid: int) -> list[int]:
    """Live direct children of ``pid``."""
    return [p.pid for p in processes(parent=pid)]


def fake_binary(folder: Path, name: str, body: str) -> Path:
    """Write an executable shell script standing in for llama-server."""
    path = folder / name
    path.write_text("#!/bin/sh\n" + body + "\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return path


CRASHING_SERVER = """case "$1" in --version) echo "version: 1 (fake)"; exit 0;; esac
echo "fatal: fake server cannot start" >&2
exit 3"""
