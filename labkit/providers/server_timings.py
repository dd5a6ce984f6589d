"""Readers of the timings OpenAI-compatible servers report about themselves.

Each reader fills `ProviderTimings` from one documented shape (Groq, Cerebras, Fireworks,
vLLM, TGI, llama.cpp: docs/providers.md, "Server timings"), converting to milliseconds, and
keeps the object as it arrived in `raw`. `BODY_READERS` maps each chunk key to its reader,
so a parser detects a shape with one dict lookup per key and never scans a chunk. `SERVERS`
names the values of the `server:` hint.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any, Literal, TypeAlias

from labkit.errors import MalformedStream
from labkit.providers._wire import describe, wire_count, wire_number
from labkit.records import ProviderTimings

__all__ = [
    "BODY_READERS",
    "SERVER_BODY_KEYS",
    "Server",
    "keep_raw",
    "read_cerebras",
    "read_fireworks",
    "read_groq_usage",
    "read_llamacpp",
    "read_timing_headers",
    "read_vllm",
]

#: The `server:` hint of an OpenAI-compatible entry: `auto` detects from what arrives.
Server: TypeAlias = Literal[
    "auto", "openai", "groq", "cerebras", "fireworks", "vllm", "tgi", "llamacpp"
]


def _seconds(value: Any, field: str) -> float | None:
    seconds = wire_number(value, field)
    return None if seconds is None else seconds * 1000.0


def _header_number(value: str | None) -> float | None:
    """A header's number, or None when absent or not a number (headers are not the stream:
    a garbled one is dropped, never a reason to fail the request)."""
    if not value:
        return None
    try:
        number = float(value)
    except ValueError:
        return None
    return number if math.isfinite(number) else None


def keep_raw(pt: ProviderTimings, key: str, value: dict[str, Any]) -> None:
    """Keep `value` in `raw`: beside the timing headers (under `key`) when they were read,
    else as `raw` itself (a later chunk's object replaces an earlier one: they are
    cumulative)."""
    raw = pt.raw
    pt.raw = {**raw, key: value} if raw is not None and "headers" in raw else value


def _object(value: Any, field: str) -> dict[str, Any]:
    if type(value) is not dict:
        raise MalformedStream(f"{field} is {describe(value)}, not an object")
    return value


def _split_times(pt: ProviderTimings, obj: dict[str, Any], where: str) -> None:
    """Groq's and Cerebras's four durations in seconds."""
    queue = _seconds(obj.get("queue_time"), f"{where}.queue_time")
    prompt = _seconds(obj.get("prompt_time"), f"{where}.prompt_time")
    completion = _seconds(obj.get("completion_time"), f"{where}.completion_time")
    total = _seconds(obj.get("total_time"), f"{where}.total_time")
    if queue is not None:
        pt.queue_ms = queue
    if prompt is not None:
        pt.prefill_ms = prompt
    if completion is not None:
        pt.decode_ms = completion
    if total is not None:
        pt.server_total_ms = total


def read_groq_usage(pt: ProviderTimings, usage: dict[str, Any]) -> None:
    """Groq's `x_groq.usage` durations (seconds)."""
    if "queue_time" in usage or "total_time" in usage or "prompt_time" in usage:
        _split_times(pt, usage, "x_groq.usage")
        pt.source = "groq"
        keep_raw(pt, "x_groq.usage", usage)


def read_cerebras(pt: ProviderTimings, value: Any) -> None:
    """Cerebras's `time_info` (seconds)."""
    obj = _object(value, "time_info")
    _split_times(pt, obj, "time_info")
    pt.source = "cerebras"
    keep_raw(pt, "time_info", obj)


#: Fireworks' perf_metrics keys (the header names) and the field each fills, in seconds.
_FIREWORKS = {
    "fireworks-server-time-to-first-token": "server_ttft_ms",
    "fireworks-server-processing-time": "server_total_ms",
}


def read_fireworks(pt: ProviderTimings, value: Any) -> None:
    """Fireworks' `perf_metrics` object: the header names as keys, values in seconds (as
    numbers or, like the headers, as strings)."""
    obj = _object(value, "perf_metrics")
    for key, field in _FIREWORKS.items():
        item = obj.get(key)
        seconds = _header_number(item) if type(item) is str else wire_number(item, key)
        if seconds is not None:
            setattr(pt, field, seconds * 1000.0)
    pt.source = "fireworks"
    keep_raw(pt, "perf_metrics", obj)


def read_vllm(pt: ProviderTimings, value: Any) -> None:
    """vLLM's per-request `metrics` (milliseconds, and tokens per second)."""
    obj = _object(value, "metrics")
    queue = wire_number(obj.get("queue_time_ms"), "metrics.queue_time_ms")
    ttft = wire_number(obj.get("time_to_first_token_ms"), "metrics.time_to_first_token_ms")
    generation = wire_number(obj.get("generation_time_ms"), "metrics.generation_time_ms")
    itl = wire_number(obj.get("mean_itl_ms"), "metrics.mean_itl_ms")
    rate = wire_number(obj.get("tokens_per_second"), "metrics.tokens_per_second")
    if queue is None and ttft is None and generation is None:
        return  # some other server's `metrics`: not vLLM's shape
    pt.queue_ms = queue
    pt.server_ttft_ms = ttft
    pt.decode_ms = generation
    pt.decode_ms_per_token = itl
    pt.server_output_tokens_per_s = rate
    pt.source = "vllm"
    keep_raw(pt, "metrics", obj)


def read_llamacpp(pt: ProviderTimings, timings: dict[str, Any]) -> None:
    """llama.cpp's `timings` (milliseconds, counts and rates)."""
    prompt_n = wire_count(timings.get("prompt_n"), "timings.prompt_n")
    cache_n = wire_count(timings.get("cache_n"), "timings.cache_n")
    pt.prefill_ms = wire_number(timings.get("prompt_ms"), "timings.prompt_ms")
    pt.prefill_tokens = prompt_n
    pt.decode_ms = wire_number(timings.get("predicted_ms"), "timings.predicted_ms")
    pt.decode_ms_per_token = wire_number(
        timings.get("predicted_per_token_ms"), "timings.predicted_per_token_ms"
    )
    pt.server_output_tokens_per_s = wire_number(
        timings.get("predicted_per_second"), "timings.predicted_per_second"
    )
    if cache_n is not None:
        pt.cached_tokens = cache_n
    pt.source = "llamacpp"
    pt.raw = timings


#: The chunk keys a server's timings arrive under, and their readers (`x_groq` and
#: `timings` are read by the parser itself: usage and per-token timings live there).
BODY_READERS: dict[str, Callable[[ProviderTimings, Any], None]] = {
    "time_info": read_cerebras,
    "perf_metrics": read_fireworks,
    "metrics": read_vllm,
}

#: The chunk keys each `server:` hint reads (`auto`: all of them).
SERVER_BODY_KEYS: dict[str, tuple[str, ...]] = {
    "auto": tuple(BODY_READERS),
    "cerebras": ("time_info",),
    "fireworks": ("perf_metrics",),
    "vllm": ("metrics",),
}

_TGI_HEADERS = {
    "x-queue-time": "queue_ms",
    "x-inference-time": "inference_ms",
    "x-time-per-token": "decode_ms_per_token",
    "x-total-time": "server_total_ms",
}


def read_timing_headers(pt: ProviderTimings, headers: Mapping[str, str], server: str) -> None:
    """TGI's and Fireworks' timing headers (`server` `auto` reads whichever arrived)."""
    found: dict[str, str] = {}
    if server in ("auto", "tgi"):
        for name, field in _TGI_HEADERS.items():
            ms = _header_number(headers.get(name))
            if ms is not None:
                setattr(pt, field, ms)
                found[name] = headers[name]
        compute = headers.get("x-compute-time")
        if found and compute is not None:
            found["x-compute-time"] = compute
            if pt.server_total_ms is None:
                pt.server_total_ms = _header_number(compute)
        if found:
            pt.source = "tgi"
    if server in ("auto", "fireworks") and not found:
        for name, field in _FIREWORKS.items():
            seconds = _header_number(headers.get(name))
            if seconds is not None:
                setattr(pt, field, seconds * 1000.0)
                found[name] = headers[name]
        if found:
            pt.source = "fireworks"
    if found:
        pt.raw = {"headers": found}
