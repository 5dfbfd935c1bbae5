"""Many rows in one Liftbridge message: the packed framing (pure, no IO).

Each Liftbridge message costs the server and the client a fixed amount of work, whatever
its size; a writer that packs many small rows into one message pays it once per pack. The
Spark sink does so when asked (option ``packRows``); this project's readers (the Spark
source, and `unpack` for your own) give back the rows.

A packed message carries the header ``lb-packed`` (the number of rows, ASCII) and a value:

- the magic ``LBP1`` (4 bytes);
- the row count (varint);
- per row: a flags varint (bit 0: the row has a key), the key (varint length and bytes)
  when it has one, the value (varint length and bytes), the number of headers (varint),
  and per header its name (varint length and UTF-8 bytes) and value (varint length and
  bytes).

Varints are unsigned LEB128, as protobuf's. A message without the header is one row as it
is, so packed and plain messages can share a stream. An exactly-once pack also carries
``eo-clocks`` (its row count: each row has a clock, the UUID the last row's; see
`liftbridge_client.exactly_once.publisher.CLOCKS_HEADER`). Other clients see one message with
the header and an opaque value: they must not take it for one row (the header says).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from liftbridge_client.errors import FramingError, InvalidInputError

__all__ = [
    "MAGIC",
    "PACKED_HEADER",
    "PACK_BYTES",
    "PackedRow",
    "Packer",
    "is_packed",
    "pack",
    "packed_headers",
    "packed_size",
    "unpack",
]

PACKED_HEADER = "lb-packed"
MAGIC = b"LBP1"

_HAS_KEY = 1


@dataclass(frozen=True, slots=True)
class PackedRow:
    """One row of a packed message."""

    value: bytes
    key: bytes | None = None
    headers: Mapping[str, bytes] | None = None


def _varint(n: int, out: bytearray) -> None:
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)


def _varint_size(n: int) -> int:
    size = 1
    while n >= 0x80:
        n >>= 7
        size += 1
    return size


def packed_size(row: PackedRow) -> int:
    """The bytes ``row`` adds to a pack (to bound a pack by size before building it)."""
    size = 1 + _varint_size(len(row.value)) + len(row.value)
    if row.key is not None:
        size += _varint_size(len(row.key)) + len(row.key)
    headers = row.headers or {}
    size += _varint_size(len(headers))
    for name, data in headers.items():
        encoded = len(name.encode())
        size += _varint_size(encoded) + encoded + _varint_size(len(data)) + len(data)
    return size


def pack(rows: Sequence[PackedRow]) -> bytes:
    """The value of a packed message holding ``rows`` (at least one), in order."""
    if not rows:
        raise InvalidInputError("a pack holds at least one row")
    out = bytearray(MAGIC)
    _varint(len(rows), out)
    for row in rows:
        if row.key is None:
            out.append(0)
        else:
            out.append(_HAS_KEY)
            _varint(len(row.key), out)
            out += row.key
        _varint(len(row.value), out)
        out += row.value
        headers = row.headers or {}
        _varint(len(headers), out)
        for name, data in headers.items():
            raw = name.encode()
            _varint(len(raw), out)
            out += raw
            _varint(len(data), out)
            out += data
    return bytes(out)


class _Reader:
    __slots__ = ("data", "pos")

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pos = 0

    def varint(self) -> int:
        result = shift = 0
        data, pos = self.data, self.pos
        while True:
            if pos >= len(data):
                raise FramingError("packed message: truncated varint")
            byte = data[pos]
            pos += 1
            result |= (byte & 0x7F) << shift
            if byte < 0x80:
                self.pos = pos
                return result
            shift += 7
            if shift > 63:
                raise FramingError("packed message: varint too long")

    def take(self, n: int) -> bytes:
        end = self.pos + n
        if end > len(self.data):
            raise FramingError(
                f"packed message: {n} bytes announced, {len(self.data) - self.pos} left"
            )
        chunk = self.data[self.pos : end]
        self.pos = end
        return chunk


def unpack(value: bytes) -> list[PackedRow]:
    """The rows of a packed message's value; `FramingError` when it is not one."""
    if value[:4] != MAGIC:
        raise FramingError("packed message: bad magic (not LBP1)")
    reader = _Reader(value)
    reader.pos = 4
    count = reader.varint()
    # Every row takes at least 3 bytes: a count beyond that is a damaged message.
    if count == 0 or count > (len(value) - reader.pos) // 3:
        raise FramingError(f"packed message: impossible row count {count}")
    rows = []
    for _ in range(count):
        flags = reader.varint()
        if flags & ~_HAS_KEY:
            raise FramingError(f"packed message: unknown row flags {flags:#x}")
        key = reader.take(reader.varint()) if flags & _HAS_KEY else None
        data = reader.take(reader.varint())
        n_headers = reader.varint()
        headers: dict[str, bytes] | None = None
        if n_headers:
            headers = {}
            for _ in range(n_headers):
                try:
                    name = reader.take(reader.varint()).decode()
                except UnicodeDecodeError as exc:
                    raise FramingError("packed message: a header name is not UTF-8") from exc
                headers[name] = reader.take(reader.varint())
        rows.append(PackedRow(data, key, headers))
    if reader.pos != len(value):
        raise FramingError(f"packed message: {len(value) - reader.pos} bytes after the last row")
    return rows


# Below the server's default message limit (clustering.replication.max.bytes, 1 MiB), with
# room for the envelope and headers.
PACK_BYTES = 768 * 1024


class Packer:
    """Rows waiting for their pack: a pack is full at ``max_rows`` rows or ``max_bytes``.

    Where a full pack ends depends only on the sequence of rows added, so a writer that adds
    the same rows again (a retried task) builds the same full packs. The last, `flush`ed
    pack depends on where the input ended, which a failed attempt does not know.
    """

    def __init__(self, max_rows: int, max_bytes: int = PACK_BYTES) -> None:
        if max_rows < 1 or max_bytes < 1:
            raise InvalidInputError("a pack holds at least one row and one byte")
        self._max_rows = max_rows
        self._max_bytes = max_bytes
        self._rows: list[PackedRow] = []
        self._size = 0

    def add(self, row: PackedRow) -> list[list[PackedRow]]:
        """The packs ``row`` completes: none, or one (or two when ``row`` alone exceeds
        ``max_bytes``: it then travels in a pack of its own)."""
        size = packed_size(row)
        done = []
        if self._rows and self._size + size > self._max_bytes:
            done.append(self._take())
        self._rows.append(row)
        self._size += size
        if len(self._rows) >= self._max_rows or self._size >= self._max_bytes:
            done.append(self._take())
        return done

    def flush(self) -> list[list[PackedRow]]:
        """The last, partial pack (if any rows wait)."""
        return [self._take()] if self._rows else []

    def _take(self) -> list[PackedRow]:
        rows, self._rows, self._size = self._rows, [], 0
        return rows


def is_packed(headers: Mapping[str, bytes]) -> bool:
    """Whether a message with these headers is packed (its writer set `PACKED_HEADER`)."""
    return PACKED_HEADER in headers


def packed_headers(count: int) -> dict[str, bytes]:
    """The headers of a packed message holding ``count`` rows."""
    return {PACKED_HEADER: str(count).encode()}
