"""``labkit setup`` and ``labkit server start|status|stop`` through the CLI runner: real
server, and one clear red line (no traceback, exit code 1) for each bad input."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner, Result

import labkit.local
from labkit.cli.local import register
from labkit.local import LocalSetup
from labkit.local.detached import server_status
from tests.support.processes import CRASHING_SERVER, children_of, fake_binary, wait_gone

pytestmark = pytest.mark.e2e


def _app() -> typer.Typer:
    app = typer.Typer()

    @app.callback()
    def main() -> None:
        """labkit (test app)."""

    register(app)
    return app


@pytest.fixture
def isolated_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A private cache dir (for server.json); the binary and model are passed explicitly."""
    cache = tmp_path / "cache"
    monkeypatch.setenv("LABKIT_CACHE_DIR", str(cache))
    monkeypatch.delenv("LABKIT_LLAMA_SERVER", raising=False)
    yield cache
    from labkit.local.detached import stop_detached

    stop_detached()


def _invoke(*args: str) -> Result:
    return CliRunner().invoke(_app(), list(args))


def _assert_clean_error(result: Result, message: str, *, one_line: bool = True) -> None:
    """Exit code 1, ``error: ...`` on stderr, nothing on stdout, no traceback."""
    assert result.exit_code == 1, result.output
    assert result.stderr.startswith("error: "), result.stderr
    assert message in result.stderr
    assert result.stdout == ""
    assert "Traceback" not in result.output
    if one_line:
        assert result.stderr.count("\n") == 1, result.stderr


def _real(setup: LocalSetup) -> list[str]:
    return ["--server", str(setup.server.path), "--model", str(setup.model.path)]


def test_setup_prints_what_it_found(isolated_cache: Path, local_setup: LocalSetup) -> None:
    result = _invoke("setup", *_real(local_setup))
    assert result.exit_code == 0, result.output
    assert str(local_setup.server.path) in result.stdout
    assert "backend cpu, from config" in result.stdout
    assert f"sha256 {local_setup.model.sha256}" in result.stdout


def test_server_start_status_stop(isolated_cache: Path, local_setup: LocalSetup) -> None:
    started = _invoke("server", "start", "--ctx-size", "512", *_real(local_setup))
    assert started.exit_code == 0, started.output
    state = server_status()
    assert state is not None and state.healthy
    assert f"running at {state.base_url} (pid {state.pid})" in started.stdout
    assert state.pid not in children_of(os.getpid())  # detached: not our child

    again = _invoke("server", "start", *_real(local_setup))
    _assert_clean_error(again, "a labkit server is already running")

    status = _invoke("server", "status")
    assert status.exit_code == 0 and "healthy" in status.stdout

    stopped = _invoke("server", "stop")
    assert stopped.exit_code == 0 and f"stopped llama-server (pid {state.pid})" in stopped.stdout
    assert wait_gone(state.pid)
    assert _invoke("server", "status").exit_code == 1
    assert "no labkit server was running" in _invoke("server", "stop").stdout


def test_missing_model(isolated_cache: Path, local_setup: LocalSetup, tmp_path: Path) -> None:
    missing = tmp_path / "nope.gguf"
    for args in (["setup"], ["server", "start"]):
        result = _invoke(*args, "--server", str(local_setup.server.path), "--model", str(missing))
        _assert_clean_error(result, f"model file {missing} does not exist")


def test_model_that_is_not_gguf(
    isolated_cache: Path, local_setup: LocalSetup, tmp_path: Path
) -> None:
    bogus = tmp_path / "model.gguf"
    bogus.write_bytes(b"<html>not a model</html>")
    result = _invoke("setup", "--server", str(local_setup.server.path), "--model", str(bogus))
    _assert_clean_error(result, f"model file {bogus} is not a GGUF file")


def test_port_already_taken(isolated_cache: Path, local_setup: LocalSetup) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        port = sock.getsockname()[1]
        result = _invoke("server", "start", "--port", str(port), *_real(local_setup))
    _assert_clean_error(result, f"port {port} on 127.0.0.1 is already in use")
    assert server_status() is None


def test_binary_that_exits_at_once(
    isolated_cache: Path, local_setup: LocalSetup, tmp_path: Path
) -> None:
    broken = fake_binary(tmp_path, "exit3", "exit 3")
    result = _invoke("setup", "--server", str(broken), "--model", str(local_setup.model.path))
    _assert_clean_error(result, f"the configured server path {broken} does not run")

    crashing = fake_binary(tmp_path, "crashing", CRASHING_SERVER)
    result = _invoke(
        "server", "start", "--server", str(crashing), "--model", str(local_setup.model.path)
    )
    _assert_clean_error(result, "llama-server exited while starting", one_line=False)
    assert "fatal: fake server cannot start" in result.stderr
    assert server_status() is None


def test_missing_server_binary(
    isolated_cache: Path, local_setup: LocalSetup, tmp_path: Path
) -> None:
    result = _invoke(
        "setup", "--server", str(tmp_path / "nope"), "--model", str(local_setup.model.path)
    )
    _assert_clean_error(result, f"the configured server path {tmp_path / 'nope'} does not exist")


def test_errors_in_a_real_process_have_no_traceback(
    isolated_cache: Path, local_setup: LocalSetup, tmp_path: Path
) -> None:
    script = (
        "import typer, sys\n"
        "from labkit.cli.local import register\n"
        "app = typer.Typer()\n"
        "@app.callback()\n"
        "def main() -> None: pass\n"
        "register(app)\n"
        "app(sys.argv[1:])\n"
    )
    missing = tmp_path / "missing.gguf"
    repo = Path(labkit.local.__file__).resolve().parents[2]
    done = subprocess.run(
        [sys.executable, "-c", script, "setup", "--model", str(missing)],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(repo)},
        timeout=60,
    )
    assert done.returncode == 1
    assert done.stderr == f"error: model file {missing} does not exist\n"
    assert done.stdout == ""
