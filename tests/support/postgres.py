"""A real PostgreSQL server for the store's tests: initdb + pg_ctl from the host's binaries
(Debian's /usr/lib/postgresql/<version>/bin; ``scripts/install-postgres.sh`` installs them,
``make test`` runs it) into a temporary folder, on 127.0.0.1 and a free port, with a
password (scram-sha-256), so the tests see a password travel in the URL.

PostgreSQL refuses to run as root: under root the server runs as ``nobody`` (``setpriv``),
its folder handed to that user. Chosen over the ``pgserver`` wheel because it uses the
binaries a Debian host (and CI) already has and needs nothing from the network at test
time; a missing PostgreSQL fails the test with how to install it, never skips it.

Fixtures (register with ``pytest_plugins = ["tests.support.postgres"]``):

- ``postgres_server`` (session): the running `PostgresServer` (``stop()``, ``start()``).
- ``postgres_url`` (session): ``postgresql://labkit:<password>@127.0.0.1:<port>/postgres``.
- ``postgres_db`` (function): the URL of a fresh, empty database of its own.
"""

from __future__ import annotations

import glob
import os
import pwd
import secrets
import shutil
import socket
import subprocess
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

__all__ = ["PostgresServer", "find_bin", "postgres_db", "postgres_server", "postgres_url"]

USER = "labkit"
INSTALL_HINT = "run scripts/install-postgres.sh (make test does)"


def find_bin() -> Path:
    """The folder holding initdb and pg_ctl: Debian's newest, else the ones on PATH."""
    found = sorted(
        glob.glob("/usr/lib/postgresql/*/bin/initdb"),
        key=lambda p: int(Path(p).parts[-3]) if Path(p).parts[-3].isdigit() else 0,
    )
    if found:
        return Path(found[-1]).parent
    on_path = shutil.which("initdb")
    if on_path:
        return Path(on_path).parent
    raise RuntimeError(f"PostgreSQL's initdb was not found: {INSTALL_HINT}")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class PostgresServer:
    """One PostgreSQL cluster in a temporary folder, started and stopped with pg_ctl."""

    def __init__(self) -> None:
        self.bin = find_bin()
        self.root = Path(tempfile.mkdtemp(prefix="labkit-pg-"))
        self.data = self.root / "data"
        self.log = self.root / "server.log"
        self.port = _free_port()
        self.password = secrets.token_urlsafe(18)
        self._as: list[str] = []
        if os.geteuid() == 0:  # postgres refuses root: run it as nobody
            nobody = pwd.getpwnam("nobody")
            os.chmod(self.root, 0o700)
            os.chown(self.root, nobody.pw_uid, nobody.pw_gid)
            self._as = [
                "setpriv",
                f"--reuid={nobody.pw_uid}",
                f"--regid={nobody.pw_gid}",
                "--clear-groups",
                "--",
            ]
        pwfile = self.root / "pw"
        pwfile.write_text(self.password + "\n", encoding="utf-8")
        if self._as:
            os.chown(pwfile, pwd.getpwnam("nobody").pw_uid, pwd.getpwnam("nobody").pw_gid)
        self._run(
            str(self.bin / "initdb"),
            "-D",
            str(self.data),
            "-U",
            USER,
            "--auth=scram-sha-256",
            f"--pwfile={pwfile}",
            "--encoding=UTF8",
            "--locale=C",
        )
        pwfile.unlink()
        self.start()

    def _run(self, *args: str) -> None:
        env = {**os.environ, "HOME": str(self.root), "LC_ALL": "C"}
        done = subprocess.run(
            [*self._as, *args], capture_output=True, text=True, env=env, cwd=self.root, check=False
        )
        if done.returncode:
            log = self.log.read_text(errors="replace")[-2000:] if self.log.exists() else ""
            raise RuntimeError(
                f"{' '.join(args[:2])} failed ({done.returncode}): {done.stderr[-2000:]}\n{log}"
            )

    def start(self) -> None:
        """Start the server (waits until it takes connections)."""
        options = f"-h 127.0.0.1 -p {self.port} -k {self.root} -c fsync=off"
        self._run(
            str(self.bin / "pg_ctl"), "start", "-w", "-D", str(self.data), "-l", str(self.log),
            "-o", options,
        )  # fmt: skip

    def stop(self) -> None:
        """Stop the server (fast shutdown: sessions ended, data written)."""
        self._run(str(self.bin / "pg_ctl"), "stop", "-w", "-m", "fast", "-D", str(self.data))

    def url(self, database: str = "postgres") -> str:
        """The server's URL, password included."""
        return f"postgresql://{USER}:{self.password}@127.0.0.1:{self.port}/{database}"

    def create_database(self) -> str:
        """A new empty database; returns its URL."""
        import psycopg

        name = "t_" + uuid.uuid4().hex[:12]
        with psycopg.connect(self.url(), autocommit=True) as con:
            con.execute(f"CREATE DATABASE {name}".encode())
        return self.url(name)

    def destroy(self) -> None:
        """Stop the server and remove its folder."""
        try:
            self.stop()
        finally:
            shutil.rmtree(self.root, ignore_errors=True)


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PostgresServer]:
    """A real PostgreSQL server for the session (fails, never skips, without PostgreSQL)."""
    server = PostgresServer()
    try:
        yield server
    finally:
        server.destroy()


@pytest.fixture(scope="session")
def postgres_url(postgres_server: PostgresServer) -> str:
    """The session server's URL (its ``postgres`` database), password included."""
    return postgres_server.url()


@pytest.fixture
def postgres_db(postgres_server: PostgresServer) -> str:
    """The URL of a fresh database on the session server, for one test."""
    return postgres_server.create_database()
