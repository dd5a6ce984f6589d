"""`single`: a short prompt, measured end to end — tokens in and out, TTFT, decode, stop.

By default (`prompt_cache: cold_and_cached`) each repeat is a pair: the request sent cold,
with the provider's prompt cache switched off for it (`Provider.prompt_cache_params`; where
a provider has no such switch, a fresh nonce opens the prompt so no cached prefix matches),
then at once the same request again with the cache on. The provider's own cached-token
counts say which requests really were cold or cached, and the answer gives both TTFTs apart:
a repeat's short TTFT is a KV-cache hit, not the time to read the prompt.
"""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from typing import ClassVar, Literal

from pydantic import Field

from labkit.analysis.requests import cached_tokens, client_bound_reason
from labkit.analysis.selection import measured, stop_counts
from labkit.analysis.stats import median, median_of, p_of
from labkit.experiments.base import (
    Experiment,
    ExperimentSettings,
    PlannedRequest,
    register_experiment,
)
from labkit.experiments.common import Prompt, prompt_list
from labkit.figures.single import PromptCacheRun, RequestTimeline, SingleFigures
from labkit.providers.base import ChatRequest, Provider
from labkit.records import LabAnswer, RequestRecord
from labkit.wording.single import single_answer

__all__ = ["SingleExperiment", "SingleSettings"]


def _default_prompts() -> list[str | Prompt]:
    return ["Explain what a token is in one sentence."]


class SingleSettings(ExperimentSettings):
    """Prompts sent `repeats` times each."""

    kind: Literal["single"] = "single"
    prompts: list[str | Prompt] = Field(
        default_factory=_default_prompts,
        min_length=1,
        description="Prompts (strings, or {id, text}).",
    )
    prompt_cache: Literal["cold_and_cached", "as_sent"] = Field(
        default="cold_and_cached",
        description="`cold_and_cached`: each repeat sent cold (the provider's prompt cache "
        "off, or a fresh nonce first) and then again with the cache on, the two TTFTs given "
        "apart; `as_sent`: each repeat sent once, as the params say.",
    )


@register_experiment
class SingleExperiment(Experiment):
    """The basic measurement of one chat request."""

    kind: ClassVar[str] = "single"
    settings_model: ClassVar[type[ExperimentSettings]] = SingleSettings
    question: ClassVar[str] = (
        "For a short prompt: how many tokens go in and out, how long until the first token, "
        "how fast do the rest arrive, and why does it stop?"
    )

    def plan(self, provider: Provider) -> Iterator[PlannedRequest]:
        """Warm-ups on the first prompt, then every prompt `repeats` times (drawn lazily),
        each a cold and a cached send under `cold_and_cached`."""
        s = self.settings
        assert isinstance(s, SingleSettings)
        prompts = prompt_list(s.prompts)
        yield from self.warmups(prompts[0].id, prompts[0].text)
        pairs = s.prompt_cache == "cold_and_cached"
        cache_off, cache_on = (
            provider.prompt_cache_params(False),
            provider.prompt_cache_params(True),
        )
        for p in prompts:
            for trial in range(s.repeats):
                if not pairs:
                    yield PlannedRequest(
                        key=f"{self.name}/{p.id}/{trial}",
                        request=ChatRequest(self.messages(p.text), dict(s.params), p.id),
                        trial=trial,
                    )
                    continue
                # Without a switch, a nonce at the very start leaves no cached prefix to match.
                messages = self.messages(p.text)
                if not cache_off:
                    messages = [
                        {"role": "system", "content": f"Request {secrets.token_hex(4)}."},
                        *messages,
                    ]
                for state, params in (("cold", cache_off), ("cached", cache_on)):
                    yield PlannedRequest(
                        key=f"{self.name}/{p.id}/{trial}/{state}",
                        request=ChatRequest(
                            [dict(m) for m in messages], {**s.params, **params}, p.id
                        ),
                        trial=trial,
                        tags={"cache": state},
                    )

    def planned_per_path(self, provider: Provider) -> int | None:
        """Warm-ups and prompts × repeats (twice each under `cold_and_cached`)."""
        s = self.settings
        assert isinstance(s, SingleSettings)
        sends = 2 if s.prompt_cache == "cold_and_cached" else 1
        return s.warmup + len(prompt_list(s.prompts)) * s.repeats * sends

    def analyze(self, provider_id: str, model: str, records: list[RequestRecord]) -> LabAnswer:
        """Medians of the stages, token counts and the stop reasons seen."""
        ok = measured(records)
        failed = [r for r in records if not r.warmup and r.error is not None]
        stops = stop_counts(ok)
        ttft = median([r.client.ttft_ms for r in ok if r.client.ttft_ms is not None])
        decode = median(
            [r.client.decode_ms_per_token for r in ok if r.client.decode_ms_per_token is not None]
        )
        f = SingleFigures(
            n=len(ok),
            failed=len(failed),
            input_tokens_p50=median_of(ok, lambda r: r.usage.input_tokens),
            output_tokens_p50=median_of(ok, lambda r: r.usage.output_tokens),
            headers_ms_p50=median_of(ok, lambda r: r.client.headers_ms),
            first_event_ms_p50=median_of(ok, lambda r: r.client.first_event_ms),
            ttft_ms_p50=ttft.value,  # the one median: `ttft` is it with its interval
            ttft_ms_p90=p_of(ok, lambda r: r.client.ttft_ms, 90),
            last_token_ms_p50=median_of(ok, lambda r: r.client.last_token_ms),
            e2e_ms_p50=median_of(ok, lambda r: r.client.e2e_ms),
            reply_ms_p50=median_of(ok, _reply_ms),
            decode_ms_per_token_p50=decode.value,
            provider_prefill_ms_p50=median_of(ok, lambda r: r.provider_timings.prefill_ms),
            provider_decode_ms_per_token_p50=median_of(
                ok, lambda r: r.provider_timings.decode_ms_per_token
            ),
            stop_reasons=stops,
            ttft=ttft,
            decode_per_token=decode,
            client_bound=client_bound_reason(r for r in records if not r.warmup),
        )
        if not ok:
            first = failed[0].error.message if failed and failed[0].error else "no records"
            return self.answer(
                provider_id,
                model,
                f"No successful request ({len(failed)} failed; first error: {first}).",
                f,
                status="failed",
            )
        cold, cached, uncached = _by_cache(ok)
        f = f.model_copy(
            update={
                "cold": _cache_run("cold", cold),
                "cached": _cache_run("cached", cached),
                "repeats_uncached": uncached,
                "cache_hits": sum(1 for r in ok if (cached_tokens(r) or 0) > 0),
            }
        )
        answer = single_answer(f)
        shown = cold or ok  # the anatomy of a cold request: its prefill is the prompt's
        ttft_shown = median([r.client.ttft_ms for r in shown if r.client.ttft_ms is not None])
        f = f.model_copy(update={"timeline": _timeline(shown, ttft_shown.value)})
        return self.answer(provider_id, model, answer, f, status="ok" if not failed else "partial")


def _reply_ms(r: RequestRecord) -> float | None:
    """The reply after its first token: last token − first token."""
    c = r.client
    return None if c.last_token_ms is None or c.ttft_ms is None else c.last_token_ms - c.ttft_ms


def _by_cache(
    ok: list[RequestRecord],
) -> tuple[list[RequestRecord], list[RequestRecord], int]:
    """The paired requests (tag `cache`) as cold and cached, by the provider's own cached
    tokens where it counts them (a `cached` send it served with none is cold), else as
    labkit asked; and how many `cached` sends had no cached token."""
    cold: list[RequestRecord] = []
    cached: list[RequestRecord] = []
    uncached = 0
    for r in ok:
        asked = r.tags.get("cache")
        if asked not in ("cold", "cached"):
            continue
        count = cached_tokens(r)
        if count is None:
            (cached if asked == "cached" else cold).append(r)
        elif count > 0:
            cached.append(r)
        else:
            cold.append(r)
            uncached += asked == "cached"
    return cold, cached, uncached


def _cache_run(
    state: Literal["cold", "cached"], records: list[RequestRecord]
) -> PromptCacheRun | None:
    """One cache state's figures (None: no such request)."""
    if not records:
        return None
    return PromptCacheRun(
        state=state,
        n=len(records),
        ttft=median([r.client.ttft_ms for r in records if r.client.ttft_ms is not None]),
        input_tokens_p50=median_of(records, lambda r: r.usage.input_tokens),
        cached_tokens_p50=median_of(records, cached_tokens),
        provider_prefill_ms_p50=median_of(records, lambda r: r.provider_timings.prefill_ms),
        confirmed=all(cached_tokens(r) is not None for r in records),
    )


def _timeline(ok: list[RequestRecord], ttft_p50: float | None) -> RequestTimeline | None:
    """The request with the TTFT nearest the median, as offsets from t_start."""
    streamed = [r for r in ok if r.client.ttft_ms is not None and r.client.event_offsets_ms]
    if not streamed or ttft_p50 is None:
        return None
    r = min(streamed, key=lambda rec: abs((rec.client.ttft_ms or 0.0) - ttft_p50))
    return RequestTimeline(
        record_id=r.record_id,
        headers_ms=r.client.headers_ms,
        first_event_ms=r.client.first_event_ms,
        ttft_ms=r.client.ttft_ms,
        last_token_ms=r.client.last_token_ms,
        e2e_ms=r.client.e2e_ms,
        event_offsets_ms=list(r.client.event_offsets_ms),
        provider_prefill_ms=r.provider_timings.prefill_ms,
        provider_decode_ms=r.provider_timings.decode_ms,
    )
