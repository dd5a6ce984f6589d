"""The run's client-bound warnings on the terminal: one short line per flagged group, then one
line of advice for the run, chosen from what is true of the host."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from labkit.cli.app import _print_summary
from labkit.figures import RequestStats
from labkit.manifest import HostCPUManifest, HostInfo, Manifest, ProviderManifest
from labkit.records import LabResults
from labkit.runner import RunResult
from labkit.runner.results import RunFolder
from labkit.terminal import SafeConsole

pytestmark = pytest.mark.unit

REASON = "client-bound: stamps late p99 3.3 ms (limit 2.0), labkit waited for a CPU"


def _printed(tmp_path: Path, threads: int, others_cpu_s: float) -> list[str]:
    folder = RunFolder.create(tmp_path, "r")
    folder.write_manifest(
        Manifest(
            host=HostInfo(hostname="h", platform="Linux", python="3.11", cpu_count=2),
            providers={
                "local": ProviderManifest(
                    kind="k", model="m", status="ok", server={"backend": "cpu", "threads": threads}
                )
            },
            host_cpu=HostCPUManifest(
                wall_s=50.0,
                cpus=2,
                busy_cpu_s=others_cpu_s + 30.0,
                labkit_cpu_s=30.0,
                others_cpu_s=others_cpu_s,
            ),
        )
    )
    folder.release()
    groups = [
        RequestStats.model_construct(
            provider="local",
            experiment=experiment,
            client_path="wire",
            client_bound=REASON,
            client_bound_causes=["waited"],
        )
        for experiment in ("single", "determinism", "prefill_decode", "attribution")
    ]
    result = RunResult(folder, [], [], LabResults(run_id="r", requests=groups), "completed")
    text = io.StringIO()
    _print_summary(result, SafeConsole(file=text, width=400, no_color=True), answers=False)
    return text.getvalue().splitlines()


def test_each_flagged_group_is_one_line_and_the_run_gets_one_line_of_advice(
    tmp_path: Path,
) -> None:
    lines = _printed(tmp_path, threads=1, others_cpu_s=60.0)
    warnings = [line for line in lines if line.startswith("warning:")]
    assert warnings[1] == f"warning: local · determinism · {REASON}"
    assert len(warnings) == 4
    (advice,) = [line for line in lines if line.startswith("advice:")]
    assert "other processes on this host used 1.2 of its 2 CPUs on average" in advice
    assert "threads" not in advice  # never lower threads that are already 1
    assert len(lines) == 5


def test_a_server_that_takes_every_core_is_told_to_leave_labkit_one(tmp_path: Path) -> None:
    (advice,) = [
        line
        for line in _printed(tmp_path, threads=2, others_cpu_s=0.0)
        if line.startswith("advice:")
    ]
    assert "ran 2 threads on this host's 2 CPUs, leaving labkit no core" in advice
    assert "set its `threads:` to 1" in advice
