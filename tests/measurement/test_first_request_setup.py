"""No set-up of labkit's inside a measured interval, warm-up or not (issue 24, item 7).

Each client path's first request in a fresh process (`first_request_probe`, a child
process) against a tiny server on 127.0.0.1 that stamps each accepted connection and each
request it read: the path's one-off set-up (connection pools, the kernel-stamp probe, lazy
imports, the SDK client and its first-request work) must have ended before the first
request's ``t_start``, and nothing may be imported between ``t_start`` and the end of the
stream. Ordering of recorded stamps, never speed: the durations are printed (``-s``).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from labkit.measurement.recorder import BaseRecorder
from labkit.runner.executor import Measurer
from tests.providers.streams import make_provider

ROOT = Path(__file__).resolve().parents[2]


def first_requests(path: str) -> dict[str, Any]:
    """The probe's account of a fresh process's first two requests on `path`."""
    done = subprocess.run(
        [sys.executable, "-m", "tests.measurement.first_request_probe", path],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


@pytest.mark.integration
@pytest.mark.parametrize("path", ["wire", "lean", "sdk"])
def test_the_first_request_carries_no_set_up(path: str) -> None:
    probe = first_requests(path)
    first, second = probe["records"]
    assert first["error"] is None and second["error"] is None
    set_up_done = probe["set_up_done_ns"]
    assert set_up_done is not None
    # The set-up ended before the first request's clock started, and the server saw the
    # first request's connection only after that (it was opened inside the measurement).
    assert set_up_done < first["t_start_ns"] < probe["accepted_ns"][0]
    assert first["t_start_ns"] < probe["request_read_ns"][0] <= first["end_ns"]
    # Nothing was imported while either request was measured: no lazy set-up inside.
    assert first["imports_inside"] == []
    assert second["imports_inside"] == []
    print(
        f"\n{path}: set-up {probe['set_up_ms']:.1f} ms before the first request; connect "
        f"{first['connect_ms']} ms then {second['connect_ms']} ms; TTFT {first['ttft_ms']:.1f} "
        f"then {second['ttft_ms']:.1f} ms"
    )


class _Path(BaseRecorder):
    """A path whose set-up only counts how often it ran."""

    def __init__(self) -> None:
        super().__init__()
        self.set_ups = 0

    async def _set_up(self, provider: Any) -> None:
        self.set_ups += 1


@pytest.mark.unit
def test_each_path_an_executor_names_is_set_up_once_before_its_requests() -> None:
    import asyncio

    wire, sdk = _Path(), _Path()
    measurer = Measurer(wire, lambda: sdk, run_id="r", store_text=False)
    provider = make_provider("openai_compatible", base_url="http://127.0.0.1:9/v1")

    async def go() -> None:
        await measurer.set_up(provider, ["wire"])
        assert (wire.set_ups, sdk.set_ups) == (1, 0)
        await measurer.set_up(provider, ["wire", "sdk", "sdk"])
        assert (wire.set_ups, sdk.set_ups) == (1, 1)
        assert wire.set_up_done_ns(provider) is not None

    asyncio.run(go())
