"""Load levels on a Ray cluster: one actor per share of the level, across its nodes.

`executor: {kind: ray, ...}` in a config (`labkit.config.RayExecutorSettings`) makes this
the run's `Executor`: every paced level runs here instead of on this host. The plan is the
same as in one process or in worker processes: actor k of n runs share ``(k, n)`` of the
level (`PacedExperiment.run_share`; in a closed loop stream j sends requests j, j + c, ...)
with labkit's one worker body, and no API key ever passes through Ray. A level's steps, an
actor's death and Ctrl-C: `RayExecutor.run_on_actors`; what a user sees: docs/ray.md.

Ray is imported only here, and only when a config asks for it.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import importlib
import logging
import os
import socket
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, ClassVar, TypedDict

from pydantic import Field, computed_field

from labkit.analysis.selfcheck import level_lag
from labkit.clocksync import (
    ClockOffset,
    HostClock,
    clock_log_name,
    measure_offset,
    record_clock,
    write_clock_log,
)
from labkit.config import RayExecutorSettings
from labkit.errors import ProviderUnavailable, RunError
from labkit.experiments import LevelPlan, PacedExperiment, PlannedRequest
from labkit.providers import Provider
from labkit.records import (
    ClientTimings,
    ErrorKind,
    RecordError,
    RequestRecord,
    StopReason,
    new_record_id,
)
from labkit.runner.executor import Executor, LevelSink
from labkit.runner.jobs import LevelJob, Ready, Recorded, Sending, decode, encode
from labkit.runner.levellog import LevelLog, LevelRun, append_level_line, level_label
from labkit.runner.ray_address import check_ray_address
from labkit.runner.worker_body import build_worker, run_worker
from labkit.wire import loopclock
from labkit.wire.readpath import ENV_VAR, READ_PATH

__all__ = [
    "RAY_LEVELS_FILE",
    "RAY_LEVEL_LOG",
    "ActorClock",
    "LevelActor",
    "RayExecutor",
    "RayLevel",
    "ray_module",
]

#: The run folder's log of levels run on Ray: one JSON line per level (`RayLevel`).
RAY_LEVELS_FILE = "ray-levels.jsonl"

_PLACE_TIMEOUT_S = 120.0
_READY_TIMEOUT_S = 180.0
_START_MARGIN_NS = 200_000_000  # the go call must reach every actor before t0
_DRAIN_AFTER_CANCEL_S = 15.0
_OFFSET_SAMPLES = 16
_CLIENT_ATTEMPTS = 3
#: How long joining a Ray cluster (`ray.init`) may take, each attempt, before the run stops
#: with one line (the address answered the gRPC greeting, so this is a backstop).
_JOIN_TIMEOUT_S = 60.0


#: Never set: the thread that joined Ray waits on it for the life of the process.
_JOINER_STAYS = threading.Event()


async def _join_within(ray: Any, address: str, deadline_s: float) -> None:
    """`ray.init(address)` in a daemon thread, given up after `deadline_s` (RunError): a
    thread of the default executor left blocked in Ray would hold the process at its exit.
    Off the main thread, too, so that Ray does not take SIGTERM from labkit's own handler
    (it would exit without the manifest).

    A joined thread stays, parked: the processes of a cluster Ray starts here (`local`)
    are bound to the thread that started them (prctl PR_SET_PDEATHSIG fires when that
    thread ends, not the process), so they live as long as the process does."""
    loop = asyncio.get_running_loop()
    joined: asyncio.Future[None] = loop.create_future()

    def settle(error: BaseException | None) -> None:
        if joined.done():
            return
        if error is None:
            joined.set_result(None)
        else:
            joined.set_exception(error)

    def join() -> None:
        error: BaseException | None = None
        try:
            ray.init(
                address=address,
                include_dashboard=False,
                log_to_driver=False,
                configure_logging=False,
            )
        except BaseException as exc:  # handed to the awaiting task, raised there
            error = exc
        with contextlib.suppress(RuntimeError):  # the loop closed: nobody waits any more
            loop.call_soon_threadsafe(settle, error)
        if error is None:
            _JOINER_STAYS.wait()

    threading.Thread(target=join, name="labkit-ray-join", daemon=True).start()
    try:
        async with asyncio.timeout(deadline_s):
            await joined
    except TimeoutError:
        raise RunError(
            f"could not join the Ray cluster at executor.address {address!r} within "
            f"{deadline_s:g} s; check that the address is the cluster's and that its head is "
            "up (`ray status`)"
        ) from None


def _join_failure(address: str, exc: BaseException) -> str:
    """One line for a cluster `ray.init` could not join, in Ray's words where they help."""
    said = (str(exc) or type(exc).__name__).strip().splitlines()[0][:200]
    if address == "auto" and not os.environ.get("RAY_ADDRESS"):
        return (
            "executor.address auto found no running Ray cluster on this host (RAY_ADDRESS is "
            "unset): start one with `ray start --head`, or set executor.address to local (a "
            "cluster for this run) or to a cluster's address"
        )
    if address == "local":
        return f"could not start a Ray cluster on this host: {type(exc).__name__}: {said}"
    return (
        f"could not join the Ray cluster at executor.address {address!r}: "
        f"{type(exc).__name__}: {said}"
    )


_END = object()

_LoseFn = Callable[[Sending, "_Actor"], RequestRecord]


@dataclass(frozen=True)
class ActorClock:
    """An actor's reading of its host's monotonic clock (`time.perf_counter_ns`).

    Tests shift it (`skew_ns`) to play an actor whose host's clock reads that much more: its
    records' `t_start_mono_ns`, its answers to the offset probe and its view of the start
    all move, and the driver's measured offset must correct them.
    """

    skew_ns: int = 0

    def now_ns(self) -> int:
        """This actor's clock now."""
        return time.perf_counter_ns() + self.skew_ns


def ray_module() -> Any:
    """The `ray` package; one clear error where it is not installed."""
    try:
        return importlib.import_module("ray")
    except ImportError:
        raise RunError(
            "executor: kind ray needs Ray, which is not installed here; pip install 'labkit[ray]'"
        ) from None


# --- The actor (runs on a cluster node) ---------------------------------------------------


class _QueueLink:
    """The worker body's link inside an actor. The share runs on its own thread and event
    loop (`LevelActor.start`); every message goes, encoded, to the actor's queue on the
    actor's loop."""

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        queue: asyncio.Queue[str | object],
        go: concurrent.futures.Future[int],
        clock: ActorClock,
    ) -> None:
        self._loop = loop
        self._queue = queue
        self._go = go
        self._clock = clock

    def _put(self, message: Ready | Recorded | Sending) -> None:
        self._loop.call_soon_threadsafe(self._queue.put_nowait, encode(message))

    def sending(self, planned: PlannedRequest) -> None:
        request = planned.request
        prompt = request.prompt_text
        self._put(
            Sending(
                key=planned.key,
                trial=planned.trial,
                warmup=planned.warmup,
                tags=planned.tags,
                prompt_id=request.prompt_id,
                prompt_chars=len(prompt),
                prompt_bytes=len(prompt.encode("utf-8", errors="replace")),
                params=request.params,
                started_at=datetime.now(UTC),
                t_mono_ns=self._clock.now_ns(),
            )
        )

    def emit(self, record: RequestRecord) -> None:
        if self._clock.skew_ns and record.t_start_mono_ns is not None:
            record.t_start_mono_ns += self._clock.skew_ns
        self._put(Recorded(record=record))

    async def ready(self) -> int:
        self._put(Ready())
        return await asyncio.wrap_future(self._go) - self._clock.skew_ns


class LevelActor:
    """One share of one level, on one node (wrapped by `ray.remote` when used).

    Holds no key: `prepare` builds the provider on the node, from the variable its
    settings name. `job` is the actor's `LevelJob` as one JSON line.
    """

    def __init__(self, job: str, clock: ActorClock | None = None) -> None:
        self._job = LevelJob.model_validate_json(job)
        self._clock = clock or ActorClock()
        self._built: tuple[Provider, PacedExperiment[Any, Any]] | None = None
        self._go: concurrent.futures.Future[int] | None = None
        self._thread = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="labkit-share")
        self._share: asyncio.Future[None] | None = None
        self._share_loop: asyncio.AbstractEventLoop | None = None
        self._share_task: asyncio.Task[None] | None = None
        self._queue: asyncio.Queue[str | object] | None = None
        self._ended = False

    async def where(self) -> dict[str, str]:
        """This actor's node: its id, address and host name."""
        ray = ray_module()
        return {
            "node_id": str(ray.get_runtime_context().get_node_id()),
            "node_ip": str(ray.util.get_node_ip_address()),
            "hostname": socket.gethostname(),
        }

    async def prepare(self) -> str | None:
        """Build the provider and experiment; the problem in one line where the provider
        cannot run on this node (its key variable unset, another read path than the
        driver's), else None."""
        try:
            self._built = build_worker(self._job)
        except (ProviderUnavailable, RunError) as exc:
            return str(exc)
        return None

    async def now(self) -> int:
        """This actor's clock (`ActorClock`)."""
        return self._clock.now_ns()

    async def go(self, t0_ns: int) -> None:
        """Start the level at `t0_ns` on this actor's clock."""
        if self._go is not None and not self._go.done():
            self._go.set_result(int(t0_ns))

    async def stop(self) -> None:
        """Cancel the share: requests in flight end as cancelled records, streamed back."""
        share = self._share
        if share is not None and not share.done():
            share_loop, task = self._share_loop, self._share_task
            if share_loop is not None and task is not None:
                share_loop.call_soon_threadsafe(task.cancel)

    async def start(self) -> None:
        """Start the share: warm-ups now, the level at the time `go` gives.

        The share runs on a thread of its own with labkit's timed event loop
        (`labkit.loopclock`), as in a worker process: its stamps get the self-check's lateness
        estimate, and this actor's own loop stays free to answer `now` and `next_items`
        while the share reads its streams.
        """
        assert self._built is not None, "prepare() first"
        provider, experiment = self._built
        loop = asyncio.get_running_loop()
        self._queue = queue = asyncio.Queue[str | object]()
        self._go = go = concurrent.futures.Future[int]()
        link = _QueueLink(loop, queue, go, self._clock)
        started = threading.Event()

        async def share() -> None:
            self._share_loop = asyncio.get_running_loop()
            self._share_task = asyncio.current_task()
            started.set()
            await run_worker(provider, experiment, self._job, link)

        def run_share() -> None:
            try:
                loopclock.run(share())
            finally:
                started.set()
                loop.call_soon_threadsafe(queue.put_nowait, _END)

        self._share = loop.run_in_executor(self._thread, run_share)
        await asyncio.to_thread(started.wait)

    async def next_items(self) -> list[str] | None:
        """Every message queued since the last call, waiting for one (None: the share has
        ended), each one JSON line (`labkit.runner.jobs`): `Sending` before each request,
        `Recorded` after it, and `Ready` after the warm-ups.

        The driver asks again as soon as it has an answer (a long poll: the one way to
        stream that Ray Client supports too). Under load the items come in batches, one
        round trip each; a quiet stream's record comes alone, at once.
        """
        queue = self._queue
        if queue is None or self._ended:
            share = self._share
            if share is not None and share.done() and not share.cancelled():
                failure = share.exception()
                if failure is not None and not isinstance(failure, asyncio.CancelledError):
                    raise RunError(f"the actor's share failed: {failure!r}")
            return None
        batch = [await queue.get()]
        while not queue.empty():
            batch.append(queue.get_nowait())
        if batch[-1] is _END:
            batch.pop()
            self._ended = True
        return [item for item in batch if isinstance(item, str)]


# --- The driver ---------------------------------------------------------------------------


@dataclass
class _Actor:
    """The driver's view of one actor during a level."""

    index: int
    handle: Any
    host: str = "?"
    node_id: str = ""
    before: ClockOffset | None = None
    after: ClockOffset | None = None
    #: The notices of requests sent and not yet recorded, by (trial, warmup): what a
    #: cancelled request's record (which has no plan key yet) is matched by too.
    in_flight: dict[tuple[int, bool], Sending] = field(default_factory=dict)
    #: The `next_items` call awaited now: a reader cancelled mid-wait leaves it for the
    #: next reader, so no batch it brings is dropped.
    pending: Any = None
    records: list[RequestRecord] = field(default_factory=list)
    died: str | None = None


class RayLevel(LevelRun):
    """How one level went on the cluster: a line of the run folder's ``ray-levels.jsonl``."""

    died_what: ClassVar[str] = "a Ray node"

    #: Every node that ran an actor (as records name it in `RequestRecord.host`; none on a
    #: `settled` line).
    hosts: list[str] = Field(default_factory=list)
    #: Requests recorded as lost (error kind ``lost``) with the actors that died.
    lost: int = 0
    #: The nodes whose actor died mid-level.
    died: list[str] = Field(default_factory=list)
    #: The nodes whose actor's event loop ran late while reading (`labkit.analysis.selfcheck`).
    client_bound_hosts: list[str] = Field(default_factory=list)

    @computed_field  # type: ignore[prop-decorator]
    @property
    def partial(self) -> bool:
        """Whether an actor died: some of the level's requests were lost."""
        return bool(self.died)


#: The Ray levels' log: a level whose latest run on the cluster lost an actor is partial.
RAY_LEVEL_LOG = LevelLog(RAY_LEVELS_FILE, RayLevel)


class _ActorOptions(TypedDict, total=False):
    """What `ray.remote(...).options` takes for one actor."""

    num_cpus: float
    max_restarts: int
    runtime_env: dict[str, dict[str, str]]
    resources: dict[str, float]
    scheduling_strategy: str


class RayExecutor(Executor):
    """Runs paced levels on Ray actors; one per run, connected at its first level.

    `actor_clocks` (tests) gives actor k the clock `actor_clocks[k]`."""

    def __init__(
        self,
        settings: RayExecutorSettings,
        run_dir: Path,
        *,
        run_id: str,
        store_text: bool,
        actor_clocks: Mapping[int, ActorClock] | None = None,
    ) -> None:
        self.settings = settings
        self._run_dir = run_dir
        self._run_id = run_id
        self._store_text = store_text
        self._actor_clocks = dict(actor_clocks or {})
        #: Whether requests carry their trace context (`tracing.headers`).
        self.propagate_trace = True
        #: The run's tags and headers on every record and request (`Measurer`).
        self.request_tags: dict[str, str | int | float | bool] = {}
        self.request_headers: dict[str, str] = {}
        self._ray: Any = None
        self._remote_class: Any = None

    async def _connect(self) -> Any:
        if self._ray is not None:
            return self._ray
        ray = ray_module()
        if not ray.is_initialized():
            # "local" is Ray's own word for a new cluster on this host, whatever RAY_ADDRESS says.
            address = self.settings.address
            # Off the main thread, so that Ray does not take SIGTERM from labkit's own handler
            # (it would exit without the manifest); it says so in a warning, hidden here.
            logging.getLogger("ray._private.worker").addFilter(_no_sigterm_note)
            # Ray Client's proxy starts a server per client, and under load sometimes takes
            # its start for a failure: the connection is refused once, the next one works.
            attempts = _CLIENT_ATTEMPTS if address.startswith("ray://") else 1
            await asyncio.to_thread(check_ray_address, address)  # nothing there: one line
            for attempt in range(1, attempts + 1):
                try:
                    await _join_within(ray, address, _JOIN_TIMEOUT_S)
                    break
                except RunError:
                    raise
                except Exception as exc:  # Ray's own words for a cluster it cannot join
                    with contextlib.suppress(Exception):
                        await asyncio.to_thread(ray.shutdown)
                    if attempt == attempts or not isinstance(exc, ConnectionError):
                        raise RunError(_join_failure(address, exc)) from None
        self._ray = ray
        self._remote_class = ray.remote(LevelActor)
        return ray

    def actor_count(self, most: int | None) -> int:
        """Actors for a level: `workers`, or one per CPU the cluster offers, at most `most`."""
        assert self._ray is not None
        if self.settings.workers == "auto":
            cpus = float(self._ray.cluster_resources().get("CPU", 1))
            count = max(1, int(cpus // self.settings.cpus_per_worker))
        else:
            count = self.settings.workers
        return min(count, most) if most is not None else count

    def _options(self, k: int) -> _ActorOptions:
        s = self.settings
        # The event loop a worker process runs (asyncio's own), not Ray's uvloop default.
        env = {"RAY_USE_UVLOOP": "0"}
        if READ_PATH.implementation == "python":
            # The driver's Python read path on every node (an actor on the C path is
            # refused: `LevelJob.check_read_path`).
            env[ENV_VAR] = "python"
        options: _ActorOptions = {
            "num_cpus": s.cpus_per_worker,
            "max_restarts": 0,
            "runtime_env": {"env_vars": env},
        }
        if isinstance(s.placement, list):
            options["resources"] = {s.placement[k % len(s.placement)]: 0.001}
        elif s.placement == "spread":
            options["scheduling_strategy"] = "SPREAD"
        return options

    async def run_level(
        self,
        experiment: PacedExperiment[Any, Any],
        provider: Provider,
        level: LevelPlan,
        sink: LevelSink,
    ) -> None:
        """Run `level` on actors; every record goes to `sink` as it arrives, and the level
        is partial there where an actor died."""
        ran = await self.run_on_actors(experiment, provider, level, sink.keep, sink.message)
        if ran.partial:
            sink.partial("a Ray actor")

    async def run_on_actors(
        self,
        experiment: PacedExperiment[Any, Any],
        provider: Provider,
        level: LevelPlan,
        on_record: Callable[[RequestRecord], None],
        on_message: Callable[[str], None],
    ) -> RayLevel:
        """Run `level` on actors (at most `level.most_workers`); how it went.

        1. the driver starts ``n`` actors (`LevelActor`), placed by `placement`; each builds
           its provider from its `LevelJob` (one JSON line), reading the API key from the
           named variable **on its own node** — no key is ever in an actor's arguments, a
           method's arguments, the object store or a `runtime_env`; a node without the
           variable is one error naming both;
        2. each actor runs labkit's worker body (`labkit.runner.worker_body`, the one worker
           processes run): the warm-ups, then "ready";
        3. the driver measures each actor's clock offset (`labkit.clocksync.measure_offset`
           over `LevelActor.now`), picks the level's start t0 on its own clock and gives each
           actor ``t0 - offset``, the same instant on that actor's clock;
        4. each actor streams its records back as each completes (a long poll, `next_items`,
           of `labkit.runner.jobs` messages as JSON lines, the codec of worker processes);
           the driver validates each, stamps it with its host and clock offset and appends it
           to the run folder at once;
        5. after the level the driver measures the offsets again (the clock log,
           ``clock-<experiment>.jsonl``), says which hosts were client-bound, and kills the
           actors.

        An actor (or node) that dies mid-level leaves its records in place; each request it
        had in flight becomes one record with error kind ``lost`` naming the node, and the
        level is partial (`--resume` runs it again). Ctrl-C stops every actor, keeps the
        partial records they send back in the next seconds (`_stop`), and kills them. No
        actor outlives the level, and a cluster started for the run (`address: local`) stops
        with it (`close`).
        """
        ray = await self._connect()
        n = self.actor_count(level.most_workers)
        job = LevelJob.of(
            provider,
            experiment,
            level,
            run_id=self._run_id,
            store_text=self._store_text,
            propagate_trace=self.propagate_trace,
            request_tags=self.request_tags,
            request_headers=self.request_headers,
        )

        def lose(notice: Sending, actor: _Actor) -> RequestRecord:
            return _lost_record(notice, provider, experiment.name, self._run_id, actor)

        actors: list[_Actor] = []
        started = False
        try:
            for k in range(n):
                line = job.for_worker(k, n).model_dump_json()
                clock = self._actor_clocks.get(k, ActorClock())
                handle = self._remote_class.options(**self._options(k)).remote(line, clock)
                actors.append(_Actor(k, handle))
            await self._place(actors)
            problems = await asyncio.gather(*(a.handle.prepare.remote() for a in actors))
            for actor, problem in zip(actors, problems, strict=True):
                if problem is not None:
                    raise RunError(_missing_key_line(actor.host, provider, problem))
            await asyncio.gather(*(a.handle.start.remote() for a in actors))
            started = True
            await self._warm_up(actors, on_record)
            t0 = time.perf_counter_ns() + _START_MARGIN_NS
            for actor in actors:
                assert actor.before is not None
                actor.handle.go.remote(t0 - actor.before.offset_ns)
            await asyncio.gather(*(self._pump(a, lose, on_record) for a in actors))
            label = level_label(level)
            for actor in actors:
                if actor.died is None:
                    actor.after = await _offset_of(actor)
            write_clock_log(
                self._run_dir / clock_log_name(experiment.name),
                [
                    HostClock(a.host, label, a.before, a.after, experiment.name)
                    for a in actors
                    if a.before is not None
                ],
            )
            summary = self._summary(actors, experiment, provider.id, label, on_message)
            append_level_line(self._run_dir / RAY_LEVELS_FILE, summary)
            return summary
        except BaseException:
            await self._stop(actors if started else [], lose, on_record)
            raise
        finally:
            for actor in actors:
                with contextlib.suppress(Exception):
                    ray.kill(actor.handle, no_restart=True)

    async def _place(self, actors: list[_Actor]) -> None:
        """Wait for every actor to start somewhere; name the ones no node can take."""
        try:
            async with asyncio.timeout(_PLACE_TIMEOUT_S):
                wheres = await asyncio.gather(*(a.handle.where.remote() for a in actors))
        except TimeoutError:
            raise RunError(
                f"Ray could not place the level's {len(actors)} actors within "
                f"{_PLACE_TIMEOUT_S:g} s: no node offers what they ask "
                f"({self._options(0)}); check placement and cpus_per_worker"
            ) from None
        for actor, where in zip(actors, wheres, strict=True):
            actor.node_id = where["node_id"]
            actor.host = f"{where['hostname']}/{where['node_ip']}/{where['node_id'][:8]}"

    async def _warm_up(
        self,
        actors: list[_Actor],
        on_record: Callable[[RequestRecord], None],
    ) -> None:
        """Read each actor's warm-up records up to its ready item; then measure its clock
        and keep the warm-ups, stamped with it."""
        for actor in actors:
            try:
                await self._warm_up_one(actor, on_record)
            except self._ray.exceptions.RayActorError as exc:
                raise RunError(
                    f"the Ray actor on node {actor.host} died before the level started "
                    f"({_death_reason(exc)})"
                ) from None

    async def _warm_up_one(self, actor: _Actor, on_record: Callable[[RequestRecord], None]) -> None:
        """One actor's warm-ups, up to its ready item; then its clock offset."""
        warmups: list[RequestRecord] = []
        async with asyncio.timeout(_READY_TIMEOUT_S):
            while (batch := await _next_items(actor)) is not None:
                messages = [decode(line) for line in batch]
                warmups.extend(m.record for m in messages if isinstance(m, Recorded))
                if messages and isinstance(messages[-1], Ready):  # it now waits for its start
                    break
            else:
                raise RunError(f"the actor on {actor.host} ended before its level started")
        actor.before = await _offset_of(actor)
        for record in warmups:
            self._arrived(actor, record, on_record)

    def _arrived(
        self, actor: _Actor, record: RequestRecord, on_record: Callable[[RequestRecord], None]
    ) -> None:
        actor.in_flight.pop((record.trial, record.warmup), None)
        record.host = actor.host
        if actor.before is not None:
            record.clock = record_clock(actor.before)
        actor.records.append(record)
        on_record(record)

    async def _pump(
        self,
        actor: _Actor,
        lose: _LoseFn,
        on_record: Callable[[RequestRecord], None],
    ) -> None:
        """Pass an actor's records on as they come; if it dies, record its in-flight
        requests as lost."""
        ray = self._ray
        try:
            while (batch := await _next_items(actor)) is not None:
                for line in batch:
                    message = decode(line)
                    if isinstance(message, Recorded):
                        self._arrived(actor, message.record, on_record)
                    elif isinstance(message, Sending):
                        actor.in_flight[(message.trial, message.warmup)] = message
        except ray.exceptions.RayActorError as exc:
            actor.died = _death_reason(exc)
            for notice in list(actor.in_flight.values()):
                self._arrived(actor, lose(notice, actor), on_record)
            actor.in_flight.clear()

    async def _stop(
        self,
        actors: list[_Actor],
        lose: _LoseFn,
        on_record: Callable[[RequestRecord], None],
    ) -> None:
        """Interrupted: cancel every actor's share and keep the partial records they send
        back within a few seconds."""
        for actor in actors:
            with contextlib.suppress(Exception):
                actor.handle.stop.remote()
        if not actors:
            return
        drains = [asyncio.create_task(self._pump(a, lose, on_record)) for a in actors]
        with contextlib.suppress(Exception, asyncio.CancelledError):
            await asyncio.wait_for(
                asyncio.gather(*drains, return_exceptions=True), _DRAIN_AFTER_CANCEL_S
            )
        for task in drains:
            task.cancel()

    def _summary(
        self,
        actors: list[_Actor],
        experiment: PacedExperiment[Any, Any],
        provider_id: str,
        label: str,
        on_message: Callable[[str], None],
    ) -> RayLevel:
        hosts = sorted({a.host for a in actors})
        level = RayLevel(experiment=experiment.name, provider=provider_id, level=label, hosts=hosts)
        for actor in actors:
            if actor.died is not None:
                lost = sum(1 for r in actor.records if r.error and r.error.kind == ErrorKind.LOST)
                level.lost += lost
                level.died.append(actor.host)
                on_message(
                    f"{experiment.name}: level {label}: the Ray actor on node {actor.host} "
                    f"died ({actor.died}); its finished records are kept, {lost} request(s) "
                    "in flight recorded as lost; the level is partial (labkit run --resume "
                    "runs it again)"
                )
        waited = False
        for host in hosts:
            measured = [r for a in actors if a.host == host for r in a.records if not r.warmup]
            lag = level_lag(measured)
            if lag.client_bound:
                level.client_bound_hosts.append(host)
                waited = waited or lag.cause == "waited"
        if level.client_bound_hosts:
            # Where an actor waited for a CPU, more workers on its node would wait too.
            fix = "free those nodes' CPUs or add nodes" if waited else "add workers or nodes"
            on_message(
                f"{experiment.name}: level {label}: client-bound on "
                f"{', '.join(level.client_bound_hosts)} (the actor's event loop ran late "
                f"while reading); {fix}"
            )
        return level

    async def close(self) -> None:
        """Disconnect from the cluster (a cluster started for the run stops with it)."""
        if self._ray is not None:
            ray, self._ray = self._ray, None
            await asyncio.to_thread(ray.shutdown)


async def _next_items(actor: _Actor) -> list[str] | None:
    if actor.pending is None:
        actor.pending = actor.handle.next_items.remote()
    batch: list[str] | None = await actor.pending
    actor.pending = None
    return batch


async def _offset_of(actor: _Actor) -> ClockOffset:
    async def remote_now() -> int:
        return int(await actor.handle.now.remote())

    return await measure_offset(remote_now, samples=_OFFSET_SAMPLES)


def _missing_key_line(host: str, provider: Provider, problem: str) -> str:
    variable = provider.settings.api_key_env
    if variable and variable in problem:
        return (
            f"Ray node {host}: {variable} is not set there; each node reads provider "
            f"{provider.id!r}'s key from its own environment (keys never travel through "
            f"Ray): export {variable} where that node's `ray start` runs"
        )
    return f"Ray node {host}: {problem}"


def _death_reason(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return (text[0] if text else type(exc).__name__)[:200]


def _no_sigterm_note(record: logging.LogRecord) -> bool:
    return not record.getMessage().startswith("SIGTERM handler is not set")


def _lost_record(
    notice: Sending, provider: Provider, experiment: str, run_id: str, actor: _Actor
) -> RequestRecord:
    """The record of a request that was in flight on a dead actor: what was known when it
    was sent, and who lost it."""
    return RequestRecord(
        run_id=run_id,
        record_id=new_record_id(),
        experiment=experiment,
        trial=notice.trial,
        warmup=notice.warmup,
        provider=provider.id,
        provider_kind=provider.kind,
        model=provider.model,
        params=dict(notice.params),
        prompt_id=notice.prompt_id,
        prompt_chars=notice.prompt_chars,
        prompt_bytes=notice.prompt_bytes,
        started_at=notice.started_at,
        t_start_mono_ns=notice.t_mono_ns,
        client=ClientTimings(decode_null_reason="no_output"),  # nothing of it came back
        stop_reason=StopReason.ERROR,
        plan_key=notice.key,
        tags=dict(notice.tags),
        error=RecordError(
            kind=ErrorKind.LOST,
            message=f"lost: the Ray actor on node {actor.host} died with this request in "
            f"flight ({actor.died})",
        ),
    )
