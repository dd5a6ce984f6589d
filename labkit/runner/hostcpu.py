"""How busy the host's CPUs were during a run, and whose work it was (`HostCPUManifest`).

Two readings (`read_cpu`), at the run's start and end, of every CPU's busy time (Linux's
``/proc/stat``) and of labkit's own CPU time; the difference is the other processes' share:
the answer to "which part of the time is labkit's". Cheap: one small file read and two
``getrusage`` calls each time. Where ``/proc/stat`` is unreadable (not Linux) there is no
reading, and the run's client-bound advice goes without. What each field counts, the
columnar sidecar's converters apart: docs/measurement.md, "Whose CPU a run used".
"""

from __future__ import annotations

import os
import resource
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from labkit.manifest import HostCPUManifest

__all__ = ["CPUReading", "host_cpu_between", "process_cpu_s", "read_cpu"]

_PROC_STAT = Path("/proc/stat")


@dataclass(frozen=True, slots=True)
class CPUReading:
    """One reading: monotonic time, and CPU seconds so far (every CPU's busy time, the
    hypervisor's steal, labkit's own)."""

    mono_s: float
    busy_s: float
    steal_s: float
    own_s: float
    cpus: int
    #: The sidecar's converters so far: those reaped (inside `own_s`) and the one running.
    sidecar_reaped_s: float = 0.0
    sidecar_running_s: float = 0.0


def read_cpu(
    stat: Path = _PROC_STAT, sidecar: Callable[[], tuple[float, float]] | None = None
) -> CPUReading | None:
    """A reading now; None where `stat` cannot be read or parsed. `sidecar`: the CPU
    seconds of the sidecar's converters so far, (reaped, still running)
    (`labkit.runner.sidecar.SidecarWriter.cpu_s`)."""
    try:
        lines = stat.read_text(encoding="ascii").splitlines()
        fields = [int(v) for v in lines[0].split()[1:]]
    except (OSError, ValueError, IndexError, UnicodeDecodeError):
        return None
    if not lines[0].startswith("cpu ") or len(fields) < 7:
        return None
    tick = os.sysconf("SC_CLK_TCK")
    user, nice, system, _idle, _iowait, irq, softirq = fields[:7]
    steal = fields[7] if len(fields) > 7 else 0
    reaped, running = sidecar() if sidecar is not None else (0.0, 0.0)
    me = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return CPUReading(
        mono_s=time.monotonic(),
        busy_s=(user + nice + system + irq + softirq) / tick,
        steal_s=steal / tick,
        own_s=me.ru_utime + me.ru_stime + children.ru_utime + children.ru_stime,
        cpus=sum(1 for line in lines[1:] if line.startswith("cpu")),
        sidecar_reaped_s=reaped,
        sidecar_running_s=running,
    )


def process_cpu_s(pid: int, stat: Path | None = None) -> float | None:
    """CPU seconds (user + system) a running process has used so far, from Linux's
    ``/proc/<pid>/stat``; None where it cannot be read (ended, not Linux)."""
    try:
        text = (stat or Path(f"/proc/{pid}/stat")).read_text(encoding="ascii", errors="replace")
        fields = text[text.rindex(")") + 2 :].split()  # after the name, which may hold spaces
        ticks = int(fields[11]) + int(fields[12])  # utime, stime: the 14th and 15th fields
    except (OSError, ValueError, IndexError):
        return None
    return ticks / os.sysconf("SC_CLK_TCK")


def host_cpu_between(start: CPUReading, end: CPUReading) -> HostCPUManifest:
    """What the CPUs did between two readings, and how much of it was labkit's own and its
    sidecar converters' (`labkit.runner.sidecar.SidecarWriter`, counted apart): those reaped
    are in the children's ``getrusage`` and taken out of labkit's own; one still running at a
    reading (read from its ``/proc/<pid>/stat``, `process_cpu_s`) is taken out of the
    others'. labkit's own is then the measuring process's and the servers' and workers' it
    started."""
    busy = max(0.0, end.busy_s - start.busy_s)
    reaped = max(0.0, end.sidecar_reaped_s - start.sidecar_reaped_s)
    converters = max(
        0.0,
        end.sidecar_reaped_s
        + end.sidecar_running_s
        - start.sidecar_reaped_s
        - start.sidecar_running_s,
    )
    own = max(0.0, end.own_s - start.own_s - reaped)
    return HostCPUManifest(
        wall_s=round(end.mono_s - start.mono_s, 3),
        cpus=end.cpus or None,
        busy_cpu_s=round(busy, 2),
        labkit_cpu_s=round(own, 2),
        others_cpu_s=round(max(0.0, busy - own - converters), 2),
        steal_cpu_s=round(max(0.0, end.steal_s - start.steal_s), 2),
        sidecar_cpu_s=round(converters, 2),
    )
