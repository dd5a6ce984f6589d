"""A watch round's folder ends with its columnar sidecar complete, as `labkit run`'s does:
a round that ran to its end by the runner's end conversion, a round cut short and closed
as partial by the watch's (`convert_rest`), each by a child process converting only what
the parts lack. With the fake provider, real rounds, and parts of a few KiB."""

from __future__ import annotations

import asyncio
import json
import os
from datetime import UTC, datetime
from pathlib import Path

import pytest

from labkit.config import parse_config
from labkit.report import columnar
from labkit.runner import sidecar as runner_sidecar
from labkit.watch import RoundPlan
from labkit.watch.rounds import RunRounds

pytestmark = pytest.mark.unit

FAST = {"first_token_ms": 0, "token_interval_ms": 1, "tokens": 4}


@pytest.fixture
def tiny_parts(monkeypatch: pytest.MonkeyPatch) -> None:
    """A converter every few records, and a sidecar for any folder."""
    monkeypatch.setattr(runner_sidecar, "PART_BYTES", 4096)
    monkeypatch.setattr(runner_sidecar, "SIDECAR_MIN_BYTES", 0)


def _rounds(tmp_path: Path) -> RunRounds:
    config = parse_config(
        {
            "name": "probe",
            "output_dir": str(tmp_path),
            "providers": [{"id": "p", "kind": "fake", "model": "m", "schedule": FAST}],
            "experiments": [
                {
                    "kind": "single",
                    "prompt_cache": "as_sent",
                    "prompts": ["a", "b"],
                    "repeats": 15,
                    "warmup": 0,
                },
            ],
            "watch": {"every": "10m"},
        }
    )
    return RunRounds(config, tmp_path / "rounds", "w1")


def _plan(index: int) -> RoundPlan:
    at = datetime(2026, 1, 5, index, tzinfo=UTC)
    return RoundPlan(index, at, f"{index:05d}-round", f"n{index}", simulated=False)


def _complete(run_dir: Path) -> columnar.Sidecar:
    """The folder's sidecar, complete and fresh as the round left it (opened, not built)."""
    side = columnar.open_sidecar(run_dir)
    assert side is not None
    index = json.loads((run_dir / columnar.SIDECAR_INDEX).read_text())
    assert index["parts"][-1]["end"] == (run_dir / "records.jsonl").stat().st_size
    return side


@pytest.mark.usefixtures("tiny_parts")
def test_a_round_that_ran_and_a_round_closed_partial_end_with_their_sidecar_complete(
    tmp_path: Path,
) -> None:
    rounds = _rounds(tmp_path)
    plan = _plan(1)
    outcome = asyncio.run(rounds.run(plan))
    assert outcome.status == "ok" and outcome.ok == 30
    run_dir = rounds.run_dir(plan)
    side = _complete(run_dir)
    assert side.rows == 30 and os.getpid() not in side.converted_by
    # Cut short after more records than the parts cover, and too late to finish: the
    # manifest still says running; closing it converts the rest, in a child process.
    lines = (run_dir / "records.jsonl").read_text().splitlines()
    more = [json.loads(x) for x in lines[:12]]
    for i, rec in enumerate(more):
        rec["record_id"] = f"late-{i}"
    with (run_dir / "records.jsonl").open("a", encoding="utf-8") as fh:
        fh.writelines(json.dumps(rec) + "\n" for rec in more)
    manifest = json.loads((run_dir / "manifest.json").read_text())
    manifest["status"] = "running"
    (run_dir / "manifest.json").write_text(json.dumps(manifest))
    assert columnar.open_sidecar(run_dir) is None  # the parts no longer cover the file
    parts_before = len(side.paths)
    closed = asyncio.run(rounds.close_partial(plan))
    assert closed is not None and closed.status == "partial" and closed.ok == 42
    side = _complete(run_dir)
    assert side.rows == 42 and len(side.paths) == parts_before + 1  # only the rest converted
    assert os.getpid() not in side.converted_by
    assert json.loads((run_dir / "manifest.json").read_text())["status"] == "interrupted"


def test_a_small_round_keeps_no_sidecar(tmp_path: Path) -> None:
    """Under the threshold (64 MiB), neither the round's end nor its close converts."""
    rounds = _rounds(tmp_path)
    plan = _plan(2)
    assert asyncio.run(rounds.run(plan)).status == "ok"
    assert asyncio.run(rounds.close_partial(plan)) is not None
    assert not (rounds.run_dir(plan) / columnar.SIDECAR_DIR).exists()
