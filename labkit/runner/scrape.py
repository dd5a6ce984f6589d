"""Scraping a server's Prometheus ``/metrics`` while an experiment runs.

`MetricsScraper` runs in a thread of its own with its own one-connection HTTP client, so
it never shares the measuring client's pool or holds the event loop that stamps the
streams: it scrapes every `interval_s` on a fixed schedule, reads at most `max_body_bytes`
of each body, parses it with prometheus-client (`labkit.server_metrics`) and appends one
scrubbed JSON line per scrape to ``server-metrics-<provider>.jsonl`` in the run folder.
A failed scrape (endpoint down, not Prometheus text, a body too large) is counted, and the
first failure kept for one message when the scraper stops: a dead metrics endpoint never
fails a run and never fills the log.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx

from labkit.manifest import ScrapeManifest
from labkit.scrub import scrub, scrub_json
from labkit.server_metrics import ServerMetricsSample, parse_metrics_text

__all__ = ["DEFAULT_INTERVAL_S", "MAX_BODY_BYTES", "MetricsScraper", "ScrapeReport"]

DEFAULT_INTERVAL_S = 1.0
#: A vLLM body with many models and engines is some hundred kB; anything far larger is
#: not what was meant to be scraped.
MAX_BODY_BYTES = 4 * 1024 * 1024
_TIMEOUT_S = 5.0
#: One scrape's whole exchange: a body that trickles in forever ends the scrape here.
SCRAPE_DEADLINE_S = 10.0


@dataclass
class ScrapeReport:
    """How one scraper's scrapes went (for the manifest and one message)."""

    url: str
    file: str
    scrapes: int = 0
    failed: int = 0
    first_error: str | None = None

    def manifest_entry(self) -> ScrapeManifest:
        """The provider's `server_metrics` entry in `manifest.json`."""
        return ScrapeManifest(
            url=self.url,
            file=self.file,
            scrapes=self.scrapes,
            failed=self.failed,
            first_error=self.first_error,
        )

    def failure_note(self, provider_id: str) -> str | None:
        """One line about the failed scrapes (None: none failed)."""
        if not self.failed:
            return None
        return scrub(
            f"provider {provider_id!r}: {self.failed} of {self.scrapes + self.failed} scrapes "
            f"of {self.url} failed (first: {self.first_error}); the run is unaffected"
        )


class _BodyTooLarge(Exception):
    pass


class MetricsScraper:
    """Scrapes `url` every `interval_s` seconds from `start` to `stop` into `path`."""

    def __init__(
        self,
        provider_id: str,
        url: str,
        path: Path,
        *,
        interval_s: float = DEFAULT_INTERVAL_S,
        max_body_bytes: int = MAX_BODY_BYTES,
    ) -> None:
        self.provider_id = provider_id
        self.url = url
        self.path = path
        self.interval_s = interval_s
        self.max_body_bytes = max_body_bytes
        self.report = ScrapeReport(url=url, file=path.name)
        self._stop = threading.Event()
        self._thread = threading.Thread(
            target=self._loop, name=f"metrics:{provider_id}", daemon=True
        )

    def start(self) -> None:
        """Take the first scrape soon and go on in the background."""
        self._thread.start()

    def stop(self) -> ScrapeReport:
        """End the scrapes (after the one in flight, if any) and say how they went.
        Blocks for at most one scrape's timeout: call it in a thread from async code."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()
        return self.report

    def _loop(self) -> None:
        timeout = httpx.Timeout(min(_TIMEOUT_S, max(self.interval_s, 1.0)))
        limits = httpx.Limits(max_connections=1, max_keepalive_connections=1)
        try:
            out = self.path.open("a", encoding="utf-8")
        except OSError as exc:
            self._failed(f"cannot write {self.path.name}: {exc.strerror or exc}")
            return
        with out, httpx.Client(timeout=timeout, limits=limits, trust_env=False) as client:
            next_at = time.perf_counter()
            while not self._stop.is_set():
                self._scrape_once(client, out)
                next_at += self.interval_s
                now = time.perf_counter()
                if next_at < now:  # a slow scrape: skip the missed slots, keep the phase
                    next_at += self.interval_s * ((now - next_at) // self.interval_s + 1)
                self._stop.wait(next_at - now)

    def _scrape_once(self, client: httpx.Client, out: Any) -> None:
        t_mono_ns = time.perf_counter_ns()
        at = datetime.now(UTC).isoformat()
        try:
            text = self._fetch(client)
            found, sources = parse_metrics_text(text)
        except (httpx.HTTPError, _BodyTooLarge, ValueError, UnicodeDecodeError) as exc:
            self._failed(f"{type(exc).__name__}: {exc}"[:200])
            return
        sample = ServerMetricsSample.model_validate(
            {
                **found,
                "provider": self.provider_id,
                "t_mono_ns": t_mono_ns,
                "at": at,
                "scrape_ms": (time.perf_counter_ns() - t_mono_ns) / 1e6,
                "sources": sources,
            }
        )
        try:
            out.write(scrub_json(sample.model_dump_json()) + "\n")
            out.flush()
        except OSError as exc:
            self._failed(f"cannot write {self.path.name}: {exc.strerror or exc}")
            self._stop.set()
            return
        self.report.scrapes += 1

    def _fetch(self, client: httpx.Client) -> str:
        deadline = time.perf_counter() + SCRAPE_DEADLINE_S
        with client.stream("GET", self.url) as response:
            if response.status_code != 200:
                raise httpx.HTTPStatusError(
                    f"HTTP {response.status_code}", request=response.request, response=response
                )
            body = bytearray()
            for chunk in response.iter_bytes():
                body += chunk
                if len(body) > self.max_body_bytes:
                    raise _BodyTooLarge(f"body over {self.max_body_bytes} bytes")
                if time.perf_counter() > deadline:
                    raise _BodyTooLarge(f"no whole body within {SCRAPE_DEADLINE_S:g} s")
        return body.decode("utf-8")

    def _failed(self, message: str) -> None:
        self.report.failed += 1
        if self.report.first_error is None:
            self.report.first_error = message
