"""`prefill_decode`: how TTFT grows with the prompt, and whether decode speed does.

A sweep of prompt lengths (tokens), each sent `repeats` times in round-robin order so a
drifting machine does not bias one length. Prompt caching is controlled: every cold prompt
starts with a unique nonce (no shared prefix to reuse) and a provider with a cache switch
gets it turned off (`Provider.prompt_cache_params`, llama.cpp's ``cache_prompt: false``);
cached-token counts are recorded and any cold cache hit is flagged.
A `cache` variant then repeats one long prefix with different endings to show what a cache
hit does to TTFT. TTFT is fitted against input tokens by least squares, a straight line or
one with a quadratic term as the data choose (`labkit.analysis.stats.fit_prompt_cost`).
"""

from __future__ import annotations

import itertools
import json
import secrets
from collections.abc import Iterator
from typing import Any, ClassVar, Literal

from pydantic import Field, NonNegativeInt, PositiveInt

from labkit.analysis.requests import client_bound_reason
from labkit.analysis.selection import measured
from labkit.analysis.stats import fit_prompt_cost, median, median_of, ratio_of_costs
from labkit.errors import ConfigError
from labkit.experiments.base import (
    Experiment,
    ExperimentSettings,
    PlannedRequest,
    register_experiment,
)
from labkit.figures import Estimate, LinearFit
from labkit.figures.prefill_decode import (
    CacheEffect,
    MarginalCost,
    PrefillDecodeFigures,
    PrefillPoint,
)
from labkit.providers.base import ChatRequest, Provider, ProviderSettings
from labkit.records import LabAnswer, RequestRecord
from labkit.wording.prefill_decode import prefill_decode_answer
from labkit.workloads import PromptSizing, measure_sizing

__all__ = ["PrefillDecodeExperiment", "PrefillDecodeSettings"]

AUTO_LENGTHS = [16, 64, 256, 1024, 2048, 4096]
_MARGIN_TOKENS = 64  # chat template and instruction around the filler


class PrefillDecodeSettings(ExperimentSettings):
    """The prompt-length sweep and the cache variant."""

    kind: Literal["prefill_decode"] = "prefill_decode"
    prompt_tokens: list[PositiveInt] | None = Field(
        default=None,
        description="Prompt lengths in tokens; default 16..4096 capped to the model's context.",
    )
    context_tokens: PositiveInt | None = Field(
        default=None,
        description="The model's context size, for providers that do not know their own "
        "(llama.cpp does: ctx_size).",
    )
    repeats: PositiveInt = 3
    params: dict[str, Any] = Field(default_factory=lambda: {"max_tokens": 32, "temperature": 0})
    ignore_eos: bool = Field(
        default=True,
        description="Where the provider can (llama.cpp): decode exactly max_tokens, for "
        "comparable decode.",
    )
    cache_variant: bool = Field(default=True, description="Also run the repeated-prefix variant.")
    cache_prefix_tokens: PositiveInt = Field(default=1024, description="Shared prefix length.")
    cache_repeats: NonNegativeInt = Field(default=3, description="Cache hits after the prime.")


def _context_limit(s: PrefillDecodeSettings, provider: ProviderSettings) -> int | None:
    """The provider's own context size, else the experiment's `context_tokens`."""
    own = provider.context_size()
    return own if own is not None else s.context_tokens


@register_experiment
class PrefillDecodeExperiment(Experiment):
    """Prefill cost per prompt token, decode cost per output token."""

    kind: ClassVar[str] = "prefill_decode"
    settings_model: ClassVar[type[ExperimentSettings]] = PrefillDecodeSettings
    question: ClassVar[str] = (
        "How does time to first token grow with prompt length (ms per prompt token), does "
        "decode speed depend on it, and what does a prompt-cache hit change?"
    )

    def __init__(self, settings: ExperimentSettings, index: int = 0) -> None:
        super().__init__(settings, index)
        self._sizing: dict[str, PromptSizing] = {}

    @property
    def _s(self) -> PrefillDecodeSettings:
        assert isinstance(self.settings, PrefillDecodeSettings)
        return self.settings

    def _max_tokens(self) -> int:
        return int(self._s.params.get("max_tokens", 32))

    def lengths_for(self, provider: ProviderSettings) -> list[int]:
        """The sweep for one provider: explicit lengths, or the default capped to fit."""
        if self._s.prompt_tokens is not None:
            return sorted(set(self._s.prompt_tokens))
        limit = _context_limit(self._s, provider)
        if limit is None:
            return list(AUTO_LENGTHS)
        room = limit - self._max_tokens() - _MARGIN_TOKENS
        fit = [n for n in AUTO_LENGTHS if n <= room]
        return fit or [max(1, room)]

    def validate_for(self, settings: ProviderSettings) -> None:
        """A length the provider's context cannot hold is a config error, before any send."""
        limit = _context_limit(self._s, settings)
        if limit is None:
            return
        need = max(self.lengths_for(settings)) + self._max_tokens() + _MARGIN_TOKENS
        if need > limit:
            raise ConfigError(
                f"{self.name}: a {max(self.lengths_for(settings))}-token prompt plus "
                f"{self._max_tokens()} output tokens does not fit provider {settings.id!r}'s "
                f"context of {limit} tokens; lower prompt_tokens or raise the context size"
            )
        if self._s.cache_variant and self._cache_prefix(settings) < 16:
            raise ConfigError(f"{self.name}: no room for a cache prefix in {settings.id!r}")

    def _cache_prefix(self, settings: ProviderSettings) -> int:
        limit = _context_limit(self._s, settings)
        n = self._s.cache_prefix_tokens
        if limit is not None:
            n = min(n, limit - self._max_tokens() - _MARGIN_TOKENS)
        return n

    async def prepare(self, provider: Provider) -> None:
        """Size prompts with the provider's counter, where it has one (`labkit.workloads`)."""
        self._sizing[provider.id] = await measure_sizing(provider)

    def _prompt(self, provider_id: str, tokens: int, nonce: str | None, offset: int = 0) -> str:
        sizing = self._sizing.get(provider_id, PromptSizing())
        head = f"[{nonce}] " if nonce else ""
        return head + sizing.filler(tokens, offset)

    def planned_per_path(self, provider: Provider) -> int | None:
        """Warm-ups, repeats × lengths, and the cache variant's prime and hits."""
        s = self._s
        cache = s.cache_repeats + 1 if s.cache_variant else 0
        return s.warmup + s.repeats * len(self.lengths_for(provider.settings)) + cache

    def plan(self, provider: Provider) -> Iterator[PlannedRequest]:
        """Warm-up, the cold sweep (round-robin over lengths), then the cache variant."""
        s = self._s
        exact = provider.exact_length_params() if s.ignore_eos else {}
        cache_off = provider.prompt_cache_params(False)
        cold = {**s.params, **cache_off, **exact}
        cold_tags: dict[str, str | int | float | bool] = {"variant": "cold", "cache": "off"}
        if cache_off:
            cold_tags["cache_params"] = ", ".join(
                f"{k}={json.dumps(v)}" for k, v in sorted(cache_off.items())
            )
        lengths = self.lengths_for(provider.settings)
        yield from (
            PlannedRequest(
                key=f"{self.name}/warmup/{i}",
                request=ChatRequest(
                    [
                        {
                            "role": "user",
                            "content": self._prompt(provider.id, 64, secrets.token_hex(4)),
                        }
                    ],
                    cold,
                    "warmup",
                ),
                trial=i,
                warmup=True,
            )
            for i in range(s.warmup)
        )
        for trial in range(s.repeats):
            for n in lengths:
                text = self._prompt(provider.id, n, secrets.token_hex(4), offset=trial)
                yield PlannedRequest(
                    key=f"{self.name}/cold/{n}/{trial}",
                    request=ChatRequest([{"role": "user", "content": text}], cold, f"len{n}"),
                    trial=trial,
                    tags={**cold_tags, "target_prompt_tokens": n},
                )
        if s.cache_variant:
            warm = {**s.params, **provider.prompt_cache_params(True), **exact}
            n = self._cache_prefix(provider.settings)
            prefix = self._prompt(provider.id, n, secrets.token_hex(4))
            for i in range(s.cache_repeats + 1):
                phase = "prime" if i == 0 else "hit"
                text = f"{prefix}\n\nQuestion {i}: which word above comes first?"
                yield PlannedRequest(
                    key=f"{self.name}/cache/{i}",
                    request=ChatRequest([{"role": "user", "content": text}], warm, "cache"),
                    trial=i,
                    tags={"variant": "cache", "phase": phase, "target_prompt_tokens": n},
                )

    def analyze(self, provider_id: str, model: str, records: list[RequestRecord]) -> LabAnswer:
        """The fit, the per-length medians, decode flatness and the cache effect."""
        ok = measured(records)
        cold = [
            r
            for r in ok
            if r.tags.get("variant") == "cold"
            and r.usage.input_tokens is not None
            and r.client.ttft_ms is not None
        ]
        points: list[PrefillPoint] = []
        for n in sorted({int(r.tags["target_prompt_tokens"]) for r in cold}):
            group = [r for r in cold if r.tags["target_prompt_tokens"] == n]
            points.append(
                PrefillPoint(
                    target_prompt_tokens=n,
                    input_tokens=median_of(group, lambda r: r.usage.input_tokens),
                    ttft_ms=median_of(group, lambda r: r.client.ttft_ms),
                    prefill_ms=median_of(group, lambda r: r.provider_timings.prefill_ms),
                    decode_ms_per_token=median_of(group, lambda r: r.client.decode_ms_per_token),
                    provider_decode_ms_per_token=median_of(
                        group, lambda r: r.provider_timings.decode_ms_per_token
                    ),
                    cached_tokens=median_of(group, lambda r: r.provider_timings.cached_tokens),
                    n=len(group),
                    ttft_values=[r.client.ttft_ms for r in group if r.client.ttft_ms is not None],
                    decode_values=[
                        r.client.decode_ms_per_token
                        for r in group
                        if r.client.decode_ms_per_token is not None
                    ],
                )
            )
        xs = [float(r.usage.input_tokens or 0) for r in cold]
        fit = LinearFit.least_squares(xs, [float(r.client.ttft_ms or 0) for r in cold])
        with_prefill = [r for r in cold if r.provider_timings.prefill_ms is not None]
        server_fit = LinearFit.least_squares(
            [float(r.usage.input_tokens or 0) for r in with_prefill],
            [float(r.provider_timings.prefill_ms or 0) for r in with_prefill],
        )
        decoded = [r for r in cold if r.client.decode_ms_per_token is not None]
        decode_xs = [float(r.usage.input_tokens or 0) for r in decoded]
        decode_ys = [float(r.client.decode_ms_per_token or 0) for r in decoded]
        decode_fit = LinearFit.least_squares(decode_xs, decode_ys)
        prompt_token = (
            Estimate(value=fit.ms_per_token, lo=fit.ms_per_token_lo, hi=fit.ms_per_token_hi)
            if fit is not None
            else None
        )
        generated = median(decode_ys) if decode_ys else None
        ratio = ratio_of_costs(
            decode_xs, [float(r.client.ttft_ms or 0) for r in decoded], decode_ys
        )
        cold_hits = sum(1 for r in cold if (r.provider_timings.cached_tokens or 0) > 0)
        switches = {str(r.tags["cache_params"]) for r in cold if "cache_params" in r.tags}
        cache = self._cache_figures(ok)
        segments = marginal_costs(points)
        ttft_model = fit_prompt_cost(xs, [float(r.client.ttft_ms or 0) for r in cold])
        server_model = fit_prompt_cost(
            [float(r.usage.input_tokens or 0) for r in with_prefill],
            [float(r.provider_timings.prefill_ms or 0) for r in with_prefill],
        )
        f = PrefillDecodeFigures(
            points=points,
            fit=fit,
            server_prefill_fit=server_fit,
            decode_fit=decode_fit,
            cold_cache_hits=cold_hits,
            cache_control="; ".join(["unique nonce per prompt", *sorted(switches)]),
            cache=cache,
            marginal_ms_per_token=segments if fit is not None else [],
            ttft_model=ttft_model,
            server_prefill_model=server_model,
            prompt_token_ms=prompt_token,
            generated_token_ms=generated,
            generated_vs_prompt=ratio,
            client_bound=client_bound_reason(r for r in records if not r.warmup),
        )
        if ttft_model is None:
            return self.answer(provider_id, model, prefill_decode_answer(f), f, status="failed")
        return self.answer(provider_id, model, prefill_decode_answer(f), f)

    @staticmethod
    def _cache_figures(ok: list[RequestRecord]) -> CacheEffect | None:
        recs = [r for r in ok if r.tags.get("variant") == "cache"]
        if not recs:
            return None
        prime = [r for r in recs if r.tags.get("phase") == "prime"]
        hits = [r for r in recs if r.tags.get("phase") == "hit"]
        prefix = recs[0].tags.get("target_prompt_tokens")
        return CacheEffect(
            prefix_tokens=int(prefix) if prefix is not None else None,
            prime_ttft_ms=median_of(prime, lambda r: r.client.ttft_ms),
            hit_ttft_ms=median_of(hits, lambda r: r.client.ttft_ms),
            prime_cached_tokens=median_of(prime, lambda r: r.provider_timings.cached_tokens),
            hit_cached_tokens=median_of(hits, lambda r: r.provider_timings.cached_tokens),
            hit_input_tokens=median_of(hits, lambda r: r.usage.input_tokens),
            n_hits=len(hits),
        )


def marginal_costs(points: list[PrefillPoint]) -> list[MarginalCost]:
    """TTFT cost of one more prompt token between consecutive sweep points."""
    usable = [
        (p.input_tokens, p.ttft_ms)
        for p in points
        if p.input_tokens is not None and p.ttft_ms is not None
    ]
    out = []
    for (x0, y0), (x1, y1) in itertools.pairwise(usable):
        if x1 - x0 > 0:
            out.append(
                MarginalCost(from_tokens=x0, to_tokens=x1, ms_per_token=(y1 - y0) / (x1 - x0))
            )
    return out
