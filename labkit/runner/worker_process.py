"""The worker side of `labkit.runner.workers`: `python -m labkit.runner.worker_process`.

Reads its job from stdin, builds its own provider and recorder, says it is ready, waits for
the level's start time, then runs its share and writes each record to stdout as one JSON
line. Kept out of the `labkit.runner` package's imports so that running it as a module
imports it once.
"""

from __future__ import annotations

import asyncio
import gc
import json
import signal
import sys
from typing import Any

from labkit import loopclock
from labkit.experiments import PacedExperiment, PlannedRequest, experiment_class
from labkit.providers import Provider, provider_class
from labkit.recorder import LoopLagMonitor, RecordContext, StreamRecorder
from labkit.records import RequestRecord
from labkit.scrub import guard_std_streams

__all__ = ["main"]


def _build(document: dict[str, Any]) -> tuple[Provider, PacedExperiment]:
    settings_data = document["provider"]
    cls = provider_class(settings_data["kind"])
    settings = cls.settings_model.model_validate(settings_data)
    provider = cls(
        settings, api_key=settings.check_available(), pool_size=int(document["pool_size"])
    )
    provider.server_build = document.get("server_build")
    exp_data = document["experiment"]
    exp_cls = experiment_class(exp_data["settings"]["kind"])
    settings_model = exp_cls.settings_model
    experiment = exp_cls(
        settings_model.model_validate(exp_data["settings"]), int(exp_data["index"])
    )
    if not isinstance(experiment, PacedExperiment):
        raise TypeError(f"{experiment.name} does not pace its own requests")
    experiment.restore(document["job"])
    return provider, experiment


def _emit_line(obj: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


def _emit(record: RequestRecord) -> None:
    sys.stdout.write(record.to_json_line() + "\n")
    sys.stdout.flush()


async def _worker_main() -> int:
    loop = asyncio.get_running_loop()
    document = json.loads(await asyncio.to_thread(sys.stdin.readline))
    provider, experiment = _build(document)
    lag = LoopLagMonitor()
    recorder = StreamRecorder(lag_monitor=lag, on_cancelled=_emit)
    sdk: Any = None
    run_id = str(document["run_id"])
    store_text = bool(document["store_text"])

    async def send(planned: PlannedRequest, queue_ms: float) -> None:
        nonlocal sdk
        ctx = RecordContext(
            run_id=run_id,
            experiment=experiment.name,
            trial=planned.trial,
            warmup=planned.warmup,
            tags=planned.tags,
            queue_ms=queue_ms,
            store_text=store_text,
        )
        if planned.request.client_path == "sdk":
            if sdk is None:
                from labkit.sdkpath import SDKRecorder

                sdk = SDKRecorder(lag_monitor=lag, on_cancelled=_emit)
            record = await sdk.record(provider, planned.request, ctx)
        else:
            record = await recorder.record(provider, planned.request, ctx)
        record.plan_key = planned.key
        _emit(record)

    # A fresh process pays its first connection and lazy imports on its first request:
    # the experiment's warm-ups, sent again here (stored as warm-ups) before the level.
    where = f"{document['job'].get('level', 0)}-w{document['worker']}"
    for planned in experiment.requests_for(provider):
        if planned.warmup:
            planned.key += f"/{where}"
            await send(planned, 0.0)
    gc.collect()
    gc.freeze()  # no full collection of start-up garbage in the middle of the level
    _emit_line({"ready": True})
    go = json.loads(await asyncio.to_thread(sys.stdin.readline))
    task = asyncio.current_task()
    assert task is not None
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, task.cancel)
    lag.start()
    share = (int(document["worker"]), int(document["processes"]))
    try:
        await experiment.run_share(provider, document["job"], share, int(go["t0_ns"]), send)
    except asyncio.CancelledError:
        return 130
    finally:
        await lag.stop()
        if sdk is not None:
            await sdk.aclose()
        await provider.aclose()
    return 0


def main() -> None:
    """Entry point of a worker process (`python -m labkit.runner.worker_process`)."""
    # Ctrl-C in a terminal reaches the whole process group. The parent then stops its
    # workers with SIGTERM, which cancels their requests once the level has started (and
    # simply ends a worker that has measured nothing yet).
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    guard_std_streams(stdout=False, controls=True)  # stderr is the worker's log
    sys.exit(loopclock.run(_worker_main()))


if __name__ == "__main__":
    main()
