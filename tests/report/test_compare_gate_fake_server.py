"""The gate end to end: two runs against `labkit fake-server`, one slowed, then `compare`.

The fake server is the real CLI command in a subprocess, serving over a socket on
127.0.0.1; `labkit run` and `labkit compare` are the CLI's own commands.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from labkit.cli import app

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
_URL = re.compile(r"http://127\.0\.0\.1:\d+/v1")

CONFIG = """\
name: {name}
providers:
  - id: server
    kind: openai_compatible
    base_url: {url}
    model: fake-model
experiments:
  - kind: single
    prompt_cache: as_sent
    prompts: ["Explain what a token is.", "Name three prime numbers."]
    repeats: 12
    warmup: 1
    params: {{temperature: 0, max_tokens: 8}}
"""


class FakeServerProcess:
    """`labkit fake-server` on a free port, stopped with SIGTERM."""

    def __init__(self, first_token_ms: float) -> None:
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "labkit",
                "fake-server",
                "--port",
                "0",
                "--first-token-ms",
                str(first_token_ms),
                "--token-interval-ms",
                "2",
                "--tokens",
                "8",
                "--log",
                os.devnull,
            ],
            cwd=ROOT,
            env={**os.environ, "PYTHONPATH": str(ROOT), "COLUMNS": "200"},
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        match = _URL.search(line)
        if match is None:
            self.stop()
            raise AssertionError(f"fake-server did not start: {line!r}")
        self.url = match.group(0)

    def stop(self) -> None:
        """Terminate and reap the server."""
        self.proc.terminate()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        if self.proc.stdout is not None:
            self.proc.stdout.close()


def _run(tmp_path: Path, name: str, first_token_ms: float) -> Path:
    server = FakeServerProcess(first_token_ms)
    try:
        config = tmp_path / f"{name}.yaml"
        config.write_text(CONFIG.format(name=name, url=server.url), encoding="utf-8")
        out = tmp_path / name
        result = CliRunner().invoke(app, ["run", str(config), "--out", str(out), "--no-report"])
        assert result.exit_code == 0, result.output
    finally:
        server.stop()
    (run_dir,) = [p for p in out.iterdir() if p.is_dir()]
    return run_dir


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Path]]:
    """A baseline at 50 ms to the first token, the same again, and one slowed to 80 ms."""
    tmp = tmp_path_factory.mktemp("gate")
    yield {
        "base": _run(tmp, "base", 50.0),
        "again": _run(tmp, "again", 50.0),
        "slowed": _run(tmp, "slowed", 80.0),
    }


def test_the_slowed_server_fails_the_gate(runs: dict[str, Path], tmp_path: Path) -> None:
    summary = tmp_path / "summary.md"
    result = CliRunner().invoke(
        app,
        [
            "compare",
            str(runs["base"]),
            str(runs["slowed"]),
            "--out",
            str(tmp_path / "cmp"),
            "--fail-on",
            "ttft_p50>+20%",
            "--fail-on",
            "error_rate>+1pp",
            "--markdown",
            str(summary),
        ],
    )
    assert result.exit_code == 1, result.output
    (failure,) = [line for line in result.stderr.splitlines() if line.startswith("FAILED")]
    assert failure.startswith("FAILED ttft_p50>+20%: server · single · fake-model (slowed): +")
    # The change is about +30 ms (50 → 80 ms), and its interval is printed around it.
    change = re.search(r": \+([\d.]+) ms \[\+([\d.]+), \+([\d.]+)\] \(\+([\d.]+)%", failure)
    assert change is not None, failure
    estimate, low, high, pct = (float(g) for g in change.groups())
    assert 20 < estimate < 40 and low <= estimate <= high and low > 0 and pct > 20
    text = summary.read_text(encoding="utf-8")
    assert "❌ Gate failed" in text
    assert re.search(r"\| TTFT p50 +\| slowed \| +24 → 24 paired \|.*\| slower", text), text
    assert (tmp_path / "cmp" / "compare.html").read_text().count('<div class="chart"') == 1


def test_the_same_schedule_passes_the_gate(runs: dict[str, Path], tmp_path: Path) -> None:
    result = CliRunner().invoke(
        app,
        [
            "compare",
            str(runs["base"]),
            str(runs["again"]),
            "--out",
            str(tmp_path / "cmp"),
            "--fail-on",
            "ttft_p50>+20%",
            "--markdown",
            "-",
        ],
    )
    assert result.exit_code == 0, result.output
    assert "gate passed" in result.stderr
    assert "✅ Gate passed: ttft_p50>+20%" in result.stdout
