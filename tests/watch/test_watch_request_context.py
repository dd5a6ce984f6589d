"""A run's `request_tags` and `request_headers` (a watch round's tags, nonce and simulated
time) reach every request the `Measurer` measures, in this process and, through the
`LevelJob`, in worker processes and Ray actors; an experiment's own tag wins."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from labkit.experiments import PlannedRequest, experiment_class
from labkit.experiments.load import LoadLevelPlan
from labkit.providers import provider_class
from labkit.providers.base import ChatRequest
from labkit.runner.executor import Measurer
from labkit.runner.jobs import JobMessage, LevelJob, decode, encode

pytestmark = pytest.mark.unit


class _Provider:
    id = "p"


_PROVIDER: Any = _Provider()


class _Capture:
    """A recorder that keeps each request's context instead of sending it."""

    def __init__(self) -> None:
        self.contexts: list[Any] = []

    async def record(self, provider: Any, request: Any, ctx: Any) -> Any:
        self.contexts.append(ctx)
        return ctx


def test_the_measurer_puts_the_runs_tags_and_headers_on_every_request() -> None:
    capture = _Capture()
    measurer = Measurer(
        capture,  # type: ignore[arg-type]
        lambda: capture,  # type: ignore[arg-type,return-value]
        run_id="r",
        store_text=False,
        request_tags={"watch_round": 3, "watch_nonce": "n1", "variant": "run's"},
        request_headers={"X-Labkit-Sim-Time": "1767571200"},
    )
    planned = PlannedRequest(
        key="single/p/0",
        request=ChatRequest([{"role": "user", "content": "hi"}]),
        tags={"variant": "the experiment's"},
    )
    ctx = asyncio.run(measurer.measure(_PROVIDER, "single", planned, 0.0))  # type: ignore[arg-type]
    assert ctx.tags == {"watch_round": 3, "watch_nonce": "n1", "variant": "the experiment's"}
    assert ctx.trace_headers["X-Labkit-Sim-Time"] == "1767571200"
    assert "traceparent" in ctx.trace_headers  # the trace context still goes with it
    assert planned.tags == {"variant": "the experiment's"}  # the plan is not changed
    bare = Measurer(capture, lambda: capture, run_id="r", store_text=False)  # type: ignore[arg-type]
    ctx = asyncio.run(bare.measure(_PROVIDER, "single", planned, 0.0))  # type: ignore[arg-type]
    assert ctx.tags is planned.tags and "X-Labkit-Sim-Time" not in ctx.trace_headers


def test_a_level_job_carries_the_runs_tags_and_headers_to_its_workers() -> None:
    provider = provider_class("openai_compatible").settings_model.model_validate(
        {"id": "p", "kind": "openai_compatible", "model": "m", "base_url": "http://x/v1"}
    )
    exp_cls = experiment_class("load")
    experiment = exp_cls(
        exp_cls.settings_model.model_validate({"kind": "load", "concurrency": [2]}), 0
    )
    job = LevelJob(
        provider=provider,
        pool_size=2,
        experiment=experiment.settings,
        experiment_index=0,
        state=experiment.shard_state(),  # type: ignore[attr-defined]
        level=LoadLevelPlan(title="c2", mode="concurrency", target=2, level_run="ab"),
        run_id="r",
        store_text=False,
        request_tags={"watch_round": 3},
        request_headers={"X-Labkit-Sim-Time": "1767571200"},
    )
    message = decode(encode(JobMessage(job=job)))
    assert isinstance(message, JobMessage)
    assert message.job.request_tags == {"watch_round": 3}
    assert message.job.request_headers == {"X-Labkit-Sim-Time": "1767571200"}
