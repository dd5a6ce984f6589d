"""A run's status is true: `completed` only when every planned request has a record, a
resume without a provider's key leaves the run `incomplete` (and says so in one line), a
folder of a newer labkit or holding links is refused without a byte changed, and flags a
resume cannot honour are refused. Through the CLI in process, with the fake provider."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner, Result

from labkit.cli import app
from labkit.manifest import FOLDER_FORMAT
from labkit.records import RequestRecord

pytestmark = pytest.mark.unit

FAST = "{first_token_ms: 0, token_interval_ms: 0, tokens: 2}"
KEY_VAR = "LABKIT_TEST_RESUME_KEY"


def _config(tmp_path: Path, providers: str, name: str = "truth") -> Path:
    path = tmp_path / f"{name}.yaml"
    path.write_text(
        f"name: {name}\nproviders: [{providers}]\n"
        "experiments: [{kind: single, prompt_cache: as_sent, "
        "prompts: [a, b], repeats: 3, warmup: 0}]\n"
    )
    return path


def _invoke(*args: str, env: dict[str, str | None] | None = None) -> Result:
    return CliRunner().invoke(app, [*args], env=env)


def _run_dir(out: Path) -> Path:
    (run_dir,) = [p for p in out.iterdir() if p.is_dir()]
    return run_dir


def _manifest(run_dir: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((run_dir / "manifest.json").read_text())
    return data


def _plan_keys(run_dir: Path, provider: str) -> set[str]:
    lines = (run_dir / "records.jsonl").read_text().splitlines()
    records = [RequestRecord.from_json_line(line) for line in lines if line.strip()]
    return {r.plan_key for r in records if r.provider == provider and r.plan_key}


def _cut_short(run_dir: Path, keep: int, unfinished: list[str]) -> None:
    """Make the folder look like a run killed after `keep` records."""
    path = run_dir / "records.jsonl"
    path.write_text("".join(line + "\n" for line in path.read_text().splitlines()[:keep]))
    manifest = _manifest(run_dir)
    manifest["status"] = "interrupted"
    manifest["records"] = keep
    for pid in unfinished:
        manifest["providers"][pid]["finished"] = False
    (run_dir / "manifest.json").write_text(json.dumps(manifest))


def _one_line(result: Result, stream: str, start: str, *needles: str) -> str:
    text = result.stderr if stream == "stderr" else result.stdout
    lines = [line for line in text.splitlines() if line.startswith(start)]
    assert len(lines) == 1, text
    for needle in needles:
        assert needle in lines[0], lines[0]
    return lines[0]


def test_a_run_with_a_skipped_provider_is_incomplete_and_says_how_to_finish(
    tmp_path: Path,
) -> None:
    config = _config(
        tmp_path,
        f"{{id: ok, kind: fake, schedule: {FAST}}}, "
        f"{{id: keyed, kind: fake, api_key_env: {KEY_VAR}, schedule: {FAST}}}",
    )
    out = tmp_path / "out"
    result = _invoke("run", str(config), "--out", str(out), "--no-report", env={KEY_VAR: None})
    assert result.exit_code == 0, result.output
    run_dir = _run_dir(out)
    manifest = _manifest(run_dir)
    assert manifest["status"] == "incomplete"
    assert set(manifest["unfinished"]) == {"keyed"} and KEY_VAR in manifest["unfinished"]["keyed"]
    assert manifest["providers"]["ok"]["finished"] is True
    assert manifest["providers"]["keyed"]["finished"] is False
    _one_line(
        result, "stderr", "run incomplete:", "keyed skipped", f"labkit run --resume {run_dir}"
    )
    report = _invoke("report", str(run_dir))
    assert report.exit_code == 0, report.output
    assert "Provider keyed did not finish its plan: skipped" in (run_dir / "report.md").read_text()
    # With the key, the resume sends only the skipped provider's plan, and then it is complete.
    resumed = _invoke("run", "--resume", str(run_dir), "--no-report", env={KEY_VAR: "k"})
    assert resumed.exit_code == 0, resumed.output
    assert _manifest(run_dir)["status"] == "completed"
    assert len(_plan_keys(run_dir, "ok")) == len(_plan_keys(run_dir, "keyed")) == 6


def test_a_resume_without_the_key_stays_incomplete_never_completed(tmp_path: Path) -> None:
    config = _config(
        tmp_path, f"{{id: keyed, kind: fake, api_key_env: {KEY_VAR}, schedule: {FAST}}}"
    )
    out = tmp_path / "out"
    first = _invoke("run", str(config), "--out", str(out), "--no-report", env={KEY_VAR: "k"})
    assert first.exit_code == 0, first.output
    run_dir = _run_dir(out)
    assert _manifest(run_dir)["status"] == "completed"
    _cut_short(run_dir, keep=2, unfinished=["keyed"])
    resumed = _invoke("run", "--resume", str(run_dir), "--no-report", env={KEY_VAR: None})
    manifest = _manifest(run_dir)
    assert manifest["status"] == "incomplete", manifest
    assert "keyed" in manifest["unfinished"]
    assert len(_plan_keys(run_dir, "keyed")) == 2  # nothing sent, nothing claimed
    _one_line(resumed, "stderr", "run incomplete:", f"set {KEY_VAR}")
    assert resumed.exit_code == 1  # and no provider completed a request
    again = _invoke("run", "--resume", str(run_dir), "--no-report", env={KEY_VAR: "k"})
    assert again.exit_code == 0, again.output
    assert _manifest(run_dir)["status"] == "completed"
    assert len(_plan_keys(run_dir, "keyed")) == 6


def test_a_finished_provider_needs_no_key_to_resume_the_others(tmp_path: Path) -> None:
    config = _config(
        tmp_path,
        f"{{id: keyed, kind: fake, api_key_env: {KEY_VAR}, schedule: {FAST}}}, "
        f"{{id: free, kind: fake, schedule: {FAST}}}",
    )
    out = tmp_path / "out"
    assert (
        _invoke("run", str(config), "--out", str(out), "--no-report", env={KEY_VAR: "k"}).exit_code
        == 0
    )
    run_dir = _run_dir(out)
    lines = (run_dir / "records.jsonl").read_text().splitlines()
    kept = [line for line in lines if RequestRecord.from_json_line(line).provider == "keyed"]
    kept += [line for line in lines if RequestRecord.from_json_line(line).provider == "free"][:2]
    (run_dir / "records.jsonl").write_text("".join(line + "\n" for line in kept))
    _cut_short(run_dir, keep=len(kept), unfinished=["free"])
    resumed = _invoke("run", "--resume", str(run_dir), "--no-report", env={KEY_VAR: None})
    assert resumed.exit_code == 0, resumed.output
    manifest = _manifest(run_dir)
    assert manifest["status"] == "completed" and manifest.get("unfinished") is None
    assert manifest["providers"]["keyed"]["finished"] is True
    assert len(_plan_keys(run_dir, "free")) == 6 and len(_plan_keys(run_dir, "keyed")) == 6


# --- Refused, with the folder untouched -------------------------------------------------------


def _finished_run(tmp_path: Path) -> Path:
    config = _config(tmp_path, f"{{id: fake, kind: fake, schedule: {FAST}}}")
    out = tmp_path / "out"
    assert _invoke("run", str(config), "--out", str(out), "--no-report").exit_code == 0
    run_dir = _run_dir(out)
    _cut_short(run_dir, keep=3, unfinished=["fake"])
    return run_dir


def _snapshot(run_dir: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(run_dir)): p.read_bytes()
        for p in sorted(run_dir.rglob("*"))
        if p.is_file() and not p.is_symlink() and p.name not in (".lock", ".reserve")
    }


def _refused(result: Result, *needles: str) -> None:
    assert result.exit_code == 1, result.output
    assert result.stderr.startswith("error: ") and result.stderr.count("\n") == 1, result.stderr
    for needle in needles:
        assert needle in result.stderr, result.stderr


def test_a_folder_of_a_newer_format_is_refused_and_left_as_it_is(tmp_path: Path) -> None:
    run_dir = _finished_run(tmp_path)
    manifest = _manifest(run_dir)
    manifest["folder_format"] = FOLDER_FORMAT + 1
    manifest["labkit_version"] = "9.0"
    (run_dir / "manifest.json").write_text(json.dumps(manifest))
    before = _snapshot(run_dir)
    _refused(
        _invoke("run", "--resume", str(run_dir)),
        f"folder format {FOLDER_FORMAT + 1}",
        "version 9.0",
        "resume it with that labkit",
    )
    assert _snapshot(run_dir) == before


def test_records_with_fields_of_a_newer_labkit_are_refused_never_mixed(tmp_path: Path) -> None:
    run_dir = _finished_run(tmp_path)
    path = run_dir / "records.jsonl"
    lines = path.read_text().splitlines()
    newer = json.loads(lines[1]) | {"added_by_a_newer_labkit": 1}
    lines[1] = json.dumps(newer)
    path.write_text("".join(line + "\n" for line in lines))
    before = _snapshot(run_dir)
    _refused(
        _invoke("run", "--resume", str(run_dir)),
        f"{path}:2 holds fields this labkit does not know",
    )
    assert _snapshot(run_dir) == before


@pytest.mark.parametrize(
    ("extra", "named"),
    [
        (["OTHER"], "CONFIG"),
        (["--repeats", "1"], "--repeats"),
        (["OTHER", "--repeats", "1"], "CONFIG, --repeats"),
        (["--provider", "fake"], "--provider"),
        (["--experiment", "single"], "--experiment"),
        (["--out", "elsewhere"], "--out"),
        (["--example", "quickstart"], "--example"),
    ],
)
def test_what_a_resume_cannot_honour_is_refused_in_one_line(
    tmp_path: Path, extra: list[str], named: str
) -> None:
    run_dir = _finished_run(tmp_path)
    other = _config(tmp_path, f"{{id: other, kind: fake, schedule: {FAST}}}", name="other")
    args = [str(other) if a == "OTHER" else a for a in extra]
    before = _snapshot(run_dir)
    _refused(_invoke("run", *args, "--resume", str(run_dir)), f"cannot take {named}")
    assert _snapshot(run_dir) == before


def test_a_run_folder_holding_a_link_is_not_resumed(tmp_path: Path) -> None:
    run_dir = _finished_run(tmp_path)
    victim = tmp_path / "victim.txt"
    victim.write_text("mine\n")
    (run_dir / "records.jsonl").rename(tmp_path / "records.real")
    os.symlink(victim, run_dir / "records.jsonl")
    _refused(
        _invoke("run", "--resume", str(run_dir)),
        "holds a symbolic link (records.jsonl)",
    )
    assert victim.read_text() == "mine\n"


def test_records_without_plan_keys_are_not_resent_blindly(tmp_path: Path) -> None:
    """An older labkit's records carry no plan key: which requests were done cannot be told,
    so the resume is refused in one line rather than measuring every request a second time."""
    run_dir = _finished_run(tmp_path)
    path = run_dir / "records.jsonl"
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    path.write_text("".join(json.dumps(r | {"plan_key": None}) + "\n" for r in lines))
    before = _snapshot(run_dir)
    _refused(
        _invoke("run", "--resume", str(run_dir)),
        "3 of its records carry no plan key",
        "cannot be told",
        "start a new run with labkit run ",
    )
    assert _snapshot(run_dir) == before
    # The lock was released: a second try is told the same, not that the folder is busy.
    _refused(_invoke("run", "--resume", str(run_dir)), "carry no plan key")
