"""Shared-prefix load levels: the prompts they build, and the cache hits a level reports
against a server with a simulated prefix cache on 127.0.0.1."""

from __future__ import annotations

import asyncio
import statistics
from pathlib import Path
from typing import Any

import pytest

from labkit.analysis.levels import Level
from labkit.config import parse_config
from labkit.experiments.load import LoadExperiment, LoadSettings
from labkit.figures import LoadFigures
from labkit.runner import RunOptions, prepare_run
from tests.support.prefix_cache_server import PrefixCacheServer


def _experiment(**shared: Any) -> LoadExperiment:
    settings = LoadSettings(
        concurrency=[1, 2],
        requests=8,
        input_tokens=20,
        shared_prefix={"tokens": 100, **shared},
    )
    return LoadExperiment(settings)


@pytest.mark.unit
def test_requests_share_the_levels_prefix_and_repeat_suffixes_at_the_fraction() -> None:
    exp = _experiment(distinct_suffixes=0.25)
    level, other = exp.levels()
    requests = [exp.request(level, i, "run1") for i in range(8)]
    systems = {r.request.messages[0]["content"] for r in requests}
    assert len(systems) == 1 and all(r.request.messages[0]["role"] == "system" for r in requests)
    assert len(next(iter(systems)).split()) > 50
    suffixes = [r.request.messages[1]["content"] for r in requests]
    assert [r.tags["suffix"] for r in requests] == [0, 0, 0, 0, 1, 1, 1, 1]
    assert len(set(suffixes)) == 2 and suffixes[0] == suffixes[3] != suffixes[4]
    assert all(r.tags["shared_prefix_tokens"] == 100 for r in requests)
    # Another level (and another pass of this one) has a prefix of its own.
    assert exp.request(other, 0, "run1").request.messages[0]["content"] not in systems
    assert exp.request(level, 0, "run2").request.messages[0]["content"] not in systems
    # Every request its own suffix by default; `where: user` puts the document first.
    distinct = _experiment()
    assert (
        len({distinct.request(level, i, "r").request.messages[1]["content"] for i in range(8)}) == 8
    )
    user = _experiment(where="user").request(level, 0, "r").request.messages
    assert [m["role"] for m in user] == ["user"] and user[0]["content"].startswith("[r:0]")


@pytest.mark.integration
def test_a_level_reports_the_cache_hits_beside_the_ttft_they_bought(tmp_path: Path) -> None:
    async def go() -> Any:
        async with PrefixCacheServer(prefill_s_per_token=0.0005) as server:
            config = parse_config(
                {
                    "name": "shared",
                    "providers": [{"id": "l", "kind": "llamacpp", "base_url": server.base_url}],
                    "experiments": [
                        {
                            "kind": "load",
                            "concurrency": [1],
                            "requests": 8,
                            "warmup": 0,
                            "input_tokens": 16,
                            "output_tokens": 4,
                            "shared_prefix": {"tokens": 300, "distinct_suffixes": 0.5},
                        }
                    ],
                }
            )
            return await prepare_run(config, RunOptions(out_dir=tmp_path)).run(), server

    result, server = asyncio.run(go())
    assert all(body["cache_prompt"] is True for body in server.bodies)
    answer = result.lab.answers[0]
    figures = answer.figures
    assert isinstance(figures, LoadFigures)
    cache = figures.levels[0].cache
    assert cache is not None and cache.counted == 8
    # The first request is the only miss: the others find the prefix (and every second one
    # its whole prompt) in the cache.
    assert cache.hits == 7 and cache.cached_share is not None and cache.cached_share > 0.8
    assert cache.ttft_ms_p50_hit is not None and cache.ttft_ms_p50_miss is not None
    # What the hits bought, as the server timed it: it prefilled only their uncached tokens
    # (0.5 ms each). The one miss waited its whole prefill, a floor for its TTFT; the TTFT
    # figures are the hits' and the miss's own (how much sooner a hit's TTFT is, the host's).
    measured = [r for r in result.records if not r.warmup]
    (miss,) = [r for r in measured if (r.provider_timings.cached_tokens or 0) < 150]
    hits = [r for r in measured if r is not miss]
    assert miss.provider_timings.prefill_ms is not None
    assert all(
        (r.provider_timings.prefill_ms or 0) < miss.provider_timings.prefill_ms for r in hits
    )
    assert (
        miss.client.ttft_ms is not None and miss.client.ttft_ms >= miss.provider_timings.prefill_ms
    )
    assert cache.ttft_ms_p50_miss == miss.client.ttft_ms
    assert cache.ttft_ms_p50_hit == pytest.approx(statistics.median(r.client.ttft_ms for r in hits))
    assert "from its cache (7 of 8 requests" in answer.answer, answer.answer


@pytest.mark.unit
def test_a_level_without_cached_counts_reports_no_cache() -> None:
    from labkit.analysis.levels import level_figures
    from tests.support.records import make_record

    records = [make_record(experiment="load", tags={"level": "c1"}) for _ in range(3)]
    assert level_figures(Level(0, "concurrency", 1), records).cache is None
    cached = [make_record(experiment="load", cached_tokens=8, input_tokens=10) for _ in range(2)]
    row = level_figures(Level(0, "concurrency", 1), cached)
    assert row.cache is not None and row.cache.hits == 2 and row.cache.cached_share == 0.8
