"""Measure the measurers: a server that knows the truth, and a client's error against it.

`labkit.truth.server` serves scripted LLM API streams (``labkit fake-server --truth LOG``)
and logs when each event truly left; `labkit.truth.log` reads that log; `labkit.truth.peers`
reads other benchmark clients' result files (GuideLLM, AIPerf, vLLM's bench, labkit's own
runs); `labkit.truth.score` matches a client's requests to the truth and states its error
per request and per metric, with intervals (``labkit score``).
"""

from __future__ import annotations

from labkit.truth.log import TruthLog, TruthRequest, read_truth_log
from labkit.truth.peers import ClientRequest, ClientResults, read_results
from labkit.truth.process import TruthServer
from labkit.truth.schedule import TruthSchedule
from labkit.truth.score import Score, score

__all__ = [
    "ClientRequest",
    "ClientResults",
    "Score",
    "TruthLog",
    "TruthRequest",
    "TruthSchedule",
    "TruthServer",
    "read_results",
    "read_truth_log",
    "score",
]
