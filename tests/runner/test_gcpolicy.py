"""The collector's policy while a level runs (`labkit.runner.gcpolicy`): in force during each
level, restored after, and without effect on what a level records."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import weakref
from pathlib import Path

import pytest

from labkit.runner.gcpolicy import (
    LEVEL_GC_THRESHOLDS,
    _freeze_survivors,
    figures_gc,
    level_gc,
    request_done,
)
from tests.runner.test_load import _fingerprint, _run
from tests.support.records import make_record


@pytest.mark.unit
def test_the_level_policy_holds_inside_and_is_restored_after() -> None:
    before = gc.get_threshold()
    with level_gc():
        assert gc.get_threshold() == LEVEL_GC_THRESHOLDS
        assert _freeze_survivors in gc.callbacks
        assert gc.get_freeze_count() > 0  # the set-up's heap is out of every collection
    assert gc.get_threshold() == before and _freeze_survivors not in gc.callbacks


@pytest.mark.unit
def test_no_collection_in_a_level_leaves_anything_for_the_older_generations() -> None:
    with level_gc():
        kept = [[i] for i in range(50_000)]  # survivors of the young collections on the way
        gc.collect(0)
        # Frozen: no later collection scans them again, and the older generations stay empty.
        assert gc.get_objects(generation=1) == [] and gc.get_objects(generation=2) == []
        assert kept[-1] == [49_999]
    assert gc.get_freeze_count() == 0  # unfrozen after the level
    assert _freeze_survivors not in gc.callbacks


@pytest.mark.unit
def test_the_policy_is_restored_when_the_level_fails() -> None:
    before = gc.get_threshold()
    with pytest.raises(RuntimeError), level_gc():
        raise RuntimeError("the level failed")
    assert gc.get_threshold() == before


@pytest.mark.integration
def test_a_level_runs_under_the_policy_and_records_the_same_without_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    experiment = {"concurrency": [4], "requests": 8, "warmup": 1, "prompts": ["a", "b"]}
    seen: set[bool] = set()

    async def watch() -> None:
        while True:
            seen.add(_freeze_survivors in gc.callbacks)
            await asyncio.sleep(0.001)

    before = gc.get_threshold()
    with_policy = _run({**experiment, "workers": 1}, tmp_path / "with", during=watch)
    assert True in seen and gc.get_threshold() == before
    monkeypatch.setattr("labkit.runner.run.level_gc", contextlib.nullcontext)
    without = _run({**experiment, "workers": 1}, tmp_path / "without")
    assert _fingerprint(with_policy.records) == _fingerprint(without.records)
    assert len(_fingerprint(without.records)) == 8


@pytest.mark.unit
def test_a_finished_request_freezes_the_heap_until_one_of_the_level_fails() -> None:
    ok, failed = make_record(), make_record(error_kind="timeout")
    request_done(ok)  # outside a level: nothing
    assert gc.get_freeze_count() == 0
    with level_gc():
        alive = [[i] for i in range(100)]  # a finished request's objects, young
        request_done(ok)
        assert gc.get_count()[0] == 0  # the young generation starts again from nothing
        frozen = gc.get_freeze_count()
        assert not any(o is alive[0] for o in gc.get_objects(generation=0))
        request_done(failed)  # a failed request: nothing frozen for the rest of the level
        more = [[i] for i in range(100)]
        request_done(ok)
        assert gc.get_freeze_count() == frozen
        assert any(o is more[0] for o in gc.get_objects(generation=0))
    assert gc.get_freeze_count() == 0  # unfrozen after the level
    with level_gc():  # the next level freezes per request again
        request_done(ok)
        assert gc.get_count()[0] == 0


@pytest.mark.unit
def test_the_figures_are_computed_with_the_records_out_of_every_collection() -> None:
    records = [make_record() for _ in range(20)]
    gc.collect()
    with figures_gc():
        assert gc.get_freeze_count() > 0  # the records held now: no collection scans them
        assert gc.get_objects(generation=2) == []
        young = [[i] for i in range(10)]
        gc.collect()
        assert young[-1] == [9] and records[-1].error is None
    assert gc.get_freeze_count() == 0  # unfrozen after: collected with the rest again
    with contextlib.suppress(RuntimeError), figures_gc():
        raise RuntimeError("an analysis bug")
    assert gc.get_freeze_count() == 0


@pytest.mark.unit
def test_cyclic_garbage_made_while_the_figures_are_computed_is_freed() -> None:
    class Node:
        other: Node | None = None

    gone: list[bool] = []

    with figures_gc():
        a, b = Node(), Node()
        a.other, b.other = b, a
        weakref.finalize(a, gone.append, True)
        del a, b
        gc.collect()
        assert gone == [True]


@pytest.mark.unit
def test_a_level_ends_without_a_full_collection_and_the_next_level_collects_what_it_left() -> None:
    class Node:
        other: Node | None = None

    gone: list[bool] = []
    gc.disable()  # no automatic collection between the two levels: only theirs
    try:
        with level_gc():
            a, b = Node(), Node()
            a.other, b.other = b, a
            weakref.finalize(a, gone.append, True)
            gc.collect(0)  # survivors of a young collection: frozen
            del a, b
            full = gc.get_stats()[2]["collections"]
        assert gc.get_stats()[2]["collections"] == full  # the level's end scans no record
        assert gone == []  # the cycle frozen in the level is still there
        with level_gc():
            assert gone == [True]  # the next level's start collected it
    finally:
        gc.enable()
