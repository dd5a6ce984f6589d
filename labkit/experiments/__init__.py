"""Experiment kinds, registered by `kind`; importing this package registers the built-ins."""

from labkit.experiments import (
    attribution,
    conversation,
    determinism,
    load,
    next_token,
    paced,
    prefill_decode,
    session,
    single,
    sweep,
    token_ratio,
    trace,
)
from labkit.experiments.base import (
    Experiment,
    ExperimentSettings,
    PlannedRequest,
    experiment_class,
    experiment_kinds,
    register_experiment,
)
from labkit.experiments.paced import LevelContext, LevelPlan, PacedExperiment, Share

__all__ = [
    "Experiment",
    "ExperimentSettings",
    "LevelContext",
    "LevelPlan",
    "PacedExperiment",
    "PlannedRequest",
    "Share",
    "attribution",
    "conversation",
    "determinism",
    "experiment_class",
    "experiment_kinds",
    "load",
    "next_token",
    "paced",
    "prefill_decode",
    "register_experiment",
    "session",
    "single",
    "sweep",
    "token_ratio",
    "trace",
]
