"""`trace` against the managed llama-server and the bundled model (no mocks): prompts come
out at the trace's stated lengths as the model's own tokenizer and chat template count
them, and requests that share a Mooncake hash block find it in the prompt cache."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from labkit.config import parse_config
from labkit.figures import TraceFigures
from labkit.local import ensure_setup
from labkit.runner import RunOptions, prepare_run

pytestmark = pytest.mark.e2e


def test_replayed_prompts_have_the_stated_lengths_and_share_their_blocks(tmp_path: Path) -> None:
    ensure_setup()
    trace = tmp_path / "trace.jsonl"
    rows = [
        {"timestamp": 250 * i, "input_length": n, "output_length": 4, "hash_ids": ids}
        for i, (n, ids) in enumerate(
            [(300, [0, 1, 2]), (280, [0, 1, 3]), (150, [0, 4]), (90, [5]), (310, [0, 1, 6])]
        )
    ]
    trace.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    config = parse_config(
        {
            "name": "trace-e2e",
            "providers": [
                {"id": "local", "kind": "llamacpp", "ctx_size": 1024, "slots": 1, "threads": 1}
            ],
            "experiments": [
                {"kind": "trace", "path": str(trace), "block_tokens": 100, "warmup": 1}
            ],
        }
    )
    result = asyncio.run(prepare_run(config, RunOptions(out_dir=tmp_path / "out")).run())
    answer = result.lab.answers[0]
    print(answer.answer)
    records = sorted((r for r in result.records if not r.warmup), key=lambda r: r.trial)
    for r in records:
        print(r.tags["target_input_tokens"], r.usage.input_tokens, r.usage.cached_input_tokens)
    assert len(records) == 5 and all(r.ok for r in records)
    for r, row in zip(records, rows, strict=True):
        assert r.usage.input_tokens is not None and r.usage.output_tokens == 4
        assert abs(r.usage.input_tokens - row["input_length"]) <= 0.02 * row["input_length"]
    # One slot: the second request finds the chat template head and blocks 0 and 1 (200
    # tokens) cached.
    cached = records[1].usage.cached_input_tokens
    assert cached is not None and 190 <= cached <= 250, cached
    assert isinstance(answer.figures, TraceFigures) and answer.figures.replay.cache is not None
