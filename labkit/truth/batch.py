"""Batch-dependent selection on the truth server: near-ties flipped when many share a batch.

Kernels that are not batch-invariant compute a sequence's logits slightly differently
depending on what else shares its batch, and where the top two candidates are nearly tied
the likeliest token can change (vllm-project/vllm#51187). The truth server mimics that with a
known truth (schedule keys ``batch_flip_*``, off by default; docs/score.md, "The schedule"):
a flipped step is reported as the batch's arithmetic would show it, the two probabilities
swapped, so the reply is still greedy on what it reports. The truth log records the batch
each request saw and the steps flipped (`TruthRequest.batch`, `TruthRequest.flipped_steps`).
"""

from __future__ import annotations

import random
from collections.abc import Sequence

from labkit.truth.schedule import TruthSchedule

__all__ = ["batch_flips", "batch_seen", "flips_on"]


def flips_on(schedule: TruthSchedule) -> bool:
    """Whether the schedule flips near-ties in large batches (only with sampling)."""
    return schedule.sampling and schedule.batch_flip_above > 0


def batch_seen(schedule: TruthSchedule, held: int) -> int:
    """The batch a request read while `held` others are held by the server decodes in:
    itself and the others, at most the schedule's slots (none or 0: no limit)."""
    batch = held + 1
    return min(batch, schedule.slots) if schedule.slots else batch


def batch_flips(
    schedule: TruthSchedule,
    batch: int,
    temperature: float | None,
    steps: Sequence[Sequence[tuple[str, float]]],
    rng: random.Random,
) -> list[int]:
    """The 0-based steps whose choice the batch flips to the second candidate: none unless
    the request decodes greedily (temperature 0) in a batch above ``batch_flip_above``;
    else each near-tie step (top two closer than ``batch_flip_margin``) with probability
    ``batch_flip_p``. `steps`: each step's candidates, likeliest first."""
    if not flips_on(schedule) or batch <= schedule.batch_flip_above or temperature != 0:
        return []
    flipped = []
    for i, candidates in enumerate(steps):
        if len(candidates) < 2 or candidates[0][1] - candidates[1][1] >= schedule.batch_flip_margin:
            continue
        if rng.random() < schedule.batch_flip_p:
            flipped.append(i)
    return flipped
