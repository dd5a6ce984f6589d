"""How busy the host's CPUs were during a run, and whose work it was (`HostCPUManifest`).

Two readings, at the run's start and end, of every CPU's busy time (Linux's ``/proc/stat``)
and of labkit's own CPU time (its process, and the children it waited for: the managed
servers it stopped, its worker processes); the difference is the other processes' share.
Cheap: one small file read and two ``getrusage`` calls each time. Where ``/proc/stat`` is
unreadable (not Linux) there is no reading, and the run's client-bound advice goes without.
"""

from __future__ import annotations

import os
import resource
import time
from dataclasses import dataclass
from pathlib import Path

from labkit.manifest import HostCPUManifest

__all__ = ["CPUReading", "host_cpu_between", "read_cpu"]

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


def read_cpu(stat: Path = _PROC_STAT) -> CPUReading | None:
    """A reading now; None where `stat` cannot be read or parsed."""
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
    me = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return CPUReading(
        mono_s=time.monotonic(),
        busy_s=(user + nice + system + irq + softirq) / tick,
        steal_s=steal / tick,
        own_s=me.ru_utime + me.ru_stime + children.ru_utime + children.ru_stime,
        cpus=sum(1 for line in lines[1:] if line.startswith("cpu")),
    )


def host_cpu_between(start: CPUReading, end: CPUReading) -> HostCPUManifest:
    """What the CPUs did between two readings, and how much of it was labkit's."""
    busy = max(0.0, end.busy_s - start.busy_s)
    own = max(0.0, end.own_s - start.own_s)
    return HostCPUManifest(
        wall_s=round(end.mono_s - start.mono_s, 3),
        cpus=end.cpus or None,
        busy_cpu_s=round(busy, 2),
        labkit_cpu_s=round(own, 2),
        others_cpu_s=round(max(0.0, busy - own), 2),
        steal_cpu_s=round(max(0.0, end.steal_s - start.steal_s), 2),
    )
