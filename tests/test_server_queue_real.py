"""TTFT attribution and the server's queue on the real llama-server (no mocks, no skips).

llama.cpp's `timings` have no queue field. On a managed server that labkit alone uses, with
no more requests in flight than its slots, the queue is 0 by construction; with more
requests than slots, the TTFT beyond the server's own prefill grows by the wait for the
slot, and the load answer says so.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from labkit.figures import AttributionKey
from labkit.local import ensure_setup
from labkit.records import LabResults, RequestRecord

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[1]

CONFIG = """
name: queue-real
providers:
  - {id: local, kind: llamacpp, ctx_size: 512, slots: 1}
experiments:
  - {kind: attribution, repeats: 2, paths: [wire]}
  - kind: load
    concurrency: [1, 3]
    requests: 6
    warmup: 1
    params: {temperature: 0}
    output_tokens: 48
"""


@pytest.fixture(scope="module", autouse=True)
def _local_setup() -> None:
    ensure_setup()


def test_queue_is_zero_when_idle_and_rises_past_the_slots(tmp_path: Path) -> None:
    cfg = tmp_path / "queue.yaml"
    cfg.write_text(CONFIG)
    result = subprocess.run(
        [sys.executable, "-m", "labkit", "run", str(cfg), "--out", str(tmp_path / "runs")],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "COLUMNS": "200"},
    )
    assert result.returncode == 0, result.stdout + result.stderr
    (run_dir,) = [p for p in (tmp_path / "runs").iterdir() if p.is_dir()]
    lab = LabResults.model_validate_json((run_dir / "lab.json").read_text())
    got = {a.experiment: a for a in lab.answers}

    attribution = got["attribution"]
    split = attribution.figures.ttft_split
    assert split is not None
    assert split.provider_queue_ms is not None and split.queue_source == "idle"
    assert split.provider_queue_ms.value == 0.0
    assert split.provider_prefill_ms is not None and (split.provider_prefill_ms.value or 0) > 0
    assert split.network_front_end_ms is not None and split.labkit_ms is not None
    # The first token leaves the server after its prefill, so TTFT less the server's queue
    # and prefill is positive. How that rest divides between labkit's own send and the
    # network is the clock's: a client preempted between its send() and the stamp after it
    # (two CPU hogs beside it) counts server time as its own, and the network's mean can
    # dip below zero (CI, 2026-12-07: -0.72 ms of two requests).
    assert (split.network_front_end_ms.value or 0) + (split.labkit_ms.value or 0) > 0
    assert split.not_derived == []
    rows = {r.key: r for r in attribution.figures.rows}
    assert rows[AttributionKey.PROVIDER_QUEUE].value_ms == 0.0
    assert "by construction" in attribution.answer, attribution.answer

    load = got["load"]
    c1, c3 = load.figures.levels
    assert c1.ttft_beyond_prefill_ms_p50 is not None and c3.ttft_beyond_prefill_ms_p50 is not None
    # Three requests on one slot: most wait for at least one other's whole decode, as the
    # server itself timed it (a slower host decodes slower and waits as much longer).
    lines = (run_dir / "records.jsonl").read_text().splitlines()
    records = [RequestRecord.from_json_line(line) for line in lines if line]
    decodes = [
        r.provider_timings.decode_ms
        for r in records
        if r.tags.get("level") == "c3" and not r.warmup and r.provider_timings.decode_ms
    ]
    assert len(decodes) == 6
    assert c3.ttft_beyond_prefill_ms_p50 >= min(decodes), (c3, decodes)
    assert "more per request" in load.answer and "derived" in load.answer, load.answer
