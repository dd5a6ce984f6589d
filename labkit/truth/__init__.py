"""Measure the measurers: a server that knows the truth, and a client's error against it.

`labkit.truth.server` serves scripted LLM API streams (``labkit fake-server --truth LOG``)
and logs when each event truly left; `labkit.truth.log` reads that log; `labkit.truth.peers`
reads other benchmark clients' result files (GuideLLM, AIPerf, vLLM's bench, labkit's own
runs); `labkit.truth.score` matches a client's requests to the truth and states its error
per request and per metric, with intervals (``labkit score``).
"""
