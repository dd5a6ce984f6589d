"""The C stream figures (`labkit/_stampfigures.c`) are the Python's, to the bit.

`labkit.timing.stamp_figures` (offsets and the gaps' percentiles) and the kernel-stamp
self-check (`labkit.measurement.lateness.self_check_fields`) run in C where it is built and
the stamps are its common case, in Python otherwise. Generated streams (each event in a read
of its own, events read together, reads without an output event, reads the kernel did not
stamp, stamps beyond 64 bits or 2**53 ns apart, misaligned columns) give the same floats,
fields, field order and errors either way, and the whole `ClientTimings` JSON is the same.
"""

from __future__ import annotations

import math
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import labkit.measurement.lateness as lateness
import labkit.timing as timing
from labkit.measurement.lateness import KernelReads, self_check_fields
from labkit.timing import derive_client_timings, stamp_figures

pytestmark = pytest.mark.unit

T0 = 1_700_000_000_000_000


def test_the_c_figures_are_built_here() -> None:
    """setup.py builds them on Linux (an install without them runs the Python)."""
    assert timing.STAMP_FIGURES is not None, "setup.py did not build labkit/_stampfigures.c"
    assert lateness.STAMP_FIGURES is timing.STAMP_FIGURES


def _python(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(timing, "STAMP_FIGURES", None)
    monkeypatch.setattr(lateness, "STAMP_FIGURES", None)


def _bits(value: Any) -> Any:
    """Floats by their exact value and sign (0.0 and -0.0 apart), lists and dicts in order."""
    if isinstance(value, float):
        return ("float", value.hex(), math.copysign(1.0, value))
    if isinstance(value, list | tuple):
        return [type(value).__name__, *(_bits(v) for v in value)]
    if isinstance(value, dict):
        return [(k, _bits(v)) for k, v in value.items()]
    return (type(value).__name__, value)


def _both(call: Any) -> tuple[Any, Any]:
    """`call()` with the C figures, then with the Python only: each result or its error."""

    def run() -> Any:
        try:
            return _bits(call())
        except Exception as exc:  # the same error either way
            return ("raised", type(exc).__name__, str(exc))

    fast = run()
    with pytest.MonkeyPatch.context() as m:
        _python(m)
        slow = run()
    return fast, slow


# Gaps of every size: equal stamps (events read together), µs apart, ms apart, and rarely
# backwards (stamps out of order: the Python's case).
_gap = st.integers(0, 99).flatmap(
    lambda k: (
        st.just(0)
        if k < 20
        else st.integers(-5_000, -1)
        if k < 22
        else st.integers(1, 2_000)
        if k < 60
        else st.integers(1, 50_000_000)
    )
)


@st.composite
def _stream(draw: st.DrawFn) -> list[int]:
    start = draw(st.one_of(st.integers(-(10**6), 10**9), st.sampled_from([2**53 - 5, 2**63 + 3])))
    gaps = draw(st.lists(_gap, max_size=40))
    out = [T0 + start]
    for g in gaps:
        out.append(out[-1] + g)
    return out


@st.composite
def _reads(draw: st.DrawFn, output_ns: list[int]) -> KernelReads:
    """The reads of a stream: one per event, or with reads of no output event between
    (a role chunk, the usage chunk), a read lost, one the kernel did not stamp, a seen
    column of another length."""
    stamps: list[int] = []
    for t in output_ns:
        if draw(st.integers(0, 9)) == 0:
            stamps.append(t - draw(st.integers(1, 40_000)))  # a read of no output event
        if draw(st.integers(0, 19)) != 0:  # else: the event's read is not in the list
            stamps.append(t)
    if draw(st.booleans()):
        stamps.append((output_ns[-1] if output_ns else T0) + draw(st.integers(0, 30_000)))
    seen = [s + draw(st.integers(0, 3_000_000)) for s in stamps]
    kernel = [True] * len(stamps)
    if stamps and draw(st.integers(0, 9)) == 0:
        kernel[draw(st.integers(0, len(stamps) - 1))] = False
    if seen and draw(st.integers(0, 29)) == 0:
        seen.pop()
    return KernelReads(stamps, seen, kernel)


@st.composite
def _windows(draw: st.DrawFn, output_ns: list[int]) -> dict[Any, Any]:
    """The loop's window for some of the reads' stamps (`TimedSelector.window_before`):
    (entered or floor, woken or entered, woke), around the stamp, by µs and ns (ties of
    the µs rounding), a few not a window of ints."""
    windows: dict[Any, Any] = {}
    for t in sorted(set(output_ns)):
        pick = draw(st.integers(0, 9))
        if pick < 3:
            continue
        floor = t - draw(
            st.one_of(st.integers(0, 3_000_000), st.integers(0, 3).map(lambda u: u * 1_500))
        )
        latest = t + draw(st.integers(-2_000_000, 1_000_000))
        windows[t] = [floor, latest, True] if pick == 9 else (floor, latest, pick % 2 == 0)
    return windows


@settings(max_examples=400, deadline=None)
@given(stream=_stream(), t_start=st.integers(T0 - 10**7, T0 + 10**9))
def test_offsets_and_gaps_are_the_pythons(stream: list[int], t_start: int) -> None:
    fast, slow = _both(lambda: stamp_figures(t_start, stream))
    assert fast == slow


@settings(max_examples=400, deadline=None)
@given(data=st.data(), stream=_stream())
def test_the_kernel_self_check_is_the_pythons(data: st.DataObject, stream: list[int]) -> None:
    reads = data.draw(_reads(stream))
    windows = data.draw(_windows(stream))
    fast, slow = _both(lambda: self_check_fields("kernel", stream, None, reads, windows))
    assert fast == slow


@settings(max_examples=200, deadline=None)
@given(data=st.data(), stream=_stream().filter(lambda s: s[-1] < 2**62))
def test_the_client_timings_json_is_the_same(data: st.DataObject, stream: list[int]) -> None:
    reads = data.draw(_reads(stream))
    t_start = stream[0] - data.draw(st.integers(0, 10**9))
    tokens = data.draw(st.one_of(st.none(), st.integers(0, 200)))

    windows = data.draw(_windows(stream))

    def timings() -> Any:
        fields = self_check_fields("kernel", stream, None, reads, windows)
        return derive_client_timings(
            t_start_ns=t_start,
            phases_ns={"http11.send_request_body.complete": t_start + 40_000},
            first_event_ns=stream[0],
            output_event_ns=stream,
            first_text_ns=stream[0],
            end_ns=stream[-1] + 1_000,
            output_tokens=tokens,
            self_check=fields,
        ).model_dump_json()

    fast, slow = _both(timings)
    assert fast == slow


def test_the_common_case_runs_in_c() -> None:
    """Events each in a read of its own, all kernel-stamped: C answers (None would mean the
    Python ran), and its figures are those of a hand count."""
    c = timing.STAMP_FIGURES
    assert c is not None
    out = [T0 + 1_000_000, T0 + 3_000_000, T0 + 4_000_000]
    offsets, p50, p99, largest = c.offsets(T0, out)
    assert offsets == [1.0, 3.0, 4.0]
    assert (p50, largest) == (1.5, 2.0)
    assert p99 == pytest.approx(1.99)
    reads = KernelReads(out, [t + 2_000 for t in out], [True] * 3)
    assert c.kernel_self_check(out, *reads, {}) == ((0.002, 0.002), None)
    fields = self_check_fields("kernel", out, None, reads, {})
    assert fields["stamp_lateness_ms"] == [0.0, 0.0, 0.0]
    assert fields["ttft_lateness_ms"] == 0.0
    assert fields["read_lag_ms_p50"] == 0.002
    # Two events read together, the loop woken by the first 1 ms before the read's stamp:
    # the first is 1 ms late, the second on time (`_kernel_lateness`).
    two = [T0, T0]
    window = {T0: (T0 - 5_000_000, T0 - 1_000_000, True)}
    _lags, late = c.kernel_self_check(two, [T0], [T0 + 1_000], [True], window)
    assert late == (0.5, 0.99, 1.0, [1.0, 0.0], 1.0)
    # Stamps out of order, or a read the kernel did not stamp: the Python's to do.
    assert c.kernel_self_check([T0 + 1, T0], [T0], [T0], [True], {}) is None
    assert c.kernel_self_check(out, out, out, [True, False, True], {}) is None


def test_the_c_wake_slack_is_the_pythons() -> None:
    """labkit/_stampfigures.c's WAKE_SLACK_NS is `lateness.WAKE_SLACK_NS`: a select() that
    returned the slack after the read's stamp was woken by it (no event late), one a
    nanosecond later woke late (the events spread from its entry)."""
    c = timing.STAMP_FIGURES
    assert c is not None
    slack = lateness.WAKE_SLACK_NS
    two = [T0, T0]
    reads = KernelReads([T0], [T0], [True])
    lates = []
    for latest in (T0 + slack, T0 + slack + 1):
        window = {T0: (T0 - 4_000, latest, True)}
        got = c.kernel_self_check(two, *reads, window)
        assert got is not None
        lates.append(got[1])
        fast, slow = _both(lambda w=window: self_check_fields("kernel", two, None, reads, w))
        assert fast == slow
    assert lates[0] is None
    assert lates[1] is not None
    assert lates[1][3] == [0.002, 0.0]
