"""The runner has the columnar sidecar converted as a run records: by child processes
(never the measuring process), complete when the run ends, its report the report of the
records read whole; a converter that fails loses nothing and the reader converts instead.
Through the CLI in process, with the fake provider, and a part of a few KiB."""

from __future__ import annotations

import asyncio
import json
import logging
import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

from labkit.cli import app
from labkit.report import columnar
from labkit.report.columnar import SIDECAR_INDEX
from labkit.runner import sidecar as runner_sidecar
from labkit.runner.sidecar import SidecarWriter
from tests.report.test_columnar_load import _report_files

pytestmark = pytest.mark.unit

FAST = "{first_token_ms: 0, token_interval_ms: 1, tokens: 4}"
REQUESTS = 40


def _run(tmp_path: Path) -> Path:
    config = tmp_path / "config.yaml"
    config.write_text(
        f"name: side\nproviders: [{{id: fake, kind: fake, schedule: {FAST}}}]\n"
        "experiments: [{kind: single, prompt_cache: as_sent, prompts: [a, b], "
        f"repeats: {REQUESTS // 2}, warmup: 0}}]\n"
    )
    out = tmp_path / "out"
    result = CliRunner().invoke(app, ["run", str(config), "--out", str(out), "--no-report"])
    assert result.exit_code == 0, result.output
    (run_dir,) = [p for p in out.iterdir() if p.is_dir()]
    return run_dir


def _whole(run_dir: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, bytes]:
    """The report's files with records.jsonl read whole (the sidecar not read)."""
    with monkeypatch.context() as patch:
        patch.setattr(columnar, "SIDECAR_MIN_BYTES", 1 << 62)
        return _report_files(run_dir)


@pytest.fixture
def tiny_parts(monkeypatch: pytest.MonkeyPatch) -> None:
    """A part every few records, and a sidecar for any run."""
    monkeypatch.setattr(runner_sidecar, "PART_BYTES", 4096)
    monkeypatch.setattr(runner_sidecar, "SIDECAR_MIN_BYTES", 0)


@pytest.mark.usefixtures("tiny_parts")
def test_a_recorded_run_has_its_sidecar_complete_converted_by_other_processes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    run_dir = _run(tmp_path)
    lines = (run_dir / "records.jsonl").read_text().splitlines()
    assert len(lines) == REQUESTS
    # Complete and fresh as the run left it: the reader converts nothing.
    side = columnar.open_sidecar(run_dir)
    assert side is not None and side.rows == REQUESTS
    assert side.converted_by and os.getpid() not in side.converted_by
    index = json.loads((run_dir / SIDECAR_INDEX).read_text())
    assert index["parts"][-1]["end"] == (run_dir / "records.jsonl").stat().st_size
    whole = _whole(run_dir, monkeypatch)
    monkeypatch.setattr(columnar, "SIDECAR_MIN_BYTES", 0)
    assert _report_files(run_dir) == whole
    assert json.loads((run_dir / SIDECAR_INDEX).read_text()) == index  # read, not rewritten


def test_a_small_run_starts_no_converter(tmp_path: Path) -> None:
    """A run below SIDECAR_MIN_BYTES (64 MiB) keeps no sidecar, as before."""
    run_dir = _run(tmp_path)
    assert not (run_dir / columnar.SIDECAR_DIR).exists()


def test_the_writer_converts_in_a_child_each_part_and_the_rest_at_the_end(
    tmp_path: Path,
) -> None:
    from tests.report.test_columnar_load import _varied

    run_dir = tmp_path / "run"
    run_dir.mkdir()
    writer = SidecarWriter(run_dir, part_bytes=1, min_bytes=0)
    recs = _varied()
    with (run_dir / "records.jsonl").open("ab", buffering=0) as fh:
        for r in recs[:10]:
            data = (r.to_json_line() + "\n").encode()
            fh.write(data)
            writer.grew(len(data))
        assert len(writer.started) == 1  # one at a time: the others found it running
        for r in recs[10:]:
            fh.write((r.to_json_line() + "\n").encode())
    asyncio.run(writer.finish())
    assert len(writer.started) == 2 and os.getpid() not in writer.started
    side = columnar.open_sidecar(run_dir)
    assert side is not None and side.rows == len(recs)
    assert set(side.converted_by) <= set(writer.started)


@pytest.mark.usefixtures("tiny_parts")
def test_a_failed_conversion_loses_nothing_and_the_reader_converts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(runner_sidecar, "_CHILD", "raise SystemExit(3)\n")
    with caplog.at_level(logging.WARNING, logger="labkit.runner.sidecar"):
        run_dir = _run(tmp_path)
    warned = [r for r in caplog.records if "was not converted as the run went" in r.message]
    assert len(warned) == 1  # logged once, however many children failed
    lines = (run_dir / "records.jsonl").read_text().splitlines()
    assert len(lines) == REQUESTS and all(json.loads(x)["record_id"] for x in lines)
    assert columnar.open_sidecar(run_dir) is None
    whole = _whole(run_dir, monkeypatch)
    monkeypatch.setattr(columnar, "SIDECAR_MIN_BYTES", 0)
    assert _report_files(run_dir) == whole
    side = columnar.open_sidecar(run_dir)
    assert side is not None and side.converted_by == [os.getpid()]


@pytest.mark.usefixtures("tiny_parts")
def test_the_converters_cpu_is_reported_apart_and_not_in_labkits_own(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A real run past the (lowered) threshold: its converters' CPU, reaped with their
    resource usage, is the manifest's ``sidecar_cpu_s`` and out of ``labkit_cpu_s``. The
    end reading first waits for a converter still running (a test hook: so that one is
    reaped inside the window on a host of any speed)."""
    import resource

    from labkit.runner import hostcpu
    from labkit.runner import run as runner_run

    readings: list[hostcpu.CPUReading] = []
    children: list[float] = []

    def reading(stat: Path = Path("/proc/stat"), sidecar: object = None) -> object:
        writer = getattr(sidecar, "__self__", None)
        if readings and isinstance(writer, SidecarWriter) and writer._child is not None:
            writer._wait(writer._child, block=True)
        usage = resource.getrusage(resource.RUSAGE_CHILDREN)
        children.append(usage.ru_utime + usage.ru_stime)
        got = hostcpu.read_cpu(stat, sidecar)  # type: ignore[arg-type]
        assert got is not None
        readings.append(got)
        return got

    monkeypatch.setattr(runner_run, "read_cpu", reading)
    run_dir = _run(tmp_path)
    start, end = readings
    host = json.loads((run_dir / "manifest.json").read_text())["host_cpu"]
    reaped = end.sidecar_reaped_s - start.sidecar_reaped_s
    assert reaped > 0  # converters ran, and were reaped inside the window
    # what they used is what labkit's children's usage grew by (they are its only children)
    assert reaped == pytest.approx(children[1] - children[0], abs=0.011)
    converters = reaped + end.sidecar_running_s - start.sidecar_running_s
    assert host["sidecar_cpu_s"] == pytest.approx(converters, abs=0.006)
    assert host["labkit_cpu_s"] == pytest.approx(end.own_s - start.own_s - reaped, abs=0.006)
    assert host["labkit_cpu_s"] < end.own_s - start.own_s  # the converters' is not labkit's
