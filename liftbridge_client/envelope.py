"""The Liftbridge envelope: the header in front of every Liftbridge message on NATS.

Pure functions over bytes; no IO. Layout (big-endian)::

    0..3   magic  B9 0E 43 B4
    4      version (0)
    5      HeaderLen: offset of the payload (8, or 12 with a CRC)
    6      flags: bit 0 = CRC-32C present
    7      MsgType
    8..11  CRC-32C (Castagnoli) of data[HeaderLen:], only with the CRC flag

`decode` validates in this order and raises the first failure as a typed
`EnvelopeError`: length, magic, version, HeaderLen bounds, CRC layout, CRC
value, known type, expected type. For any input it raises nothing else.

An envelope whose payload is empty (HeaderLen == len(data)) is accepted: the
server accepts it too (it stores an empty message), whereas go-liftbridge
rejects anything of 8 bytes or fewer. Accepting it keeps decode total over
what the server itself may send.
"""

from __future__ import annotations

import enum
import functools
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TypeVar

from liftbridge_client._native import speedups
from liftbridge_client._proto import api_pb2
from liftbridge_client.errors import (
    BadHeaderLengthError,
    BadMagicError,
    CrcMismatchError,
    EnvelopeTooShortError,
    InvalidInputError,
    PayloadDecodeError,
    UnexpectedMessageTypeError,
    UnknownMessageTypeError,
    UnsupportedVersionError,
)

__all__ = [
    "FLAG_CRC",
    "HEADER_LEN",
    "HEADER_LEN_WITH_CRC",
    "MAGIC",
    "VERSION",
    "Envelope",
    "MsgType",
    "decode",
    "decode_ack",
    "decode_message",
    "encode",
    "encode_ack",
    "encode_message",
]

MAGIC = b"\xb9\x0e\x43\xb4"
VERSION = 0
HEADER_LEN = 8
HEADER_LEN_WITH_CRC = 12
FLAG_CRC = 0x01

# The server refuses a header key this long by crashing; keys are checked here.
MAX_HEADER_KEY_BYTES = 32767


class MsgType(enum.IntEnum):
    """The envelope's message type byte. Only PUBLISH and ACK concern clients."""

    PUBLISH = 0
    ACK = 1
    REPLICATION_REQUEST = 2
    REPLICATION_RESPONSE = 3
    RAFT_JOIN_REQUEST = 4
    RAFT_JOIN_RESPONSE = 5
    LEADER_EPOCH_OFFSET_REQUEST = 6
    LEADER_EPOCH_OFFSET_RESPONSE = 7
    PROPAGATED_REQUEST = 8
    PROPAGATED_RESPONSE = 9
    SERVER_INFO_REQUEST = 10
    SERVER_INFO_RESPONSE = 11
    PARTITION_STATUS_REQUEST = 12
    PARTITION_STATUS_RESPONSE = 13
    PARTITION_NOTIFICATION = 14


_MSG_TYPES = tuple(MsgType)

# Precomputed headers without CRC, by type (hot paths: encode, and decode_ack which accepts
# the exact header the server sends without re-checking it field by field).
_HEADERS = tuple(MAGIC + bytes((VERSION, HEADER_LEN, 0, t)) for t in MsgType)
_ACK_HEADER = _HEADERS[MsgType.ACK]
_Message = api_pb2.Message


@dataclass(frozen=True, slots=True)
class Envelope:
    """A decoded envelope: its type, raw flag byte and payload."""

    msg_type: MsgType
    flags: int
    payload: bytes

    @property
    def has_crc(self) -> bool:
        return bool(self.flags & FLAG_CRC)


@functools.cache
def _crc32c() -> Callable[[bytes], int]:
    # The crc32c package loads at the first CRC: its import brings importlib.metadata and
    # argparse (a tenth of this package's import time), for a flag few envelopes carry.
    import crc32c

    return crc32c.crc32c


def crc32c(data: bytes) -> int:
    """CRC-32C of ``data`` (the Castagnoli polynomial, as the envelope's CRC field)."""
    return _crc32c()(data)


def encode(msg_type: MsgType, payload: bytes, *, crc: bool = False) -> bytes:
    """Prefix ``payload`` with an envelope header of type ``msg_type``."""
    if crc:
        return (
            MAGIC
            + bytes((VERSION, HEADER_LEN_WITH_CRC, FLAG_CRC, msg_type))
            + crc32c(payload).to_bytes(4, "big")
            + payload
        )
    return _HEADERS[msg_type] + payload


def decode(data: bytes, expected: MsgType | None = None) -> Envelope:
    """Validate an envelope and split it into type, flags and payload."""
    size = len(data)
    if size < HEADER_LEN:
        raise EnvelopeTooShortError(f"envelope needs at least {HEADER_LEN} bytes, got {size}")
    if data[:4] != MAGIC:
        raise BadMagicError(f"bad magic number {bytes(data[:4]).hex()}")
    version = data[4]
    if version != VERSION:
        raise UnsupportedVersionError(f"unsupported envelope version {version}")
    header_len = data[5]
    if header_len < HEADER_LEN or header_len > size:
        raise BadHeaderLengthError(f"HeaderLen {header_len} outside [{HEADER_LEN}, {size}]")
    flags = data[6]
    payload = bytes(data[header_len:])
    if flags & FLAG_CRC:
        if header_len != HEADER_LEN_WITH_CRC:
            raise BadHeaderLengthError(
                f"CRC flag set but HeaderLen is {header_len}, not {HEADER_LEN_WITH_CRC}"
            )
        stated = int.from_bytes(data[8:12], "big")
        actual = crc32c(payload)
        if stated != actual:
            raise CrcMismatchError(
                f"CRC-32C mismatch: header {stated:#010x}, payload {actual:#010x}"
            )
    type_byte = data[7]
    if type_byte >= len(_MSG_TYPES):
        raise UnknownMessageTypeError(f"unknown message type {type_byte}")
    msg_type = _MSG_TYPES[type_byte]
    if expected is not None and msg_type is not expected:
        raise UnexpectedMessageTypeError(f"expected {expected.name}, got {msg_type.name}")
    return Envelope(msg_type, flags, payload)


def encode_message(
    value: bytes,
    *,
    key: bytes = b"",
    headers: Mapping[str, bytes] | None = None,
    ack_inbox: str = "",
    correlation_id: str = "",
    ack_policy: int = api_pb2.LEADER,
    expected_offset: int = -1,
    crc: bool = False,
) -> bytes:
    """Build an enveloped Publish: the bytes to send on a stream's NATS subject.

    ``expected_offset`` travels in Message.offset; -1 asks for no check. The
    default matters: a 0 there would fail every publish on an OCC stream
    whose partition is not empty.
    """
    if (
        expected_offset == -1
        and not key
        and not headers
        and type(value) is bytes
        and value
        and type(ack_inbox) is str
        and type(correlation_id) is str
        and correlation_id
        and type(ack_policy) is not bool
    ):
        policy_field = _POLICY_FIELDS.get(ack_policy)
        if policy_field is not None:
            try:
                inbox_field = _INBOX_FIELDS.get(ack_inbox)
                if inbox_field is None:
                    inbox_field = _inbox_field(ack_inbox)
                cid = correlation_id.encode()
            except UnicodeEncodeError:
                pass  # the general path below reports it
            else:
                # Hot path: the Message's wire bytes built directly, exactly as
                # SerializeToString lays them out (fields in number order, defaults omitted).
                payload = b"".join(
                    (
                        _OFFSET_NO_CHECK,
                        b"\x1a",
                        _SMALL_VARINTS[size] if (size := len(value)) < 0x80 else _varint(size),
                        value,
                        inbox_field,
                        b"\x5a",
                        _SMALL_VARINTS[n] if (n := len(cid)) < 0x80 else _varint(n),
                        cid,
                        policy_field,
                    )
                )
                return encode(MsgType.PUBLISH, payload, crc=crc)
    try:
        # Only non-default fields go to the constructor (each keyword costs).
        msg = _Message(
            offset=expected_offset,
            value=value,
            ackInbox=ack_inbox,
            correlationId=correlation_id,
        )
        if key:
            msg.key = key
        if ack_policy:
            msg.ackPolicy = ack_policy  # type: ignore[assignment]
        if headers:
            check_header_keys(headers)
            msg.headers.update(headers)
    except InvalidInputError:
        raise
    except ValueError as exc:  # an integer out of range, a str that is not valid UTF-8
        raise InvalidInputError(f"cannot encode message: {exc}") from exc
    return encode(MsgType.PUBLISH, msg.SerializeToString(), crc=crc)


def encode_message_plain(
    value: bytes,
    ack_inbox: str,
    correlation_id: str,
    ack_policy: int,
    key: bytes = b"",
    header_entries: bytes = b"",
    headers: Mapping[str, bytes] | None = None,
    /,
) -> bytes:
    """`encode_message` of a message with no offset check or CRC (and at most a key and
    plain headers): the same bytes, fewer checks (the publisher's hot path; its arguments
    are validated already). ``header_entries`` are ``headers`` as `plain_header_entries`
    encodes them for field 9; ``headers`` itself serves only the general fallback."""
    if value and correlation_id and type(ack_policy) is not bool:
        policy_field = _POLICY_FIELDS.get(ack_policy)
        inbox_field = _INBOX_FIELDS.get(ack_inbox)
        if inbox_field is None and ack_inbox.isascii():
            # Cached here too: a keyed message's fallback (protobuf) would never cache it.
            inbox_field = _inbox_field(ack_inbox)
        if policy_field is not None and inbox_field is not None and correlation_id.isascii():
            cid = correlation_id.encode()
            size = len(value)
            # Field 2 (key) comes between the offset and the value, as protobuf orders it.
            head = _PUBLISH_HEAD if not key else _keyed_head(key)
            return b"".join(
                (
                    head,
                    _SMALL_VARINTS[size] if size < 0x80 else _varint(size),
                    value,
                    header_entries,  # field 9, between the value and the inbox
                    inbox_field,
                    b"\x5a",
                    _SMALL_VARINTS[n] if (n := len(cid)) < 0x80 else _varint(n),
                    cid,
                    policy_field,
                )
            )
    return encode_message(
        value,
        key=key,
        headers=headers,
        ack_inbox=ack_inbox,
        correlation_id=correlation_id,
        ack_policy=ack_policy,
    )


# Headers on the one-step paths: at most this many, exact str names and bytes values;
# anything else takes the general path, which validates and says what is wrong.
MAX_PLAIN_HEADERS = 8
# Map field tags: Message.headers (9) and PublishRequest.headers (5), length-delimited.
MESSAGE_HEADERS_TAG = 0x4A
REQUEST_HEADERS_TAG = 0x2A
# A header name's entry bytes up to its value's length: field 1 (the name), field 2's tag.
# Writers send the same few names with every message (the Spark sink: lbspark-id).
_HEADER_NAMES: dict[str, bytes] = {}
_HEADER_NAMES_MAX = 256  # the cache starts over beyond this many names


def plain_header_entries_twin(headers: object, tag: int) -> bytes | None:
    """The wire bytes of a ``map<string, bytes>`` field (tag byte ``tag``) holding
    ``headers``, or None outside the plain case (not exactly a dict, too many entries, a
    name that is not an exact str encoding to at most MAX_HEADER_KEY_BYTES, a value that is
    not exact bytes). An empty dict gives b"": the general path sends no headers for it.

    Entries go in the dict's order. Protobuf fixes no order for map entries, and the
    general path has none to match: Python's upb writes a map in hash-table order, which
    differs from one process to the next. The server decodes the map into a Go map
    (tests/integration/test_publish_headers.py pins that the order does not matter).
    """
    if type(headers) is not dict or len(headers) > MAX_PLAIN_HEADERS:
        return None
    head = bytes((tag,))
    if len(headers) == 1:  # the common case (the Spark sink's one header): no list
        for name, value in headers.items():
            return _header_entry(head, name, value)
    entries = []
    for name, value in headers.items():
        entry = _header_entry(head, name, value)
        if entry is None:
            return None
        entries.append(entry)
    return b"".join(entries)


def _header_entry(tag: bytes, name: object, value: object) -> bytes | None:
    """One map entry (upb writes both fields even when empty, as this does)."""
    if type(name) is not str or type(value) is not bytes:
        return None
    head = _HEADER_NAMES.get(name)
    if head is None:
        try:
            raw = name.encode()
        except UnicodeEncodeError:
            return None
        if len(raw) > MAX_HEADER_KEY_BYTES:
            return None
        head = b"\x0a" + _varint(len(raw)) + raw + b"\x12"
        if len(_HEADER_NAMES) >= _HEADER_NAMES_MAX:
            _HEADER_NAMES.clear()
        _HEADER_NAMES[name] = head
    size = len(value)
    value_size = _SMALL_VARINTS[size] if size < 0x80 else _varint(size)
    return b"".join((tag, _varint(len(head) + len(value_size) + size), head, value_size, value))


# What the publish paths call: the C twin (liftbridge_client/_speedups.c) when it is built.
plain_header_entries: Callable[[object, int], bytes | None] = (
    plain_header_entries_twin if speedups is None else speedups.header_entries
)


def plain_parts(
    ack_inbox: str, ack_policy: int, key: bytes = b""
) -> tuple[bytes, bytes, bytes] | None:
    """The fixed parts of `encode_message_plain`'s bytes: what comes before the value's
    length (the envelope header up to field 3's tag), the ack inbox field and the ack
    policy field; None when it would take the general path for these arguments.

    For builders of the same bytes in one piece (the C accelerator's publish_command)."""
    if type(ack_policy) is bool:
        return None
    policy_field = _POLICY_FIELDS.get(ack_policy)
    inbox_field = _INBOX_FIELDS.get(ack_inbox)
    if inbox_field is None and ack_inbox.isascii():
        inbox_field = _inbox_field(ack_inbox)
    if policy_field is None or inbox_field is None:
        return None
    return (_PUBLISH_HEAD if not key else _keyed_head(key)), inbox_field, policy_field


def _keyed_head(key: bytes) -> bytes:
    size = len(key)
    return b"".join(
        (_KEYED_HEAD, _SMALL_VARINTS[size] if size < 0x80 else _varint(size), key, b"\x1a")
    )


# Message field 1 (offset) = -1: a varint of the 64-bit two's complement (10 bytes).
_OFFSET_NO_CHECK = b"\x08" + b"\xff" * 9 + b"\x01"
# The envelope header, then Message fields 1 (offset -1) and 3 (value)'s tag.
_PUBLISH_HEAD = _HEADERS[MsgType.PUBLISH] + _OFFSET_NO_CHECK + b"\x1a"
# The same with field 2 (key)'s tag instead: its length, the key and the value's tag follow.
_KEYED_HEAD = _HEADERS[MsgType.PUBLISH] + _OFFSET_NO_CHECK + b"\x12"
# Message field 12 (ackPolicy) by value; 0 (LEADER) is the default and is omitted.
_POLICY_FIELDS: dict[int, bytes] = {
    api_pb2.LEADER: b"",
    api_pb2.ALL: b"\x60" + bytes((api_pb2.ALL,)),
    api_pb2.NONE: b"\x60" + bytes((api_pb2.NONE,)),
}
_SMALL_VARINTS = tuple(bytes((n,)) for n in range(0x80))


# Message field 10 (ackInbox) by inbox: a client sends the same one with every publish.
_INBOX_FIELDS: dict[str, bytes] = {}
_INBOX_FIELDS_MAX = 64  # clients come and go: the cache starts over beyond this many
# Two-byte varints (value sizes of 128 B..16 KiB), filled as sizes are seen.
_VARINTS: dict[int, bytes] = {}


def _inbox_field(ack_inbox: str) -> bytes:
    inbox = ack_inbox.encode()
    field = b"\x52" + _varint(len(inbox)) + inbox if inbox else b""
    if len(_INBOX_FIELDS) >= _INBOX_FIELDS_MAX:
        _INBOX_FIELDS.clear()
    _INBOX_FIELDS[ack_inbox] = field
    return field


def _varint(n: int) -> bytes:
    """A non-negative int as a protobuf varint."""
    if n < 0x80:
        return _SMALL_VARINTS[n]
    cached = _VARINTS.get(n)
    if cached is not None:
        return cached
    out = bytearray()
    m = n
    while m >= 0x80:
        out.append((m & 0x7F) | 0x80)
        m >>= 7
    out.append(m)
    encoded = bytes(out)
    if n < 0x4000:
        _VARINTS[n] = encoded
    return encoded


def check_header_keys(headers: Mapping[str, bytes]) -> None:
    """Reject header keys the server cannot store (an oversized key crashes it)."""
    for name in headers:
        try:
            size = len(name.encode())
        except UnicodeEncodeError as exc:
            raise InvalidInputError(f"header key {name!r} is not valid UTF-8") from exc
        if size > MAX_HEADER_KEY_BYTES:
            raise InvalidInputError(f"header key of {size} bytes exceeds {MAX_HEADER_KEY_BYTES}")


def decode_message(data: bytes) -> api_pb2.Message:
    """Parse an enveloped Publish back into its Message (tests, interop, proxies)."""
    return _parse(api_pb2.Message, decode(data, MsgType.PUBLISH).payload)


def encode_ack(ack: api_pb2.Ack, *, crc: bool = False) -> bytes:
    """Envelope an Ack as the server does (the server itself never sets the CRC)."""
    return encode(MsgType.ACK, ack.SerializeToString(), crc=crc)


def decode_ack(data: bytes) -> api_pb2.Ack:
    """Parse an enveloped Ack as it arrives on an ack inbox."""
    if data[:HEADER_LEN] == _ACK_HEADER:
        # Hot path: the exact header the server sends (no CRC, HeaderLen 8); the checks of
        # decode() would all pass, so skip straight to the payload.
        return _parse(api_pb2.Ack, data[HEADER_LEN:])
    return _parse(api_pb2.Ack, decode(data, MsgType.ACK).payload)


_Proto = TypeVar("_Proto", api_pb2.Message, api_pb2.Ack)


def _parse(cls: type[_Proto], payload: bytes) -> _Proto:
    msg = cls()
    try:
        msg.ParseFromString(payload)
    except Exception as exc:  # protobuf raises DecodeError and, for some inputs, others
        raise PayloadDecodeError(f"{cls.__name__} payload does not decode: {exc}") from exc
    return msg
