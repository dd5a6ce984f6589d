"""The managed llama-server against the real binary and model: health, info, timings, stop."""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import httpx
import pytest

from labkit.errors import ServerError
from labkit.local import MODEL_SHA256, LocalSetup, ManagedServer
from tests.support.processes import pid_alive

pytestmark = pytest.mark.e2e


def _client() -> httpx.Client:
    return httpx.Client(trust_env=False, timeout=30.0)


def test_health_is_ok(managed_server: ManagedServer) -> None:
    with _client() as client:
        response = client.get(f"{managed_server.base_url}/health")
    assert response.status_code == 200
    assert response.json() == {"status": "ok"}


def test_info_describes_the_server(managed_server: ManagedServer, local_setup: LocalSetup) -> None:
    info = managed_server.info()
    assert info["build_info"].startswith("b")
    assert info["backend"] == "cpu"
    assert info["gpu_name"] is None
    assert info["model_sha256"] == local_setup.model.sha256 == MODEL_SHA256
    assert info["model_path"] == str(local_setup.model.path)
    assert info["slots"] == 1
    assert info["ctx_size"] == info["ctx_size_server"] == 2048  # ctx_size is per slot
    assert info["pid"] == managed_server.pid and pid_alive(info["pid"])
    assert managed_server.base_url == f"http://127.0.0.1:{info['port']}"


def test_chat_stream_reports_timings(managed_server: ManagedServer) -> None:
    body = {
        "messages": [{"role": "user", "content": "Say hello."}],
        "max_tokens": 6,
        "temperature": 0,
        "ignore_eos": True,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    events = []
    with (
        _client() as client,
        client.stream("POST", f"{managed_server.base_url}/v1/chat/completions", json=body) as r,
    ):
        assert r.status_code == 200
        for line in r.iter_lines():
            if line.startswith("data: "):
                events.append(line.removeprefix("data: "))
    assert events[-1] == "[DONE]"
    last = json.loads(events[-2])
    assert last["choices"] == []
    assert last["usage"]["completion_tokens"] == 6
    timings = last["timings"]
    assert timings["prompt_ms"] > 0
    assert timings["predicted_ms"] > 0
    assert timings["predicted_n"] == 6


def test_tokenize_count_matches_server_prompt_count(managed_server: ManagedServer) -> None:
    prompt = "The quick brown fox jumps over the lazy dog. Timing matters: ttft, decode, itl."
    with _client() as client:
        tokens = client.post(f"{managed_server.base_url}/tokenize", json={"content": prompt})
        done = client.post(
            f"{managed_server.base_url}/completion",
            json={"prompt": prompt, "n_predict": 1, "cache_prompt": False, "temperature": 0},
        )
    count = len(tokens.json()["tokens"])
    assert count > 10
    assert done.json()["tokens_evaluated"] == count
    assert done.json()["timings"]["prompt_n"] == count


def test_stop_ends_the_process_and_is_idempotent(local_setup: LocalSetup) -> None:
    server = ManagedServer(local_setup, ctx_size=512)
    server.start()
    pid = server.pid
    assert pid is not None and server.is_running()
    server.check_alive()
    server.stop()
    assert not pid_alive(pid)
    assert not server.is_running()
    server.stop()  # again: nothing to do
    with pytest.raises(ServerError, match="not running"):
        server.check_alive()


def test_check_alive_reports_a_crash_during_the_run(
    local_setup: LocalSetup, tmp_path: Path
) -> None:
    with ManagedServer(local_setup, ctx_size=512, log_path=tmp_path / "server.log") as server:
        assert server.pid is not None
        os.kill(server.pid, signal.SIGKILL)
        deadline = time.monotonic() + 60  # a hang guard: generous for a busy host
        while server.is_running():  # reaped once all its threads are gone
            assert time.monotonic() < deadline
            time.sleep(0.02)
        with pytest.raises(ServerError, match=r"exited with code -9 during the run; see "):
            server.check_alive()
    assert not server.is_running()


def test_a_binary_that_exits_at_once_is_reported_with_its_log(
    crashing_setup: LocalSetup, tmp_path: Path
) -> None:
    server = ManagedServer(crashing_setup, log_path=tmp_path / "server.log")
    with pytest.raises(ServerError) as caught:
        server.start()
    message = str(caught.value)
    assert "exited with code 3 while starting" in message
    assert "fatal: fake server cannot start" in message
    assert not server.is_running()


def test_a_taken_port_is_a_clear_error(local_setup: LocalSetup) -> None:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        port = sock.getsockname()[1]
        server = ManagedServer(local_setup, port=port)
        with pytest.raises(ServerError, match=f"port {port} on 127.0.0.1 is already in use"):
            server.start()
        assert server.pid is None
