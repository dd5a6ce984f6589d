"""Experiment kinds, registered by `kind`; importing this package registers the built-ins.

Each kind is one module here that registers its class (`@register_experiment`); the package
imports every module it holds (pkgutil), so a new kind's module is found without a list to
edit.
"""

import importlib
import pkgutil

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
    "experiment_class",
    "experiment_kinds",
    "register_experiment",
]

for _module in pkgutil.iter_modules(__path__):
    importlib.import_module(f"{__name__}.{_module.name}")
