"""The Liftbridge envelope codec against the spec (shared/seeds/000-002) and server behaviour.

Expected bytes here are written by hand from the spec, and CRC-32C values come from the
independent table implementation below, never from the code under test.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

import crc32c
import pytest
from budget import examples
from hypothesis import given, settings
from hypothesis import strategies as st

from liftbridge_client import envelope
from liftbridge_client._proto import api_pb2
from liftbridge_client.envelope import Envelope, MsgType, decode, decode_ack, decode_message
from liftbridge_client.errors import (
    BadHeaderLengthError,
    BadMagicError,
    CrcMismatchError,
    EnvelopeError,
    EnvelopeTooShortError,
    InvalidInputError,
    LiftbridgeError,
    PayloadDecodeError,
    ProtocolError,
    UnexpectedMessageTypeError,
    UnknownMessageTypeError,
    UnsupportedVersionError,
)

# ---------------------------------------------------------------- an independent CRC-32C


def _crc32c_table() -> tuple[int, ...]:
    table = []
    for n in range(256):
        c = n
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1  # Castagnoli, reflected
        table.append(c)
    return tuple(table)


_CRC_TABLE = _crc32c_table()


def ref_crc32c(data: bytes) -> int:
    """Bitwise-table CRC-32C, written from the polynomial, to check the crc32c package."""
    crc = 0xFFFFFFFF
    for byte in data:
        crc = _CRC_TABLE[(crc ^ byte) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


def be32(n: int) -> bytes:
    return n.to_bytes(4, "big")


def test_reference_crc32c_standard_check_value() -> None:
    assert ref_crc32c(b"123456789") == 0xE3069283
    assert ref_crc32c(b"") == 0


def test_crc32c_package_agrees_on_check_value() -> None:
    assert crc32c.crc32c(b"123456789") == 0xE3069283


@given(st.binary(max_size=300))
@settings(max_examples=examples(200))
def test_crc32c_package_agrees_with_reference(data: bytes) -> None:
    assert crc32c.crc32c(data) == ref_crc32c(data)


# ---------------------------------------------------------------- golden bytes

MAGIC = b"\xb9\x0e\x43\xb4"

# Ack{stream "foo", partitionSubject "foo", msgSubject "foo.1", offset 42, ackInbox "inbox",
# correlationId "c-1", commitTimestamp 150}, protobuf written field by field.
ACK_PAYLOAD = (
    b"\x0a\x03foo"  # 1 stream
    b"\x12\x03foo"  # 2 partitionSubject
    b"\x1a\x05foo.1"  # 3 msgSubject
    b"\x20\x2a"  # 4 offset = 42
    b"\x2a\x05inbox"  # 5 ackInbox
    b"\x32\x03c-1"  # 6 correlationId
    b"\x48\x96\x01"  # 9 commitTimestamp = 150
)
ACK_PAYLOAD_CRC = 0x90E733D4

# Message{offset -1, key "k", value "hello", headers {"h": "v"}, ackInbox "inbox",
# correlationId "c-1", ackPolicy ALL}.
PUBLISH_PAYLOAD = (
    b"\x08" + b"\xff" * 9 + b"\x01"  # 1 offset = -1 (ten-byte varint): expected offset unchecked
    b"\x12\x01k"  # 2 key
    b"\x1a\x05hello"  # 3 value
    b"\x4a\x06\x0a\x01h\x12\x01v"  # 9 headers: one map entry {1: "h", 2: "v"}
    b"\x52\x05inbox"  # 10 ackInbox
    b"\x5a\x03c-1"  # 11 correlationId
    b"\x60\x01"  # 12 ackPolicy = ALL
)
PUBLISH_PAYLOAD_CRC = 0x78453A76

GOLDEN_ACK_PLAIN = MAGIC + b"\x00\x08\x00\x01" + ACK_PAYLOAD
GOLDEN_ACK_CRC = MAGIC + b"\x00\x0c\x01\x01" + be32(ACK_PAYLOAD_CRC) + ACK_PAYLOAD
GOLDEN_PUBLISH_CRC = MAGIC + b"\x00\x0c\x01\x00" + be32(PUBLISH_PAYLOAD_CRC) + PUBLISH_PAYLOAD


def golden_ack() -> api_pb2.Ack:
    return api_pb2.Ack(
        stream="foo",
        partitionSubject="foo",
        msgSubject="foo.1",
        offset=42,
        ackInbox="inbox",
        correlationId="c-1",
        commitTimestamp=150,
    )


def test_golden_crc_constants_match_reference() -> None:
    assert ref_crc32c(ACK_PAYLOAD) == ACK_PAYLOAD_CRC
    assert ref_crc32c(PUBLISH_PAYLOAD) == PUBLISH_PAYLOAD_CRC


def test_encode_ack_without_crc_matches_golden() -> None:
    # The server's own ack prefix (server-facts.md): B9 0E 43 B4 00 08 00 01.
    assert envelope.encode_ack(golden_ack()) == GOLDEN_ACK_PLAIN
    assert envelope.encode(MsgType.ACK, ACK_PAYLOAD) == GOLDEN_ACK_PLAIN


def test_encode_ack_with_crc_matches_golden() -> None:
    assert envelope.encode_ack(golden_ack(), crc=True) == GOLDEN_ACK_CRC
    assert envelope.encode(MsgType.ACK, ACK_PAYLOAD, crc=True) == GOLDEN_ACK_CRC


def test_encode_message_with_crc_matches_golden() -> None:
    data = envelope.encode_message(
        b"hello",
        key=b"k",
        headers={"h": b"v"},
        ack_inbox="inbox",
        correlation_id="c-1",
        ack_policy=api_pb2.ALL,
        crc=True,
    )
    assert data == GOLDEN_PUBLISH_CRC


def test_encode_message_minimal_without_crc_matches_golden() -> None:
    # expected_offset 0 and the default policy LEADER (0) are proto3 defaults: not on the wire.
    assert envelope.encode_message(b"v", expected_offset=0) == MAGIC + b"\x00\x08\x00\x00\x1a\x01v"


@pytest.mark.parametrize("data", [GOLDEN_ACK_PLAIN, GOLDEN_ACK_CRC])
def test_decode_golden_ack(data: bytes) -> None:
    env = decode(data, MsgType.ACK)
    assert env.msg_type is MsgType.ACK
    assert env.payload == ACK_PAYLOAD
    assert env.has_crc is (data[6] == 1)
    assert decode_ack(data) == golden_ack()


def test_decode_golden_publish() -> None:
    env = decode(GOLDEN_PUBLISH_CRC)
    assert env == Envelope(MsgType.PUBLISH, 0x01, PUBLISH_PAYLOAD)
    msg = decode_message(GOLDEN_PUBLISH_CRC)
    assert msg.offset == -1
    assert msg.key == b"k"
    assert msg.value == b"hello"
    assert dict(msg.headers) == {"h": b"v"}
    assert msg.ackInbox == "inbox"
    assert msg.correlationId == "c-1"
    assert msg.ackPolicy == api_pb2.ALL


def test_decode_server_error_ack() -> None:
    # An error ack as the server sends it: no CRC, no offset, ackError = INCORRECT_OFFSET (2).
    data = MAGIC + b"\x00\x08\x00\x01" + b"\x0a\x01s" + b"\x50\x02"
    ack = decode_ack(data)
    assert ack.stream == "s"
    assert ack.ackError == api_pb2.Ack.INCORRECT_OFFSET


def test_constants_match_spec() -> None:
    assert envelope.MAGIC == MAGIC
    assert envelope.VERSION == 0
    assert envelope.HEADER_LEN == 8
    assert envelope.HEADER_LEN_WITH_CRC == 12
    assert envelope.FLAG_CRC == 0x01


SPEC_MSG_TYPES = [
    (0, "PUBLISH"),
    (1, "ACK"),
    (2, "REPLICATION_REQUEST"),
    (3, "REPLICATION_RESPONSE"),
    (4, "RAFT_JOIN_REQUEST"),
    (5, "RAFT_JOIN_RESPONSE"),
    (6, "LEADER_EPOCH_OFFSET_REQUEST"),
    (7, "LEADER_EPOCH_OFFSET_RESPONSE"),
    (8, "PROPAGATED_REQUEST"),
    (9, "PROPAGATED_RESPONSE"),
    (10, "SERVER_INFO_REQUEST"),
    (11, "SERVER_INFO_RESPONSE"),
    (12, "PARTITION_STATUS_REQUEST"),
    (13, "PARTITION_STATUS_RESPONSE"),
    (14, "PARTITION_NOTIFICATION"),
]


def test_msg_types_match_spec_table() -> None:
    assert [(t.value, t.name) for t in MsgType] == SPEC_MSG_TYPES


# ---------------------------------------------------------------- decode errors, one by one


def raw(
    *,
    magic: bytes = MAGIC,
    version: int = 0,
    header_len: int | None = None,
    flags: int = 0,
    msg_type: int = 0,
    crc: int | None = None,
    payload: bytes = b"payload",
) -> bytes:
    """Assemble an envelope field by field; crc=None writes the correct CRC when flagged."""
    crc_field = b""
    if flags & 0x01:
        crc_field = be32(ref_crc32c(payload) if crc is None else crc)
    if header_len is None:
        header_len = 8 + len(crc_field)
    return magic + bytes((version, header_len, flags, msg_type)) + crc_field + payload


ERROR_CASES: list[tuple[str, bytes, MsgType | None, type[EnvelopeError]]] = [
    ("empty", b"", None, EnvelopeTooShortError),
    ("7 bytes", MAGIC + b"\x00\x08\x00", None, EnvelopeTooShortError),
    ("bad magic", raw(magic=b"\xb9\x0e\x43\xb5"), None, BadMagicError),
    ("plain text", b"hello, world", None, BadMagicError),
    ("version 1", raw(version=1), None, UnsupportedVersionError),
    ("version 255", raw(version=255), None, UnsupportedVersionError),
    ("HeaderLen 0", raw(header_len=0), None, BadHeaderLengthError),
    ("HeaderLen 7", raw(header_len=7), None, BadHeaderLengthError),
    ("HeaderLen len+1", raw(header_len=16, payload=b"1234567"), None, BadHeaderLengthError),
    ("HeaderLen 255", raw(header_len=255), None, BadHeaderLengthError),
    ("CRC flag, HeaderLen 8", raw(flags=1, header_len=8), None, BadHeaderLengthError),
    ("CRC flag, HeaderLen 13", raw(flags=1, header_len=13), None, BadHeaderLengthError),
    (
        "CRC flag, only 11 bytes",
        (MAGIC + b"\x00\x0c\x01\x00\x00\x00\x00"),
        None,
        BadHeaderLengthError,
    ),
    ("CRC mismatch", raw(flags=1, crc=0xDEADBEEF), None, CrcMismatchError),
    ("CRC of empty not 0", raw(flags=1, crc=1, payload=b""), None, CrcMismatchError),
    ("type 15", raw(msg_type=15), None, UnknownMessageTypeError),
    ("type 255", raw(msg_type=255), None, UnknownMessageTypeError),
    ("Ack where Publish expected", raw(msg_type=1), MsgType.PUBLISH, UnexpectedMessageTypeError),
    ("Publish where Ack expected", raw(msg_type=0), MsgType.ACK, UnexpectedMessageTypeError),
]


@pytest.mark.parametrize(
    ("data", "expected", "error"),
    [case[1:] for case in ERROR_CASES],
    ids=[case[0] for case in ERROR_CASES],
)
def test_decode_raises_typed_error(
    data: bytes, expected: MsgType | None, error: type[EnvelopeError]
) -> None:
    with pytest.raises(error) as info:
        decode(data, expected)
    assert isinstance(info.value, EnvelopeError)
    assert isinstance(info.value, ProtocolError)
    assert isinstance(info.value, LiftbridgeError)
    assert str(info.value)  # a message a user can read


# ---------------------------------------------------------------- decode errors, in order

# Each fault breaks exactly one of decode's checks; FAULTS lists them in the spec'd order of
# the checks. Faults that touch the same field (HeaderLen) are not combined.


@dataclass(frozen=True)
class Faulty:
    """A CRC-flagged Publish of a 20-byte payload, field by field, and the type expected."""

    magic: bytes = MAGIC
    version: int = 0
    header_len: int = 12
    msg_type: int = 0
    crc: int | None = None
    truncate: int | None = None
    expected: MsgType | None = None

    def data(self) -> bytes:
        built = raw(
            magic=self.magic,
            version=self.version,
            header_len=self.header_len,
            flags=0x01,
            msg_type=self.msg_type,
            crc=self.crc,
            payload=b"p" * 20,
        )
        return built if self.truncate is None else built[: self.truncate]


Fault = tuple[str, str, Callable[[Faulty], Faulty], type[EnvelopeError]]

FAULTS: list[Fault] = [
    ("short", "length", lambda f: replace(f, truncate=7), EnvelopeTooShortError),
    ("magic", "magic", lambda f: replace(f, magic=b"LBRG"), BadMagicError),
    ("version", "version", lambda f: replace(f, version=3), UnsupportedVersionError),
    ("hl<8", "header_len", lambda f: replace(f, header_len=5), BadHeaderLengthError),
    ("hl>len", "header_len", lambda f: replace(f, header_len=200), BadHeaderLengthError),
    ("crc layout", "header_len", lambda f: replace(f, header_len=14), BadHeaderLengthError),
    ("crc value", "crc", lambda f: replace(f, crc=0x12345678), CrcMismatchError),
    ("unknown type", "msg_type", lambda f: replace(f, msg_type=99), UnknownMessageTypeError),
    (
        "unexpected type",
        "expected",
        lambda f: replace(f, expected=MsgType.ACK),
        UnexpectedMessageTypeError,
    ),
]


def test_unfaulted_base_is_valid() -> None:
    base = Faulty()
    assert decode(base.data(), base.expected) == Envelope(MsgType.PUBLISH, 1, b"p" * 20)


@pytest.mark.parametrize("fault", FAULTS, ids=[f[0] for f in FAULTS])
def test_each_fault_alone(fault: Fault) -> None:
    faulty = fault[2](Faulty())
    with pytest.raises(fault[3]):
        decode(faulty.data(), faulty.expected)


@pytest.mark.parametrize(
    ("first", "second"),
    [
        pytest.param(a, b, id=f"{a[0]} before {b[0]}")
        for i, a in enumerate(FAULTS)
        for b in FAULTS[i + 1 :]
        if a[1] != b[1]
    ],
)
def test_earlier_check_wins(first: Fault, second: Fault) -> None:
    for faulty in (first[2](second[2](Faulty())), second[2](first[2](Faulty()))):
        with pytest.raises(first[3]):
            decode(faulty.data(), faulty.expected)


def test_order_header_len_checked_before_crc_flag_layout() -> None:
    # HeaderLen 0 with the CRC flag: both "HeaderLen < 8" and "CRC layout" are wrong; the bounds
    # message must be the one reported (same class, so tell them apart by message).
    with pytest.raises(BadHeaderLengthError, match="outside"):
        decode(raw(flags=1, header_len=0))
    with pytest.raises(BadHeaderLengthError, match="CRC flag"):
        decode(raw(flags=1, header_len=8))


# ---------------------------------------------------------------- accepted inputs


@pytest.mark.parametrize("crc", [False, True], ids=["plain", "crc"])
@pytest.mark.parametrize("msg_type", list(MsgType), ids=[t.name for t in MsgType])
def test_round_trip_every_type(msg_type: MsgType, crc: bool) -> None:
    payload = bytes(range(256)) * 3
    data = envelope.encode(msg_type, payload, crc=crc)
    # The header, byte by byte, from the spec.
    assert data[:4] == MAGIC
    assert data[4:8] == bytes((0, 12 if crc else 8, 1 if crc else 0, msg_type.value))
    if crc:
        assert data[8:12] == be32(ref_crc32c(payload))
    assert data[12 if crc else 8 :] == payload
    env = decode(data, msg_type)
    assert env == Envelope(msg_type, 1 if crc else 0, payload)
    assert env.has_crc is crc
    assert decode(data) == env
    other = MsgType((msg_type.value + 1) % len(MsgType))
    with pytest.raises(UnexpectedMessageTypeError):
        decode(data, other)


@pytest.mark.parametrize("flags", [0x02, 0x80, 0xFE, 0x03, 0x81, 0xFF])
def test_other_flag_bits_are_ignored_and_preserved(flags: int) -> None:
    # server-facts.md: "Other flag bits are ignored." Bit 0 still means CRC.
    data = raw(flags=flags, msg_type=1, payload=b"body")
    env = decode(data, MsgType.ACK)
    assert env.flags == flags
    assert env.has_crc is bool(flags & 1)
    assert env.payload == b"body"
    if flags & 1:
        with pytest.raises(CrcMismatchError):
            decode(raw(flags=flags, crc=ref_crc32c(b"body") ^ 1, payload=b"body"))


def test_longer_header_without_crc_skips_extra_bytes() -> None:
    # Without the CRC flag any HeaderLen >= 8 is accepted; bytes up to HeaderLen are skipped.
    data = MAGIC + b"\x00\x0b\x00\x00" + b"xyz" + b"payload"
    assert decode(data) == Envelope(MsgType.PUBLISH, 0, b"payload")


@pytest.mark.parametrize(
    "data",
    [
        MAGIC + b"\x00\x08\x00\x00",
        MAGIC + b"\x00\x08\x00\x01",
        MAGIC + b"\x00\x0a\x00\x00" + b"\x00\x00",
        MAGIC + b"\x00\x0c\x01\x00" + b"\x00\x00\x00\x00",  # CRC-32C of nothing is 0
    ],
    ids=["publish", "ack", "HeaderLen 10", "crc"],
)
def test_empty_payload_is_accepted(data: bytes) -> None:
    # Deliberate: HeaderLen == len(data) is a valid, empty envelope. The server accepts it (its
    # check is len < 8) and stores an empty message; go-liftbridge rejects len <= 8. We follow
    # the server so decode is total over whatever the server itself may send (an Ack with all
    # fields at their defaults serializes to zero bytes).
    env = decode(data)
    assert env.payload == b""
    assert env.msg_type == data[7]


def test_empty_ack_payload_decodes_to_default_ack() -> None:
    assert decode_ack(MAGIC + b"\x00\x08\x00\x01") == api_pb2.Ack()
    assert envelope.encode_ack(api_pb2.Ack()) == MAGIC + b"\x00\x08\x00\x01"


# ---------------------------------------------------------------- encode_message


def test_encode_message_default_expected_offset_is_minus_one() -> None:
    data = envelope.encode_message(b"v")
    assert decode_message(data).offset == -1
    # On the wire: field 1, varint, ten bytes of two's complement -1.
    assert decode(data).payload.startswith(b"\x08" + b"\xff" * 9 + b"\x01")


@pytest.mark.parametrize("offset", [0, 1, 42, 2**63 - 1, -1])
def test_encode_message_expected_offset_lands_in_offset(offset: int) -> None:
    assert decode_message(envelope.encode_message(b"v", expected_offset=offset)).offset == offset


@pytest.mark.parametrize("crc", [False, True])
@pytest.mark.parametrize("policy", [api_pb2.LEADER, api_pb2.ALL, api_pb2.NONE])
def test_encode_message_round_trips_every_field(policy: int, crc: bool) -> None:
    headers = {"a": b"1", "empty": b"", "bin": bytes(range(256)), "ключ": "значение".encode()}
    data = envelope.encode_message(
        b"\x00value\xff",
        key=b"\x00key",
        headers=headers,
        ack_inbox="_INBOX.abc",
        correlation_id="corr-7",
        ack_policy=policy,
        expected_offset=17,
        crc=crc,
    )
    assert decode(data, MsgType.PUBLISH).has_crc is crc
    msg = decode_message(data)
    assert msg.value == b"\x00value\xff"
    assert msg.key == b"\x00key"
    assert dict(msg.headers) == headers
    assert msg.ackInbox == "_INBOX.abc"
    assert msg.correlationId == "corr-7"
    assert msg.ackPolicy == policy
    assert msg.offset == 17
    # Fields the server ignores on publish are left unset.
    assert (msg.stream, msg.partition, msg.subject, msg.replySubject, msg.timestamp) == (
        "",
        0,
        "",
        "",
        0,
    )


@pytest.mark.parametrize(
    "key",
    [
        "k" * 32767,
        "é" * 16383 + "k",  # 32767 bytes of UTF-8
    ],
    ids=["ascii", "utf8"],
)
def test_header_key_of_32767_bytes_is_accepted(key: str) -> None:
    assert len(key.encode()) == 32767
    msg = decode_message(envelope.encode_message(b"v", headers={key: b"x"}))
    assert dict(msg.headers) == {key: b"x"}


@pytest.mark.parametrize(
    "key",
    [
        "k" * 32768,
        "é" * 16384,  # only 16384 characters, but 32768 bytes: the limit is in bytes
        "k" * 100_000,
    ],
    ids=["ascii", "utf8", "huge"],
)
def test_oversized_header_key_is_rejected_before_encoding(
    key: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[object] = []
    real_encode = envelope.encode

    def spy(*args: object, **kwargs: object) -> bytes:
        calls.append(args)
        return real_encode(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(envelope, "encode", spy)
    with pytest.raises(InvalidInputError) as info:
        envelope.encode_message(b"v", headers={"ok": b"1", key: b"x"})
    assert isinstance(info.value, ValueError)
    assert calls == []
    envelope.encode_message(b"v", headers={"ok": b"1"})
    assert len(calls) == 1  # the spy does see ordinary encodes


@pytest.mark.parametrize(
    "kwargs",
    [
        {"headers": {"\ud800": b"x"}},
        {"ack_inbox": "\udc00"},
        {"correlation_id": "a\ud800b"},
        {"expected_offset": 2**63},
        {"expected_offset": -(2**63) - 1},
        {"ack_policy": 2**31},
    ],
    ids=[
        "surrogate header key",
        "surrogate inbox",
        "surrogate corr id",
        "offset>int64",
        "offset<int64",
        "policy>int32",
    ],
)
def test_unencodable_arguments_raise_invalid_input(kwargs: dict[str, object]) -> None:
    with pytest.raises(InvalidInputError):
        envelope.encode_message(b"v", **kwargs)  # type: ignore[arg-type]


# ---------------------------------------------------------------- payload decoding

BAD_PROTOBUF = [
    pytest.param(b"\xff", id="truncated varint tag"),
    pytest.param(b"\x00", id="field number 0"),
    pytest.param(b"\x1a\x05ab", id="length beyond end"),
    pytest.param(b"\x08", id="missing varint"),
    pytest.param(b"\x0f", id="invalid wire type"),
]


@pytest.mark.parametrize("crc", [False, True])
@pytest.mark.parametrize("payload", [*BAD_PROTOBUF, pytest.param(b"\x0a\x01\xff", id="bad UTF-8")])
def test_decode_ack_bad_protobuf_raises_payload_decode_error(payload: bytes, crc: bool) -> None:
    data = envelope.encode(MsgType.ACK, payload, crc=crc)
    assert decode(data).payload == payload  # the envelope itself is fine
    with pytest.raises(PayloadDecodeError) as info:
        decode_ack(data)
    assert isinstance(info.value, ProtocolError)
    assert not isinstance(info.value, EnvelopeError)


@pytest.mark.parametrize("crc", [False, True])
@pytest.mark.parametrize(
    "payload",
    [
        *BAD_PROTOBUF,
        pytest.param(b"\x3a\x01\xff", id="bad UTF-8 subject"),
        pytest.param(b"\x4a\x03\x0a\x01\xff", id="bad UTF-8 header key"),
    ],
)
def test_decode_message_bad_protobuf_raises_payload_decode_error(payload: bytes, crc: bool) -> None:
    data = envelope.encode(MsgType.PUBLISH, payload, crc=crc)
    assert decode(data).payload == payload
    with pytest.raises(PayloadDecodeError) as info:
        decode_message(data)
    assert isinstance(info.value, ProtocolError)


def test_decode_ack_and_message_check_the_type() -> None:
    with pytest.raises(UnexpectedMessageTypeError):
        decode_ack(envelope.encode_message(b"v"))
    with pytest.raises(UnexpectedMessageTypeError):
        decode_message(GOLDEN_ACK_PLAIN)
    with pytest.raises(BadMagicError):
        decode_ack(b"not an envelope")


# ---------------------------------------------------------------- properties

msg_types = st.sampled_from(list(MsgType))

# Inputs that get past the early checks often enough to reach the later ones.
near_envelopes = st.one_of(
    st.binary(max_size=40),
    st.builds(
        lambda header, rest: MAGIC + header + rest,
        st.binary(min_size=0, max_size=8),
        st.binary(max_size=40),
    ),
    st.builds(
        lambda hl, flags, t, rest: MAGIC + bytes((0, hl, flags, t)) + rest,
        st.integers(0, 30),
        st.integers(0, 255),
        st.integers(0, 20),
        st.binary(max_size=40),
    ),
)


def check_envelope_invariants(data: bytes, env: Envelope) -> None:
    """What any accepted input must look like, straight from the spec."""
    assert len(data) >= 8
    assert data[:4] == MAGIC
    assert data[4] == 0
    assert env.flags == data[6]
    assert env.msg_type == data[7]
    assert env.payload == data[data[5] :]
    if env.has_crc:
        assert data[5] == 12
        assert int.from_bytes(data[8:12], "big") == ref_crc32c(env.payload)


@given(near_envelopes, st.none() | msg_types)
@settings(max_examples=examples(600))
def test_decode_is_total(data: bytes, expected: MsgType | None) -> None:
    try:
        env = decode(data, expected)
    except EnvelopeError:
        return
    check_envelope_invariants(data, env)
    assert expected is None or env.msg_type is expected


@given(near_envelopes)
@settings(max_examples=examples(400))
def test_decode_ack_and_message_are_total(data: bytes) -> None:
    for parse, msg_type in ((decode_ack, MsgType.ACK), (decode_message, MsgType.PUBLISH)):
        try:
            parse(data)
        except ProtocolError:
            continue
        check_envelope_invariants(data, decode(data, msg_type))


@given(msg_types, st.binary(max_size=2000), st.booleans())
@settings(max_examples=examples(300))
def test_round_trip(msg_type: MsgType, payload: bytes, crc: bool) -> None:
    data = envelope.encode(msg_type, payload, crc=crc)
    assert len(data) == len(payload) + (12 if crc else 8)
    assert decode(data, msg_type) == Envelope(msg_type, 1 if crc else 0, payload)


@given(st.binary(min_size=1, max_size=500), msg_types, st.data())
@settings(max_examples=examples(300))
def test_any_single_bit_flip_in_crc_payload_is_caught(
    payload: bytes, msg_type: MsgType, data: st.DataObject
) -> None:
    encoded = bytearray(envelope.encode(msg_type, payload, crc=True))
    bit = data.draw(st.integers(12 * 8, len(encoded) * 8 - 1), label="bit")
    encoded[bit // 8] ^= 1 << (bit % 8)
    with pytest.raises(CrcMismatchError):
        decode(bytes(encoded))


@given(st.binary(max_size=200), st.integers(0, 31))
@settings(max_examples=examples(200))
def test_any_single_bit_flip_in_crc_field_is_caught(payload: bytes, bit: int) -> None:
    encoded = bytearray(envelope.encode(MsgType.PUBLISH, payload, crc=True))
    encoded[8 + bit // 8] ^= 1 << (bit % 8)
    with pytest.raises(CrcMismatchError):
        decode(bytes(encoded))


@given(st.binary(max_size=100), msg_types, st.booleans(), st.data())
@settings(max_examples=examples(300))
def test_truncation_raises_only_typed_errors(
    payload: bytes, msg_type: MsgType, crc: bool, data: st.DataObject
) -> None:
    encoded = envelope.encode(msg_type, payload, crc=crc)
    cut = data.draw(st.integers(0, len(encoded) - 1), label="cut")
    truncated = encoded[:cut]
    if cut < 8:
        with pytest.raises(EnvelopeTooShortError):
            decode(truncated)
    elif crc and cut < 12:
        with pytest.raises(BadHeaderLengthError):
            decode(truncated)
    elif not crc:  # HeaderLen 8 is still within bounds: a shorter payload, nothing more
        assert decode(truncated, msg_type) == Envelope(msg_type, 0, payload[: cut - 8])
    elif ref_crc32c(truncated[12:]) != int.from_bytes(encoded[8:12], "big"):
        with pytest.raises(CrcMismatchError):
            decode(truncated)
    else:  # a prefix with the same CRC-32C (rare, but legitimately valid)
        assert decode(truncated, msg_type).payload == truncated[12:]


@given(st.binary(max_size=100), msg_types, st.integers(0, 11), st.integers(0, 255))
@settings(max_examples=examples(600))
def test_changing_a_header_byte_of_a_crc_envelope(
    payload: bytes, msg_type: MsgType, index: int, value: int
) -> None:
    """Each header byte of a CRC envelope, set to any other value, fails its own check."""
    encoded = bytearray(envelope.encode(msg_type, payload, crc=True))
    if encoded[index] == value:
        return
    encoded[index] = value
    data = bytes(encoded)
    if index < 4:
        with pytest.raises(BadMagicError):
            decode(data)
    elif index == 4:
        with pytest.raises(UnsupportedVersionError):
            decode(data)
    elif index == 5:  # any HeaderLen but 12 is out of bounds or contradicts the CRC flag
        with pytest.raises(BadHeaderLengthError):
            decode(data)
    elif index == 6:  # flags: keep bit 0 and nothing changes; clear it and the CRC is skipped
        env = decode(data, msg_type)
        assert env == Envelope(msg_type, value, payload)
    elif index == 7:
        if value >= 15:
            with pytest.raises(UnknownMessageTypeError):
                decode(data)
        else:
            assert decode(data).msg_type == value
            with pytest.raises(UnexpectedMessageTypeError):
                decode(data, msg_type)
    else:
        with pytest.raises(CrcMismatchError):
            decode(data)


@pytest.mark.parametrize("size", [1, 127, 128, 255, 16383, 16384, 2**21 + 3])
@pytest.mark.parametrize("ack_policy", [api_pb2.LEADER, api_pb2.ALL, api_pb2.NONE])
@pytest.mark.parametrize("ack_inbox", ["", "_INBOX.abc", "_INBOX." + "é" * 100])
def test_encode_message_fast_path_matches_protobuf_serialization(
    size: int, ack_policy: int, ack_inbox: str
) -> None:
    value = bytes(i % 251 for i in range(size))
    cid = "ü" * (size % 150 + 1)
    expected = api_pb2.Message(
        offset=-1,
        value=value,
        ackInbox=ack_inbox,
        correlationId=cid,
        ackPolicy=ack_policy,  # type: ignore[arg-type]
    ).SerializeToString()
    for crc in (False, True):
        data = envelope.encode_message(
            value, ack_inbox=ack_inbox, correlation_id=cid, ack_policy=ack_policy, crc=crc
        )
        assert data == envelope.encode(envelope.MsgType.PUBLISH, expected, crc=crc)


def test_encode_message_inbox_and_size_caches_give_protobufs_bytes() -> None:
    # More inboxes than the cache keeps (it starts over), each encoded twice (a hit).
    for i in range(70):
        inbox, value = f"_INBOX.{i}", b"v" * (100 + i)
        expected = api_pb2.Message(
            offset=-1, value=value, ackInbox=inbox, correlationId="c"
        ).SerializeToString()
        for _ in range(2):
            data = envelope.encode_message(value, ack_inbox=inbox, correlation_id="c")
            assert data == envelope.encode(envelope.MsgType.PUBLISH, expected)


@given(
    st.binary(max_size=300),
    st.sampled_from(["", "_INBOX.abc", "_INBOX.é"]),
    st.text(max_size=140),
    st.sampled_from([api_pb2.LEADER, api_pb2.ALL, api_pb2.NONE]),
    st.binary(max_size=300),
)
def test_encode_message_plain_equals_encode_message(
    value: bytes, ack_inbox: str, cid: str, ack_policy: int, key: bytes
) -> None:
    try:
        expected = envelope.encode_message(
            value, key=key, ack_inbox=ack_inbox, correlation_id=cid, ack_policy=ack_policy
        )
    except InvalidInputError:  # e.g. a lone surrogate: refused the same way
        with pytest.raises(InvalidInputError):
            envelope.encode_message_plain(value, ack_inbox, cid, ack_policy, key)
        return
    for _ in range(2):  # the second time with the inbox cached
        assert envelope.encode_message_plain(value, ack_inbox, cid, ack_policy, key) == expected
