"""labkit's records checked against the truth server's log (`labkit.truth`), on one clock.

The truth server stamps, on the host's monotonic clock (labkit's `time.perf_counter_ns`),
when it read each request and right before it sent each output event and the end. A byte
cannot arrive before it was sent, nor a request be read before the client started it: so
whatever the host's speed, every record must start before the server read its request, stamp
each output event no earlier than the server sent it, and end no earlier than the server sent
the end. How close the stamps come is a figure, not a test: `make bench-load` prints it
(`benchmarks/bench_load.py`, the stamp and TTFT error against the same server).
"""

from __future__ import annotations

from collections.abc import Sequence

from labkit.records import RequestRecord
from labkit.truth.log import TruthLog, TruthRequest

__all__ = ["assert_agrees_with_truth"]


def assert_agrees_with_truth(
    records: Sequence[RequestRecord], truth: TruthLog
) -> list[TruthRequest]:
    """Assert every successful record agrees with the request the truth log holds under its
    response id; return those truth requests, in the records' order."""
    by_id = {t.id: t for t in truth.requests}
    matched = []
    for r in records:
        assert r.error is None, r.error
        assert r.response_id in by_id, (r.response_id, sorted(by_id))
        t = by_id[r.response_id]
        c = r.client
        t0 = r.t_start_mono_ns
        assert t0 is not None and c.ttft_ms is not None and c.e2e_ms is not None
        # The request: started by labkit before the server read it; what the server sent.
        assert t0 <= t.t_read_ns <= t.t_start_ns <= t.events_ns[0]
        assert r.usage.output_tokens == t.output_tokens
        stamps = [t0 + round(ms * 1e6) for ms in c.event_offsets_ms]
        assert len(stamps) == len(t.events_ns)
        # Each output event stamped no earlier than its send, in order; the first is TTFT.
        assert all(s >= e for s, e in zip(stamps, t.events_ns, strict=True)), r.record_id
        assert stamps == sorted(stamps)
        assert t0 + round(c.ttft_ms * 1e6) >= t.events_ns[0]
        assert t0 + round(c.e2e_ms * 1e6) >= t.t_end_ns
        matched.append(t)
    return matched
