"""Partitioners: go-liftbridge compatible key hashing, round robin, and the precedence rules."""

from __future__ import annotations

import zlib

import pytest
from hypothesis import given
from hypothesis import strategies as st

from liftbridge_client.errors import InvalidInputError
from liftbridge_client.partitioning import (
    KeyPartitioner,
    RoundRobinPartitioner,
    choose_partition,
    key_partition,
)


@pytest.mark.parametrize(
    ("key", "partitions", "expected"),
    [
        # go-liftbridge's vectors; 0xF6103C0F > 2**31 catches a signed implementation.
        (b"foobarbazqux", 2, 1),
        (b"blah", 2, 0),
        (b"foo", 3, 2),
        (None, 5, 0),
        (b"", 5, 0),
        (b"anything", 1, 0),
    ],
)
def test_key_partition_vectors(key: bytes | None, partitions: int, expected: int) -> None:
    assert key_partition(key, partitions) == expected
    assert KeyPartitioner()("s", key, b"v", partitions) == expected


def test_the_vector_is_above_2_to_the_31() -> None:
    # The vector only guards against a signed implementation if its CRC has the top bit set.
    assert zlib.crc32(b"foobarbazqux") == 0xF6103C0F > 2**31


@given(st.binary(min_size=1), st.integers(min_value=1, max_value=1000))
def test_key_partition_in_range_and_stable(key: bytes, partitions: int) -> None:
    p = key_partition(key, partitions)
    assert 0 <= p < partitions
    assert p == zlib.crc32(key) % partitions == key_partition(bytes(key), partitions)


def test_key_partition_rejects_no_partitions() -> None:
    with pytest.raises(InvalidInputError):
        key_partition(b"k", 0)


def test_round_robin_cycles_per_stream() -> None:
    rr = RoundRobinPartitioner()
    assert [rr("a", None, b"", 3) for _ in range(7)] == [0, 1, 2, 0, 1, 2, 0]
    assert [rr("b", None, b"", 2) for _ in range(3)] == [0, 1, 0]
    assert rr("a", None, b"", 3) == 1  # stream "a" went on where it was
    with pytest.raises(InvalidInputError):
        rr("a", None, b"", 0)


def test_round_robin_counter_stays_small() -> None:
    rr = RoundRobinPartitioner()
    for _ in range(10_000):
        rr("s", None, b"", 4)
    assert rr._next["s"] < 4
    # The partition count may change between calls (another stream of the same name).
    assert rr("s", None, b"", 2) in (0, 1)


def test_precedence_explicit_partition_first() -> None:
    def never(stream: str, key: bytes | None, value: bytes, n: int) -> int:
        raise AssertionError("not called")

    assert choose_partition("s", b"foo", b"v", 3, partition=1, partitioner=never) == 1


def test_precedence_partitioner_before_key() -> None:
    assert choose_partition("s", b"foo", b"v", 3, partitioner=lambda *a: 0) == 0


def test_a_key_alone_does_not_choose_a_partition() -> None:
    # go-liftbridge's precedence: no partitioner means partition 0, keyed or not.
    assert choose_partition("s", b"foo", b"v", 3) == 0
    assert choose_partition("s", b"foo", b"v", 3, partitioner=KeyPartitioner()) == 2
    assert choose_partition("s", None, b"v", 3) == 0
    assert choose_partition("s", b"", b"v", 3) == 0


@pytest.mark.parametrize("bad", [-1, 3, 99, True, 1.0, "1", None])
def test_partitioner_result_is_checked(bad: object) -> None:
    with pytest.raises(InvalidInputError, match=r"partitions 0\.\.2"):
        choose_partition("s", None, b"v", 3, partitioner=lambda *a: bad)  # type: ignore[arg-type]


@pytest.mark.parametrize("bad", [-1, 3])
def test_explicit_partition_is_checked(bad: int) -> None:
    with pytest.raises(InvalidInputError, match=r"stream 's' has partitions 0\.\.2"):
        choose_partition("s", None, b"v", 3, partition=bad)


def test_partitioner_receives_its_arguments() -> None:
    seen: list[tuple[str, bytes | None, bytes, int]] = []

    def record(stream: str, key: bytes | None, value: bytes, n: int) -> int:
        seen.append((stream, key, value, n))
        return n - 1

    assert choose_partition("orders", b"k", b"v", 4, partitioner=record) == 3
    assert seen == [("orders", b"k", b"v", 4)]
