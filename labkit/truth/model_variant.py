"""A different model behind one name: what the truth server serves when a schedule says it is
another model (or the same model on another server) under the model name it was asked for.

Three optional schedule keys, whose defaults serve the truth server's one model as before:
``tokenizer: thirds`` (another tokenizer's counts, `thirds_count`), ``model_salt: N`` and
``logit_noise: S`` (another model's, or another server's, next-token numbers,
`model_distribution`); docs/score.md, "The schedule". The stop mix needs no key of its own:
``tokens`` (how long a reply runs before it stops on its own) is another model's habit as
much as its length. `variant_label` names what a schedule serves, as the truth log records
it (`TruthRequest.model_variant`).
"""

from __future__ import annotations

import random
import re
from collections.abc import Callable
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    from labkit.truth.schedule import TruthSchedule

__all__ = ["Tokenizer", "model_distribution", "prompt_count", "thirds_count", "variant_label"]

#: The tokenizers a truth server can count prompts with.
Tokenizer = Literal["pieces", "thirds"]

_RUN = re.compile(r"\S+")

#: A candidate list: (token, logit) pairs, likeliest first.
Candidates = list[tuple[str, float]]


def thirds_count(text: str) -> int:
    """The `thirds` tokenizer's count: each run of non-space characters in pieces of at most
    three characters (a run of 1–3 is one token, 4–6 two, …)."""
    return sum((len(run) + 2) // 3 for run in _RUN.findall(text))


def prompt_count(text: str, schedule: TruthSchedule, pieces_count: Callable[[str], int]) -> int:
    """A prompt's token count by the schedule's tokenizer (`pieces_count`: the server's own)."""
    if schedule.tokenizer == "thirds":
        return thirds_count(text)
    return pieces_count(text)


def model_distribution(
    prompt_key: int,
    step: int,
    schedule: TruthSchedule,
    table: Callable[[int, int, int], Candidates],
) -> Candidates:
    """The next-token candidates at `step` of a prompt by the model the schedule serves:
    `table` (the truth server's model) keyed by the prompt, or by another model's key where
    ``model_salt`` is set (the same candidates' vocabulary, other words on top and other
    probabilities), each logit moved by a seeded Gaussian of standard deviation
    ``logit_noise``, fixed per prompt and step (the same model's numbers from another
    server's kernels)."""
    key = (
        prompt_key
        if not schedule.model_salt
        else (prompt_key ^ (schedule.model_salt * 2_654_435_761)) & 0xFFFFFFFF
    )
    candidates = table(key, step, schedule.candidates)
    if schedule.logit_noise <= 0:
        return candidates
    draw = random.Random(f"noise-{prompt_key}-{step}")
    moved = [(word, logit + draw.gauss(0.0, schedule.logit_noise)) for word, logit in candidates]
    return sorted(moved, key=lambda wl: -wl[1])


def variant_label(schedule: TruthSchedule) -> str | None:
    """What the schedule serves, in words (None: the truth server's own model, as is)."""
    parts = []
    if schedule.tokenizer != "pieces":
        parts.append(f"tokenizer={schedule.tokenizer}")
    if schedule.model_salt:
        parts.append(f"model_salt={schedule.model_salt}")
    if schedule.logit_noise > 0:
        parts.append(f"logit_noise={schedule.logit_noise:g}")
    return ", ".join(parts) or None
