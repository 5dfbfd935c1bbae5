"""Exactly-once UUIDs: layout, clock and flags round trips, and the Clock's monotonicity."""

from __future__ import annotations

import uuid

import pytest
from hypothesis import given
from hypothesis import strategies as st

from liftbridge_client import errors
from liftbridge_client.exactly_once import uuids
from liftbridge_client.exactly_once.uuids import Clock, Flags

U64 = st.integers(0, 2**64 - 1)
PRODUCERS = st.binary(min_size=6, max_size=6)
FLAGS = st.integers(0, 0x3FF)


@given(PRODUCERS, U64, FLAGS)
def test_build_then_parse_round_trips(producer: bytes, clock: int, flags: int) -> None:
    value = uuids.build_uuid(producer, clock, flags)
    assert value.version == 1
    assert value.variant == uuid.RFC_4122
    assert uuids.clock_of(value) == clock  # all 64 bits: 60 of time, 4 of counter
    assert uuids.flags_of(value) == flags
    assert uuids.producer_of(value) == producer
    assert uuids.clock_of(value.bytes) == uuids.clock_of(value)


def test_known_layout() -> None:
    # time_low 0x01234567, time_mid 0x89ab, time_hi 0xcde | version 1, counter 5, flags 2.
    clock = (0xCDE_89AB_0123_4567 << 4) | 5
    value = uuids.build_uuid(bytes.fromhex("0b0c0d0e0f10"), clock, Flags.ACK_TXN)
    assert value.bytes.hex() == "0123456789ab1cde" + "9402" + "0b0c0d0e0f10"
    assert uuids.clock_of(value) == clock
    assert value.time == clock >> 4  # the stdlib reads the same 60-bit timestamp


def test_new_producer_id_is_random_with_multicast_bit() -> None:
    ids = {uuids.new_producer_id() for _ in range(64)}
    assert len(ids) == 64
    assert all(len(p) == 6 and p[0] & 1 for p in ids)


def test_clock_update_is_monotonic_and_tick_counts() -> None:
    clock = Clock.from_unix_ns(1_700_000_000_000_000_000)
    base = clock.value
    assert base == (1_700_000_000_000_000_000 // 100 + uuids.GREGORIAN_OFFSET_100NS) << 4
    assert clock.tick() == base + 1
    clock.update(1_600_000_000_000_000_000)  # earlier: ignored
    assert clock.value == base + 1
    clock.update(1_700_000_000_000_000_100)  # one tick of 100 ns later
    assert clock.value == base + 16
    assert uuids.clock_to_unix_ns(clock.value) == 1_700_000_000_000_000_100


def test_sixteen_ticks_per_100ns_before_running_ahead() -> None:
    clock = Clock.from_unix_ns(10**18)
    for _ in range(16):
        clock.tick()
    assert uuids.clock_to_unix_ns(clock.value) == 10**18 + 100


@pytest.mark.parametrize(
    ("args", "match"),
    [
        ((b"12345", 1, 0), "producer"),
        ((b"123456", -1, 0), "clock"),
        ((b"123456", 1, 0x400), "flags"),
    ],
)
def test_bad_input_is_a_typed_error(args: tuple[bytes, int, int], match: str) -> None:
    with pytest.raises(errors.InvalidInputError, match=match):
        uuids.build_uuid(*args)


def test_parse_rejects_wrong_length() -> None:
    for bad in (b"short", bytes(17), bytearray(16), memoryview(bytes(16))):
        with pytest.raises(errors.InvalidInputError, match="uuid"):
            uuids.clock_of(bad)  # type: ignore[arg-type]
        with pytest.raises(errors.InvalidInputError, match="uuid"):
            uuids.flags_of(bad)  # type: ignore[arg-type]


@given(st.binary(min_size=16, max_size=16))
def test_fields_of_agrees_with_the_single_getters(raw: bytes) -> None:
    assert uuids.fields_of(raw) == (
        uuids.producer_of(raw),
        uuids.clock_of(raw),
        uuids.flags_of(raw),
    )
    assert (
        uuids.build_uuid_bytes(*uuids.fields_of(raw))
        == uuids.build_uuid(*uuids.fields_of(raw)).bytes
    )
    # clock_of splits exact bytes in C when it is built, a UUID object in Python: both
    # must read what the pure twin reads.
    as_uuid = uuid.UUID(bytes=raw)
    twin = uuids.fields_of_twin(raw)
    assert uuids.clock_of(raw) == uuids.clock_of(as_uuid) == twin[1]
    assert uuids.flags_of(raw) == uuids.flags_of(as_uuid) == twin[2]


@given(st.binary(min_size=16, max_size=16))
def test_is_ack_txn_is_the_ack_flags_of_a_real_uuid(raw: bytes) -> None:
    assert uuids.is_ack_txn(raw) is (
        uuids.flags_of(raw) == uuids.Flags.ACK_TXN and raw != bytes(16)
    )


def test_is_ack_txn_of_built_uuids() -> None:
    producer = uuids.new_producer_id()
    for flags in uuids.Flags:
        raw = uuids.build_uuid_bytes(producer, 12345, flags)
        assert uuids.is_ack_txn(raw) is (flags is uuids.Flags.ACK_TXN)
    assert not uuids.is_ack_txn(bytes(16))  # the reader's "no UUID"
