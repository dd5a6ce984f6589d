"""Streams held in flight and stamp error per executor: one process, worker processes, Ray.

Method. `scripted_server.py` (its own process, 127.0.0.1) serves every stream on a fixed
script and stamps each event's true send time with `perf_counter_ns` (CLOCK_MONOTONIC of
this host). Each level is a `load` experiment at `streams` concurrency (a closed loop;
`--passes` × `streams` measured requests, one warm-up), run through labkit's own runner
(`prepare_run` + `Runner.run`, the CLI's path) by three executors, side by side per level:

- ``process``: the experiment's streams read by this process (``workers: 1``);
- ``workers``: labkit's worker processes (``workers: auto``);
- ``ray``: Ray actors on a local cluster (``executor: {kind: ray, address: local,
  workers: auto}``), with ``--ray-skew-ms`` added to actor 0's clock (an injected
  `labkit.runner.ray_executor.ActorClock`) so the correction is exercised: its stamps
  are taken on the driver's clock, ``labkit.clocksync.driver_start_ns(record) + event offsets``.

Per executor and level, from the run's records and its level figures: the most streams in
flight at once (a sweep over the corrected start → end intervals) and the mean
(`mean_in_flight`); stamp error = the record's stamp − the server's send stamp over every
output event (matched by response id and position, bench_load's `Accum`), p50/p99/max; TTFT
error p50; labkit's loop lag (its self-check) and whether the level flagged itself
client-bound; the hosts' clock uncertainty (`clock_uncertainty_ms`); for Ray, the stamp
error p99 read from the raw `t_start_mono_ns`, i.e. without the clock correction.

A level is *held* by an executor when every request succeeded, the streams in flight reached
the level, and the level did not flag itself client-bound. The note at the end gives the
largest level each executor held, and warns where a level was not flagged although its stamp
p99 error exceeded 3 ms (an error the self-check did not report).

The Ray leg runs inside ``unshare -n`` (a network namespace with only loopback: Ray then
sees 127.0.0.1 and nothing leaves the host); the bench re-executes itself there, the scripted
server and every other leg included, so all legs share the one namespace. Without Ray, its
executor, or the rights for ``unshare -n``, the other legs run and the Ray leg is reported
unavailable with the reason.

Run: `.venv/bin/python benchmarks/bench_ray.py [--levels 32,256,1000] [--legs
process,workers,ray] [--passes 2] [--tokens 20] [--interval-ms 50] [--ttft-ms 50]
[--ray-skew-ms 1000] [--json OUT]`. A benchmark, not a test: on 2 shared cores the client
legs, the server and Ray's own processes compete for the CPU.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_load import PROMPT, STAMP_P99_TARGET_MS, Accum, LegResult, StreamResult, _dist, _f
from scripted_server import ScriptedServer

from labkit.clocksync import driver_start_ns
from labkit.figures import LoadFigures, LoadLevel
from labkit.records import RequestRecord

LEGS = ("process", "workers", "ray")
_NETNS_ENV = "LABKIT_BENCH_RAY_NETNS"  # set inside the re-executed bench


@dataclass
class LegOutcome:
    """One executor at one level: its measured streams and the level's own figures."""

    result: LegResult
    level: LoadLevel | None
    in_flight_max: int
    raw: list[StreamResult] = field(default_factory=list)  # Ray: stamps without correction
    failure: str | None = None


def _config(base_url: str, leg: str, streams: int, requests: int) -> dict[str, Any]:
    """The run's config: one provider, one load level, read by `leg`."""
    experiment: dict[str, Any] = {
        "kind": "load",
        "concurrency": [streams],
        "requests": requests,
        "warmup": 1,
        "prompts": [PROMPT],
    }
    config: dict[str, Any] = {
        "name": f"bench-ray-{leg}",
        "providers": [{"id": "s", "kind": "openai_compatible", "model": "m", "base_url": base_url}],
        "experiments": [experiment],
    }
    if leg == "process":
        experiment["workers"] = 1
    elif leg == "workers":
        experiment["workers"] = "auto"
    else:
        config["executor"] = {"kind": "ray", "address": "local", "workers": "auto"}
    return config


def _stream(rec: RequestRecord, start: int | None, errors: list[str]) -> StreamResult:
    """A record as bench_load's `StreamResult`, its stamps from `start` (a clock's t_start)."""
    if rec.error is not None:
        errors.append(f"{rec.error.kind}: {rec.error.message}")
    t0 = start or 0
    return StreamResult(
        response_id=rec.response_id or "",
        t_start_ns=t0,
        ttft_ms=rec.client.ttft_ms,
        stamps_ns=[t0 + round(o * 1e6) for o in rec.client.event_offsets_ms],
        loop_lag_ms=rec.client.loop_lag_ms,
        request_sent_ms=rec.client.request_sent_ms,
    )


def _in_flight_max(records: list[RequestRecord]) -> int:
    """The most streams open at once, on the driver's clock."""
    edges: list[tuple[float, int]] = []
    for r in records:
        start = driver_start_ns(r)
        if start is None or r.client.e2e_ms is None:
            continue
        edges += [(start, 1), (start + r.client.e2e_ms * 1e6, -1)]
    edges.sort(key=lambda e: (e[0], e[1]))  # an end before a start at the same instant
    most = now = 0
    for _, step in edges:
        now += step
        most = max(most, now)
    return most


def run_leg(base_url: str, leg: str, streams: int, requests: int, skew_ns: int) -> LegOutcome:
    """One executor at one level, through labkit's runner."""
    from labkit.config import parse_config
    from labkit.runner import RunOptions, prepare_run
    from labkit.wire import loopclock

    config = parse_config(_config(base_url, leg, streams, requests))
    cpu0, wall0 = time.process_time(), time.perf_counter()
    with tempfile.TemporaryDirectory() as out:
        runner = prepare_run(config, RunOptions(out_dir=Path(out)))
        if config.executor is not None and skew_ns:
            from labkit.runner.ray_executor import ActorClock, RayExecutor

            runner.executor = RayExecutor(
                config.executor,
                runner.folder.path,
                run_id=runner.folder.run_id,
                store_text=config.store_text,
                actor_clocks={0: ActorClock(skew_ns)},
            )
        # The loop `labkit run` runs on: its self-check times each select() (labkit.loopclock).
        run = loopclock.run(runner.run())
    cpu, wall = time.process_time() - cpu0, time.perf_counter() - wall0
    measured = [r for r in run.records if not r.warmup]
    errors: list[str] = []
    streams_seen = [_stream(r, driver_start_ns(r), errors) for r in measured]
    level = None
    for answer in run.lab.answers:
        if isinstance(answer.figures, LoadFigures) and answer.figures.levels:
            level = answer.figures.levels[0]
    raw: list[StreamResult] = []
    if leg == "ray":
        raw = [_stream(r, r.t_start_mono_ns, []) for r in measured]
    # CPU and wall are the whole run's (set-up, start-up of workers or actors included).
    result = LegResult(streams_seen, cpu, wall, errors)
    return LegOutcome(result, level, _in_flight_max(measured), raw)


def ray_unavailable() -> str | None:
    """Why the Ray leg cannot run here (None: it can be tried)."""
    if importlib.util.find_spec("ray") is None:
        return "Ray is not installed (pip install 'labkit[ray]')"
    try:
        from labkit.config import parse_config

        parse_config(_config("http://127.0.0.1:1/v1", "ray", 1, 1))
    except Exception as exc:  # any refusal: this labkit has no Ray executor
        why = " ".join(str(exc).split())[:200]
        return f"this labkit has no Ray executor ({type(exc).__name__}: {why})"
    if os.environ.get(_NETNS_ENV) != "1":
        return "not inside a loopback-only network namespace (unshare -n failed)"
    return None


def _reexec_in_netns() -> None:
    """Run this bench again inside ``unshare -n`` with loopback up; returns only if that
    cannot be done (the Ray leg then reports itself unavailable)."""
    unshare, ip = shutil.which("unshare"), shutil.which("ip")
    if unshare is None or ip is None:
        return
    probe = subprocess.run(
        [unshare, "-n", "sh", "-c", f"{ip} link set lo up"], capture_output=True, check=False
    )
    if probe.returncode != 0:
        return
    os.environ[_NETNS_ENV] = "1"
    script = f'{ip} link set lo up && exec "$0" "$@"'
    os.execv(unshare, [unshare, "-n", "sh", "-c", script, sys.executable, *sys.argv])


def _figures(outcome: LegOutcome, streams: int, truth: dict[str, Any]) -> dict[str, Any]:
    """The row of one executor at one level, its stamps matched to the server's `truth`."""
    acc = Accum()
    acc.add(outcome.result, truth, streams)
    f = acc.figures()
    raw = Accum()
    raw.add(LegResult(outcome.raw, 0.0, 0.0), truth, streams)
    lvl = outcome.level
    held = (
        lvl is not None
        and lvl.failed == 0
        and not lvl.client_bound
        and outcome.in_flight_max >= streams
        and not f["unmatched_streams"]
    )
    return {
        "in_flight_max": outcome.in_flight_max,
        "mean_in_flight": lvl.mean_in_flight if lvl else None,
        "requests": lvl.requests if lvl else None,
        "failed": lvl.failed if lvl else None,
        "client_bound": lvl.client_bound if lvl else None,
        "loop_lag_ms_p50": lvl.loop_lag_ms_p50 if lvl else None,
        "clock_uncertainty_ms": lvl.clock_uncertainty_ms if lvl else None,
        "hosts": lvl.hosts if lvl else None,
        "event_err_ms": f["event_err_ms"],
        "ttft_err_ms": f["ttft_err_ms"],
        "uncorrected_event_err_ms": _dist(raw.event_err_ms) if raw.event_err_ms else None,
        "events": f["events"],
        "unmatched_streams": f["unmatched_streams"],
        "errors": f["errors"],
        "run_wall_s": outcome.result.wall_s,
        "held": held,
        "failure": outcome.failure,
    }


def print_level(streams: int, figs: dict[str, dict[str, Any]]) -> None:
    """One table: a row per executor."""
    print(f"\n== {streams} streams")
    print(
        "  executor | in flight max  mean | stamp err ms p50    p99    max | TTFT err p50 |"
        " loop lag p50 | flagged | clock ± ms | held | uncorrected p99"
    )
    for name, f in figs.items():
        if f.get("failure"):
            print(f"  {name:<8} | {f['failure']}")
            continue
        ev, tt = f["event_err_ms"], f["ttft_err_ms"]
        raw = f["uncorrected_event_err_ms"]
        print(
            f"  {name:<8} | {f['in_flight_max']:13d} {_f(f['mean_in_flight'], '5.0f')} |"
            f"         {_f(ev['p50'], '6.3f')} {_f(ev['p99'], '6.3f')} {_f(ev['max'], '6.2f')} |"
            f"      {_f(tt['p50'], '7.3f')} |      {_f(f['loop_lag_ms_p50'], '7.2f')} |"
            f" {'yes' if f['client_bound'] else 'no':>7} |"
            f" {_f(f['clock_uncertainty_ms'], '10.3f')} |"
            f" {'yes' if f['held'] else 'no':>4} | {_f(raw['p99'] if raw else None, '10.1f')}"
        )
        if f["unmatched_streams"] or f["errors"] or f["failed"]:
            print(
                f"    ! {f['failed']} failed, {f['unmatched_streams']} unmatched streams; "
                f"errors: {f['errors']}"
            )


def note(results: dict[int, dict[str, dict[str, Any]]], legs: list[str]) -> list[str]:
    """The largest level each executor held, and any unflagged stamp error."""
    lines = []
    for leg in legs:
        held = [s for s in sorted(results) if results[s].get(leg, {}).get("held")]
        failure = next((r[leg]["failure"] for r in results.values() if r[leg].get("failure")), None)
        if failure and not held:
            lines.append(f"{leg}: unavailable ({failure})")
            continue
        lines.append(
            f"{leg}: held {max(held)} streams without flagging itself client-bound"
            if held
            else f"{leg}: held none of the levels"
        )
        for streams in sorted(results):
            f = results[streams].get(leg, {})
            p99 = (f.get("event_err_ms") or {}).get("p99")
            if (
                not f.get("failure")
                and not f.get("client_bound")
                and p99
                and p99 > STAMP_P99_TARGET_MS
            ):
                lines.append(
                    f"  ! {leg} at {streams} streams: stamp p99 {p99:.2f} ms over "
                    f"{STAMP_P99_TARGET_MS:g} ms, not flagged client-bound"
                )
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--levels", default="32,256,1000", help="streams, comma-separated")
    parser.add_argument("--legs", default=",".join(LEGS), help="from " + ",".join(LEGS))
    parser.add_argument("--passes", type=int, default=2, help="measured requests per stream")
    parser.add_argument("--tokens", type=int, default=20)
    parser.add_argument("--interval-ms", type=float, default=50.0)
    parser.add_argument("--ttft-ms", type=float, default=50.0)
    parser.add_argument("--ray-skew-ms", type=float, default=1000.0, help="added to actor 0")
    parser.add_argument("--json", type=Path, default=None, help="write every figure as JSON")
    args = parser.parse_args()
    levels = [int(x) for x in args.levels.split(",") if x.strip()]
    legs = [x.strip() for x in args.legs.split(",") if x.strip()]
    if set(legs) - set(LEGS):
        parser.error(f"unknown legs: {sorted(set(legs) - set(LEGS))}")
    if "ray" in legs and os.environ.get(_NETNS_ENV) != "1":
        _reexec_in_netns()
    no_ray = ray_unavailable() if "ray" in legs else None
    skew_ns = int(args.ray_skew_ms * 1e6)
    print(
        f"scripted server (own process) on 127.0.0.1: first token {args.ttft_ms:g} ms, "
        f"{args.tokens} tokens at {args.interval_ms:g} ms; {args.passes} requests per stream; "
        f"executors {', '.join(legs)}"
        + (f"; ray actor 0 clock skewed by {args.ray_skew_ms:g} ms" if "ray" in legs else "")
        + ("; inside unshare -n" if os.environ.get(_NETNS_ENV) == "1" else "")
    )
    results: dict[int, dict[str, dict[str, Any]]] = {}
    with ScriptedServer(
        ttft_ms=args.ttft_ms, interval_ms=args.interval_ms, tokens=args.tokens
    ) as srv:
        for streams in levels:
            results[streams] = {}
            for leg in legs:
                if leg == "ray" and no_ray:
                    results[streams][leg] = {"failure": no_ray}
                    continue
                try:
                    outcome = run_leg(srv.base_url, leg, streams, args.passes * streams, skew_ns)
                except Exception as exc:  # one executor's failure ends its row only
                    results[streams][leg] = {"failure": f"{type(exc).__name__}: {exc}"[:300]}
                    srv.stamps()
                    continue
                truth = srv.stamps()["streams"]
                results[streams][leg] = _figures(outcome, streams, truth)
            print_level(streams, results[streams])
    print(
        "\nstamp error = the record's stamp (driver clock: driver_start_ns + event offset) - the "
        "server's send stamp; uncorrected = the same from the raw t_start_mono_ns. held = every "
        "request ok, the streams in flight reached the level, not flagged client-bound."
    )
    lines = note(results, legs)
    print("\n" + "\n".join(lines))
    if args.json:
        payload = {"args": {k: str(v) for k, v in vars(args).items()}, "levels": results}
        args.json.write_text(json.dumps(payload, indent=2))
        print(f"\nfigures written to {args.json}")


if __name__ == "__main__":
    main()
