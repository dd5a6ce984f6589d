"""How busy the host's CPUs were during a run, and whose work it was (`Manifest.host_cpu`):
read from /proc/stat and labkit's own CPU time, the difference the other processes'."""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path

import pytest

from labkit.config import parse_config
from labkit.manifest import HostCPUManifest
from labkit.runner import RunOptions, prepare_run, run_lab
from labkit.runner.hostcpu import CPUReading, host_cpu_between, process_cpu_s, read_cpu

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
        "sidecar_cpu_s",
    }
    assert host["cpus"] >= 1 and host["wall_s"] > 0
    assert host["sidecar_cpu_s"] == 0.0  # a small run starts no converter
    assert host["others_cpu_s"] == pytest.approx(
        max(0.0, host["busy_cpu_s"] - host["labkit_cpu_s"]), abs=0.02
    )


def test_the_sidecar_converters_cpu_is_counted_apart_from_labkits_own() -> None:
    """Converters reaped in the window are in labkit's children's CPU: taken out of its
    own. One running at the end is not yet in it: taken out of the others'."""
    start = CPUReading(10.0, 100.0, 1.0, 5.0, 2, sidecar_reaped_s=2.0, sidecar_running_s=0.5)
    # 4 s reaped since (the one running at the start ended: 1.5 s of it in the window),
    # and one running at the end that has used 1 s so far
    end = CPUReading(20.0, 118.0, 1.0, 15.0, 2, sidecar_reaped_s=6.0, sidecar_running_s=1.0)
    host = host_cpu_between(start, end)
    assert host.labkit_cpu_s == 6.0  # 10 s of own and children less the 4 s reaped
    assert host.sidecar_cpu_s == 4.5  # 4 + 1 − 0.5
    assert host.others_cpu_s == 7.5  # 18 busy − 6 − 4.5
    # a manifest written before the field reads without it
    old = {k: v for k, v in host.model_dump().items() if k != "sidecar_cpu_s"}
    assert HostCPUManifest.model_validate(old).sidecar_cpu_s is None


def test_a_running_processs_cpu_is_read_from_its_proc_stat(tmp_path: Path) -> None:
    tick = os.sysconf("SC_CLK_TCK")
    stat = tmp_path / "stat"
    # the name may hold spaces and parentheses; utime 150 and stime 50 ticks follow it
    fields = ["S", "1", "2", "3", "0", "-1", "4194560", "10", "0", "0", "0", "150", "50"]
    stat.write_text("4242 (python (x) y) " + " ".join(fields) + " 0 0 20 0 1 0\n")
    assert process_cpu_s(4242, stat) == pytest.approx(200 / tick)
    assert process_cpu_s(4242, tmp_path / "gone") is None
    mine = process_cpu_s(os.getpid())
    assert mine is not None and mine >= 0
