"""How an answer is graded against the truth: an interval covers the true value or misses
it, a fact is right or wrong, and the graders catch the untruths the lab once taught — a
cache hit's TTFT stated as a cold one, decode per token divided by a token that never
arrived, a split whose queue is not the server's, "network" holding labkit's own time."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from labkit.analysis.split import ttft_split
from labkit.figures import Mean, Quantile
from labkit.figures.attribution import AttributionFigures
from labkit.figures.single import PromptCacheRun, SingleFigures
from labkit.records import LabAnswer, RequestRecord
from labkit.scoring.grading import grade_table
from labkit.scoring.grading.attribution import grade_attribution
from labkit.scoring.grading.base import (
    Grade,
    Truth,
    fact,
    figure,
    true_decode_ms_per_token,
    true_outside_ms,
    true_send_ms,
)
from labkit.scoring.grading.single import grade_single
from labkit.truth.log import TruthLog, TruthRequest
from tests.support.records import make_record

pytestmark = pytest.mark.unit

T0 = 1_000_000_000


def test_an_interval_covers_the_truth_or_misses_it() -> None:
    q = Quantile(q=0.5, value=10.0, lo=9.0, hi=11.0, n=6, min_n=6)
    assert figure("a", "x", q, 10.9, "ms", 0.0).ok is True
    missed = figure("a", "x", q, 11.5, "ms", 0.0)
    assert missed.ok is False and missed.why == "off by +1.5 ms"
    assert figure("a", "x", q, 11.5, "ms", 1.0).ok is True  # the transit the server cannot see
    assert figure("a", "x", None, 11.5, "ms").ok is None  # not stated: not graded as right
    # without an interval, the value must hold within the tolerance
    assert figure("a", "x", 10.0, 10.05, "ms/token").ok is True
    assert figure("a", "x", 10.0, 10.5, "ms/token").ok is False


def test_a_fact_is_right_or_wrong() -> None:
    assert fact("a", "identical", True, True).ok is True
    assert fact("a", "identical", True, False).ok is False


def _truth(
    tid: str,
    start: int,
    *,
    first_ms: float,
    gap_ms: float,
    events: int,
    cached: int = 0,
    end_token: bool = False,
) -> TruthRequest:
    sends = [start + int((first_ms + k * gap_ms) * 1e6) for k in range(events)]
    return TruthRequest(
        id=tid,
        api="chat",
        stream=True,
        model="m",
        t_read_ns=start,
        t_start_ns=start,
        events_ns=sends,
        events_sent_ns=sends,
        event_tokens=[1] * events,
        t_end_ns=sends[-1],
        prompt_tokens=38,
        cached_tokens=cached,
        output_tokens=events,
        end_token=end_token,
        usage_output_tokens=events + end_token,
        capped=not end_token,
        prefill_ms=first_ms,
    )


def _pair(i: int, cached: int, first_ms: float) -> tuple[RequestRecord, TruthRequest]:
    start = T0 + i * 10**9
    t = _truth(f"r{i}", start, first_ms=first_ms, gap_ms=4.0, events=11, cached=cached)
    r = make_record(ttft_ms=first_ms, decode_ms_per_token=4.0, output_tokens=11)
    r.response_id = t.id
    r.t_start_mono_ns = start
    r.tags = {"cache": "cached" if cached else "cold"}
    return r, t


def _single(
    records: list[RequestRecord], figures: SingleFigures, truth: list[TruthRequest]
) -> Grade:
    log = TruthLog(Path("truth.jsonl"), 0, 0, truth)
    answer = LabAnswer(
        experiment="single", provider="local", model="m", question="q", answer="a", figures=figures
    )
    return Grade(
        run="r", truth="t", checks=grade_single(answer, records, Truth(log)), matched=1, unmatched=0
    )


def test_a_cache_hits_ttft_said_to_be_the_cold_one_is_caught() -> None:
    """The quickstart once warmed up on its own prompt: every measured TTFT was a cache hit's,
    and the answer called it the time to first token. The server knows none was cold."""
    pairs = [_pair(i, cached=37, first_ms=9.0 + i / 10) for i in range(6)]
    records, truth = [r for r, _ in pairs], [t for _, t in pairs]
    for r in records:
        r.tags = {"cache": "cold"}  # labkit asked for them cold...
    hit = Quantile(q=0.5, value=9.25, lo=9.0, hi=9.5, n=6, min_n=6)
    said_cold = SingleFigures(
        n=6,
        failed=0,
        cold=PromptCacheRun(state="cold", n=6, ttft=hit, input_tokens_p50=38, cached_tokens_p50=0),
        decode_per_token=Quantile(q=0.5, value=4.0, lo=4.0, hi=4.0, n=6, min_n=6),
        stop_reasons={"length": 6},
    )
    grade = _single(records, said_cold, truth)
    wrong = {c.name for c in grade.wrong}
    assert "cold requests" in wrong  # ...but the server served all six from its cache
    assert "cached requests" in wrong


def test_decode_divided_by_a_token_that_never_arrived_is_caught() -> None:
    """llama.cpp counts an end token it never streams: 11 events, 10 gaps of 4 ms, and a
    count of 12 made decode 40 / 11 = 3.64 ms. The truth is 4 ms a token."""
    pairs = [_pair(i, cached=0, first_ms=40.0) for i in range(6)]
    records, truth = [r for r, _ in pairs], [t for _, t in pairs]
    assert true_decode_ms_per_token(truth[0]) == pytest.approx(4.0)
    low = Quantile(q=0.5, value=40 / 11, lo=40 / 11, hi=40 / 11, n=6, min_n=6)
    figures = SingleFigures(
        n=6,
        failed=0,
        cold=PromptCacheRun(
            state="cold",
            n=6,
            ttft=Quantile(q=0.5, value=40.0, lo=40.0, hi=40.0, n=6, min_n=6),
            input_tokens_p50=38,
            cached_tokens_p50=0,
            provider_prefill_ms_p50=40.0,
        ),
        decode_per_token=low,
        stop_reasons={"length": 6},
    )
    grade = _single(records, figures, truth)
    (missed,) = grade.wrong
    assert missed.name == "decode per token (median)" and missed.true_value == pytest.approx(4.0)
    cols, rows = grade_table(grade)
    assert any(row[-1].startswith("MISSED") for row in rows) and cols[-1] == "graded"


def test_a_mean_is_graded_like_any_interval() -> None:
    m = Mean(value=12.9, lo=12.8, hi=13.1, n=6)
    assert figure("a", "TTFT (mean)", m, 12.73, "ms").ok is True  # within the transit
    assert figure("a", "TTFT (mean)", m, 12.73, "ms", 0.0).ok is False


def test_the_summary_says_plainly_when_no_answer_stated_an_interval_or_a_fact() -> None:
    from labkit.scoring.grading import grade_summary

    q = Quantile(q=0.5, value=10.0, lo=9.0, hi=11.0, n=6, min_n=6)
    only_facts = Grade(run="r", truth="t", checks=[fact("a", "x", 1, 1)], matched=1, unmatched=0)
    assert grade_summary(only_facts)[0] == (
        "no answer stated an interval; 1 of 1 stated facts were right."
    )
    only_figures = Grade(
        run="r", truth="t", checks=[figure("a", "x", q, 10.0, "ms", 0.0)], matched=1, unmatched=0
    )
    assert grade_summary(only_figures)[0] == (
        "1 of 1 stated intervals covered the truth; no answer stated a fact."
    )


def _attribution_pair(
    i: int, late_ms: float, estimated_ms: float | None
) -> tuple[RequestRecord, TruthRequest]:
    """Request path 1 ms (labkit's send 0.5 of it), front end 2, prefill 20: the server
    sends the first event 23 ms after the start; labkit's stamp is `late_ms` after that."""
    start = T0 + i * 10**9
    read = start + 1_000_000
    t = _truth(f"a{i}", read + 2_000_000, first_ms=20.0, gap_ms=4.0, events=5)
    t = t.model_copy(update={"t_read_ns": read, "frontend_ms": 2.0})
    r = make_record(
        experiment="attribution",
        ttft_ms=23.0 + late_ms,
        prefill_ms=20.0,
        output_tokens=5,
        send_ms=0.5,
        ttft_lateness_ms=estimated_ms,
    )
    r.provider_timings.queue_ms = 0.0
    r.response_id, r.t_start_mono_ns = t.id, start
    return r, t


def _grade_attribution(pairs: list[tuple[RequestRecord, TruthRequest]]) -> Grade:
    records = [r for r, _ in pairs]
    figures = AttributionFigures(n=len(records), ttft_split=ttft_split(records))
    answer = LabAnswer(
        experiment="attribution",
        provider="local",
        model="m",
        question="q",
        answer="a",
        figures=figures,
    )
    log = TruthLog(Path("truth.jsonl"), 0, 0, [t for _, t in pairs])
    checks = grade_attribution(answer, records, Truth(log))
    return Grade(run="r", truth="t", checks=checks, matched=len(pairs), unmatched=0)


def test_a_late_stamp_labkit_owns_is_not_taken_from_the_network_truth() -> None:
    """A host under load held one first token's stamp 9 ms past its arrival and labkit
    estimated it: the split's network and front end (2.5 ms each) is right. The grader once
    took that lateness from the true span up to the server's read, where it never was, and
    called the right answer wrong by 1.5 ms."""
    pairs = [_attribution_pair(i, 0.1, 0.1) for i in range(5)] + [_attribution_pair(5, 9.0, 9.0)]
    assert all(true_outside_ms(r, t) == pytest.approx(2.5) for r, t in pairs)
    grade = _grade_attribution(pairs)
    network = next(c for c in grade.checks if c.name == "network and front end (mean)")
    assert network.ok is True and network.true_value == pytest.approx(2.5)
    assert grade.wrong == []


def test_network_holding_labkits_own_late_stamps_is_caught() -> None:
    """Every first token's stamp 3 ms late and none of it estimated: the 3 ms land in
    "network" (5.5 ms against the true 2.5), and the grader says so."""
    grade = _grade_attribution([_attribution_pair(i, 3.0, None) for i in range(6)])
    wrong = {c.name: c for c in grade.wrong}
    network = wrong["network and front end (mean)"]
    assert network.value == pytest.approx(5.5) and network.true_value == pytest.approx(2.5)


def test_labkits_own_send_stamped_past_the_servers_read_is_not_taken_as_true() -> None:
    """The send stamped when the write call returned, after the server had read the request
    (the server, woken by the write, ran first): the request's last byte was handed over
    before that read, so the truth bounds labkit's own send by it, and the network's share
    the split then lacks is caught where it matters."""
    r, t = _attribution_pair(0, 0.1, 0.1)
    r.client.send_ms = r.client.request_sent_ms = 1.5  # the server read it at 1 ms
    assert true_send_ms(r, t) == pytest.approx(1.0)
    assert true_outside_ms(r, t) == pytest.approx(2.0)  # not 1.5: 0.5 ms of it was the server's
    # a connection opened inside the window is the network's, not labkit's send
    r.client.request_sent_ms = 1.5 + 0.3
    assert true_send_ms(r, t) == pytest.approx(0.7)
    # a send stamped in time is taken as it is
    r.client.send_ms = r.client.request_sent_ms = 0.4
    assert true_send_ms(r, t) == pytest.approx(0.4)
    pairs = [_attribution_pair(i, 0.1, 0.1) for i in range(6)]
    for rec, _ in pairs:
        rec.client.send_ms = rec.client.request_sent_ms = 4.0  # 3 ms past the server's read
    wrong = {c.name: c for c in _grade_attribution(pairs).wrong}
    network = wrong["network and front end (mean)"]
    assert network.true_value == pytest.approx(2.0)
    assert network.value == pytest.approx(-0.9, abs=0.2)


def test_a_figure_the_truth_sees_only_part_of_is_graded_against_a_lower_bound() -> None:
    """The SDK's TTFT minus the wire's: the truth server sees when it sent the first event,
    not when the SDK handed it over, so its difference is a lower bound of the real one (the
    SDK's own read path is missing from it). The stated interval must reach that bound; an
    interval above it is no error, one under it (beyond the tolerance) is."""
    q = Quantile(q=0.5, value=3.02, lo=2.70, hi=4.40, n=7, min_n=6)
    above = figure("a", "SDK minus wire", q, 2.19, "ms", bound="lower")
    assert (above.ok, above.bound, above.true) == (True, "lower", "at least 2.19 ms")
    assert figure("a", "SDK minus wire", q, 5.2, "ms", bound="lower").ok is True  # tolerance
    short = figure("a", "SDK minus wire", q, 5.6, "ms", bound="lower")
    assert short.ok is False and short.why == "below the truth's lower bound by 0.2 ms"
    # the same interval graded two-sided would miss a truth under it
    assert figure("a", "SDK minus wire", q, 0.5, "ms").ok is False
    assert figure("a", "SDK minus wire", q, 0.5, "ms", bound="lower").ok is True
    grade = Grade(run="r", truth="t", checks=[above, short], matched=1, unmatched=0)
    _, rows = grade_table(grade)
    assert [row[-1].split(" (")[0] for row in rows] == ["reached", "MISSED"]
    from labkit.scoring.grading import grade_summary

    assert grade_summary(grade)[0] == (
        "no answer stated an interval, 1 of 2 reached the lower bound the truth sets where it "
        "sees only part of a figure; no answer stated a fact."
    )


def test_the_sdks_later_ttft_is_graded_only_where_the_truths_bound_settles_it() -> None:
    """A stated "the SDK's TTFT is later" is right where the truth's lower bound of the
    difference is above 0; at or under 0 the truth cannot tell, and says so (not graded)
    rather than calling the claim wrong."""
    pairs = [_attribution_pair(i, 0.1, 0.1) for i in range(6)]
    records = [r for r, _ in pairs]
    sdk = [
        r.model_copy(
            update={
                "app": r.app.model_copy(update={"client_path": "sdk"}),
                "client": r.client.model_copy(update={"ttft_ms": 25.0}),
                "response_id": f"s{i}",
            }
        )
        for i, r in enumerate(records)
    ]
    for i, r in enumerate(records):
        r.app.client_path = "wire"
        r.trial = sdk[i].trial = i
    split = ttft_split(records)
    stated = Quantile(q=0.5, value=2.0, lo=1.5, hi=2.5, n=6, min_n=6)
    answer = LabAnswer(
        experiment="attribution", provider="local", model="m", question="q", answer="a",
        figures=AttributionFigures(n=12, ttft_split=split, sdk_ttft=stated),
    )  # fmt: skip

    def graded(sdk_first_ms: float) -> dict[str, Any]:
        # the SDK's requests answered `sdk_first_ms` after their start, on the same server
        truths = [t for _, t in pairs]
        for i, r in enumerate(sdk):
            assert r.t_start_mono_ns is not None
            t = truths[i]
            shift = r.t_start_mono_ns + int(sdk_first_ms * 1e6) - t.events_ns[0]
            moved = [ns + shift for ns in t.events_ns]
            truths.append(
                t.model_copy(update={"id": f"s{i}", "events_ns": moved, "events_sent_ns": moved})
            )
        log = TruthLog(Path("truth.jsonl"), 0, 0, truths)
        checks = grade_attribution(answer, [*records, *sdk], Truth(log))
        return {c.name: c for c in checks}

    later = graded(24.0)  # the truth's bound: 1 ms later than the wire's 23
    assert later["SDK minus wire TTFT (paired median)"].true_value == pytest.approx(1.0)
    assert later["SDK minus wire TTFT (paired median)"].ok is True
    assert later["the SDK's TTFT is later"].ok is True
    unsure = graded(22.5)  # the bound under 0: the SDK's read path could make up the rest
    assert unsure["SDK minus wire TTFT (paired median)"].ok is True
    sign = unsure["the SDK's TTFT is later"]
    assert sign.ok is None and sign.why is not None and "from below only" in sign.why
