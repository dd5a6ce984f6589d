"""`labkit run` has the heap frozen as the interpreter exits: the collections at exit would
scan every record the run still holds (issue 47, benchmarks/bench_after_level.py)."""

from __future__ import annotations

import subprocess
import sys

import pytest

pytestmark = pytest.mark.unit

_CHILD = """
import atexit, gc
calls = []
freeze = gc.freeze
gc.freeze = lambda: (calls.append(1), freeze())[1]  # counted where the handler calls it
atexit.register(lambda: print("at exit:", gc.get_freeze_count() > 0, len(calls)))  # last
from labkit.cli.app import _no_collection_at_exit
_no_collection_at_exit()
_no_collection_at_exit()
print("now:", gc.get_freeze_count() > 0, len(calls))
"""


def test_the_heap_is_frozen_once_at_exit_and_not_before() -> None:
    out = subprocess.run(
        [sys.executable, "-c", _CHILD], capture_output=True, text=True, check=True, timeout=120
    ).stdout.splitlines()
    assert out == ["now: False 0", "at exit: True 1"]  # frozen once, at exit only
