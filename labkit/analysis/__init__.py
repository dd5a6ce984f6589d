"""Pure functions from records to typed figures: every aggregate labkit shows, computed once.

No pandas and no I/O: each function takes records (or plain numbers) and returns the
figures of `labkit.figures`, which the answers, the run summary, the report and lab.json
render. `labkit.analysis.stats` holds the statistics all of them share: quantiles with
their distribution-free intervals, shares with exact intervals, and how those read.
"""

from __future__ import annotations

from labkit.analysis import stats

__all__ = ["stats"]
