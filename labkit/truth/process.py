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

__all__ = ["ALIASES", "SCHEDULE_KEYS", "TruthServer"]

#: The schedule's settings and their types (`labkit.truth.schedule.TruthSchedule`'s fields).
SCHEDULE_KEYS: dict[str, type] = {
    "first_token_ms": float,
    "token_interval_ms": float,
    "tokens": int,
    "tokens_per_event": int,
    "jitter_ms": float,
    "prefill_ms_per_token": float,
    "keepalive_ms": float,
    "event_bytes": int,
    "slots": int,
    "frontend_ms": float,
    "chat_template": bool,
    "cache_tokens": int,
    "cache_ttl_s": float,
    "cached_ms_per_token": float,
    "cache_min_tokens": int,
    "cache_replicas": int,
    "queue_ms": float,
    "reasoning_tokens": int,
    "reasoning_ms_per_token": float,
    "finish_reason": str,
    "usage": bool,
    "end_token": bool,
    "sampling": bool,
    "candidates": int,
    "batch_flip_above": int,
    "batch_flip_margin": float,
    "batch_flip_p": float,
    "tokenizer": str,
    "model_salt": int,
    "logit_noise": float,
    "fail": str,
    "fail_status": int,
    "fail_after_tokens": int,
    "retry_after_s": float,
    "server_timings": str,
    "tool_calls": int,
    "parallel_tool_calls": int,
}
#: Older names of settings, still read.
ALIASES = {"ttft_ms": "first_token_ms", "interval_ms": "token_interval_ms"}
_TREE = Path(__file__).resolve().parents[2]


class TruthServer:
    """``with TruthServer(first_token_ms=5, tokens=4) as srv: srv.base_url``.

    Keyword settings: `SCHEDULE_KEYS` (or `ALIASES`). The server always writes a truth log:
    at `truth_log`, or in a temporary folder removed on `stop` (`log_path` says where; the
    server flushes it whenever it is idle); `stamps` also answers. `schedule_file`:
    per-request schedules; `model`: the model name `/v1/models` lists; `tls`: also serve
    HTTPS (`tls_base_url`) with a certificate from a throw-away `trustme` CA whose PEM is
    `ca_file` (point ``SSL_CERT_FILE`` at it to trust it).
    """

    def __init__(
        self,
        *,
        truth_log: Path | None = None,
        schedule_file: Path | None = None,
        seed: int = 0,
        model: str | None = None,
        tls: bool = False,
        **schedule: Any,
    ) -> None:
        self.args = [f"--{k.replace('_', '-')}={v}" for k, v in self._values(schedule).items()]
        self.args += [f"--seed={seed}", "--stamps"]
        self._logs: tempfile.TemporaryDirectory[str] | None = None
        self.truth_log = truth_log
        if model is not None:
            self.args.append(f"--model={model}")
        if schedule_file is not None:
            self.args.append(f"--schedule-file={schedule_file}")
        self.tls = tls
        self.proc: subprocess.Popen[bytes] | None = None
        self.port = 0
        self.tls_port = 0
        self._certs: tempfile.TemporaryDirectory[str] | None = None
        self.ca_file: Path | None = None

    @classmethod
    def of(cls, schedule: Any, **options: Any) -> TruthServer:
        """A server following `schedule`: a `FakeSchedule` (its settings that differ from the
        defaults) or a mapping of settings; `options` as the constructor's."""
        dump = getattr(schedule, "model_dump", None)
        values = dump(exclude_defaults=True) if dump is not None else dict(schedule)
        return cls(**values, **options)

    @staticmethod
    def _values(script: dict[str, Any]) -> dict[str, str]:
        """`script` by the settings' names, each value as the server reads it."""
        named = {ALIASES.get(k, k): v for k, v in script.items()}
        unknown = set(named) - set(SCHEDULE_KEYS)
        if unknown:
            raise ValueError(f"unknown script keys {sorted(unknown)}; known: {list(SCHEDULE_KEYS)}")
        out = {}
        for key, value in named.items():
            kind = SCHEDULE_KEYS[key]
            if value is None:
                continue
            if kind is bool:
                out[key] = "true" if value else "false"
            else:
                out[key] = str(kind(value))
        return out

    @property
    def base_url(self) -> str:
        """The OpenAI-style API root, ``http://127.0.0.1:PORT/v1``."""
        return self.url()

    @property
    def tls_base_url(self) -> str:
        """The same over HTTPS, ``https://127.0.0.1:TLS_PORT/v1``."""
        return self.url(tls=True)

    def url(self, *, tls: bool = False, **script: Any) -> str:
        """An API root whose requests follow `script` (``interval_ms=62.5`` ...) instead of
        the server's own settings, over HTTPS when `tls`."""
        if tls and not self.tls_port:
            raise RuntimeError("this server was started without tls=True")
        scheme, port = ("https", self.tls_port) if tls else ("http", self.port)
        prefix = "".join(f"/{k}={v}" for k, v in sorted(self._values(script).items()))
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
        if self.truth_log is None:
            self._logs = tempfile.TemporaryDirectory(prefix="truth-log-")
        log = ["--truth", str(self.log_path)]
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(_TREE), env.get("PYTHONPATH")]))
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "labkit.truth.server",
                "--port",
                "0",
                *self.args,
                *log,
                *tls_args,
            ],
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
        if self._logs is not None:
            self._logs.cleanup()
            self._logs = None

    @property
    def log_path(self) -> Path:
        """The truth log (`labkit.truth.log.read_truth_log` reads it)."""
        if self.truth_log is not None:
            return Path(self.truth_log)
        if self._logs is None:
            raise RuntimeError("the server is not running: its temporary log is gone")
        return Path(self._logs.name) / "truth.jsonl"

    def get(self, path: str) -> bytes:
        """The body of ``GET path`` on the server (``/metrics``, ``/props``, ...)."""
        with socket.create_connection(("127.0.0.1", self.port)) as sock:
            request = f"GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
            sock.sendall(request.encode())
            data = b""
            while chunk := sock.recv(1 << 20):
                data += chunk
        return data.partition(b"\r\n\r\n")[2]

    def stamps(self) -> dict[str, Any]:
        """The send stamps collected since the last call (the server forgets them)."""
        result: dict[str, Any] = json.loads(self.get("/stamps"))
        return result

    def serving(self) -> int:
        """Requests being served now (holding a slot): ``llamacpp:requests_processing``."""
        for line in self.get("/metrics").decode().splitlines():
            if line.startswith("llamacpp:requests_processing "):
                return int(float(line.split()[1]))
        return 0

    def __enter__(self) -> TruthServer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
