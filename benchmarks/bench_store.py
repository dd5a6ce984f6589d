"""Benchmark: `labkit store import` of one large run into DuckDB and into PostgreSQL (not a
test; run by hand).

    .venv/bin/python benchmarks/bench_store.py [--records 1000000] [--keep DIR]

Builds a run folder of realistic records (bench_report's: several providers, ~2% errors,
64 event offsets each; reused with --keep DIR when it exists), then loads it into a new
DuckDB file and into a throwaway PostgreSQL server (tests/support/postgres.py), each in a
fresh process, and prints records per second and peak RSS for the first load and for a
second load of the same run (which adds nothing), with the host's load average.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import bench_report  # this folder is on sys.path when run as a script

ROOT = Path(__file__).resolve().parents[1]


def measure(url: str, run_dir: Path) -> None:
    """In this process: two loads of `run_dir` into `url`; prints one JSON line."""
    from labkit.store import open_store

    store = open_store(url)
    out: dict[str, float] = {}
    for name in ("first", "again"):
        start = time.perf_counter()
        result = store.load_run(run_dir)
        out[f"{name}_s"] = time.perf_counter() - start
        out[f"{name}_added"] = result.added
    store.close()
    out["peak_rss_mib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(json.dumps(out))


def _child(url: str, run_dir: Path) -> dict[str, float]:
    done = subprocess.run(
        [sys.executable, __file__, "--measure", url, str(run_dir)],
        capture_output=True,
        text=True,
        check=True,
    )
    result: dict[str, float] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def main() -> int:
    """Build (or reuse) the run, load it into both stores, print the figures."""
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--records", type=int, default=1_000_000)
    ap.add_argument("--keep", type=Path, help="build the run here and keep it")
    ap.add_argument("--measure", nargs=2, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.measure:
        measure(args.measure[0], Path(args.measure[1]))
        return 0
    scratch = Path(tempfile.mkdtemp(prefix="bench-store-"))
    run_dir = args.keep or scratch / "run"
    try:
        if not (run_dir / "records.jsonl").is_file():
            bench_report.build(run_dir, args.records)
        n = sum(1 for _ in (run_dir / "records.jsonl").open("rb"))
        size = (run_dir / "records.jsonl").stat().st_size / 2**20
        print(f"{n} records ({size:.0f} MiB); load average {os.getloadavg()[0]:.2f}")
        sys.path.insert(0, str(ROOT))
        from tests.support.postgres import PostgresServer

        server = PostgresServer()
        try:
            for name, url in (
                ("duckdb", str(scratch / "store.duckdb")),
                ("postgres", server.create_database()),
            ):
                r = _child(url, run_dir)
                print(
                    f"{name:9} first load {r['first_s']:6.1f} s ({n / r['first_s']:9.0f} "
                    f"records/s, {r['first_added']:.0f} added); again {r['again_s']:6.1f} s "
                    f"({r['again_added']:.0f} added); peak RSS {r['peak_rss_mib']:.0f} MiB"
                )
        finally:
            server.destroy()
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
