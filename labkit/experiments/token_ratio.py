"""`token_ratio`: characters, UTF-8 bytes and tokens of different kinds of text.

Token counts come from the provider's own counter (llama.cpp `/tokenize`, Anthropic
`count_tokens`), from an offline copy of its tokenizer where labkit has one (tiktoken,
`Provider.count_locally`), and from the provider's usage when each text is sent as a prompt.
Usage counts include the chat template's framing, so a one-character baseline prompt is sent
too and its framing subtracted. The answer measures the "4 characters per token" rule of
thumb against each, and cuts every text with every tokenizer at hand, side by side
(docs/experiments.md, "The kinds").
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, ClassVar, Literal

from pydantic import Field, NonNegativeInt, PositiveInt

from labkit.analysis.selection import measured
from labkit.analysis.stats import median_of
from labkit.experiments.base import (
    Experiment,
    ExperimentSettings,
    PlannedRequest,
    register_experiment,
)
from labkit.experiments.common import Prompt
from labkit.figures.token_ratio import (
    TokenizerCount,
    TokenizerSpread,
    TokenPieces,
    TokenRatioFigures,
    TokenRatioRow,
)
from labkit.providers.base import ChatRequest, Provider, TokenCount
from labkit.records import LabAnswer, RequestRecord
from labkit.tokenizers import Tokenized, display_piece, offline_tokenizer
from labkit.wording.token_ratio import token_ratio_answer

__all__ = ["DEFAULT_TEXTS", "TokenRatioExperiment", "TokenRatioSettings"]

DEFAULT_TEXTS: list[Prompt] = [
    Prompt(
        id="english",
        text="The quick brown fox jumps over the lazy dog. Language models read text as "
        "tokens, which are often whole common words or pieces of rarer ones.",
    ),
    Prompt(
        id="python",
        text="def fibonacci(n: int) -> list[int]:\n    seq = [0, 1]\n    while len(seq) < n:\n"
        "        seq.append(seq[-1] + seq[-2])\n    return seq[:n]\n",
    ),
    Prompt(id="emoji", text="🚀🔥✨ Launch day! 🎉🎉 Thanks team 🙏💯 — ship it 🛳️👩‍💻👨‍👩‍👧"),
    Prompt(
        id="japanese", text="東京は日本の首都です。言語モデルは文章をトークンに分割して読みます。"
    ),
    Prompt(
        id="whitespace",
        text="a    b\t\tc\n\n\n    d          e\n\t\t\tf        \n\n   g   h",
    ),
    Prompt(
        id="word_list",
        text="apple banana cherry date elderberry fig grape honeydew kiwi lemon mango "
        "nectarine orange papaya quince raspberry strawberry tangerine ugli vanilla "
        "watermelon xigua yam zucchini",
    ),
]

_BASELINE_ID = "__baseline__"
_BASELINE_TEXT = "."
# Not o200k_harmony: it cuts plain text as o200k_base does.
_OFFLINE_SIDE_BY_SIDE = ("cl100k_base", "o200k_base")


class TokenRatioSettings(ExperimentSettings):
    """The texts to measure; each is also sent once as a prompt to read the usage count."""

    kind: Literal["token_ratio"] = "token_ratio"
    texts: list[Prompt] = Field(
        default_factory=lambda: list(DEFAULT_TEXTS),
        min_length=1,
        description="Texts to measure, each {id, text}; must not be empty.",
    )
    repeats: PositiveInt = 1
    warmup: NonNegativeInt = 0
    params: dict[str, Any] = Field(default_factory=lambda: {"max_tokens": 1, "temperature": 0})
    send: bool = Field(default=True, description="Also send each text to read usage counts.")


@register_experiment
class TokenRatioExperiment(Experiment):
    """How text turns into tokens, per kind of text and per provider."""

    kind: ClassVar[str] = "token_ratio"
    settings_model: ClassVar[type[ExperimentSettings]] = TokenRatioSettings
    question: ClassVar[str] = (
        "How many characters and bytes make a token for different kinds of text, and how "
        "wrong is the '4 characters per token' rule?"
    )

    def __init__(self, settings: ExperimentSettings, index: int = 0) -> None:
        super().__init__(settings, index)
        # provider id -> text id -> count, filled by prepare()
        self._counts: dict[str, dict[str, TokenCount | None]] = {}
        self._tiktoken: dict[str, dict[str, int]] = {}
        self._count_errors: dict[str, str] = {}
        # tokenizer label -> text id -> tokens, over every provider prepared so far
        self._side_by_side: dict[str, dict[str, int]] = {}
        # tokenizer label -> text id -> (piece texts, tokens per piece), for the report's spans
        self._pieces: dict[str, dict[str, tuple[list[str], list[int]]]] = {}
        # provider id -> the chat framing counted without generating: (tokens, source) or why not
        self._framing: dict[str, tuple[int, str] | str] = {}

    @property
    def _s(self) -> TokenRatioSettings:
        assert isinstance(self.settings, TokenRatioSettings)
        return self.settings

    async def prepare(self, provider: Provider) -> None:
        """Count every text with the provider's own counter and its offline tokenizer."""
        counts: dict[str, TokenCount | None] = {}
        texts = [*self._s.texts, Prompt(id=_BASELINE_ID, text=_BASELINE_TEXT)]
        for t in texts:
            try:
                counts[t.id] = await provider.count_tokens(t.text)
            except Exception as exc:  # a failing counter is reported, not fatal
                counts[t.id] = None
                self._count_errors[provider.id] = f"{type(exc).__name__}: {exc}"[:200]
        self._counts[provider.id] = counts
        local = {t.id: provider.count_locally(t.text) for t in texts}
        if all(count is not None for count in local.values()):
            self._tiktoken[provider.id] = {
                text_id: count.tokens for text_id, count in local.items() if count is not None
            }
        await self._cut_side_by_side(provider, texts)
        self._framing[provider.id] = await _counted_framing(provider)

    async def _cut_side_by_side(self, provider: Provider, texts: list[Prompt]) -> None:
        """Add the offline encodings (once) and this provider's own tokenizer to the table."""
        if not self._side_by_side:
            for name in _OFFLINE_SIDE_BY_SIDE:
                tokenizer = offline_tokenizer(name)
                cut_by_text = {t.id: tokenizer.tokenize(t.text) for t in self._s.texts}
                self._side_by_side[tokenizer.label] = {
                    text_id: cut.count for text_id, cut in cut_by_text.items()
                }
                self._pieces[tokenizer.label] = _piece_texts(cut_by_text)
        cuts: dict[str, Tokenized] = {}
        try:
            for t in texts:
                cut = await provider.tokenized(t.text)
                if cut is None:
                    return
                cuts[t.id] = cut
        except Exception as exc:  # a failing tokenizer is reported, not fatal
            self._count_errors.setdefault(provider.id, f"{type(exc).__name__}: {exc}"[:200])
            return
        label = cuts[_BASELINE_ID].tokenizer
        if label in self._side_by_side:  # an offline encoding already in the table
            return
        # A counter of whole requests (Anthropic) includes the framing: the one-character
        # baseline's count less its one token is that framing.
        framing = cuts[_BASELINE_ID].count - 1 if cuts[_BASELINE_ID].includes_framing else 0
        own_label = f"{provider.model} [{provider.id}]"
        self._side_by_side[own_label] = {t.id: cuts[t.id].count - framing for t in self._s.texts}
        self._pieces[own_label] = _piece_texts(
            {t.id: cuts[t.id] for t in self._s.texts if t.id in cuts}
        )

    def planned_per_path(self, provider: Provider) -> int | None:
        """The baseline and every text, each `repeats` times (none when `send` is off)."""
        return (len(self._s.texts) + 1) * self._s.repeats if self._s.send else 0

    def plan(self, provider: Provider) -> Iterator[PlannedRequest]:
        """One baseline prompt and each text once per repeat (max_tokens 1)."""
        if not self._s.send:
            return
        texts = [Prompt(id=_BASELINE_ID, text=_BASELINE_TEXT), *self._s.texts]
        for t in texts:
            for trial in range(self._s.repeats):
                yield PlannedRequest(
                    key=f"{self.name}/{t.id}/{trial}",
                    request=ChatRequest(
                        [{"role": "user", "content": t.text}], dict(self._s.params), t.id
                    ),
                    trial=trial,
                    tags={"text_id": t.id},
                )

    def analyze(self, provider_id: str, model: str, records: list[RequestRecord]) -> LabAnswer:
        """Rows per text: chars, bytes, tokens by source, chars/token, error of the rule."""
        ok = measured(records)
        counts = self._counts.get(provider_id, {})
        tk = self._tiktoken.get(provider_id, {})

        def usage_of(text_id: str) -> float | None:
            return median_of(
                [r for r in ok if r.prompt_id == text_id], lambda r: r.usage.input_tokens
            )

        baseline_usage = usage_of(_BASELINE_ID)
        baseline_count = counts.get(_BASELINE_ID)
        baseline_tokens = baseline_count.tokens if baseline_count else 1
        rows: list[TokenRatioRow] = []
        for t in self._s.texts:
            count = counts.get(t.id)
            usage = usage_of(t.id)
            usage_text = (
                usage - baseline_usage + baseline_tokens
                if usage is not None and baseline_usage is not None
                else None
            )
            tokens: int | None
            if count is not None:
                tokens, source = count.tokens, count.source
            elif usage_text is not None:
                tokens, source = round(usage_text), "usage minus chat framing"
            elif t.id in tk:
                tokens, source = tk[t.id], "tiktoken"
            else:
                tokens, source = None, "not available"
            chars = len(t.text)
            size = len(t.text.encode("utf-8"))
            rows.append(
                TokenRatioRow(
                    text_id=t.id,
                    text=t.text,
                    chars=chars,
                    bytes=size,
                    tokens=tokens,
                    token_source=source,
                    chars_per_token=chars / tokens if tokens else None,
                    bytes_per_token=size / tokens if tokens else None,
                    rule_of_4_estimate=chars / 4,
                    rule_of_4_error_pct=(chars / 4 - tokens) / tokens * 100 if tokens else None,
                    usage_input_tokens=usage,
                    usage_text_tokens=usage_text,
                    tiktoken_tokens=tk.get(t.id),
                )
            )
        spread = tokenizer_spread(self._s.texts, self._side_by_side)
        local_diffs = [
            r.usage.input_tokens_local_diff
            for r in ok
            if r.usage.input_tokens_local_diff is not None and r.prompt_id != _BASELINE_ID
        ]
        figures = TokenRatioFigures(
            rows=rows,
            baseline_usage_input_tokens=baseline_usage,
            count_error=self._count_errors.get(provider_id),
            side_by_side=side_by_side(self._s.texts, self._side_by_side),
            spread=spread,
            input_tokens_local_diffs=local_diffs,
            **self._framing_figures(provider_id, baseline_usage, baseline_tokens),
            pieces=[
                TokenPieces(
                    text_id=t.id,
                    tokenizer=label,
                    pieces=by_text[t.id][0],
                    tokens_per_piece=by_text[t.id][1],
                )
                for label, by_text in self._pieces.items()
                for t in self._s.texts
                if t.id in by_text
            ],
        )
        measured_rows = [
            (r, r.chars_per_token, r.rule_of_4_error_pct)
            for r in rows
            if r.tokens and r.chars_per_token is not None and r.rule_of_4_error_pct is not None
        ]
        if not measured_rows:
            return self.answer(
                provider_id,
                model,
                "No token count was available from this provider (no counter, no usage).",
                figures,
                status="failed",
            )
        answer = token_ratio_answer(figures)
        return self.answer(
            provider_id,
            model,
            answer,
            figures,
            status="ok" if len(measured_rows) == len(rows) else "partial",
        )

    def _framing_figures(
        self, provider_id: str, baseline_usage: float | None, baseline_tokens: int
    ) -> dict[str, Any]:
        """The chat framing's figures: from the sent baseline's usage where it was sent,
        else as counted without generating, else why neither measured it."""
        if baseline_usage is not None:
            return {
                "chat_framing_tokens": baseline_usage - baseline_tokens,
                "chat_framing_source": "usage",
            }
        counted = self._framing.get(provider_id, "the provider was not asked")
        if isinstance(counted, str):
            why = counted if self._s.send else f"not sent (send: false), and {counted}"
            return {"chat_framing_missing": why}
        return {"chat_framing_tokens": counted[0], "chat_framing_source": counted[1]}


async def _counted_framing(provider: Provider) -> tuple[int, str] | str:
    """The tokens the provider's chat template adds around the one-character baseline as a
    user message, counted without generating: (tokens, how), or why it could not be."""
    try:
        whole = await provider.count_chat_prompt([{"role": "user", "content": _BASELINE_TEXT}])
        own = await provider.tokenize(_BASELINE_TEXT) if whole is not None else None
    except Exception as exc:  # a failing counter is reported, not fatal
        return f"counting the chat prompt failed: {type(exc).__name__}: {exc}"[:200]
    if whole is None:
        return "the provider cannot count a chat prompt without generating"
    if own is None:
        return "the provider cannot count the text alone"
    return whole.tokens - len(own), whole.source


def _piece_texts(cuts: dict[str, Tokenized]) -> dict[str, tuple[list[str], list[int]]]:
    """Each text's token pieces as display text, with how many tokens each piece is
    (`whole_characters`); texts cut without pieces are left out."""
    return {
        text_id: whole_characters(cut.pieces)
        for text_id, cut in cuts.items()
        if cut.pieces is not None
    }


def whole_characters(pieces: tuple[bytes, ...]) -> tuple[list[str], list[int]]:
    """Token pieces as text a person can read: consecutive tokens that split one character's
    bytes (byte-level BPE on emoji, Japanese) are joined into one piece, with its token count.
    """
    texts: list[str] = []
    counts: list[int] = []
    pending, n = b"", 0
    for piece in pieces:
        pending, n = pending + piece, n + 1
        try:
            pending.decode("utf-8")
        except UnicodeDecodeError:
            if len(pending) < 16:  # a character is at most 4 bytes; 16 is a sequence's worth
                continue
        texts.append(display_piece(pending))
        counts.append(n)
        pending, n = b"", 0
    if pending:
        texts.append(display_piece(pending))
        counts.append(n)
    return texts, counts


def side_by_side(texts: list[Prompt], table: dict[str, dict[str, int]]) -> list[TokenizerCount]:
    """Tokens, chars/token and bytes/token of every text with every tokenizer in `table`."""
    rows: list[TokenizerCount] = []
    for t in texts:
        chars, size = len(t.text), len(t.text.encode("utf-8"))
        for name, by_text in table.items():
            tokens = by_text.get(t.id)
            if tokens is not None:
                rows.append(
                    TokenizerCount(
                        text_id=t.id,
                        tokenizer=name,
                        tokens=tokens,
                        chars_per_token=chars / tokens if tokens > 0 else None,
                        bytes_per_token=size / tokens if tokens > 0 else None,
                    )
                )
    return rows


def tokenizer_spread(
    texts: list[Prompt], table: dict[str, dict[str, int]]
) -> list[TokenizerSpread]:
    """Per text with two or more tokenizers: the fewest tokens against the most."""
    spread: list[TokenizerSpread] = []
    for t in texts:
        counts = {name: n for name, by_text in table.items() if (n := by_text.get(t.id, 0)) > 0}
        if len(counts) < 2:
            continue
        fewest = min(counts, key=lambda name: counts[name])
        most = max(counts, key=lambda name: counts[name])
        spread.append(
            TokenizerSpread(
                text_id=t.id,
                most_efficient=fewest,
                most_efficient_tokens=counts[fewest],
                least_efficient=most,
                least_efficient_tokens=counts[most],
                ratio=counts[most] / counts[fewest],
            )
        )
    return spread
