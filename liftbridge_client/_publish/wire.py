"""PublishAsync's hot wire shapes, without building protobuf messages.

The request: the gRPC message of a plain PublishRequest, without building the
protobuf message.

Building ``api_pb2.PublishRequest`` and serializing it costs more per publish
than the rest of the gRPC publish hot path; a request with no offset check (at
most a key and plain headers, which come encoded by `envelope.plain_header_entries`)
is a handful of fields in a fixed order, so it is joined from cached pieces instead,
behind the 5-byte gRPC message head (so the h2 stream writes it as it is). The bytes
are exactly protobuf's (property-tested against ``SerializeToString``; map entries in
its deterministic order), and anything out of the plain case returns None for the
caller to build the message.

The response: `plain_ack` picks the correlation id and the encoded Ack out of
the common PublishResponse (an ack without error, naming its publish), which is
all the dispatcher needs; anything else returns None for protobuf to decode.

The publisher calls `publish_request` and `answer_ack`: these two, or their C twins
when the accelerator is built (liftbridge_client/_native.py).
"""

from __future__ import annotations

import struct

from liftbridge_client._native import speedups
from liftbridge_client.envelope import _varint as varint
from liftbridge_client.models import Ack, ack_from_wire

__all__ = ["answer_ack", "plain_ack", "plain_answer", "plain_publish_request", "publish_request"]

# Fields 8 (ackPolicy; 0, LEADER, is omitted) and 9 (expectedOffset = -1: the publisher
# always sends it without a check), the request's last bytes, by ack policy.
_NO_OFFSET_CHECK = b"\x48" + b"\xff" * 9 + b"\x01"
_TAILS = {0: _NO_OFFSET_CHECK, 1: b"\x40\x01" + _NO_OFFSET_CHECK, 2: b"\x40\x02" + _NO_OFFSET_CHECK}
# Field 4 (partition; 0 is omitted) for partitions below 128 (a one-byte varint).
_PARTITIONS = [b""] + [b"\x20" + bytes((p,)) for p in range(1, 0x80)]
_STREAM_FIELDS: dict[str, bytes] = {}  # field 3 by stream name
_STREAM_FIELDS_MAX = 1024  # the cache starts over beyond this many streams
_head = struct.Struct(">BI").pack  # gRPC: not compressed, then the length


def plain_publish_request(
    value: bytes,
    stream: str,
    partition: int,
    correlation_id: str,
    ack_policy: int,
    key: bytes = b"",
    header_entries: bytes = b"",
) -> bytes | None:
    """The gRPC message (head, then the bytes) of ``PublishRequest(key=, value=, stream=,
    partition=, headers=, correlationId=, ackPolicy=, expectedOffset=-1)``, or None
    outside the plain case. ``header_entries``: field 5 as `envelope.plain_header_entries`
    encodes the headers (b"": none)."""
    tail = _TAILS.get(ack_policy)
    if tail is None or not (value and stream and correlation_id) or not 0 <= partition < 0x80:
        return None
    stream_field = _STREAM_FIELDS.get(stream)
    if stream_field is None:
        name = stream.encode()
        stream_field = b"\x1a" + varint(len(name)) + name
        if len(_STREAM_FIELDS) >= _STREAM_FIELDS_MAX:
            _STREAM_FIELDS.clear()
        _STREAM_FIELDS[stream] = stream_field
    cid = correlation_id.encode()
    body = b"".join(
        (
            b"\x0a" + varint(len(key)) + key if key else b"",  # field 1, before the value
            b"\x12",
            varint(len(value)),
            value,
            stream_field,
            _PARTITIONS[partition],
            header_entries,  # field 5
            b"\x3a",
            varint(len(cid)),
            cid,
            tail,
        )
    )
    return _head(0, len(body)) + body


def plain_ack(response: bytes) -> tuple[str, bytes] | None:
    """``(correlationId, encoded ack)`` of the common PublishResponse, else None.

    Common means: exactly field 1 (the ack) then field 3 (a correlation id under 128
    bytes), the ack naming the same id (its field 6), and no 0x50 byte after that
    field in the ack. 0x50 is the tag of Ack.ackError (field 10); the fields between
    (7 to 9) are varints whose last byte is far from 0x50 for any real policy or
    timestamp. Protobuf encoders write fields in field-number order, as the server's
    does, so an error ack always shows the tag there; the ack's earlier strings (the
    server's ack inbox, say) may hold any byte and are not searched. None for
    anything else (an asyncError, an error ack, other shapes): decode it fully.
    """
    size = len(response)
    if size < 4 or response[0] != 0x0A:
        return None
    length = response[1]
    start = 2
    if length >= 0x80:  # a two-byte length: an ack of 128 bytes to 16 KiB
        if response[2] >= 0x80:
            return None
        length = (length & 0x7F) | (response[2] << 7)
        start = 3
    end = start + length
    if end + 2 > size or response[end] != 0x1A:
        return None
    cid_size = response[end + 1]
    if not 0 < cid_size < 0x80 or end + 2 + cid_size != size:
        return None
    cid = response[end + 2 :]
    at = response.find(cid, start, end)
    if (
        at < start + 2
        or response[at - 2] != 0x32
        or response[at - 1] != cid_size
        or response.find(b"\x50", at + cid_size, end) >= 0
    ):
        return None
    try:
        text = cid.decode()
    except UnicodeDecodeError:
        return None
    return text, response[start:end]


def plain_answer(response: bytes, ack_class: type[Ack]) -> tuple[str, Ack] | None:
    """``(correlationId, Ack)`` of the common PublishResponse (`plain_ack`), else None;
    the Ack is decoded when a field is first read. ``ack_class`` is `Ack` (the C twin
    makes its instances directly and takes it as an argument)."""
    plain = plain_ack(response)
    return None if plain is None else (plain[0], ack_from_wire(plain[1]))


# What the publisher calls: the C twins (liftbridge_client/_speedups.c) when they are built.
# The same results; the answer's twin checks every byte where plain_ack looks at the
# telling ones (and reads the ack's offset), and the request's also encodes partitions
# from 128 up.
publish_request = plain_publish_request if speedups is None else speedups.publish_request
answer_ack = plain_answer if speedups is None else speedups.plain_response
