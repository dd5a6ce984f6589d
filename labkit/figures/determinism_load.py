"""`determinism_load`: per concurrency level, whether identical requests got identical replies."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from labkit.figures.base import _Figures, register_figures
from labkit.figures.next_token import Divergence, TokenChoice
from labkit.figures.slo import _ExperimentFigures

__all__ = ["DeterminismLoadFigures", "DeterminismLoadLevel", "NarrowestStep"]


class NarrowestStep(_Figures):
    """The step of the shared path where the top two candidates were closest."""

    token: int = Field(description="1-based position of the output token.")
    first: TokenChoice
    second: TokenChoice


class DeterminismLoadLevel(_Figures):
    """One concurrency level: its replies compared token by token, with the server it met."""

    concurrency: int
    n: int = Field(description="Successful replies compared.")
    failed: int = 0
    identical: bool | None = Field(
        default=None, description="Whether every reply's text was the same (None: under 2)."
    )
    distinct_outputs: int = Field(description="Distinct output texts among the replies.")
    first_different_token: int | None = Field(
        default=None,
        description="1-based position of the first token where a reply differed from the "
        "first reply (counted in `tokens_from`); None: no token differed.",
    )
    tokens_from: str = Field(
        description="Whose tokens were compared: the server's own (its logprob steps), "
        "`tiktoken:cl100k_base` as a common ruler, or `characters`."
    )
    divergence: Divergence | None = Field(
        default=None,
        description="With logprobs: the branches taken at the first different token, the "
        "first reply's candidates there and their top-two margin (`labkit.analysis.next_token`).",
    )
    narrowest: NarrowestStep | None = Field(
        default=None,
        description="With logprobs: the closest top-two call of the first reply before any "
        "divergence (the whole reply when none).",
    )
    prob_drift: float | None = Field(
        default=None,
        description="With logprobs: the largest difference between two replies in the "
        "probability of the same token at the same step, over the steps they shared.",
    )
    greedy: bool | None = Field(
        default=None,
        description="At temperature 0 with logprobs: whether every reply took its top "
        "candidate at every step (`labkit.analysis.next_token`).",
    )
    same_as_first_level: int | None = Field(
        default=None,
        description="Replies whose text was the first level's first reply (None: the first "
        "level itself, or no reply to compare).",
    )
    first_level_different_token: int | None = Field(
        default=None,
        description="1-based position where this level's first reply first differed from the "
        "first level's first reply (None: the same tokens, or nothing to compare).",
    )
    first_level_drift: float | None = Field(
        default=None,
        description="With logprobs: the largest difference in the probability of the same "
        "token at the same step between this level's first reply and the first level's, "
        "over the steps they shared.",
    )
    peak_in_flight: int | None = Field(
        default=None,
        description="Most of the level's requests in flight at once, from their client "
        "start and end times (None: times from more than one host, or missing).",
    )
    cached_prompts: int = Field(
        default=0, description="Replies whose prompt the server served partly from its cache."
    )
    system_fingerprints: list[str] = Field(default_factory=list)
    server_builds: list[str] = Field(default_factory=list)
    decode_batch: float | None = Field(
        default=None,
        description="Mean sequences the server decoded per batch during the level, from its "
        "own counters (llama-server /metrics: the change of n_busy_slots_per_decode × "
        "n_decode_total over the change of n_decode_total); None: not reported.",
    )
    outputs: list[list[str]] = Field(
        default_factory=list,
        description="Each reply's compared tokens as texts, in send order.",
    )


@register_figures
class DeterminismLoadFigures(_ExperimentFigures):
    """`determinism_load`: a row per concurrency level, in the order they ran, and what the
    server said about how it batches."""

    kind: Literal["determinism_load"] = "determinism_load"
    params: dict[str, Any] = Field(default_factory=dict)
    top_k: int | None = Field(default=None, description="Candidates asked per step (None: off).")
    inspected: bool = Field(default=False, description="Whether any reply carried logprobs.")
    not_inspected_because: str | None = None
    levels: list[DeterminismLoadLevel] = Field(default_factory=list)
    server_slots: int | None = Field(
        default=None,
        description="Sequences the server decodes in one batch, where it reports them "
        "(llama-server's /props `total_slots`); None: not reported.",
    )
    determinism_mode: str | None = Field(
        default=None,
        description="The server's batch-invariant or deterministic mode, where it reports "
        "one; None: not reported.",
    )
    server_build: str | None = Field(
        default=None,
        description="The server's build as it describes itself (llama-server /props "
        "`build_info`); None: not reported.",
    )
    batch_changed_selection: bool | None = Field(
        default=None,
        description="Whether sharing a batch changed the selected tokens: True when a level "
        "whose requests could share a batch gave replies that differed (among themselves, or "
        "from the first level's) while the replies sent one at a time were identical; False "
        "when every level's replies were that one reply and some level shared a batch; None: "
        "not determined (no level one at a time, none shared, or the replies sent one at a "
        "time already differed).",
    )
