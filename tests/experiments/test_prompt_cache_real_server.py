"""`prompt_cache` on the real llama-server (no mocks, no skips): with one slot and no
host-memory prompt cache, a repeat sent at once is served from the slot's KV cache, and a
repeat sent after another prompt took the slot is not — counts from llama-server's own
`timings.cache_n`, never timings."""

from __future__ import annotations

from pathlib import Path

import pytest

from labkit.analysis.prompt_cache import cached_tokens_of
from labkit.figures.prompt_cache import PromptCacheFigures
from labkit.records import RequestRecord
from tests.support.lab_runs import run_lab

pytestmark = pytest.mark.e2e


CONFIG = """
name: prompt-cache-real
providers:
  - {id: local, kind: llamacpp, ctx_size: 512, slots: 1, cache_ram_mib: 0}
experiments:
  - {kind: prompt_cache, repeats: 2, warmup: 0, prefix_tokens: [96], gaps_s: [0.3],
     evict_after: [0, 1], concurrency: [2], params: {temperature: 0, max_tokens: 4}}
"""


def test_a_repeat_hits_the_slot_and_misses_once_another_prompt_took_it(tmp_path: Path) -> None:
    run_dir, lab = run_lab(tmp_path, CONFIG, "cache.yaml")
    (answer,) = lab.answers
    f = answer.figures
    assert isinstance(f, PromptCacheFigures) and answer.status == "ok", answer.answer
    assert f.server_slots == 1 and f.context_tokens == 512 and f.cached_reported
    rows = {(r.phase, r.label): r for r in f.rows}
    assert [(r.phase, r.repeats) for r in f.rows] == [
        ("length", 2),
        ("gap", 2),
        ("evict", 2),
        ("evict", 2),
        ("concurrency", 4),
    ]
    # reuse: every repeat sent straight after its prime found the prime's prompt in the slot
    assert rows["length", "96 tokens"].hits == 2
    assert rows["evict", "after 0 other prompts"].hits == 2
    assert rows["gap", "0.3 s idle"].hits == 2  # a slot keeps its prompt while idle
    assert rows["concurrency", "2 at once"].hits == 4
    # eviction: one other prompt took the only slot, and no host cache kept the first
    assert rows["evict", "after 1 other prompt"].hits == 0
    assert f.lifetime is not None and f.lifetime.hi_s is None  # no gap was long enough
    records = [
        RequestRecord.from_json_line(line)
        for line in (run_dir / "records.jsonl").read_text().splitlines()
        if line.strip()
    ]
    for r in records:
        cached, prompt = cached_tokens_of(r), r.usage.input_tokens
        assert r.error is None and cached is not None and prompt is not None
        if r.tags["role"] in ("prime", "filler"):  # a fresh nonce: at most the template's start
            assert cached < prompt / 2, (r.tags, cached, prompt)
        elif r.tags["phase"] != "evict" or r.tags["setting"] == 0:
            assert cached == prompt - 1  # all but the last token, llama.cpp's rule
