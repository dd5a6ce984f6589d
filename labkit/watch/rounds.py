"""One watch round: an ordinary run of the config's probes, in a run folder of its own.

The round's config is the watch's with four things changed, all written into the round's
manifest (so ``labkit run --resume`` finishes a cut round exactly as it began): its run
folder, a fresh nonce opening every experiment's system message (so no request can be served
from a prompt cache an earlier round filled), tags on every record and, on a simulated clock,
a header on every request (docs/watch.md, "A round"). The records are judged as the round
ends: throttled (`labkit.analysis.throttle`), failed, ok; the tokens and money they spent
(`spend`).
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Literal, Protocol

from labkit.analysis.throttle import is_throttled, retry_after_s
from labkit.config import LabConfig
from labkit.errors import LabkitError
from labkit.experiments import experiment_class
from labkit.manifest import Manifest
from labkit.pricing import PriceTable, record_cost
from labkit.records import RequestRecord
from labkit.runner import RunOptions, prepare_resume, prepare_run, run_lab
from labkit.runner.results import RunFolder
from labkit.runner.sidecar import SidecarWriter
from labkit.timing import percentile

__all__ = [
    "SIM_TIME_HEADER",
    "RoundOutcome",
    "RoundPlan",
    "RoundRunner",
    "RunRounds",
    "convert_rest",
    "round_config",
    "round_run_id",
    "spend_of",
]

#: The header a simulated clock puts on every request: the epoch seconds it stands for.
SIM_TIME_HEADER = "X-Labkit-Sim-Time"

OutcomeStatus = Literal["ok", "throttled", "failed", "partial"]


@dataclass
class RoundPlan:
    """A round about to run (or to be finished)."""

    index: int
    at: datetime
    run_id: str
    nonce: str
    simulated: bool


@dataclass
class RoundOutcome:
    """How a round went."""

    status: OutcomeStatus
    ok: int = 0
    throttled: int = 0
    failed: int = 0
    ttft_p50_ms: float | None = None
    tokens: int = 0
    money: float | None = None
    retry_after_s: float | None = None
    run_dir: Path | None = None
    note: str | None = None
    messages: list[str] = field(default_factory=list)


class RoundRunner(Protocol):
    """What runs a watch's rounds (`RunRounds`; a test's scripted stand-in)."""

    async def run(self, plan: RoundPlan) -> RoundOutcome:
        """Run a new round."""
        ...

    async def finish(self, plan: RoundPlan) -> RoundOutcome:
        """Finish a round cut short (its folder exists): what is missing is sent now."""
        ...

    async def close_partial(self, plan: RoundPlan) -> RoundOutcome | None:
        """Close a cut round as it is (too late to finish): its manifest says interrupted;
        what it measured is judged (and its columnar sidecar completed). None: it never
        made a folder."""
        ...

    def run_dir(self, plan: RoundPlan) -> Path:
        """Where the round's run folder is."""
        ...


async def convert_rest(run_dir: Path) -> None:
    """A round folder's columnar sidecar completed as `labkit run`'s end completes a run's
    (`labkit.runner.sidecar.SidecarWriter.finish`): a child at the lowest priority converts
    what the parts converted while the round recorded do not cover (the tail: at most a
    part's worth, more only where a converter fell behind), so the store and the reports
    read the round's columns at once. Nothing for a folder under the sidecar's threshold."""
    await SidecarWriter(run_dir).finish()


def round_run_id(index: int, at: datetime, watch_id: str) -> str:
    """``00012-20260105T120000Z-<watch id>``: by index, then time, unique across watches."""
    return f"{index:05d}-{at.astimezone(UTC):%Y%m%dT%H%M%SZ}-{watch_id}"


def new_nonce() -> str:
    """A round's nonce: 8 hex digits."""
    return secrets.token_hex(4)


def sim_time_value(at: datetime) -> str:
    """`at` as epoch seconds for `SIM_TIME_HEADER` (no trailing zeros)."""
    text = f"{at.timestamp():.3f}".rstrip("0").rstrip(".")
    return text or "0"


def _kept(config: LabConfig) -> set[str]:
    return set(config.watch.keep_cache) if config.watch is not None else set()


def round_config(config: LabConfig, plan: RoundPlan, watch_id: str, rounds_dir: Path) -> LabConfig:
    """The config a round runs: its output folder ``rounds/`` (the round's own folder, the
    run id, is `round_run_id`); a fresh nonce opening every experiment's system message
    (``Probe <nonce>.``), while what the round's own requests share stays shared
    (experiments named in ``watch.keep_cache`` are sent as written); tags ``watch_id``,
    ``watch_round`` and ``watch_nonce`` on every record; on a simulated clock, the header
    ``X-Labkit-Sim-Time: <epoch seconds>`` on every request."""
    keep = _kept(config)
    experiments = []
    counts: dict[str, int] = {}
    for settings in config.experiments:
        n = counts.get(settings.kind, 0)
        counts[settings.kind] = n + 1
        name = experiment_class(settings.kind)(settings, n).name
        if settings.kind in keep or name in keep:
            experiments.append(settings)
            continue
        head = f"Probe {plan.nonce}."
        system = f"{head} {settings.system}" if settings.system else head
        experiments.append(settings.model_copy(update={"system": system}))
    tags = {
        **config.request_tags,
        "watch_id": watch_id,
        "watch_round": plan.index,
        "watch_nonce": plan.nonce,
    }
    headers = dict(config.request_headers)
    if plan.simulated:
        headers[SIM_TIME_HEADER] = sim_time_value(plan.at)
    return config.model_copy(
        update={
            "output_dir": rounds_dir,
            "experiments": experiments,
            "request_tags": tags,
            "request_headers": headers,
        }
    )


def unknown_keep_cache(config: LabConfig) -> list[str]:
    """The `watch.keep_cache` entries that name no experiment of the config."""
    names: set[str] = set()
    counts: dict[str, int] = {}
    for settings in config.experiments:
        n = counts.get(settings.kind, 0)
        counts[settings.kind] = n + 1
        names |= {settings.kind, experiment_class(settings.kind)(settings, n).name}
    return [k for k in sorted(_kept(config)) if k not in names]


def record_tokens(record: RequestRecord) -> int:
    """Tokens a request spent: input + output as the provider counted them (0 unknown)."""
    u = record.usage
    return (u.input_tokens or 0) + (u.output_tokens or 0)


def spend_of(records: list[RequestRecord], prices: PriceTable) -> tuple[int, float | None]:
    """Tokens and money `records` spent (money None without a price table; a request the
    table does not price counts nothing)."""
    tokens = sum(record_tokens(r) for r in records)
    if not prices:
        return tokens, None
    money = 0.0
    for r in records:
        cost = record_cost(r, prices)
        if cost is not None:
            money += cost.total
    return tokens, money


def judge(
    records: list[RequestRecord], prices: PriceTable, status: str, run_dir: Path
) -> RoundOutcome:
    """A round's outcome from its records and its run's status (`Manifest.status`)."""
    measured = [r for r in records if not r.warmup]
    throttled = [r for r in records if is_throttled(r)]
    ok = [r for r in measured if r.error is None]
    failed = [r for r in measured if r.error is not None and not is_throttled(r)]
    ttfts = sorted(r.client.ttft_ms for r in ok if r.client.ttft_ms is not None)
    tokens, money = spend_of(records, prices)
    outcome = RoundOutcome(
        status="ok",
        ok=len(ok),
        throttled=len(throttled),
        failed=len(failed),
        ttft_p50_ms=percentile(ttfts, 50) if ttfts else None,
        tokens=tokens,
        money=money,
        retry_after_s=retry_after_s(throttled),
        run_dir=run_dir,
    )
    if status in ("interrupted", "running", "failed"):
        outcome.status = "partial"
    elif throttled:
        outcome.status = "throttled"
    elif not ok:
        outcome.status = "failed"
        outcome.note = "no request succeeded" if records else "no request was sent"
    return outcome


class RunRounds:
    """Each round as a `labkit run` of the watch's config (module text)."""

    def __init__(self, config: LabConfig, rounds_dir: Path, watch_id: str) -> None:
        self.config = config
        self.rounds_dir = rounds_dir
        self.watch_id = watch_id
        self.prices = config.price_table()

    def run_dir(self, plan: RoundPlan) -> Path:
        """`rounds/<run id>`."""
        return self.rounds_dir / plan.run_id

    async def run(self, plan: RoundPlan) -> RoundOutcome:
        """Run the round's config into its run folder (the analysis and lab.json too)."""
        config = round_config(self.config, plan, self.watch_id, self.rounds_dir)
        messages: list[str] = []
        try:
            runner = prepare_run(config, RunOptions(run_id=plan.run_id))
        except LabkitError as exc:
            return RoundOutcome(status="failed", note=str(exc), messages=messages)
        runner.on_message = messages.append
        return await self._go(runner, messages)

    async def finish(self, plan: RoundPlan) -> RoundOutcome:
        """`labkit run --resume` of the round's folder: what was measured is kept, the rest
        sent now."""
        messages: list[str] = []
        try:
            runner = prepare_resume(self.run_dir(plan), on_warning=messages.append)
        except LabkitError as exc:
            closed = await self.close_partial(plan)
            if closed is None:
                return RoundOutcome(status="failed", note=str(exc), messages=messages)
            closed.note = f"could not be finished: {exc}"
            return closed
        runner.on_message = messages.append
        return await self._go(runner, messages)

    async def _go(self, runner: object, messages: list[str]) -> RoundOutcome:
        from labkit.runner import Runner

        assert isinstance(runner, Runner)
        folder = runner.folder.path
        try:
            result = await run_lab(runner)  # its end converts the sidecar's rest, as `labkit run`
        except LabkitError as exc:
            await convert_rest(folder)  # a run that failed has not: its folder is complete too
            outcome = self._judge_folder(folder, "failed")
            outcome.note = str(exc)
            outcome.messages = messages
            return outcome
        finally:
            runner.folder.release()
        outcome = judge(result.records, self.prices, result.status, folder)
        outcome.messages = messages
        return outcome

    async def close_partial(self, plan: RoundPlan) -> RoundOutcome | None:
        """Mark the cut round's manifest interrupted, complete its columnar sidecar
        (`convert_rest`), and judge what it measured."""
        path = self.run_dir(plan)
        if not (path / "manifest.json").exists():
            return None
        try:
            folder = RunFolder.open_existing(path)
        except LabkitError as exc:
            return RoundOutcome(status="partial", run_dir=path, note=str(exc))
        try:
            if folder.manifest.status == "running":
                folder.write_manifest(
                    Manifest(status="interrupted", ended_at=datetime.now(UTC).isoformat())
                )
        finally:
            folder.release()
        await convert_rest(path)
        outcome = self._judge_folder(path, "interrupted")
        outcome.note = "cut short and too late to finish"
        return outcome

    def _judge_folder(self, path: Path, status: str) -> RoundOutcome:
        try:
            folder = RunFolder(path)
            records = folder.read_records()
        except LabkitError:
            records = []
        return judge(records, self.prices, status, path)
