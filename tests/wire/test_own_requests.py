"""Every request labkit makes of its own has a deadline and a size bound, on real servers.

Describing a server (`/props`, `/api/version`), tokenizing (`/tokenize`, `count_tokens`,
`input_tokens`, `/apply-template`), fetching stats after the run and scraping `/metrics`
each meet a server on 127.0.0.1 or ::1 that never finishes its answer (a byte at a time,
forever) and one that sends far too much; each ends with an error naming the bound, and
the provider is free. The bounds are shrunk here so the tests are short; their real values
are in docs/guarantees.md. A Ray address where nothing listens is refused before Ray starts.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from labkit.errors import RunError
from labkit.providers import Provider
from labkit.runner import scrape
from labkit.runner.ray_address import check_ray_address, ray_endpoint
from labkit.runner.scrape import MetricsScraper
from labkit.wire import connections
from labkit.wire.connections import AnswerTooLarge, Bound, DeadlinePassed
from tests.providers.streams import make_provider
from tests.support.extras import requires_ray
from tests.support.misbehaving import MisbehavingServer, Reply, http_head, repeat

pytestmark = pytest.mark.integration

HOSTS = ["127.0.0.1", "::1"]
SHORT = Bound(deadline_s=1.0, max_bytes=64 * 1024)


def _never_ends(_: bytes) -> Iterator[bytes | float]:
    """A JSON answer whose body comes a byte at a time and never ends."""
    yield http_head(200, {"content-type": "application/json", "content-length": "100000000"})
    yield b'{"tokens": ['
    while True:
        yield b" "
        yield 0.05


def _too_much(_: bytes) -> Reply:
    """A chunked JSON answer of 64 MiB, sent as fast as the socket takes it."""
    head = http_head(200, {"content-type": "application/json", "transfer-encoding": "chunked"})
    block = b" " * (1024 * 1024)
    return [head, *repeat(b"%x\r\n%s\r\n" % (len(block), block), 64)]


Call = Callable[[Provider], Awaitable[Any]]


async def _stats_later(provider: Provider) -> Any:
    async with provider.connections.side_client() as client:
        return await provider.stats_later(client, "gen-1")


#: (name, provider kind, base_url suffix, extra settings, bound patched, the call)
CASES: list[tuple[str, str, str, dict[str, Any], str, Call]] = [
    ("llamacpp-describe", "llamacpp", "", {}, "DESCRIBE", lambda p: p.describe()),
    ("ollama-describe", "ollama", "", {}, "DESCRIBE", lambda p: p.describe()),
    ("llamacpp-tokenize", "llamacpp", "", {}, "TOKENIZE", lambda p: p.tokenize("hi")),
    ("llamacpp-tokenized", "llamacpp", "", {}, "TOKENIZE", lambda p: p.tokenized("hi")),
    (
        "llamacpp-chat-prompt",
        "llamacpp",
        "",
        {},
        "TOKENIZE",
        lambda p: p.count_chat_prompt([{"role": "user", "content": "hi"}]),
    ),
    (
        "compatible-tokenized",
        "openai_compatible",
        "/v1",
        {},
        "TOKENIZE",
        lambda p: p.tokenized("hi"),
    ),
    ("anthropic-count", "anthropic", "", {}, "TOKENIZE", lambda p: p.count_tokens("hi")),
    ("responses-count", "openai_responses", "/v1", {}, "TOKENIZE", lambda p: p.count_tokens("hi")),
    (
        "stats-later",
        "openai_compatible",
        "/api/v1",
        {"generation_stats": True},
        "STATS_LATER",
        _stats_later,
    ),
]


def _run(case: tuple[str, str, str, dict[str, Any], str, Call], base_url: str) -> BaseException:
    _, kind, suffix, extra, _, call = case

    async def main() -> BaseException:
        provider = make_provider(kind, api_key="k-own", base_url=base_url + suffix, **extra)
        try:
            await call(provider)
        except httpx.HTTPError as exc:
            return exc
        finally:
            await provider.aclose()
        raise AssertionError("the call returned")

    return asyncio.run(main())


@pytest.fixture
def short_bounds(monkeypatch: pytest.MonkeyPatch) -> None:
    import labkit.providers.anthropic as anthropic
    import labkit.providers.llamacpp as llamacpp
    import labkit.providers.ollama as ollama
    import labkit.providers.openai_compatible as compatible
    import labkit.providers.openai_responses as responses

    for module in (anthropic, llamacpp, ollama, compatible, responses, connections):
        for name in ("DESCRIBE", "TOKENIZE", "STATS_LATER"):
            if hasattr(module, name):
                monkeypatch.setattr(module, name, SHORT)


@pytest.mark.usefixtures("short_bounds")
@pytest.mark.parametrize("host", HOSTS)
@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_an_answer_that_never_ends_meets_the_deadline(
    case: tuple[str, str, str, dict[str, Any], str, Call], host: str
) -> None:
    with MisbehavingServer(_never_ends, host=host) as server:
        exc = _run(case, server.base_url)
        assert server.requests  # it did reach the server
    assert isinstance(exc, DeadlinePassed), exc
    assert "deadline of 1 s" in str(exc)  # not the provider's read timeout (120 s)


@pytest.mark.usefixtures("short_bounds")
@pytest.mark.parametrize("host", HOSTS)
@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_an_answer_too_large_meets_the_size_bound(
    case: tuple[str, str, str, dict[str, Any], str, Call], host: str
) -> None:
    with MisbehavingServer(_too_much, host=host) as server:
        exc = _run(case, server.base_url)
        time.sleep(0.2)
        sent = server.bytes_sent
    assert isinstance(exc, AnswerTooLarge), exc
    assert "bound of 65,536 bytes" in str(exc)
    assert sent < 32 * 1024 * 1024  # labkit stopped reading: the server could not send it all


def test_a_scrape_that_never_ends_is_a_failed_scrape(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(scrape, "SCRAPE_DEADLINE_S", 1.0)
    with MisbehavingServer(_never_ends) as server:
        scraper = MetricsScraper("p", server.base_url + "/metrics", tmp_path / "m.jsonl")
        scraper.start()
        time.sleep(2.5)
        report = scraper.stop()
    assert report.scrapes == 0 and report.failed >= 1
    assert report.first_error is not None and "within 1 s" in report.first_error


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.mark.parametrize("form", ["host:port", "ray://host:port", "auto"])
def test_a_ray_address_where_nothing_listens_is_one_line_at_once(
    form: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    port = _free_port()
    address = form.replace("host", "127.0.0.1").replace("port", str(port))
    if form == "auto":
        monkeypatch.setenv("RAY_ADDRESS", f"127.0.0.1:{port}")
    with pytest.raises(RunError) as caught:
        check_ray_address(address, deadline_s=5.0)
    message = str(caught.value)
    assert f"no Ray cluster at 127.0.0.1:{port}" in message and "ray start --head" in message


@requires_ray  # grpcio comes with the ray extra
def test_a_grpc_server_passes_the_check() -> None:
    """Ray's GCS and Ray Client's server are gRPC servers: a real one (grpcio) passes."""
    from concurrent.futures import ThreadPoolExecutor

    import grpc

    server = grpc.server(ThreadPoolExecutor(max_workers=1))
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        check_ray_address(f"127.0.0.1:{port}", deadline_s=5.0)
        check_ray_address(f"ray://127.0.0.1:{port}", deadline_s=5.0)
    finally:
        server.stop(None)


def _http_server_once(listening: socket.socket) -> None:
    conn, _ = listening.accept()
    with conn:
        conn.recv(1024)
        conn.sendall(b"HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\n\r\n")


@pytest.mark.parametrize(
    ("behaviour", "said"),
    [
        ("http", "it answered in HTTP/1 ('HTTP/1.1 400 Bad Request'), not gRPC"),
        ("silent", "it accepted the connection but said nothing within 1 s"),
        ("close", "the connection"),  # closed, or reset when our greeting was unread
    ],
)
def test_an_address_that_answers_but_is_not_ray_is_one_line_at_once(
    behaviour: str, said: str
) -> None:
    """Before, `ray.init` retried such an address for 94 s, then failed as 'a labkit bug'."""
    import threading

    with socket.create_server(("127.0.0.1", 0)) as listening:
        port = listening.getsockname()[1]
        if behaviour == "http":
            threading.Thread(target=_http_server_once, args=(listening,), daemon=True).start()
        elif behaviour == "close":
            threading.Thread(target=lambda: listening.accept()[0].close(), daemon=True).start()
        with pytest.raises(RunError) as caught:
            check_ray_address(f"127.0.0.1:{port}", deadline_s=1.0)
    message = str(caught.value)
    assert f"the server at 127.0.0.1:{port}" in message and "is not a Ray cluster" in message
    assert said in message and "\n" not in message


def test_which_ray_addresses_are_checked(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    assert ray_endpoint("local") is None and ray_endpoint("auto") is None
    assert ray_endpoint("ray://head") == ("head", 10001)
    assert ray_endpoint("ray://head:7000") == ("head", 7000)
    assert ray_endpoint("10.0.0.5:6379") == ("10.0.0.5", 6379)
    assert ray_endpoint("[::1]:6379") == ("::1", 6379)
    assert ray_endpoint("head:notaport") is None
    monkeypatch.setenv("RAY_ADDRESS", "gcs.cluster:6379")
    assert ray_endpoint("auto") == ("gcs.cluster", 6379)


def test_a_warm_up_that_never_ends_is_given_up(monkeypatch: pytest.MonkeyPatch) -> None:
    # Without the bound this never returns: a byte every 50 ms never meets the read timeout.
    monkeypatch.setattr(connections, "WARM_UP", SHORT)

    async def main(base_url: str) -> None:
        provider = make_provider("llamacpp", base_url=base_url, transport="httpx")
        try:
            await provider.connections.preconnect(2)
        finally:
            await provider.aclose()

    with MisbehavingServer(_never_ends) as server:
        asyncio.run(main(server.base_url))
        assert any(r.startswith(b"GET /health") for r in server.requests)


@requires_ray
def test_the_ray_executor_checks_its_address_before_ray_starts(tmp_path: Path) -> None:
    # Ray is imported, never initialised: the check refuses the address first.
    from labkit.config import RayExecutorSettings
    from labkit.runner.ray_executor import RayExecutor, ray_module

    port = _free_port()
    settings = RayExecutorSettings(address=f"127.0.0.1:{port}")
    executor = RayExecutor(settings, tmp_path, run_id="r", store_text=False)
    with pytest.raises(RunError, match=f"no Ray cluster at 127.0.0.1:{port}"):
        asyncio.run(executor._connect())
    assert not ray_module().is_initialized()


@requires_ray
def test_address_auto_with_no_cluster_is_one_line_not_a_bug(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`address: auto` with no RAY_ADDRESS and no cluster here: Ray's ConnectionError was
    reported as 'internal error (a labkit bug)'; now one line saying what to do."""
    from labkit.config import RayExecutorSettings
    from labkit.runner.ray_executor import RayExecutor, ray_module

    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    monkeypatch.setenv("RAY_TMPDIR", str(tmp_path))  # no cluster's address file is found here
    executor = RayExecutor(
        RayExecutorSettings(address="auto"), tmp_path, run_id="r", store_text=False
    )
    with pytest.raises(RunError) as caught:
        asyncio.run(executor._connect())
    message = str(caught.value)
    assert message.startswith("executor.address auto found no running Ray cluster on this host")
    assert "ray start --head" in message and "labkit bug" not in message
    assert not ray_module().is_initialized()


@requires_ray
def test_a_non_ray_server_as_the_address_fails_the_run_in_one_line(tmp_path: Path) -> None:
    """End to end: `labkit run` with executor.address at an HTTP server on 127.0.0.1 stops
    at once with one line naming it, never 'a labkit bug' (the provider is not reached)."""
    import threading

    from typer.testing import CliRunner

    from labkit.cli import app

    with socket.create_server(("127.0.0.1", 0)) as listening:
        port = listening.getsockname()[1]
        threading.Thread(target=_http_server_once, args=(listening,), daemon=True).start()
        cfg = tmp_path / "c.yaml"
        cfg.write_text(
            "name: ray-address\n"
            f"executor: {{kind: ray, address: '127.0.0.1:{port}'}}\n"
            "providers: [{id: fake, kind: fake, schedule: {first_token_ms: 0, "
            "token_interval_ms: 0, tokens: 2}}]\n"
            "experiments: [{kind: load, concurrency: [1], requests: 1, warmup: 0, "
            "prompts: [hi]}]\n",
            encoding="utf-8",
        )
        result = CliRunner().invoke(
            app, ["run", str(cfg), "--out", str(tmp_path / "out"), "--no-report"]
        )
    assert result.exit_code != 0
    assert f"the server at 127.0.0.1:{port}" in result.output, result.output
    assert "is not a Ray cluster" in result.output and "labkit bug" not in result.output


def _answer_once(listening: socket.socket, reply: bytes) -> None:
    conn, _ = listening.accept()
    with conn, contextlib.suppress(OSError):
        conn.settimeout(2.0)
        greeting = b""
        while len(greeting) < 33:  # read it all: a close with it unread would reset instead
            chunk = conn.recv(64)
            if not chunk:
                break
            greeting += chunk
        conn.sendall(reply)


@settings(max_examples=60, deadline=None)
@given(reply=st.binary(max_size=40))
def test_whatever_an_address_answers_is_ray_or_one_line(reply: bytes) -> None:
    """The probe's reading of any answer (then a close): a pass only for an HTTP/2 SETTINGS
    frame header, else one RunError line; never another exception."""
    import threading

    with socket.create_server(("127.0.0.1", 0)) as listening:
        port = listening.getsockname()[1]
        threading.Thread(target=_answer_once, args=(listening, reply), daemon=True).start()
        try:
            check_ray_address(f"127.0.0.1:{port}", deadline_s=2.0)
        except RunError as exc:
            assert "\n" not in str(exc) and "\r" not in str(exc)
            assert len(reply) < 9 or reply[3] != 4
        else:
            assert len(reply) >= 9 and reply[3] == 4
