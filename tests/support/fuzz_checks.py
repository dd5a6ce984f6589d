"""What must hold for every record a mutated stream produces, whatever its bytes were."""

from __future__ import annotations

from labkit.records import ErrorKind, RequestRecord
from labkit.scrub import register_secret, scrub_json
from tests.support.fuzz_streams import PLANTED_KEY, MutatedStream, leaked_key_forms

# As `ProviderSettings.resolve_api_key` does for a key read from the environment; the fuzz
# providers are given theirs directly.
register_secret(PLANTED_KEY)

# A 200 stream, however broken, fails as one of these; `internal` would be a labkit bug.
STREAM_ERROR_KINDS = {ErrorKind.PROTOCOL, ErrorKind.STREAM_ERROR, ErrorKind.CONNECTION}


def output_line(record: RequestRecord) -> str:
    """The record's JSON line as the run folder writes it to records.jsonl: scrubbed (the
    record in memory may hold a key the server echoed; no output may)."""
    return scrub_json(record.to_json_line())


def assert_one_valid_record(
    record: RequestRecord, cancelled: list[RequestRecord], stream: MutatedStream
) -> None:
    """One record that round-trips, fails only as a stream can, and carries no key."""
    how = f"(stream mutated by: {'; '.join(stream.steps)})"
    assert isinstance(record, RequestRecord) and not cancelled, how
    raw_line = record.to_json_line()
    assert "\n" not in raw_line, how
    assert RequestRecord.from_json_line(raw_line) == record, f"no round trip {how}"
    line = output_line(record)
    RequestRecord.from_json_line(line)  # still a record once scrubbed
    if record.error is not None:
        assert record.error.kind in STREAM_ERROR_KINDS, f"{record.error!r} {how}"
        assert record.error.message, how
    leaks = leaked_key_forms(line)
    assert not leaks, f"the planted key is in the record's line ({', '.join(leaks)}) {how}"
