"""labkit: an instrumentation lab harness for hosted and local LLM APIs.

The public API: the record contract, the config loader, the stream recorder, the provider
and experiment registries, and the runner, and runs as data (`read_run`, `read_runs`: pandas
DataFrames, imported on first use so that ``import labkit`` stays cheap). The CLI
(`labkit`) is a thin face over these.
"""

from typing import TYPE_CHECKING, Any

from labkit.config import LabConfig, load_config, parse_config
from labkit.errors import (
    ConfigError,
    LabkitError,
    ProviderUnavailable,
    RunError,
    ServerError,
    SetupError,
)
from labkit.experiments import Experiment, experiment_kinds, register_experiment
from labkit.measurement.recorder import RecordContext, StreamRecorder
from labkit.providers import ChatRequest, Provider, provider_kinds, register
from labkit.records import (
    AppTimings,
    ClientTimings,
    LabAnswer,
    LabResults,
    ProviderTimings,
    RecordError,
    RequestRecord,
    StopReason,
    Usage,
)

if TYPE_CHECKING:
    from labkit.rundata import read_run, read_runs

__all__ = [
    "AppTimings",
    "ChatRequest",
    "ClientTimings",
    "ConfigError",
    "Experiment",
    "LabAnswer",
    "LabConfig",
    "LabResults",
    "LabkitError",
    "Provider",
    "ProviderTimings",
    "ProviderUnavailable",
    "RecordContext",
    "RecordError",
    "RequestRecord",
    "RunError",
    "ServerError",
    "SetupError",
    "StopReason",
    "StreamRecorder",
    "Usage",
    "experiment_kinds",
    "load_config",
    "parse_config",
    "provider_kinds",
    "read_run",
    "read_runs",
    "register",
    "register_experiment",
]


def __getattr__(name: str) -> Any:
    """Import `read_run` / `read_runs` (and so pandas) only when they are first used."""
    if name in ("read_run", "read_runs"):
        from labkit import rundata

        return getattr(rundata, name)
    raise AttributeError(f"module 'labkit' has no attribute {name!r}")
