"""The run folder's ``manifest.json`` as typed models: what ran, where, and how each provider
fared (written by `labkit.runner.results.RunFolder`, read back on resume).

The file is written with ``model_dump(mode="json", exclude_unset=True)``: a field appears
once something set it (a fresh run's first write has no ``records`` yet; ``resumed_at`` and
``failure`` only where they happened), so a manifest read and written back keeps exactly its
keys. A leaf contract like `labkit.records`: pydantic only.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, JsonValue

__all__ = [
    "FOLDER_FORMAT",
    "HostCPUManifest",
    "HostInfo",
    "LaterStatsManifest",
    "Manifest",
    "ProviderManifest",
    "ReadPathManifest",
    "RunStatus",
    "ScrapeManifest",
]

RunStatus = Literal["running", "completed", "incomplete", "interrupted", "failed"]
"""A run's state: ``running`` until it ends (or its process dies); ``completed`` only when
every provider went through its whole plan, ``incomplete`` when one did not (skipped, or
failed before its plan's end: `Manifest.unfinished` says which and why)."""

#: The run folder's format (`Manifest.folder_format`): raised when this labkit writes
#: manifest.json or records.jsonl in a way an older labkit would misread. A folder of a
#: newer format is refused, never mixed into (`labkit.runner.results.RunFolder`).
#: 1: before the field existed; 2: `unfinished`, `finished`, status ``incomplete``.
FOLDER_FORMAT = 2


class HostInfo(BaseModel):
    """Where the run ran."""

    model_config = ConfigDict(extra="forbid")

    hostname: str
    platform: str
    python: str
    cpu_count: int | None


class HostCPUManifest(BaseModel):
    """How busy the host's CPUs were while the run measured (its last session): every CPU's
    busy time from Linux's ``/proc/stat``, and labkit's own share of it (its process and the
    children it waited for: managed servers, worker processes). What the client-bound advice
    reads to say what held the CPUs labkit waited for."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    #: Seconds between the two readings.
    wall_s: float
    #: CPUs the host has (``/proc/stat``'s per-CPU lines).
    cpus: int | None
    #: Every CPU's non-idle time summed (user, nice, system, irq, softirq), in CPU seconds.
    busy_cpu_s: float
    #: labkit's process and its children that ended (managed servers, worker processes),
    #: less the columnar sidecar's converters (`sidecar_cpu_s`).
    labkit_cpu_s: float
    #: busy − labkit − the converters (never below 0): the other processes on the host.
    others_cpu_s: float
    #: Time a hypervisor gave this machine's CPUs to other guests (``steal``); None: unknown.
    steal_cpu_s: float | None = None
    #: The columnar sidecar's converters (`labkit.runner.sidecar`: child processes at the
    #: lowest priority, started every 256 MiB of records), ended or still running, apart
    #: from labkit's own; None in a manifest written before it was counted apart (there
    #: `labkit_cpu_s` holds the converters that ended).
    sidecar_cpu_s: float | None = None


class ScrapeManifest(BaseModel):
    """How the scrapes of a server's ``/metrics`` went (``server-metrics-<provider>.jsonl``)."""

    model_config = ConfigDict(extra="forbid")

    url: str
    file: str
    scrapes: int
    failed: int
    first_error: str | None


class LaterStatsManifest(BaseModel):
    """How fetching the provider's stats after the run went (``provider-stats-<id>.jsonl``)."""

    model_config = ConfigDict(extra="forbid")

    file: str
    fetched: int
    missing: int
    first_error: str | None


class ProviderManifest(BaseModel):
    """One provider's part of the run."""

    model_config = ConfigDict(extra="forbid")

    kind: str
    model: str
    status: str
    reason: str | None = None
    first_error: str | None = None
    requests: int = 0
    failed: int = 0
    #: What the local server or the provider's API said about itself (build, model, slots).
    server: dict[str, JsonValue] | None = None
    reports_server_timings: bool | None = None
    server_metrics: ScrapeManifest | None = None
    stats_later: LaterStatsManifest | None = None
    #: Whether the provider went through its whole plan (every planned request has a
    #: record); a resume leaves a finished provider as it is.
    finished: bool | None = None


class ReadPathManifest(BaseModel):
    """Which read path measured the run (`labkit.wire.readpath`): a token's read steps in C,
    or their Python twins, and why Python where the C path was not used. The two give the
    same answers; they differ in CPU per token, so a run's cost is read against this."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    implementation: Literal["c", "python"]
    #: Why Python: ``switched_off`` (``LABKIT_READPATH=python``) or ``not_built`` (labkit
    #: was installed without its C extension); None for C.
    reason: Literal["switched_off", "not_built"] | None = None
    #: More on `reason`: the switch's setting, or why the extension did not load.
    detail: str | None = None

    def describe(self) -> str:
        """This read path in a few words (the report, errors): ``c``, ``python (switched
        off: LABKIT_READPATH=python)``, ``python (not built: ...)``."""
        words: str = self.implementation
        if self.reason is not None:
            why = self.reason.replace("_", " ")
            words += f" ({why}: {self.detail})" if self.detail else f" ({why})"
        return words


class Manifest(BaseModel):
    """``manifest.json``: every field optional, present once written (see the module)."""

    model_config = ConfigDict(extra="forbid")

    run_id: str | None = None
    name: str | None = None
    config_path: str | None = None
    #: The config as JSON (`LabConfig.redacted`: variable names, never keys).
    config: dict[str, JsonValue] | None = None
    labkit_version: str | None = None
    packages: dict[str, str | None] | None = None
    host: HostInfo | None = None
    started_at: str | None = None
    resumed_at: str | None = None
    ended_at: str | None = None
    status: RunStatus | None = None
    #: Why the run failed: the write that failed, its file and reason.
    failure: str | None = None
    records: int | None = None
    providers: dict[str, ProviderManifest] | None = None
    #: The folder's format (`FOLDER_FORMAT` of the labkit that last wrote it).
    folder_format: int | None = None
    #: Providers whose plan did not finish, each with why (status ``incomplete``).
    unfinished: dict[str, str] | None = None
    #: The read path every process of the run measured with (worker processes and Ray
    #: actors are held to the runner's); absent in folders written before it was recorded.
    read_path: ReadPathManifest | None = None
    #: How busy the host's CPUs were during the run, and whose work it was; absent where it
    #: could not be read (no ``/proc/stat``; a Ray run, whose actors are not labkit's
    #: children) and in folders written before it was recorded.
    host_cpu: HostCPUManifest | None = None
