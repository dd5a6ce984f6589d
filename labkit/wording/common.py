"""The words every table and answer shares: a value in ms, a median with its interval,
a table cell, the client-bound mark, and how a group of requests is named."""

from __future__ import annotations

from labkit.analysis.stats import _number, describe, describe_mean
from labkit.figures import Mean, Quantile, RequestStats

__all__ = [
    "CLIENT_BOUND_MARK",
    "RAY_NODE",
    "SHARE_LOST",
    "cell",
    "client_bound_line",
    "group_label",
    "marked",
    "ms",
    "partial_run_sentence",
    "partial_sentence",
    "say",
]


#: How a value the self-check flagged is marked wherever it is shown.
CLIENT_BOUND_MARK = "⚠ client-bound"


def ms(value: float | None, digits: int = 1, signed: bool = False) -> str:
    """`12.3 ms` (`+12.3 ms` when `signed`), or `n/a` for a missing value."""
    if value is None:
        return "n/a"
    return f"{value:{'+' if signed else ''}.{digits}f} ms"


def say(q: Quantile | Mean | None, unit: str = "ms") -> str:
    """A median, percentile or mean with its interval and n (`describe`, `describe_mean`),
    or `n/a`."""
    if q is None:
        return "n/a"
    return describe_mean(q, unit) if isinstance(q, Mean) else describe(q, unit)


def cell(q: Quantile | Mean | None) -> str:
    """A median, percentile or mean in a table cell, where n has its own column:
    `describe`'s rule, short — `412 [398–430]` (the 95% interval in brackets), `412 (no CI:
    n<6)` for a median (or mean) of too few requests, `needs ≥ 299` for a tail percentile of
    too few (never the largest value in its place), `—` for none."""
    if q is None or q.value is None:
        return "—"
    if q.lo is not None and q.hi is not None:
        dash = " to " if q.lo < 0 or q.hi < 0 else "–"  # `-0.70 to -0.48`, not `-0.70–-0.48`
        return f"{_number(q.value)} [{_number(q.lo)}{dash}{_number(q.hi)}]"
    if isinstance(q, Mean):
        return f"{_number(q.value)} (no CI: n<2)"
    if q.q == 0.5:
        return f"{_number(q.value)} (no CI: n<{q.min_n})"
    return f"needs ≥ {q.min_n}"


def marked(text: str, reason: str | None) -> str:
    """`text` with the client-bound mark where `reason` is set (the reason is in the
    report's notes; the mark says where it applies)."""
    return f"{text} [{CLIENT_BOUND_MARK}]" if reason else text


def group_label(s: RequestStats) -> str:
    """`experiment`, `experiment (sdk)` for the SDK path, `(all levels)` where the group
    pools load levels: how every table names a group of the request statistics."""
    name = s.experiment + (f" ({s.client_path})" if s.client_path != "wire" else "")
    return name + (" (all levels)" if s.levels else "")


def client_bound_line(s: RequestStats) -> str:
    """`provider · experiment · <the self-check's reason>` for a flagged group (the run's
    warning and the report's note say the same)."""
    path = f" ({s.client_path})" if s.client_path != "wire" else ""
    return f"{s.provider} · {s.experiment}{path} · {s.client_bound}"  # the reason names levels


#: What died in a level whose Ray actor lost requests (error kind ``lost``).
RAY_NODE = "a Ray node"
#: What a level or run a process died in is missing (`partial_sentence`, `partial_run_sentence`).
SHARE_LOST = "its requests in flight lost, its share of the rest never sent"


def partial_sentence(died: dict[str, list[str]], lost: str) -> str:
    """The answer's sentence for levels something died in mid-level (`died`: what died, "a
    Ray node" or "a worker process", to the titles of its levels; `lost`: what of them is
    missing, in parentheses), with how to finish them; empty for none."""
    said = []
    for what, levels in died.items():
        again = "them" if len(levels) > 1 else "it"
        said.append(
            f"Partial: {what} died mid-level in {', '.join(levels)} ({lost}); "
            f"labkit run --resume runs {again} again."
        )
    return " ".join(said)


def partial_run_sentence(died: list[str], lost: str) -> str:
    """The answer's sentence for an experiment whose run lost a process mid-way (`died`:
    what died, "a worker process", "a Ray node"; `lost`: what is missing, in parentheses),
    with how to finish it (a resume measures what is missing: what the experiment plans is
    missing, or, for a replay, the whole pass again)."""
    return (
        f"Partial: {' and '.join(died)} died mid-run ({lost}); "
        "labkit run --resume measures what is missing."
    )
