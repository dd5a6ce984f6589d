"""The run folder and the CLI never lose a record or crash: failed writes, bad lines, unsafe
names, out-of-range numbers. In process, with the fake provider (no sockets)."""

from __future__ import annotations

import asyncio
import errno
import fcntl
import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from typer.testing import CliRunner, Result

from labkit.cli import app
from labkit.config import parse_config
from labkit.errors import RunError, ServerError
from labkit.manifest import Manifest
from labkit.records import ErrorKind, RecordError, RequestRecord, StopReason
from labkit.report.load import load_run
from labkit.runner import RunOptions, prepare_run, run_lab
from labkit.runner.results import RunFolder, safe_filename

pytestmark = pytest.mark.unit

FAST = "{first_token_ms: 0, token_interval_ms: 0, tokens: 3}"


def _config(tmp_path: Path, *, name: str = "faults", repeats: int = 3, extra: str = "") -> Path:
    path = tmp_path / "fake.yaml"
    path.write_text(
        f"name: {json.dumps(name)}\n{extra}"
        f"providers: [{{id: fake, kind: fake, schedule: {FAST}}}]\n"
        f"experiments: [{{kind: single, prompt_cache: as_sent, "
        f"prompts: [a, b], repeats: {repeats}}}]\n"
    )
    return path


def _invoke(*args: str) -> Result:
    return CliRunner().invoke(app, list(args))


def _one_error_line(result: Result, *needles: str) -> None:
    """Exit 1, exactly one line on stderr starting `error:`, no traceback."""
    assert result.exit_code == 1, result.output
    err = result.stderr
    assert err.startswith("error: ") and err.count("\n") == 1, err
    assert "Traceback" not in result.output
    for needle in needles:
        assert needle in err, err


def _run_dir(out: Path) -> Path:
    (run_dir,) = [p for p in out.iterdir() if p.is_dir()]
    return run_dir


def _records(run_dir: Path) -> list[RequestRecord]:
    out = []
    for line in (run_dir / "records.jsonl").read_text().splitlines():
        try:
            out.append(RequestRecord.from_json_line(line))
        except ValueError:
            continue
    return out


def _manifest(run_dir: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((run_dir / "manifest.json").read_text())
    return data


# --- Safe names ----------------------------------------------------------------------------


@given(st.text(max_size=200))
def test_safe_filename_never_leaves_its_folder(text: str) -> None:
    name = safe_filename(text)
    assert name and len(name) <= 64
    assert "/" not in name and "\\" not in name and "\0" not in name
    assert not name.startswith(".")
    base = Path("/runs/one")
    assert (base / name).resolve().parent == base


def test_safe_filename_keeps_plain_names_and_tells_changed_ones_apart() -> None:
    assert safe_filename("llama-local_1.q4") == "llama-local_1.q4"
    assert safe_filename("a/b") != safe_filename("a_b")
    assert safe_filename("../../etc") != safe_filename("__.._etc")
    assert safe_filename("..").startswith("_")


def test_a_run_name_with_separators_stays_inside_out(tmp_path: Path) -> None:
    out = tmp_path / "out"
    result = _invoke("run", str(_config(tmp_path, name="../../x/y")), "--out", str(out))
    assert result.exit_code == 0, result.output
    run_dir = _run_dir(out)
    assert run_dir.parent == out and "/" not in run_dir.name
    assert sorted(p.name for p in tmp_path.iterdir()) == ["fake.yaml", "out"]


def test_the_llama_server_log_of_an_unsafe_provider_id_stays_in_the_run_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import labkit.local

    logs: list[Path] = []

    class FakeManagedServer:
        def __init__(self, setup: object, *, log_path: Path, **_: object) -> None:
            logs.append(log_path)

        def start(self) -> str:
            raise ServerError("no server in this test")

        def stop(self) -> None:
            pass

    monkeypatch.setattr(labkit.local, "ensure_setup", lambda **_: None)
    monkeypatch.setattr(labkit.local, "ManagedServer", FakeManagedServer)
    config = parse_config(
        {
            "name": "ids",
            "output_dir": str(tmp_path / "out"),
            "providers": [{"id": "../../escape/p", "kind": "llamacpp", "model": "m"}],
            "experiments": [{"kind": "single", "prompt_cache": "as_sent", "prompts": ["a"]}],
        },
        "test",
    )
    runner = prepare_run(config, RunOptions())
    result = asyncio.run(run_lab(runner))
    assert result.outcomes[0].status == "failed"
    (log,) = logs
    assert log.parent == runner.folder.path
    assert log.name.startswith("llama-server-") and "/" not in log.name[len("llama-server-") :]
    runner.folder.release()


# --- Failed writes -------------------------------------------------------------------------


class _FailingFile:
    """A records file that takes `room` bytes, then fails like a full or broken disk."""

    def __init__(self, path: Path, room: int, code: int) -> None:
        self._file = path.open("ab", buffering=0)
        self._room = room
        self._code = code

    def write(self, data: memoryview) -> int:
        if self._room <= 0:
            raise OSError(self._code, errno.errorcode[self._code])
        n = self._file.write(data[: self._room])
        self._room -= n
        return n

    def close(self) -> None:
        self._file.close()


@pytest.mark.parametrize(
    ("code", "words"),
    [(errno.ENOSPC, "(ENOSPC)"), (errno.EIO, "(EIO)"), (errno.EROFS, "(EROFS)")],
)
def test_a_failed_record_write_stops_the_run_cleanly_and_resume_finishes_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, code: int, words: str
) -> None:
    one_record = 2500  # about one and a half records: the second is cut mid-line
    monkeypatch.setattr(
        RunFolder,
        "_open_for_append",
        lambda self: _FailingFile(self.records_path, one_record, code),
    )
    out = tmp_path / "out"
    result = _invoke("run", str(_config(tmp_path, repeats=5)), "--out", str(out), "--no-report")
    run_dir = _run_dir(out)
    _one_error_line(result, f"cannot write {run_dir / 'records.jsonl'}", words, "--resume")
    manifest = _manifest(run_dir)
    assert manifest["status"] == "failed"
    assert "records.jsonl" in manifest["failure"] and words in manifest["failure"]
    kept = _records(run_dir)
    assert len(kept) == manifest["records"] >= 1
    assert not (run_dir / ".reserve").exists()  # given up to make room for the manifest

    monkeypatch.undo()
    resumed = _invoke("run", "--resume", str(run_dir), "--no-report")
    assert resumed.exit_code == 0, resumed.output
    assert _manifest(run_dir)["status"] == "completed"
    records = _records(run_dir)
    measured = [r for r in records if not r.warmup]
    assert len({r.plan_key for r in measured}) == len(measured) == 10  # each once, none lost
    assert {r.record_id for r in kept} <= {r.record_id for r in records}


def test_a_failed_record_write_stops_run_lab_itself_with_a_run_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without the CLI's hook too: the runner raises, the manifest says why."""
    monkeypatch.setattr(
        RunFolder,
        "_open_for_append",
        lambda self: _FailingFile(self.records_path, 2500, errno.ENOSPC),
    )
    cfg = parse_config(
        {
            "name": "direct",
            "output_dir": str(tmp_path / "out"),
            "providers": [{"id": "fake", "kind": "fake", "schedule": {"tokens": 3}}],
            "experiments": [
                {
                    "kind": "single",
                    "prompt_cache": "as_sent",
                    "prompts": ["a"],
                    "repeats": 4,
                    "warmup": 0,
                }
            ],
        }
    )
    runner = prepare_run(cfg, RunOptions())
    with pytest.raises(RunError, match=r"ENOSPC.*--resume"):
        asyncio.run(run_lab(runner))
    manifest = json.loads((runner.folder.path / "manifest.json").read_text())
    assert manifest["status"] == "failed" and "ENOSPC" in manifest["failure"]
    runner.folder.release()


def test_a_failed_manifest_write_is_one_error_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = Path.write_text

    def manifest_fails_at_the_end(self: Path, data: str, *args: Any, **kwargs: Any) -> int:
        if self.name == "manifest.json.tmp" and '"status": "running"' not in data:
            real(self, data[:100], *args, **kwargs)  # half written, then the disk is full
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(self, data, *args, **kwargs)

    monkeypatch.setattr(Path, "write_text", manifest_fails_at_the_end)
    out = tmp_path / "out"
    result = _invoke("run", str(_config(tmp_path)), "--out", str(out), "--no-report")
    run_dir = _run_dir(out)
    _one_error_line(result, f"cannot write {run_dir / 'manifest.json'}", "(ENOSPC)")
    assert len([r for r in _records(run_dir) if not r.warmup]) == 6  # every record is on disk
    assert _manifest(run_dir)["status"] == "running"  # the last good manifest is intact
    assert not list(run_dir.glob("*.tmp"))  # the half-written temporary file is gone


def test_a_folder_that_failed_a_write_refuses_later_records(tmp_path: Path) -> None:
    folder = RunFolder.create(tmp_path, "r")
    folder.write_error = "cannot write x: No space left on device (ENOSPC)"
    with pytest.raises(RunError, match="ENOSPC"):
        folder.append(_records_of_a_run(tmp_path)[0])
    folder.write_manifest(Manifest(status="completed"))
    assert _manifest(folder.path)["status"] == "failed"
    folder.release()


def _records_of_a_run(tmp_path: Path) -> list[RequestRecord]:
    out = tmp_path / "source"
    assert _invoke("run", str(_config(tmp_path)), "--out", str(out), "--no-report").exit_code == 0
    return _records(_run_dir(out))


# --- The folder lock ----------------------------------------------------------------------


def _held_by_someone_else(folder: Path) -> bool:
    """Whether another open file description could take the folder's lock now."""
    with (folder / ".lock").open("rb") as f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        fcntl.flock(f, fcntl.LOCK_UN)
        return False


def test_a_folder_is_locked_until_its_last_user_in_this_process_releases_it(
    tmp_path: Path,
) -> None:
    run = RunFolder.create(tmp_path, "r")
    run.write_manifest(Manifest(status="running"))
    assert _held_by_someone_else(run.path)
    resume = RunFolder.open_existing(run.path)  # the same process may open it again
    run.release()
    assert _held_by_someone_else(run.path)
    resume.release()
    assert not _held_by_someone_else(run.path)
    assert not (run.path / ".reserve").exists()


def test_a_folder_locked_elsewhere_is_refused_with_one_clear_error(tmp_path: Path) -> None:
    run = RunFolder.create(tmp_path, "r")
    run.write_manifest(Manifest(status="running"))
    run.release()
    with (run.path / ".lock").open("rb") as other:
        fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)  # as another process would
        result = _invoke("run", "--resume", str(run.path))
    _one_error_line(result, f"run folder {run.path} is in use by another labkit process")
    assert _manifest(run.path)["status"] == "running"


# --- Bad lines in records.jsonl ------------------------------------------------------------


def test_resume_skips_a_bad_line_in_the_middle_with_a_warning_and_redoes_its_request(
    tmp_path: Path,
) -> None:
    out = tmp_path / "out"
    assert _invoke("run", str(_config(tmp_path)), "--out", str(out), "--no-report").exit_code == 0
    run_dir = _run_dir(out)
    path = run_dir / "records.jsonl"
    lines = path.read_text().splitlines()
    lines[2] = '{"not": "a record"}'
    path.write_text("\n".join(lines) + "\n")
    result = _invoke("run", "--resume", str(run_dir), "--no-report")
    assert result.exit_code == 0, result.output
    err = result.stderr
    assert err.count("warning:") == 1 and err.count("\n") == 1
    assert f"{path}:3: skipped, not a valid record" in err
    measured = [r for r in _records(run_dir) if not r.warmup]
    assert len({r.plan_key for r in measured}) == 6  # the lost request was sent again


def test_resume_sends_a_lost_request_again(tmp_path: Path) -> None:
    """A request lost with its Ray actor (`error.kind: lost`: in flight when the node died)
    never answered: an interrupted run's resume sends it again, as it does a cancelled one."""
    out = tmp_path / "out"
    assert _invoke("run", str(_config(tmp_path)), "--out", str(out), "--no-report").exit_code == 0
    run_dir = _run_dir(out)
    path = run_dir / "records.jsonl"
    records = _records(run_dir)
    lost = next(r for r in records if not r.warmup)
    gone = lost.model_copy(
        update={
            "error": RecordError(kind=ErrorKind.LOST, message="lost: the Ray actor died"),
            "stop_reason": StopReason.ERROR,
        }
    )
    path.write_text("".join((gone if r is lost else r).to_json_line() + "\n" for r in records))
    manifest = _manifest(run_dir)
    manifest["status"] = "interrupted"
    for entry in manifest["providers"].values():
        entry["finished"] = False
    (run_dir / "manifest.json").write_text(json.dumps(manifest))
    result = _invoke("run", "--resume", str(run_dir), "--no-report")
    assert result.exit_code == 0, result.output
    again = [r for r in _records(run_dir) if r.plan_key == lost.plan_key]
    assert [r.error.kind if r.error else None for r in again] == [ErrorKind.LOST, None]
    assert len(_records(run_dir)) == len(records) + 1  # only the lost one was sent again


def test_only_an_unfinished_last_line_is_skipped_silently(tmp_path: Path) -> None:
    records = _records_of_a_run(tmp_path)
    folder = RunFolder.create(tmp_path / "runs", "r")
    good = "\n".join(r.to_json_line() for r in records[:3])
    warnings: list[str] = []
    folder.records_path.write_text(good + "\n" + records[3].to_json_line()[:50])
    assert len(folder.read_records(on_skip=warnings.append)) == 3 and warnings == []
    folder.records_path.write_text(good + '\n{"complete": "but no record"}\n')
    assert len(folder.read_records(on_skip=warnings.append)) == 3
    assert len(warnings) == 1 and ":4: skipped, not a valid record" in warnings[0]
    # A whole record but no newline: the disk filled up at the last byte. It is not taken
    # as done, since the next append removes it.
    folder.records_path.write_text(good + "\n" + records[3].to_json_line())
    assert len(folder.read_records(on_skip=warnings.append)) == 3 and len(warnings) == 1
    # The next record starts on a line of its own, after the cut-off one is removed.
    folder.records_path.write_text(good + "\n" + records[3].to_json_line()[:50])
    folder.append(records[3])
    assert [r.record_id for r in folder.read_records()] == [r.record_id for r in records[:4]]
    folder.release()


def test_a_cut_off_line_longer_than_the_read_chunk_is_removed_whole(tmp_path: Path) -> None:
    first, second = _records_of_a_run(tmp_path)[:2]
    long = second.model_copy(update={"output_text": "x" * 300_000}).to_json_line()
    folder = RunFolder.create(tmp_path / "runs", "r")
    folder.records_path.write_text(first.to_json_line() + "\n" + long[:250_000])
    folder.append(second)
    assert folder.records_path.read_text() == first.to_json_line() + "\n" + (
        second.to_json_line() + "\n"
    )
    folder.release()


def test_the_report_skips_json_lines_that_are_not_records_and_says_so(tmp_path: Path) -> None:
    out = tmp_path / "out"
    assert _invoke("run", str(_config(tmp_path)), "--out", str(out), "--no-report").exit_code == 0
    run_dir = _run_dir(out)
    path = run_dir / "records.jsonl"
    lines = path.read_text().splitlines()
    lines.insert(1, '{"note": "written by hand"}')
    lines.insert(3, '{"provider": 7, "record_id": "x"}')
    path.write_text("\n".join(lines) + "\n")
    run = load_run(run_dir)
    assert set(run.records["provider"]) == {"fake"}  # no provider "nan" or "7"
    assert run.skipped_lines == 2
    assert any("2 line(s)" in p and "line 2, 4" in p for p in run.problems)
    result = _invoke("report", str(run_dir))
    assert result.exit_code == 0, result.output
    report = (run_dir / "report.md").read_text()
    assert "2 line(s) of records.jsonl are not valid records" in report
    assert "nan" not in (run_dir / "summary.csv").read_text()


# --- Out-of-range numbers and impossible paths ---------------------------------------------


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["fake-server", "--port", "70000"], "--port must be between 0 and 65535 (got 70000)"),
        (["fake-server", "--port", "-1"], "--port must be between 0 and 65535"),
        (["fake-server", "--tokens", "-5"], "--tokens must be between 0 and 131072 (got -5)"),
        (["fake-server", "--first-token-ms", "nan"], "--first-token-ms must be a finite"),
        (["fake-server", "--first-token-ms", "inf"], "--first-token-ms must be a finite"),
        (["fake-server", "--token-interval-ms", "-1"], "--token-interval-ms must be between 0"),
        (["fake-server", "--drift", "{not json"], "bad schedule value for drift"),
        (
            [
                "fake-server",
                "--drift",
                '{"queue_bump": {"start_hour": 30, "end_hour": 2, "ms": 5}}',
            ],
            "drift.queue_bump.start_hour: Input should be less than or equal to 23",
        ),
        (["run", "configs/fake.yaml", "--repeats", "0"], "--repeats must be at least 1"),
        (["run", "configs/fake.yaml", "--repeats", "-3"], "--repeats must be at least 1"),
        (["server", "start", "--port", "70000"], "--port must be between 1 and 65535"),
        (["server", "start", "--slots", "0"], "--ctx-size and --slots must be at least 1"),
        (["server", "start", "--ctx-size", "-1"], "--ctx-size and --slots must be at least 1"),
    ],
)
def test_out_of_range_numbers_are_one_error_line(args: list[str], needle: str) -> None:
    _one_error_line(_invoke(*args), needle)


def test_a_nul_byte_in_output_dir_is_one_error_line(tmp_path: Path) -> None:
    config = _config(tmp_path, extra='output_dir: "a\\0b"\n')
    _one_error_line(_invoke("run", str(config)), "may not contain a NUL byte")
    # A shell cannot pass a NUL in an argument; through the API it is a RunError too.
    with pytest.raises(RunError, match="NUL byte"):
        RunFolder.create(tmp_path / "x\0y", "r")
    with pytest.raises(RunError, match="is not a run folder"):
        RunFolder.open_existing(tmp_path / "x\0y")


def test_an_output_dir_that_is_a_file_is_one_error_line(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("")
    result = _invoke("run", str(_config(tmp_path)), "--out", str(tmp_path / "file"))
    _one_error_line(result, "cannot create run folder", "(ENOTDIR)")
