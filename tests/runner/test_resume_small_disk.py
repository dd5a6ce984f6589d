"""A run folder resumes on a disk with less free space than labkit's 64 KiB reserve: the
resume sets aside only what its final manifest needs (twice the manifest, plus 4 KiB) and
needs the room for its remaining records; with not even that, it is refused in one line.

On a real 256 KiB tmpfs where this process may mount one; elsewhere the disk's answer is
injected at the one place that asks it (the reserve's write)."""

from __future__ import annotations

import contextlib
import errno
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from labkit.cli import app
from labkit.records import RequestRecord
from labkit.runner import results
from labkit.runner.results import RESERVE_BYTES

pytestmark = pytest.mark.integration

LABKIT = [sys.executable, "-m", "labkit"]
FAST = "{first_token_ms: 0, token_interval_ms: 0, tokens: 2}"


@contextlib.contextmanager
def _tiny_tmpfs(path: Path) -> Iterator[bool]:
    """A 256 KiB tmpfs at `path` (True), or a plain folder where mounting is not allowed."""
    path.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(path)], capture_output=True
    )
    try:
        yield mounted.returncode == 0
    finally:
        if mounted.returncode == 0:
            subprocess.run(["umount", "-l", str(path)], check=False)


def _free(path: Path) -> int:
    st = os.statvfs(path)
    return st.f_bavail * st.f_frsize


def _interrupted_run(out: Path, tmp_path: Path) -> Path:
    config = tmp_path / "c.yaml"
    config.write_text(
        f"name: small\nproviders: [{{id: fake, kind: fake, schedule: {FAST}}}]\n"
        "experiments: [{kind: single, prompt_cache: as_sent, "
        "prompts: [a], repeats: 6, warmup: 0}]\n"
    )
    result = CliRunner().invoke(app, ["run", str(config), "--out", str(out), "--no-report"])
    assert result.exit_code == 0, result.output
    (run_dir,) = list(out.iterdir())
    records = run_dir / "records.jsonl"
    records.write_text("".join(f"{line}\n" for line in records.read_text().splitlines()[:3]))
    manifest = json.loads((run_dir / "manifest.json").read_text())
    manifest["status"], manifest["records"] = "interrupted", 3
    manifest["providers"]["fake"]["finished"] = False
    (run_dir / "manifest.json").write_text(json.dumps(manifest))
    (run_dir / "lab.json").unlink()
    (run_dir / "summary.txt").unlink()
    return run_dir


def _plan_keys(run_dir: Path) -> set[str]:
    lines = (run_dir / "records.jsonl").read_text().splitlines()
    return {RequestRecord.from_json_line(line).plan_key or "" for line in lines}


def _fill(path: Path, leave: int) -> Path:
    filler = path / "filler"
    with filler.open("wb") as f:
        f.write(bytes(max(0, _free(path) - leave)))
    return filler


def test_a_resume_with_less_free_space_than_the_reserve_finishes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with _tiny_tmpfs(tmp_path / "small") as real:
        out = tmp_path / "small" / "runs"
        run_dir = _interrupted_run(out, tmp_path)
        if real:
            _fill(tmp_path / "small", leave=40 * 1024)
            assert _free(run_dir) < RESERVE_BYTES
            done = subprocess.run(
                [*LABKIT, "run", "--resume", str(run_dir), "--no-report"],
                capture_output=True,
                text=True,
                timeout=600,
            )
            assert done.returncode == 0, done.stderr
        else:
            real_write = results._write_exclusive_then_rename

            def disk_short_of_the_reserve(path: Path, data: bytes) -> None:
                if len(data) >= RESERVE_BYTES:
                    raise OSError(errno.ENOSPC, "No space left on device")
                real_write(path, data)

            monkeypatch.setattr(results, "_write_exclusive_then_rename", disk_short_of_the_reserve)
            result = CliRunner().invoke(app, ["run", "--resume", str(run_dir), "--no-report"])
            assert result.exit_code == 0, result.output
        manifest: dict[str, Any] = json.loads((run_dir / "manifest.json").read_text())
        assert manifest["status"] == "completed"
        assert len(_plan_keys(run_dir)) == 6


def test_a_resume_without_room_for_its_final_manifest_is_refused_in_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with _tiny_tmpfs(tmp_path / "small") as real:
        out = tmp_path / "small" / "runs"
        run_dir = _interrupted_run(out, tmp_path)
        before = (run_dir / "records.jsonl").read_bytes()
        if real:
            _fill(tmp_path / "small", leave=0)
            done = subprocess.run(
                [*LABKIT, "run", "--resume", str(run_dir), "--no-report"],
                capture_output=True,
                text=True,
                timeout=600,
            )
            code, err = done.returncode, done.stderr
        else:

            def disk_full(path: Path, data: bytes) -> None:
                raise OSError(errno.ENOSPC, "No space left on device")

            monkeypatch.setattr(results, "_write_exclusive_then_rename", disk_full)
            result = CliRunner().invoke(app, ["run", "--resume", str(run_dir), "--no-report"])
            code, err = result.exit_code, result.stderr
        assert code == 1
        assert err.startswith("error: ") and err.count("\n") == 1, err
        assert f"cannot resume {run_dir}: not even" in err and "(ENOSPC)" in err
        assert (run_dir / "records.jsonl").read_bytes() == before
        manifest = json.loads((run_dir / "manifest.json").read_text())
        assert manifest["status"] == "interrupted"  # untouched: nothing was started
