"""`vantage`'s answer: did the provider's share stay put while the network's moved?"""

from __future__ import annotations

from labkit.figures.stats import Mean
from labkit.figures.vantage import VantageFigures, VantageShift
from labkit.wording.common import cell

__all__ = ["proof_sentence", "vantage_answer"]


def _signed(m: Mean | None) -> str:
    """`+40.2 ms [38.9 to 41.5]`: a paired difference with its 95% interval."""
    if m is None or m.value is None:
        return "n/a"
    if m.lo is None or m.hi is None:
        return f"{m.value:+.1f} ms (no interval: n<2)"
    return f"{m.value:+.1f} ms [{m.lo:+.1f} to {m.hi:+.1f}]"


def _shift(s: VantageShift) -> str:
    provider = (
        "stayed put" if s.provider_unchanged else "moved" if s.provider_unchanged is False else "?"
    )
    network = (
        "as configured"
        if s.network_matches
        else "not as configured"
        if s.network_matches is False
        else "not derivable"
    )
    return (
        f"{s.name} against {s.reference} ({s.configured_ms:+.0f} ms configured, {s.pairs} "
        f"pairs): the provider's share {provider} ({_signed(s.provider_ms)}), the network's "
        f"and front end's moved {_signed(s.network_ms)} ({network})"
        + (
            f"; the routes truly added {_signed(s.route_ms)}, by the relay's own account."
            if s.route_ms is not None and s.route_ms.value is not None
            else "."
        )
    )


def proof_sentence(f: VantageFigures) -> str:
    """One sentence another answer can cite: whether the split was proven by vantages."""
    if f.proven is None:
        return "The split could not be checked from two vantages (see the vantage answer)."
    if f.proven:
        return (
            "The split is proven by a vantage run: from routes "
            + ", ".join(f"{s.configured_ms:+.0f} ms" for s in f.shifts)
            + " apart the provider's share stayed put within its interval while the "
            "network's moved by the added delay."
        )
    return (
        "A vantage run did not confirm the split: the provider's share moved, or the "
        "network's did not move by the added delay (see the vantage answer)."
    )


def vantage_answer(f: VantageFigures) -> str:
    """The lead sentence (proven or not), then each shift, then each vantage's shares."""
    if f.not_derived:
        return "Whose time could not be proven: " + "; ".join(f.not_derived) + "."
    parts = [proof_sentence(f)]
    parts += [_shift(s) for s in f.shifts]
    parts.append(
        "Per vantage, provider / network and front end (mean ms [95% CI]): "
        + "; ".join(f"{v.name} {cell(v.provider_ms)} / {cell(v.network_ms)}" for v in f.vantages)
        + "."
    )
    return " ".join(parts)
