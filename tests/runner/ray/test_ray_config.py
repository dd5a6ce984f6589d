"""`executor: ray` without a cluster: the config block, the missing-Ray error, lazy imports,
actor placement options and the record of a lost request."""

from __future__ import annotations

import subprocess
import sys
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

import labkit.config
from labkit.config import RayExecutorSettings, parse_config
from labkit.errors import ConfigError, RunError
from labkit.experiments.load import LoadExperiment, LoadSettings
from labkit.providers import provider_class
from labkit.records import ClientTimings, ErrorKind, RequestRecord, StopReason
from labkit.runner import ray_executor
from labkit.runner.jobs import Sending
from labkit.runner.levellog import LEVEL_LINE_MAX
from labkit.runner.ray_executor import RayExecutor, _Actor, _lost_record
from tests.support.extras import requires_ray

pytestmark = pytest.mark.unit


def _data(executor: Any) -> dict[str, Any]:
    return {
        "name": "r",
        "providers": [{"id": "fake", "kind": "fake"}],
        "experiments": [{"kind": "load", "concurrency": [2], "requests": 4}],
        "executor": executor,
    }


@requires_ray  # parse_config refuses `executor: ray` where Ray is not installed
def test_the_executor_block_has_defaults_and_takes_placements() -> None:
    config = parse_config(_data({"kind": "ray"}))
    assert config.executor == RayExecutorSettings()
    assert config.executor.address == "local" and config.executor.workers == "auto"
    pinned = parse_config(
        _data({"kind": "ray", "address": "ray://head:10001", "placement": ["a", "b"]})
    )
    assert pinned.executor is not None and pinned.executor.placement == ["a", "b"]
    assert parse_config({**_data(None)}).executor is None


@pytest.mark.parametrize(
    ("executor", "fragment"),
    [
        ({"kind": "ray", "address": "somewhere"}, "executor.address"),
        ({"kind": "ray", "placement": []}, "executor.placement"),
        ({"kind": "ray", "workers": 0}, "executor.workers"),
        ({"kind": "dask"}, "executor.kind"),
        ({"kind": "ray", "nodes": 3}, "executor.nodes: unknown field"),
    ],
)
def test_a_bad_executor_block_is_an_error_naming_the_field(
    executor: dict[str, Any], fragment: str
) -> None:
    with pytest.raises(ConfigError, match=fragment):
        parse_config(_data(executor))


def test_executor_ray_without_ray_installed_is_one_clear_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(labkit.config, "_ray_installed", lambda: False)
    with pytest.raises(ConfigError) as caught:
        parse_config(_data({"kind": "ray"}))
    assert "pip install 'labkit[ray]'" in str(caught.value)
    assert "\n" not in str(caught.value)  # one problem, one line
    parse_config(_data(None))  # without the block Ray is never asked for


def test_ray_module_without_ray_is_a_run_error(monkeypatch: pytest.MonkeyPatch) -> None:
    def no_ray(name: str) -> Any:
        raise ImportError(name)

    monkeypatch.setattr(ray_executor.importlib, "import_module", no_ray)
    with pytest.raises(RunError, match=r"labkit\[ray\]"):
        ray_executor.ray_module()


def test_labkit_imports_ray_only_when_a_config_asks_for_it() -> None:
    code = (
        "import sys, labkit.cli, labkit.runner, labkit.runner.ray_executor; "
        "print('ray' in sys.modules)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "False"


def test_placement_becomes_each_actors_options(tmp_path: Path) -> None:
    def options(placement: Any, k: int) -> dict[str, Any]:
        settings = RayExecutorSettings(placement=placement, cpus_per_worker=0.5)
        return dict(RayExecutor(settings, tmp_path, run_id="r", store_text=False)._options(k))

    assert options("spread", 0)["scheduling_strategy"] == "SPREAD"
    assert "scheduling_strategy" not in options("pack", 0)
    assert options(["a", "b"], 0)["resources"] == {"a": 0.001}
    assert options(["a", "b"], 3)["resources"] == {"b": 0.001}
    assert all(options("pack", 1)[k] == v for k, v in {"num_cpus": 0.5, "max_restarts": 0}.items())
    # The only runtime_env is the event loop choice: never a variable of the provider's.
    assert options("spread", 0)["runtime_env"] == {"env_vars": {"RAY_USE_UVLOOP": "0"}}


def test_a_lost_request_is_one_record_naming_its_node() -> None:
    cls = provider_class("fake")
    provider = cls(cls.settings_model.model_validate({"id": "fake", "kind": "fake"}))
    actor = _Actor(1, handle=None, host="node-7/10.0.0.7/abcdef12", died="its node died")
    notice = Sending(
        key="load/c4/5",
        trial=5,
        warmup=False,
        tags={"level": "c4", "workers": "2"},
        prompt_id="p0",
        prompt_chars=10,
        prompt_bytes=10,
        params={"max_tokens": 8},
        started_at=datetime(2026, 1, 2, tzinfo=UTC),
        t_mono_ns=123,
    )
    record = _lost_record(notice, provider, "load", "run-1", actor)
    assert record.error is not None and record.error.kind == ErrorKind.LOST
    assert "node-7/10.0.0.7/abcdef12" in record.error.message
    assert record.plan_key == "load/c4/5" and record.trial == 5 and record.run_id == "run-1"
    assert record.stop_reason == StopReason.ERROR and record.t_start_mono_ns == 123
    assert record.started_at == datetime(2026, 1, 2, tzinfo=UTC)
    assert record.client.ttft_ms is None  # nothing of it came back
    assert record.client.decode_null_reason == "no_output"  # a null decode says why


def _measured_record(lag_ms: float) -> RequestRecord:
    return RequestRecord(
        run_id="r",
        record_id=uuid.uuid4().hex,
        experiment="load",
        provider="fake",
        provider_kind="fake",
        model="m",
        prompt_id="p",
        prompt_chars=1,
        prompt_bytes=1,
        started_at=datetime(2026, 1, 2, tzinfo=UTC),
        client=ClientTimings(loop_lag_ms=lag_ms, e2e_ms=100.0),
        tags={"level": "c4"},
    )


def test_the_level_names_the_hosts_whose_actor_was_client_bound(tmp_path: Path) -> None:
    busy = _Actor(0, handle=None, host="busy/10.0.0.1/aaaa")
    idle = _Actor(1, handle=None, host="idle/10.0.0.2/bbbb")
    busy.records = [_measured_record(25.0) for _ in range(4)]
    idle.records = [_measured_record(0.2) for _ in range(4)]
    dead = _Actor(2, handle=None, host="gone/10.0.0.3/cccc", died="its node died")
    dead.records = [_measured_record(0.2)]
    messages: list[str] = []
    executor = RayExecutor(RayExecutorSettings(), tmp_path, run_id="r", store_text=False)
    experiment = LoadExperiment(LoadSettings(concurrency=[4], requests=8))
    level = executor._summary([busy, idle, dead], experiment, "fake", "c4", messages.append)
    assert level.client_bound_hosts == ["busy/10.0.0.1/aaaa"]
    assert level.died == ["gone/10.0.0.3/cccc"] and level.partial
    assert any("client-bound on busy/10.0.0.1/aaaa" in m for m in messages)
    assert any("gone/10.0.0.3/cccc died" in m and "partial" in m for m in messages)


@requires_ray
def test_the_shipped_ray_config_validates() -> None:
    from labkit.config import load_config
    from labkit.runner.run import validate_experiments

    config = load_config(Path(__file__).parents[3] / "configs" / "load_ray.yaml")
    assert config.executor is not None and config.executor.address == "auto"
    validate_experiments(config)


@pytest.mark.parametrize(("died", "said"), [([], False), (["vm/10.0.0.3/ab12"], True)])
def test_an_actor_that_died_makes_the_level_partial_even_with_nothing_in_flight(
    tmp_path: Path, died: list[str], said: bool
) -> None:
    """The runner took a level for partial only from a lost record: an actor that died
    between two of its requests lost none, so the run said "completed" and --resume ran
    nothing, the dead node's remaining share never run (CI, 2026-12-06)."""
    import asyncio

    executor = RayExecutor(RayExecutorSettings(), tmp_path, run_id="r", store_text=False)
    ran = ray_executor.RayLevel(
        experiment="load", provider="p", level="c2", hosts=["vm/10.0.0.3/ab12"], died=died
    )

    async def run_on_actors(*args: Any) -> ray_executor.RayLevel:
        return ran

    executor.run_on_actors = run_on_actors  # type: ignore[method-assign]
    partial: list[bool] = []

    class Sink:
        def keep(self, record: RequestRecord) -> None: ...
        def message(self, text: str) -> None: ...
        def server_died(self) -> bool:
            return False

        def check_server(self) -> None: ...
        def partial(self, died_what: str) -> None:
            partial.append(died_what == "a Ray actor")

    asyncio.run(executor.run_level(None, None, None, Sink()))  # type: ignore[arg-type]
    assert partial == ([True] if said else [])


def test_the_levels_a_ray_node_died_in_are_read_from_the_latest_line_of_each(
    tmp_path: Path,
) -> None:
    """`RAY_LEVEL_LOG.partial_levels`: a resumed run's new line for a level decides (its rerun went
    whole); another experiment's levels and a line cut short are passed over."""

    def line(level: str, died: list[str], experiment: str = "load") -> str:
        return ray_executor.RayLevel(
            experiment=experiment, provider="p", level=level, hosts=["a", "b"], died=died
        ).model_dump_json()

    (tmp_path / ray_executor.RAY_LEVELS_FILE).write_text(
        "\n".join(
            [
                line("c2", ["b"]),
                line("c4", ["a"]),
                line("c8", ["a"], experiment="load#1"),
                line("c2", []),  # the resumed run's rerun of c2
                '{"experiment": "load", "provider": "p", "lev',  # a write cut short
                '{"experiment": "load", "provider": "p", "level": 7}',  # of the wrong type
                "[" * 100_000 + "]" * 100_000,  # nested past any parser's depth
            ]
        )
        + "\n"
    )
    with (tmp_path / ray_executor.RAY_LEVELS_FILE).open("ab") as f:
        f.write(b"\xff\xfe not UTF-8\n")  # what follows it is not read
        f.write(line("c4", []).encode() + b"\n")
    node = "a Ray node"
    assert ray_executor.RAY_LEVEL_LOG.partial_levels(tmp_path, "load") == {("p", "c4"): node}
    assert ray_executor.RAY_LEVEL_LOG.partial_levels(tmp_path, "load#1") == {("p", "c8"): node}
    assert ray_executor.RAY_LEVEL_LOG.partial_levels(tmp_path / "none", "load") == {}
    long = tmp_path / "long"
    long.mkdir()
    (long / ray_executor.RAY_LEVELS_FILE).write_text(
        line("c2", ["b"]) + "\n" + "x" * (LEVEL_LINE_MAX + 1) + "\n"
    )
    assert ray_executor.RAY_LEVEL_LOG.partial_levels(long, "load") == {
        ("p", "c2"): node
    }  # up to it
    (tmp_path / "dir" / ray_executor.RAY_LEVELS_FILE).mkdir(parents=True)  # not a file
    assert ray_executor.RAY_LEVEL_LOG.partial_levels(tmp_path / "dir", "load") == {}


def test_a_load_level_whose_ray_node_died_with_nothing_in_flight_is_partial() -> None:
    """No record of the level is lost (the node went between two of its requests), yet its
    share was never sent: the answer says partial and how to finish it, as for lost ones."""
    from tests.support.records import make_record

    records = [make_record(provider="p", experiment="load", tags={"level": "c4"}) for _ in range(6)]
    whole = LoadExperiment(LoadSettings(concurrency=[4], requests=8))
    assert whole.analyze("p", "m", records).status == "ok"
    died = LoadExperiment(LoadSettings(concurrency=[4], requests=8))
    died.partial_levels = {("p", "c4"): "a Ray node"}
    answer = died.analyze("p", "m", records)
    assert answer.status == "partial"
    assert "Partial: a Ray node died mid-level in concurrency 4" in answer.answer
    assert "labkit run --resume runs it again" in answer.answer
    other = LoadExperiment(LoadSettings(concurrency=[4], requests=8))
    other.partial_levels = {("another provider", "c4"): "a Ray node"}
    assert other.analyze("p", "m", records).status == "ok"
