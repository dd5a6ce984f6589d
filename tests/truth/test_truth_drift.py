"""The truth server's planted, time-varying behaviour (`labkit.truth.drift`): a request's
time is its X-Labkit-Sim-Time header; a queue bump at given hours, a prefill step, a front-end
step and a fingerprint / build change apply from their times, are reported where the shape
reports them, and are logged per request with their true sizes."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest

from labkit.errors import ConfigError
from labkit.truth.drift import Drift, drifted, sim_time
from labkit.truth.log import read_truth_log
from labkit.truth.process import TruthServer
from labkit.truth.schedule import TruthSchedule

DAY0 = datetime(2026, 3, 2, tzinfo=UTC).timestamp()  # a Monday, 00:00 UTC
HOUR = 3600.0
DRIFT: dict[str, Any] = {
    "queue_bump": {"start_hour": 17, "end_hour": 19, "ms": 300},
    "prefill_step": {"at": DAY0 + 50 * HOUR, "factor": 2},
    "frontend_step": {"at": "2026-03-04T12:00:00+00:00", "ms": 40},
    "fingerprint_step": {"at": DAY0 + 30 * HOUR, "before": "fp_old", "after": "fp_new"},
    "build_step": {"at": DAY0 + 30 * HOUR, "before": "b100", "after": "b200"},
}


@pytest.mark.unit
def test_each_change_applies_from_its_time_with_its_true_size() -> None:
    base = TruthSchedule(
        first_token_ms=20, prefill_ms_per_token=1, queue_ms=5, drift=Drift.model_validate(DRIFT)
    )
    early, none = drifted(base, DAY0 + 3 * HOUR)
    assert none == []
    assert (early.queue_ms, early.first_token_ms, early.frontend_ms) == (5, 20, 0)
    assert (early.system_fingerprint, early.server_build) == ("fp_old", "b100")
    bump, effects = drifted(base, DAY0 + 17.5 * HOUR)
    assert bump.queue_ms == 305
    assert effects == [{"kind": "queue_bump", "component": "queue", "ms": 300}]
    assert drifted(base, DAY0 + 19 * HOUR)[0].queue_ms == 5  # [17:00, 19:00)
    late, effects = drifted(base, DAY0 + (24 * 3 + 18) * HOUR)
    assert (late.first_token_ms, late.prefill_ms_per_token) == (40, 2)
    assert late.frontend_ms == 40
    assert (late.system_fingerprint, late.server_build) == ("fp_new", "b200")
    kinds = [e["kind"] for e in effects]
    assert kinds == ["queue_bump", "prefill_step", "frontend_step", "fingerprint", "build"]
    assert TruthSchedule().drift is None
    assert drifted(TruthSchedule(), DAY0) == (TruthSchedule(), [])


@pytest.mark.unit
def test_a_bump_past_midnight_wraps() -> None:
    bump = Drift.model_validate({"queue_bump": {"start_hour": 22, "end_hour": 2, "ms": 10}})
    on = [
        h for h in range(24) if bump.queue_bump is not None and bump.queue_bump.on(DAY0 + h * HOUR)
    ]
    assert on == [0, 1, 22, 23]


@pytest.mark.unit
def test_the_time_is_the_header_else_the_clock() -> None:
    assert sim_time({"x-labkit-sim-time": str(DAY0)}) == (DAY0, True)
    assert sim_time({"x-labkit-sim-time": "soon"}, now=7.0) == (7.0, False)
    assert sim_time({"x-labkit-sim-time": "inf"}, now=7.0) == (7.0, False)
    assert sim_time({}, now=7.0) == (7.0, False)


@pytest.mark.unit
def test_a_bad_drift_is_one_clear_line() -> None:
    with pytest.raises(ConfigError, match="drift"):
        TruthSchedule().with_overrides({"drift": '{"queue_bump": {"start_hour": 30}}'})
    with pytest.raises(ConfigError, match="drift"):
        TruthSchedule().with_overrides({"drift": "{not json"})
    with pytest.raises(ConfigError, match="drift"):
        TruthSchedule().with_overrides({"drift": {"frontend_step": {"at": DAY0}}})
    read = TruthSchedule().with_overrides({"drift": json.dumps(DRIFT)})
    assert read.drift is not None and read.drift.frontend_step is not None
    assert read.drift.frontend_step.at == DAY0 + 60 * HOUR


def _ask(client: httpx.Client, url: str, at: float) -> dict[str, Any]:
    body = {
        "model": "m",
        "stream": True,
        "stream_options": {"include_usage": True},
        "messages": [{"role": "user", "content": "one two three"}],
    }
    last: dict[str, Any] = {}
    with client.stream(
        "POST",
        url + "/chat/completions",
        json=body,
        headers={"X-Labkit-Sim-Time": str(at)},
    ) as reply:
        for line in reply.iter_lines():
            if line.startswith("data: {"):
                chunk = json.loads(line[6:])
                last["system_fingerprint"] = chunk.get("system_fingerprint")
                if "x_groq" in chunk:
                    last["x_groq"] = chunk["x_groq"]
    return last


@pytest.mark.integration
def test_the_served_replies_and_the_truth_log_follow_the_simulated_time(tmp_path: Path) -> None:
    times = [DAY0 + 3 * HOUR, DAY0 + 17.5 * HOUR, DAY0 + 80 * HOUR]
    with (
        TruthServer(
            first_token_ms=5,
            tokens=3,
            token_interval_ms=1,
            server_timings="groq",
            drift=DRIFT,
            truth_log=tmp_path / "truth.jsonl",
        ) as srv,
        httpx.Client(timeout=30) as client,
    ):
        seen = [_ask(client, srv.base_url, t) for t in times]
        builds = [
            json.loads(
                client.get(
                    srv.base_url.removesuffix("/v1") + "/props",
                    headers={"X-Labkit-Sim-Time": str(t)},
                ).content
            )["build_info"]
            for t in times[::2]
        ]
        srv.stop()
        log = read_truth_log(srv.log_path)
    assert [s["system_fingerprint"] for s in seen] == ["fp_old", "fp_old", "fp_new"]
    assert builds == ["b100", "b200"]
    queues = [s["x_groq"]["usage"]["queue_time"] for s in seen]
    assert queues[1] == pytest.approx(0.3, abs=0.01)  # the bump, in the provider's own field
    assert queues[0] == pytest.approx(0.0, abs=0.01)
    requests = sorted(log.requests, key=lambda r: r.sim_time or 0)
    assert [r.sim_time for r in requests] == times
    assert [len(r.drift or []) for r in requests] == [0, 1, 4]
    assert requests[1].queue_ms == pytest.approx(300, abs=1)
    assert requests[2].frontend_ms == 40
    first, doubled = requests[0].prefill_ms, requests[2].prefill_ms
    assert first is not None and doubled == pytest.approx(2 * first, abs=0.5)
