"""Fetching a provider's account of each response after the run (`Provider.stats_later`):
OpenRouter's generation stats appear seconds after a stream ends, so each is asked for
with bounded retries and a doubling wait, a few at a time, on a client of its own.

Each record with a response id gets one line in ``provider-stats-<provider>.jsonl``
(`labkit.provider_stats.LaterStats`, keyed by `record_id`): the figures, or the reason
there are none. A record already there (a resumed run) is not asked for again. Failures
never fail the run; they are counted and said once.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import httpx

from labkit.manifest import LaterStatsManifest
from labkit.provider_stats import LaterStats, read_later_stats, stats_file_name
from labkit.providers import Provider
from labkit.records import RequestRecord
from labkit.scrub import scrub, scrub_json

__all__ = ["LaterReport", "fetch_later_stats"]

ATTEMPTS = 5
FIRST_WAIT_S = 1.0
MAX_WAIT_S = 8.0
IN_FLIGHT = 4


@dataclass
class LaterReport:
    """How the fetches of one provider's stats went (for the manifest and one message)."""

    file: str
    fetched: int = 0
    missing: int = 0
    first_error: str | None = None

    def manifest_entry(self) -> LaterStatsManifest:
        """The provider's `stats_later` entry in `manifest.json`."""
        return LaterStatsManifest(
            file=self.file,
            fetched=self.fetched,
            missing=self.missing,
            first_error=self.first_error,
        )

    def failure_note(self, provider_id: str) -> str | None:
        """One line about the responses whose stats never came (None: every one did)."""
        if not self.missing:
            return None
        return scrub(
            f"provider {provider_id!r}: no stats after the run for {self.missing} of "
            f"{self.missing + self.fetched} responses (first: {self.first_error})"
        )


async def fetch_later_stats(
    provider: Provider,
    records: list[RequestRecord],
    run_dir: Path,
    *,
    attempts: int = ATTEMPTS,
    first_wait_s: float | None = None,
) -> LaterReport:
    """Ask `provider` for its stats of every successful, measured record in `records` that
    has none yet in the run folder; append one line per record. The waits between asks
    start at `first_wait_s` (default `FIRST_WAIT_S`) and double up to `MAX_WAIT_S`."""
    wait_s = FIRST_WAIT_S if first_wait_s is None else first_wait_s
    path = run_dir / stats_file_name(provider.id)
    report = LaterReport(file=path.name)
    done = read_later_stats(run_dir, provider.id)
    todo = [
        r
        for r in records
        if r.response_id and r.error is None and not r.warmup and r.record_id not in done
    ]
    if not todo:
        return report
    gate = asyncio.Semaphore(IN_FLIGHT)
    lock = asyncio.Lock()
    async with provider.connections.side_client() as client:

        async def one(record: RequestRecord) -> None:
            async with gate:
                stats = await _ask(provider, client, record, attempts, wait_s)
            stats.record_id = record.record_id
            if stats.error is None:
                report.fetched += 1
            else:
                report.missing += 1
                report.first_error = report.first_error or stats.error
            async with lock:
                with path.open("a", encoding="utf-8") as out:
                    out.write(scrub_json(stats.model_dump_json()) + "\n")

        await asyncio.gather(*(one(r) for r in todo))
    return report


async def _ask(
    provider: Provider,
    client: httpx.AsyncClient,
    record: RequestRecord,
    attempts: int,
    first_wait_s: float,
) -> LaterStats:
    """One record's stats, asked up to `attempts` times; a line saying why when none came."""
    assert record.response_id is not None
    wait = first_wait_s
    error = f"not available after {attempts} attempts"
    for attempt in range(1, attempts + 1):
        try:
            stats = await provider.stats_later(client, record.response_id)
        except httpx.HTTPStatusError as exc:
            error = f"HTTP {exc.response.status_code}"
            if exc.response.status_code not in (408, 425, 429, 500, 502, 503, 504):
                break
        except httpx.HTTPError as exc:
            error = f"{type(exc).__name__}: {exc}"[:200]
        except ValueError as exc:  # a body that is not JSON
            error = f"not JSON: {exc}"[:200]
            break
        else:
            if stats is not None:
                stats.attempts = attempt
                return stats
        if attempt < attempts:
            await asyncio.sleep(wait)
            wait = min(wait * 2, MAX_WAIT_S)
    return LaterStats(
        response_id=record.response_id,
        fetched_at=datetime.now(UTC).isoformat(),
        attempts=attempt,
        source="stats after the run",
        error=error,
    )
