"""`labkit report` on a run folder that came from elsewhere: links planted in it (by hand, and
unpacked from a tar archive) are replaced, never written through; a linked `report_files/`
is refused in one line. `labkit report` is run as a process, where an abort would show."""

from __future__ import annotations

import io
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
from typer.testing import CliRunner

from labkit.cli import app

pytestmark = pytest.mark.unit

LABKIT = [sys.executable, "-m", "labkit"]
FAST = "{first_token_ms: 0, token_interval_ms: 0, tokens: 3}"


def _run(tmp_path: Path) -> Path:
    config = tmp_path / "c.yaml"
    config.write_text(
        f"name: links\nproviders: [{{id: fake, kind: fake, schedule: {FAST}}}]\n"
        "experiments: [{kind: single, prompts: [a], repeats: 3, warmup: 0}]\n"
    )
    out = tmp_path / "out"
    result = CliRunner().invoke(app, ["run", str(config), "--out", str(out), "--no-report"])
    assert result.exit_code == 0, result.output
    (run_dir,) = list(out.iterdir())
    return run_dir


def _report(run_dir: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*LABKIT, "report", str(run_dir)], capture_output=True, text=True, timeout=600
    )


def test_links_named_like_report_files_are_replaced_never_written_through(
    tmp_path: Path,
) -> None:
    run_dir = _run(tmp_path)
    victims = {}
    for name in ("report.md", "report.html", "summary.csv", "summary.parquet"):
        victim = tmp_path / f"victim-{name}"
        victim.write_text("mine\n")
        os.symlink(victim, run_dir / name)
        victims[name] = victim
    done = _report(run_dir)
    assert done.returncode == 0, done.stderr
    for name, victim in victims.items():
        assert victim.read_text() == "mine\n"
        assert not (run_dir / name).is_symlink() and (run_dir / name).stat().st_size > 0


def test_a_linked_report_files_folder_is_refused_in_one_line(tmp_path: Path) -> None:
    run_dir = _run(tmp_path)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "keep.png").write_bytes(b"mine")
    os.symlink(elsewhere, run_dir / "report_files")
    done = _report(run_dir)
    assert done.returncode != 0 and done.returncode > 0
    assert done.stderr.count("\n") == 1 and "report_files is a symbolic link" in done.stderr
    assert [p.name for p in elsewhere.iterdir()] == ["keep.png"]
    assert (elsewhere / "keep.png").read_bytes() == b"mine"


def test_a_run_folder_unpacked_from_an_archive_with_links_stays_inside(tmp_path: Path) -> None:
    (tmp_path / "made").mkdir()
    run_dir = _run(tmp_path / "made")
    victim = tmp_path / "victim.html"
    victim.write_text("mine\n")
    archive = tmp_path / "run.tar"
    with tarfile.open(archive, "w") as tar:
        tar.add(run_dir, arcname="run")
        for name, target in [("report.html", str(victim)), ("report.md", "../victim.html")]:
            link = tarfile.TarInfo(f"run/{name}")
            link.type, link.linkname = tarfile.SYMTYPE, target
            tar.addfile(link, io.BytesIO())
    unpacked = tmp_path / "unpacked"
    with tarfile.open(archive) as tar:
        tar.extractall(unpacked)
    assert (unpacked / "run" / "report.html").is_symlink()
    # A resume is refused outright while links are there: it would append through them.
    resumed = subprocess.run(
        [*LABKIT, "run", "--resume", str(unpacked / "run"), "--no-report"],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert resumed.returncode == 1
    assert resumed.stderr.startswith("error: ") and "symbolic link" in resumed.stderr
    assert victim.read_text() == "mine\n"
    done = _report(unpacked / "run")
    assert done.returncode == 0, done.stderr
    assert victim.read_text() == "mine\n"
    assert "<html" in (unpacked / "run" / "report.html").read_text()
