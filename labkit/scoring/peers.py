"""Benchmark clients' result files, read into one shape: `ClientRequest` per request.

Readers (`READERS`, chosen by `detect` or by name): labkit's own run folder, GuideLLM's
benchmarks JSON (``guidellm benchmark run --outputs benchmarks.json``), AIPerf's profile
export (``profile_export.jsonl``) and ``vllm bench serve --save-result --save-detailed``.
Each keeps what the client itself measured, in its own definitions, and None where it did
not measure a thing; `labkit.scoring.score` compares them with the truth, and
`labkit.scoring.imports` turns them into labkit records.

Clocks: labkit and vLLM's bench stamp on the host's monotonic clock (``perf_counter``), the
truth server's clock; GuideLLM and AIPerf stamp request starts on the wall clock
(``time.time``), which the truth log's anchor converts.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from labkit.errors import ConfigError

__all__ = ["READERS", "ClientRequest", "ClientResults", "detect", "read_results"]


@dataclass
class ClientRequest:
    """One request as a client reported it (ms; None: the client did not measure it)."""

    index: int
    ok: bool = True
    request_id: str | None = None  # an id the truth log may hold (response id or x-request-id)
    start_mono_ns: float | None = None  # the request's start on the monotonic clock
    start_wall_ns: float | None = None  # ... or on the wall clock
    ttft_ms: float | None = None
    itl_ms: float | None = None  # the client's mean inter-token latency for this request
    decode_ms: float | None = None  # first output to last output
    e2e_ms: float | None = None
    output_tokens: float | None = None
    input_tokens: float | None = None
    event_stamps_ns: list[int] | None = None  # each output event's stamp (monotonic)
    error: str | None = None


@dataclass
class ClientResults:
    """A client's results file: which tool (and version), and its requests."""

    tool: str
    version: str | None
    path: Path
    requests: list[ClientRequest] = field(default_factory=list)
    #: The metrics this tool does not measure at all (names of `ClientRequest` fields).
    unmeasured: tuple[str, ...] = ()

    @property
    def label(self) -> str:
        """``tool version``."""
        return f"{self.tool} {self.version}" if self.version else self.tool


def _ms(seconds: Any) -> float | None:
    return None if seconds is None else float(seconds) * 1000.0


def _num(x: Any) -> float | None:
    return None if x is None else float(x)


# -- labkit ---------------------------------------------------------------------------------


def read_labkit(path: Path) -> ClientResults:
    """A labkit run folder (or its records.jsonl): measured (non-warm-up) records."""
    from labkit.records import RequestRecord

    records_path = path / "records.jsonl" if path.is_dir() else path
    out = ClientResults("labkit", None, path)
    for line in records_path.read_text(encoding="utf-8").splitlines():
        if not line.strip():
            continue
        rec = RequestRecord.model_validate_json(line)
        if rec.warmup:
            continue
        c = rec.client
        t0 = rec.t_start_mono_ns
        stamps = [t0 + round(o * 1e6) for o in c.event_offsets_ms] if t0 is not None else None
        decode = (
            c.last_token_ms - c.ttft_ms
            if c.last_token_ms is not None and c.ttft_ms is not None
            else None
        )
        out.requests.append(
            ClientRequest(
                index=len(out.requests),
                ok=rec.error is None,
                request_id=rec.response_id or rec.request_id,
                start_mono_ns=t0,
                ttft_ms=c.ttft_ms,
                itl_ms=c.decode_ms_per_token,
                decode_ms=decode,
                e2e_ms=c.e2e_ms,
                output_tokens=rec.usage.output_tokens,
                input_tokens=rec.usage.input_tokens,
                event_stamps_ns=stamps or None,
                error=rec.error.message if rec.error else None,
            )
        )
        if out.version is None:
            out.version = _labkit_version()
    return out


def _labkit_version() -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("labkit")
    except PackageNotFoundError:
        return None


# -- vLLM's bench ---------------------------------------------------------------------------


def read_vllm(path: Path) -> ClientResults:
    """``vllm bench serve --save-result --save-detailed``'s JSON: per-request lists.

    ``start_times`` are ``time.perf_counter()`` seconds (the monotonic clock), ``ttfts``
    seconds, ``itls`` the gaps between content chunks (seconds), ``output_lens`` the
    server's usage count where it sent one. Its ``latencies`` end at the last content chunk,
    not at the end of the response, so they are its decode's end (TTFT + the gaps), and its
    end-to-end is not measured. It keeps no request ids (matched by time).
    """
    doc = _json(path)
    starts = doc.get("start_times")
    if not isinstance(starts, list):
        raise ConfigError(
            f"{path}: no per-request lists (start_times): run vllm bench serve with "
            "--save-result --save-detailed"
        )
    out = ClientResults(
        "vllm bench serve", doc.get("vllm_version") or doc.get("version"), path, unmeasured=()
    )
    n = len(starts)

    def col(name: str) -> list[Any]:
        values = doc.get(name)
        return values if isinstance(values, list) and len(values) == n else [None] * n

    ttfts, itls = col("ttfts"), col("itls")
    outs, ins, errors = col("output_lens"), col("input_lens"), col("errors")
    for i in range(n):
        gaps = itls[i] or []
        ok = not errors[i]
        out.requests.append(
            ClientRequest(
                index=i,
                ok=ok,
                start_mono_ns=float(starts[i]) * 1e9,
                ttft_ms=_ms(ttfts[i]) if ok else None,
                itl_ms=1000.0 * sum(gaps) / len(gaps) if gaps else None,
                decode_ms=1000.0 * sum(gaps) if ok else None,
                e2e_ms=None,  # `latencies` end at the last token (see the docstring)
                output_tokens=_num(outs[i]),
                input_tokens=_num(ins[i]),
                error=errors[i] or None,
            )
        )
    return out


# -- GuideLLM ---------------------------------------------------------------------------------


def _guidellm_requests(doc: dict[str, Any]) -> Iterator[tuple[bool, dict[str, Any]]]:
    for bench in doc.get("benchmarks") or []:
        requests = bench.get("requests") or {}
        for status, ok in (("successful", True), ("errored", False), ("incomplete", False)):
            for req in requests.get(status) or []:
                yield ok, req


def read_guidellm(path: Path) -> ClientResults:
    """GuideLLM's benchmarks JSON (``--outputs benchmarks.json``): every benchmark's
    successful, errored and incomplete requests with their own timings (wall clock)."""
    doc = _json(path)
    if "benchmarks" not in doc:
        raise ConfigError(f"{path}: not a GuideLLM benchmarks file (no `benchmarks`)")
    version = (doc.get("metadata") or {}).get("guidellm_version")
    out = ClientResults("guidellm", version, path)
    for ok, req in _guidellm_requests(doc):
        info = req.get("info") or req.get("request_info") or {}
        timings = info.get("timings") or {}
        start = timings.get("request_start") or req.get("request_start_time")
        ttft = req.get("time_to_first_token_ms")
        itl = req.get("inter_token_latency_ms")
        e2e = req.get("request_latency")
        out_tokens = req.get("output_tokens")
        first, last = timings.get("first_token_iteration"), timings.get("last_token_iteration")
        decode = _ms(float(last) - float(first)) if first is not None and last is not None else None
        out.requests.append(
            ClientRequest(
                index=len(out.requests),
                ok=ok,
                request_id=req.get("response_id") or req.get("request_id"),
                start_wall_ns=float(start) * 1e9 if start is not None else None,
                ttft_ms=_num(ttft),
                itl_ms=_num(itl),
                decode_ms=decode,
                e2e_ms=_ms(e2e),
                output_tokens=_num(out_tokens),
                input_tokens=_num(req.get("prompt_tokens")),
                error=info.get("error") if not ok else None,
            )
        )
    return out


# -- AIPerf -----------------------------------------------------------------------------------


def _metric(metrics: dict[str, Any], name: str) -> float | None:
    m = metrics.get(name)
    if isinstance(m, dict):
        value = m.get("value")
        unit = str(m.get("unit") or "ms")
        if value is None:
            return None
        if isinstance(value, list):
            return None
        scale = {"ns": 1e-6, "us": 1e-3, "ms": 1.0, "s": 1000.0, "sec": 1000.0}.get(unit, 1.0)
        return float(value) * scale if unit in ("ns", "us", "ms", "s", "sec") else float(value)
    return _num(m) if isinstance(m, int | float) else None


def read_aiperf(path: Path) -> ClientResults:
    """AIPerf's ``profile_export.jsonl``: one record per request, its metadata (the
    ``x_request_id`` it sent, the wall-clock start in ns) and its metrics with units."""
    out = ClientResults("aiperf", _aiperf_version(path), path)
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
        except json.JSONDecodeError as exc:
            raise ConfigError(f"{path} line {number} is not JSON: {exc.msg}") from None
        meta = rec.get("metadata") or {}
        metrics = rec.get("metrics") or {}
        ttft = _metric(metrics, "time_to_first_token")
        e2e = _metric(metrics, "request_latency")
        decode = _metric(metrics, "decode_duration")
        error = rec.get("error")
        out.requests.append(
            ClientRequest(
                index=len(out.requests),
                ok=not error,
                request_id=meta.get("x_request_id") or meta.get("x_correlation_id"),
                start_wall_ns=_num(meta.get("request_start_ns")),
                ttft_ms=ttft,
                itl_ms=_metric(metrics, "inter_token_latency"),
                decode_ms=decode,
                e2e_ms=e2e,
                output_tokens=_metric(metrics, "output_sequence_length")
                or _metric(metrics, "output_token_count"),
                input_tokens=_metric(metrics, "input_sequence_length"),
                error=json.dumps(error) if error else None,
            )
        )
    return out


def _aiperf_version(path: Path) -> str | None:
    """The version AIPerf wrote in the aggregate export beside the per-request one."""
    summary = path.with_name(path.stem + "_aiperf.json")
    if not summary.is_file():
        return None
    try:
        version = json.loads(summary.read_text(encoding="utf-8")).get("aiperf_version")
    except (OSError, ValueError, AttributeError):
        return None
    return str(version) if version else None


def _json(path: Path) -> dict[str, Any]:
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ConfigError(f"cannot read {path}: {exc.strerror or exc}") from None
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{path} is not JSON: {exc.msg}") from None
    if not isinstance(doc, dict):
        raise ConfigError(f"{path} is not a JSON object")
    return doc


#: The readers by name.
READERS: dict[str, Callable[[Path], ClientResults]] = {
    "labkit": read_labkit,
    "guidellm": read_guidellm,
    "aiperf": read_aiperf,
    "vllm": read_vllm,
}


def detect(path: Path) -> str:
    """Which reader a results file needs, from its shape; ConfigError when none fits."""
    if path.is_dir() or path.name == "records.jsonl":
        return "labkit"
    if path.suffix == ".jsonl":
        return "aiperf"
    doc = _json(path)
    if "benchmarks" in doc:
        return "guidellm"
    if "start_times" in doc or "ttfts" in doc:
        return "vllm"
    raise ConfigError(
        f"cannot tell which client wrote {path}; say it with --format ({', '.join(READERS)})"
    )


def read_results(path: Path | str, fmt: str | None = None) -> ClientResults:
    """Read a client's results with the reader `fmt` (None: `detect`)."""
    path = Path(path)
    if not path.exists():
        raise ConfigError(f"{path}: no such file or folder")
    name = fmt or detect(path)
    if name not in READERS:
        raise ConfigError(f"unknown results format {name!r}; known: {', '.join(READERS)}")
    try:
        return READERS[name](path)
    except OSError as exc:
        raise ConfigError(f"cannot read {path} as {name} results: {exc.strerror or exc}") from None
    except (KeyError, TypeError, ValueError) as exc:
        raise ConfigError(f"{path} does not read as {name} results: {exc}") from None
