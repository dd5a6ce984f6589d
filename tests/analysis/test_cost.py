"""Cost per request, per session and per successful answer against a hand computation from
the records' usage and the price table."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pandas as pd
import pytest

from labkit.analysis.cost import cost_figures, session_costs
from labkit.pricing import price_table
from labkit.records import RequestRecord, StopReason, Usage
from labkit.rundata import read_run
from tests.report.report_builders import write_run
from tests.support.records import T0, make_record

pytestmark = pytest.mark.unit

#: Made-up prices: in 2.00, out 8.00, cached read 0.50, cache write 2.50 per 1M tokens;
#: from T0 + 1 h the output price is 4.00.
TABLE = price_table(
    [
        {"provider": "p", "model": "m", "date": T0.isoformat(), "input": 2.0, "output": 8.0,
         "cached_read": 0.5, "cache_write": 2.5},
        {"provider": "p", "model": "m", "date": (T0 + timedelta(hours=1)).isoformat(),
         "input": 2.0, "output": 4.0, "cached_read": 0.5, "cache_write": 2.5},
    ]
)  # fmt: skip


def _rec(
    i: int, o: int, cached: int = 0, write: int = 0, *, at: timedelta = timedelta(0),
    stop: StopReason = StopReason.END, error: str | None = None, **tags: object,
) -> RequestRecord:  # fmt: skip
    r = make_record(provider="p", model="m", started_at=T0 + at, error_kind=error,
                    tags=dict(tags) or None)  # fmt: skip
    usage = Usage(
        input_tokens=i, output_tokens=o, cached_input_tokens=cached or None,
        cache_write_input_tokens=write or None,
    )  # fmt: skip
    return r.model_copy(update={"usage": usage, "stop_reason": stop})


def _frame(records: list[RequestRecord]) -> pd.DataFrame:
    """The records as the runs-as-data reader gives them (through a run folder)."""
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        return read_run(write_run(Path(tmp) / "run", records))


def test_cost_per_request_and_per_answer_by_hand() -> None:
    records = [
        # 1,000 in of which 600 cached read, 100 out, before the change:
        #   400 × 2 + 600 × 0.5 + 100 × 8 = 800 + 300 + 800 = 1,900 per 1M → 0.0019
        _rec(1000, 100, cached=600, at=timedelta(minutes=10)),
        # 2,000 in of which 1,500 cache write (Anthropic cache_creation), 50 out:
        #   500 × 2 + 1500 × 2.5 + 50 × 8 = 1000 + 3750 + 400 = 5,150 → 0.00515
        _rec(2000, 50, write=1500, at=timedelta(minutes=20)),
        # after the change (output 4.00): 1,000 in, 100 out, cut at max_tokens:
        #   1000 × 2 + 100 × 4 = 2,400 → 0.0024 (not a successful answer)
        _rec(1000, 100, at=timedelta(minutes=70), stop=StopReason.LENGTH),
        # a warm-up: never counted
        _rec(5000, 500).model_copy(update={"warmup": True}),
    ]
    (fig,) = cost_figures(_frame(records), TABLE)
    total = 0.0019 + 0.00515 + 0.0024
    assert fig.requests == 3
    assert fig.total == pytest.approx(total)
    assert fig.per_request.value == pytest.approx(total / 3)
    assert fig.per_request.lo is not None and fig.per_request.hi is not None
    assert fig.per_request.lo <= total / 3 <= fig.per_request.hi
    # two of the three requests ended with an answer
    assert fig.per_successful_answer is not None
    assert fig.per_successful_answer.value == pytest.approx(total / 2)
    assert fig.goodput_per_dollar is not None
    assert fig.goodput_per_dollar.value == pytest.approx(2 / total)
    assert fig.price_date == f"{T0.date().isoformat()}, {(T0 + timedelta(hours=1)).isoformat()}"
    assert fig.per_session is None


def test_cost_per_session_by_hand() -> None:
    records = [
        # session 1: two turns of the main agent and one of a sub-agent, answered.
        #   turn 1: 1,000 in, 200 out → 2000 + 1600 = 3,600 → 0.0036
        _rec(1000, 200, session=1, agent="0", step=0, stop=StopReason.TOOL_CALL),
        #   sub-agent: 500 in, 100 out → 1000 + 800 = 1,800 → 0.0018
        _rec(500, 100, session=1, agent="0.1", step=0),
        #   turn 2: 1,500 in (1,000 cached), 50 out → 500×2 + 1000×0.5 + 50×8 = 1,900 → 0.0019
        _rec(1500, 50, cached=1000, session=1, agent="0", step=1, final=True),
        # session 2: one turn cut at max_tokens: 800 in, 300 out → 1600 + 2400 → 0.004
        _rec(800, 300, session=2, agent="0", step=0, final=True, stop=StopReason.LENGTH),
    ]
    frame = _frame(records)
    sessions = session_costs(frame, TABLE).set_index("session")
    one, two = 0.0036 + 0.0018 + 0.0019, 0.004
    assert sessions["cost"].to_dict() == pytest.approx({"run-1#1": one, "run-1#2": two})
    assert sessions["answered"].to_dict() == {"run-1#1": True, "run-1#2": False}
    (fig,) = cost_figures(frame, TABLE)
    assert fig.per_session is not None
    assert fig.per_session.value == pytest.approx((one + two) / 2)
    # one session answered: all the money over one answer
    assert fig.per_successful_answer is not None
    assert fig.per_successful_answer.value == pytest.approx(one + two)


def test_no_table_no_cost_and_unpriced_requests_are_left_out() -> None:
    records = [_rec(1000, 100), make_record(provider="q", model="other")]
    assert cost_figures(_frame(records), price_table([])) == []
    (fig,) = cost_figures(_frame(records), TABLE)
    assert (fig.provider, fig.requests) == ("p", 1)
    # a request sent before the table's first date is not priced
    early = _rec(1000, 100, at=timedelta(days=-1))
    assert cost_figures(_frame([early]), TABLE) == []


def test_rows_parsed_and_priced_in_blocks_price_as_whole(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A large run's send times are parsed, and its rows priced, a block of rows at a
    time: the entry each request is priced by (before and after the change at T0 + 1 h,
    an unreadable time unpriced) is the one a whole parse picks."""
    from labkit.analysis import cost

    records = [
        _rec(1000, 100, at=timedelta(minutes=m), stop=stop)
        for m, stop in [(5, StopReason.END), (65, StopReason.END), (30, StopReason.LENGTH),
                        (90, StopReason.END), (10, StopReason.END)]
    ]  # fmt: skip
    frame = _frame(records)
    frame.loc[frame.index[2], "started_at"] = "not a time"
    whole = cost_figures(frame, TABLE)
    monkeypatch.setattr(cost, "_PARSE_ROWS", 2)
    blocks = cost_figures(frame, TABLE)
    assert blocks == whole
    (fig,) = blocks
    # 1000 × 2 + 100 × 8 = 2,800 before the change, 1000 × 2 + 100 × 4 = 2,400 after
    assert fig.requests == 4
    assert fig.total == pytest.approx(2 * 0.0028 + 2 * 0.0024)
    assert fig.price_date == f"{T0.date().isoformat()}, {(T0 + timedelta(hours=1)).isoformat()}"


def test_a_whole_second_time_first_leaves_no_later_time_unpriced(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A record sent on a whole second has no fraction in its time (``…:00Z``): read first
    in a block, it once set the format the rest of the block was read by, and every time
    with a fraction became unreadable, so unpriced. Each is read as ISO 8601 on its own."""
    from labkit.analysis import cost

    steps = [timedelta(seconds=0), timedelta(milliseconds=10), timedelta(seconds=2, microseconds=5),
             timedelta(seconds=3), timedelta(milliseconds=3500)]  # fmt: skip
    frame = _frame([_rec(1000, 100, at=at) for at in steps])
    assert str(frame["started_at"].iloc[0]).endswith(":00Z")  # no fraction
    (fig,) = cost_figures(frame, TABLE)
    assert fig.requests == 5
    monkeypatch.setattr(cost, "_PARSE_ROWS", 2)
    assert cost_figures(frame, TABLE) == [fig]
