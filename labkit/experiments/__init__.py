"""Experiment kinds, registered by `kind`; importing this package registers the built-ins."""

from labkit.experiments import (
    attribution,
    determinism,
    load,
    paced,
    prefill_decode,
    single,
    sweep,
    token_ratio,
)
from labkit.experiments.base import (
    Experiment,
    ExperimentSettings,
    PlannedRequest,
    experiment_class,
    experiment_kinds,
    register_experiment,
)
from labkit.experiments.paced import PacedExperiment, RequestDriver

__all__ = [
    "Experiment",
    "ExperimentSettings",
    "PacedExperiment",
    "PlannedRequest",
    "RequestDriver",
    "attribution",
    "determinism",
    "experiment_class",
    "experiment_kinds",
    "load",
    "paced",
    "prefill_decode",
    "register_experiment",
    "single",
    "sweep",
    "token_ratio",
]
