"""`session`: agent tool loops against the fake server on 127.0.0.1 — the critical path adds
up to the measured session time, a failed step costs only that step, a cut session resumes
from its first unfinished step, and a recorded run replays with the same structure."""

from __future__ import annotations

import asyncio
import itertools
import json
import time
from pathlib import Path
from typing import Any

import pytest

from labkit.analysis.sessions import session_figures
from labkit.config import parse_config
from labkit.experiments.base import PlannedRequest
from labkit.experiments.session import SessionExperiment, SessionSettings, SessionTodo
from labkit.figures import SessionFigures
from labkit.measurement.recorder import StreamRecorder
from labkit.providers.fake import FakeSchedule
from labkit.providers.openai_compatible import OpenAICompatibleProvider, OpenAICompatibleSettings
from labkit.records import RequestRecord
from labkit.runner import RunOptions, prepare_run
from labkit.runner.executor import Measurer
from labkit.runner.run import RunResult, prepare_resume
from labkit.truth.process import TruthServer
from labkit.workloads.agent_traces import read_agent_trace, session_trace, write_agent_trace

pytestmark = pytest.mark.integration

TOOL_MS = 120.0
SCHEDULE = FakeSchedule(
    first_token_ms=40,
    token_interval_ms=5,
    tokens=8,
    tool_calls=2,
    queue_ms=30,
    server_timings="vllm",
)


def _provider(base_url: str, pid: str = "f") -> OpenAICompatibleProvider:
    settings = OpenAICompatibleSettings(
        id=pid, kind="openai_compatible", model="fake", base_url=base_url
    )
    return OpenAICompatibleProvider(settings, pool_size=8)


def _direct(fail_key: str | None = None) -> tuple[list[RequestRecord], dict[int, float]]:
    """Two sessions run by the experiment itself, each timed from outside."""

    async def go() -> tuple[list[RequestRecord], dict[int, float]]:
        with TruthServer.of(SCHEDULE) as server:
            good = _provider(server.base_url)
            bad = _provider("http://127.0.0.1:9", "f")  # nothing listens: a connection error
            exp = SessionExperiment(
                SessionSettings(
                    sessions=2,
                    tool_steps=2,
                    max_steps=5,
                    tool_latency={"ms": TOOL_MS},
                    params={"max_tokens": 8},
                )
            )
            await exp.prepare(good)
            measurer = Measurer(StreamRecorder(), StreamRecorder, run_id="t", store_text=True)
            records: list[RequestRecord] = []
            failed: set[str] = set()

            async def send(planned: PlannedRequest, queue_ms: float) -> None:
                provider = good
                if planned.key == fail_key and planned.key not in failed:
                    failed.add(planned.key)
                    provider = bad
                records.append(await measurer.measure(provider, exp.name, planned, queue_ms))

            walls: dict[int, float] = {}

            async def one(i: int) -> None:
                todo = SessionTodo(index=i, nonce=f"n{i}", run=f"r{i}")
                t0 = time.perf_counter_ns()
                await exp.run_session(todo, send)
                walls[i] = (time.perf_counter_ns() - t0) / 1e6

            await asyncio.gather(one(0), one(1))
            await good.aclose()
            await bad.aclose()
            return records, walls

    return asyncio.run(go())


def test_the_critical_path_adds_up_to_the_session_time_and_recovers_the_tools() -> None:
    records, walls = _direct()
    figures = session_figures(records)
    assert [r.session for r in figures.sessions] == [0, 1]
    for row in figures.sessions:
        path = row.critical
        print(row.session, walls[row.session], path)
        assert row.complete and row.steps == 3 and row.tool_calls == 2
        # The five terms add up to the session's time, which lies inside the time measured
        # from outside around it (how much of the outside time is set-up is the host's).
        assert path.total_ms == pytest.approx(row.duration_ms)
        assert 0 < row.duration_ms <= walls[row.session]
        # The scripted tools (2 x 120 ms) and the scripted queue (3 x 30 ms) come back.
        assert (
            2 * TOOL_MS <= path.tool_ms < 2 * TOOL_MS + 100
        )  # a sleep overshoots, never undershoots
        assert path.provider_queue_ms == pytest.approx(3 * 30)
        assert path.prefill_ms >= 3 * 40 and path.decode_ms > 0
        assert path.labkit_ms >= 0
    calls = [s for s in figures.steps if s.tool_calls]
    assert len(calls) == 4
    assert all(s.tool_call_args_ms and s.tool_call_first_ms for s in calls)
    assert all(s.tool_call_args_ms >= s.tool_call_first_ms for s in calls)  # type: ignore[operator]


def test_a_failed_step_costs_that_step_only() -> None:
    records, _ = _direct(fail_key="session/s0/0/k1")
    figures = session_figures(records)
    first = next(r for r in figures.sessions if r.session == 0)
    second = next(r for r in figures.sessions if r.session == 1)
    assert first.complete and first.failed_steps == 1 and first.steps == 4
    assert second.complete and second.failed_steps == 0 and second.steps == 3
    assert first.critical.tool_ms >= 2 * TOOL_MS


def _config(base_url: str, store_text: bool = True, **experiment: Any) -> Any:
    return parse_config(
        {
            "name": "agent",
            "store_text": store_text,
            "providers": [
                {"id": "f", "kind": "openai_compatible", "model": "fake", "base_url": base_url}
            ],
            "experiments": [
                {
                    "kind": "session",
                    "sessions": 3,
                    "concurrency": 2,
                    "tool_steps": 2,
                    "max_steps": 5,
                    "warmup": 0,
                    "tool_latency": {"distribution": "uniform", "ms": 20, "max_ms": 40},
                    "params": {"max_tokens": 8},
                    **experiment,
                }
            ],
        }
    )


def _run(tmp_path: Path, schedule: FakeSchedule = SCHEDULE, **experiment: Any) -> RunResult:
    async def go() -> RunResult:
        with TruthServer.of(schedule) as server:
            config = _config(server.base_url, **experiment)
            return await prepare_run(config, RunOptions(out_dir=tmp_path)).run()

    return asyncio.run(go())


def _stored(result: RunResult) -> list[RequestRecord]:
    path = result.folder.path / "records.jsonl"
    return [RequestRecord.from_json_line(line) for line in path.read_text().splitlines()]


def _figures(result: RunResult) -> SessionFigures:
    figures = result.lab.answers[0].figures
    assert isinstance(figures, SessionFigures), result.lab.answers[0].answer
    return figures


def test_subagents_fan_out_and_their_slowest_branch_is_on_the_critical_path(
    tmp_path: Path,
) -> None:
    result = _run(tmp_path, subagents=2, subagent_tool_steps=1)
    answer = result.lab.answers[0]
    print(answer.answer)
    figures = _figures(result)
    assert answer.status == "ok" and len(figures.sessions) == 3
    for row in figures.sessions:
        assert row.agents == 3 and row.complete
        assert row.critical.total_ms == pytest.approx(row.duration_ms)
    assert "completed 3 of 3 sessions" in answer.answer


def test_a_cut_session_resumes_from_its_first_unfinished_step(tmp_path: Path) -> None:
    first = _run(tmp_path)
    path = first.folder.path / "records.jsonl"
    lines = path.read_text().splitlines()
    cut = {"session/s1/0/k1", "session/s1/0/k2"}
    before = {
        json.loads(line)["plan_key"]: json.loads(line)["prompt_chars"]
        for line in lines
        if json.loads(line)["plan_key"] in cut
    }
    path.write_text(
        "\n".join(line for line in lines if json.loads(line)["plan_key"] not in cut) + "\n"
    )

    async def resume() -> RunResult:
        with TruthServer.of(SCHEDULE) as server:
            runner = prepare_resume(first.folder.path)
            runner.config.providers[0].base_url = server.base_url
            return await runner.run()

    second = asyncio.run(resume())
    records = [r for r in _stored(second) if not r.warmup]
    keys = [r.plan_key for r in records]
    assert len(keys) == len(set(keys)) == 9  # only the cut steps were sent again
    again = {r.plan_key: r.prompt_chars for r in records if r.plan_key in cut}
    assert again == before  # the same history, rebuilt from the recorded turns
    rows = _figures(second).sessions
    assert all(row.complete for row in rows)
    assert [row.resumed for row in rows] == [False, True, False]


def _died_after_its_last_record(tmp_path: Path) -> tuple[Path, list[RequestRecord], Any]:
    """A session run whose worker process died after its share's last record: every record,
    a level line saying partial, the provider unfinished in the manifest."""
    from labkit.experiments.session import SessionPlan
    from labkit.runner.levellog import level_label
    from labkit.runner.workers import WORKER_LEVELS_FILE, WorkerLevel

    first = _run(tmp_path)
    folder = first.folder.path
    records = _stored(first)
    died = WorkerLevel(
        experiment=records[0].experiment,
        provider="f",
        level=level_label(SessionPlan(title="3 sessions", sessions=[])),
        processes=2,
        died={1: -9},
    )
    with (folder / WORKER_LEVELS_FILE).open("a", encoding="utf-8") as log:
        log.write(died.model_dump_json() + "\n")
    manifest = json.loads((folder / "manifest.json").read_text())
    manifest["status"] = "incomplete"
    manifest["providers"]["f"]["finished"] = False
    manifest["unfinished"] = {"f": "a worker process died mid-level (a partial level)"}
    (folder / "manifest.json").write_text(json.dumps(manifest))
    return folder, records, died


def _resume_said(folder: Path) -> tuple[str, RunResult, list[str]]:
    """The answer before a resume, the resume's result and what it said."""

    async def resume() -> tuple[str, RunResult, list[str]]:
        with TruthServer.of(SCHEDULE) as server:
            runner = prepare_resume(folder)
            runner.config.providers[0].base_url = server.base_url
            said: list[str] = []
            runner.on_message = said.append
            before = runner.analyze().answers[0]
            assert before.status == "partial", before.answer
            return before.answer, await runner.run(), said

    return asyncio.run(resume())


def test_a_resume_settles_a_level_a_worker_died_in_after_its_last_record(
    tmp_path: Path,
) -> None:
    """A worker process killed after its share's last record leaves every record and a
    level line saying partial: the answer says partial, and a resume, finding no session
    left to run, appends a settling line (`LevelRun.settled`), says so and answers whole."""
    from labkit.runner.workers import WORKER_LEVEL_LOG, WORKER_LEVELS_FILE, WorkerLevel

    folder, records, died = _died_after_its_last_record(tmp_path)
    before, second, said = _resume_said(folder)
    assert "Partial: a worker process died mid-run" in before
    assert "labkit run --resume measures what is missing." in before
    assert len(_stored(second)) == len(records)  # nothing was sent again
    assert any("every session already measured, skipped" in m for m in said)
    assert any(m.endswith("(every request of it has its record): it is whole") for m in said)
    answer = second.lab.answers[0]
    assert answer.status == "ok" and "Partial" not in answer.answer
    lines = (folder / WORKER_LEVELS_FILE).read_text().splitlines()
    last = WorkerLevel.model_validate_json(lines[-1])
    assert (last.settled, last.partial, last.processes, last.level) == (True, False, 0, died.level)
    assert WORKER_LEVEL_LOG.partial_levels(folder, records[0].experiment) == {}


def test_a_settling_line_that_cannot_be_written_costs_the_run_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The level log refusing the settling line (a full disk): the resume says so, keeps
    every record, completes, and the answer still says partial."""
    from labkit.runner.levellog import LevelLog

    folder, records, _ = _died_after_its_last_record(tmp_path)

    def refused(*_: Any) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(LevelLog, "settle", refused)
    _, second, said = _resume_said(folder)
    assert any("its level log could not say so (OSError: [Errno 28] No space" in m for m in said)
    assert second.status == "completed" and len(_stored(second)) == len(records)
    assert second.lab.answers[0].status == "partial"


def test_a_recorded_run_replays_with_the_same_structure(tmp_path: Path) -> None:
    first = _run(tmp_path / "a", subagents=2, subagent_tool_steps=1)
    trace = session_trace(_stored(first), block_tokens=16)
    trace_path = tmp_path / "agent_trace.jsonl"
    write_agent_trace(trace, trace_path)
    replay = _run(tmp_path / "b", trace=str(trace_path), trace_block_tokens=16)
    replayed = session_trace(_stored(replay), block_tokens=16)
    assert len(replayed.sessions) == len(trace.sessions) == 3

    def shape(t: Any) -> list[Any]:
        return [
            [(a.path, a.parent, a.joins_step, [s.output_tokens for s in a.steps]) for a in s.agents]
            for s in t.sessions
        ]

    assert shape(read_agent_trace(trace_path)) == shape(replayed) == shape(trace)
    assert _figures(replay).source == "agent_trace.jsonl"


def test_an_aiperf_mooncake_trace_replays(tmp_path: Path) -> None:
    example = Path(__file__).parents[2] / "labkit/examples/traces/agent_mooncake.jsonl"
    trace = read_agent_trace(example)
    result = _run(tmp_path, trace=str(example), trace_block_tokens=16, speedup=10.0)
    figures = _figures(result)
    assert len(figures.sessions) == len(trace.sessions)
    assert [r.steps for r in figures.sessions] == [
        sum(len(a.steps) for a in s.agents) for s in trace.sessions
    ]


def test_sessions_run_over_two_worker_processes(tmp_path: Path) -> None:
    from labkit.runner.workers import WorkerProcessExecutor

    async def go() -> RunResult:
        with TruthServer.of(SCHEDULE) as server:
            runner = prepare_run(
                _config(server.base_url, store_text=False), RunOptions(out_dir=tmp_path)
            )
            runner.executor = WorkerProcessExecutor(
                run_id=runner.folder.run_id,
                store_text=runner.config.store_text,
                run_dir=runner.folder.path,
                processes=2,
            )
            return await runner.run()

    result = asyncio.run(go())
    records = [r for r in result.records if not r.warmup]
    assert {r.plan_key for r in records} == {
        f"session/s{s}/0/k{k}" for s in range(3) for k in range(3)
    }
    assert len({r.tags["agent_t0_ns"] for r in records}) == 3  # each session in one worker
    assert all(r.output_text is None for r in records)  # store_text: false held on disk
    assert all(row.complete and row.tool_calls == 2 for row in _figures(result).sessions)


@pytest.mark.parametrize(("parallel", "least", "most"), [(True, 300, 400), (False, 400, 1000)])
def test_parallel_calls_wait_for_the_slowest_tool_sequential_ones_for_all(
    tmp_path: Path, parallel: bool, least: float, most: float
) -> None:
    schedule = SCHEDULE.model_copy(update={"tool_calls": 1, "parallel_tool_calls": 2})
    result = _run(
        tmp_path,
        schedule,
        sessions=1,
        tool_steps=1,
        parallel_tools=parallel,
        tool_latency={"script": [100, 300]},
    )
    (row,) = _figures(result).sessions
    assert row.complete and row.tool_calls == 2 and row.steps == 2
    assert least <= row.critical.tool_ms < most


def test_compaction_shortens_the_history_once_it_passes_the_limit(tmp_path: Path) -> None:
    schedule = SCHEDULE.model_copy(update={"tool_calls": 3})
    result = _run(
        tmp_path,
        schedule,
        sessions=1,
        tool_steps=3,
        tool_result_tokens=60,
        compact_at_tokens=120,
        summary_tokens=10,
    )
    steps = sorted(_figures(result).steps, key=lambda s: s.step)
    sizes = [s.input_tokens or 0 for s in steps]
    # The turn after the first prompt past 120 tokens starts from the summary.
    assert sizes[1] <= 120 < sizes[2]
    assert [s.compacted for s in steps] == [False, False, False, True]
    assert sizes[3] < sizes[2]


def test_a_rate_starts_sessions_on_schedule(tmp_path: Path) -> None:
    result = _run(tmp_path, rate=4.0, tool_latency={"ms": 0})
    starts = sorted(
        {int(r.tags["agent_t0_ns"]) for r in _stored(result) if r.tags.get("agent") == "0"}
    )
    gaps = [(b - a) / 1e6 for a, b in itertools.pairwise(starts)]
    assert len(starts) == 3 and all(g >= 240 for g in gaps), gaps


def test_resume_keeps_a_failed_turn_failed_and_resends_a_cut_one() -> None:
    """A provider's failure stays a failed turn (the resumed loop goes on to its retry); a
    turn cut by the kill or lost with its Ray node is no answer and is sent again."""
    from labkit.records import ErrorKind, RecordError
    from tests.support.records import make_record

    exp = SessionExperiment(SessionSettings(sessions=1))
    records = []
    steps = [
        (0, None),
        (1, ErrorKind.HTTP_STATUS),
        (2, None),
        (3, ErrorKind.LOST),
        (4, ErrorKind.CANCELLED),
    ]
    for step, error in steps:
        r = make_record(output_text="")
        r.plan_key = f"session/s0/0/k{step}"
        r.tags.update(session=0, agent="0", step=step, session_run="r", session_nonce="n")
        if error is not None:
            r.error = RecordError(kind=error, message="x")
        records.append(r)
    todo = exp.resume_point(0, records)
    assert todo is not None and (todo.run, todo.nonce) == ("r", "n")
    assert {k: m.failed for k, m in todo.memo.items()} == {
        "session/s0/0/k0": False,
        "session/s0/0/k1": True,
        "session/s0/0/k2": False,
    }
