"""Measure the measurers: a benchmark client's error against the truth server's log.

`labkit.scoring.peers` reads other benchmark clients' result files (GuideLLM, AIPerf, vLLM's
bench, labkit's own runs); `labkit.scoring.imports` turns them into labkit records;
`labkit.scoring.score` matches a client's requests to the truth (`labkit.truth`) and states
its error per request and per metric, with intervals (``labkit score``);
`labkit.scoring.render` writes the score as a table, JSON and a picture.
"""

from __future__ import annotations

from labkit.scoring.peers import ClientRequest, ClientResults, read_results
from labkit.scoring.score import Score, score

__all__ = [
    "ClientRequest",
    "ClientResults",
    "Score",
    "read_results",
    "score",
]
