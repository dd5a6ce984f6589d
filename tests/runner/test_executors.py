"""The executor seam: typed level jobs and worker messages, and every paced experiment on
worker processes (trace and conversation here; load and sweep in test_load / test_sweep)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pydantic
import pytest

from labkit.config import parse_config
from labkit.experiments import PacedExperiment, PlannedRequest, experiment_class
from labkit.experiments.conversation import ConversationPass, ConversationSession
from labkit.experiments.load import LoadLevelPlan, LoadSettings, LoadState
from labkit.experiments.trace import TracePass, TraceState
from labkit.providers import provider_class
from labkit.providers.base import ChatRequest
from labkit.records import RequestRecord
from labkit.runner import RunOptions, prepare_run
from labkit.runner.executor import InProcessExecutor
from labkit.runner.jobs import JobMessage, LevelJob, Ready, Recorded, Start, decode, encode
from labkit.runner.run import ProviderDied, RunResult
from labkit.runner.workers import WorkerProcessExecutor
from tests.support.prefix_cache_server import PrefixCacheServer

KEY_ENV = "LABKIT_EXECUTOR_TEST_KEY"


def _job(settings: dict[str, Any], level: Any) -> LevelJob:
    provider = provider_class("openai_compatible").settings_model.model_validate(
        {
            "id": "p",
            "kind": "openai_compatible",
            "model": "m",
            "base_url": "http://x/v1",
            "api_key_env": KEY_ENV,
        }
    )
    exp_cls = experiment_class(settings["kind"])
    experiment = exp_cls(exp_cls.settings_model.model_validate(settings), 2)
    assert isinstance(experiment, PacedExperiment)
    return LevelJob(
        provider=provider,
        pool_size=4,
        experiment=experiment.settings,
        experiment_index=experiment.index,
        state=experiment.shard_state(),
        level=level,
        run_id="run-1",
        store_text=False,
    )


@pytest.mark.unit
def test_a_level_job_crosses_as_one_line_and_comes_back_typed() -> None:
    level = LoadLevelPlan(title="concurrency 4", mode="concurrency", target=4, level_run="ab")
    job = _job({"kind": "load", "concurrency": [4], "requests": 8}, level).for_worker(1, 2)
    line = encode(JobMessage(job=job))
    assert "\n" not in line and KEY_ENV in line
    message = decode(line)
    assert isinstance(message, JobMessage)
    back = message.job
    assert back == job
    assert isinstance(back.state, LoadState) and isinstance(back.level, LoadLevelPlan)
    assert (back.worker, back.workers, back.experiment_index, back.pool_size) == (1, 2, 2, 4)
    assert back.provider.api_key_env == KEY_ENV


@pytest.mark.unit
def test_each_experiment_reads_back_its_own_state_and_level(tmp_path: Path) -> None:
    session = ConversationSession(
        cache="on",
        index=1,
        nonce="n",
        run="r",
        start_turn=1,
        history=[{"role": "user", "content": "hi"}],
    )
    conversation = ConversationPass(title="cache on", cache="on", sessions=[session])
    job = _job({"kind": "conversation"}, conversation)
    back = LevelJob.model_validate_json(job.model_dump_json())
    assert back.level == conversation and back.level.sessions[0].history == session.history
    trace = TracePass(title="the replay", run="000123")
    trace_job = _job({"kind": "trace", "path": str(_trace_file(tmp_path))}, trace)
    back_trace = LevelJob.model_validate_json(trace_job.model_dump_json())
    assert isinstance(back_trace.state, TraceState) and back_trace.level == trace


@pytest.mark.unit
def test_worker_messages_are_one_tagged_union() -> None:
    assert isinstance(decode(encode(Ready())), Ready)
    assert decode(encode(Start(t0_ns=5))) == Start(t0_ns=5)
    record = RequestRecord.model_validate(
        {
            "run_id": "r",
            "record_id": "x",
            "experiment": "load",
            "provider": "p",
            "provider_kind": "fake",
            "model": "m",
            "prompt_id": "p",
            "prompt_chars": 1,
            "prompt_bytes": 1,
            "started_at": "2026-01-02T00:00:00Z",
        }
    )
    recorded = decode(encode(Recorded(record=record)))
    assert isinstance(recorded, Recorded) and recorded.record == record
    with pytest.raises(pydantic.ValidationError):
        decode(json.dumps({"ready": True}))  # the old untyped ready line is no message
    with pytest.raises(pydantic.ValidationError):
        decode(json.dumps({"type": "start"}))


def _trace_file(folder: Path) -> Path:
    """Six requests of 200 prompt tokens, each sharing block 0 with the others."""
    rows = [
        {"timestamp": t, "input_length": 200, "output_length": 3, "hash_ids": [0, i + 1]}
        for i, t in enumerate([0, 400, 400, 1000, 1600, 2000, 9000])
    ]
    path = folder / "t.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    return path


def _in_two_workers(config: Any, tmp_path: Path) -> tuple[RunResult, PrefixCacheServer]:
    async def go(server: PrefixCacheServer) -> RunResult:
        runner = prepare_run(config(server.base_url), RunOptions(out_dir=tmp_path))
        runner.executor = WorkerProcessExecutor(
            run_id=runner.folder.run_id,
            store_text=runner.config.store_text,
            run_dir=runner.folder.path,
            processes=2,
        )
        return await runner.run()

    async def main() -> tuple[RunResult, PrefixCacheServer]:
        async with PrefixCacheServer() as server:
            return await go(server), server

    return asyncio.run(main())


@pytest.mark.integration
def test_a_trace_replays_over_two_worker_processes(tmp_path: Path) -> None:
    trace = _trace_file(tmp_path)

    def config(base_url: str) -> Any:
        return parse_config(
            {
                "name": "trace",
                "providers": [{"id": "l", "kind": "llamacpp", "base_url": base_url}],
                "experiments": [
                    {
                        "kind": "trace",
                        "path": str(trace),
                        "block_tokens": 100,
                        "speedup": 2.0,
                        "max_requests": 6,
                        "warmup": 1,
                    }
                ],
            }
        )

    result, _ = _in_two_workers(config, tmp_path / "out")
    records = sorted((r for r in result.records if not r.warmup), key=lambda r: r.trial)
    assert [r.plan_key for r in records] == [f"trace/{i}" for i in range(6)]
    assert all(r.error is None for r in records)
    # The prompt sizing the runner learnt (its calibration and the chat template's tokens,
    # from its warm-up) reached both workers: prompts of the stated length.
    assert all(r.usage.input_tokens == 200 for r in records), [r.usage for r in records]
    assert sum(r.warmup for r in result.records) == 1 + 2  # each worker warmed up too
    assert result.lab.answers[0].status == "ok"
    assert len(result.folder.records_path.read_text().splitlines()) == len(result.records)


@pytest.mark.integration
def test_conversations_run_over_two_worker_processes(tmp_path: Path) -> None:
    def config(base_url: str) -> Any:
        return parse_config(
            {
                "name": "conv",
                "store_text": False,
                "providers": [{"id": "l", "kind": "llamacpp", "base_url": base_url}],
                "experiments": [
                    {
                        "kind": "conversation",
                        "sessions": 3,
                        "turns": 3,
                        "concurrency": 2,
                        "warmup": 0,
                        "user_tokens": 20,
                        "params": {"max_tokens": 5},
                    }
                ],
            }
        )

    result, server = _in_two_workers(config, tmp_path)
    records = [r for r in result.records if not r.warmup]
    assert len(records) == 2 * 3 * 3 and all(r.error is None for r in records)
    assert {r.plan_key for r in records} == {
        f"conversation/{c}/s{s}/t{t}" for c in ("on", "off") for s in range(3) for t in range(3)
    }
    # Each worker handed a turn's answer to the next turn (PlannedRequest.on_record), and
    # store_text: false still held on disk.
    assert all(r.output_text is None for r in records)
    for body in server.bodies:
        for message in body["messages"]:
            if message["role"] == "assistant":
                assert message["content"] in server.answers
    answer = result.lab.answers[0]
    assert answer.status == "ok", answer.answer


class _Steps(PacedExperiment[LoadState, LoadLevelPlan]):
    """Three requests one after another: enough to see where a level stops."""

    kind = "steps"

    def plan(self, provider: Any) -> list[Any]:
        return []

    def analyze(self, provider_id: str, model: str, records: list[Any]) -> Any:
        raise NotImplementedError

    async def level_plans(self, provider: Any, context: Any) -> Any:
        yield LoadLevelPlan(title="c1", mode="concurrency", target=1, level_run="r")

    def shard_state(self) -> LoadState:
        return LoadState()

    def restore(self, state: LoadState) -> None:
        pass

    async def run_share(
        self, provider: Any, level: LoadLevelPlan, share: Any, t0_ns: int, send: Any
    ) -> None:
        for i in range(3):
            request = ChatRequest([{"role": "user", "content": "hi"}], {}, "p")
            await send(PlannedRequest(key=f"steps/{i}", request=request, trial=i), 0.0)


class _Sink:
    """A level's sink whose managed server dies with the first failed request."""

    def __init__(self) -> None:
        self.kept: list[Any] = []
        self.dead = False

    def keep(self, record: Any) -> None:
        self.kept.append(record)

    def message(self, text: str) -> None:
        pass

    def server_died(self) -> bool:
        return self.dead

    def check_server(self) -> None:
        self.dead = True
        raise ProviderDied("the server exited")


class _Failing:
    """A measurer whose every request fails."""

    def __init__(self) -> None:
        self.sent: list[str] = []

    async def measure(self, provider: Any, experiment: str, planned: Any, queue_ms: float) -> Any:
        self.sent.append(planned.key)
        return SimpleNamespace(error="connection refused", key=planned.key)


@pytest.mark.unit
def test_a_level_in_the_runners_process_stops_when_its_server_dies() -> None:
    measurer, sink = _Failing(), _Sink()
    executor = InProcessExecutor(measurer)  # type: ignore[arg-type]
    experiment = _Steps(LoadSettings(concurrency=[1]))
    level = LoadLevelPlan(title="c1", mode="concurrency", target=1, level_run="r")
    with pytest.raises(ProviderDied):
        asyncio.run(executor.run_level(experiment, None, level, sink))  # type: ignore[arg-type]
    assert measurer.sent == ["steps/0"] and len(sink.kept) == 1  # nothing sent after it died


@pytest.mark.unit
def test_the_levels_a_worker_process_died_in_are_read_and_said_as_such(tmp_path: Path) -> None:
    """`WORKER_LEVEL_LOG.partial_levels`: the latest line of a level decides (a resumed rerun went
    whole); the answer names what died, a worker process here and a Ray node there."""
    from labkit.experiments.load import LoadExperiment
    from labkit.experiments.session import SessionPlan
    from labkit.runner.levellog import level_label
    from labkit.runner.workers import WORKER_LEVEL_LOG, WORKER_LEVELS_FILE, WorkerLevel
    from tests.support.records import make_record

    def line(level: str, died: dict[int, int]) -> str:
        return WorkerLevel(
            experiment="load", provider="p", level=level, processes=2, died=died
        ).model_dump_json()

    (tmp_path / WORKER_LEVELS_FILE).write_text(
        "\n".join([line("c2", {1: -9}), line("c4", {0: 2}), line("c2", {}), '{"exp'])
    )
    # A level is named as its records are tagged, by its plan, even with no record of it.
    plan = LoadLevelPlan(
        index=3, title="concurrency 4", mode="concurrency", target=4, level_run="r"
    )
    assert level_label(plan) == "c4"
    assert level_label(SessionPlan(index=2, title="s", sessions=[])) == "2"
    partial = WORKER_LEVEL_LOG.partial_levels(tmp_path, "load")
    assert partial == {("p", "c4"): "a worker process"}
    assert WORKER_LEVEL_LOG.partial_levels(tmp_path, "other") == {}
    # A resume that found nothing missing settles it, on a line of its own after the cut one.
    WORKER_LEVEL_LOG.settle(tmp_path, "load", "p", "c4")
    assert WORKER_LEVEL_LOG.partial_levels(tmp_path, "load") == {}
    assert WorkerLevel.model_validate_json(line("c4", {0: -9})).died == {0: -9}

    records = [
        make_record(provider="p", experiment="load", tags={"level": level})
        for level in ("c4", "c8")
        for _ in range(6)
    ]
    exp = LoadExperiment(LoadSettings(concurrency=[4, 8], requests=8))
    exp.partial_levels = {("p", "c4"): "a worker process", ("p", "c8"): "a Ray node"}
    answer = exp.analyze("p", "m", records)
    assert answer.status == "partial"
    assert "Partial: a worker process died mid-level in concurrency 4 (" in answer.answer
    assert "Partial: a Ray node died mid-level in concurrency 8 (" in answer.answer


@pytest.mark.unit
def test_an_experiment_that_names_no_level_is_partial_where_its_process_died() -> None:
    """An experiment whose answer does not name its levels (a trace replay, a conversation,
    anything the runner read as partial for this provider) is said partial for the run,
    once per cause; an answer already failed stays failed; another provider's is not."""
    from labkit.experiments.single import SingleExperiment, SingleSettings
    from tests.support.records import make_record

    records = [make_record(provider="p", experiment="single") for _ in range(4)]
    exp = SingleExperiment(SingleSettings(prompts=["hi"]))
    whole = exp.judged("p", "m", records)
    assert whole.status == "ok"
    exp.partial_levels = {("p", "0"): "a worker process", ("q", "0"): "a Ray node"}
    answer = exp.judged("p", "m", records)
    assert answer.status == "partial"
    assert answer.answer == (
        f"{whole.answer} Partial: a worker process died mid-run (its requests in flight "
        "lost, its share of the rest never sent); labkit run --resume measures what is missing."
    )
    assert exp.judged("p", "m", []).status == "failed"
    assert exp.judged("q", "m", records).answer.endswith(
        "Partial: a Ray node died mid-run (its requests in flight lost, its share of the rest "
        "never sent); labkit run --resume measures what is missing."
    )


@pytest.mark.unit
def test_a_resumed_run_runs_a_level_a_process_died_in_again_even_when_its_count_is_full(
    tmp_path: Path,
) -> None:
    """A process killed after its last record left every record, yet the level's line says
    partial: the answer says ``--resume`` runs it again, so the resume does (load, trace)."""
    from labkit.experiments.load import LoadExperiment
    from labkit.experiments.trace import TraceExperiment, TraceSettings
    from tests.support.records import make_record

    class Context:
        def __init__(self, previous: list[RequestRecord]) -> None:
            self._previous, self.said = previous, []

        def previous(self) -> list[RequestRecord]:
            return self._previous

        def expect(self, requests: int) -> None: ...

        def message(self, text: str) -> None:
            self.said.append(text)

    async def titles(exp: Any, context: Context) -> list[str]:
        return [plan.title async for plan in exp.level_plans(SimpleNamespace(id="p"), context)]

    tags = {"level": "c4", "level_run": "a"}
    done = [make_record(provider="p", experiment="load", tags=tags) for _ in range(8)]
    load = LoadExperiment(LoadSettings(concurrency=[4], requests=8, workers=1))
    assert asyncio.run(titles(load, Context(done))) == []
    load.partial_levels = {("p", "c4"): "a worker process"}
    assert asyncio.run(titles(load, Context(done))) == ["concurrency 4"]

    trace = TraceExperiment(TraceSettings(path=_trace_file(tmp_path), max_requests=6))
    replayed = [make_record(provider="p", experiment="trace", tags={"level": "trace"})]
    assert asyncio.run(titles(trace, Context(replayed))) == []
    trace.partial_levels = {("p", "trace"): "a Ray node"}
    assert asyncio.run(titles(trace, Context(replayed))) == ["the replay"]
