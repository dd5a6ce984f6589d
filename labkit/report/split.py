"""The report's "whose time is it?" table: each group's `TTFTSplit` (computed once, by
`labkit.analysis.split`, the definition in docs/measurement.md "Attribution"), rendered.

One row per provider × experiment × client path, over the requests that enter statistics:
the mean client TTFT and its parts, which add up to it — labkit's own time inside the clock,
the provider's queue and prefill (and where each came from), network + front end — then
the provider's decode per token and client − provider decode (medians). A term that cannot
be derived says why; a client-bound value is marked.
"""

from __future__ import annotations

from labkit.analysis.split import NEGATIVE_DECODE_GAP
from labkit.figures import RequestStats
from labkit.report.render import Block, Heading, Para, Table
from labkit.report.stats import where
from labkit.wording import CLIENT_BOUND_MARK, cell, marked

__all__ = ["NOT_DERIVABLE", "NOT_REPORTED", "split_section"]

NOT_REPORTED = "not reported"
NOT_DERIVABLE = "not derivable"

_LABELS = [
    "provider",
    "experiment",
    "n",
    "client TTFT (mean)",
    "= labkit's own",
    "+ provider queue",
    "+ provider prefill",
    "+ network + front end",
    "decode ms/tok: provider",
    "client − provider",
]


def _source(source: str | None) -> str:
    return f" [{source}]" if source else ""


def split_section(stats: list[RequestStats]) -> list[Block]:
    """The split table, and the terms each provider could not have derived."""
    blocks: list[Block] = [
        Heading("Provider vs client: whose time is it?"),
        Para(
            "Each group's mean client TTFT split into parts that add up to it (ms, each with "
            "its 95% interval in brackets), over the successful, non-warm-up requests that had "
            "every part; one row per experiment and client path. labkit's own is its time "
            "inside the clock (client.send_ms and the first token's stamp lateness); the queue "
            "is the provider's own, or 0 by construction on a managed server within its "
            "slots; the prefill is the provider's prefill, else its own TTFT; network + front "
            "end is the rest (the same definition as the attribution answer and its chart). "
            "Where the provider reports no prefill, provider and network share one cell. "
            "Decode per token: medians per request. "
            f"{CLIENT_BOUND_MARK}: the value holds labkit's own delay.",
            "note",
        ),
    ]
    if not stats:
        blocks.append(Para("No records: no split.", "warn"))
        return blocks
    rows = []
    notes: list[str] = []
    faster: list[str] = []
    for s in stats:
        split = s.ttft_split
        queue = (
            cell(split.provider_queue_ms) + _source(split.queue_source)
            if split.provider_queue_ms
            else NOT_REPORTED
        )
        prefill = (
            cell(split.provider_prefill_ms) + _source(split.prefill_source)
            if split.provider_prefill_ms
            else NOT_REPORTED
        )
        if split.network_front_end_ms:
            rest = marked(cell(split.network_front_end_ms), split.client_bound)
        elif split.unsplit_ms:
            rest = marked(cell(split.unsplit_ms), split.client_bound) + " (with the provider's)"
        else:
            rest = NOT_DERIVABLE
        has_server_decode = s.provider_decode_ms_per_token.n > 0
        rows.append(
            [
                s.provider,
                where(s),
                str(s.n),
                marked(cell(split.ttft_ms), split.client_bound),
                cell(split.labkit_ms) if split.labkit_ms else NOT_REPORTED,
                queue,
                prefill,
                rest,
                cell(s.provider_decode_ms_per_token) if has_server_decode else NOT_REPORTED,
                marked(cell(s.decode_gap_ms_per_token), s.decode_gap_client_bound)
                if s.decode_gap_ms_per_token.n
                else NOT_DERIVABLE,
            ]
        )
        if split.not_derived and s.n:
            notes.append(f"{s.provider} · {where(s)}: " + "; ".join(split.not_derived) + ".")
        if s.decode_gap_client_bound:
            faster.append(f"{s.provider} · {where(s)}")
    blocks.append(Table(_LABELS, rows, {2}))
    if faster:
        notes.append(
            f"Client − provider decode below 0 ({', '.join(faster)}): {NEGATIVE_DECODE_GAP}."
        )
    if notes:
        blocks.append(Para(" ".join(notes), "note"))
    return blocks
