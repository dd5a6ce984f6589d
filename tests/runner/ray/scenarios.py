"""The Ray executor's scenarios, run inside a loopback-only network namespace.

`python tests/runner/ray/scenarios.py OUT_DIR` (re-executed by test_ray_executor.py, with the
repository root on PYTHONPATH for `tests.support`, under ``unshare -n``, where every Ray node
is 127.0.0.1 and nothing but loopback exists). It starts one fake server
(`labkit.truth`, in a process of its own) and runs, writing ``OUT_DIR/scenarios.json`` for the
tests to judge:

- ``interrupt``: `labkit run` on a local Ray cluster of its own, SIGINT mid-level;
- one `ray.cluster_utils.Cluster` (nodes a, b, c, and one started without the key variable):
  ``ray`` (actors on a and b, actor 1's clock skewed by an injected `ActorClock`, every call
  to Ray spied on), ``single`` and ``processes`` (the same config without Ray), ``kill``
  (node c removed mid-level, then ``--resume`` with a node c again), ``nokey``, and the
  other paced experiments on actors: ``sweep`` (against a server with 1 slot), ``trace``
  and ``conversation`` (against a server with a simulated prefix cache).
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any

from tests.support.processes import processes

KEY_ENV = "LABKIT_RAY_TEST_KEY"
KEY = "sk-raytest-" + uuid.uuid4().hex
TAG_ENV = "LABKIT_RAY_TEST_TAG"


_SERVERS: list[Any] = []


def _serve(schedule: dict[str, Any]) -> str:
    return _serve_counting(schedule).base_url


def _serve_counting(schedule: dict[str, Any]) -> Any:
    """The fake server in a process of its own (stopped when this process ends); its
    `serving()` counts the streams it is sending right now."""
    import atexit

    from labkit.truth.process import TruthServer

    server = TruthServer(**schedule)
    server.start()
    atexit.register(server.stop)
    _SERVERS.append(server)
    return server


def _config(
    name: str,
    out: Path,
    base_url: str,
    *,
    executor: dict[str, Any] | None,
    transport: str = "auto",
    **load: Any,
) -> dict[str, Any]:
    experiment = {"kind": "load", "concurrency": [4], "requests": 12, "warmup": 1, **load}
    config: dict[str, Any] = {
        "name": name,
        "output_dir": str(out),
        "providers": [
            {
                "id": "fake",
                "kind": "openai_compatible",
                "model": "fake-model",
                "base_url": base_url,
                "api_key_env": KEY_ENV,
                "transport": transport,
            }
        ],
        "experiments": [experiment],
    }
    if executor is not None:
        config["executor"] = executor
    return config


async def _run(
    config: dict[str, Any],
    messages: list[str] | None = None,
    skews_ns: dict[int, int] | None = None,
) -> str:
    from labkit.config import parse_config
    from labkit.runner import RunOptions, prepare_run, run_lab
    from labkit.runner.ray_executor import ActorClock, RayExecutor

    runner = prepare_run(parse_config(config), RunOptions())
    if messages is not None:
        runner.on_message = messages.append
    if skews_ns:
        settings = runner.config.executor
        assert settings is not None
        runner.executor = RayExecutor(
            settings,
            runner.folder.path,
            run_id=runner.folder.run_id,
            store_text=runner.config.store_text,
            actor_clocks={k: ActorClock(skew) for k, skew in skews_ns.items()},
        )
    await run_lab(runner)
    return str(runner.folder.path)


def _measured_lines(run_dir: Path) -> int:
    path = run_dir / "records.jsonl"
    if not path.exists():
        return 0
    return sum(1 for line in path.read_text().splitlines() if '"warmup":false' in line)


def _default_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def interrupt(out: Path, base_url: str) -> dict[str, Any]:
    """SIGINT to a `labkit run` child on its own local cluster, mid-level."""
    config = _config(
        "interrupt",
        out / "interrupt",
        base_url,
        executor={"kind": "ray", "address": "local", "workers": 2, "cpus_per_worker": 0.5},
        requests=400,
        concurrency=[2],
    )
    path = out / "interrupt.json"
    path.write_text(json.dumps(config))
    tag = uuid.uuid4().hex
    child = subprocess.Popen(
        [sys.executable, "-m", "labkit", "run", str(path), "--no-report"],
        env={**os.environ, TAG_ENV: tag},
        # As tests/signals.py: a background job (CI) starts us with SIGINT ignored, which the
        # child would inherit and never see the test's Ctrl-C.
        preexec_fn=_default_sigint,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    deadline = time.monotonic() + 120
    run_dir: Path | None = None
    while time.monotonic() < deadline:
        dirs = [p for p in (out / "interrupt").glob("*") if p.is_dir()]
        if dirs and _measured_lines(dirs[0]) >= 4:
            run_dir = dirs[0]
            break
        time.sleep(0.1)
    before = _measured_lines(run_dir) if run_dir else 0
    child.send_signal(signal.SIGINT)
    try:
        output, _ = child.communicate(timeout=90)
    except subprocess.TimeoutExpired:
        child.kill()
        output, _ = child.communicate()
    left: list[str] = []
    for _ in range(100):  # Ray's own processes take a moment to exit
        left = [str(p) for p in processes(environ_has=f"{TAG_ENV}={tag}")]
        if not left:
            break
        time.sleep(0.2)
    return {
        "run_dir": str(run_dir) if run_dir else None,
        "measured_before_sigint": before,
        "returncode": child.returncode,
        "output": output[-3000:],
        "ray_processes_left": left,
    }


class _Spy:
    """Keeps everything labkit passes to Ray: actor arguments and options (runtime_env
    included), method arguments, and `ray.init`'s arguments."""

    def __init__(self) -> None:
        self.calls: list[bytes] = []

    def install(self) -> None:
        import ray
        import ray.actor
        from ray import cloudpickle

        spy = self
        actor_remote = ray.actor.ActorClass._remote
        method_remote = ray.actor.ActorMethod._remote
        init = ray.init

        def spied_actor(self: Any, args: Any = None, kwargs: Any = None, **options: Any) -> Any:
            spy.calls.append(cloudpickle.dumps(("actor", args, kwargs, options)))
            return actor_remote(self, args, kwargs, **options)

        def spied_method(self: Any, args: Any = None, kwargs: Any = None, **options: Any) -> Any:
            spy.calls.append(cloudpickle.dumps(("method", args, kwargs, options)))
            return method_remote(self, args, kwargs, **options)

        def spied_init(*args: Any, **kwargs: Any) -> Any:
            spy.calls.append(cloudpickle.dumps(("init", args, kwargs)))
            return init(*args, **kwargs)

        ray.actor.ActorClass._remote = spied_actor  # type: ignore[method-assign]
        ray.actor.ActorMethod._remote = spied_method  # type: ignore[method-assign]
        ray.init = spied_init

    def report(self) -> dict[str, Any]:
        blob = b"\n".join(self.calls)
        return {
            "calls": len(self.calls),
            "key_seen": KEY.encode() in blob,
            "variable_seen": KEY_ENV.encode() in blob,
            "runtime_env_seen": b"RAY_USE_UVLOOP" in blob,
        }


async def on_cluster(out: Path, base_url: str) -> dict[str, Any]:
    """Every scenario that shares one multi-node cluster."""
    import ray
    from ray.cluster_utils import Cluster

    results: dict[str, Any] = {}
    client_port = _free_port()
    cluster = Cluster(
        initialize_head=True,
        head_node_args={
            "num_cpus": 2,
            "resources": {"node_a": 1},
            "include_dashboard": False,
            "ray_client_server_port": client_port,
        },
    )
    cluster.add_node(num_cpus=2, resources={"node_b": 1})
    node_c = cluster.add_node(num_cpus=2, resources={"node_c": 1})
    os.environ.pop(KEY_ENV)
    cluster.add_node(num_cpus=1, resources={"node_nokey": 1})
    os.environ[KEY_ENV] = KEY
    cluster.wait_for_nodes()
    spy = _Spy()
    spy.install()
    try:
        ray_exec = {
            "kind": "ray",
            "address": cluster.address,
            "workers": 2,
            "cpus_per_worker": 0.5,
            "placement": ["node_a", "node_b"],
        }
        results["ray"] = await _run(
            _config("ray", out / "ray", base_url, executor=ray_exec),
            skews_ns={1: 3_000_000_000},
        )
        results["spy"] = spy.report()
        # User-space stamps (httpx): their lateness estimate needs labkit's timed loop.
        results["ray_httpx"] = await _run(
            _config(
                "ray_httpx",
                out / "ray_httpx",
                base_url,
                executor=ray_exec,
                transport="httpx",
            )
        )
        results["single"] = await _run(
            _config("single", out / "single", base_url, executor=None, workers=1)
        )
        results["processes"] = await _run(
            _config("processes", out / "processes", base_url, executor=None, workers=2)
        )
        nokey_exec = {**ray_exec, "placement": ["node_nokey"], "workers": 1}
        messages: list[str] = []
        results["nokey"] = await _run(
            _config("nokey", out / "nokey", base_url, executor=nokey_exec), messages
        )
        results["nokey_messages"] = messages
        results.update(await _paced_experiments(out, ray_exec))
        results["client"] = _through_ray_client(client_port, out, base_url, ray_exec)
        results["kill"] = await _kill_and_resume(cluster, node_c, out, ray_exec)
        results["actors_left"] = _actor_processes_after(grace_s=15.0)
    finally:
        ray.shutdown()
        cluster.shutdown()
    return results


def _serve_prefix_cache() -> Any:
    """The simulated prefix-cache server (tests/prefix_cache_server.py) on a thread."""
    from tests.support.prefix_cache_server import PrefixCacheServer

    server = PrefixCacheServer()
    started = threading.Event()

    def run() -> None:
        async def main() -> None:
            async with server:
                started.set()
                await asyncio.Event().wait()

        asyncio.run(main())

    threading.Thread(target=run, daemon=True).start()
    started.wait(10)
    return server


def _paced(
    name: str,
    out: Path,
    provider: dict[str, Any],
    experiment: dict[str, Any],
    executor: dict[str, Any],
    **top: Any,
) -> dict[str, Any]:
    return {
        "name": name,
        "output_dir": str(out / name),
        "providers": [provider],
        "experiments": [experiment],
        "executor": executor,
        **top,
    }


async def _paced_experiments(out: Path, ray_exec: dict[str, Any]) -> dict[str, Any]:
    """Sweep, trace and conversation on the cluster's actors (two, on nodes a and b)."""
    results: dict[str, Any] = {}
    # One slot: each request holds the server ~100 ms, so TTFT is ~20 ms at one stream, ~320
    # at four and ~720 at eight by the schedule, each far from the 200 ms SLO. Their verdicts
    # hold on a busy host (a slower server only moves four and eight further above it); with
    # four slots eight streams sat near the SLO and stayed undecided until max_duration_s.
    # 64 requests a level: a level of 8 that all meet the SLO stays undecided (the exact 95%
    # interval of 8 of 8 starts at 0.63, below p90) and passes again with 16, 32 and 64, each
    # pass on new actors, which beside two CPU hogs took a minute each to start: five passes
    # ran out of max_duration_s before the third probe (2026-12-06). One pass a level, and a
    # duration no host reaches, make the probes the same on any host.
    slots_url = _serve({"first_token_ms": 20, "token_interval_ms": 10, "tokens": 9, "slots": 1})
    fake = {
        "id": "s",
        "kind": "openai_compatible",
        "model": "m",
        "base_url": slots_url,
        "api_key_env": KEY_ENV,
    }
    sweep = {
        "kind": "sweep",
        "mode": "concurrency",
        "throughput_concurrency": 8,
        "requests": 64,
        "max_probes": 3,
        "max_duration_s": 3600,
        "warmup": 0,
        "slo": {"ttft_ms_p90": 200},
    }
    results["sweep"] = await _run(_paced("sweep", out, fake, sweep, ray_exec))

    cache = _serve_prefix_cache()
    llama = {"id": "l", "kind": "llamacpp", "base_url": cache.base_url}
    trace_path = out / "trace.jsonl"
    rows = [
        {"timestamp": t, "input_length": 200, "output_length": 3, "hash_ids": [0, i + 1]}
        for i, t in enumerate([0, 400, 400, 1000, 1600, 2000, 9000])
    ]
    trace_path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    trace = {
        "kind": "trace",
        "path": str(trace_path),
        "block_tokens": 100,
        "speedup": 2.0,
        "max_requests": 6,
        "warmup": 1,
    }
    results["trace"] = await _run(_paced("trace", out, llama, trace, ray_exec))

    conversation = {
        "kind": "conversation",
        "sessions": 3,
        "turns": 3,
        "concurrency": 2,
        "warmup": 0,
        "user_tokens": 20,
        "params": {"max_tokens": 5},
    }
    first_body = len(cache.bodies)
    results["conversation"] = await _run(
        _paced("conversation", out, llama, conversation, ray_exec, store_text=False)
    )
    bodies = cache.bodies[first_body:]
    results["conversation_bodies"] = len(bodies)
    # Every answer a later turn carries is one the server gave: each actor handed a turn's
    # answer on to the next turn (`PlannedRequest.on_record`).
    results["conversation_histories_are_the_models"] = all(
        m["content"] in cache.answers
        for body in bodies
        for m in body["messages"]
        if m["role"] == "assistant"
    )

    tools_url = _serve({"first_token_ms": 20, "token_interval_ms": 5, "tokens": 8, "tool_calls": 2})
    session = {
        "kind": "session",
        "sessions": 4,
        "concurrency": 2,
        "tool_steps": 2,
        "max_steps": 4,
        "subagents": 1,
        "warmup": 0,
        "tool_latency": {"ms": 30},
        "params": {"max_tokens": 8},
    }
    agent = {**fake, "base_url": tools_url}
    results["session"] = await _run(_paced("session", out, agent, session, ray_exec))
    return results


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _through_ray_client(
    port: int, out: Path, base_url: str, ray_exec: dict[str, Any]
) -> dict[str, Any]:
    """`labkit run` in a process of its own, on the cluster through Ray Client (ray://)."""
    executor = {**ray_exec, "address": f"ray://127.0.0.1:{port}"}
    config = _config("client", out / "client", base_url, executor=executor)
    path = out / "client.json"
    path.write_text(json.dumps(config))
    done = subprocess.run(
        [sys.executable, "-m", "labkit", "run", str(path), "--no-report"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    dirs = [p for p in (out / "client").glob("*") if p.is_dir()]
    return {
        "returncode": done.returncode,
        "output": (done.stdout + done.stderr)[-3000:],
        "run_dir": str(dirs[0]) if dirs else None,
    }


def _actor_processes() -> list[str]:
    """Live LevelActor processes on this host that belong to this run's cluster."""
    mine = processes(cmdline_has="LevelActor", environ_has=f"{KEY_ENV}={KEY}")
    return [str(p.pid) for p in mine]


def _actor_processes_after(grace_s: float) -> list[str]:
    """The LevelActor processes still alive once `grace_s` has passed, or none sooner.

    `ray.kill` only asks the node to end the actor's process: on a loaded host (CI) the last
    one killed was still exiting when the run returned.
    """
    deadline = time.monotonic() + grace_s
    while (left := _actor_processes()) and time.monotonic() < deadline:
        time.sleep(0.1)
    return left


async def _kill_and_resume(
    cluster: Any, node_c: Any, out: Path, ray_exec: dict[str, Any]
) -> dict[str, Any]:
    """Node c removed while its actor streams; then the run resumed with a node c again.

    The node is removed only once the server is sending both actors' streams, and each stream
    lasts about 1.5 s, so node c's actor has a request in flight when it dies even when a
    loaded host is slow between one request and the next.
    """
    from labkit.config import parse_config
    from labkit.runner import RunOptions, prepare_resume, prepare_run, run_lab

    server = _serve_counting({"first_token_ms": 20, "token_interval_ms": 25, "tokens": 60})
    config = _config(
        "kill",
        out / "kill",
        server.base_url,
        executor={**ray_exec, "placement": ["node_a", "node_c"]},
        concurrency=[2],
        requests=16,
    )
    runner = prepare_run(parse_config(config), RunOptions())
    messages: list[str] = []
    runner.on_message = messages.append
    run_dir = runner.folder.path
    task = asyncio.create_task(run_lab(runner))
    async with asyncio.timeout(120):
        while _measured_lines(run_dir) < 4 or await asyncio.to_thread(server.serving) < 2:
            await asyncio.sleep(0.01)
    await asyncio.to_thread(cluster.remove_node, node_c)
    await task
    first_pass = (run_dir / "records.jsonl").read_text()
    cluster.add_node(num_cpus=2, resources={"node_c": 1})
    cluster.wait_for_nodes()
    resumed = prepare_resume(run_dir)
    await run_lab(resumed)
    return {"run_dir": str(run_dir), "first_pass": first_pass, "messages": messages}


def main() -> None:
    """Run every scenario; write OUT_DIR/scenarios.json."""
    out = Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    os.environ[KEY_ENV] = KEY
    os.environ["RAY_USAGE_STATS_ENABLED"] = "0"
    os.environ["RAY_AUTH_MODE"] = "disabled"
    base_url = _serve({"first_token_ms": 20, "token_interval_ms": 15, "tokens": 12})
    results: dict[str, Any] = {"key": KEY, "key_env": KEY_ENV}
    results["interrupt"] = interrupt(out, base_url)
    results.update(asyncio.run(on_cluster(out, base_url)))
    (out / "scenarios.json").write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
