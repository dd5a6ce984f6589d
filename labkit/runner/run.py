"""The runner: every experiment against every available provider, into one run folder.

Providers run independently (one asyncio task each), so a slow or failing provider never
stalls the others; requests to one provider run with its bounded `concurrency`. Warm-ups
go first and are marked. Each record is appended and flushed as soon as it is complete, so
a crash or Ctrl-C loses nothing finished, and `resume` redoes only what is missing.
"""

from __future__ import annotations

import asyncio
import bisect
import contextlib
import itertools
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pydantic import JsonValue

from labkit.analysis.requests import request_stats
from labkit.analysis.selfcheck import lags_once
from labkit.clocksync import clock_log_name, read_clock_log
from labkit.config import LabConfig, parse_config
from labkit.errors import LabkitError, ProviderUnavailable, RunError
from labkit.experiments import Experiment, PacedExperiment, PlannedRequest, experiment_class
from labkit.experiments.paced import connections_needed
from labkit.manifest import (
    FOLDER_FORMAT,
    Manifest,
    ProviderManifest,
    ReadPathManifest,
    RunStatus,
)
from labkit.measurement.recorder import StreamRecorder
from labkit.measurement.sdkpath import SDKRecorder
from labkit.providers import ManagedServerHandle, Provider, ProviderSettings, provider_class
from labkit.records import ErrorKind, LabAnswer, LabResults, RecordError, RequestRecord
from labkit.runner.executor import Executor, Measurer
from labkit.runner.gcpolicy import figures_gc, level_gc
from labkit.runner.hostcpu import host_cpu_between, read_cpu
from labkit.runner.later import LaterReport, fetch_later_stats
from labkit.runner.levellog import LevelLog
from labkit.runner.ray_executor import RAY_LEVEL_LOG, RayExecutor
from labkit.runner.results import RunFolder, host_info, new_run_id, package_versions
from labkit.runner.scrape import MetricsScraper, ScrapeReport
from labkit.runner.workers import WORKER_LEVEL_LOG, HostExecutor
from labkit.server_metrics import metrics_file_name, read_server_metrics
from labkit.timing import percentile
from labkit.tracing.settings import (
    METRICS_FILE,
    TRACES_FILE,
    otlp_metrics_endpoint,
    otlp_traces_endpoint,
)
from labkit.wire.readpath import READ_PATH

__all__ = ["ProviderOutcome", "RunOptions", "RunResult", "Runner", "run_lab"]

_RETRYABLE_STATUS = {408, 409, 425, 429, 500, 502, 503, 504, 529}
#: The longest wait before a retry: a server's Retry-After is honoured up to this (a longer
#: one, or `1e400`, waits this long), and so is the doubling backoff without one.
RETRY_WAIT_CAP_S = 60.0


@dataclass
class RunOptions:
    """What the CLI can override in a config."""

    out_dir: Path | None = None
    repeats: int | None = None
    providers: list[str] | None = None
    experiments: list[str] | None = None
    config_path: str | None = None
    #: The run folder's name (its run id); None: a new one (`new_run_id`). A watch names
    #: each round's.
    run_id: str | None = None


@dataclass
class ProviderOutcome:
    """How one provider's part of the run went."""

    id: str
    kind: str
    model: str
    status: str = "pending"  # ok | skipped | failed | interrupted
    reason: str | None = None
    first_error: str | None = None
    done: int = 0
    failed: int = 0
    planned: int = 0
    server: dict[str, JsonValue] | None = None
    #: Whether the provider says it reports its own prefill/decode times (None: not known).
    reports_server_timings: bool | None = None
    #: How the scrapes of the server's /metrics went, summed over experiments (None: none).
    server_metrics: ScrapeReport | None = None
    #: How fetching the provider's stats after the run went (None: it keeps none).
    stats_later: LaterReport | None = None
    #: The measured requests' TTFTs so far (ms), kept sorted (`ttft_p50`).
    ttfts: list[float] = field(default_factory=list)
    #: Whether every experiment went through its whole plan (each planned request has a
    #: record, failed ones included); a run is `completed` only when every provider's is.
    finished: bool = False

    def manifest_entry(self) -> ProviderManifest:
        """The provider's entry in `manifest.json`."""
        return ProviderManifest(
            kind=self.kind,
            model=self.model,
            status=self.status,
            reason=self.reason,
            first_error=self.first_error,
            requests=self.done,
            failed=self.failed,
            server=self.server,
            reports_server_timings=self.reports_server_timings,
            server_metrics=self.server_metrics.manifest_entry() if self.server_metrics else None,
            stats_later=self.stats_later.manifest_entry() if self.stats_later else None,
            finished=self.finished,
        )

    def unfinished_reason(self) -> str:
        """Why this provider's plan did not finish, for the manifest and the terminal."""
        said = f"{self.status}: {self.reason}" if self.reason else self.status
        return f"{said}; {self.done} request(s) recorded in this session, the rest not sent"


@dataclass
class RunResult:
    """What a finished (or interrupted) run produced."""

    folder: RunFolder
    outcomes: list[ProviderOutcome]
    records: list[RequestRecord]
    lab: LabResults
    status: str


ProgressHook = Callable[[ProviderOutcome], None]
SetupHook = Callable[[str], None]


def _retryable(error: RecordError) -> bool:
    if error.kind in (ErrorKind.CONNECTION, ErrorKind.TIMEOUT):
        return True
    return error.kind == ErrorKind.HTTP_STATUS and error.status in _RETRYABLE_STATUS


class ProviderDied(Exception):
    """A managed server exited during the run."""


class Runner:
    """Runs one config into one run folder."""

    def __init__(
        self,
        config: LabConfig,
        folder: RunFolder,
        *,
        on_progress: ProgressHook | None = None,
        on_message: SetupHook | None = None,
        done_keys: set[tuple[str, str]] | None = None,
        previous: list[RequestRecord] | None = None,
        finished_before: dict[str, ProviderManifest] | None = None,
    ) -> None:
        self.config = config
        self.folder = folder
        self.on_progress = on_progress or (lambda o: None)
        self.on_message = on_message or (lambda m: None)
        self._done_keys = done_keys or set()
        self._records: list[RequestRecord] = list(previous or [])
        #: Providers a resumed run had already finished: left as they are, not started again
        #: (their key need not be set now).
        self._finished_before = finished_before or {}
        self._session_start = len(self._records)
        #: The providers with a level this session that a worker's death left partial.
        #: Provider id -> what died mid-level in one of its levels this session.
        self._partial_this_session: dict[str, str] = {}
        self.experiments: list[Experiment] = []
        counts: dict[str, int] = {}
        for settings in config.experiments:
            n = counts.get(settings.kind, 0)
            counts[settings.kind] = n + 1
            self.experiments.append(experiment_class(settings.kind)(settings, n))
        self.outcomes = [ProviderOutcome(p.id, p.kind, p.model) for p in config.providers]
        self._recorder = StreamRecorder(on_cancelled=self._keep)
        self._sdk = SDKRecorder(on_cancelled=self._keep)
        self._measurer = Measurer(
            self._recorder,
            lambda: self._sdk,
            run_id=folder.run_id,
            store_text=config.store_text,
            propagate_trace=config.tracing.headers,
            request_tags=config.request_tags,
            request_headers=config.request_headers,
        )
        #: Where paced levels run, chosen once for the run: a Ray cluster's actors where the
        #: config names one (`executor:`), else this host's processes. Tests may replace it
        #: before `run` (a Ray executor with skewed actor clocks).
        self.executor: Executor
        if config.executor is not None:
            self.executor = RayExecutor(
                config.executor, folder.path, run_id=folder.run_id, store_text=config.store_text
            )
            self.executor.propagate_trace = config.tracing.headers
            self.executor.request_tags = dict(config.request_tags)
            self.executor.request_headers = dict(config.request_headers)
        else:
            self.executor = HostExecutor(
                self._measurer,
                run_id=folder.run_id,
                store_text=config.store_text,
                run_dir=folder.path,
            )

    def _keep(self, record: RequestRecord) -> None:
        if not self.config.store_text and record.output_text is not None:
            # Text kept for an `on_record` hook only (see PlannedRequest.on_record).
            record = record.model_copy(update={"output_text": None})
        self.folder.append(record)
        self._records.append(record)

    async def run(self) -> RunResult:
        """Run every provider; always leaves a consistent manifest behind."""
        status: RunStatus = "failed"
        unfinished: dict[str, str] | None = None
        # Ray's actors are not labkit's children: their CPU time would read as others'.
        converters = self.folder.sidecar.cpu_s  # counted apart from labkit's own
        cpu_start = read_cpu(sidecar=converters) if self.config.executor is None else None
        self._read_partial_levels()  # a resumed run runs those levels again
        try:
            tasks = [
                asyncio.create_task(self._run_provider(s, o), name=f"provider:{s.id}")
                for s, o in zip(self.config.providers, self.outcomes, strict=True)
            ]
            try:
                await asyncio.gather(*tasks)
            except asyncio.CancelledError:
                for t in tasks:
                    t.cancel()
                await asyncio.gather(*tasks, return_exceptions=True)
                status = "interrupted"
                raise
            unfinished = {o.id: o.unfinished_reason() for o in self.outcomes if not o.finished}
            status = "incomplete" if unfinished else "completed"
        finally:
            await self.executor.close()
            self.folder.close()
            cpu_end = read_cpu(sidecar=converters) if cpu_start is not None else None
            update = Manifest(
                ended_at=datetime.now(UTC).isoformat(),
                status=status,
                records=len(self._records),
                providers={
                    o.id: self._finished_before.get(o.id) or o.manifest_entry()
                    for o in self.outcomes
                },
                unfinished=unfinished or None,
            )
            if cpu_start is not None and cpu_end is not None:
                update.host_cpu = host_cpu_between(cpu_start, cpu_end)
            self.folder.write_manifest(update)
        if self.folder.write_error is not None:
            # Every record after the failed write would be lost: the run stops here, its
            # manifest says why, and `--resume` finishes it.
            raise RunError(f"{self.folder.write_error}; resume with labkit run --resume")
        await self.folder.sidecar.finish()  # the columnar sidecar's last part
        await self._export_traces()
        with figures_gc():  # no full collection scans the records while they are read
            lab = self.analyze()
        self.folder.write_lab(lab)
        return RunResult(self.folder, self.outcomes, self._records, lab, status)

    async def _export_traces(self) -> None:
        """The run's spans and metrics to the configured OTLP endpoint and/or files, once every
        request has ended (never while one is measured); a failure is said, never raised."""
        tracing = self.config.tracing
        file = self.folder.path / TRACES_FILE if tracing.file else None
        metrics_file = self.folder.path / METRICS_FILE if tracing.file else None
        endpoints = (otlp_traces_endpoint(tracing), otlp_metrics_endpoint(tracing))
        if file is None and endpoints == (None, None):
            return
        from labkit.tracing.export import export_run  # OpenTelemetry loads only when used

        report = await asyncio.to_thread(
            export_run,
            self.folder.run_id,
            list(self._records),
            tracing,
            file=file,
            metrics_file=metrics_file,
        )
        self.on_message(f"tracing: {report.summary()}")

    def analyze(self) -> LabResults:
        """Every experiment's answer for every provider that ran (each group's stamp
        self-check summary computed once for all that ask it: `lags_once`)."""
        with lags_once():
            return self._analyze()

    def _analyze(self) -> LabResults:
        answers: list[LabAnswer] = []
        named = {exp.name: exp for exp in self.experiments}
        for exp in self.experiments:  # what an experiment comparing providers reads
            exp.all_records = {}
            exp.host_clocks = read_clock_log(self.folder.path / clock_log_name(exp.name))
        self._read_partial_levels()
        for r in self._records:
            if (owner := named.get(r.experiment)) is not None:
                owner.all_records.setdefault(r.provider, []).append(r)
        for outcome in self.outcomes:
            mine = [r for r in self._records if r.provider == outcome.id]
            if not mine:  # skipped, or failed before its first request: nothing to analyse
                continue
            scraped = read_server_metrics(self.folder.path, outcome.id)
            for exp in self.experiments:
                exp.server_metrics[outcome.id] = scraped
                recs = [r for r in mine if r.experiment == exp.name]
                try:
                    answers.append(exp.judged(outcome.id, outcome.model, recs))
                except Exception as exc:  # an analysis bug must not lose the run
                    answers.append(
                        LabAnswer(
                            experiment=exp.name,
                            provider=outcome.id,
                            model=outcome.model,
                            question=exp.question,
                            answer=f"The analysis failed: {type(exc).__name__}: {exc}",
                            status="failed",
                        )
                    )
            # each answer may cite another of the same provider (a proof of its split)
            by_name = {e.name: e for e in self.experiments}
            theirs = [a for a in answers if a.provider == outcome.id]
            for i, a in enumerate(answers):
                citing = by_name.get(a.experiment)
                if a.provider == outcome.id and citing is not None and a.status != "failed":
                    answers[i] = citing.cite(a, [b for b in theirs if b is not a])
        return LabResults(
            run_id=self.folder.run_id, answers=answers, requests=request_stats(self._records)
        )

    async def _run_provider(self, settings: ProviderSettings, outcome: ProviderOutcome) -> None:
        before = self._finished_before.get(settings.id)
        if before is not None:
            outcome.status, outcome.reason, outcome.finished = before.status, before.reason, True
            self.on_progress(outcome)
            return
        try:
            api_key = settings.check_available()
        except ProviderUnavailable as exc:
            outcome.status, outcome.reason = "skipped", str(exc)
            self.on_message(str(exc))
            self.on_progress(outcome)
            return
        server: ManagedServerHandle | None = None
        provider: Provider | None = None
        try:
            managed = settings.managed_server(self.folder.path)
            if managed is not None:
                settings = await self._start_server(settings, managed)
                server = managed
                outcome.server = server.info()
            pool = connections_needed(self.experiments)
            provider = provider_class(settings.kind)(settings, api_key=api_key, pool_size=pool)
            outcome.reports_server_timings = provider.reports_server_timings
            try:
                described = await provider.describe()
            except Exception as exc:  # describing is best-effort, the run goes on
                described = {"error": f"{type(exc).__name__}: {exc}"}
            if described and outcome.server is None:
                outcome.server = described
            for exp in self.experiments:
                await self._run_experiment(exp, provider, outcome, server)
            if (died := self._partial_this_session.get(outcome.id)) is not None:
                outcome.reason = f"{died} died mid-level (a partial level)"  # --resume redoes it
            else:
                outcome.finished = True
            await self._fetch_stats_later(provider, outcome)
            if outcome.done and outcome.failed == outcome.done:
                outcome.status = "failed"
                outcome.reason = f"every request failed; first error: {outcome.first_error}"
                self.on_message(f"provider {outcome.id!r}: {outcome.reason}")
            else:
                outcome.status = "ok"
        except asyncio.CancelledError:
            outcome.status = "interrupted"
            raise
        except ProviderDied as exc:
            outcome.status, outcome.reason = "failed", str(exc)
            self.on_message(f"provider {outcome.id!r}: {exc}")
        except LabkitError as exc:
            outcome.status, outcome.reason = "failed", str(exc)
            self.on_message(f"provider {outcome.id!r} failed: {exc}")
        except Exception as exc:  # one provider's failure never ends the others' run
            outcome.status = "failed"
            outcome.reason = _provider_failure(exc, settings)
            self.on_message(f"provider {outcome.id!r} failed: {outcome.reason}")
        finally:
            if provider is not None:
                await self._sdk.aclose(provider.id)
                await provider.aclose()
            if server is not None:
                await asyncio.to_thread(server.stop)
            self.on_progress(outcome)

    async def _fetch_stats_later(self, provider: Provider, outcome: ProviderOutcome) -> None:
        """The provider's own account of each response, where it keeps one (never fails
        the run: what could not be fetched is counted and said once)."""
        if not provider.fetches_stats_later():
            return
        mine = [r for r in self._records if r.provider == provider.id]
        self.on_message(f"provider {provider.id!r}: fetching its stats of each response")
        try:
            report = await fetch_later_stats(provider, mine, self.folder.path)
        except (OSError, ValueError) as exc:
            report = LaterReport(file="", missing=len(mine), first_error=str(exc)[:200])
        outcome.stats_later = report
        note = report.failure_note(provider.id)
        if note:
            self.on_message(note)

    async def _start_server(
        self, settings: ProviderSettings, server: ManagedServerHandle
    ) -> ProviderSettings:
        """Start `settings`' managed server; the settings with its base URL filled in."""
        self.on_message(f"provider {settings.id!r}: preparing the local {server.name}")
        try:
            base_url = await asyncio.to_thread(server.start)
        except BaseException:
            await asyncio.to_thread(server.stop)
            raise
        self.on_message(f"provider {settings.id!r}: {server.name} ready at {base_url}")
        return settings.model_copy(update={"base_url": base_url})

    async def _run_experiment(
        self,
        exp: Experiment,
        provider: Provider,
        outcome: ProviderOutcome,
        server: ManagedServerHandle | None,
    ) -> None:
        await self._measurer.set_up(provider, exp.paths_for(provider))
        scraper = self._scraper(exp, provider)
        if scraper is not None:
            scraper.start()
        try:
            await self._run_experiment_requests(exp, provider, outcome, server)
        finally:
            if scraper is not None:
                self._scraped(await asyncio.to_thread(scraper.stop), outcome)

    def _scraper(self, exp: Experiment, provider: Provider) -> MetricsScraper | None:
        """A scraper of the provider's /metrics for one experiment (None: it has none)."""
        url = provider.metrics_url()
        if url is None:
            return None
        interval = exp.settings.metrics_interval_s or provider.settings.metrics_interval_s
        path = self.folder.path / metrics_file_name(provider.id)
        return MetricsScraper(provider.id, url, path, interval_s=interval)

    def _scraped(self, report: ScrapeReport, outcome: ProviderOutcome) -> None:
        """Add one experiment's scrapes to the provider's; say once when scrapes failed."""
        total = outcome.server_metrics
        if total is None:
            outcome.server_metrics = total = ScrapeReport(url=report.url, file=report.file)
        first_failures = not total.failed
        total.scrapes += report.scrapes
        total.failed += report.failed
        total.first_error = total.first_error or report.first_error
        note = report.failure_note(outcome.id)
        if note and first_failures:
            self.on_message(note)

    async def _run_experiment_requests(
        self,
        exp: Experiment,
        provider: Provider,
        outcome: ProviderOutcome,
        server: ManagedServerHandle | None,
    ) -> None:
        await exp.prepare(provider)
        # The plan is drawn lazily, one request at a time, so a huge `--repeats` starts
        # sending at once, holds only what is in flight, and Ctrl-C works at any moment.
        plan = (
            p for p in exp.requests_for(provider) if (provider.id, p.key) not in self._done_keys
        )
        total = exp.planned_count(provider)
        counting = total is None  # unknown ahead: count each request as it is drawn
        if total is not None:
            mine = f"{exp.name}/"
            done = sum(1 for p, k in self._done_keys if p == provider.id and k.startswith(mine))
            outcome.planned += max(0, total - done)
        self.on_progress(outcome)
        first_measured: PlannedRequest | None = None
        for planned in plan:  # warm-ups lead the plan and go one at a time
            if counting:
                outcome.planned += 1
                self.on_progress(outcome)
            if not planned.warmup:
                first_measured = planned
                break
            await self._send(exp, provider, planned, outcome, server, 0.0)
        if isinstance(exp, PacedExperiment):
            await self._run_levels(exp, provider, outcome, server)
            return
        queue = itertools.chain([first_measured] if first_measured else [], plan)
        failures: list[BaseException] = []

        async def stream_worker() -> None:
            # `concurrency` workers, each sending its next request as soon as one ends.
            for planned in queue:
                if counting and planned is not first_measured:  # that one was counted above
                    outcome.planned += 1
                    self.on_progress(outcome)
                try:
                    await self._send(exp, provider, planned, outcome, server, 0.0)
                except Exception as exc:  # stop drawing; the others finish what is in flight
                    failures.append(exc)
                if failures:
                    return

        await asyncio.gather(*(stream_worker() for _ in range(provider.settings.concurrency)))
        if failures:
            raise failures[0]
        await exp.finalize(provider, self._mine(provider, exp))

    async def _run_levels(
        self,
        exp: PacedExperiment[Any, Any],
        provider: Provider,
        outcome: ProviderOutcome,
        server: ManagedServerHandle | None,
    ) -> None:
        """A paced experiment's levels, each run by the run's executor once its records
        before are in."""
        level = _Level(self, exp, provider, outcome, server)
        async with contextlib.aclosing(exp.level_plans(provider, level)) as plans:
            async for plan in plans:
                with level_gc():
                    await self.executor.run_level(exp, provider, plan, level)
                level.check_server()
        self._settle_partial_levels(exp, provider)
        await exp.finalize(provider, self._mine(provider, exp))

    def _read_partial_levels(self) -> None:
        """Each experiment's levels left partial by a process that died mid-level in their
        latest run, from the run folder's level logs (`Experiment.partial_levels`)."""
        for exp in self.experiments:
            exp.partial_levels = self._partial_levels_of(exp.name)

    def _partial_levels_of(self, experiment: str) -> dict[tuple[str, str], str]:
        found: dict[tuple[str, str], str] = {}
        for log in _LEVEL_LOGS:
            found.update(log.partial_levels(self.folder.path, experiment))
        return found

    def _settle_partial_levels(self, exp: PacedExperiment[Any, Any], provider: Provider) -> None:
        """After an experiment that plans what is missing (sessions, conversations, prompt
        cache, trace) ran every level it planned for `provider` with no process dying: the
        levels still marked partial have nothing left to measure (the process died after
        its share's last record, or the rerun's records carry another label), so each gets
        a settling line. Experiments that judge their levels' marks themselves
        (`says_partial_levels`) run those levels again instead."""
        if exp.says_partial_levels or provider.id in self._partial_this_session:
            return
        for (pid, label), what in self._partial_levels_of(exp.name).items():
            if pid != provider.id:
                continue
            try:
                for log in _LEVEL_LOGS:
                    if log.line.died_what == what:
                        log.settle(self.folder.path, exp.name, pid, label)
            except OSError as exc:  # the records are kept; the answer still says partial
                self.on_message(
                    f"{exp.name}: {pid}: nothing is left to measure of the level {what} died "
                    f"in, but its level log could not say so ({type(exc).__name__}: {exc})"
                )
                continue
            self.on_message(
                f"{exp.name}: {pid}: nothing is left to measure of the level {what} died in "
                "(every request of it has its record): it is whole"
            )

    def _mine(self, provider: Provider, exp: Experiment) -> list[RequestRecord]:
        return [r for r in self._records if r.provider == provider.id and r.experiment == exp.name]

    async def _send(
        self,
        exp: Experiment,
        provider: Provider,
        planned: PlannedRequest,
        outcome: ProviderOutcome,
        server: ManagedServerHandle | None,
        queue_ms: float,
    ) -> None:
        if outcome.status == "dead":
            return
        if planned.pause_s > 0:
            await asyncio.sleep(planned.pause_s)
        retries = provider.settings.retries
        for attempt in range(1, retries + 2):
            record = await self._measurer.measure(
                provider, exp.name, planned, queue_ms, attempt=attempt
            )
            self._account(record, outcome)
            if record.error is None:
                return
            if server is not None and not server.is_running():
                outcome.status = "dead"
                raise _died(server)
            if attempt > retries or not _retryable(record.error):
                return
            wait = record.error.retry_after_s
            backoff = wait if wait is not None else 2.0 ** (attempt - 1)
            await asyncio.sleep(min(backoff, RETRY_WAIT_CAP_S))

    def _account(self, record: RequestRecord, outcome: ProviderOutcome) -> None:
        """Keep a finished record and count it in the provider's progress."""
        self._keep(record)
        outcome.done += 1
        if record.error is None:
            if not record.warmup and record.client.ttft_ms is not None:
                # Kept sorted: the progress display reads the median on every update.
                bisect.insort(outcome.ttfts, record.client.ttft_ms)
        else:
            outcome.failed += 1
            if outcome.first_error is None:
                outcome.first_error = record.error.message
        self.on_progress(outcome)


class _Level:
    """The runner's side of a paced experiment's levels: what it tells the experiment
    (`LevelContext`) and where the executor hands its records (`LevelSink`)."""

    def __init__(
        self,
        runner: Runner,
        exp: PacedExperiment[Any, Any],
        provider: Provider,
        outcome: ProviderOutcome,
        server: ManagedServerHandle | None,
    ) -> None:
        self._runner = runner
        self._exp = exp
        self._provider = provider
        self._outcome = outcome
        self._server = server

    def previous(self) -> list[RequestRecord]:
        return self._runner._mine(self._provider, self._exp)

    def expect(self, requests: int) -> None:
        self._outcome.planned += requests
        self._runner.on_progress(self._outcome)

    def message(self, text: str) -> None:
        self._runner.on_message(text)

    def keep(self, record: RequestRecord) -> None:
        self._runner._account(record, self._outcome)

    def server_died(self) -> bool:
        return self._outcome.status == "dead"

    def check_server(self) -> None:
        """ProviderDied when the managed server exited during the level."""
        if self._server is not None and not self._server.is_running():
            self._outcome.status = "dead"
            raise _died(self._server)

    def partial(self, died_what: str) -> None:
        self._runner._partial_this_session[self._provider.id] = died_what


#: The level logs a run folder can hold (`labkit.runner.levellog`).
_LEVEL_LOGS: tuple[LevelLog, ...] = (WORKER_LEVEL_LOG, RAY_LEVEL_LOG)


def _died(server: ManagedServerHandle) -> ProviderDied:
    return ProviderDied(
        f"{server.name} exited during the run (see {server.log_path}); "
        "the records finished before it died are kept"
    )


def _provider_failure(exc: Exception, settings: ProviderSettings) -> str:
    """One line for an exception that ended a provider outside any request: its HTTP
    client refused what it was given, or a bug. (An unusable proxy or base URL is caught
    earlier, as ProviderUnavailable or a config error.)"""
    if type(exc).__module__.partition(".")[0] in ("httpx", "httpcore"):
        what = f"its requests cannot be sent to {settings.base_url or 'its base_url'}"
    else:
        what = "internal error (a labkit bug)"
    return f"{what}: {type(exc).__name__}: {exc}"[:300]


def ttft_p50(outcome: ProviderOutcome) -> float | None:
    """Current TTFT median of a provider's measured requests (for progress displays)."""
    return percentile(outcome.ttfts, 50) if outcome.ttfts else None


def _select(config: LabConfig, options: RunOptions) -> LabConfig:
    providers = config.providers
    if options.providers:
        known = {p.id for p in config.providers}
        unknown = [p for p in options.providers if p not in known]
        if unknown:
            raise RunError(
                f"no provider {unknown[0]!r} in the config (have: {', '.join(sorted(known))})"
            )
        providers = [p for p in config.providers if p.id in options.providers]
    exps = config.experiments
    if options.experiments:
        kinds = {e.kind for e in exps}
        unknown = [k for k in options.experiments if k not in kinds]
        if unknown:
            raise RunError(
                f"no experiment {unknown[0]!r} in the config (have: {', '.join(sorted(kinds))})"
            )
        exps = [e for e in exps if e.kind in options.experiments]
    if options.repeats is not None:
        exps = [e.model_copy(update={"repeats": options.repeats}) for e in exps]
    output_dir = config.output_dir if options.out_dir is None else options.out_dir
    return config.model_copy(
        update={"providers": providers, "experiments": exps, "output_dir": output_dir}
    )


def validate_experiments(config: LabConfig) -> None:
    """Every experiment checked against every provider before anything is sent."""
    for i, settings in enumerate(config.experiments):
        exp = experiment_class(settings.kind)(settings, i)
        for provider in config.providers:
            exp.validate_for(provider)


def prepare_run(config: LabConfig, options: RunOptions) -> Runner:
    """A runner for a fresh run folder (locked against other processes), with the manifest
    written before any request."""
    config = _select(config, options)
    validate_experiments(config)
    run_id = options.run_id if options.run_id is not None else new_run_id(config.name)
    folder = RunFolder.create(config.output_dir, run_id)
    folder.records_path.touch()  # a valid run folder from the start, even if nothing runs
    folder.write_manifest(
        Manifest(
            run_id=folder.run_id,
            name=config.name,
            config_path=options.config_path,
            config=config.redacted(),
            labkit_version=package_versions().get("labkit"),
            packages=package_versions(),
            host=host_info(),
            started_at=datetime.now(UTC).isoformat(),
            ended_at=None,
            status="running",
            folder_format=FOLDER_FORMAT,
            read_path=READ_PATH,
        )
    )
    return Runner(config, folder)


def prepare_resume(run_dir: Path, on_warning: Callable[[str], None] | None = None) -> Runner:
    """A runner that finishes an interrupted run in place, skipping what was recorded.

    The folder stays locked against other processes; `on_warning` hears of every line of
    records.jsonl that is not a valid record (skipped: its request is redone).
    """
    folder = RunFolder.open_existing(run_dir)
    skipped: list[str] = []

    def skip(message: str) -> None:
        skipped.append(message)
        if on_warning is not None:
            on_warning(message)

    try:
        _same_read_path(folder.manifest.read_path, run_dir)
        config = parse_config(folder.manifest.config, f"{run_dir}/manifest.json")
        previous = folder.read_records(on_skip=skip, refuse_newer=True)
    except LabkitError:
        folder.release()
        raise
    done = {(r.provider, r.plan_key) for r in previous if r.plan_key and not _unanswered(r)}
    # A provider that finished is left as it is, unless a record was lost since (a bad
    # line, fewer records than the manifest counted): then every plan is checked again.
    intact = not skipped and len(previous) >= (folder.manifest.records or 0)
    finished = {
        pid: entry
        for pid, entry in (folder.manifest.providers or {}).items()
        if intact and entry.finished and pid in {p.id for p in config.providers}
    }
    # A cancelled or lost request is sent again whatever its key; any other record without
    # one (an older labkit's) leaves what was done unknown.
    unkeyed = sum(
        1 for r in previous if not r.plan_key and r.provider not in finished and not _unanswered(r)
    )
    if unkeyed:
        folder.release()
        again = folder.manifest.config_path or "CONFIG"
        raise RunError(
            f"cannot resume {run_dir}: {unkeyed} of its records carry no plan key (an older "
            "labkit wrote them), so which requests were done cannot be told and resuming "
            "would send every one again; the folder is left as it is: start a new run with "
            f"labkit run {again}"
        )
    folder.write_manifest(
        Manifest(
            status="running",
            resumed_at=datetime.now(UTC).isoformat(),
            folder_format=max(FOLDER_FORMAT, folder.manifest.folder_format or 0),
        )
    )
    return Runner(
        config,
        folder,
        done_keys={(p, k) for p, k in done if k},
        previous=previous,
        finished_before=finished,
    )


def _unanswered(record: RequestRecord) -> bool:
    """A request whose answer never came back: cancelled (Ctrl-C, a stop), or lost with the
    Ray actor it was in flight on. A resumed run sends it again."""
    return record.error is not None and record.error.kind in (ErrorKind.CANCELLED, ErrorKind.LOST)


def _same_read_path(recorded: ReadPathManifest | None, run_dir: Path) -> None:
    """RunError where this process would read a resumed run's streams on another read path
    than its records were measured on (C against Python: their CPU per token differs); a
    folder from before the read path was recorded is resumed as it is."""
    if recorded is None or recorded.implementation == READ_PATH.implementation:
        return
    raise RunError(
        f"cannot resume {run_dir}: its records were measured on the {recorded.describe()} read "
        f"path and this labkit runs the {READ_PATH.describe()} one; resume it with the same "
        "read path (LABKIT_READPATH, docs/configuration.md)"
    )


async def run_lab(runner: Runner) -> RunResult:
    """Run a prepared runner (async entry point)."""
    return await runner.run()
