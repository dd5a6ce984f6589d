"""Peak memory of reading a large truth log (`labkit.truth.log.read_truth_log`).

Writes a truth log of about SIZE_MB megabytes (requests as the lab's schedule serves them:
12 tokens, each with its 5 sampling candidates), then reads it in a fresh interpreter and
prints the file's size, the requests read and the reader's peak RSS (ru_maxrss) beside the
interpreter's own before reading. Usage: ``python benchmarks/bench_truthlog_memory.py
[SIZE_MB]`` (default 100).
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path

_READER = """
import resource, sys
from labkit.truth.log import read_truth_log
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
log = read_truth_log(sys.argv[1])
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(len(log.requests), before // 1024, peak // 1024)
"""


def _entry(i: int) -> dict[str, object]:
    t = 1_000_000_000 + i * 50_000_000
    events = [t + 10_000_000 + k * 4_000_000 for k in range(12)]
    return {
        "id": f"chatcmpl-{i:012d}",
        "client_request_id": None,
        "traceparent": None,
        "api": "chat",
        "stream": True,
        "model": "truth",
        "status": 200,
        "t_read_ns": t,
        "t_admit_ns": t + 2_000_000,
        "frontend_ms": 2.0,
        "t_start_ns": t + 2_000_000,
        "t_headers_ns": t + 2_100_000,
        "events_ns": events,
        "events_sent_ns": [e + 20_000 for e in events],
        "event_tokens": [1] * 12,
        "comments_ns": [],
        "t_end_ns": events[-1] + 4_000_000,
        "prompt_tokens": 120,
        "cached_tokens": 0,
        "output_tokens": 12,
        "end_token": True,
        "usage_output_tokens": 13,
        "capped": False,
        "finish_reason": "stop",
        "tool_calls": [],
        "temperature": 0.7,
        "seed": i,
        "steps": [
            {"token": f" w{k}", "candidates": [[f" w{k + c}", 0.5 / (c + 1)] for c in range(5)]}
            for k in range(12)
        ],
        "queue_ms": 0.0,
        "prefill_ms": 128.0,
        "decode_ms": 48.0,
        "reported": None,
    }


def write_log(path: Path, size_mb: float) -> int:
    """Write a truth log of about `size_mb` MB at `path`; the requests written."""
    anchor = {"truth_log": 1, "mono_ns": 0, "wall_ns": 1_700_000_000_000_000_000, "schedule": {}}
    limit = int(size_mb * 1e6)
    n = written = 0
    with path.open("w", encoding="utf-8") as f:
        f.write(json.dumps(anchor) + "\n")
        while written < limit:
            line = json.dumps(_entry(n)) + "\n"
            f.write(line)
            written += len(line)
            n += 1
    return n


def main() -> None:
    """Write the log, read it in a subprocess, print the figures."""
    size_mb = float(sys.argv[1]) if len(sys.argv) > 1 else 100.0
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "truth.jsonl"
        n = write_log(path, size_mb)
        out = subprocess.run(
            [sys.executable, "-c", _READER, str(path)], check=True, capture_output=True, text=True
        ).stdout.split()
        print(
            f"truth log {path.stat().st_size / 1e6:.0f} MB, {n} requests: read {out[0]}; "
            f"peak RSS {out[2]} MiB (interpreter before reading: {out[1]} MiB)"
        )


if __name__ == "__main__":
    main()
