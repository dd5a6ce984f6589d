"""`same_model`: does each provider of one model name serve the model the reference serves?

A fixed probe set, the same at every provider: each fixed text once as a prompt of one
output token (its ``input_tokens`` is the count; a one-character baseline first, so the chat
framing cancels), and each fixed prompt `repeats` times at temperature 0 asking for the
first tokens' ``top_logprobs`` (their distributions and stop reasons). The verdict per
provider against the ``reference`` provider's fingerprint, and its confidence:
`labkit.analysis.same_model`.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, ClassVar, Literal

from pydantic import Field, PositiveInt, field_validator

from labkit.analysis.same_model import same_model_figures
from labkit.experiments.base import (
    Experiment,
    ExperimentSettings,
    PlannedRequest,
    register_experiment,
)
from labkit.experiments.common import Prompt
from labkit.experiments.variants import logprob_request
from labkit.providers.base import ChatRequest, Provider
from labkit.records import MAX_TOP_LOGPROBS, LabAnswer, RequestRecord
from labkit.tokenizers import OFFLINE_ENCODINGS, TokenizerUnavailable, offline_tokenizer
from labkit.wording.same_model import same_model_answer

__all__ = [
    "BASELINE",
    "DEFAULT_PROMPTS",
    "DEFAULT_TEXTS",
    "SameModelExperiment",
    "SameModelSettings",
]

#: The one-character text whose count is the chat framing alone.
BASELINE = Prompt(id="__baseline__", text=".")

DEFAULT_TEXTS: list[Prompt] = [
    Prompt(id="english", text="The quick brown fox jumps over the lazy dog near the riverbank."),
    Prompt(id="code", text="def add(a: int, b: int) -> int:\n    return a + b\n"),
    Prompt(id="numbers", text="3.14159 2.71828 1.41421 1234567890 0xDEADBEEF 1e-9"),
    Prompt(id="unicode", text="Grüße aus Köln: 東京, Москва, القاهرة — 🚀✨"),
    Prompt(id="rare_words", text="Antidisestablishmentarianism floccinaucinihilipilification."),
]

DEFAULT_PROMPTS: list[Prompt] = [
    Prompt(id=f"p{i}", text=text)
    for i, text in enumerate(
        [
            "The capital of France is",
            "Complete the sequence: 2, 4, 8, 16,",
            "Name one primary colour.",
            "Translate 'thank you' into Spanish.",
            "What is the opposite of hot?",
            "Write the first word of a story about the sea.",
            "Say a fruit that is yellow.",
            "Which planet is closest to the Sun?",
            "Give one synonym for 'happy'.",
            "What do bees make?",
        ]
    )
]


class SameModelSettings(ExperimentSettings):
    """The fixed probe set and the reference provider every other is compared with."""

    kind: Literal["same_model"] = "same_model"
    reference: str = Field(
        min_length=1, description="The provider id whose model the others are checked against."
    )
    texts: list[Prompt] = Field(
        default_factory=lambda: list(DEFAULT_TEXTS),
        min_length=1,
        description="Fixed texts whose prompt token counts are compared (the tokenizer).",
    )
    prompts: list[Prompt] = Field(
        default_factory=lambda: list(DEFAULT_PROMPTS),
        min_length=2,
        description="Fixed prompts whose first next-token distributions and stop reasons "
        "are compared (at least 2; 6 or more for a verdict at 95 %).",
    )
    top_logprobs: int = Field(default=5, ge=1, le=MAX_TOP_LOGPROBS)
    tolerance: float = Field(
        default=0.1,
        gt=0,
        lt=1,
        description="The total variation two servers of one model may differ by (their "
        "numerics); beyond it the distributions are another model's.",
    )
    tokenizer: str | None = Field(
        default=None,
        description="A named offline tokenizer (cl100k_base, o200k_base, o200k_harmony) "
        "whose count of each text is shown beside the providers'.",
    )
    repeats: PositiveInt = Field(default=2, description="Sends of each prompt.")
    params: dict[str, Any] = Field(default_factory=lambda: {"max_tokens": 16})

    @field_validator("tokenizer")
    @classmethod
    def _offline(cls, value: str | None) -> str | None:
        if value is not None and value not in OFFLINE_ENCODINGS:
            raise ValueError(f"expected one of {', '.join(OFFLINE_ENCODINGS)}")
        return value

    @field_validator("texts", "prompts")
    @classmethod
    def _distinct_ids(cls, value: list[Prompt]) -> list[Prompt]:
        ids = [p.id for p in value]
        if len(set(ids)) != len(ids) or BASELINE.id in ids:
            raise ValueError(f"ids must be distinct (and not {BASELINE.id})")
        return value


@register_experiment
class SameModelExperiment(Experiment):
    """A fingerprint per provider from a fixed probe set, and a verdict against a reference."""

    kind: ClassVar[str] = "same_model"
    settings_model: ClassVar[type[ExperimentSettings]] = SameModelSettings
    question: ClassVar[str] = (
        "Does this provider serve the same model as the reference under this model name: "
        "the same tokenizer, the same next-token distributions, the same stop behaviour?"
    )

    @property
    def _s(self) -> SameModelSettings:
        assert isinstance(self.settings, SameModelSettings)
        return self.settings

    def planned_per_path(self, provider: Provider) -> int | None:
        """Warm-ups, a count of each text (and the baseline), each prompt `repeats` times."""
        s = self._s
        return s.warmup + len(s.texts) + 1 + len(s.prompts) * s.repeats

    def plan(self, provider: Provider) -> Iterator[PlannedRequest]:
        """Warm-ups, the counts, then the prompts at temperature 0 with logprobs."""
        s = self._s
        yield from self.warmups(s.prompts[0].id, s.prompts[0].text)
        for text in [BASELINE, *s.texts]:
            params = {**s.params, "temperature": 0, "max_tokens": 1}
            yield PlannedRequest(
                key=f"{self.name}/count/{text.id}",
                request=ChatRequest(self.messages(text.text), params, text.id),
                tags={"phase": "count", "text_id": text.id},
            )
        for prompt in s.prompts:
            for trial in range(s.repeats):
                request = ChatRequest(
                    self.messages(prompt.text), {**s.params, "temperature": 0}, prompt.id
                )
                yield PlannedRequest(
                    key=f"{self.name}/dist/{prompt.id}/{trial}",
                    request=logprob_request(provider, request, s.top_logprobs),
                    trial=trial,
                    tags={"phase": "dist"},
                )

    def _named_counts(self) -> tuple[str, dict[str, int]] | None:
        s = self._s
        if s.tokenizer is None:
            return None
        try:
            tok = offline_tokenizer(s.tokenizer)
        except TokenizerUnavailable:
            return None
        return s.tokenizer, {t.id: tok.count(t.text) for t in [BASELINE, *s.texts]}

    def analyze(self, provider_id: str, model: str, records: list[RequestRecord]) -> LabAnswer:
        """The provider's fingerprint against the reference's, and the verdict."""
        s = self._s
        by_provider = {**self.all_records, provider_id: records}
        figures = same_model_figures(
            provider_id,
            by_provider,
            s.reference,
            s.tolerance,
            [BASELINE.id, *(t.id for t in s.texts)],
            self._named_counts(),
        )
        text = same_model_answer(figures, provider_id)
        undecided = figures.verdict is not None and figures.verdict.verdict == "undecided"
        return self.answer(provider_id, model, text, figures, "partial" if undecided else "ok")
