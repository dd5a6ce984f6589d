"""Running configs: the run folder, the runner and the end-of-run summary."""

from labkit.runner.results import RunFolder
from labkit.runner.run import (
    ProviderOutcome,
    Runner,
    RunOptions,
    RunResult,
    prepare_resume,
    prepare_run,
    run_lab,
    ttft_p50,
)
from labkit.runner.summary import summary_table

__all__ = [
    "ProviderOutcome",
    "RunFolder",
    "RunOptions",
    "RunResult",
    "Runner",
    "prepare_resume",
    "prepare_run",
    "run_lab",
    "summary_table",
    "ttft_p50",
]
