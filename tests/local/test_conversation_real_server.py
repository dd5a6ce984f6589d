"""`conversation` against the managed llama-server and the bundled model (no mocks): with
`cache_prompt` on, the cached tokens grow with the turns and TTFT grows slower than the
history; with it off, every turn prefills the whole history and the difference shows."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from labkit.config import parse_config
from labkit.figures import ConversationFigures
from labkit.local import ensure_setup
from labkit.runner import RunOptions, prepare_run

pytestmark = pytest.mark.e2e


def test_prefix_cache_keeps_ttft_from_growing_with_the_history(tmp_path: Path) -> None:
    ensure_setup()
    config = parse_config(
        {
            "name": "conversation-e2e",
            "providers": [
                {"id": "local", "kind": "llamacpp", "ctx_size": 1024, "slots": 2, "threads": 1}
            ],
            "experiments": [
                {
                    "kind": "conversation",
                    "sessions": 2,
                    "turns": 4,
                    "concurrency": 2,
                    "user_tokens": 64,
                    "cache": ["on", "off"],
                    "warmup": 1,
                    "params": {"temperature": 0, "max_tokens": 8},
                }
            ],
        }
    )
    result = asyncio.run(prepare_run(config, RunOptions(out_dir=tmp_path)).run())
    answer = result.lab.answers[0]
    print(answer.answer)
    figures = answer.figures
    assert isinstance(figures, ConversationFigures) and answer.status == "ok", answer.answer
    for row in figures.turns:
        print(
            f"cache {row.cache} turn {row.turn + 1}: input {row.input_tokens_p50:.0f} "
            f"cached {row.cached_tokens_p50:.0f} reuse {row.reuse_p50:.0%} "
            f"TTFT {row.ttft_ms_p50:.0f} ms, server prefill {row.prefill_ms_p50:.0f} ms"
        )
    on = [t for t in figures.turns if t.cache == "on"]
    off = [t for t in figures.turns if t.cache == "off"]
    assert len(on) == len(off) == 4 and all(t.ok == 2 for t in on + off)
    cached_on = [t.cached_tokens_p50 or 0 for t in on]
    assert cached_on == sorted(cached_on) and cached_on[-1] > cached_on[1] > 0, cached_on
    assert on[-1].reuse_p50 is not None and on[-1].reuse_p50 > 0.5
    assert all((t.cached_tokens_p50 or 0) == 0 for t in off)
    v_on, v_off = figures.variants
    assert v_on.first_input_tokens and v_on.last_input_tokens and v_on.last_ttft_ms
    assert v_on.first_ttft_ms and v_off.last_ttft_ms
    # Timings on a real server vary with the host's load: the cache is asserted by its
    # counts above; that the server reports its prefill time per turn is asserted here.
    assert on[-1].prefill_ms_p50 is not None and off[-1].prefill_ms_p50 is not None
