"""Client paths: a provider's `client`, an experiment's `paths`, and what attribution makes of
the pairs (`Experiment.requests_for`, `AttributionExperiment.analyze`)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from labkit.config import parse_config
from labkit.experiments import experiment_class
from labkit.experiments.attribution import AttributionExperiment, AttributionSettings
from labkit.experiments.base import Experiment
from labkit.figures import AttributionKey
from labkit.providers import Provider, provider_class
from labkit.records import AppTimings, RequestRecord
from tests.support.records import make_record

pytestmark = pytest.mark.unit


def _lab(providers: str, experiments: str) -> tuple[list[Provider], list[Experiment]]:
    import yaml

    config = parse_config(
        yaml.safe_load(f"name: x\nproviders: {providers}\nexperiments: {experiments}\n")
    )
    providers_ = [provider_class(p.kind)(p, api_key="k") for p in config.providers]
    exps = [experiment_class(e.kind)(e, i) for i, e in enumerate(config.experiments)]
    return providers_, exps


def _close(providers: list[Provider]) -> None:
    async def close() -> None:
        for p in providers:
            await p.aclose()

    asyncio.run(close())


def test_client_sdk_sends_every_request_of_that_provider_through_the_sdk() -> None:
    providers, (single,) = _lab(
        "[{id: o, kind: openai, model: gpt-4.1-mini, client: sdk},"
        " {id: c, kind: anthropic, model: claude-haiku-4-5, client: sdk},"
        " {id: l, kind: llamacpp, base_url: 'http://127.0.0.1:9', client: sdk},"
        " {id: w, kind: openai_compatible, base_url: 'http://127.0.0.1:9/v1', model: m}]",
        "[{kind: single, prompt_cache: as_sent, prompts: [a, b], repeats: 2, warmup: 1}]",
    )
    try:
        assert [p.settings.client for p in providers] == ["sdk", "sdk", "sdk", "wire"]
        for provider in providers:
            plan = list(single.requests_for(provider))
            assert [p.key for p in plan] == [p.key for p in list(single.plan(provider))]  # one path
            assert len(plan) == 1 + 2 * 2
            assert {p.request.client_path for p in plan} == {provider.settings.client}
            assert all("path" not in p.tags for p in plan)
    finally:
        _close(providers)


def test_two_paths_interleave_each_planned_request_wire_then_sdk() -> None:
    providers, (single, attribution) = _lab(
        "[{id: o, kind: openai, model: gpt-4.1-mini}, {id: f, kind: fake}]",
        "[{kind: single, prompt_cache: as_sent, "
        "prompts: [a], repeats: 2, warmup: 1, paths: [wire, sdk]},"
        " {kind: attribution, repeats: 2}]",
    )
    openai, fake = providers
    try:
        plan = list(single.requests_for(openai))
        assert [(p.key, p.request.client_path, p.tags["path"]) for p in plan] == [
            ("single/warmup/0", "wire", "wire"),
            ("single/warmup/0/sdk", "sdk", "sdk"),
            ("single/p0/0", "wire", "wire"),
            ("single/p0/0/sdk", "sdk", "sdk"),
            ("single/p0/1", "wire", "wire"),
            ("single/p0/1/sdk", "sdk", "sdk"),
        ]
        assert [p.warmup for p in plan] == [True, True, False, False, False, False]
        assert [p.trial for p in plan] == [0, 0, 0, 0, 1, 1]
        # The copies are independent requests with the same content.
        wire, sdk = plan[2].request, plan[3].request
        assert wire is not sdk and wire.messages == sdk.messages and wire.params == sdk.params
        assert wire.params is not sdk.params

        # attribution defaults to both paths; the connection tags ride along.
        plan = list(attribution.requests_for(openai))
        assert [p.key for p in plan] == [
            "attribution#1/warmup/0",
            "attribution#1/warmup/0/sdk",
            "attribution#1/0",
            "attribution#1/0/sdk",
            "attribution#1/1",
            "attribution#1/1/sdk",
        ]
        assert [p.tags.get("connection") for p in plan[2:]] == ["fresh"] * 2 + ["reused"] * 2
        assert [p.request.fresh_connection for p in plan] == [True, True, False, False, True, True]

        # A provider without an official SDK runs the wire copy only, without an error.
        for exp in (single, attribution):
            plan = list(exp.requests_for(fake))
            assert plan and all(p.request.client_path == "wire" for p in plan)
            assert not any(p.key.endswith("/sdk") for p in plan)
    finally:
        _close(providers)


def test_compare_sdk_is_a_deprecated_alias_of_paths() -> None:
    assert AttributionSettings().paths == ["wire", "sdk"]
    assert AttributionSettings(compare_sdk=False).paths == ["wire"]
    assert AttributionSettings(compare_sdk=True).paths == ["wire", "sdk"]
    assert AttributionSettings(compare_sdk=False, paths=["wire"]).paths == ["wire"]
    # The manifest keeps `paths` only, and reads back the same.
    dumped = AttributionSettings(compare_sdk=False).model_dump(mode="json")
    assert "compare_sdk" not in dumped and dumped["paths"] == ["wire"]
    assert AttributionSettings.model_validate(dumped).paths == ["wire"]
    with pytest.raises(ValueError, match="contradicts paths"):
        AttributionSettings(compare_sdk=True, paths=["wire"])


def _pair(trial: int, ttft: float, offsets: list[float], cpu_ms: float, path: str) -> RequestRecord:
    rec = make_record(
        experiment="attribution",
        provider_kind="fake",  # a kind with no official SDK
        ttft_ms=ttft,
        event_offsets_ms=offsets,
        tags={"connection": "fresh" if trial % 2 == 0 else "reused", "path": path},
    )
    rec.trial = trial
    rec.app = AppTimings(cpu_ms=cpu_ms, client_path=path)  # type: ignore[arg-type]
    return rec


def test_attribution_states_the_sdk_cost_per_request_and_per_event() -> None:
    records = []
    for t, extra in enumerate((1.0, 2.0, 3.0, 10.0)):
        wire = [100.0, 110.0, 120.0, 130.0]
        records.append(_pair(t, 100.0, wire, cpu_ms=2.0, path="wire"))  # 500 µs per event
        sdk = [x + extra for x in wire[:3]]  # one event fewer: three aligned events
        records.append(_pair(t, 100.0 + extra, sdk, cpu_ms=1.5 + 0.3 * t, path="sdk"))
    answer = AttributionExperiment(AttributionSettings()).analyze("p", "m", records)
    f = answer.figures
    assert f.sdk_measured is True
    assert f.n_sdk_pairs == 4 and f.n_event_delay_pairs == 4
    assert f.sdk_ttft_ms == pytest.approx(2.5)  # median of 1, 2, 3, 10
    assert f.sdk_event_delay_ms == pytest.approx(2.5)
    assert f.cpu_us_per_event_wire == pytest.approx(500.0) and f.n_cpu_wire == 4
    # sdk: (1.5, 1.8, 2.1, 2.4) ms over 3 events = 500, 600, 700, 800 µs
    assert f.cpu_us_per_event_sdk == pytest.approx(650.0) and f.n_cpu_sdk == 4
    assert f.sdk_cpu_us_per_event == pytest.approx(150.0) and f.n_cpu_pairs == 4
    rows: dict[str, dict[str, Any]] = {r.key: r for r in f.rows}
    assert rows[AttributionKey.SDK_TTFT].value_ms == pytest.approx(2.5)
    assert rows[AttributionKey.SDK_EVENT_DELAY].value_ms == pytest.approx(2.5)
    assert rows[AttributionKey.CPU_PER_EVENT_WIRE].value_ms == pytest.approx(0.5)
    assert rows[AttributionKey.SDK_ADDED_CPU_PER_EVENT].value_ms == pytest.approx(0.15)
    assert rows[AttributionKey.SDK_ADDED_CPU_PER_EVENT].owner == "application (labkit)"
    # The answer says the SDK's cost on TTFT; the per-event figures live in its rows.
    # 4 pairs are too few for a median's interval: the difference is stated, no claim made
    assert f.sdk_ttft is not None and f.sdk_ttft.value == pytest.approx(2.5) and f.sdk_ttft.n == 4
    assert "SDK on TTFT: +2.50 ms (n=4; too few for an interval, no claim)" in answer.answer


def test_attribution_says_how_much_of_the_sdk_difference_is_the_servers() -> None:
    records = []
    for t in range(2):
        for path, server_decode in (("wire", 13.0), ("sdk", 13.5)):
            rec = _pair(t, 100.0, [100.0, 113.0, 126.0], 1.0, path)
            rec.provider_timings.decode_ms_per_token = server_decode
            records.append(rec)
    answer = AttributionExperiment(AttributionSettings()).analyze("p", "m", records)
    assert answer.figures.sdk_server_decode_ms_per_token == pytest.approx(0.5)


def test_attribution_says_when_the_sdk_was_not_measured() -> None:
    wire_only = [_pair(t, 100.0, [100.0, 110.0], 1.0, "wire") for t in range(2)]
    answer = AttributionExperiment(AttributionSettings()).analyze("p", "m", wire_only)
    assert answer.status == "ok" and answer.figures.sdk_measured is False
    assert "The SDK path was not measured: the fake kind has no official SDK." in answer.answer
    rows = {r.key: r for r in answer.figures.rows}
    assert rows[AttributionKey.SDK_EVENT_DELAY].value_ms is None
    assert "not measured" in rows[AttributionKey.SDK_EVENT_DELAY].note
    assert rows[AttributionKey.CPU_PER_EVENT_WIRE].value_ms == pytest.approx(0.5)
    silent = AttributionExperiment(AttributionSettings(paths=["wire"])).analyze("p", "m", wire_only)
    assert "SDK" not in silent.answer


@pytest.mark.parametrize(
    "entry",
    [
        {
            "kind": "single",
            "prompt_cache": "as_sent",
            "prompts": ["a", "b"],
            "repeats": 3,
            "warmup": 1,
        },
        {"kind": "determinism", "prompt": "p", "repeats": 2},
        {"kind": "attribution", "prompt": "p", "repeats": 4},
        {"kind": "token_ratio", "repeats": 2},
        {"kind": "prefill_decode", "prompt_tokens": [16, 64], "repeats": 2},
    ],
    ids=lambda e: e["kind"],
)
@pytest.mark.parametrize("paths", [["wire"], ["wire", "sdk"]])
def test_planned_count_is_what_the_plan_yields(entry: dict[str, Any], paths: list[str]) -> None:
    cls = experiment_class(entry["kind"])
    exp = cls(cls.settings_model.model_validate({**entry, "paths": paths}))
    settings_cls = provider_class("openai").settings_model
    provider = provider_class("openai")(
        settings_cls.model_validate({"id": "o", "kind": "openai", "model": "gpt-4.1-mini"}),
        api_key="k",
    )
    drawn = len(list(exp.requests_for(provider)))
    assert drawn > 0 and exp.planned_count(provider) == drawn


@pytest.mark.parametrize("kind", ["single", "determinism", "prefill_decode", "attribution"])
def test_every_sequential_experiment_on_a_managed_server_rules_its_queue_out_alike(
    kind: str,
) -> None:
    """One server, one story: each experiment's requests to a managed llama-server carry
    its slots and the requests in flight, so the split says queue 0 for all of them."""
    providers, [exp] = _lab(
        "[{id: local, kind: llamacpp, managed: true, slots: 2, base_url: 'http://x'}]",
        f"[{{kind: {kind}, repeats: 2, warmup: 1}}]",
    )
    try:
        planned = list(exp.requests_for(providers[0]))
    finally:
        _close(providers)
    assert planned
    assert all(p.tags["server_slots"] == 2 and p.tags["in_flight_max"] == 1 for p in planned)


def test_a_server_others_may_share_gets_no_queue_tags() -> None:
    providers, [exp] = _lab(
        "[{id: remote, kind: llamacpp, managed: false, base_url: 'http://x'}]",
        "[{kind: single, prompt_cache: as_sent, repeats: 1}]",
    )
    try:
        planned = list(exp.requests_for(providers[0]))
    finally:
        _close(providers)
    assert planned and not any("server_slots" in p.tags for p in planned)
