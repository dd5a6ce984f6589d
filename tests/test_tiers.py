"""The test tiers themselves (tests/conftest.py): a test with no tier or two stops the
collection, and a unit test that touches a socket fails even where the code under test
swallowed the error. Each case runs a small pytest session of its own (the socket case in a
child process, so that only the inner session's guard sees its sockets)."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest_plugins = ["pytester"]

pytestmark = pytest.mark.unit

# The conftest without its plugin list (the local-server fixtures import `tests`, which the
# inner sessions' folders do not hold).
CONFTEST = "\n".join(
    line
    for line in (Path(__file__).parent / "conftest.py").read_text(encoding="utf-8").splitlines()
    if not line.startswith("pytest_plugins")
)
INI = """
[pytest]
markers =
    unit: u
    integration: i
    e2e: e
"""


@pytest.fixture
def session(pytester: pytest.Pytester) -> pytest.Pytester:
    """A pytest session with labkit's conftest and tier markers."""
    pytester.makeconftest(CONFTEST)
    pytester.makeini(INI)
    return pytester


def test_a_test_with_no_tier_or_two_stops_the_collection(session: pytest.Pytester) -> None:
    session.makepyfile(
        test_tiers_wrong="""
        import pytest

        def test_without_a_tier():
            pass

        @pytest.mark.unit
        @pytest.mark.e2e
        def test_with_two():
            pass

        @pytest.mark.unit
        def test_with_one():
            pass
        """
    )
    result = session.runpytest_inprocess("-m", "unit")  # a selection cannot hide them
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        [
            "*every test needs exactly one tier marker*",
            "*::test_without_a_tier: no tier",
            "*::test_with_two: two tiers (e2e, unit)",
        ]
    )
    assert "test_with_one" not in result.stderr.str()


def test_a_unit_test_that_opens_a_socket_fails_and_says_where_it_belongs(
    session: pytest.Pytester,
) -> None:
    session.makepyfile(
        test_sockets="""
        import socket
        import pytest

        @pytest.mark.unit
        def test_swallows_the_error():
            with socket.socket() as sock:
                try:
                    sock.bind(("127.0.0.1", 0))
                except Exception:
                    pass  # as a recorder would: the guard must still fail the test

        @pytest.mark.unit
        def test_connects_to_loopback():
            socket.create_connection(("127.0.0.1", 9), timeout=1)

        @pytest.mark.unit
        def test_sends_a_datagram():
            with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
                sock.sendto(b"x", ("127.0.0.1", 9))

        @pytest.mark.integration
        def test_integration_may_bind():
            with socket.socket() as sock:
                sock.bind(("127.0.0.1", 0))
                sock.listen()
        """
    )
    result = session.runpytest_subprocess("-p", "no:cacheprovider")
    outcomes = result.parseoutcomes()
    assert outcomes.get("passed") == 2 and outcomes.get("failed") == 2, outcomes
    assert outcomes.get("errors", outcomes.get("error")) == 1, outcomes  # swallowed: reported once
    result.stdout.fnmatch_lines(
        [
            "*ERROR at teardown of test_swallows_the_error*",
            "*this unit test used sockets (socket.bind(('127.0.0.1', 0)))*integration*",
            "*SocketInUnitTestError: a unit test may not use sockets (tried socket.connect(*",
            "*SocketInUnitTestError: a unit test may not use sockets (tried socket.sendto(*",
        ]
    )
