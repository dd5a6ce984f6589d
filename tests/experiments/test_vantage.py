"""`vantage` without a server: its settings refuse what cannot run in one line, its plan
pairs every trial across the vantages (A B, then B A), and its analysis states the paired
shifts and the proof's verdict from records whose split is known."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any, cast

import pytest
from pydantic import ValidationError

from labkit.analysis.vantage import provider_share_of, vantage_figures
from labkit.errors import ConfigError
from labkit.experiments.vantage import VantageExperiment, VantageSettings
from labkit.providers import provider_class
from labkit.providers.base import Provider
from labkit.records import RequestRecord
from labkit.wording.vantage import vantage_answer
from tests.support.records import make_record

pytestmark = pytest.mark.unit

DIRECT = [{"name": "a", "route": "direct"}, {"name": "b", "route": "direct"}]


def _settings(**kw: Any) -> VantageSettings:
    return VantageSettings.model_validate({"kind": "vantage", **kw})


@pytest.mark.parametrize(
    ("vantages", "message"),
    [
        ([{"name": "a"}, {"name": "b", "route": "netem", "delay_ms": 40}], "netem qdisc"),
        ([{"name": "a"}, {"name": "b", "delay_ms": 10, "jitter_ms": 20}], "negative delays"),
        ([{"name": "a"}, {"name": "a", "delay_ms": 40}], "each name once"),
        ([{"name": "a"}, {"name": "b", "route": "direct", "delay_ms": 5}], "adds no delay"),
        ([{"name": "a"}], "at least 2"),
    ],
)
def test_settings_refuse_what_cannot_run(vantages: list[dict[str, Any]], message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        _settings(vantages=vantages)


def test_the_sdk_path_and_a_tls_server_are_refused() -> None:
    with pytest.raises(ValidationError, match="wire only"):
        _settings(paths=["wire", "sdk"])
    exp = VantageExperiment(_settings())
    hosted = provider_class("openai").settings_model.model_validate(
        {"id": "hosted", "kind": "openai", "model": "gpt-4o-mini"}
    )
    with pytest.raises(ConfigError, match="reached over TLS"):
        exp.validate_for(hosted)
    local = provider_class("llamacpp").settings_model.model_validate(
        {"id": "local", "kind": "llamacpp", "managed": False, "base_url": "http://127.0.0.1:8"}
    )
    exp.validate_for(local)  # plain HTTP: fine


def test_the_plan_pairs_each_trial_across_vantages_in_alternating_order() -> None:
    exp = VantageExperiment(_settings(vantages=DIRECT, repeats=4, warmup=1))
    provider = cast(Provider, SimpleNamespace(id="p"))
    plan = list(exp.plan(provider))
    assert [(p.warmup, p.trial, p.tags["vantage"]) for p in plan] == [
        (True, 0, "a"), (True, 0, "b"),
        (False, 0, "a"), (False, 0, "b"), (False, 1, "b"), (False, 1, "a"),
        (False, 2, "a"), (False, 2, "b"), (False, 3, "b"), (False, 3, "a"),
    ]  # fmt: skip
    assert exp.planned_per_path(provider) == len(plan)
    assert all(p.request.route is None for p in plan)  # direct: the URL's own address
    assert {p.pause_s for p in plan if not p.warmup} == {0.1}  # the default pause_ms, 100
    assert {p.tags["vantage_route"] for p in plan} == {"direct"}


def test_a_relay_vantage_without_its_relay_is_refused_in_one_line() -> None:
    exp = VantageExperiment(_settings())
    with pytest.raises(ConfigError, match="no relay started for near, far"):
        list(exp.plan(cast(Provider, SimpleNamespace(id="p"))))


def _rec(vantage: str, delay: float, trial: int, ttft: float, prefill: float) -> RequestRecord:
    return make_record(
        experiment="vantage",
        ttft_ms=ttft,
        prefill_ms=prefill,
        tags={
            "vantage": vantage,
            "vantage_route": "relay",
            "vantage_delay_ms": delay,
            "vantage_jitter_ms": 0.0,
            "server_slots": 1,
            "in_flight_max": 1,
        },
    ).model_copy(update={"trial": trial})


NOISE = [0.0, 1.5, -0.7, 2.2, -1.9, 0.4, 1.1, -0.3]


def test_a_route_40_ms_longer_moves_the_network_share_and_not_the_providers() -> None:
    records = []
    for i, e in enumerate(NOISE):
        records.append(_rec("near", 0, i, 30 + e, 12 + e / 10))
        records.append(_rec("far", 40, i, 70 + e + NOISE[-1 - i], 12 + e / 10))
    f = vantage_figures(records, ["near", "far"])
    near, far = f.vantages
    assert (near.name, near.n, far.name, far.n, far.delay_ms) == ("near", 8, "far", 8, 40)
    (shift,) = f.shifts
    assert (shift.reference, shift.pairs, shift.configured_ms) == ("near", 8, 40)
    assert shift.provider_ms is not None and shift.provider_ms.value == pytest.approx(0)
    assert shift.network_ms is not None and shift.network_ms.lo is not None
    assert shift.network_ms.lo < 40 < (shift.network_ms.hi or 0)
    assert shift.provider_unchanged is True and shift.network_matches is True
    assert f.proven is True
    assert vantage_answer(f).startswith("The split is proven by a vantage run")


def test_a_provider_share_that_moves_is_not_a_proof() -> None:
    records = []
    for i, e in enumerate(NOISE):
        records.append(_rec("near", 0, i, 30 + e, 12 + e / 10))
        records.append(_rec("far", 40, i, 70 + e, 20 + e / 10))  # the provider slowed by 8
    f = vantage_figures(records, ["near", "far"])
    (shift,) = f.shifts
    assert shift.provider_unchanged is False and f.proven is False
    assert shift.provider_ms is not None and shift.provider_ms.value == pytest.approx(8)
    assert "did not confirm the split" in vantage_answer(f)


def test_without_a_prefill_the_split_cannot_be_proven() -> None:
    records = [
        make_record(experiment="vantage", tags={"vantage": v}).model_copy(update={"trial": i})
        for i in range(3)
        for v in ("near", "far")
    ]
    assert provider_share_of(records[0]) is None
    f = vantage_figures(records, ["near", "far"])
    assert f.proven is None and f.not_derived
    assert vantage_answer(f).startswith("Whose time could not be proven")
