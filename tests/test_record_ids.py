"""`labkit.records.new_record_id`: what ``uuid.uuid4().hex`` gives (32 lowercase hex
digits of a version-4, RFC 4122 UUID), never the same twice."""

from __future__ import annotations

import uuid

import pytest

from labkit.records import new_record_id

pytestmark = pytest.mark.unit


def test_a_record_id_is_a_version_4_uuid_in_the_form_uuid4_hex_writes():
    for _ in range(2000):
        record_id = new_record_id()
        parsed = uuid.UUID(hex=record_id)
        assert parsed.hex == record_id  # 32 lowercase hex digits, nothing else
        assert parsed.version == 4
        assert parsed.variant == uuid.RFC_4122


def test_record_ids_are_unique_and_their_random_bits_vary():
    ids = [new_record_id() for _ in range(10_000)]
    assert len(set(ids)) == len(ids)
    # Every one of the 122 random bits takes both values across the ids.
    fixed = (0xF << 76) | (0x3 << 62)
    ones = 0
    zeros = 0
    for record_id in ids:
        value = int(record_id, 16)
        ones |= value
        zeros |= ~value
    random_bits = ((1 << 128) - 1) & ~fixed
    assert ones & random_bits == random_bits
    assert zeros & random_bits == random_bits
