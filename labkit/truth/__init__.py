"""A server that knows the truth: scripted LLM API streams, and when each event truly left.

`labkit.truth.server` serves scripted streams (``labkit fake-server --truth LOG``) and logs
when each event truly left; `labkit.truth.schedule` plans them; `labkit.truth.log` reads the
log; `labkit.truth.process` runs the server in its own process. Grading a client against
it is `labkit.scoring`'s work (``labkit score``).
"""

from __future__ import annotations

from labkit.truth.log import TruthLog, TruthRequest, read_truth_log
from labkit.truth.process import TruthServer
from labkit.truth.schedule import TruthSchedule

__all__ = [
    "TruthLog",
    "TruthRequest",
    "TruthSchedule",
    "TruthServer",
    "read_truth_log",
]
