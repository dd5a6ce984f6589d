"""`labkit run` keeps its records out of the collector's full scans once its levels are done:
its figures, its summary and answers with the heap frozen, and the heap frozen as the
interpreter exits (each full collection there scanned every record the run still held:
issue 47, benchmarks/bench_after_level.py)."""

from __future__ import annotations

import gc
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from labkit.cli import app
from labkit.runner import Runner

app_module = sys.modules["labkit.cli.app"]
ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.unit

_CHILD = """
import atexit, gc
calls = []
freeze = gc.freeze
gc.freeze = lambda: (calls.append(1), freeze())[1]  # counted where the handler calls it
atexit.register(lambda: print("at exit:", gc.get_freeze_count() > 0, len(calls)))  # last
from labkit.cli.app import _no_collection_at_exit
_no_collection_at_exit()
_no_collection_at_exit()
print("now:", gc.get_freeze_count() > 0, len(calls))
"""


def test_the_heap_is_frozen_once_at_exit_and_not_before() -> None:
    out = subprocess.run(
        [sys.executable, "-c", _CHILD], capture_output=True, text=True, check=True, timeout=120
    ).stdout.splitlines()
    assert out == ["now: False 0", "at exit: True 1"]  # frozen once, at exit only


def test_a_run_is_summed_up_and_analysed_with_its_records_out_of_every_collection(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: dict[str, bool] = {}
    summary, answers = app_module._print_result, app_module._print_answers
    analyze = Runner.analyze

    def watch(name: str, fn: Any) -> Any:
        def watched(*args: Any, **kwargs: Any) -> Any:
            seen[name] = gc.get_freeze_count() > 0
            return fn(*args, **kwargs)

        return watched

    monkeypatch.setattr(app_module, "_print_result", watch("summary", summary))
    monkeypatch.setattr(app_module, "_print_answers", watch("answers", answers))
    monkeypatch.setattr(Runner, "analyze", watch("analyze", analyze))
    config = str(ROOT / "configs" / "fake.yaml")
    result = CliRunner().invoke(app, ["run", config, "--out", str(tmp_path), "--no-report"])
    assert result.exit_code == 0, result.output
    assert seen == {"analyze": True, "summary": True, "answers": True}
    assert gc.get_freeze_count() == 0  # unfrozen once the command is done
