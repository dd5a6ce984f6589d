"""The capacity calibration for real: streams from a fake server on loopback, read by the
real recorder and transport in this thread."""

from __future__ import annotations

import asyncio
import threading

import pytest

from labkit.capacity import calibrate

pytestmark = pytest.mark.integration


def test_calibration_reads_every_event_and_prices_it() -> None:
    before = set(threading.enumerate())
    measured = asyncio.run(calibrate())
    # Two counted rounds of 8 streams × 200 tokens, every token one output event.
    assert measured.events_measured == 3200
    # Generous: a real cost, far from zero and far from a millisecond an event.
    assert 0.5 < measured.cpu_us_per_event < 5_000
    assert measured.events_per_s > 100
    assert not [t for t in set(threading.enumerate()) - before if t.is_alive()]
