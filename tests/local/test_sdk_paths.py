"""Both client paths against the real llama-server: the wire path and the openai SDK agree on
what the server sent, and the SDK path sees the connection phases too."""

from __future__ import annotations

import asyncio

import pytest

from labkit.experiments.attribution import AttributionExperiment, AttributionSettings
from labkit.figures import AttributionFigures
from labkit.local import ManagedServer
from labkit.measurement.recorder import RecordContext, StreamRecorder
from labkit.measurement.sdkpath import SDKRecorder
from labkit.providers import provider_class
from labkit.records import RequestRecord

pytestmark = [pytest.mark.e2e, pytest.mark.real_server]


def test_wire_and_sdk_paths_on_the_real_server(managed_server: ManagedServer) -> None:
    exp = AttributionExperiment(
        AttributionSettings(repeats=2, warmup=1, params={"max_tokens": 24, "temperature": 0})
    )
    cls = provider_class("llamacpp")
    provider = cls(
        cls.settings_model.model_validate(
            {"id": "local", "kind": "llamacpp", "base_url": managed_server.base_url}
        )
    )

    async def main() -> list[RequestRecord]:
        wire, sdk = StreamRecorder(), SDKRecorder()
        records = []
        try:
            for planned in list(exp.requests_for(provider)):  # warm-up pair, then two pairs
                ctx = RecordContext(
                    run_id="r",
                    experiment=exp.name,
                    trial=planned.trial,
                    warmup=planned.warmup,
                    tags=planned.tags,
                )
                recorder = sdk if planned.request.client_path == "sdk" else wire
                records.append(await recorder.record(provider, planned.request, ctx))
        finally:
            await sdk.aclose()
            await provider.aclose()
        return records

    records = asyncio.run(main())
    assert [r.app.client_path for r in records] == ["wire", "sdk"] * 3
    assert all(r.error is None for r in records), [r.error for r in records]
    for w, s in zip(records[::2], records[1::2], strict=True):
        assert s.output_text == w.output_text and s.output_text
        assert s.usage.input_tokens == w.usage.input_tokens
        assert s.usage.output_tokens == w.usage.output_tokens
        assert s.stop_reason == w.stop_reason and s.response_id and s.response_id != w.response_id
        assert s.provider_timings.prefill_ms is not None  # llama.cpp's timings reach both paths
        for r in (w, s):
            c = r.client
            # llama-server closes every connection, so each request connects.
            assert c.connect_ms is not None and c.request_sent_ms is not None
            assert c.headers_ms is not None and c.ttft_ms is not None
            assert 0 < c.connect_ms <= c.request_sent_ms <= c.headers_ms <= c.ttft_ms
            assert r.app.cpu_ms is not None and r.app.cpu_ms > 0
    answer = exp.analyze("local", provider.model, records)
    f = answer.figures
    assert isinstance(f, AttributionFigures)
    assert f.sdk_measured and f.n_sdk_pairs == 2 and f.n_cpu_pairs == 2
    assert (f.cpu_us_per_event_wire or 0) > 0 and (f.cpu_us_per_event_sdk or 0) > 0
    print(
        f"\nSDK − wire on llama-server: TTFT {f.sdk_ttft_ms:+.2f} ms, per event "
        f"{f.sdk_event_delay_ms:+.3f} ms; CPU/event wire {f.cpu_us_per_event_wire:.0f} µs, "
        f"sdk {f.cpu_us_per_event_sdk:.0f} µs ({f.n_sdk_pairs} pairs)\n{answer.answer}"
    )
