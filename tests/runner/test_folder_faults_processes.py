"""The run folder and the CLI under real processes: SIGTERM, two resumes at once, a really
full disk, unsafe ids over worker processes, `labkit server stop` and unrelated pids."""

from __future__ import annotations

import contextlib
import json
import os
import resource
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from labkit.cli import app
from labkit.records import RequestRecord
from tests.support.processes import children_of

pytestmark = pytest.mark.integration

LABKIT = [sys.executable, "-m", "labkit"]


def _wait_for(what: str, check: Callable[[], bool], timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def _slow_config(tmp_path: Path, *, repeats: int = 150, first_token_ms: int = 5) -> Path:
    path = tmp_path / "slow.yaml"
    path.write_text(
        "name: slow\n"
        "providers: [{id: fake, kind: fake, "
        f"schedule: {{first_token_ms: {first_token_ms}, token_interval_ms: 1, tokens: 2}}}}]\n"
        f"experiments: [{{kind: single, prompt_cache: as_sent, "
        f"prompts: [a, b], repeats: {repeats}}}]\n"
    )
    return path


def _start_run(*args: str, **kwargs: Any) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [*LABKIT, "run", *args, "--no-report"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        **kwargs,
    )


def _run_dir(out: Path) -> Path:
    (run_dir,) = [p for p in out.iterdir() if p.is_dir()]
    return run_dir


def _line_count(path: Path) -> int:
    return len(path.read_text().splitlines()) if path.exists() else 0


def _records(run_dir: Path) -> list[RequestRecord]:
    out = []
    for line in (run_dir / "records.jsonl").read_text().splitlines():
        with contextlib.suppress(ValueError):
            out.append(RequestRecord.from_json_line(line))
    return out


def _manifest(run_dir: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((run_dir / "manifest.json").read_text())
    return data


def _started_run(
    tmp_path: Path, out: Path, records: int = 5, **config: int
) -> tuple[subprocess.Popen[str], Path]:
    proc = _start_run(str(_slow_config(tmp_path, **config)), "--out", str(out))
    _wait_for("the run folder", lambda: out.exists() and any(out.iterdir()))
    run_dir = _run_dir(out)
    _wait_for("a few records", lambda: _line_count(run_dir / "records.jsonl") >= records)
    return proc, run_dir


def _assert_complete(run_dir: Path, measured: int) -> None:
    assert _manifest(run_dir)["status"] == "completed"
    records = [r for r in _records(run_dir) if not r.warmup and r.error is None]
    assert len({r.plan_key for r in records}) == measured


# --- SIGTERM -------------------------------------------------------------------------------


def test_sigterm_is_like_ctrl_c_and_resume_finishes_the_run(tmp_path: Path) -> None:
    out = tmp_path / "out"
    proc, run_dir = _started_run(tmp_path, out)
    proc.send_signal(signal.SIGTERM)
    stdout, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 143, stderr
    assert "Traceback" not in stdout + stderr
    assert stderr.count("\n") == 1 and stderr.startswith("interrupted by SIGTERM: "), stderr
    assert f"labkit run --resume {run_dir}" in stderr
    manifest = _manifest(run_dir)
    assert manifest["status"] == "interrupted"
    kept = _records(run_dir)
    assert manifest["records"] == len(kept) >= 5

    resumed = subprocess.run(
        [*LABKIT, "run", "--resume", str(run_dir), "--no-report"], capture_output=True, text=True
    )
    assert resumed.returncode == 0, resumed.stderr
    _assert_complete(run_dir, 300)


@contextlib.contextmanager
def _fake_server_process() -> Iterator[str]:
    proc = subprocess.Popen(
        [*LABKIT, "fake-server", "--port", "0", "--first-token-ms", "20",
         "--token-interval-ms", "50", "--tokens", "40", "--log", os.devnull],
        stdout=subprocess.PIPE,
        text=True,
    )  # fmt: skip
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        yield line.split(" at ", 1)[1].split()[0]
    finally:
        proc.send_signal(signal.SIGTERM)  # the fake server stops on SIGTERM too
        proc.communicate(timeout=30)
        assert proc.returncode == 0


def _two_worker_level(
    tmp_path: Path, name: str, provider: str, requests: int, records: int
) -> tuple[subprocess.Popen[str], Path, list[int]]:
    """`labkit run` of a load level at concurrency 4 read by two worker processes, to
    ``tmp_path/runs``, once `records` lines are in its records file: the run, its folder
    and its workers' pids. `provider`: the provider entry's id and base URL."""
    cfg = tmp_path / "load.yaml"
    cfg.write_text(
        f"name: {name}\n"
        f"providers: [{{id: {provider}, kind: openai_compatible, model: m}}]\n"
        f"experiments: [{{kind: load, concurrency: [4], requests: {requests}, workers: 2, "
        "warmup: 1}]\n"
    )
    out = tmp_path / "runs"
    proc = _start_run(str(cfg), "--out", str(out))
    _wait_for("the run folder", lambda: out.exists() and any(out.iterdir()))
    run_dir = _run_dir(out)
    _wait_for("the level", lambda: _line_count(run_dir / "records.jsonl") >= records)
    workers = children_of(proc.pid)
    assert len(workers) == 2
    return proc, run_dir, workers


def test_sigterm_stops_the_worker_processes_whose_logs_stay_in_the_run_folder(
    tmp_path: Path,
) -> None:
    with _fake_server_process() as url:
        out = tmp_path / "runs"
        proc, run_dir, workers = _two_worker_level(
            tmp_path, "'../../escape'", f"'../../../escape/p', base_url: '{url}'", 400, 8
        )
        proc.send_signal(signal.SIGTERM)
        _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 143, stderr
    assert "Traceback" not in stderr
    _wait_for("the workers to exit", lambda: not any(Path(f"/proc/{p}").exists() for p in workers))
    assert _manifest(run_dir)["status"] == "interrupted"
    logs = list((run_dir / "worker-logs").iterdir())
    assert len(logs) == 2 and all(p.suffix == ".log" for p in logs)
    # Nothing was written anywhere but the run folder.
    assert sorted(p.name for p in tmp_path.iterdir()) == ["load.yaml", "runs"]
    assert [p.name for p in out.iterdir()] == [run_dir.name]


def test_a_worker_process_killed_mid_level_makes_the_level_partial_and_resume_finishes_it(
    tmp_path: Path,
) -> None:
    """A worker that dies mid-level (SIGKILL: no record of its own, no clean-up) leaves its
    share unsent: the other worker reads its share to the end, every finished record is
    kept, the answer says partial and how to finish it, and ``--resume`` runs the level
    again, which then answers whole."""
    with _fake_server_process() as url:
        # Two warm-ups (one a worker) and two measured records: the level has started.
        proc, run_dir, workers = _two_worker_level(
            tmp_path, "workers", f"p, base_url: '{url}'", 12, 4
        )
        os.kill(workers[0], signal.SIGKILL)
        stdout, stderr = proc.communicate(timeout=120)
        assert proc.returncode == 0, stderr
        assert "Traceback" not in stdout + stderr
        assert "exited with status -9 mid-level" in stdout + stderr, stdout + stderr
        manifest = _manifest(run_dir)
        assert manifest["status"] == "incomplete"
        assert "a worker process died mid-level (a partial level)" in manifest["unfinished"]["p"]
        measured = [r for r in _records(run_dir) if not r.warmup and r.error is None]
        assert 2 <= len(measured) < 12
        (answer,) = json.loads((run_dir / "lab.json").read_text())["answers"]
        assert answer["status"] == "partial"
        assert "Partial: a worker process died mid-level in concurrency 4" in answer["answer"]
        assert "labkit run --resume runs it again" in answer["answer"]
        (line,) = (run_dir / "worker-levels.jsonl").read_text().splitlines()
        level = json.loads(line)
        assert level["partial"] is True and level["died"] == {"0": -9}
        assert (level["experiment"], level["provider"], level["processes"]) == ("load", "p", 2)

        resumed = subprocess.run(
            [*LABKIT, "run", "--resume", str(run_dir), "--no-report"],
            capture_output=True,
            text=True,
        )
    assert resumed.returncode == 0, resumed.stderr
    assert _manifest(run_dir)["status"] == "completed"
    (answer,) = json.loads((run_dir / "lab.json").read_text())["answers"]
    assert answer["status"] == "ok" and "Partial" not in answer["answer"], answer
    lines = (run_dir / "worker-levels.jsonl").read_text().splitlines()
    assert [json.loads(line)["partial"] for line in lines] == [True, False]
    assert all(r.error is None for r in _records(run_dir))  # nothing lost was recorded wrong


# --- The folder lock -----------------------------------------------------------------------


def test_a_second_resume_of_a_folder_in_use_is_refused_and_the_lock_dies_with_its_holder(
    tmp_path: Path,
) -> None:
    out = tmp_path / "out"
    # 20 requests of 300 ms: the first run is still busy when the second one starts.
    first, run_dir = _started_run(tmp_path, out, records=2, repeats=10, first_token_ms=300)
    try:
        second = subprocess.run(
            [*LABKIT, "run", "--resume", str(run_dir), "--no-report"],
            capture_output=True,
            text=True,
        )
    finally:
        first.kill()  # SIGKILL: no clean-up at all, the kernel drops the lock
        first.communicate(timeout=30)
    assert second.returncode == 1
    assert second.stderr.count("\n") == 1 and second.stderr.startswith("error: "), second.stderr
    assert f"run folder {run_dir} is in use by another labkit process (pid {first.pid})" in (
        second.stderr
    )
    assert "Traceback" not in second.stderr
    assert _manifest(run_dir)["status"] == "running"  # the refused resume wrote nothing
    resumed = subprocess.run(
        [*LABKIT, "run", "--resume", str(run_dir), "--no-report"], capture_output=True, text=True
    )
    assert resumed.returncode == 0, resumed.stderr
    _assert_complete(run_dir, 20)


# --- A really full disk --------------------------------------------------------------------


@contextlib.contextmanager
def _small_filesystem(path: Path) -> Iterator[Callable[[], None] | None]:
    """A 256 KiB tmpfs at `path` (yields a function that grows it), or None without the
    right to mount one."""
    path.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(path)], capture_output=True
    )
    if mounted.returncode != 0:
        yield None
        return
    try:

        def grow() -> None:
            subprocess.run(["mount", "-o", "remount,size=4m", str(path)], check=True)

        yield grow
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False)


def _file_size_limit(limit: int) -> Callable[[], None]:
    def apply() -> None:  # in the child: writes past `limit` bytes fail with EFBIG
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    return apply


def test_a_full_disk_stops_the_run_with_one_line_and_resume_finishes_it(tmp_path: Path) -> None:
    with _small_filesystem(tmp_path / "small") as grow:
        out = tmp_path / "small" / "runs"
        config = str(_slow_config(tmp_path, repeats=100))
        if grow is not None:  # a real ENOSPC
            full = subprocess.run(
                [*LABKIT, "run", config, "--out", str(out), "--no-report"],
                capture_output=True,
                text=True,
            )
            reason = "No space left on device (ENOSPC)"
        else:  # not allowed to mount: a real EFBIG from the kernel's file size limit
            full = subprocess.run(
                [*LABKIT, "run", config, "--out", str(out), "--no-report"],
                capture_output=True,
                text=True,
                preexec_fn=_file_size_limit(150_000),
            )
            reason = "File too large (EFBIG)"
        run_dir = _run_dir(out)
        assert full.returncode == 1, full.stderr
        assert full.stderr.count("\n") == 1 and full.stderr.startswith("error: "), full.stderr
        assert f"cannot write {run_dir / 'records.jsonl'}: {reason}" in full.stderr
        assert f"labkit run --resume {run_dir}" in full.stderr
        assert "Traceback" not in full.stdout + full.stderr
        manifest = _manifest(run_dir)
        assert manifest["status"] == "failed" and reason in manifest["failure"]
        kept = _records(run_dir)
        assert manifest["records"] == len(kept) > 10  # all that was written is still there

        if grow is not None:
            grow()
        resumed = subprocess.run(
            [*LABKIT, "run", "--resume", str(run_dir), "--no-report"],
            capture_output=True,
            text=True,
        )
        assert resumed.returncode == 0, resumed.stderr
        _assert_complete(run_dir, 200)
        assert {r.record_id for r in kept} <= {r.record_id for r in _records(run_dir)}


# --- labkit server stop --------------------------------------------------------------------


def _proc_start(pid: int) -> int:
    stat = Path(f"/proc/{pid}/stat").read_text()
    return int(stat.rsplit(")", 1)[-1].split()[19])


def _state(pid: int, *, proc_start: int | None, binary: str = "/opt/llama-server") -> str:
    return json.dumps(
        {
            "pid": pid,
            "port": 18080,
            "base_url": "http://127.0.0.1:18080",
            "log_path": "/tmp/server.log",
            "model_path": "/tmp/m.gguf",
            "model_sha256": "0" * 64,
            "binary": binary,
            "backend": "cpu",
            "ctx_size": 512,
            "slots": 1,
            "started_at": "2026-01-01T00:00:00+00:00",
            "proc_start": proc_start,
        }
    )


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("LABKIT_CACHE_DIR", str(tmp_path / "cache"))
    (tmp_path / "cache").mkdir()
    return tmp_path / "cache"


@pytest.fixture
def bystander() -> Iterator[subprocess.Popen[bytes]]:
    """An unrelated process a stale state file could point at."""
    proc = subprocess.Popen(["sleep", "60"])
    yield proc
    proc.kill()
    proc.wait()


@pytest.mark.parametrize("known_start", [False, True])
def test_server_stop_never_signals_a_process_it_cannot_confirm(
    cache: Path, bystander: subprocess.Popen[bytes], known_start: bool
) -> None:
    start = _proc_start(bystander.pid) if known_start else None
    (cache / "server.json").write_text(_state(bystander.pid, proc_start=start))
    result = CliRunner().invoke(app, ["server", "stop"])
    assert result.exit_code == 1
    assert result.stderr.startswith(f"error: not stopping pid {bystander.pid}: ")
    assert result.stderr.count("\n") == 1, result.stderr
    time.sleep(0.2)
    assert bystander.poll() is None, "an unrelated process was signalled"
    if known_start:  # its command line proves it is another process: the stale state goes
        assert "it is not the labkit server (its command line is 'sleep 60')" in result.stderr
        assert not (cache / "server.json").exists()
    else:
        assert "cannot confirm it is the labkit server" in result.stderr
        assert (cache / "server.json").exists()


def test_server_stop_stops_a_confirmed_server(cache: Path) -> None:
    binary = "/opt/labkit-test/llama-server"
    sleeper = "import time; time.sleep(60)"
    server = subprocess.Popen([binary, "-c", sleeper, "--port", "18080"], executable=sys.executable)
    try:
        _wait_for("its command line", lambda: Path(f"/proc/{server.pid}/cmdline").read_bytes()
                  .startswith(binary.encode()))  # fmt: skip
        state = _state(server.pid, proc_start=_proc_start(server.pid), binary=binary)
        (cache / "server.json").write_text(state)
        result = CliRunner().invoke(app, ["server", "stop"])
        assert result.exit_code == 0, result.output
        assert f"stopped llama-server (pid {server.pid})" in result.stdout
        assert server.wait(timeout=30) == -signal.SIGTERM
        assert not (cache / "server.json").exists()
    finally:
        if server.poll() is None:
            server.kill()
            server.wait()


# --- The fake server and malformed requests ------------------------------------------------


@pytest.mark.parametrize(
    ("request_bytes", "message"),
    [
        (b"POST /v1/chat/completions HTTP/1.1\r\ncontent-length: -4\r\n\r\n", "malformed"),
        (b"POST /v1/chat/completions HTTP/1.1\r\ncontent-length: abc\r\n\r\n", "malformed"),
        (b"GARBAGE\r\n\r\n", "malformed"),
        (b"POST /v1/chat/completions HTTP/1.1\r\ncontent-length: 3\r\n\r\n{x}", "not JSON"),
        (b"POST /v1/chat/completions HTTP/1.1\r\ncontent-length: 2\r\n\r\n[]", "JSON object"),
        (
            b'POST /v1/chat/completions HTTP/1.1\r\ncontent-length: 17\r\n\r\n{"messages": [1]}',
            "messages must be",
        ),
        (
            b'POST /v1/chat/completions HTTP/1.1\r\ncontent-length: 19\r\n\r\n{"max_tokens": "9"}',
            "max_tokens must be",
        ),
    ],
)
def test_the_fake_server_answers_a_malformed_request_with_400_and_keeps_serving(
    request_bytes: bytes, message: str
) -> None:
    import asyncio

    from labkit.providers.fake import FakeSchedule
    from labkit.truth.process import TruthServer

    async def exchange() -> tuple[bytes, bytes]:
        with TruthServer.of(FakeSchedule(first_token_ms=0, tokens=1)) as server:
            reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
            writer.write(request_bytes)
            bad = await asyncio.wait_for(reader.read(4096), 10)
            writer.close()
            reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
            body = b'{"messages": [{"role": "user", "content": "hi"}], "stream": true}'
            writer.write(
                b"POST /v1/chat/completions HTTP/1.1\r\nconnection: close\r\n"
                b"content-length: %d\r\n\r\n%s" % (len(body), body)
            )
            good = await asyncio.wait_for(reader.read(), 10)
            writer.close()
            return bad, good

    bad, good = asyncio.run(exchange())
    assert bad.startswith(b"HTTP/1.1 400 ") and message.encode() in bad, bad
    assert good.startswith(b"HTTP/1.1 200 OK") and b"[DONE]" in good
