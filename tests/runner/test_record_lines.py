"""A record's line in records.jsonl is the same bytes whichever way it is written: pydantic's
own UTF-8 (`RequestRecord.to_json_bytes`, when no secret is registered) or its JSON text
scrubbed and encoded (`to_json_line`), over records with odd floats, any text, errors and
tags."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from labkit.records import RequestRecord
from labkit.runner.results import RunFolder
from labkit.scrub import register_secret, scrub_json
from tests.support.records import make_record

pytestmark = pytest.mark.unit

_FLOATS = st.floats(allow_nan=True, allow_infinity=True) | st.sampled_from(
    [0.0, -0.0, 5e-324, 1e308, 0.1 + 0.2, 1 / 3, 123456789.123456789]
)
_TEXT = st.text(
    alphabet=st.characters(blacklist_categories=("Cs",)) | st.sampled_from('\u2028\x00"\\é🦙'),
    max_size=40,
)
_TAG = st.one_of(_TEXT, st.integers(-(2**63), 2**63 - 1), st.floats(allow_nan=False), st.booleans())


@st.composite
def _records(draw: st.DrawFn) -> RequestRecord:
    offsets = draw(st.lists(_FLOATS, max_size=8))
    return make_record(
        ttft_ms=draw(st.none() | _FLOATS),
        decode_ms_per_token=draw(st.none() | _FLOATS),
        output_tokens=draw(st.none() | st.integers(0, 10**6)),
        output_text=draw(st.none() | _TEXT),
        error_kind=draw(st.none() | st.sampled_from(["http_status", "timeout", "protocol"])),
        error_message=draw(st.none() | _TEXT.filter(bool)),
        tags=draw(st.dictionaries(_TEXT, _TAG, max_size=4)),
        prompt_id=draw(_TEXT),
        event_offsets_ms=offsets,
        stamp_lateness_ms=draw(st.none() | st.lists(_FLOATS, max_size=8)),
        itl_ms_p99=draw(st.none() | _FLOATS),
    )


@settings(
    max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(records=st.lists(_records(), min_size=1, max_size=4))
def test_each_line_is_the_record_json_text_encoded(
    tmp_path_factory: pytest.TempPathFactory, records: list[RequestRecord]
) -> None:
    folder = RunFolder.create(tmp_path_factory.mktemp("run"), "r")
    with pytest.MonkeyPatch.context() as patch:
        # No secret registered (other tests of this process may have): the bytes' path.
        patch.setattr("labkit.runner.results.registered_secrets", lambda: ())
        for record in records:
            assert record.to_json_bytes() == record.to_json_line().encode("utf-8")
            folder.append(record)
    folder.close()
    want = b"".join((r.to_json_line() + "\n").encode("utf-8") for r in records)
    assert Path(folder.records_path).read_bytes() == want


def test_with_a_secret_registered_the_line_is_scrubbed(tmp_path: Path) -> None:
    secret = "sk-test-" + "Zq7" * 8
    record = make_record(output_text=f"the key is {secret}", tags={"k": secret})
    folder = RunFolder.create(tmp_path, "r")
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr("labkit.scrub._secrets", ())
        patch.setattr("labkit.scrub._plain", None)
        patch.setattr("labkit.scrub._json", None)
        register_secret(secret)
        folder.append(record)
        want = (scrub_json(record.to_json_line()) + "\n").encode("utf-8")
    folder.close()
    written = Path(folder.records_path).read_bytes()
    assert written == want and secret.encode() not in written
