"""A big agent trace replayed by `labkit run` as a process: a thousand sessions, each fanning
out to 32 sub-agents, on the in-process fake provider. SIGTERM in the middle stops it as it
stops any run (exit 143, one line, the manifest `interrupted`, every record kept): reading the
trace, planning its sessions and their fan-outs never hold up the event loop."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

SESSIONS = 1000
FANOUT = 32


def _trace(path: Path) -> Path:
    with path.open("w") as f:
        for s in range(SESSIONS):
            row = {"session_id": f"s{s}", "input_length": 8, "output_length": 2}
            f.write(json.dumps({**row, "agent": "0"}) + "\n")
            f.write(json.dumps({**row, "agent": "0", "delay": 1}) + "\n")
            for k in range(FANOUT):
                sub = {**row, "agent": f"0.{k}", "parent_agent": "0", "joins_step": 1}
                f.write(json.dumps(sub) + "\n")
    return path


def test_sigterm_stops_a_big_trace_replay_with_its_records_kept(tmp_path: Path) -> None:
    trace = _trace(tmp_path / "trace.jsonl")
    config = tmp_path / "big.yaml"
    config.write_text(
        "name: big-trace\n"
        "providers: [{id: fake, kind: fake, "
        "schedule: {first_token_ms: 2, token_interval_ms: 1, tokens: 2}}]\n"
        f"experiments: [{{kind: session, trace: {trace}, concurrency: 4, warmup: 0}}]\n"
    )
    out = tmp_path / "out"
    proc = subprocess.Popen(
        [sys.executable, "-m", "labkit", "run", str(config), "--out", str(out), "--no-report"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 120
        records = out / "x"
        while not (records.exists() and len(records.read_text().splitlines()) >= 50):
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "no records came"
            time.sleep(0.1)
            runs = [p for p in out.iterdir() if p.is_dir()] if out.exists() else []
            records = runs[0] / "records.jsonl" if runs else records
        proc.send_signal(signal.SIGTERM)
        stdout, stderr = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 143, stderr
    assert "Traceback" not in stdout + stderr
    assert stderr.startswith("interrupted by SIGTERM: ") and stderr.count("\n") == 1, stderr
    manifest = json.loads((records.parent / "manifest.json").read_text())
    assert manifest["status"] == "interrupted"
    kept = records.read_text().splitlines()
    assert manifest["records"] == len(kept) >= 50
    assert len(kept) < SESSIONS * (2 + FANOUT)  # stopped in the middle
