"""Fixtures for the tests that need the local server: the real llama-server and the real model.

The first run on a fresh machine builds llama-server (minutes); later runs find it cached.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from labkit.local import LocalSetup, ManagedServer, ensure_setup
from labkit.local.install import ServerBinary
from tests.support.processes import CRASHING_SERVER, fake_binary


@pytest.fixture(scope="session")
def local_setup() -> LocalSetup:
    """The real binary and model, from the default cache (built/fetched when missing)."""
    return ensure_setup()


@pytest.fixture(scope="session")
def managed_server(local_setup: LocalSetup) -> Iterator[ManagedServer]:
    """One running llama-server (1 slot) shared by the read-only tests."""
    with ManagedServer(local_setup, ctx_size=2048, slots=1) as server:
        yield server


@pytest.fixture
def crashing_setup(tmp_path: Path, local_setup: LocalSetup) -> LocalSetup:
    """A setup whose 'server' answers --version and then exits 3 at once."""
    binary = fake_binary(tmp_path, "llama-server", CRASHING_SERVER)
    return LocalSetup(ServerBinary(binary, "cpu", "config"), local_setup.model)
