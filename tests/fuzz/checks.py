"""What must hold for every record a mutated stream produces, whatever its bytes were."""

from __future__ import annotations

from labkit.records import ErrorKind, RequestRecord
from tests.fuzz.streams import MutatedStream, leaked_key_forms

# A 200 stream, however broken, fails as one of these; `internal` would be a labkit bug.
STREAM_ERROR_KINDS = {ErrorKind.PROTOCOL, ErrorKind.STREAM_ERROR, ErrorKind.CONNECTION}


def output_line(record: RequestRecord) -> str:
    """The record's JSON line, as it is written to records.jsonl."""
    return record.to_json_line()


def assert_one_valid_record(
    record: RequestRecord, cancelled: list[RequestRecord], stream: MutatedStream
) -> None:
    """One record that round-trips, fails only as a stream can, and carries no key."""
    how = f"(stream mutated by: {'; '.join(stream.steps)})"
    assert isinstance(record, RequestRecord) and not cancelled, how
    line = output_line(record)
    assert "\n" not in line, how
    assert RequestRecord.from_json_line(line) == record, f"the record does not round-trip {how}"
    if record.error is not None:
        assert record.error.kind in STREAM_ERROR_KINDS, f"{record.error!r} {how}"
        assert record.error.message, how
    leaks = leaked_key_forms(line)
    assert not leaks, f"the planted key is in the record's line ({', '.join(leaks)}) {how}"
