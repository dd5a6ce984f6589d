"""Peers' result files that are wrong, hostile or huge: one clear line each, nothing half
written, and `labkit score --out` writes nothing through a link or a peer's controls.

The shapes are those of tests/scoring/peer_results (files the clients wrote themselves:
GuideLLM 0.8.1's benchmarks.json, AIPerf 0.13.0's profile_export.jsonl records, vLLM
0.33.0's ``bench serve --save-detailed`` JSON), broken one field at a time.
"""

from __future__ import annotations

import inspect
import json
import math
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from labkit.cli.app import app
from labkit.errors import ConfigError
from labkit.scoring.imports import import_results
from labkit.scoring.peers import READERS, ClientResults, read_results, stream_results
from labkit.scoring.render import write_score
from labkit.scoring.score import score
from labkit.truth.log import read_truth_log

pytestmark = pytest.mark.unit

PEERS = Path(__file__).resolve().parent / "peer_results"
AIPERF_LINE = (PEERS / "aiperf/profile_export.jsonl").read_text().splitlines()[0]
LABKIT_LINE = (PEERS / "labkit/run/records.jsonl").read_text().splitlines()[0]


def _aiperf(**metrics: Any) -> str:
    rec = json.loads(AIPERF_LINE)
    rec["metrics"].update(metrics)
    return json.dumps(rec)


def _guidellm_request(**fields: Any) -> str:
    doc = json.loads((PEERS / "guidellm/benchmarks.json").read_text())
    doc["benchmarks"][0]["requests"]["successful"][0].update(fields)
    return json.dumps(doc)


#: (file name, content, a piece of the one line it must give)
HOSTILE: list[tuple[str, bytes | str, str]] = [
    ("nan.json", '{"benchmarks": NaN}', "not JSON (NaN is not a JSON number)"),
    ("inf.json", '{"start_times": [Infinity]}', "not JSON (Infinity is not a JSON number)"),
    ("big.json", '{"start_times": [1e999]}', "1e999 is not a finite number"),
    ("deep.json", "[" * 200_000, "nested too deeply"),
    ("deep_object.json", '{"a":' * 200_000, "nested too deeply"),
    ("latin1.json", b'{"benchmarks": ["\xe9"]}', "latin1.json:1: not UTF-8"),
    ("broken.json", '{"benchmarks": [\n  {]', "broken.json:2: not JSON"),
    ("list.json", "[1, 2]", "expected a JSON object, got a list"),
    ("unknown.json", '{"hello": 1}', "cannot tell which client wrote"),
    ("empty_guidellm.json", '{"benchmarks": []}', "no requests in it (expected GuideLLM's"),
    ("benchmarks_object.json", '{"benchmarks": {"a": 1}}', "benchmarks: expected a list"),
    (
        "negative_ttft.json",
        _guidellm_request(time_to_first_token_ms=-3),
        "successful[0].time_to_first_token_ms: negative",
    ),
    ("text_tokens.json", _guidellm_request(output_tokens="32"), "expected a number, got text"),
    ("bool_latency.json", _guidellm_request(request_latency=True), "got true/false"),
    ("vllm_empty.json", '{"start_times": []}', "no requests in it (expected vLLM's"),
    ("vllm_gap.json", '{"start_times": [1, 2], "itls": [[1], [{}]]}', "request 1 itls"),
    ("vllm_negative.json", '{"start_times": [-1]}', "request 0 start_times: negative"),
    ("vllm_huge_int.json", '{"start_times": [' + "9" * 400 + "]}", "out of range"),
    ("vllm_digits.json", '{"start_times": [' + "9" * 5000 + "]}", "vllm_digits.json:"),
    ("empty.jsonl", "\n\n", "no requests in it (expected AIPerf's"),
    ("odd.jsonl", '{"hello": 1}\n', "odd.jsonl:1: not an AIPerf per-request record"),
    ("scalar.jsonl", "3\n", "scalar.jsonl:1: not an AIPerf per-request record"),
    ("second.jsonl", AIPERF_LINE + "\n{\n", "second.jsonl:2: not JSON"),
    ("bytes.jsonl", AIPERF_LINE.encode() + b"\n\xff\n", "bytes.jsonl:2: not UTF-8 text (byte 0xff"),
    (
        "negative.jsonl",
        _aiperf(request_latency={"value": -1.0, "unit": "ms"}),
        "negative.jsonl:1 metrics.request_latency.value: negative",
    ),
    (
        "nan.jsonl",
        _aiperf(request_latency={"value": 1.0, "unit": "ms"}).replace("1.0", "NaN", 1),
        "nan.jsonl:1: not JSON (NaN",
    ),
    ("metrics_list.jsonl", '{"metadata": {}, "metrics": []}', "metrics: expected an object"),
    ("records.jsonl", LABKIT_LINE.replace('"ttft_ms":51.27113', '"ttft_ms":NaN'), "ttft_ms"),
    ("year.jsonl", '{"metadata": {"request_start_ns": 1e30}, "metrics": {}}', "after year 9999"),
]


def _one_line(text: str) -> None:
    assert "Traceback" not in text
    assert len(text.strip().splitlines()) == 1, text
    assert "validation error" not in text and "input_value" not in text


@pytest.mark.parametrize(("name", "content", "message"), HOSTILE, ids=[h[0] for h in HOSTILE])
def test_a_hostile_results_file_is_one_clear_line_and_imports_nothing(
    tmp_path: Path, name: str, content: bytes | str, message: str
) -> None:
    path = tmp_path / name
    path.write_bytes(content if isinstance(content, bytes) else content.encode())
    with pytest.raises(ConfigError) as caught:
        read_results(path)
    assert message in str(caught.value)
    _one_line(str(caught.value))
    runner = CliRunner()
    out = tmp_path / "runs"
    imported = runner.invoke(app, ["import-results", str(path), "--out", str(out)])
    assert imported.exit_code == 1
    _one_line(imported.output)
    assert message in imported.output.replace("\n", "")
    assert not out.exists() or list(out.iterdir()) == []  # no run, no half-written folder
    scored = runner.invoke(app, ["score", str(PEERS / "aiperf/truth.jsonl"), str(path)])
    assert scored.exit_code == 1
    _one_line(scored.output)


def test_a_fault_half_way_through_leaves_no_run_folder(tmp_path: Path) -> None:
    path = tmp_path / "profile_export.jsonl"
    lines = (PEERS / "aiperf/profile_export.jsonl").read_text().splitlines()
    path.write_text("\n".join([*lines[:10], '{"metadata": 1}', *lines[10:]]) + "\n")
    with pytest.raises(ConfigError, match=r"profile_export.jsonl:11: .*expected an object"):
        header, requests = stream_results(path)
        import_results(header, tmp_path / "runs", requests=requests)
    assert list((tmp_path / "runs").iterdir()) == []


def test_jsonl_results_are_read_a_line_at_a_time(tmp_path: Path) -> None:
    """The memory bound, structurally: requests come from a generator that has read only
    what was asked for (a fault further on is not met yet)."""
    path = tmp_path / "profile_export.jsonl"
    path.write_text(AIPERF_LINE + "\n" + AIPERF_LINE + "\n" + "not json\n")
    header, requests = stream_results(path)
    assert inspect.isgenerator(requests) and header.requests == []
    assert next(requests).ttft_ms is not None and next(requests).index == 1
    with pytest.raises(ConfigError, match=r":3: not JSON"):
        next(requests)


def test_an_over_long_line_or_document_is_refused_before_it_is_held(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import labkit.scoring.peers as peers

    monkeypatch.setattr(peers, "MAX_LINE_BYTES", 1000)
    monkeypatch.setattr(peers, "MAX_DOCUMENT_BYTES", 1000)
    line = tmp_path / "long.jsonl"
    line.write_text(AIPERF_LINE + "\n")
    with pytest.raises(ConfigError, match=r"long.jsonl:1: a line longer than"):
        read_results(line)
    doc = tmp_path / "big.json"
    doc.write_text(json.dumps({"start_times": [1.0] * 1000}))
    with pytest.raises(ConfigError, match=r"big.json: larger than 0 MiB; a single JSON document"):
        read_results(doc)


def _check_valid(results: ClientResults) -> None:
    assert results.requests
    for req in results.requests:
        for name in ("ttft_ms", "itl_ms", "decode_ms", "e2e_ms", "output_tokens"):
            value = getattr(req, name)
            assert value is None or (math.isfinite(value) and value >= 0)
        for text in (req.request_id, req.error):
            assert text is None or (isinstance(text, str) and len(text) <= 300)


_JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(10**30), max_value=10**30)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner),
    max_leaves=20,
)
_KEYS = {
    "guidellm": ["benchmarks", "requests", "successful", "errored", "info", "timings",
                 "request_start", "first_token_iteration", "last_token_iteration",
                 "time_to_first_token_ms", "request_latency", "output_tokens", "metadata"],
    "vllm": ["start_times", "ttfts", "itls", "output_lens", "input_lens", "errors"],
    "aiperf": ["metadata", "metrics", "request_start_ns", "x_request_id", "value", "unit",
               "time_to_first_token", "request_latency", "error"],
}  # fmt: skip


def _shaped(fmt: str) -> st.SearchStrategy[Any]:
    """JSON values built from the format's own keys, so the fuzz reaches the readers'
    inner fields, not only their first check."""
    keys = st.sampled_from(_KEYS[fmt]) | st.text(max_size=4)
    return st.recursive(
        _JSON,
        lambda inner: st.lists(inner, max_size=3) | st.dictionaries(keys, inner, max_size=4),
        max_leaves=30,
    )


def _fuzz(path: Path, fmt: str) -> None:
    try:
        results = read_results(path, fmt)
    except ConfigError as exc:
        _one_line(str(exc))
        return
    _check_valid(results)


@pytest.mark.parametrize("fmt", ["guidellm", "vllm"])
@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(data=st.data())
def test_fuzz_document_readers(tmp_path: Path, fmt: str, data: st.DataObject) -> None:
    doc = data.draw(_shaped(fmt))
    path = tmp_path / "results.json"
    raw = data.draw(st.sampled_from(["json", "bytes"]))
    if raw == "json":
        path.write_text(json.dumps(doc))
    else:
        path.write_bytes(data.draw(st.binary(max_size=64)))
    _fuzz(path, fmt)


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(lines=st.lists(_shaped("aiperf"), max_size=4), junk=st.binary(max_size=32))
def test_fuzz_aiperf_reader(tmp_path: Path, lines: list[Any], junk: bytes) -> None:
    path = tmp_path / "profile_export.jsonl"
    path.write_bytes("\n".join(json.dumps(x) for x in lines).encode() + b"\n" + junk)
    _fuzz(path, "aiperf")


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(lines=st.lists(_JSON, max_size=3), junk=st.binary(max_size=32))
def test_fuzz_labkit_reader(tmp_path: Path, lines: list[Any], junk: bytes) -> None:
    real = (PEERS / "labkit/run/records.jsonl").read_text().splitlines()[0]
    path = tmp_path / "records.jsonl"
    body = "\n".join([real, *(json.dumps(x) for x in lines)]).encode() + b"\n" + junk
    path.write_bytes(body)
    _fuzz(path, "labkit")


def test_every_reader_is_fuzzed() -> None:
    assert set(READERS) == {"labkit", "guidellm", "aiperf", "vllm"}


def test_score_out_writes_no_file_through_a_link_nor_a_peers_controls(tmp_path: Path) -> None:
    outside = tmp_path / "outside.txt"
    outside.write_text("mine")
    out = tmp_path / "score"
    out.mkdir()
    for name in ("score.md", "score.json", "score.vl.json", "score.png"):
        (out / name).symlink_to(outside)
    peer = tmp_path / "profile_export.jsonl"
    peer.write_bytes((PEERS / "aiperf/profile_export.jsonl").read_bytes())
    (tmp_path / "profile_export_aiperf.json").write_text(
        json.dumps({"aiperf_version": "0.13\x1b]0;pwned\x07\x1b[2J|x\ny"})
    )
    result = CliRunner().invoke(
        app, ["score", str(PEERS / "aiperf/truth.jsonl"), str(peer), "--out", str(out)]
    )
    assert result.exit_code == 0, result.output
    assert outside.read_text() == "mine"
    for name in ("score.md", "score.json", "score.vl.json", "score.png"):
        assert not (out / name).is_symlink()
    markdown = (out / "score.md").read_text()
    assert "\x1b" not in markdown and "\x07" not in markdown
    assert markdown.startswith("## How exact is aiperf 0.13\\|x y?\n")
    assert "\x1b" not in result.output


def test_score_json_is_strict_json_with_null_for_nan(tmp_path: Path) -> None:
    s = score(
        read_results(PEERS / "aiperf/profile_export.jsonl"),
        read_truth_log(PEERS / "aiperf/truth.jsonl"),
    )
    s.rows[0]["ttft_error"] = math.nan
    s.rows[1]["ttft_error"] = math.inf
    write_score(s, tmp_path)
    text = (tmp_path / "score.json").read_text()
    data = json.loads(text, parse_constant=lambda name: pytest.fail(f"{name} in score.json"))
    assert data["requests"][0]["ttft_error"] is None and data["requests"][1]["ttft_error"] is None
