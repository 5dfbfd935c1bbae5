"""The pure parts of the v1.9.0 cursor workaround: reading a ``__cursors`` record's
offset, and the wake key that lands in a chosen cursors partition."""

from __future__ import annotations

import pytest

from liftbridge_client._cluster.admin import CURSORS_STREAM, cursor_key, cursors_partition
from liftbridge_client._cluster.cursor_log import WAKE_ID, stored_offset, wake_target


def varint(n: int) -> bytes:
    n &= (1 << 64) - 1  # int64 as protobuf sends it: two's complement, 10 bytes if negative
    out = bytearray()
    while True:
        byte, n = n & 0x7F, n >> 7
        out.append(byte | (0x80 if n else 0))
        if not n:
            return bytes(out)


def record(stream: str, partition: int, cursor_id: str, offset: int) -> bytes:
    """The server's Cursor message as proto3 writes it (zero values left out)."""
    out = bytearray()
    for field, text in ((1, stream), (3, cursor_id)):
        data = text.encode()
        out += varint(field << 3 | 2) + varint(len(data)) + data
    if partition:
        out += varint(2 << 3) + varint(partition)
    if offset:
        out += varint(4 << 3) + varint(offset)
    return bytes(out)


@pytest.mark.parametrize("offset", [5, 0, -1, 300, 2**62, 2**63 - 1])
def test_stored_offset_reads_field_4_as_int64(offset: int) -> None:
    assert stored_offset(record("orders", 3, "reader", offset)) == offset
    assert stored_offset(record("orders", 0, "reader", offset)) == offset


def test_an_empty_record_is_offset_0_and_a_broken_one_is_refused() -> None:
    assert stored_offset(b"") == 0
    good = record("orders", 1, "reader", 41)
    with pytest.raises(ValueError, match="truncated"):
        stored_offset(good[:-1] + b"\x80")  # a varint that never ends
    with pytest.raises(ValueError, match="truncated"):
        stored_offset(b"\x0a\x10ab")  # a string longer than the record
    with pytest.raises(ValueError, match="wire type"):
        stored_offset(b"\x0b")  # wire type 3 (groups) is not in the message


@pytest.mark.parametrize("partitions", [1, 2, 3, 7, 16])
def test_the_wake_key_lands_in_each_cursors_partition(partitions: int) -> None:
    for owner in range(partitions):
        target = wake_target(owner, partitions)
        assert cursors_partition(cursor_key(WAKE_ID, CURSORS_STREAM, target), partitions) == owner
