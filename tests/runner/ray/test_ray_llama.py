"""`executor: ray` against the real llama-server and model: a local Ray cluster and the
managed server, both inside a loopback-only network namespace (`unshare -n`)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from labkit.local import ensure_setup
from labkit.records import RequestRecord
from tests.support.extras import requires_ray

pytestmark = [pytest.mark.e2e, requires_ray]

ROOT = Path(__file__).parents[3]

CONFIG = """
name: ray-llama
output_dir: {out}
providers: [{{id: local, kind: llamacpp, ctx_size: 1024}}]
experiments:
  - {{kind: load, concurrency: [2], requests: 4, params: {{max_tokens: 8, temperature: 0}}}}
executor: {{kind: ray, address: local, workers: 2, cpus_per_worker: 0.5}}
"""


def test_a_load_level_on_ray_actors_measures_the_real_server(tmp_path: Path) -> None:
    ensure_setup()
    out = tmp_path / "out"
    config = tmp_path / "ray.yaml"
    config.write_text(CONFIG.format(out=out))
    env = {
        **os.environ,
        "PYTHONPATH": f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}",
        "RAY_USAGE_STATS_ENABLED": "0",
    }
    command = f"ip link set lo up && exec {sys.executable} -m labkit run {config} --no-report"
    done = subprocess.run(
        ["unshare", "-n", "sh", "-c", command],
        env=env,
        capture_output=True,
        text=True,
        timeout=420,
        cwd=ROOT,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    (run_dir,) = [p for p in out.iterdir() if p.is_dir()]
    lines = (run_dir / "records.jsonl").read_text().splitlines()
    records = [RequestRecord.from_json_line(line) for line in lines if line]
    measured = [r for r in records if not r.warmup]
    assert sorted(str(r.plan_key) for r in measured) == [f"load/c2/{i}" for i in range(4)]
    assert all(r.error is None and (r.usage.output_tokens or 0) > 0 for r in measured)
    assert all(r.client.ttft_ms is not None and r.client.ttft_ms > 0 for r in measured)
    assert all(r.host is not None and r.clock is not None for r in measured)
    assert all(r.server_build for r in measured)  # the managed server's build, on every node
    levels = (run_dir / "ray-levels.jsonl").read_text().splitlines()
    (level,) = [json.loads(line) for line in levels]
    assert level["level"] == "c2" and not level["partial"] and level["hosts"]
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["status"] == "completed"
