"""The sweep's choices from its probes' outcomes: the next level, the interval, the stops,
and the config checks — no sockets, synthetic outcomes."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from labkit.analysis.levels import Level
from labkit.config import parse_config
from labkit.errors import ConfigError
from labkit.experiments.sweep import SweepExperiment, SweepSettings
from labkit.figures import LoadLevel, SweepFigures, SweepProbe
from labkit.records import LabResults
from labkit.report.kinds.sweep import sweep_section
from labkit.report.render import Para
from tests.support.records import make_record

pytestmark = pytest.mark.unit


def _sweep(**settings: Any) -> SweepExperiment:
    return SweepExperiment(SweepSettings(**{"slo": {"ttft_ms_p90": 100}, **settings}))


def _probe(step: int, mode: str, target: float, met: bool, completed: float = 0.0) -> SweepProbe:
    role = "baseline" if step == 0 else "throughput" if step == 1 else "bisect"
    level = LoadLevel(
        level="x", title="x", mode=mode, target=target, ok=4, completed_rps=completed or target
    )
    return SweepProbe(step=step, role=role, level=level, met=met)  # type: ignore[arg-type]


def _walk(
    exp: SweepExperiment, meets: Any, completed: dict[int, float]
) -> tuple[list[tuple[str, float]], str]:
    """Run the sweep's choices to the end, each level meeting where `meets(level)` says;
    the levels run, and why it stopped."""
    done: list[SweepProbe] = []
    while (nxt := exp.next_level(done)).level is not None:
        level = nxt.level
        rate = completed.get(len(done), level.target)
        done.append(_probe(len(done), level.mode, level.target, meets(level), rate))
    return [(p.level.mode, p.level.target) for p in done], nxt.stop


def test_a_concurrency_sweep_bisects_to_one_stream() -> None:
    exp = _sweep(mode="concurrency", throughput_concurrency=32, requests=32)
    levels, stop = _walk(exp, lambda lvl: lvl.target <= 6, {})
    assert [t for _, t in levels] == [1, 32, 16, 8, 4, 6, 7]
    assert stop == "the interval is one stream wide"


def test_a_rate_sweep_looks_above_the_throughput_probe_until_a_rate_misses() -> None:
    exp = _sweep(throughput_concurrency=8, requests=16, resolution=0.1, max_probes=20)
    # The baseline completes 2 req/s, the throughput probe 10; the true knee is 13.
    levels, _ = _walk(exp, lambda lvl: lvl.mode == "concurrency" or lvl.target <= 13, {0: 2, 1: 10})
    rates = [t for mode, t in levels if mode == "rate"]
    assert rates[:3] == [10, 12, 14.4]  # the probe's rate, then ×1.2 while they meet
    done = [_probe(0, "concurrency", 1, True, 2), _probe(1, "concurrency", 8, False, 10)]
    done += [_probe(i + 2, "rate", r, r <= 13) for i, r in enumerate(rates)]
    low, high = exp.interval(done)
    assert low is not None and high is not None
    assert low <= 13 < high and high - low <= 0.1 * high


def test_a_rate_the_baseline_met_one_at_a_time_can_miss_in_open_loop() -> None:
    """On a host the server already fills, the throughput probe can complete fewer requests
    a second than the baseline (6.80 against 7.02 req/s); the first open-loop level, at the
    baseline's own rate, then queues and fails. The knee lies below the baseline's rate:
    the sweep steps down (÷1.2) until a rate passes, then bisects, and never states the
    baseline's closed-loop pass as the knee or an empty interval."""
    exp = _sweep(throughput_concurrency=8, requests=16, resolution=0.1, max_probes=20)

    def meets(level: Level) -> bool:  # the true open-loop knee: 5.2 req/s
        return level.target == 1 if level.mode == "concurrency" else level.target <= 5.2

    levels, stop = _walk(exp, meets, {0: 7.0234, 1: 6.80})
    rates = [t for mode, t in levels if mode == "rate"]
    assert rates[:3] == [7.02, 5.85, 4.88]  # the baseline's rate, then ÷1.2 while they miss
    assert stop == "the interval is within 10% of its top"
    done = [_probe(0, "concurrency", 1, True, 7.0234), _probe(1, "concurrency", 8, False, 6.80)]
    assert exp.interval(done) == (7.0234, None) and not exp.baseline_refuted(done)
    done.append(_probe(2, "rate", 7.02, False))
    assert exp.baseline_refuted(done) and exp.interval(done) == (None, 7.02)
    done += [_probe(i + 3, "rate", r, r <= 5.2) for i, r in enumerate(rates[1:])]
    low, high = exp.interval(done)
    assert low is not None and high is not None
    assert low <= 5.2 < high and high - low <= 0.1 * high


def _sweep_records(exp: SweepExperiment, outcomes: list[tuple[float, bool]]) -> list[Any]:
    """Records of a rate sweep whose levels, in the order it chooses them, meet or miss
    the SLO as `outcomes` say; each level's requests run back to back at `completed`."""
    records: list[Any] = []
    done: list[SweepProbe] = []
    for completed, met in outcomes:
        level = exp.next_level(done).level
        assert level is not None
        for i in range(16):
            r = make_record(
                provider="p",
                experiment=exp.name,
                ttft_ms=20.0 if met else 900.0,
                tags={"level": level.label, "level_run": str(level.index)},
            )
            client = r.client.model_copy(update={"e2e_ms": 1000 / completed})
            start = int((level.index * 100 + i / completed) * 1e9)
            records.append(r.model_copy(update={"t_start_mono_ns": start, "client": client}))
        done.append(_probe(len(done), level.mode, level.target, met, completed))
    return records


def test_the_answer_puts_the_knee_below_a_baseline_rate_that_missed_in_open_loop() -> None:
    exp = _sweep(throughput_concurrency=8, requests=16, max_probes=4, slo={"ttft_ms_p50": 100})
    # Baseline 7.02 req/s; concurrency 8 completes 6.80; 7.02 and 5.85 req/s miss.
    records = _sweep_records(exp, [(7.02, True), (6.80, False), (7.02, False), (5.85, False)])
    answer = exp.analyze("p", "m", records)
    f = answer.figures
    assert isinstance(f, SweepFigures)
    assert f.baseline_refuted and f.knee is None and f.knee_low is None and f.knee_high == 5.85
    assert answer.status == "partial"
    assert answer.answer.startswith(
        "No open-loop rate was shown to meet the SLOs: even 5.85 req/s, at or under the "
        "baseline's rate, missed them (missed ttft_ms_p50); the true knee lies below it."
    )
    assert "open-loop arrivals at that rate did not" in answer.answer
    # The report's sweep table says the same, with the bound it has.
    run = SimpleNamespace(lab=LabResults(run_id="r", answers=[answer]))
    paras = [b.text for b in sweep_section(run) if isinstance(b, Para)]  # type: ignore[arg-type]
    assert any(
        t.startswith("no open-loop rate met the SLOs") and "below 5.85 req/s" in t for t in paras
    )
    # One more level, and 4.88 req/s meets: the knee, below the baseline's rate.
    exp = _sweep(throughput_concurrency=8, requests=16, max_probes=5, slo={"ttft_ms_p50": 100})
    records = _sweep_records(
        exp, [(7.02, True), (6.80, False), (7.02, False), (5.85, False), (4.88, True)]
    )
    answer = exp.analyze("p", "m", records)
    f = answer.figures
    assert isinstance(f, SweepFigures)
    assert (f.knee, f.knee_low, f.knee_high) == (4.88, 4.88, 5.85) and f.baseline_refuted
    assert answer.answer.startswith(
        "The knee: 4.88 req/s meets every SLO at 95% (the true knee lies in [4.88, 5.85) req/s)"
    )
    assert "The first level above it to fail, 5.85 req/s: missed ttft_ms_p50." in answer.answer


def test_the_sweep_stops_on_its_bounds() -> None:
    levels, stop = _walk(_sweep(requests=8), lambda lvl: False, {})
    assert levels == [("concurrency", 1)]
    assert stop == "the synchronous baseline already misses the SLOs"
    short = _sweep(throughput_concurrency=4, requests=8, max_probes=4)
    levels, stop = _walk(short, lambda lvl: lvl.target < 5, {0: 1, 1: 20})
    assert len(levels) == 4 and stop == "max_probes (4) reached"
    roomy = _sweep(mode="concurrency", throughput_concurrency=4, requests=8)
    levels, stop = _walk(roomy, lambda lvl: True, {})
    assert len(levels) == 2 and stop == "even the throughput probe met the SLOs"


def _config(entry: dict[str, Any]) -> Any:
    return parse_config(
        {"name": "s", "providers": [{"id": "f", "kind": "fake"}], "experiments": [entry]}
    )


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ({"kind": "sweep"}, "a sweep needs `slo:`"),
        ({"kind": "sweep", "slo": {"ttft_ms_p90": 1}, "rate": [1]}, "chooses its own levels"),
        ({"kind": "sweep", "slo": {"ttft_ms_p90": 1}, "max_concurrency": 4}, "uncapped"),
        ({"kind": "sweep", "slo": {"ttft_ms_p90": 1}, "resolution": 1.5}, "resolution"),
    ],
)
def test_bad_sweep_entries_get_one_clear_message(entry: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        _config(entry)


def test_more_probe_streams_than_requests_is_refused() -> None:
    cfg = _config({"kind": "sweep", "slo": {"ttft_ms_p90": 1}, "requests": 8})
    exp = SweepExperiment(cfg.experiments[0])
    with pytest.raises(ConfigError, match="throughput_concurrency 32 with only 8 requests"):
        exp.validate_for(cfg.providers[0])


def _rate_records(starts_s: list[float], ttfts: list[float], e2e_ms: float = 500.0) -> list[Any]:
    """Requests started at `starts_s`, each `e2e_ms` long, first tokens after `ttfts`."""
    records = []
    for start, ttft in zip(starts_s, ttfts, strict=True):
        r = make_record(experiment="sweep", ttft_ms=ttft, tags={"level": "r10"})
        client = r.client.model_copy(update={"e2e_ms": e2e_ms})
        records.append(r.model_copy(update={"t_start_mono_ns": int(start * 1e9), "client": client}))
    return records


def test_a_rate_level_saturates_when_sent_late_or_when_ttft_keeps_growing() -> None:
    exp = _sweep(requests=12, slo={"ttft_ms_p50": 1000})
    level = Level(2, "rate", 10.0)
    steady = exp.probe(2, "bisect", level, _rate_records([i / 10 for i in range(12)], [20.0] * 12))
    assert steady.met and not steady.saturated
    # Sent at 5 req/s when 10 were asked for: labkit could not keep the rate.
    late = exp.probe(2, "bisect", level, _rate_records([i / 5 for i in range(12)], [20.0] * 12))
    assert late.saturated and "labkit sent only 5.00 of 10 req/s" in late.why
    # Sent and completed on time, but each first token comes 30 ms later than the one
    # before: the provider's queue is growing.
    growing = [20.0 + 30 * i for i in range(12)]
    queued = exp.probe(2, "bisect", level, _rate_records([i / 10 for i in range(12)], growing))
    assert queued.saturated and not queued.met
    assert queued.why == "TTFT grew from 65 to 305 ms through the level (queue growing)"
    # Completed at 5 req/s though sent at 10: the provider falls behind.
    slow = _rate_records([i / 10 for i in range(12)], [20.0] * 12)
    slow = [
        r.model_copy(update={"client": r.client.model_copy(update={"e2e_ms": 100.0 * i})})
        for i, r in enumerate(slow)
    ]
    behind = exp.probe(2, "bisect", level, slow)
    assert behind.saturated and behind.why.startswith("completed 5.00 of 10 req/s")


def _judged(
    step: int, mode: str, target: float, verdict: str, completed: float = 0.0
) -> SweepProbe:
    probe = _probe(step, mode, target, verdict == "pass", completed)
    return probe.model_copy(update={"verdict": verdict})


def test_undecided_levels_move_neither_end_of_the_interval() -> None:
    exp = _sweep(throughput_concurrency=8, requests=16, resolution=0.1, max_probes=20)
    done = [_judged(0, "concurrency", 1, "pass", 2), _judged(1, "concurrency", 8, "fail", 10)]
    done.append(_judged(2, "rate", 10, "undecided"))
    assert exp.interval(done) == (2, None)
    # Nothing failed yet: the sweep looks above the undecided level.
    nxt = exp.next_level(done)
    assert nxt.level is not None and nxt.level.target == 12
    done += [_judged(3, "rate", 12, "fail"), _judged(4, "rate", 6, "pass")]
    assert exp.interval(done) == (6, 12)
    assert (lvl := exp.next_level(done).level) is not None and lvl.target == 9


def test_a_sweep_stops_where_the_middle_stayed_undecided() -> None:
    exp = _sweep(mode="concurrency", throughput_concurrency=8, requests=8)
    done = [_judged(0, "concurrency", 1, "pass"), _judged(1, "concurrency", 8, "fail")]
    done += [_judged(2, "concurrency", 4, "pass"), _judged(3, "concurrency", 6, "undecided")]
    assert exp.interval(done) == (4, 8)
    assert exp.next_level(done).stop == (
        "concurrency 6, the interval's middle, stayed undecided: the knee is near it"
    )
    unsure = [_judged(0, "concurrency", 1, "undecided")]
    assert exp.next_level(unsure).stop.startswith("the synchronous baseline stayed undecided")


def test_a_probe_from_before_verdicts_reads_its_point_verdict() -> None:
    old = _probe(2, "rate", 10, True).model_dump(exclude={"verdict"})
    assert SweepProbe.model_validate(old).verdict == "pass"
    assert SweepProbe.model_validate({**old, "met": False}).verdict == "fail"


def test_max_requests_per_level_is_at_least_a_pass() -> None:
    with pytest.raises(ConfigError, match="max_requests_per_level must be at least"):
        _config(
            {
                "kind": "sweep",
                "slo": {"ttft_ms_p90": 1},
                "requests": 64,
                "max_requests_per_level": 32,
            }
        )


def test_a_level_too_short_to_tell_is_undecided_and_says_why() -> None:
    exp = _sweep(requests=12, slo={"ttft_ms_p90": 1000})
    level = Level(2, "rate", 10.0)
    records = _rate_records([i / 10 for i in range(12)], [20.0] * 12)
    short = exp.probe(2, "bisect", level, records)
    assert (short.verdict, short.met, short.requests_sent) == ("undecided", False, 12)
    assert short.why == "undecided after 12 requests: ttft_ms_p90 met by 12 (95% CI 74–100%)"


def test_a_rate_a_little_above_capacity_saturates_by_its_ttft_trend() -> None:
    exp = _sweep(requests=40, slo={"ttft_ms_p90": 1000})
    level = Level(2, "rate", 10.0)
    starts = [i / 10 for i in range(40)]
    jitter = [(-3.0, 1.0, 4.0, -2.0)[i % 4] for i in range(40)]
    # A queue building by half a millisecond a request: 20 ms more by the end, far from
    # doubling TTFT, yet steady: the level cannot be held.
    rising = [25.0 + 0.5 * i + j for i, j in enumerate(jitter)]
    slow = exp.probe(2, "bisect", level, _rate_records(starts, rising))
    assert slow.verdict == "fail" and slow.saturated
    assert slow.why.startswith("TTFT rose 20 ms through the level (queue growing, p = ")
    flat = exp.probe(2, "bisect", level, _rate_records(starts, [25.0 + j for j in jitter]))
    assert flat.verdict == "pass" and not flat.saturated


def test_a_level_a_worker_died_in_stops_the_retrace_and_says_so() -> None:
    """A probe level left partial (a worker process or Ray node died mid-level: fewer
    records than a pass) is no probe: the sweep stops there and says why, and how to finish."""
    exp = _sweep(mode="concurrency", requests=8)
    baseline = exp.next_level([]).level
    assert baseline is not None
    records = [
        make_record(provider="p", experiment=exp.name, tags={"level": baseline.label})
        for _ in range(5)
    ]
    assert exp.analyze("p", "m", records).answer == (
        f"No level was measured: {baseline.title} was not measured (max_duration_s reached, "
        "or the run was interrupted)."
    )
    exp.partial_levels = {("p", baseline.label): "a worker process"}
    answer = exp.analyze("p", "m", records)
    assert answer.status == "failed"
    assert answer.answer == (
        f"No level was measured: {baseline.title} is partial (a worker process died "
        "mid-level; labkit run --resume runs it again)."
    )


def test_a_level_a_ray_node_died_in_is_no_probe_even_with_its_count_full() -> None:
    """A Ray actor's in-flight requests are records of kind `lost`: a pass a node died in
    can hold as many records as a whole one. It is still no probe (its lost requests would
    read as failures), and a resumed run runs it again rather than reusing it."""
    import asyncio
    from types import SimpleNamespace

    from labkit.records import RequestRecord

    exp = _sweep(mode="concurrency", requests=8)
    baseline = exp.next_level([]).level
    assert baseline is not None
    tags = {"level": baseline.label, "level_run": "a"}
    records = [
        make_record(
            provider="p",
            experiment=exp.name,
            tags=tags,
            **({"error_kind": "lost", "ttft_ms": None} if i > 5 else {}),
        )
        for i in range(8)
    ]
    assert exp.analyze("p", "m", records).figures.probes  # type: ignore[union-attr]
    exp.partial_levels = {("p", baseline.label): "a Ray node"}
    answer = exp.analyze("p", "m", records)
    assert answer.answer == (
        f"No level was measured: {baseline.title} is partial (a Ray node died mid-level; "
        "labkit run --resume runs it again)."
    )

    class Context:
        def __init__(self) -> None:
            self.said: list[str] = []

        def previous(self) -> list[RequestRecord]:
            return records

        def expect(self, requests: int) -> None: ...

        def message(self, text: str) -> None:
            self.said.append(text)

    async def first_plan() -> str:
        plans = exp.level_plans(SimpleNamespace(id="p"), Context())  # type: ignore[arg-type]
        plan = await anext(plans)
        await plans.aclose()
        return plan.title

    assert asyncio.run(first_plan()) == baseline.title  # run again, not "already measured"
