"""`single`: a short prompt, measured end to end — tokens in and out, TTFT, decode, stop."""

from __future__ import annotations

from collections.abc import Iterator
from typing import ClassVar, Literal

from pydantic import Field

from labkit.analysis.requests import client_bound_reason
from labkit.analysis.selection import measured, stop_counts
from labkit.analysis.stats import median, median_of, p_of
from labkit.experiments.base import (
    Experiment,
    ExperimentSettings,
    PlannedRequest,
    register_experiment,
)
from labkit.experiments.common import Prompt, prompt_list
from labkit.figures.single import RequestTimeline, SingleFigures
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
        """Warm-ups on the first prompt, then every prompt `repeats` times (drawn lazily)."""
        s = self.settings
        assert isinstance(s, SingleSettings)
        prompts = prompt_list(s.prompts)
        yield from self.warmups(prompts[0].id, prompts[0].text)
        for p in prompts:
            for trial in range(s.repeats):
                yield PlannedRequest(
                    key=f"{self.name}/{p.id}/{trial}",
                    request=ChatRequest(self.messages(p.text), dict(s.params), p.id),
                    trial=trial,
                )

    def planned_per_path(self, provider: Provider) -> int | None:
        """Warm-ups and prompts × repeats."""
        s = self.settings
        assert isinstance(s, SingleSettings)
        return s.warmup + len(prompt_list(s.prompts)) * s.repeats

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
        answer = single_answer(f)
        f = f.model_copy(update={"timeline": _timeline(ok, f.ttft_ms_p50)})
        return self.answer(provider_id, model, answer, f, status="ok" if not failed else "partial")


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
