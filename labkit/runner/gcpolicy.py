"""The cyclic garbage collector's policy while a level's streams are read.

Python's collector stops the whole process while it scans: a full collection over a big heap
is a stall of tens of ms in which no socket is read (each stream's events then arrive
gathered in one read: late stamps), and frequent young collections cost CPU per token.
`level_gc` collects and freezes the heap built before the level (never scanned again), makes
young collections rarer and holds off full ones while the level runs, then restores the
thresholds and collects once between levels. Records are mostly acyclic (freed by reference
counting), so memory stays bounded while collections are held off.
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator

__all__ = ["LEVEL_GC_THRESHOLDS", "level_gc"]

#: `gc.set_threshold` while a level runs: a young collection every 20,000 allocations
#: (default 700), the middle one every 20 of those, and a full one only after 1,000 middle
#: ones (400 million allocations: never within a level).
LEVEL_GC_THRESHOLDS = (20_000, 20, 1_000)


@contextlib.contextmanager
def level_gc() -> Iterator[None]:
    """Run the block (one level) under the level's collector policy; restored after, with one
    collection of what the level left."""
    before = gc.get_threshold()
    gc.collect()
    gc.freeze()  # the set-up's heap (imports, config, providers, earlier records)
    gc.set_threshold(*LEVEL_GC_THRESHOLDS)
    try:
        yield
    finally:
        gc.set_threshold(*before)
        gc.collect()
