"""`determinism`: the same prompt N times under several sampling settings — identical or not?

Each variant (temperature 0 with and without a seed, a higher temperature with and without
one, by default) sends the prompt `repeats` times. Outputs are compared token by token: the
provider's own tokenizer where it has one (`Provider.tokenize`: llama.cpp's `/tokenize`),
else tiktoken's
``cl100k_base`` as a common ruler, else characters. The answer names the parameter that
decided the outcome, from the data.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, ClassVar, Literal

from pydantic import Field, PositiveInt

from labkit.analysis.next_token import next_token_figures, variant_figures
from labkit.experiments.base import (
    Experiment,
    ExperimentSettings,
    PlannedRequest,
    register_experiment,
)
from labkit.experiments.variants import Variant, logprob_request
from labkit.figures.determinism import DeterminismFigures, VariantRow
from labkit.figures.next_token import NextTokenFigures
from labkit.providers.base import ChatRequest, Provider
from labkit.records import MAX_TOP_LOGPROBS, LabAnswer, RequestRecord
from labkit.tokenizers import (
    OfflineTokenizer,
    TokenizerUnavailable,
    display_piece,
    offline_tokenizer,
)
from labkit.wording.determinism import determinism_answer

__all__ = [
    "DeterminismExperiment",
    "DeterminismSettings",
    "Variant",
    "common_prefix_length",
    "first_divergence",
]


DEFAULT_VARIANTS = [
    Variant(name="t0", params={"temperature": 0}),
    Variant(name="t0-seed", params={"temperature": 0, "seed": 1234}),
    Variant(name="t1", params={"temperature": 1.0}),
    Variant(name="t1-seed", params={"temperature": 1.0, "seed": 1234}),
]


class DeterminismSettings(ExperimentSettings):
    """One prompt, several variants, `repeats` (at least 2) sends each."""

    kind: Literal["determinism"] = "determinism"
    prompt: str = Field(
        default="Write a short, original story about a lighthouse keeper in three sentences.",
        min_length=1,
    )
    repeats: PositiveInt = Field(default=3, ge=2, description="Sends per variant (2 or more).")
    params: dict[str, Any] = Field(default_factory=lambda: {"max_tokens": 48})
    variants: list[Variant] = Field(default_factory=lambda: list(DEFAULT_VARIANTS), min_length=1)
    top_logprobs: int | None = Field(
        default=None,
        ge=1,
        le=MAX_TOP_LOGPROBS,
        description="Ask for each output token's logprob and this many candidates, and say "
        "where the repeats diverged and how likely each branch was (as `next_token`); "
        "None: off.",
    )


def common_prefix_length(a: list[Any], b: list[Any]) -> int:
    """How many leading items `a` and `b` share."""
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


def first_divergence(outputs: list[list[Any]]) -> int | None:
    """Index of the first token where any output differs from the first; None if all equal."""
    if len(outputs) < 2:
        return None
    first = outputs[0]
    worst: int | None = None
    for other in outputs[1:]:
        if other == first:
            continue
        k = common_prefix_length(first, other)
        worst = k if worst is None else min(worst, k)
    return worst


@register_experiment
class DeterminismExperiment(Experiment):
    """Repeatability of generation under temperature and seed."""

    kind: ClassVar[str] = "determinism"
    settings_model: ClassVar[type[ExperimentSettings]] = DeterminismSettings
    question: ClassVar[str] = (
        "Sent the same prompt several times, are the outputs identical, where do they first "
        "diverge, and which parameter controls that?"
    )

    def __init__(self, settings: ExperimentSettings, index: int = 0) -> None:
        super().__init__(settings, index)
        self._tokens: dict[str, dict[str, list[Any]]] = {}  # provider -> record_id -> tokens
        self._tokenizer: dict[str, str] = {}
        self._pieces: dict[str, dict[str, list[str]]] = {}  # provider -> record_id -> texts
        self._can_return: dict[str, bool] = {}  # provider -> it can return logprobs

    @property
    def _s(self) -> DeterminismSettings:
        assert isinstance(self.settings, DeterminismSettings)
        return self.settings

    def planned_per_path(self, provider: Provider) -> int | None:
        """Warm-ups and variants × repeats."""
        return self._s.warmup + len(self._s.variants) * self._s.repeats

    def plan(self, provider: Provider) -> Iterator[PlannedRequest]:
        """Warm-ups, then every variant `repeats` times, in order."""
        yield from self.warmups("determinism", self._s.prompt)
        for v in self._s.variants:
            params = {**self._s.params, **v.params}
            for trial in range(self._s.repeats):
                request = ChatRequest(self.messages(self._s.prompt), params, "determinism")
                yield PlannedRequest(
                    key=f"{self.name}/{v.name}/{trial}",
                    request=self._with_logprobs(provider, request),
                    trial=trial,
                    tags={"variant": v.name},
                )

    async def finalize(self, provider: Provider, records: list[RequestRecord]) -> None:
        """Tokenize every output with the best tokenizer this provider offers (ids to
        compare, and each token's text for the report's alignment picture)."""
        tokens: dict[str, list[Any]] = {}
        pieces: dict[str, list[str]] = {}
        name = provider.tokenizer_name
        ruler: OfflineTokenizer | None = None
        if name is None:
            try:
                ruler = offline_tokenizer("cl100k_base")
                name = "tiktoken:cl100k_base (common ruler)"
            except TokenizerUnavailable:
                name = "characters"
        for r in records:
            if r.output_text is None or r.warmup or r.error is not None:
                continue
            if provider.tokenizer_name is not None:
                try:
                    own = await provider.tokenize(r.output_text)
                    cut = await provider.tokenized(r.output_text) if own is not None else None
                except Exception:
                    own, cut = None, None
                if own is not None:
                    tokens[r.record_id] = own
                    if cut is not None and cut.pieces is not None and len(cut.pieces) == len(own):
                        pieces[r.record_id] = [display_piece(p) for p in cut.pieces]
                    continue
                name = "characters (tokenizer failed)"
            if ruler is not None:
                cut = ruler.tokenize(r.output_text)
                tokens[r.record_id] = list(cut.ids or ())
                pieces[r.record_id] = [display_piece(p) for p in cut.pieces or ()]
            else:
                tokens[r.record_id] = list(r.output_text)
                pieces[r.record_id] = [display_piece(c.encode()) for c in r.output_text]
        self._tokens[provider.id] = tokens
        self._pieces[provider.id] = pieces
        self._tokenizer[provider.id] = name or "characters"

    def analyze(self, provider_id: str, model: str, records: list[RequestRecord]) -> LabAnswer:
        """Per variant: identical or not, first divergent token, common prefix, fingerprints."""
        tokens = self._tokens.get(provider_id, {})
        pieces = self._pieces.get(provider_id, {})
        rows: list[VariantRow] = []
        for v in self._s.variants:
            recs = [
                r
                for r in records
                if not r.warmup and r.error is None and r.tags.get("variant") == v.name
            ]
            outs = [tokens.get(r.record_id) or list(r.output_text or "") for r in recs]
            div = first_divergence(outs)
            prefix = (
                min(common_prefix_length(outs[0], o) for o in outs[1:]) if len(outs) > 1 else None
            )
            rows.append(
                VariantRow(
                    variant=v.name,
                    params={**self._s.params, **v.params},
                    n=len(recs),
                    identical=(div is None) if len(outs) > 1 else None,
                    distinct_outputs=len({r.output_text for r in recs}),
                    first_divergent_token=div,
                    common_prefix_tokens=prefix,
                    output_tokens=[len(o) for o in outs],
                    system_fingerprints=sorted(
                        {r.system_fingerprint for r in recs if r.system_fingerprint}
                    ),
                    outputs=[
                        pieces.get(r.record_id) or [str(t) for t in out]
                        for r, out in zip(recs, outs, strict=True)
                    ],
                )
            )
        figures = DeterminismFigures(
            variants=rows,
            tokenizer=self._tokenizer.get(provider_id, "characters"),
            next_token=self._next_token(provider_id, records),
        )
        judged = [r for r in rows if r.identical is not None]
        if not judged:
            return self.answer(
                provider_id,
                model,
                "Too few successful outputs to compare (need 2 per variant).",
                figures,
                status="failed",
            )
        answer = determinism_answer(figures)
        return self.answer(
            provider_id,
            model,
            answer,
            figures,
            status="ok" if len(judged) == len(rows) else "partial",
        )

    # --- the candidates behind the replies (`top_logprobs`) -------------------------------

    def _with_logprobs(self, provider: Provider, request: ChatRequest) -> ChatRequest:
        """`request` asking for candidates when `top_logprobs` is set and the provider can."""
        top_k = self._s.top_logprobs
        if top_k is not None:
            self._can_return[provider.id] = bool(provider.logprob_params(top_k))
        return logprob_request(provider, request, top_k)

    def _next_token(
        self, provider_id: str, records: list[RequestRecord]
    ) -> NextTokenFigures | None:
        """Per variant the steps, divergence and greedy check (None: `top_logprobs` off)."""
        s = self._s
        if s.top_logprobs is None:
            return None
        variants = [
            variant_figures(
                v.name,
                {**s.params, **v.params},
                [
                    r
                    for r in records
                    if not r.warmup and r.error is None and r.tags.get("variant") == v.name
                ],
            )
            for v in s.variants
        ]
        return next_token_figures(
            s.top_logprobs, variants, can_return=self._can_return.get(provider_id, True)
        )
