"""A connect that fails is told in the user's words, not the transport's: a closed port on
127.0.0.1 is "connection refused by 127.0.0.1:PORT" in the record and the run's summary, on
httpx (which says "All connection attempts failed"), labkit's lean transport and the SDK path
(whose "Connection error." wraps the same); a failed name lookup and an unreachable network
are named too. `error.kind` stays `connection`."""

from __future__ import annotations

import errno
import json
import socket
from pathlib import Path

import httpx
import pytest
from typer.testing import CliRunner

from labkit.cli import app
from labkit.measurement.failures import connect_failure

pytestmark = pytest.mark.integration


def _closed_port() -> int:
    """A port on 127.0.0.1 that nothing listens on (bound, then closed)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_a_closed_port_is_connection_refused_on_every_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    port = _closed_port()
    url = f"http://127.0.0.1:{port}/v1"
    monkeypatch.setenv("LABKIT_CONNECT_TEST_KEY", "placeholder-key")
    cfg = tmp_path / "c.yaml"
    cfg.write_text(
        "name: refused\nproviders:\n"
        + "".join(
            f"  - {{id: {pid}, kind: {kind}, model: m, base_url: '{url}', retries: 0{extra}}}\n"
            for pid, kind, extra in [
                ("httpx", "openai_compatible", ", transport: httpx"),
                ("lean", "openai_compatible", ", transport: lean"),
                ("sdk", "openai", ", client: sdk, api_key_env: LABKIT_CONNECT_TEST_KEY"),
            ]
        )
        + "experiments: [{kind: single, prompts: [hi], repeats: 1, warmup: 0}]\n",
        encoding="utf-8",
    )
    out = tmp_path / "out"
    result = CliRunner().invoke(app, ["run", str(cfg), "--out", str(out), "--no-report"])
    assert result.exit_code == 1, result.output
    said = f"connection refused by 127.0.0.1:{port}"
    (folder,) = out.iterdir()
    records = [json.loads(x) for x in (folder / "records.jsonl").read_text().splitlines()]
    assert {r["provider"] for r in records} == {"httpx", "lean", "sdk"}
    for r in records:
        assert r["error"]["kind"] == "connection", r
        assert r["error"]["message"].startswith(said), r["error"]
    for text in (result.output, (folder / "summary.txt").read_text()):
        assert said in text
        assert "All connection attempts failed" not in text
        assert "connection lost" not in text


def _connect_error(cause: OSError, url: str = "http://llm.example:8080/v1") -> httpx.ConnectError:
    """A ConnectError raised from `cause`, as httpx raises it."""
    try:
        try:
            raise cause
        except OSError as exc:
            raise httpx.ConnectError(
                "All connection attempts failed", request=httpx.Request("POST", url)
            ) from exc
    except httpx.ConnectError as exc:
        return exc


@pytest.mark.parametrize(
    ("cause", "said"),
    [
        (
            socket.gaierror(socket.EAI_NONAME, "Name or service not known"),
            "llm.example: no such host (name lookup failed: Name or service not known)",
        ),
        (
            OSError(errno.ENETUNREACH, "Network is unreachable"),
            "llm.example:8080 unreachable: no route to it (Network is unreachable)",
        ),
        (
            OSError(errno.EHOSTUNREACH, "No route to host"),
            "llm.example:8080 unreachable: no route to it (No route to host)",
        ),
        (
            ConnectionRefusedError(errno.ECONNREFUSED, "Connect call failed"),
            "connection refused by llm.example:8080 (nothing listens on that port)",
        ),
        (
            OSError(errno.EACCES, "Permission denied"),
            "could not connect to llm.example:8080: Permission denied",
        ),
    ],
)
def test_each_connect_failure_is_named(cause: OSError, said: str) -> None:
    assert connect_failure(_connect_error(cause), str) == said


def test_a_refusal_inside_a_group_and_an_https_default_port() -> None:
    group = ExceptionGroup("attempts", [ConnectionRefusedError(errno.ECONNREFUSED, "refused")])
    try:
        try:
            raise OSError("All connection attempts failed") from group
        except OSError as exc:
            raise httpx.ConnectError(
                "All connection attempts failed", request=httpx.Request("GET", "https://[::1]/")
            ) from exc
    except httpx.ConnectError as exc:
        assert (
            connect_failure(exc, str)
            == "connection refused by [::1]:443 (nothing listens on that port)"
        )


def test_other_failures_are_not_connect_failures() -> None:
    assert connect_failure(httpx.ReadError("reset"), str) is None
    assert connect_failure(ValueError("x"), str) is None
