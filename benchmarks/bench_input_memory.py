"""Peak memory of the commands that read others' files: `import-results` of an AIPerf
profile export, `score` of it, `export-otel` of a run, `tokens --file` of a large file.

Generates the inputs from the real files in tests/scoring/peer_results (AIPerf's first
request repeated with new ids; the labkit run's first record repeated with new record ids),
runs each command in its own process and prints its peak resident memory (``ru_maxrss``
from ``wait4``) and wall time. `--labkit DIR` runs another copy of labkit's sources (a
``git archive`` of an older commit) with the same interpreter, for before/after figures.

Run: `.venv/bin/python benchmarks/bench_input_memory.py [--rows N] [--records N]
[--tokens-mb N] [--labkit DIR]`. Not a test.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

PEERS = Path(__file__).resolve().parents[1] / "tests/scoring/peer_results"


def _aiperf_file(folder: Path, rows: int) -> Path:
    first = json.loads((PEERS / "aiperf/profile_export.jsonl").read_text().splitlines()[0])
    path = folder / "profile_export.jsonl"
    start = first["metadata"]["request_start_ns"]
    with path.open("w") as f:
        for i in range(rows):
            first["metadata"]["x_request_id"] = str(uuid.UUID(int=i))
            first["metadata"]["request_start_ns"] = start + i * 1_000_000
            f.write(json.dumps(first, separators=(",", ":")) + "\n")
    return path


def _run_folder(folder: Path, records: int) -> Path:
    run = folder / "run"
    run.mkdir()
    source = PEERS / "labkit/run"
    first = json.loads((source / "records.jsonl").read_text().splitlines()[0])
    (run / "manifest.json").write_text((source / "manifest.json").read_text())
    with (run / "records.jsonl").open("w") as f:
        for i in range(records):
            first["record_id"] = f"r{i:08d}"
            first.pop("trace", None)
            f.write(json.dumps(first, separators=(",", ":")) + "\n")
    return run


def _text_file(folder: Path, megabytes: int) -> Path:
    path = folder / "big.txt"
    line = "The quick brown fox jumps over the lazy dog; tokens are pieces of text.\n"
    with path.open("w") as f:
        for _ in range(megabytes * 1024 * 1024 // len(line)):
            f.write(line)
    return path


def _measure(args: list[str], labkit: Path | None, cwd: Path) -> tuple[float, float, int]:
    """Peak RSS (MiB), seconds and exit status of `labkit ARGS` in a process of its own."""
    env = dict(os.environ)
    if labkit is not None:
        env["PYTHONPATH"] = str(labkit)
    code = "import sys; from labkit.cli.app import app; sys.argv[0] = 'labkit'; app()"
    started = time.perf_counter()
    proc = subprocess.Popen(
        [sys.executable, "-c", code, *args],
        env=env,
        cwd=cwd,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    _, status, usage = os.wait4(proc.pid, 0)
    seconds = time.perf_counter() - started
    return usage.ru_maxrss / 1024, seconds, os.waitstatus_to_exitcode(status)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=200_000, help="AIPerf requests")
    parser.add_argument("--records", type=int, default=50_000, help="labkit records")
    parser.add_argument("--tokens-mb", type=int, default=50, help="size of the tokens file")
    parser.add_argument("--labkit", type=Path, help="another labkit source tree to run")
    opts = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="labkit-bench-mem-") as tmp:
        folder = Path(tmp)
        aiperf = _aiperf_file(folder, opts.rows)
        run = _run_folder(folder, opts.records)
        text = _text_file(folder, opts.tokens_mb)
        truth = PEERS / "aiperf/truth.jsonl"
        aiperf_mib = aiperf.stat().st_size >> 20
        records_mib = (run / "records.jsonl").stat().st_size >> 20
        cases = [
            (
                f"import-results, AIPerf {opts.rows} rows ({aiperf_mib} MiB)",
                ["import-results", str(aiperf), "--out", str(folder / "imported")],
            ),
            (f"score, AIPerf {opts.rows} rows", ["score", str(truth), str(aiperf)]),
            (
                f"export-otel, {opts.records} records ({records_mib} MiB)",
                ["export-otel", str(run), "--file", str(folder / "spans.jsonl")],
            ),
            (
                f"tokens --file, {opts.tokens_mb} MB",
                ["tokens", "--file", str(text), "-t", "cl100k_base"],
            ),
        ]
        print(f"labkit sources: {opts.labkit or 'installed'}")
        for name, args in cases:
            rss, seconds, status = _measure(args, opts.labkit, folder)
            print(f"{name:<55} peak {rss:8.0f} MiB  {seconds:7.1f} s  exit {status}")


if __name__ == "__main__":
    main()
