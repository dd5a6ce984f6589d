"""`TruthServer`: the truth server in its own process, for tests and benchmarks.

Standard library only, so a benchmark that runs another checkout's labkit in-process can
still load this file by path and start the server of its own tree (the child's PYTHONPATH
is this file's tree).
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

__all__ = ["SCHEDULE_KEYS", "TruthServer"]

#: The schedule's settings and their types (`labkit.truth.schedule.TruthSchedule`'s fields).
SCHEDULE_KEYS: dict[str, type] = {
    "ttft_ms": float,
    "interval_ms": float,
    "tokens": int,
    "event_bytes": int,
    "jitter_ms": float,
    "prefill_ms_per_token": float,
    "tokens_per_event": int,
    "keepalive_ms": float,
    "slots": int,
}
_TREE = Path(__file__).resolve().parents[2]


class TruthServer:
    """``with TruthServer(ttft_ms=5, tokens=4) as srv: srv.base_url``.

    Keyword settings: `SCHEDULE_KEYS`. `truth_log`: where the server writes its truth log
    (then `stamps` answers nothing: the log has them); `schedule_file`: per-request
    schedules; `tls`: also serve HTTPS (`tls_base_url`) with a certificate from a throw-away
    `trustme` CA whose PEM is `ca_file` (point ``SSL_CERT_FILE`` at it to trust it).
    """

    def __init__(
        self,
        *,
        truth_log: Path | None = None,
        schedule_file: Path | None = None,
        seed: int = 0,
        tls: bool = False,
        **schedule: float,
    ) -> None:
        self._check(schedule)
        self.args = [f"--{k.replace('_', '-')}={SCHEDULE_KEYS[k](v)}" for k, v in schedule.items()]
        self.args.append(f"--seed={seed}")
        if truth_log is not None:
            self.args.append(f"--truth={truth_log}")
        if schedule_file is not None:
            self.args.append(f"--schedule-file={schedule_file}")
        self.tls = tls
        self.proc: subprocess.Popen[bytes] | None = None
        self.port = 0
        self.tls_port = 0
        self._certs: tempfile.TemporaryDirectory[str] | None = None
        self.ca_file: Path | None = None

    @staticmethod
    def _check(script: dict[str, float]) -> None:
        unknown = set(script) - set(SCHEDULE_KEYS)
        if unknown:
            raise ValueError(f"unknown script keys {sorted(unknown)}; known: {list(SCHEDULE_KEYS)}")

    @property
    def base_url(self) -> str:
        """The OpenAI-style API root, ``http://127.0.0.1:PORT/v1``."""
        return self.url()

    @property
    def tls_base_url(self) -> str:
        """The same over HTTPS, ``https://127.0.0.1:TLS_PORT/v1``."""
        return self.url(tls=True)

    def url(self, *, tls: bool = False, **script: float) -> str:
        """An API root whose requests follow `script` (``interval_ms=62.5`` ...) instead of
        the server's own settings, over HTTPS when `tls`."""
        if tls and not self.tls_port:
            raise RuntimeError("this server was started without tls=True")
        self._check(script)
        scheme, port = ("https", self.tls_port) if tls else ("http", self.port)
        prefix = "".join(f"/{k}={SCHEDULE_KEYS[k](v)}" for k, v in sorted(script.items()))
        return f"{scheme}://127.0.0.1:{port}{prefix}/v1"

    def _write_certs(self) -> list[str]:
        import trustme  # only the TLS leg needs it (dev dependency)

        self._certs = tempfile.TemporaryDirectory(prefix="truth-tls-")
        folder = Path(self._certs.name)
        ca = trustme.CA()
        leaf = ca.issue_cert("127.0.0.1", "localhost")
        self.ca_file = folder / "ca.pem"
        ca.cert_pem.write_to_path(str(self.ca_file))
        cert, key = folder / "server.pem", folder / "server.key"
        leaf.cert_chain_pems[0].write_to_path(str(cert))
        for extra in leaf.cert_chain_pems[1:]:
            extra.write_to_path(str(cert), append=True)
        leaf.private_key_pem.write_to_path(str(key))
        return ["--tls-cert", str(cert), "--tls-key", str(key)]

    def start(self) -> None:
        """Start the process and wait for its port(s)."""
        tls_args = self._write_certs() if self.tls else []
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(_TREE), env.get("PYTHONPATH")]))
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "labkit.truth.server", "--port", "0", *self.args, *tls_args],
            stdout=subprocess.PIPE,
            env=env,
        )
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline().decode().split()
        if len(line) != 2 or line[0] != "PORT":
            self.stop()
            raise RuntimeError(f"truth server did not start: {line!r}")
        self.port = int(line[1])
        if self.tls:
            line = self.proc.stdout.readline().decode().split()
            if len(line) != 2 or line[0] != "TLS_PORT":
                self.stop()
                raise RuntimeError(f"truth server did not start TLS: {line!r}")
            self.tls_port = int(line[1])

    def stop(self) -> None:
        """Terminate the process (it flushes its truth log) and remove the certificates."""
        if self.proc is not None:
            self.proc.terminate()
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
            if self.proc.stdout is not None:
                self.proc.stdout.close()
            self.proc = None
        if self._certs is not None:
            self._certs.cleanup()
            self._certs = None

    def stamps(self) -> dict[str, Any]:
        """The send stamps collected since the last call (the server forgets them)."""
        with socket.create_connection(("127.0.0.1", self.port)) as sock:
            sock.sendall(b"GET /stamps HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            data = b""
            while chunk := sock.recv(1 << 20):
                data += chunk
        _, _, body = data.partition(b"\r\n\r\n")
        result: dict[str, Any] = json.loads(body)
        return result

    def __enter__(self) -> TruthServer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
