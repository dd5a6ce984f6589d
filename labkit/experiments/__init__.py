"""Experiment kinds, registered by `kind`; importing this package registers the built-ins."""

from labkit.experiments import (
    attribution,
    determinism,
    load,
    prefill_decode,
    single,
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

__all__ = [
    "Experiment",
    "ExperimentSettings",
    "PlannedRequest",
    "attribution",
    "determinism",
    "experiment_class",
    "experiment_kinds",
    "load",
    "prefill_decode",
    "register_experiment",
    "single",
    "token_ratio",
]
