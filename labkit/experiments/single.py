"""`single`: a short prompt, measured end to end — tokens in and out, TTFT, decode, stop."""

from __future__ import annotations

from collections.abc import Iterator
from typing import ClassVar, Literal

from pydantic import Field

from labkit.experiments.base import (
    Experiment,
    ExperimentSettings,
    PlannedRequest,
    register_experiment,
)
from labkit.experiments.common import (
    Prompt,
    fmt_ms,
    measured,
    median_of,
    p_of,
    prompt_list,
    stop_counts,
)
from labkit.figures import SingleFigures
from labkit.providers.base import ChatRequest, Provider
from labkit.records import LabAnswer, RequestRecord

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
        f = SingleFigures(
            n=len(ok),
            failed=len(failed),
            input_tokens_p50=median_of(ok, lambda r: r.usage.input_tokens),
            output_tokens_p50=median_of(ok, lambda r: r.usage.output_tokens),
            headers_ms_p50=median_of(ok, lambda r: r.client.headers_ms),
            first_event_ms_p50=median_of(ok, lambda r: r.client.first_event_ms),
            ttft_ms_p50=median_of(ok, lambda r: r.client.ttft_ms),
            ttft_ms_p90=p_of(ok, lambda r: r.client.ttft_ms, 90),
            last_token_ms_p50=median_of(ok, lambda r: r.client.last_token_ms),
            e2e_ms_p50=median_of(ok, lambda r: r.client.e2e_ms),
            decode_ms_per_token_p50=median_of(ok, lambda r: r.client.decode_ms_per_token),
            provider_prefill_ms_p50=median_of(ok, lambda r: r.provider_timings.prefill_ms),
            provider_decode_ms_per_token_p50=median_of(
                ok, lambda r: r.provider_timings.decode_ms_per_token
            ),
            stop_reasons=stops,
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
        stop_text = ", ".join(f"{k} ×{v}" for k, v in sorted(stops.items()))
        answer = (
            f"Over {f.n} requests the prompt was {_n(f.input_tokens_p50)} input tokens and "
            f"the reply {_n(f.output_tokens_p50)} output tokens (medians). Headers arrived "
            f"after {fmt_ms(f.headers_ms_p50)}, the first event after "
            f"{fmt_ms(f.first_event_ms_p50)}, the first token after "
            f"{fmt_ms(f.ttft_ms_p50)} (p90 {fmt_ms(f.ttft_ms_p90)}), the last token after "
            f"{fmt_ms(f.last_token_ms_p50)}; decode ran at "
            f"{fmt_ms(f.decode_ms_per_token_p50, 2)} per token. It stopped with: {stop_text}."
        )
        if f.provider_prefill_ms_p50 is not None:
            answer += (
                f" The server itself reported {fmt_ms(f.provider_prefill_ms_p50)} of prefill "
                f"and {fmt_ms(f.provider_decode_ms_per_token_p50, 2)} per decoded token."
            )
        return self.answer(provider_id, model, answer, f, status="ok" if not failed else "partial")


def _n(value: float | None) -> str:
    return "n/a" if value is None else f"{value:g}"
