"""Every worker of a run measures on the runner's read path (`LevelJob.read_path`): a worker
process or Ray actor on another one (another ``LABKIT_READPATH``, a node without labkit's C
build) refuses its share in one line, so a run's records all come from the read path its
manifest names. Ray actors get the driver's Python choice in their ``runtime_env``."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from labkit.config import RayExecutorSettings
from labkit.errors import RunError
from labkit.experiments import PacedExperiment, experiment_class
from labkit.experiments.load import LoadLevelPlan
from labkit.manifest import ReadPathManifest
from labkit.providers import provider_class
from labkit.runner import ray_executor
from labkit.runner.jobs import LevelJob
from labkit.runner.ray_executor import LevelActor, RayExecutor
from labkit.runner.worker_body import build_worker
from labkit.runner.workers import _run_in_workers
from labkit.wire.readpath import ENV_VAR, READ_PATH

pytestmark = pytest.mark.unit

C = ReadPathManifest(implementation="c")
PYTHON = ReadPathManifest(
    implementation="python", reason="switched_off", detail="LABKIT_READPATH=python"
)
#: The read path this process does not run.
OTHER = PYTHON if READ_PATH.implementation == "c" else C


def _job(read_path: ReadPathManifest | None) -> LevelJob:
    provider = provider_class("openai_compatible").settings_model.model_validate(
        {"id": "p", "kind": "openai_compatible", "model": "m", "base_url": "http://x/v1"}
    )
    settings = {"kind": "load", "concurrency": [1], "requests": 1}
    exp_cls = experiment_class("load")
    experiment = exp_cls(exp_cls.settings_model.model_validate(settings), 0)
    assert isinstance(experiment, PacedExperiment)
    return LevelJob(
        provider=provider,
        pool_size=1,
        experiment=experiment.settings,
        experiment_index=0,
        state=experiment.shard_state(),
        level=LoadLevelPlan(title="c1", mode="concurrency", target=1, level_run="ab"),
        run_id="run-1",
        store_text=False,
        read_path=read_path,
    )


def test_a_job_carries_the_runners_read_path_across_its_line() -> None:
    job = _job(READ_PATH)
    assert LevelJob.model_validate_json(job.model_dump_json()).read_path == READ_PATH


@pytest.mark.parametrize(
    "read_path",
    [None, READ_PATH, READ_PATH.model_copy(update={"detail": "why may differ"})],
    ids=["unrecorded", "same", "same code"],
)
def test_a_worker_on_the_runners_read_path_goes_on(read_path: ReadPathManifest | None) -> None:
    _job(read_path).check_read_path()  # build_worker's first step (a provider needs sockets)


def test_a_worker_on_another_read_path_refuses_in_one_line() -> None:
    with pytest.raises(RunError) as caught:
        build_worker(_job(OTHER))
    assert str(caught.value) == (
        f"this worker runs the {READ_PATH.describe()} read path, the runner the "
        f"{OTHER.describe()} one: build labkit's C read path here too, or run with "
        "LABKIT_READPATH=python everywhere"
    )


def test_a_ray_actor_on_another_read_path_says_so_to_the_driver() -> None:
    actor = LevelActor(_job(OTHER).model_dump_json())
    problem = asyncio.run(actor.prepare())
    assert problem is not None and problem.startswith(
        f"this worker runs the {READ_PATH.describe()}"
    )


def test_a_worker_process_with_another_setting_does_not_start_and_the_runner_says_why(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    if READ_PATH.implementation != "c":
        pytest.skip("the worker must run another path than this process")
    monkeypatch.setenv(ENV_VAR, "python")  # inherited by the worker process
    with pytest.raises(RunError) as caught:
        asyncio.run(_run_in_workers(_job(READ_PATH), 1, tmp_path, "w", lambda _: None))
    assert str(caught.value) == (
        "worker process 0 did not start (this worker runs the python (switched off: "
        "LABKIT_READPATH=python) read path, the runner the c one: build labkit's C read path "
        f"here too, or run with LABKIT_READPATH=python everywhere); see {tmp_path / 'w-0.log'}"
    )


@pytest.mark.parametrize(("driver", "forwarded"), [(PYTHON, "python"), (C, None)])
def test_ray_actors_get_the_drivers_python_read_path(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    driver: ReadPathManifest,
    forwarded: str | None,
) -> None:
    monkeypatch.setattr(ray_executor, "READ_PATH", driver)
    executor = RayExecutor(RayExecutorSettings(), tmp_path, run_id="r", store_text=False)
    env = executor._options(0)["runtime_env"]["env_vars"]
    assert env.get(ENV_VAR) == forwarded
    assert env["RAY_USE_UVLOOP"] == "0"
