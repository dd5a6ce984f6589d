"""Process helpers for the local-server tests (no psutil: /proc and signals only)."""

from __future__ import annotations

import os
import stat
import time
from pathlib import Path


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


def wait_gone(pid: int, timeout_s: float = 15.0) -> bool:
    """Wait until ``pid`` has exited; True when it did in time."""
    deadline = time.monotonic() + timeout_s
    while pid_alive(pid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def children_of(pid: int) -> list[int]:
    """Direct children of ``pid`` (from /proc)."""
    found: list[int] = []
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            found += [int(c) for c in (task / "children").read_text().split()]
        except OSError:
            continue
    return found


def fake_binary(folder: Path, name: str, body: str) -> Path:
    """Write an executable shell script standing in for llama-server."""
    path = folder / name
    path.write_text("#!/bin/sh\n" + body + "\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return path


CRASHING_SERVER = """case "$1" in --version) echo "version: 1 (fake)"; exit 0;; esac
echo "fatal: fake server cannot start" >&2
exit 3"""
