"""How busy the host's CPUs were during a run, and whose work it was (`Manifest.host_cpu`):
read from /proc/stat and labkit's own CPU time, the difference the other processes'."""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path

import pytest

from labkit.config import parse_config
from labkit.runner import RunOptions, prepare_run, run_lab
from labkit.runner.hostcpu import CPUReading, host_cpu_between, read_cpu

pytestmark = pytest.mark.unit

STAT = """cpu  1000 100 300 5000 50 10 40 25 0 0
cpu0 500 50 150 2500 25 5 20 12 0 0
cpu1 500 50 150 2500 25 5 20 13 0 0
intr 12345
"""


def test_a_reading_sums_every_cpus_busy_time_and_counts_the_cpus(tmp_path: Path) -> None:
    stat = tmp_path / "stat"
    stat.write_text(STAT)
    reading = read_cpu(stat)
    assert reading is not None and reading.cpus == 2
    tick = os.sysconf("SC_CLK_TCK")  # /proc/stat counts in these ticks
    assert reading.busy_s == pytest.approx((1000 + 100 + 300 + 10 + 40) / tick)  # idle left out
    assert reading.steal_s == pytest.approx(25 / tick)
    stat.write_text("not a stat file")
    assert read_cpu(stat) is None
    assert read_cpu(tmp_path / "absent") is None


def test_the_others_share_is_the_busy_time_less_labkits() -> None:
    start = CPUReading(mono_s=10.0, busy_s=100.0, steal_s=1.0, own_s=5.0, cpus=2)
    end = CPUReading(mono_s=20.0, busy_s=118.0, steal_s=1.5, own_s=11.0, cpus=2)
    host = host_cpu_between(start, end)
    assert (host.wall_s, host.cpus) == (10.0, 2)
    assert (host.busy_cpu_s, host.labkit_cpu_s, host.others_cpu_s) == (18.0, 6.0, 12.0)
    assert host.steal_cpu_s == 0.5
    # labkit's children are counted when they end, so its share may exceed a reading's busy
    # time; the others' share is then 0, never below.
    quiet = CPUReading(mono_s=20.0, busy_s=101.0, steal_s=1.0, own_s=8.0, cpus=2)
    assert host_cpu_between(start, quiet).others_cpu_s == 0.0


def test_a_finished_run_records_the_hosts_cpu_in_its_manifest(tmp_path: Path) -> None:
    config = parse_config(
        {
            "name": "cpu",
            "providers": [{"id": "f", "kind": "fake", "model": "m"}],
            "experiments": [{"kind": "single", "prompts": ["hi"], "repeats": 1, "warmup": 0}],
        }
    )
    result = asyncio.run(run_lab(prepare_run(config, RunOptions(out_dir=tmp_path))))
    manifest = json.loads((result.folder.path / "manifest.json").read_text(encoding="utf-8"))
    host = manifest["host_cpu"]
    assert set(host) == {
        "wall_s",
        "cpus",
        "busy_cpu_s",
        "labkit_cpu_s",
        "others_cpu_s",
        "steal_cpu_s",
    }
    assert host["cpus"] >= 1 and host["wall_s"] > 0
    assert host["others_cpu_s"] == pytest.approx(
        max(0.0, host["busy_cpu_s"] - host["labkit_cpu_s"]), abs=0.02
    )
