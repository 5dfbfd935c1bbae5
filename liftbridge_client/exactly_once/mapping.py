"""Mapping of message keys to a stream's partitions (pure, no IO), after Gazette.

- `ModuloMapping`: 32-bit FNV-1a of the key modulo the number of partitions (stable while
  the partition count is stable);
- `RendezvousMapping`: highest random weight: the partition whose name hash XOR the key
  hash is largest (the first one on ties). Adding or removing a partition moves only the
  keys that it wins or loses. A partition is named ``"<stream>/<partition>"``;
- `RandomMapping`: any partition, uniformly.

A mapping sees the partition list the publisher last read from metadata, so it follows
partitions added to a stream. These functions choose exactly as Gazette's ModuloMapping and
RendezvousMapping do for the same names.
"""

# tests/interop/gazette checks the choices against Gazette's own.

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Protocol

from liftbridge_client import errors
from liftbridge_client._native import speedups

__all__ = [
    "Mapping",
    "ModuloMapping",
    "RandomMapping",
    "RendezvousMapping",
    "fnv1a_32",
    "key_hash",
    "modulo_index",
    "partition_name",
    "rendezvous_index",
]

_FNV32_OFFSET = 0x811C9DC5
_FNV32_PRIME = 0x01000193


def fnv1a_32(data: bytes) -> int:
    """The 32-bit FNV-1a hash of ``data``."""
    h = _FNV32_OFFSET
    for byte in data:
        h = ((h ^ byte) * _FNV32_PRIME) & 0xFFFF_FFFF
    return h


# The C twin (liftbridge_client/_speedups.c) when it is built; it takes exact bytes only.
_fnv1a_32_of_bytes = fnv1a_32 if speedups is None else speedups.fnv1a_32


def key_hash(key: bytes) -> int:
    """The FNV-1a hash the mappings take of ``key`` (in C for exact bytes)."""
    return _fnv1a_32_of_bytes(key) if type(key) is bytes else fnv1a_32(key)


def partition_name(stream: str, partition: int) -> str:
    """The name a partition is hashed under by `RendezvousMapping`."""
    return f"{stream}/{partition}"


def modulo_index(key: bytes, count: int) -> int:
    """The index among ``count`` candidates that `ModuloMapping` picks for ``key``."""
    if count <= 0:
        raise errors.InvalidInputError("partitions must not be empty")
    return key_hash(key) % count


def rendezvous_index(key: bytes, name_hashes: Sequence[int]) -> int:
    """The index of the highest weight ``fnv1a(key) ^ name_hash`` (first on ties; 0 when
    every weight is 0)."""
    if not name_hashes:
        raise errors.InvalidInputError("partitions must not be empty")
    hashed = key_hash(key)
    best, index = 0, 0
    for i, name_hash in enumerate(name_hashes):
        weight = hashed ^ name_hash
        if weight > best:
            best, index = weight, i
    return index


class Mapping(Protocol):
    """Chooses one of ``partitions`` (non-empty, as listed in metadata) for a message."""

    def choose(self, stream: str, key: bytes | None, partitions: Sequence[int]) -> int: ...


def _check(partitions: Sequence[int]) -> None:
    if not partitions:
        raise errors.InvalidInputError(
            "partitions must not be empty (is the stream in the metadata?)"
        )


def _key(key: bytes | None) -> bytes:
    if key is None:
        return b""
    if type(key) is not bytes:
        raise errors.InvalidInputError("key must be bytes or None")
    return key


class ModuloMapping:
    def choose(self, stream: str, key: bytes | None, partitions: Sequence[int]) -> int:
        _check(partitions)
        return partitions[modulo_index(_key(key), len(partitions))]


class RendezvousMapping:
    """Keeps the name hashes of the last partition list it saw, per stream."""

    def __init__(self) -> None:
        self._hashes: dict[str, tuple[tuple[int, ...], list[int]]] = {}

    def choose(self, stream: str, key: bytes | None, partitions: Sequence[int]) -> int:
        _check(partitions)
        listed = tuple(partitions)
        cached = self._hashes.get(stream)
        if cached is None or cached[0] != listed:
            hashes = [fnv1a_32(partition_name(stream, p).encode()) for p in listed]
            cached = (listed, hashes)
            self._hashes[stream] = cached
        return listed[rendezvous_index(_key(key), cached[1])]


class RandomMapping:
    def __init__(self, rng: random.Random | None = None) -> None:
        self._rng = rng or random.Random()

    def choose(self, stream: str, key: bytes | None, partitions: Sequence[int]) -> int:
        _check(partitions)
        return partitions[self._rng.randrange(len(partitions))]
