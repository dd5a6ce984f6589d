"""The answers' words: the one place where sentences are composed from figures.

Each answer leads with ONE sentence — the number, its interval, what it means (about 35 words
at most) — then at most three short sentences; every other number lives in the report's tables.
Experiments' `analyze` compute figures and call the function of their kind, in its own module
here (`labkit.wording.single`); nothing else composes an answer. What kinds share lives beside
them and is exported from here: `common` (a value, a median, a table cell, the client-bound
mark), `slo` (any experiment's SLOs) and `levels` (load levels). A median or percentile is
always said through `labkit.analysis.stats.describe` (its interval and n, or why there is
none), and a figure the self-check marked client-bound is said to be.
"""

from __future__ import annotations

from labkit.wording.common import (
    CLIENT_BOUND_MARK,
    cell,
    client_bound_line,
    group_label,
    marked,
    ms,
    say,
)
from labkit.wording.levels import cache_sentence, goodput_sentence, server_queue_sentence
from labkit.wording.slo import goodput_words, slo_sentence

__all__ = [
    "CLIENT_BOUND_MARK",
    "cache_sentence",
    "cell",
    "client_bound_line",
    "goodput_sentence",
    "goodput_words",
    "group_label",
    "marked",
    "ms",
    "say",
    "server_queue_sentence",
    "slo_sentence",
]
