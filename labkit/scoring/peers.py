"""Benchmark clients' result files, read into one shape: `ClientRequest` per request.

Readers (`READERS`, chosen by `detect` or by name): labkit's own run folder, GuideLLM's
benchmarks JSON, AIPerf's profile export and ``vllm bench serve``'s detailed result. Each
keeps what the client itself measured, in its own definitions, and None where it did not
measure a thing; `labkit.scoring.score` compares them with the truth, and
`labkit.scoring.imports` turns them into labkit records. A results file comes from another
program, so every value is checked where it is read; anything wrong is one `ConfigError`
line. Clocks, files and limits: docs/score.md, "What each reader takes" and "Peers' results
as labkit runs".
"""

from __future__ import annotations

import contextlib
import json
import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from labkit.errors import ConfigError
from labkit.jsonlines import iter_lines, loads_strict

__all__ = [
    "MAX_DOCUMENT_BYTES",
    "MAX_LINE_BYTES",
    "READERS",
    "ClientRequest",
    "ClientResults",
    "detect",
    "read_results",
    "stream_results",
]

#: The largest single-document results file read (GuideLLM, vLLM): json holds it whole,
#: at about 6 times its size in memory.
MAX_DOCUMENT_BYTES = 128 * 1024 * 1024
#: The longest line of a JSONL results file (AIPerf, labkit).
MAX_LINE_BYTES = 16 * 1024 * 1024
#: The longest text (an id, an error message) kept from a results file.
_MAX_TEXT = 300
#: The latest wall-clock start accepted (9999-12-31, the last second a datetime holds).
_MAX_WALL_S = 253_402_300_799.0


@dataclass(slots=True)
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


#: A reader: the file's header (tool, version; no requests) and its requests, one at a time.
Reader = Callable[[Path], tuple[ClientResults, Iterator[ClientRequest]]]


# -- values -----------------------------------------------------------------------------------


def _kind(value: Any) -> str:
    return {dict: "an object", list: "a list", str: "text", bool: "true/false"}.get(
        type(value), "null" if value is None else "a number"
    )


def _object(value: Any, where: str) -> dict[str, Any]:
    """`value` as an object (null: an empty one)."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ConfigError(f"{where}: expected an object, got {_kind(value)}")
    return value


def _list(value: Any, where: str) -> list[Any]:
    """`value` as a list (null: an empty one)."""
    if value is None:
        return []
    if not isinstance(value, list):
        raise ConfigError(f"{where}: expected a list, got {_kind(value)}")
    return value


def _number(value: Any, where: str, scale: float = 1.0) -> float | None:
    """`value` × `scale` as a finite number ≥ 0 (null: None)."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ConfigError(f"{where}: expected a number, got {_kind(value)}")
    try:
        number = float(value) * scale
    except OverflowError:
        number = math.inf
    if not math.isfinite(number):
        raise ConfigError(f"{where}: {_kind(value)} out of range")
    if number < 0:
        raise ConfigError(f"{where}: negative ({value:.6g}); a time or count is never below 0")
    return number


def _wall_start_ns(value: Any, where: str, scale_to_s: float) -> float | None:
    seconds = _number(value, where, scale_to_s)
    if seconds is not None and seconds > _MAX_WALL_S:
        raise ConfigError(f"{where}: {seconds:.6g} s is no wall-clock time (after year 9999)")
    return None if seconds is None else seconds * 1e9


def _text(value: Any, where: str) -> str | None:
    """`value` as a short text (a number as its digits; empty and null: None)."""
    if value is None or value == "":
        return None
    if isinstance(value, str):
        return value[:_MAX_TEXT]
    if isinstance(value, int | float) and not isinstance(value, bool):
        return str(value)
    raise ConfigError(f"{where}: expected text, got {_kind(value)}")


def _error_text(value: Any) -> str | None:
    """A client's error, whatever its shape, as a short text (None: no error)."""
    if value is None or value is False or value == "" or value == {}:
        return None
    text = value if isinstance(value, str) else json.dumps(value)
    return text[:_MAX_TEXT]


# -- files ------------------------------------------------------------------------------------


def _document(path: Path) -> dict[str, Any]:
    """A single-document results file, size-bounded, as a JSON object."""
    try:
        with path.open("rb") as f:
            data = f.read(MAX_DOCUMENT_BYTES + 1)
    except OSError as exc:
        raise ConfigError(f"cannot read {path}: {exc.strerror or exc}") from None
    if len(data) > MAX_DOCUMENT_BYTES:
        raise ConfigError(
            f"{path}: larger than {MAX_DOCUMENT_BYTES // 2**20} MiB; a single JSON document "
            "is read whole, so labkit refuses one this large"
        )
    doc = loads_strict(_utf8(data, path), str(path), document=True)
    if not isinstance(doc, dict):
        raise ConfigError(f"{path}: expected a JSON object, got {_kind(doc)}")
    return doc


def _utf8(data: bytes, path: Path, first_line: int = 1) -> str:
    """`data` (from line `first_line` of `path` on) as text; one line naming the first byte
    that is not UTF-8 and its line otherwise."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = first_line + data.count(b"\n", 0, exc.start)
        raise ConfigError(f"{path}:{line}: not UTF-8 text (byte 0x{data[exc.start]:02x})") from None


# -- labkit ---------------------------------------------------------------------------------


def read_labkit(path: Path) -> tuple[ClientResults, Iterator[ClientRequest]]:
    """A labkit run folder (or its records.jsonl): measured (non-warm-up) records."""
    records_path = path / "records.jsonl" if path.is_dir() else path
    out = ClientResults("labkit", _labkit_version(), path)
    return out, _labkit_requests(records_path)


def _labkit_requests(records_path: Path) -> Iterator[ClientRequest]:
    from pydantic import ValidationError

    from labkit.records import RequestRecord

    index = 0
    lines = iter_lines(records_path, "labkit records file", max_line_bytes=MAX_LINE_BYTES)
    with contextlib.closing(lines):  # closed at once when a bad line stops the reading
        for line in lines:
            where = f"{records_path}:{line.number}"
            try:
                rec = RequestRecord.model_validate_json(line.data)
            except ValidationError as exc:
                first = exc.errors()[0]
                loc = ".".join(str(p) for p in first["loc"]) or "record"
                raise ConfigError(f"{where}: not a labkit record ({loc}: {first['msg']})") from None
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
            yield ClientRequest(
                index=index,
                ok=rec.error is None,
                request_id=rec.response_id or rec.request_id,
                start_mono_ns=t0,
                ttft_ms=_number(c.ttft_ms, f"{where} client.ttft_ms"),
                itl_ms=_number(c.decode_ms_per_token, f"{where} client.decode_ms_per_token"),
                decode_ms=_number(decode, f"{where} decode (client.last_token_ms - ttft_ms)"),
                e2e_ms=_number(c.e2e_ms, f"{where} client.e2e_ms"),
                output_tokens=_number(rec.usage.output_tokens, f"{where} usage.output_tokens"),
                input_tokens=_number(rec.usage.input_tokens, f"{where} usage.input_tokens"),
                event_stamps_ns=stamps or None,
                error=rec.error.message if rec.error else None,
            )
            index += 1


def _labkit_version() -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("labkit")
    except PackageNotFoundError:
        return None


# -- vLLM's bench ---------------------------------------------------------------------------


def read_vllm(path: Path) -> tuple[ClientResults, Iterator[ClientRequest]]:
    """``vllm bench serve --save-result --save-detailed``'s JSON: per-request lists.

    ``start_times`` are ``time.perf_counter()`` seconds (the monotonic clock), ``ttfts``
    seconds, ``itls`` the gaps between content chunks (seconds), ``output_lens`` the
    server's usage count where it sent one. Its ``latencies`` end at the last content chunk,
    not at the end of the response, so they are its decode's end (TTFT + the gaps), and its
    end-to-end is not measured. It keeps no request ids (matched by time).
    """
    return _vllm(_document(path), path)


def _vllm(doc: dict[str, Any], path: Path) -> tuple[ClientResults, Iterator[ClientRequest]]:
    starts = doc.get("start_times")
    if not isinstance(starts, list):
        raise ConfigError(
            f"{path}: no per-request lists (start_times): run vllm bench serve with "
            "--save-result --save-detailed"
        )
    version = _text(doc.get("vllm_version") or doc.get("version"), f"{path}: version")
    out = ClientResults("vllm bench serve", version, path, unmeasured=())
    n = len(starts)

    def col(name: str) -> list[Any]:
        values = doc.get(name)
        return values if isinstance(values, list) and len(values) == n else [None] * n

    def requests() -> Iterator[ClientRequest]:
        ttfts, itls = col("ttfts"), col("itls")
        outs, ins, errors = col("output_lens"), col("input_lens"), col("errors")
        for i in range(n):
            where = f"{path}: request {i}"
            gaps = [_number(g, f"{where} itls", 1000.0) for g in _list(itls[i], f"{where} itls")]
            known = [g for g in gaps if g is not None]
            error = _error_text(errors[i])
            ok = error is None
            ttft = _number(ttfts[i], f"{where} ttfts", 1000.0)
            yield ClientRequest(
                index=i,
                ok=ok,
                start_mono_ns=_number(starts[i], f"{where} start_times", 1e9),
                ttft_ms=ttft if ok else None,
                itl_ms=sum(known) / len(known) if known else None,
                decode_ms=sum(known) if ok else None,
                e2e_ms=None,  # `latencies` end at the last token (see the docstring)
                output_tokens=_number(outs[i], f"{where} output_lens"),
                input_tokens=_number(ins[i], f"{where} input_lens"),
                error=error,
            )

    return out, requests()


# -- GuideLLM ---------------------------------------------------------------------------------


def read_guidellm(path: Path) -> tuple[ClientResults, Iterator[ClientRequest]]:
    """GuideLLM's benchmarks JSON (``--outputs benchmarks.json``): every benchmark's
    successful, errored and incomplete requests with their own timings (wall clock)."""
    return _guidellm(_document(path), path)


def _guidellm(doc: dict[str, Any], path: Path) -> tuple[ClientResults, Iterator[ClientRequest]]:
    if "benchmarks" not in doc:
        raise ConfigError(f"{path}: not a GuideLLM benchmarks file (no `benchmarks`)")
    metadata = _object(doc.get("metadata"), f"{path}: metadata")
    version = _text(metadata.get("guidellm_version"), f"{path}: metadata.guidellm_version")
    out = ClientResults("guidellm", version, path)
    benchmarks = _list(doc["benchmarks"], f"{path}: benchmarks")

    def requests() -> Iterator[ClientRequest]:
        index = 0
        for b, bench in enumerate(benchmarks):
            at = f"{path}: benchmarks[{b}]"
            groups = _object(_object(bench, at).get("requests"), f"{at}.requests")
            for status, ok in (("successful", True), ("errored", False), ("incomplete", False)):
                for r, req in enumerate(_list(groups.get(status), f"{at}.requests.{status}")):
                    where = f"{at}.requests.{status}[{r}]"
                    yield _guidellm_request(index, ok, _object(req, where), where)
                    index += 1

    return out, requests()


def _guidellm_request(index: int, ok: bool, req: dict[str, Any], where: str) -> ClientRequest:
    info = _object(req.get("info") or req.get("request_info"), f"{where}.info")
    timings = _object(info.get("timings"), f"{where}.info.timings")
    start = timings.get("request_start") or req.get("request_start_time")
    first = _number(timings.get("first_token_iteration"), f"{where} first_token_iteration")
    last = _number(timings.get("last_token_iteration"), f"{where} last_token_iteration")
    decode = None
    if first is not None and last is not None:
        decode = _number(last - first, f"{where} decode (last - first token iteration)", 1000.0)
    return ClientRequest(
        index=index,
        ok=ok,
        request_id=_text(req.get("response_id") or req.get("request_id"), f"{where}.request_id"),
        start_wall_ns=_wall_start_ns(start, f"{where} request_start", 1.0),
        ttft_ms=_number(req.get("time_to_first_token_ms"), f"{where}.time_to_first_token_ms"),
        itl_ms=_number(req.get("inter_token_latency_ms"), f"{where}.inter_token_latency_ms"),
        decode_ms=decode,
        e2e_ms=_number(req.get("request_latency"), f"{where}.request_latency", 1000.0),
        output_tokens=_number(req.get("output_tokens"), f"{where}.output_tokens"),
        input_tokens=_number(req.get("prompt_tokens"), f"{where}.prompt_tokens"),
        error=None if ok else _error_text(info.get("error")),
    )


# -- AIPerf -----------------------------------------------------------------------------------

_AIPERF_UNITS = {"ns": 1e-6, "us": 1e-3, "ms": 1.0, "s": 1000.0, "sec": 1000.0}


def _metric(metrics: dict[str, Any], name: str, where: str) -> float | None:
    """AIPerf's metric `name` (``{"value": v, "unit": u}``; times in ms), None if absent or
    a per-chunk list."""
    m = metrics.get(name)
    if not isinstance(m, dict):
        return _number(m, f"{where} metrics.{name}")
    value = m.get("value")
    if isinstance(value, list):
        return None
    unit = m.get("unit")
    scale = _AIPERF_UNITS.get(unit, 1.0) if isinstance(unit, str) else 1.0
    return _number(value, f"{where} metrics.{name}.value", scale)


def read_aiperf(path: Path) -> tuple[ClientResults, Iterator[ClientRequest]]:
    """AIPerf's ``profile_export.jsonl``: one record per request, its metadata (the
    ``x_request_id`` it sent, the wall-clock start in ns) and its metrics with units."""
    out = ClientResults("aiperf", _aiperf_version(path), path)
    return out, _aiperf_requests(path)


def _aiperf_requests(path: Path) -> Iterator[ClientRequest]:
    lines = iter_lines(path, "AIPerf export", max_line_bytes=MAX_LINE_BYTES)
    with contextlib.closing(lines):  # closed at once when a bad line stops the reading
        for index, line in enumerate(lines):
            where = f"{path}:{line.number}"
            rec = loads_strict(line.data.decode("utf-8"), where)
            if not isinstance(rec, dict) or not (
                isinstance(rec.get("metadata"), dict) or isinstance(rec.get("metrics"), dict)
            ):
                raise ConfigError(
                    f"{where}: not an AIPerf per-request record (expected an object with "
                    "`metadata` and `metrics`)"
                )
            meta = _object(rec.get("metadata"), f"{where} metadata")
            metrics = _object(rec.get("metrics"), f"{where} metrics")
            error = _error_text(rec.get("error"))
            request_id = meta.get("x_request_id") or meta.get("x_correlation_id")
            yield ClientRequest(
                index=index,
                ok=error is None,
                request_id=_text(request_id, f"{where} metadata.x_request_id"),
                start_wall_ns=_wall_start_ns(
                    meta.get("request_start_ns"), f"{where} metadata.request_start_ns", 1e-9
                ),
                ttft_ms=_metric(metrics, "time_to_first_token", where),
                itl_ms=_metric(metrics, "inter_token_latency", where),
                decode_ms=_metric(metrics, "decode_duration", where),
                e2e_ms=_metric(metrics, "request_latency", where),
                output_tokens=_metric(metrics, "output_sequence_length", where)
                or _metric(metrics, "output_token_count", where),
                input_tokens=_metric(metrics, "input_sequence_length", where),
                error=error,
            )


def _aiperf_version(path: Path) -> str | None:
    """The version AIPerf wrote in the aggregate export beside the per-request one."""
    summary = path.with_name(path.stem + "_aiperf.json")
    if not summary.is_file():
        return None
    try:
        version = _document(summary).get("aiperf_version")
    except ConfigError:
        return None
    return version[:_MAX_TEXT] if isinstance(version, str) and version else None


#: The readers by name.
READERS: dict[str, Reader] = {
    "labkit": read_labkit,
    "guidellm": read_guidellm,
    "aiperf": read_aiperf,
    "vllm": read_vllm,
}
#: What each reader expects, for the line that says a file holds no requests.
_EXPECTED = {
    "labkit": "request records (records.jsonl)",
    "guidellm": "GuideLLM's benchmarks[].requests.successful/errored/incomplete",
    "aiperf": "AIPerf's per-request records, one JSON object a line",
    "vllm": "vLLM's per-request lists (start_times, ttfts, itls, ...)",
}


def detect(path: Path) -> str:
    """Which reader a results file needs, from its shape; ConfigError when none fits."""
    name, _ = _detect(path)
    return name


def _detect(path: Path) -> tuple[str, dict[str, Any] | None]:
    """The reader's name, and the document when reading it was needed to tell."""
    if path.is_dir() or path.name == "records.jsonl":
        return "labkit", None
    if path.suffix == ".jsonl":
        return "aiperf", None
    doc = _document(path)
    if "benchmarks" in doc:
        return "guidellm", doc
    if "start_times" in doc or "ttfts" in doc:
        return "vllm", doc
    raise ConfigError(
        f"cannot tell which client wrote {path}; say it with --format ({', '.join(READERS)})"
    )


def stream_results(
    path: Path | str, fmt: str | None = None
) -> tuple[ClientResults, Iterator[ClientRequest]]:
    """A client's results file (`fmt`, None: `detect`): its header, and its requests read
    as they are asked for: a JSONL file (AIPerf's, labkit's) a line at a time, each line at
    most `MAX_LINE_BYTES`; GuideLLM's and vLLM's, one JSON document, whole (Python's json:
    no incremental parser is installed), at most `MAX_DOCUMENT_BYTES`. A fault found while
    reading is a ConfigError of one line, and a file that holds no request at all is one too."""
    path = Path(path)
    if not path.exists():
        raise ConfigError(f"{path}: no such file or folder")
    doc = None
    if fmt is None:
        fmt, doc = _detect(path)
    if fmt not in READERS:
        raise ConfigError(f"unknown results format {fmt!r}; known: {', '.join(READERS)}")
    try:
        if doc is not None and fmt == "guidellm":
            header, rows = _guidellm(doc, path)
        elif doc is not None:
            header, rows = _vllm(doc, path)
        else:
            header, rows = READERS[fmt](path)
    except OSError as exc:
        raise ConfigError(f"cannot read {path} as {fmt} results: {exc.strerror or exc}") from None
    return header, _checked(rows, path, fmt)


def _checked(rows: Iterator[ClientRequest], path: Path, fmt: str) -> Iterator[ClientRequest]:
    count = 0
    try:
        for row in rows:
            count += 1
            yield row
    except OSError as exc:
        raise ConfigError(f"cannot read {path} as {fmt} results: {exc.strerror or exc}") from None
    if count == 0:
        raise ConfigError(f"{path}: no requests in it (expected {_EXPECTED[fmt]})")


def read_results(path: Path | str, fmt: str | None = None) -> ClientResults:
    """Read a client's results with the reader `fmt` (None: `detect`), every request held
    (`stream_results` reads them one at a time)."""
    results, rows = stream_results(path, fmt)
    results.requests.extend(rows)
    return results
