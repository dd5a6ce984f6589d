"""Shared test fixtures, the test tiers, and the kill switches that keep tests off the network.

Every test belongs to exactly one tier, set with a marker (collection fails otherwise):

- ``unit``: no sockets at all (a socket call fails the test), a scripted clock, no bound on
  elapsed time. Needs only the virtualenv: ``make test-unit``.
- ``integration``: real sockets on 127.0.0.1 and real time (servers in-process or in a child
  process, real sleeps and timeouts). ``make test-integration``.
- ``e2e``: the real llama-server and model, or a real browser. ``make test`` runs every tier.
"""

from __future__ import annotations

import ipaddress
import os
import socket
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import settings

TIERS = ("unit", "integration", "e2e")

# The real llama-server and PostgreSQL fixtures (session-scoped), for tests in any folder.
pytest_plugins = ["tests.support.local_server", "tests.support.postgres"]


# --- Hypothesis profiles for the property tests --------------------------------------------
# ``ci`` (the default): derandomized, so every run tries the same examples and a failure
# reproduces; no example database is written. ``dev`` (``HYPOTHESIS_PROFILE=dev``): random
# examples, ten times as many, remembered in ``.hypothesis/``. Examples may take long (a
# 10,000-deep value, a slow core), so no deadline.
settings.register_profile("ci", max_examples=60, derandomize=True, database=None, deadline=None)
settings.register_profile("dev", max_examples=600, deadline=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Refuse to run a collection in which a test has no tier, or more than one.

    `tryfirst`, so that `-m unit` cannot deselect an untiered test before it is seen.
    """
    problems = []
    for item in items:
        tiers = sorted({mark.name for mark in item.iter_markers() if mark.name in TIERS})
        if len(tiers) != 1:
            found = "no tier" if not tiers else "two tiers (" + ", ".join(tiers) + ")"
            problems.append(f"  {item.nodeid}: {found}")
    if problems:
        raise pytest.UsageError(
            "every test needs exactly one tier marker (pytest.mark.unit, .integration or .e2e; "
            "see tests/conftest.py):\n" + "\n".join(problems)
        )


# --- Kill switch: no test may reach a real API -------------------------------------------
# Only loopback and Unix sockets are allowed. A test that tries anything else fails loudly
# instead of silently sending a request (and a key) to a hosted provider.
# In the unit tier no socket may be bound, connected, listened on or sent from at all, loopback
# included (creating one is allowed: asyncio's event loop wraps a socketpair for its wake-ups).

_real_connect = socket.socket.connect
_real_connect_ex = socket.socket.connect_ex
_real_bind = socket.socket.bind
_real_listen = socket.socket.listen
_real_sendto = socket.socket.sendto
_real_getaddrinfo = socket.getaddrinfo


class NetworkBlockedError(ConnectionRefusedError):
    """Raised when a test tries to reach a non-loopback address (an OSError, so HTTP stacks
    report it as the connection failure it stands for)."""


class SocketInUnitTestError(RuntimeError):
    """Raised when a unit-tier test binds, connects or listens on a socket."""


# The socket calls the running unit test made; None while the running test is not a unit test.
_unit_socket_calls: list[str] | None = None


def _refuse_in_unit_tier(call: str, address: Any) -> None:
    if _unit_socket_calls is None:
        return
    attempt = f"socket.{call}({address!r})"
    _unit_socket_calls.append(attempt)
    raise SocketInUnitTestError(
        f"a unit test may not use sockets (tried {attempt}); a test that needs a real socket "
        "belongs in the integration tier: pytestmark = pytest.mark.integration"
    )


def _is_loopback_host(host: Any) -> bool:
    if isinstance(host, bytes):
        host = host.decode()
    if not isinstance(host, str):
        return False
    if host in ("localhost", "localhost.localdomain", ""):
        return True
    try:
        address = ipaddress.ip_address(host.split("%")[0])
    except ValueError:
        return False
    mapped = getattr(address, "ipv4_mapped", None)  # ::ffff:127.0.0.1 is 127.0.0.1
    return (mapped or address).is_loopback


def _check_address(address: Any) -> None:
    if isinstance(address, tuple) and address and not _is_loopback_host(address[0]):
        raise NetworkBlockedError(
            f"tests may not reach the network (tried {address[0]!r}); mock it with respx "
            "or use a server on 127.0.0.1"
        )


def _guarded_connect(self: socket.socket, address: Any) -> None:
    _check_address(address)
    _refuse_in_unit_tier("connect", address)
    _real_connect(self, address)


def _guarded_connect_ex(self: socket.socket, address: Any) -> int:
    _check_address(address)
    _refuse_in_unit_tier("connect_ex", address)
    return _real_connect_ex(self, address)


def _guarded_bind(self: socket.socket, address: Any) -> None:
    _refuse_in_unit_tier("bind", address)
    _real_bind(self, address)


def _guarded_listen(self: socket.socket, *backlog: int) -> None:
    _refuse_in_unit_tier("listen", self.getsockname())
    _real_listen(self, *backlog)


def _guarded_sendto(self: socket.socket, data: Any, *flags_and_address: Any) -> int:
    address = flags_and_address[-1]  # sendto(data, address) or sendto(data, flags, address)
    _check_address(address)
    _refuse_in_unit_tier("sendto", address)
    return _real_sendto(self, data, *flags_and_address)


def _guarded_getaddrinfo(host: Any, *args: Any, **kwargs: Any) -> Any:
    if host is not None and not _is_loopback_host(host):
        raise NetworkBlockedError(f"tests may not resolve or reach {host!r}")
    return _real_getaddrinfo(host, *args, **kwargs)


@pytest.fixture(autouse=True, scope="session")
def _block_network() -> Iterator[None]:
    socket.socket.connect = _guarded_connect  # type: ignore[method-assign]
    socket.socket.connect_ex = _guarded_connect_ex  # type: ignore[method-assign]
    socket.socket.bind = _guarded_bind  # type: ignore[method-assign]
    socket.socket.listen = _guarded_listen  # type: ignore[method-assign]
    socket.socket.sendto = _guarded_sendto  # type: ignore[method-assign,assignment]
    socket.getaddrinfo = _guarded_getaddrinfo
    try:
        yield
    finally:
        socket.socket.connect = _real_connect  # type: ignore[method-assign]
        socket.socket.connect_ex = _real_connect_ex  # type: ignore[method-assign]
        socket.socket.bind = _real_bind  # type: ignore[method-assign]
        socket.socket.listen = _real_listen  # type: ignore[method-assign]
        socket.socket.sendto = _real_sendto  # type: ignore[method-assign]
        socket.getaddrinfo = _real_getaddrinfo


_CALL_FAILED = pytest.StashKey[bool]()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    """Note whether the test itself failed, so a socket error it raised is reported once."""
    report = yield
    if report.when == "call":
        item.stash[_CALL_FAILED] = report.failed
    return report


@pytest.fixture(autouse=True)
def _unit_tier_has_no_sockets(request: pytest.FixtureRequest) -> Iterator[None]:
    """Fail a unit test that touched a socket, even where the code under test caught the error
    (the recorder turns most exceptions into an error record)."""
    global _unit_socket_calls
    if request.node.get_closest_marker("unit") is None:
        yield
        return
    calls: list[str] = []
    _unit_socket_calls = calls
    try:
        yield
    finally:
        _unit_socket_calls = None
    if calls and not request.node.stash.get(_CALL_FAILED, False):
        pytest.fail(
            "this unit test used sockets (" + "; ".join(calls) + "): move it to the integration "
            "tier (pytest.mark.integration) or mock the transport",
            pytrace=False,
        )


@pytest.fixture(autouse=True)
def _no_real_keys(monkeypatch: pytest.MonkeyPatch) -> None:
    """Tests never see the developer's real keys."""
    for name in list(os.environ):
        if name.endswith("_API_KEY") or name in ("OPENAI_BASE_URL", "ANTHROPIC_BASE_URL"):
            monkeypatch.delenv(name, raising=False)
