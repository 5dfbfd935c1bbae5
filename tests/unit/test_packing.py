"""The packed framing (liftbridge_client.packing): golden bytes, round trips, sizes, and
damaged values refused with FramingError (never another exception, never a hang)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from liftbridge_client.errors import FramingError, InvalidInputError
from liftbridge_client.packing import (
    MAGIC,
    PACKED_HEADER,
    PackedRow,
    is_packed,
    pack,
    packed_headers,
    packed_size,
    unpack,
)

rows_strategy = st.lists(
    st.builds(
        PackedRow,
        value=st.binary(max_size=300),
        key=st.none() | st.binary(max_size=40),
        headers=st.none()
        | st.dictionaries(st.text(min_size=1, max_size=8), st.binary(max_size=20), max_size=3),
    ),
    min_size=1,
    max_size=40,
)


def test_golden_bytes() -> None:
    rows = [PackedRow(b"v1"), PackedRow(b"v2", key=b"k", headers={"h": b"x"})]
    assert pack(rows) == (
        MAGIC
        + b"\x02"  # two rows
        + b"\x00"
        + b"\x02v1"
        + b"\x00"  # no key, value, no headers
        + b"\x01"
        + b"\x01k"
        + b"\x02v2"
        + b"\x01"
        + b"\x01h"
        + b"\x01x"
    )


@given(rows_strategy)
def test_round_trip_and_size(rows: list[PackedRow]) -> None:
    data = pack(rows)
    back = unpack(data)
    assert [(r.value, r.key, dict(r.headers or {})) for r in back] == [
        (r.value, r.key, dict(r.headers or {})) for r in rows
    ]
    count_bytes = len(data) - 4 - sum(packed_size(r) for r in rows)
    assert 1 <= count_bytes <= 2  # the row count's varint (40 rows at most here)


def test_long_values_use_multi_byte_lengths() -> None:
    big = PackedRow(b"x" * 70_000, key=b"k" * 200)
    assert unpack(pack([big])) == [PackedRow(big.value, big.key, None)]


def test_an_empty_pack_is_refused() -> None:
    with pytest.raises(InvalidInputError):
        pack([])


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (b"", "magic"),
        (b"LBP0\x01\x00\x00\x00", "magic"),
        (MAGIC, "varint"),
        (MAGIC + b"\x00", "row count"),
        (MAGIC + b"\xff\xff\xff\xff\x0f" + b"\x00" * 10, "row count"),
        (MAGIC + b"\x01\x00\x05ab\x00", "announced"),
        (MAGIC + b"\x01\x04\x00\x00", "flags"),
        (MAGIC + b"\x01\x00\x00\x00junk", "after the last row"),
        (MAGIC + b"\x01\x00\x00\x01\x01\xff\x00", "UTF-8"),
        (MAGIC + b"\x01" + b"\x80" * 20, "varint"),
    ],
)
def test_damaged_values_are_framing_errors(value: bytes, message: str) -> None:
    with pytest.raises(FramingError, match=message):
        unpack(value)


@given(st.binary(max_size=200))
def test_any_bytes_unpack_or_raise_framing_error(data: bytes) -> None:
    try:
        rows = unpack(MAGIC + data)
    except FramingError:
        return
    # What decodes is rows that survive a round trip (a non-minimal varint decodes too).
    assert rows
    assert unpack(pack(rows)) == rows


def test_the_header_marks_a_packed_message() -> None:
    assert packed_headers(12) == {PACKED_HEADER: b"12"}
    assert is_packed({PACKED_HEADER: b"3", "other": b""})
    assert not is_packed({"other": b""})


def test_a_packer_closes_packs_at_the_row_and_byte_bounds() -> None:
    from liftbridge_client.packing import Packer

    packer = Packer(max_rows=3, max_bytes=100)
    small = PackedRow(b"x" * 10)  # 12 bytes packed
    assert packer.add(small) == []
    assert packer.add(small) == []
    assert packer.add(small) == [[small] * 3]  # the row bound
    big = PackedRow(b"y" * 95)  # 97 bytes: with one small row it would pass 100
    assert packer.add(small) == []
    assert packer.add(big) == [[small]]  # the waiting row leaves first
    assert packer.flush() == [[big]]
    huge = PackedRow(b"z" * 500)  # alone beyond the bound: a pack of its own
    assert packer.add(huge) == [[huge]]
    assert packer.flush() == []


@given(st.lists(st.binary(max_size=60), min_size=1, max_size=200), st.integers(1, 20))
def test_packs_are_the_rows_in_order_and_the_same_every_time(
    values: list[bytes], max_rows: int
) -> None:
    from liftbridge_client.packing import Packer

    def packs() -> list[list[PackedRow]]:
        packer = Packer(max_rows, max_bytes=300)
        out = [p for v in values for p in packer.add(PackedRow(v))]
        return out + packer.flush()

    first = packs()
    assert first == packs()  # a retried task builds the same packs
    assert [r.value for p in first for r in p] == values
    assert all(1 <= len(p) <= max_rows for p in first)
