"""This process's open-files limit, raised for a load level's sockets.

Standard library only: the truth server and the benchmarks load it by path too.
"""

from __future__ import annotations

import resource

__all__ = ["raise_open_files_limit"]


def raise_open_files_limit(wanted: int) -> int:
    """Raise this process's soft open-files limit towards `wanted` (at most the hard limit);
    return the soft limit now in force. Children inherit it."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
    if soft != resource.RLIM_INFINITY and soft < target:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
        soft = target
    return int(soft)
