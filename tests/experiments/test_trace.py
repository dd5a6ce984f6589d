"""`trace`: reading Mooncake JSONL and CSV traces, and replaying one on its absolute,
time-scaled schedule against a server with a simulated prefix cache on 127.0.0.1."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from labkit.config import parse_config
from labkit.errors import ConfigError
from labkit.experiments.trace import TraceExperiment, TraceSettings
from labkit.figures import TraceFigures
from labkit.report.kinds.load import load_rows
from labkit.runner import RunOptions, prepare_run
from labkit.runner.summary import load_tables
from labkit.workloads import TraceEntry, read_trace
from tests.support.prefix_cache_server import PrefixCacheServer

REPO = Path(__file__).resolve().parents[2]


def _mooncake(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    return path


@pytest.mark.unit
def test_both_formats_read_in_arrival_order(tmp_path: Path) -> None:
    jsonl = _mooncake(
        tmp_path / "t.jsonl",
        [
            {"timestamp": 3052, "input_length": 700, "output_length": 5, "hash_ids": [0, 2]},
            {"timestamp": 0, "input_length": 655, "output_length": 52, "hash_ids": [0, 1]},
        ],
    )
    assert read_trace(jsonl) == [
        TraceEntry(0.0, 655, 52, (0, 1)),
        TraceEntry(3052.0, 700, 5, (0, 2)),
    ]
    csv_path = tmp_path / "t.csv"
    csv_path.write_text("timestamp,input_tokens,output_tokens\n0,10,2\n1.5,20,3\n")
    assert read_trace(csv_path, "s") == [TraceEntry(0.0, 10, 2), TraceEntry(1500.0, 20, 3)]
    # The bundled trace reads.
    assert len(read_trace(REPO / "configs/traces/mini_mooncake.jsonl")) == 24


@pytest.mark.unit
@pytest.mark.parametrize(
    ("name", "text", "message"),
    [
        ("bad.jsonl", '{"timestamp": 0, "input_length": 5}\n', "bad.jsonl:1"),
        ("bad.jsonl", "\n{nope\n", "bad.jsonl:2: not JSON"),
        (
            "bad.jsonl",
            '{"timestamp": 0, "input_length": 5, "output_length": 1, "hash_ids": "x"}',
            "hash_ids",
        ),
        ("bad.csv", "time,in,out\n0,1,1\n", "header"),
        ("bad.csv", "timestamp,input_tokens,output_tokens\n-1,1,1\n", "bad.csv:2"),
        ("empty.jsonl", "\n", "no requests"),
    ],
)
def test_a_bad_trace_is_a_config_error_naming_the_line(
    tmp_path: Path, name: str, text: str, message: str
) -> None:
    path = tmp_path / name
    path.write_text(text)
    with pytest.raises(ConfigError, match=message):
        read_trace(path)
    with pytest.raises(ConfigError):
        read_trace(tmp_path / "missing.jsonl")


@pytest.mark.unit
def test_schedule_is_time_scaled_and_bounded_and_blocks_repeat_by_hash_id(tmp_path: Path) -> None:
    path = _mooncake(
        tmp_path / "t.jsonl",
        [
            {"timestamp": 1000, "input_length": 300, "output_length": 4, "hash_ids": [7, 8]},
            {"timestamp": 2000, "input_length": 250, "output_length": 4, "hash_ids": [7, 9]},
            {"timestamp": 5000, "input_length": 50, "output_length": 4},
            {"timestamp": 9000, "input_length": 50, "output_length": 4},
        ],
    )
    exp = TraceExperiment(TraceSettings(path=path, speedup=2.0, max_requests=3, block_tokens=128))
    assert exp.offsets_ns() == [0, 500_000_000, 2_000_000_000]
    assert exp.level().target == 1.0  # 2 gaps over 2 s
    first, second = (exp.request(i, "run").request for i in range(2))
    a, b = first.messages[0]["content"], second.messages[0]["content"]
    block_7 = a.split(" [run:000008] ")[0]
    assert b.startswith(block_7 + " [run:000009] ")  # the shared hash block, word for word
    # About the stated lengths, at load's default 1.3 tokens per word.
    assert abs(len(a.split()) * 1.3 - 300) < 20 and abs(len(b.split()) * 1.3 - 250) < 20
    assert first.params["max_tokens"] == 4
    assert exp.request(0, "other").request.messages[0]["content"] != a  # a pass of its own


@pytest.mark.integration
def test_a_replay_sends_on_the_traces_schedule_and_counts_cache_hits(tmp_path: Path) -> None:
    path = _mooncake(
        tmp_path / "t.jsonl",
        [
            {"timestamp": t, "input_length": 200, "output_length": 3, "hash_ids": [0, i + 1]}
            for i, t in enumerate([0, 400, 400, 1000, 1600, 2000, 9000])
        ],
    )

    async def go() -> Any:
        async with PrefixCacheServer() as server:
            config = parse_config(
                {
                    "name": "trace",
                    "providers": [{"id": "l", "kind": "llamacpp", "base_url": server.base_url}],
                    "experiments": [
                        {
                            "kind": "trace",
                            "path": str(path),
                            "block_tokens": 100,
                            "speedup": 2.0,
                            "max_requests": 6,
                            "warmup": 1,
                        }
                    ],
                }
            )
            return await prepare_run(config, RunOptions(out_dir=tmp_path / "out")).run(), server

    result, server = asyncio.run(go())
    records = sorted((r for r in result.records if not r.warmup), key=lambda r: r.trial)
    assert [r.plan_key for r in records] == [f"trace/{i}" for i in range(6)]  # bounded
    assert all(body["max_tokens"] == 3 for body in server.bodies[1:])
    # Prompts of the stated length as the provider counts them, its chat template included
    # (learned from the warm-up).
    assert all(r.usage.input_tokens == 200 for r in records), [r.usage for r in records]
    starts = [r.t_start_mono_ns for r in records]
    assert all(s is not None for s in starts)
    # Each request is sent on the replay's own clock: measured from the replay's start (the
    # first send less how late it went, its `queue_ms`), never before its due time. The
    # start is known to within the step from reading the clock to stamping the first send
    # (milliseconds on a loaded host): 10 ms of slack, far below a compressed gap (100s of
    # ms). How late is the machine's load, not behaviour: no upper bound.
    first_queue_ms = records[0].client.queue_ms or 0.0
    sent_ms = [
        (s - starts[0]) / 1e6 + first_queue_ms
        for s in starts
        if s is not None and starts[0] is not None
    ]
    for sent, due in zip(sent_ms, [0, 200, 200, 500, 800, 1000], strict=True):
        assert sent >= due - 10, sent_ms
    figures = result.lab.answers[0].figures
    assert isinstance(figures, TraceFigures) and figures.speedup == 2.0
    row = figures.replay
    assert row.ok == 6 and row.target == 5.0  # 5 gaps in 1 s of replay
    # Every request after the first finds block 0 (half its prompt) in the cache.
    assert row.cache is not None and row.cache.counted == 6
    assert row.cache.cached_share is not None and 0.3 < row.cache.cached_share < 0.6
    assert "median TTFT replaying t.jsonl at ×2" in result.lab.answers[0].answer
    # The run summary and the report's load table show the replay as a level.
    assert len(load_tables(result.lab)) == 1
    assert [rows for _, _, rows in load_rows(result.lab)] == [[row]]
