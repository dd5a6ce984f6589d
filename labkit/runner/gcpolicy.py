"""The cyclic garbage collector's policy while a level's streams are read.

Python's collector stops the whole process while it scans, and a scan's time grows with what
it scans: a full collection over a level's records is a stall of tens to hundreds of ms in
which no socket is read (each stream's events then arrive gathered in one read: late stamps).
So while a level runs the heap is frozen and no collection scans more than one young
generation (`level_gc`, `request_done`); the run's figures are computed frozen (`figures_gc`).
Freezing keeps reference counting (an object freed by its last reference goes at once): it
holds back only garbage in reference cycles, and a request makes none (the recorder breaks
httpx's response cycle; tests/measurement/test_no_cyclic_garbage.py).
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator
from typing import Any

from labkit.records import RequestRecord

__all__ = ["LEVEL_GC_THRESHOLDS", "figures_gc", "level_gc", "request_done"]

#: `gc.set_threshold` while a level runs: Python's default, a young collection every 700
#: allocations; the older generations stay empty (each collection's survivors are frozen), so
#: every collection scans at most a few thousand objects. Rarer, larger young collections
#: were worse: at 1,000 streams x 30 ms on one core, 20,000 gave 6-60 ms stalls and 4-5 % of
#: the first tokens read late (gathered with the second), 5,000 1.5-1.8 %, 700 none.
LEVEL_GC_THRESHOLDS = (700, 10, 10)


class _Level:
    """This process's level policy: whether it is in force, and whether each finished
    request still freezes the heap (no request of the level has failed)."""

    __slots__ = ("freezing",)

    def __init__(self) -> None:
        self.freezing = False


_LEVEL = _Level()


def request_done(record: RequestRecord) -> None:
    """A request of the level finished with `record` (called by every executor's `Measurer`):
    freeze what is alive now, unless outside a level or once a request of it has failed.

    What the request left alive (its record, kept by the runner; ~35 objects the collector
    tracks) and the other streams' objects are then out of every collection, and the young
    generation's count starts again from 0, so a clean level runs with hardly a collection at
    all (at 32 streams one young collection per ~20 requests before, each ~0.5 ms of the
    loop's time: ~30 µs a request). A failed request can leave cyclic garbage (a connection
    lost mid-stream leaves its transport in a cycle): from a level's first failure on, nothing
    more is frozen per request and the young collections find such garbage as before (what
    was frozen is freed by a collection after the level)."""
    if not _LEVEL.freezing:
        return
    if record.error is not None:
        _LEVEL.freezing = False
        return
    gc.freeze()


def _freeze_survivors(phase: str, info: dict[str, Any]) -> None:
    if phase == "stop":
        gc.freeze()


@contextlib.contextmanager
def level_gc() -> Iterator[None]:
    """Run the block (one level) under the level's collector policy; restored after.

    Collects and freezes the heap built before the level, and freezes what each collection
    leaves alive (a level's records would otherwise pile up in the older generations), so no
    collection during the level scans more than one young generation (`LEVEL_GC_THRESHOLDS`).
    After the level it unfreezes, and what the level left in reference cycles is collected by
    the next level's start or by Python's own thresholds, not at its end: a full collection
    there scanned every record the run holds (~20 µs a record, paid again by each level), and
    the run's figures, computed next, freeze the heap anyway (`figures_gc`)."""
    before = gc.get_threshold()
    gc.collect()
    gc.freeze()  # the set-up's heap (imports, config, providers, earlier records)
    gc.set_threshold(*LEVEL_GC_THRESHOLDS)
    gc.callbacks.append(_freeze_survivors)
    freezing_before, _LEVEL.freezing = _LEVEL.freezing, True
    try:
        yield
    finally:
        _LEVEL.freezing = freezing_before
        gc.callbacks.remove(_freeze_survivors)
        gc.set_threshold(*before)
        gc.unfreeze()


@contextlib.contextmanager
def figures_gc() -> Iterator[None]:
    """Compute the run's figures after its levels (`Runner.analyze`) with the heap as it is
    then frozen, unfrozen after: the figures allocate as they go (columns, lists of the
    records' stamps), and each full collection they triggered scanned every record the run
    holds (a run of 3,200 records: ~60 µs a record in `request_stats` alone). `labkit run`
    sums the run up (summary, report, answers) under it too: the first full collection
    after `analyze` fell there (~30 µs a record). The young collections still free the
    figures' own cyclic garbage; what was frozen is collected again with the rest once
    unfrozen."""
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()
