"""labkit: an instrumentation lab harness for hosted and local LLM APIs.

The public API: the record contract, the config loader, the stream recorder, the provider
and experiment registries, and the runner. The CLI (`labkit`) is a thin face over these.
"""

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
from labkit.providers import ChatRequest, Provider, provider_kinds, register
from labkit.recorder import RecordContext, StreamRecorder
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
    "register",
    "register_experiment",
]
