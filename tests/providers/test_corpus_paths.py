"""Every corpus shape replayed over real sockets on 127.0.0.1 through the three client paths —
the wire path on httpx, the wire path on labkit's lean transport, and the official SDK (where
the kind has an SDK adapter) — and the three records compared with each other, fact by fact.

`test_corpus` checks each path against the fixture's sidecar; this module checks that the
paths agree among themselves on every fact that does not depend on the path (new fixtures
are picked up as they are added to the corpus). A fact the sidecar's ``sdk`` block names is
a documented difference of the SDK (it cannot represent the shape) and is left out of the
SDK's comparison.

``python -m tests.providers.test_corpus_paths`` prints the agreement table (fixture × path →
stop reason / output events / agree), for the issue notes.
"""

from __future__ import annotations

import sys
from typing import Any

import pytest

from labkit.providers import sdk_available
from labkit.records import RequestRecord
from tests.providers.streams.corpus import Fixture, load_corpus, tool_calls_of
from tests.providers.test_corpus import replay

pytestmark = pytest.mark.integration

CORPUS = load_corpus()
#: The client paths, each as (name, replay path, transport).
PATHS = (("wire", "wire", "httpx"), ("lean", "wire", "lean"), ("sdk", "sdk", "auto"))
#: The sidecar keys of the facts compared here (a key in ``sdk`` excuses its fact).
_SIDECAR_KEY = {"ttft_present": "ttft", "decode_null": "decode_ms_per_token"}
#: What a stream's content alone decides: all that is compared where the SDK documents a
#: different outcome (``error_kind`` in ``sdk``: it accepts a value the wire rejects), since
#: the stop reason, the counts and decode all follow from the outcome.
_CONTENT = ("output_events", "output_text", "ttft_present", "ttft_is_text", "tool_calls")


def facts(record: RequestRecord) -> dict[str, Any]:
    """The facts of a record that every client path must record alike."""
    client, usage = record.client, record.usage
    return {
        "output_events": len(client.event_offsets_ms),
        "input_tokens": usage.input_tokens,
        "output_tokens": usage.output_tokens,
        "reasoning_tokens": usage.reasoning_tokens,
        "cached_input_tokens": usage.cached_input_tokens,
        "streamed_output_tokens": usage.streamed_output_tokens,
        "output_tokens_source": usage.output_tokens_source,
        "stop_reason": record.stop_reason and record.stop_reason.value,
        "stop_reason_raw": record.stop_reason_raw,
        "error_kind": record.error and record.error.kind.value,
        "output_text": record.output_text,
        "ttft_present": client.ttft_ms is not None,
        "ttft_is_text": client.ttft_ms is not None and client.ttft_text_ms == client.ttft_ms,
        "decode_null": client.decode_ms_per_token is None,
        "decode_null_reason": client.decode_null_reason,
        "tool_calls": tool_calls_of(record),
    }


def paths_for(fixture: Fixture) -> list[tuple[str, str, str]]:
    """The paths this fixture is replayed through (the SDK where its kind has one)."""
    return [p for p in PATHS if p[0] != "sdk" or sdk_available(fixture.kind)]


def replay_all(fixture: Fixture) -> dict[str, RequestRecord]:
    """The fixture's record on each of its paths."""
    return {name: replay(fixture, path, transport) for name, path, transport in paths_for(fixture)}


def disagreements(fixture: Fixture, records: dict[str, RequestRecord]) -> dict[str, list[str]]:
    """Per path, the facts where it differs from the wire path on httpx (`fact: a != b`);
    the SDK's documented differences (the sidecar's ``sdk`` keys) left out."""
    wire = facts(records["wire"])
    out: dict[str, list[str]] = {}
    for name, record in records.items():
        got = facts(record)
        excused = set(fixture.sdk) if name == "sdk" else set()
        compared = _CONTENT if "error_kind" in excused else tuple(wire)
        out[name] = [
            f"{key}: {got[key]!r} != {wire[key]!r}"
            for key in compared
            if got[key] != wire[key] and _SIDECAR_KEY.get(key, key) not in excused
        ]
    return out


@pytest.mark.parametrize("fixture", CORPUS, ids=[f.name for f in CORPUS])
def test_the_client_paths_agree(fixture: Fixture) -> None:
    records = replay_all(fixture)
    assert records["wire"].app.client_path == "wire"
    if "sdk" in records:
        assert records["sdk"].app.client_path == "sdk"
    differ = {name: d for name, d in disagreements(fixture, records).items() if d}
    assert not differ, differ


def agreement_table(fixtures: list[Fixture]) -> str:
    """A Markdown table: per fixture, each path's stop reason (raw) / output events, and
    whether the paths agree (the SDK's documented differences named)."""
    head = "| fixture | wire (httpx) | lean | sdk | agree |\n|---|---|---|---|---|"
    rows = [head]
    for fixture in fixtures:
        records = replay_all(fixture)
        cells = []
        for name, _, _ in PATHS:
            record = records.get(name)
            if record is None:
                cells.append("— (no SDK)")
                continue
            stop = record.stop_reason and record.stop_reason.value
            events = len(record.client.event_offsets_ms)
            cells.append(f"{stop} ({record.stop_reason_raw}) / {events}")
        differ = disagreements(fixture, records)
        bad = [f"{name}: {'; '.join(d)}" for name, d in differ.items() if d]
        documented = sorted(k for k in fixture.sdk if k != "note") if "sdk" in records else []
        verdict = "no: " + " / ".join(bad) if bad else "yes"
        if documented and not bad:
            verdict += f" (sdk differs as documented: {', '.join(documented)})"
        rows.append(f"| {fixture.name} | {' | '.join(cells)} | {verdict} |")
    return "\n".join(rows)


if __name__ == "__main__":
    names = set(sys.argv[1:])
    print(agreement_table([f for f in CORPUS if not names or f.name in names]))
